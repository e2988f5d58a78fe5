//! `[name =] ForEach(item in [stream] source, options) { body }`.

use proc_macro2::{Delimiter, TokenTree};
use syn::parse::ParseStream;
use syn::{Expr, Ident, Token};

use super::{body, choice, count, unknown};
use crate::ctxt::Ctxt;
use crate::parse::ast::{ForEach, NestStep, Opt, What};
use crate::parse::options::{after_list, duplicates, options_after};
use crate::parse::tokens::{group, parse_within};

syn::custom_keyword!(stream);

const FOR_EACH: &str = "`ForEach(item in items) { steps => output }`";

/// Parses the rest of a `ForEach` step after its keyword.
pub fn for_each(
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
            "after" => after_list(opt, &mut out.after, cx),
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
