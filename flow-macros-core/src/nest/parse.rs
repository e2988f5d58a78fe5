//! The syntax of `ForEach`, `Loop`, `Workflow(..)` and `Complete`, and the options of each.

use proc_macro2::{Delimiter, TokenTree};
use quote::ToTokens;
use syn::parse::ParseStream;
use syn::spanned::Spanned;
use syn::{Expr, Ident, Token};

use super::{CompleteStep, ForEach, Loop, NestStep, SubWorkflow, What};
use crate::ctxt::Ctxt;
use crate::parse::{self, Opt, OptValue, Workflow, parse_within};
use crate::suggest::did_you_mean;

/// Parses the rest of a `ForEach`, `Loop` or `Workflow` step after its keyword.
pub fn nest(
    name: Option<Ident>,
    keyword: Ident,
    rest: Vec<TokenTree>,
    cx: &mut Ctxt,
) -> Option<NestStep> {
    match keyword.to_string().as_str() {
        "ForEach" => for_each(name, keyword, rest, cx),
        "Loop" => repeat(name, keyword, rest, cx),
        _ => workflow_step(name, keyword, rest, cx),
    }
}

fn group(tree: Option<&TokenTree>, delimiter: Delimiter) -> Option<&proc_macro2::Group> {
    match tree {
        Some(TokenTree::Group(g)) if g.delimiter() == delimiter => Some(g),
        _ => None,
    }
}

syn::custom_keyword!(stream);

const FOR_EACH: &str = "`ForEach(item in items) { steps => output }`";

fn for_each(
    name: Option<Ident>,
    keyword: Ident,
    rest: Vec<TokenTree>,
    cx: &mut Ctxt,
) -> Option<NestStep> {
    let Some(head) = group(rest.first(), Delimiter::Parenthesis) else {
        cx.error(
            keyword.span(),
            format!("expected {FOR_EACH}: the item and what it iterates in parentheses"),
        );
        return None;
    };
    let parser = |input: ParseStream| -> syn::Result<(Ident, bool, Expr, Vec<Opt>)> {
        let item: Ident = input.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                format!("expected the item's name, as in {FOR_EACH}"),
            )
        })?;
        if !input.peek(Token![in]) {
            return Err(input.error(format!(
                "expected `in` after the item's name, as in {FOR_EACH}"
            )));
        }
        input.parse::<Token![in]>()?;
        // `stream` marks the stream form when an expression follows it; alone (or followed by
        // `.`, `(`, `,` ..) it is an expression that happens to be called `stream`.
        let stream = input.peek(stream)
            && !input.peek2(Token![,])
            && !input.peek2(Token![.])
            && !input.peek2(Token![?])
            && !input.peek2(syn::token::Paren)
            && !input.peek2(syn::token::Bracket)
            && !input.peek2(Token![::])
            && !input.peek2(Token![as]);
        let stream = stream && {
            let fork = input.fork();
            fork.parse::<stream>().is_ok() && !fork.is_empty()
        };
        if stream {
            input.parse::<stream>()?;
        }
        if input.is_empty() || input.peek(Token![,]) {
            return Err(input.error(format!(
                "expected what the `ForEach` iterates after `in`, as in {FOR_EACH}"
            )));
        }
        let source: Expr = input.parse()?;
        let options = options_after(input)?;
        Ok((item, stream, source, options))
    };
    let parsed = parse_within(parser, head.stream(), head.span_close());
    let body_group = group(rest.get(1), Delimiter::Brace);
    if body_group.is_none() {
        cx.error(
            head.span_close(),
            format!(
                "expected the `ForEach`'s body in braces after its parentheses, as in {FOR_EACH}"
            ),
        );
    }
    if let Some(extra) = rest.get(2) {
        cx.error(
            extra.span(),
            "unexpected tokens after `ForEach(..) { .. }`; separate steps with commas",
        );
        return None;
    }
    let (item, stream, source, options) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => {
            cx.push(e);
            return None;
        }
    };
    let body = body(&keyword, body_group?, cx);
    let what = ForEach {
        item,
        stream,
        source,
        max_concurrency: None,
        min: None,
        rest_cancel: true,
        collect: false,
        after: Vec::new(),
    };
    let what = for_each_options(what, &options, cx);
    Some(NestStep {
        name,
        keyword,
        what: What::ForEach(what),
        body: Some(body),
    })
}

