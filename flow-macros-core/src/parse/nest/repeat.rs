//! `[name =] Loop(options) { body } until (test)` and `Loop(options) while (test) { body }`.

use proc_macro2::{Delimiter, TokenTree};
use quote::ToTokens;
use syn::spanned::Spanned;
use syn::{Expr, Ident, Token};

use super::{body, choice, count, unknown};
use crate::ctxt::Ctxt;
use crate::parse::ast::{Loop, NestStep, Opt, OptValue, What};
use crate::parse::options::{after_list, duplicates};
use crate::parse::tokens::{group, parse_within};

const PREV: &str =
    "`prev` takes the name that binds the previous iteration's output, as in `prev = last`";

const LOOP_UNTIL: &str = "`Loop(max = 10) { steps => output } until (test)`";
const LOOP_WHILE: &str = "`Loop(max = 10, prev = last) while (test) { steps => output }`";

/// Parses the rest of a `Loop` step after its keyword.
pub fn repeat(
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
    // Options that do not parse are one error; a `max` missing from them is not another.
    let (options, parsed) = match parse_within(
        syn::punctuated::Punctuated::<Opt, Token![,]>::parse_terminated,
        head.stream(),
        head.span_close(),
    ) {
        Ok(options) => (options.into_iter().collect::<Vec<_>>(), true),
        Err(e) => {
            cx.push(e);
            (Vec::new(), false)
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
            "after" => after_list(opt, &mut out.after, cx),
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
    if !has_max && parsed {
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
