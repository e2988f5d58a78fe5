//! Nested static graphs: `ForEach`, `Loop` and sub-workflow steps, and `Complete`.
//!
//! ```text
//! charged = ForEach(line in order.lines.iter(), max_concurrency = 64) {
//!     r = Operation(charge(ctx, line)) => r.clone()
//! },
//! export = Loop(max = 20, prev = last) { st = Operation(poll(last)) => st.clone() } until (st.ready),
//! more = Loop(max = 100, prev = last) while (last.is_none_or(|p| p.more)) { .. => .. },
//! receipt = Workflow(Payment(ctx, &order)),
//! Complete(charged),
//! ```
//!
//! A body is a workflow of its own: [`graph::build`] makes its DAG when the parent's is built,
//! and [`validate::check`] checks it with the item, `prev`, the parent's parameters and the
//! parent's nodes as its parameters. In the parent graph a nest is one node, which reads what
//! its source expression and its body read of the parent: the parent's checks see one
//! expression ([`reads`]) in which the body's names and the item are closure parameters, so
//! every name of the body stays inside it.

use std::collections::{HashMap, HashSet};

use proc_macro2::{Delimiter, Span, TokenStream, TokenTree};
use quote::{ToTokens, quote};
use syn::parse::ParseStream;
use syn::spanned::Spanned;
use syn::{Expr, Ident, Token};

use crate::ctxt::Ctxt;
use crate::graph::{Dag, Kind};
use crate::parse::{self, Opt, OptValue, Param, Workflow, parse_within};
use crate::suggest::{at_line, did_you_mean};
use crate::validate::Checked;

/// `[name =] ForEach(..) { .. }`, `[name =] Loop(..) ..` or `[name =] Workflow(Child(..))`.
pub struct NestStep {
    pub name: Option<Ident>,
    pub keyword: Ident,
    pub what: What,
    /// The body as a workflow of its own (no body for a sub-workflow step): its steps and its
    /// output; the rest of it is filled when it is checked.
    pub body: Option<Workflow>,
}

/// What kind of nest, with what only that kind has.
pub enum What {
    ForEach(ForEach),
    Loop(Loop),
    Workflow(SubWorkflow),
}

pub struct ForEach {
    pub item: Ident,
    /// `item in stream expr`.
    pub stream: bool,
    pub source: Expr,
    pub max_concurrency: Option<u32>,
    pub min: Option<u32>,
    pub rest_cancel: bool,
    pub collect: bool,
}

pub struct Loop {
    pub max: u32,
    pub prev: Option<Ident>,
    pub stop_at_max: bool,
    pub test: Expr,
    /// `while (test) { .. }`, or `{ .. } until (test)`.
    pub while_: bool,
    /// `until` or `while`, as written.
    pub test_keyword: Ident,
}

pub struct SubWorkflow {
    /// The child workflow's type, as written: `Payment`, `billing::Payment`.
    pub child: syn::Path,
    /// The arguments of its `run`.
    pub args: Vec<Expr>,
    /// `Payment(ctx, &order)`, for the node's label.
    pub call: Expr,
    pub after: Vec<Ident>,
}

/// `Complete(name)`: completes the `ForEach` `name` with the outputs of the instances that
/// completed, and withdraws the others.
pub struct CompleteStep {
    pub keyword: Ident,
    pub target: Ident,
}