/// `, key = value` options until the end of `input`.
fn options_after(input: ParseStream) -> syn::Result<Vec<Opt>> {
    let mut options = Vec::new();
    while !input.is_empty() {
        input.parse::<Token![,]>()?;
        if input.is_empty() {
            break;
        }
        options.push(input.parse::<Opt>()?);
    }
    Ok(options)
}

/// A body's steps and output, as a workflow of its own.
fn body(keyword: &Ident, group: &proc_macro2::Group, cx: &mut Ctxt) -> Workflow {
    let (steps, output) = parse::split_output(group.stream());
    let has_output = output.is_some();
    let output = match output {
        Some((arrow, tokens)) if tokens.is_empty() => {
            cx.error(
                arrow,
                format!("expected the `{keyword}`'s output expression after `=>`"),
            );
            None
        }
        Some((_, tokens)) => {
            let end = parse::last_span(&tokens);
            match parse_within(<Expr as syn::parse::Parse>::parse, tokens, end) {
                Ok(expr) => Some(expr),
                Err(e) => {
                    cx.push(e);
                    None
                }
            }
        }
        None => None,
    };
    let steps = parse::steps(steps, cx);
    if steps.is_empty() {
        cx.error(
            group.span(),
            format!("empty `{keyword}` body: give it at least one step, as in `{{ r = Operation(work()) => r.clone() }}`"),
        );
    }
    Workflow {
        attrs: Vec::new(),
        fail_fast: false,
        krate: None,
        durable: None,
        vis: syn::Visibility::Inherited,
        name: keyword.clone(),
        generics: syn::Generics::default(),
        params: Vec::new(),
        output_ty: None,
        body: steps,
        body_span: group.span(),
        output,
        has_output,
    }
}

fn duplicates(options: &[Opt], cx: &mut Ctxt) {
    for (i, opt) in options.iter().enumerate() {
        if options[..i].iter().any(|o| o.key == opt.key) {
            cx.error(
                opt.key.span(),
                format!(
                    "duplicate option `{}`: it is already given earlier in this list; keep one",
                    opt.key
                ),
            );
        }
    }
}

/// `after = [a, b]`: the steps the nest waits for, beyond those it reads.
fn after_option(opt: &Opt, after: &mut Vec<Ident>, cx: &mut Ctxt) {
    match &opt.value {
        OptValue::Names(names, span) => {
            if names.is_empty() {
                cx.error(
                    *span,
                    "`after` needs at least one node name, as in `after = [fetch]`",
                );
            }
            after.extend(names.iter().cloned());
        }
        other => cx.error(
            other.span(),
            "`after` takes a list of node names in brackets, as in `after = [one, two]`",
        ),
    }
}

/// A whole number option at least 1.
fn count(opt: &Opt, what: &str, cx: &mut Ctxt) -> Option<u32> {
    let key = &opt.key;
    match &opt.value {
        OptValue::Int(lit) => match lit.base10_parse::<u32>() {
            Ok(0) => cx.error(lit.span(), format!("`{key}` must be at least 1: {what}")),
            Ok(n) => return Some(n),
            Err(_) => cx.error(
                lit.span(),
                format!("`{key}` must be a whole number from 1 to 4294967295"),
            ),
        },
        other => cx.error(
            other.span(),
            format!("`{key}` takes a whole number, as in `{key} = 4`"),
        ),
    }
    None
}

/// `key = a | b`: which of the two words the value is.
fn choice(opt: &Opt, words: [&str; 2], meaning: &str, cx: &mut Ctxt) -> Option<bool> {
    let key = &opt.key;
    let [first, second] = words;
    let text = match &opt.value {
        OptValue::Other(expr) => match &**expr {
            Expr::Path(path) if path.path.is_ident(first) => return Some(true),
            Expr::Path(path) if path.path.is_ident(second) => return Some(false),
            other => other.to_token_stream().to_string(),
        },
        other => {
            cx.error(
                other.span(),
                format!("`{key}` takes `{first}` or `{second}`, as in `{key} = {first}`"),
            );
            return None;
        }
    };
    let hint = match did_you_mean(&text, words) {
        hint if hint.is_empty() => format!(": expected {meaning}"),
        hint => hint,
    };
    cx.error(opt.value.span(), format!("unknown `{key} = {text}`{hint}"));
    None
}

fn unknown(opt: &Opt, step: &str, known: &[&str], expected: &str, cx: &mut Ctxt) {
    if crate::options::misplaced_compensate(&opt.key, &format!("a `{step}` step"), cx) {
        return;
    }
    let other = opt.key.to_string();
    let message = match did_you_mean(&other, known.iter().copied()) {
        hint if hint.is_empty() => {
            format!("unknown option `{other}` for `{step}`: expected {expected}")
        }
        hint => format!("unknown option `{other}` for `{step}`{hint}"),
    };
    cx.error(opt.key.span(), message);
}

fn for_each_options(mut out: ForEach, options: &[Opt], cx: &mut Ctxt) -> ForEach {
    duplicates(options, cx);
    let mut rest = None;
    for opt in options {
        match opt.key.to_string().as_str() {
            "max_concurrency" => {
                out.max_concurrency = count(opt, "remove the option for no limit", cx);
            }
            "min" => {
                out.min = count(opt, "the number of instances that must complete", cx);
                if let (Some(min), Some(items)) = (out.min, known_len(&out.source))
                    && min as usize > items
                {
                    cx.error(
                        opt.value.span(),
                        format!(
                            "`min = {min}` is more than the {items} item{} this `ForEach` iterates; lower `min` or add items",
                            if items == 1 { "" } else { "s" }
                        ),
                    );
                }
            }
            "rest" => {
                rest = Some(opt.key.span());
                if let Some(cancel) = choice(
                    opt,
                    ["cancel", "run"],
                    "`rest = cancel` (withdraw the instances still running, the default) or `rest = run` (let them finish)",
                    cx,
                ) {
                    out.rest_cancel = cancel;
                }
            }
            "after" => after_option(opt, &mut out.after, cx),
            "on_failure" => {
                if let Some(fail_fast) = choice(
                    opt,
                    ["fail_fast", "collect"],
                    "`on_failure = fail_fast` (the first failed instance fails the `ForEach`, the default) or `on_failure = collect` (every instance runs; the output holds each one's result)",
                    cx,
                ) {
                    out.collect = !fail_fast;
                }
            }
            _ => unknown(
                opt,
                "ForEach",
                &["max_concurrency", "min", "rest", "on_failure", "after"],
                "`max_concurrency = N`, `min = k`, `rest = cancel | run`, `on_failure = fail_fast | collect` or `after = [name, ..]`",
                cx,
            ),
        }
    }
    if let Some(span) = rest
        && out.min.is_none()
    {
        cx.error(
            span,
            "`rest` needs `min`: it says what happens to the instances still running once `min` of them completed, as in `ForEach(x in xs, min = 2, rest = cancel)`",
        );
    }
    out
}

/// The number of items of a source whose length is written out: an array `[a, b]` or
/// `vec![a, b]`, by reference or not.
fn known_len(source: &Expr) -> Option<usize> {
    match source {
        Expr::Array(array) => Some(array.elems.len()),
        Expr::Reference(reference) => known_len(&reference.expr),
        Expr::Paren(paren) => known_len(&paren.expr),
        Expr::Macro(mac) if mac.mac.path.is_ident("vec") => {
            let parsed = mac
                .mac
                .parse_body_with(syn::punctuated::Punctuated::<Expr, Token![,]>::parse_terminated);
            // `vec![x; n]` does not parse as a list.
            parsed.ok().map(|elems| elems.len())
        }
        _ => None,
    }
}

const PREV: &str =
    "`prev` takes the name that binds the previous iteration's output, as in `prev = last`";