impl NestStep {
    /// The kind of the nest's node.
    pub fn kind(&self) -> Kind {
        match self.what {
            What::ForEach(_) => Kind::ForEach,
            What::Loop(_) => Kind::Loop,
            What::Workflow(_) => Kind::Workflow,
        }
    }
}

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
        vis: syn::Visibility::Inherited,
        name: keyword.clone(),
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
                &["max_concurrency", "min", "rest", "on_failure"],
                "`max_concurrency = N`, `min = k`, `rest = cancel | run` or `on_failure = fail_fast | collect`",
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
                OptValue::Other(expr) if matches!(&**expr, Expr::Path(p) if p.path.get_ident().is_some()) => {
                    if let Expr::Path(p) = &**expr {
                        out.prev = p.path.get_ident().cloned();
                    }
                }
                other => cx.error(
                    other.span(),
                    "`prev` takes the name that binds the previous iteration's output, as in `prev = last`",
                ),
            },
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
                &["max", "prev", "on_max"],
                "`max = N`, `prev = name` or `on_max = fail | stop`",
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
        match (opt.key.to_string().as_str(), &opt.value) {
            ("after", OptValue::Names(names, span)) => {
                if names.is_empty() {
                    cx.error(
                        *span,
                        "`after` needs at least one node name, as in `after = [fetch]`",
                    );
                }
                after.extend(names.iter().cloned());
            }
            ("after", other) => cx.error(
                other.span(),
                "`after` takes a list of node names in brackets, as in `after = [one, two]`",
            ),
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

/// A nest node of a graph, with its step and its body's DAG (taken when the body is checked).
pub struct NestDef {
    pub node: usize,
    pub step: std::rc::Rc<NestStep>,
    pub body: Option<Dag>,
}

/// A checked nest: its body as a checked workflow (none for a sub-workflow step).
pub struct CheckedNest {
    pub node: usize,
    pub step: std::rc::Rc<NestStep>,
    pub body: Option<(Workflow, Checked)>,
}

/// `|a, b| (x, y)`, built without reparsing `x` and `y` (a `Cancel`'s target is no
/// expression).
fn closure(params: Vec<&Ident>, body: Vec<Expr>) -> Expr {
    let mut closure: syn::ExprClosure = syn::parse_quote!(|#(#params),*| ());
    closure.body = Box::new(tuple(body));
    Expr::Closure(closure)
}

fn tuple(elems: Vec<Expr>) -> Expr {
    Expr::Tuple(syn::ExprTuple {
        attrs: Vec::new(),
        paren_token: Default::default(),
        elems: elems.into_iter().collect(),
    })
}

/// What a nest node reads of its graph, as one expression for the parent's checks: the
/// source, then a closure whose parameters are the item (or `prev`) and the body's names, and
/// whose body holds every expression of the body. Names of the body are therefore bound in
/// it, and everything else it reads is the parent's.
pub fn reads(step: &NestStep, body: Option<&Dag>) -> Expr {
    let mut names: Vec<&Ident> = Vec::new();
    let mut exprs: Vec<Expr> = Vec::new();
    if let Some(body) = body {
        for node in &body.nodes {
            names.extend(node.name.as_ref());
            exprs.push(node.expr.clone());
        }
    }
    let output = step.body.as_ref().and_then(|b| b.output.clone());
    exprs.extend(output);
    match &step.what {
        What::ForEach(each) => {
            let mut params = vec![&each.item];
            params.extend(names);
            tuple(vec![each.source.clone(), closure(params, exprs)])
        }
        What::Loop(repeat) => {
            let mut params: Vec<&Ident> = repeat.prev.iter().collect();
            if repeat.while_ {
                let test = closure(params.clone(), vec![repeat.test.clone()]);
                params.extend(names);
                tuple(vec![test, closure(params, exprs)])
            } else {
                exprs.push(repeat.test.clone());
                params.extend(names);
                closure(params, exprs)
            }
        }
        What::Workflow(sub) => sub.call.clone(),
    }
}

/// The label of a nest node in the graph: `line in order.lines()`, `max = 20, until st.ready`,
/// `Payment(ctx, &order)`.
pub fn label(step: &NestStep) -> String {
    let text = crate::graph::source_text;
    match &step.what {
        What::ForEach(each) => format!(
            "{} in {}{}",
            each.item,
            if each.stream { "stream " } else { "" },
            text(&each.source)
        ),
        What::Loop(repeat) => format!(
            "max = {}, {} {}",
            repeat.max,
            repeat.test_keyword,
            text(&repeat.test)
        ),
        What::Workflow(sub) => text(&sub.call),
    }
}

fn what_name(step: &NestStep) -> &'static str {
    match step.what {
        What::ForEach(_) => "ForEach",
        What::Loop(_) => "Loop",
        What::Workflow(_) => "Workflow",
    }
}

/// Every name of a body, at any depth, with the nest node of `dag` that holds it.
pub fn inner_names(dag: &Dag) -> HashMap<String, usize> {
    fn collect(dag: &Dag, holder: Option<usize>, out: &mut HashMap<String, usize>) {
        for def in &dag.nests {
            let holder = holder.unwrap_or(def.node);
            if let Some(body) = &def.body {
                for node in &body.nodes {
                    if let Some(name) = &node.name {
                        out.entry(name.to_string()).or_insert(holder);
                    }
                }
                collect(body, Some(holder), out);
            }
        }
    }
    let mut out = HashMap::new();
    collect(dag, None, &mut out);
    out
}

/// A step of this graph (or its output) that reads a name of a nest's body: the body's names
/// are its own; the graph reads the nest's output.
pub fn check_outside_reads(
    dag: &Dag,
    readable: &HashSet<String>,
    inner: &HashMap<String, usize>,
    output: Option<&Expr>,
    cx: &mut Ctxt,
) {
    if inner.is_empty() {
        return;
    }
    let mut exprs: Vec<&Expr> = Vec::new();
    for node in &dag.nodes {
        if !matches!(node.kind, Kind::ForEach | Kind::Loop) {
            exprs.push(&node.expr);
        }
    }
    for def in &dag.nests {
        if let What::ForEach(each) = &def.step.what {
            exprs.push(&each.source);
        }
    }
    exprs.extend(output);
    for expr in exprs {
        for ident in crate::names::others(expr, readable) {
            let Some(&holder) = inner.get(&ident.to_string()) else {
                continue;
            };
            let nest = &dag.nodes[holder];
            let kind = match nest.kind {
                Kind::Loop => "Loop",
                _ => "ForEach",
            };
            let at = at_line(nest.keyword.span());
            let message = match &nest.name {
                Some(name) => format!(
                    "`{ident}` is inside the {kind} `{name}`{at}, and a body's names are its own; read the {kind}'s output `{name}`"
                ),
                None => format!(
                    "`{ident}` is inside a `{kind}`{at}, and a body's names are its own; name the {kind}, as in `results = {kind}(..)`, and read its output"
                ),
            };
            cx.error(ident.span(), message);
        }
    }
}

/// Each `Complete(name)` must name a `ForEach` of this graph that may still be running when
/// it starts.
pub fn check_completes(
    dag: &Dag,
    names: &HashMap<String, usize>,
    is_ancestor: &dyn Fn(usize, usize) -> bool,
    cx: &mut Ctxt,
) {
    for (complete, target) in &dag.completes {
        match names.get(&target.to_string()) {
            None => {
                let candidates: Vec<String> = dag
                    .nests
                    .iter()
                    .filter(|d| matches!(d.step.what, What::ForEach(_)))
                    .filter_map(|d| d.step.name.as_ref().map(Ident::to_string))
                    .collect();
                let hint = match did_you_mean(
                    &target.to_string(),
                    candidates.iter().map(String::as_str),
                ) {
                    hint if hint.is_empty() => format!(
                        "; name the `ForEach` to complete, as in `{target} = ForEach(..)`"
                    ),
                    hint => hint,
                };
                cx.error(
                    target.span(),
                    format!("`Complete` names `{target}`, which is no `ForEach` of this workflow{hint}"),
                );
            }
            Some(&node) if dag.nodes[node].kind != Kind::ForEach => {
                let what = match dag.nodes[node].kind {
                    Kind::Loop => "a `Loop`",
                    Kind::Workflow => "a sub-workflow step",
                    _ => "no `ForEach`",
                };
                cx.error(
                    target.span(),
                    format!(
                        "`Complete` completes a `ForEach` early, and `{target}`{} is {what}; to stop a step, write `Cancel({target})`",
                        at_line(dag.nodes[node].span())
                    ),
                );
            }
            Some(&node) if is_ancestor(node, *complete) => cx.error(
                target.span(),
                format!(
                    "the `ForEach` `{target}`{} has always ended before this `Complete` runs, so there is nothing left to complete; put the `Complete` beside the `ForEach`, in a `Parallel`",
                    at_line(dag.nodes[node].span())
                ),
            ),
            Some(_) => {}
        }
    }
}

/// Checks the body of every nest of `dag` as a workflow of its own, taking the bodies out of
/// `dag`. `names` are the graph's node names and `workflow` its workflow (a body's, for a
/// nest inside a body): a body reads them as parameters.
pub fn check_bodies(
    workflow: &Workflow,
    dag: &mut Dag,
    names: &HashMap<String, usize>,
    cx: &mut Ctxt,
) -> Vec<CheckedNest> {
    let mut out = Vec::new();
    let displays: Vec<String> = dag.nodes.iter().map(|n| n.display.clone()).collect();
    let spans: Vec<Span> = dag.nodes.iter().map(crate::graph::Node::span).collect();
    let idents: Vec<Option<Ident>> = dag.nodes.iter().map(|n| n.name.clone()).collect();
    for def in &mut dag.nests {
        let step = def.step.clone();
        let Some(body_dag) = def.body.take() else {
            out.push(CheckedNest {
                node: def.node,
                step,
                body: None,
            });
            continue;
        };
        let Some(body) = &step.body else { continue };
        let kind = what_name(&step);
        // The item or `prev`, then the graph's parameters and nodes.
        let binding: Option<(&Ident, &str)> = match &step.what {
            What::ForEach(each) => Some((&each.item, "the item of this `ForEach`")),
            What::Loop(repeat) => repeat
                .prev
                .as_ref()
                .map(|prev| (prev, "the previous iteration's output (`prev`)")),
            What::Workflow(_) => None,
        };
        let mut body_dag = body_dag;
        for node in &mut body_dag.nodes {
            if let Some(bad) = match node.kind {
                Kind::Signal => Some("a `Signal` step"),
                Kind::Terminate => Some("`Terminate`"),
                _ => None,
            } {
                cx.error(
                    node.keyword.span(),
                    format!("{bad} cannot be inside a `{kind}`: its body runs once per {}; put it before or after the `{kind}`", if kind == "Loop" { "iteration" } else { "item" }),
                );
            }
            let Some(name) = &node.name else { continue };
            let clash =
                if let Some((bound, what)) = binding
                    && bound == name
                {
                    Some(format!("`{name}` is already {what}"))
                } else if let Some(&outer) = names.get(&name.to_string()) {
                    Some(format!(
                        "`{name}` already names a step of the workflow{}",
                        at_line(spans[outer])
                    ))
                } else {
                    workflow.params.iter().find(|p| p.name == *name).map(|p| {
                        format!("`{name}` is already a parameter{}", at_line(p.name.span()))
                    })
                };
            if let Some(clash) = clash {
                cx.error(
                    name.span(),
                    format!("{clash}; a step inside the `{kind}` needs a name of its own"),
                );
                // Reported: the step is checked as if unnamed, so that reads of the name do
                // not add errors of their own.
                node.name = None;
            }
        }
        let body_names: HashSet<String> = body_dag
            .nodes
            .iter()
            .filter_map(|n| n.name.as_ref().map(Ident::to_string))
            .collect();
        let infer: syn::Type = syn::parse_quote!(_);
        let mut params: Vec<Param> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        let mut outer: Vec<Ident> = binding.iter().map(|(b, _)| (*b).clone()).collect();
        outer.extend(workflow.params.iter().map(|p| p.name.clone()));
        let mut parent_nodes: Vec<(&String, &usize)> = names.iter().collect();
        parent_nodes.sort_by_key(|(_, id)| **id);
        outer.extend(
            parent_nodes
                .into_iter()
                .filter_map(|(_, &id)| idents[id].clone()),
        );
        for name in outer {
            let text = name.to_string();
            if !seen.insert(text) {
                continue;
            }
            params.push(Param {
                name,
                ty: infer.clone(),
            });
        }
        let mut output = body.output.clone();
        if let What::Loop(repeat) = &step.what {
            let test = &repeat.test;
            let reads = crate::names::uses(test, &body_names);
            if repeat.while_ {
                check_while(repeat, &reads, kind, cx);
            } else {
                if reads.is_empty() {
                    cx.error(
                        test.span(),
                        "this `until` test reads no step of the loop's body, so every iteration would give it the same answer; test what an iteration computes, as in `until (st.ready)` with `st = Operation(..)` in the body",
                    );
                }
                let out: Expr = output.unwrap_or_else(|| syn::parse_quote!(()));
                let span = test.span();
                let test: Expr = syn::parse_quote_spanned!(span=> { let __flow_test: bool = #test; __flow_test });
                output = Some(tuple(vec![out, test]));
            }
        }
        let display = &displays[def.node];
        let graph_name = Ident::new(
            &display.replace('#', "_"),
            def.step
                .name
                .as_ref()
                .map_or(def.step.keyword.span(), Ident::span),
        );
        let stub = Workflow {
            attrs: Vec::new(),
            fail_fast: workflow.fail_fast,
            krate: workflow.krate.clone(),
            vis: syn::Visibility::Inherited,
            name: graph_name,
            params,
            output_ty: Some(infer.clone()),
            body: Vec::new(),
            body_span: body.body_span,
            has_output: output.is_some(),
            output,
        };
        let checked = crate::validate::check(&stub, body_dag, cx);
        out.push(CheckedNest {
            node: def.node,
            step,
            body: checked.map(|checked| (stub, checked)),
        });
    }
    out
}

/// A `while` test runs before each iteration: it must read `prev`, and cannot read the body.
fn check_while(repeat: &Loop, body_reads: &[Ident], kind: &str, cx: &mut Ctxt) {
    for ident in body_reads {
        cx.error(
            ident.span(),
            format!(
                "`{ident}` is a step of the {kind}'s body, which has not run when the `while` test runs; test the previous iteration's output (`prev`), or write `{{ .. }} until (test)`"
            ),
        );
    }
    let prev = match &repeat.prev {
        Some(prev) => prev,
        None => {
            cx.error(
                repeat.test_keyword.span(),
                "a `while` test decides from the previous iteration's output: name it with `prev`, as in `Loop(max = 10, prev = last) while (last.is_none_or(|p| p.more)) { .. }`",
            );
            return;
        }
    };
    let mut only_prev = HashSet::new();
    only_prev.insert(prev.to_string());
    if crate::names::uses(&repeat.test, &only_prev).is_empty() && body_reads.is_empty() {
        cx.error(
            repeat.test.span(),
            format!(
                "this `while` test reads nothing of `{prev}`, the previous iteration's output, so every iteration would give it the same answer; test `{prev}`, as in `while ({prev}.is_none_or(|p| p.more))`"
            ),
        );
    }
}

/// The `ForEach` node a `Complete` node names.
pub fn complete_target(checked: &Checked, complete: usize) -> Option<usize> {
    let dag = &checked.dag;
    let (_, target) = dag.completes.iter().find(|(c, _)| *c == complete)?;
    dag.nodes
        .iter()
        .position(|n| n.name.as_ref() == Some(target))
}

/// The names a nest's body is generated with: its own checked workflow, in the parent's
/// runtime crate path.
fn body_names<'a>(
    names: &crate::expand::Names<'_>,
    stub: &'a Workflow,
    checked: &'a Checked,
) -> crate::expand::Names<'a> {
    let mut pos = vec![0; checked.order.len()];
    for (p, &id) in checked.order.iter().enumerate() {
        pos[id] = p;
    }
    crate::expand::Names {
        workflow: stub,
        private: names.private.clone(),
        checked,
        pos,
    }
}

/// `Control::nests`: one `NestInfo` per nest node, in node order, each with its body's graph
/// (the child's `GRAPH` for a sub-workflow step) as a constant.
pub(crate) fn table(names: &crate::expand::Names<'_>) -> Vec<TokenStream> {
    let private = &names.private;
    let mut rows: Vec<(usize, TokenStream)> = names
        .checked
        .nests
        .iter()
        .map(|nest| {
            let at = names.pos[nest.node];
            let node = at as u32;
            let (kind, body) = match (&nest.step.what, &nest.body) {
                (What::Workflow(sub), _) => {
                    let child = &sub.child;
                    let span = child.span();
                    let body = quote::quote_spanned!(span=> &<#child as #private::Workflow>::GRAPH);
                    (quote!(Workflow), body)
                }
                (what, Some((stub, checked))) => {
                    let graph = crate::expand::graph_const(&body_names(names, stub, checked));
                    let kind = match what {
                        What::ForEach(_) => quote!(ForEach),
                        _ => quote!(Loop),
                    };
                    (
                        kind,
                        quote!({
                            const __FLOW_BODY: #private::Graph = #graph;
                            &__FLOW_BODY
                        }),
                    )
                }
                // A body with errors: no code is generated.
                (_, None) => (quote!(ForEach), quote!(&#private::Graph::__new("", &[], &[], #private::Plan::EMPTY))),
            };
            (
                at,
                quote!(#private::NestInfo { node: #node, kind: #private::NestKind::#kind, body: #body }),
            )
        })
        .collect();
    rows.sort_by_key(|(at, _)| *at);
    rows.into_iter().map(|(_, row)| row).collect()
}

/// The statements of a nest node: its output slot (when named), then `(Nest, make)`, where
/// `make` reads the node's inputs from the parent and runs the driver, whose body runs one
/// instance: the body's node statements and one `execute` of the body's graph, exactly as a
/// workflow's `__execute` does.
pub(crate) fn node_statements(names: &crate::expand::Names<'_>, id: usize) -> TokenStream {
    let checked = names.checked;
    let private = &names.private;
    let node = &checked.dag.nodes[id];
    let var = crate::expand::node_ident(names.pos[id]);
    let Some(nest) = checked.nests.iter().find(|n| n.node == id) else {
        return TokenStream::new();
    };
    let uses = &checked.uses[id];
    let reads: Vec<&Ident> = uses.iter().map(|u| &u.ident).collect();
    let inputs = uses.iter().map(|read| {
        let ident = &read.ident;
        let slot = names.slot(read.source);
        if read.optional {
            quote!(let #ident = &#slot.get();)
        } else {
            quote!(let #ident = #private::input(#slot)?;)
        }
    });
    let (slot_decl, finish) = match &node.name {
        Some(name) => {
            let slot = names.slot(id);
            let span = name.span();
            (
                quote::quote_spanned!(span=> let #slot = &#private::Slot::new();),
                quote!(#private::complete_nest(#slot, __flow_result)),
            )
        }
        None => (
            TokenStream::new(),
            quote!(#private::Result::map(__flow_result, ::core::mem::drop)),
        ),
    };
    let nest_ctx = Ident::new("__flow_nest", Span::mixed_site());
    let run = match (&nest.step.what, &nest.body) {
        (What::Workflow(sub), _) => {
            let child = &sub.child;
            let args: Vec<Expr> = sub
                .args
                .iter()
                .map(|arg| names.rewrite(arg, reads.iter().copied()))
                .collect();
            let input = match &args[..] {
                [one] => quote!(#one),
                _ => quote!((#(#args,)*)),
            };
            let span = child.span();
            quote::quote_spanned!(span=> #private::child::<#child>(#nest_ctx, #input).await)
        }
        (what, Some((stub, body_checked))) => {
            let body = body_names(names, stub, body_checked);
            let instance = instance(&body);
            match what {
                What::ForEach(each) => {
                    let source = names.rewrite(&each.source, reads.iter().copied());
                    let span = each.source.span();
                    // On the user's tokens: an error about the source points at it.
                    let private = &crate::expand::respan(private, span);
                    let (driver, source) = match (each.stream, each.collect) {
                        (false, false) => (
                            quote!(for_each),
                            quote::quote_spanned!(span=> #private::for_each_source(#source)),
                        ),
                        (false, true) => (
                            quote!(for_each_collect),
                            quote::quote_spanned!(span=> #private::for_each_source(#source)),
                        ),
                        (true, false) => (
                            quote!(for_each_stream),
                            quote::quote_spanned!(span=> #private::for_each_stream_source(#source)),
                        ),
                        (true, true) => (
                            quote!(for_each_stream_collect),
                            quote::quote_spanned!(span=> #private::for_each_stream_source(#source)),
                        ),
                    };
                    let max = each.max_concurrency.unwrap_or(0) as usize;
                    let min = each.min.unwrap_or(0) as usize;
                    let rest = each.rest_cancel;
                    let item = &each.item;
                    let config = quote!(#private::ForEachConfig { max_concurrency: #max, min: #min, rest_cancel: #rest });
                    let body = quote! {
                        move |__flow_item, __flow_opts: #private::RunOptions| async move {
                            let #item = &__flow_item;
                            #instance
                        }
                    };
                    // The driver's call on the source too: its bound on the items repeats the
                    // source's error, which rustc then shows once.
                    let call = quote::quote_spanned!(span=> #private::#driver(#nest_ctx, __flow_items, #config, #body));
                    quote! {
                        let __flow_items = #source;
                        #call.await
                    }
                }
                What::Loop(repeat) => {
                    let max = repeat.max;
                    let stop = repeat.stop_at_max;
                    let config = quote!(#private::LoopConfig { max: #max, stop_at_max: #stop });
                    let prev = repeat
                        .prev
                        .as_ref()
                        .map(|prev| quote!(let #prev = &__flow_prev.as_ref();));
                    let body = quote! {
                        move |__flow_prev, __flow_opts: #private::RunOptions| async move {
                            #prev
                            #instance
                        }
                    };
                    if repeat.while_ {
                        let mut readable: Vec<&Ident> = reads.clone();
                        readable.extend(repeat.prev.as_ref());
                        let test = names.rewrite(&repeat.test, readable);
                        let span = repeat.test.span();
                        let test = quote::quote_spanned!(span=> { let __flow_test: bool = #test; __flow_test });
                        let prev = repeat
                            .prev
                            .as_ref()
                            .map(|prev| quote!(let #prev = &__flow_prev;));
                        // The body first, so that its output type is known when the test
                        // (which comes first in the driver's call) reads `prev`.
                        quote! {
                            fn __flow_while_body<__FlowB, __FlowF, __FlowO>(body: __FlowB) -> __FlowB
                            where
                                __FlowB: ::core::ops::Fn(::core::option::Option<__FlowO>, #private::RunOptions) -> __FlowF,
                                __FlowF: #private::Future<Output = #private::Outcome<__FlowO>>,
                            {
                                body
                            }
                            let __flow_iteration = __flow_while_body(#body);
                            #private::repeat_while(
                                #nest_ctx,
                                #config,
                                move |__flow_prev| -> bool { #prev #test },
                                __flow_iteration,
                            ).await
                        }
                    } else {
                        quote!(#private::repeat_until(#nest_ctx, #config, #body).await)
                    }
                }
                What::Workflow(_) => TokenStream::new(),
            }
        }
        // A body with errors: no code is generated.
        (_, None) => return TokenStream::new(),
    };
    let body_graph = match nest.step.what {
        What::Workflow(_) => TokenStream::new(),
        _ => quote!(let __flow_body: &'static #private::Graph = #nest_ctx.body();),
    };
    // Unused bindings that let rustc suggest a node of the workflow for a misspelled name in
    // the body (`validate::Checked::hints`).
    let hints = checked.hints[id].iter().map(
        |hint| quote!(#[allow(unused_variables)] let #hint = ::core::marker::PhantomData::<()>;),
    );
    quote! {
        #slot_decl
        let #var = (#private::Nest, move |#nest_ctx: #private::NestCtx| async move {
            #(#inputs)*
            #(#hints)*
            #body_graph
            let __flow_result = { #run };
            #finish
        });
    }
}

/// One instance of a body: its nodes' statements, one `execute` of its graph with the
/// instance's options, and its output (for an `until` loop, with the test's answer).
fn instance(body: &crate::expand::Names<'_>) -> TokenStream {
    let checked = body.checked;
    let private = &body.private;
    let statements: Vec<TokenStream> = checked
        .order
        .iter()
        .map(|&id| crate::expand::node_statements(body, id))
        .collect();
    let tree = crate::expand::balanced(
        &(0..checked.order.len())
            .map(|p| {
                let node = crate::expand::node_ident(p);
                quote!(#node)
            })
            .collect::<Vec<_>>(),
    );
    let execute = if checked.order.len() <= crate::expand::INLINE_LIMIT {
        quote!(execute)
    } else {
        quote!(execute_in_arena)
    };
    let output = crate::expand::output(body);
    quote! {
        #(#statements)*
        let __flow_finished = #private::#execute(__flow_body, __flow_opts, #tree).await;
        __flow_finished.output(move || #output)
    }
}