const LOOP_UNTIL: &str = "`Loop(max = 10) { steps => output } until (test)`";
const LOOP_WHILE: &str = "`Loop(max = 10, prev = last) while (test) { steps => output }`";

fn repeat(
    name: Option<Ident>,
    keyword: Ident,
    rest: Vec<TokenTree>,
    cx: &mut Ctxt,
) -> Option<NestStep> {
    let Some(head) = group(rest.first(), Delimiter::Parenthesis) else {
        cx.error(
            keyword.span(),
            format!(
                "expected the `Loop`'s options in parentheses, at least `max`, as in {LOOP_UNTIL} or {LOOP_WHILE}"
            ),
        );
        return None;
    };
    let options = match parse_within(
        syn::punctuated::Punctuated::<Opt, Token![,]>::parse_terminated,
        head.stream(),
        head.span_close(),
    ) {
        Ok(options) => options.into_iter().collect::<Vec<_>>(),
        Err(e) => {
            cx.push(e);
            Vec::new()
        }
    };
    // `{ body } until (test)` or `while (test) { body }`.
    let (body_group, test_keyword, test) = match (rest.get(1), rest.get(2), rest.get(3)) {
        (Some(TokenTree::Group(b)), Some(TokenTree::Ident(until)), test)
            if b.delimiter() == Delimiter::Brace && until == "until" =>
        {
            (b, until.clone(), test)
        }
        (Some(TokenTree::Ident(while_)), test, Some(TokenTree::Group(b)))
            if b.delimiter() == Delimiter::Brace && while_ == "while" =>
        {
            (b, while_.clone(), test)
        }
        (Some(TokenTree::Group(b)), None, _) if b.delimiter() == Delimiter::Brace => {
            cx.error(
                b.span_close(),
                format!(
                    "expected `until (test)` after the `Loop`'s body: a loop needs its end test, as in {LOOP_UNTIL}, or write {LOOP_WHILE}"
                ),
            );
            return None;
        }
        (other, ..) => {
            cx.error(
                other.map_or(head.span_close(), TokenTree::span),
                format!("expected {LOOP_UNTIL} or {LOOP_WHILE}"),
            );
            return None;
        }
    };
    let Some(test) = group(test, Delimiter::Parenthesis) else {
        cx.error(
            test_keyword.span(),
            format!("expected the test in parentheses after `{test_keyword}`, as in `{test_keyword} (st.ready)`"),
        );
        return None;
    };
    let while_ = test_keyword == "while";
    let extra = rest.get(4);
    if let Some(extra) = extra {
        cx.error(
            extra.span(),
            "unexpected tokens after the `Loop`; separate steps with commas",
        );
        return None;
    }
    if test.stream().is_empty() {
        cx.error(
            test.span(),
            format!(
                "expected a test inside `{test_keyword}(..)`, as in `{test_keyword} (st.ready)`"
            ),
        );
        return None;
    }
    let test_expr = parse_within(
        <Expr as syn::parse::Parse>::parse,
        test.stream(),
        test.span_close(),
    );
    let body = body(&keyword, body_group, cx);
    let test = match test_expr {
        Ok(expr) => expr,
        Err(e) => {
            cx.push(e);
            return None;
        }
    };
    duplicates(&options, cx);
    let mut out = Loop {
        max: 0,
        prev: None,
        stop_at_max: false,
        test,
        while_,
        test_keyword,
        after: Vec::new(),
    };
    let mut has_max = false;
    for opt in &options {
        match opt.key.to_string().as_str() {
            "max" => {
                has_max = true;
                if let Some(max) = count(opt, "the most iterations the loop may run", cx) {
                    out.max = max;
                }
            }
            "prev" => match &opt.value {
                OptValue::Other(expr) => match &**expr {
                    Expr::Path(p) => match p.path.get_ident() {
                        Some(prev) => {
                            // `self`, `Self`, `super` and `crate` read as paths, but bind
                            // nothing. Reported, and kept, so that the test that reads it
                            // adds no error of its own; no code is generated.
                            if syn::parse2::<Ident>(prev.to_token_stream()).is_err() {
                                cx.error(
                                    prev.span(),
                                    format!("`{prev}` is a Rust keyword and cannot name the previous iteration's output; choose another name, as in `prev = last`"),
                                );
                            }
                            out.prev = Some(prev.clone());
                        }
                        None => cx.error(p.span(), PREV),
                    },
                    other => cx.error(other.span(), PREV),
                },
                other => cx.error(other.span(), PREV),
            },
            "after" => after_option(opt, &mut out.after, cx),
            "on_max" => {
                if let Some(fail) = choice(
                    opt,
                    ["fail", "stop"],
                    "`on_max = fail` (the loop fails after `max` iterations, the default) or `on_max = stop` (its output is the last iteration's)",
                    cx,
                ) {
                    out.stop_at_max = !fail;
                }
            }
            _ => unknown(
                opt,
                "Loop",
                &["max", "prev", "on_max", "after"],
                "`max = N`, `prev = name`, `on_max = fail | stop` or `after = [name, ..]`",
                cx,
            ),
        }
    }
    if !has_max {
        cx.error(
            keyword.span(),
            "a `Loop` needs `max = N`, the most iterations it may run, as in `Loop(max = 10)`",
        );
    }
    Some(NestStep {
        name,
        keyword,
        what: What::Loop(out),
        body: Some(body),
    })
}

const WORKFLOW: &str =
    "`Workflow(Payment(ctx, &order))`: the child workflow's type and the arguments of its `run`";

fn workflow_step(
    name: Option<Ident>,
    keyword: Ident,
    rest: Vec<TokenTree>,
    cx: &mut Ctxt,
) -> Option<NestStep> {
    let args = parse::call_args(
        &keyword,
        &rest,
        &format!("expected {WORKFLOW}"),
        &format!("expected the child workflow inside `Workflow(..)`, as in {WORKFLOW}"),
        cx,
    )?;
    let parser = |input: ParseStream| -> syn::Result<(Expr, Vec<Opt>)> {
        let call: Expr = input.parse()?;
        Ok((call, options_after(input)?))
    };
    let (call, options) = match parse_within(parser, args.stream(), args.span_close()) {
        Ok(parsed) => parsed,
        Err(e) => {
            cx.push(e);
            return None;
        }
    };
    let (child, call_args) = match &call {
        Expr::Call(c) => match &*c.func {
            Expr::Path(p) if p.qself.is_none() => {
                (p.path.clone(), c.args.iter().cloned().collect())
            }
            other => {
                cx.error(other.span(), format!("expected {WORKFLOW}"));
                return None;
            }
        },
        Expr::Path(p) if p.qself.is_none() => {
            cx.error(
                p.span(),
                format!("expected the arguments of the child's `run` after its name: `{}(..)`, or `()` for none", p.to_token_stream()),
            );
            return None;
        }
        other => {
            cx.error(other.span(), format!("expected {WORKFLOW}"));
            return None;
        }
    };
    duplicates(&options, cx);
    let mut after = Vec::new();
    for opt in &options {
        match opt.key.to_string().as_str() {
            "after" => after_option(opt, &mut after, cx),
            _ => unknown(opt, "Workflow", &["after"], "`after = [name, ..]`", cx),
        }
    }
    Some(NestStep {
        name,
        keyword,
        what: What::Workflow(SubWorkflow {
            child,
            args: call_args,
            call,
            after,
        }),
        body: None,
    })
}

/// `Complete(name)`.
pub fn complete(keyword: Ident, rest: Vec<TokenTree>, cx: &mut Ctxt) -> Option<CompleteStep> {
    const EXPECTED: &str =
        "`Complete` takes the name of the `ForEach` it completes, as in `Complete(charged)`";
    let args = parse::call_args(&keyword, &rest, EXPECTED, EXPECTED, cx)?;
    match parse_within(
        |input: ParseStream| input.parse::<Ident>(),
        args.stream(),
        args.span_close(),
    ) {
        Ok(target) => Some(CompleteStep { keyword, target }),
        Err(e) => {
            cx.push(syn::Error::new(e.span(), EXPECTED));
            None
        }
    }
}
