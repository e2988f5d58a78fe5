//! Blocks: `Sequential` and `Parallel` (with `Race` and `Parallel(min = k)`, whose block is the
//! same), and `Conditional` with its branches.

use proc_macro2::{Delimiter, TokenTree};
use syn::Ident;
use syn::parse::Parse;
use syn::punctuated::Punctuated;
use syn::{Expr, Token};

use super::ast::{BlockStep, CondStep, Opt};
use super::steps::steps;
use super::tokens::{group, parse_within};
use crate::ctxt::Ctxt;

/// Whether a block's options (`Parallel(..)`) set `min`.
pub fn has_min(rest: &[TokenTree]) -> bool {
    group(rest.first(), Delimiter::Parenthesis).is_some_and(|g| {
        let trees: Vec<TokenTree> = g.stream().into_iter().collect();
        trees.windows(2).enumerate().any(|(i, w)| {
            matches!(&w[0], TokenTree::Ident(key) if key == "min")
                && matches!(&w[1], TokenTree::Punct(eq) if eq.as_char() == '=')
                && (i == 0 || matches!(&trees[i - 1], TokenTree::Punct(c) if c.as_char() == ','))
        })
    })
}

fn parse_options(group: &proc_macro2::Group, cx: &mut Ctxt) -> Vec<Opt> {
    let parser = Punctuated::<Opt, Token![,]>::parse_terminated;
    match parse_within(parser, group.stream(), group.span_close()) {
        Ok(opts) => opts.into_iter().collect(),
        Err(e) => {
            cx.push(e);
            Vec::new()
        }
    }
}

/// Parses the rest of a block after its keyword: `(options)` if any, then `{ steps }`.
pub fn block(keyword: Ident, rest: Vec<TokenTree>, cx: &mut Ctxt) -> Option<BlockStep> {
    let mut i = 0;
    let mut options = Vec::new();
    if let Some(g) = group(rest.first(), Delimiter::Parenthesis) {
        options = parse_options(g, cx);
        i = 1;
    }
    let Some(body) = group(rest.get(i), Delimiter::Brace) else {
        cx.error(
            keyword.span(),
            format!("expected `{keyword} {{ .. }}`: the steps of the block in braces"),
        );
        return None;
    };
    if let Some(extra) = rest.get(i + 1) {
        cx.error(
            extra.span(),
            format!("unexpected tokens after `{keyword} {{ .. }}`; separate steps with commas"),
        );
        return None;
    }
    Some(BlockStep {
        options,
        steps: steps(body.stream(), cx),
        brace: body.span(),
    })
}

/// Parses the rest of a `Conditional` after its keyword: `(test) { .. }`, then `else { .. }`.
pub fn conditional(keyword: Ident, rest: Vec<TokenTree>, cx: &mut Ctxt) -> Option<CondStep> {
    let Some(test) = group(rest.first(), Delimiter::Parenthesis) else {
        cx.error(
            keyword.span(),
            "expected `Conditional(test) { .. }`: the test in parentheses",
        );
        return None;
    };
    if test.stream().is_empty() {
        cx.error(
            test.span(),
            "expected a test inside `Conditional(..)`, as in `Conditional(risk.is_ok())`",
        );
        return None;
    }
    let test_expr = match parse_within(Expr::parse, test.stream(), test.span_close()) {
        Ok(expr) => expr,
        Err(e) => {
            cx.push(e);
            return None;
        }
    };
    let Some(then) = group(rest.get(1), Delimiter::Brace) else {
        cx.error(
            test.span(),
            "expected the branch to take in braces after `Conditional(test)`",
        );
        return None;
    };
    let otherwise = match rest.get(2) {
        None => None,
        Some(TokenTree::Ident(kw)) if kw == "else" => {
            let Some(body) = group(rest.get(3), Delimiter::Brace) else {
                cx.error(
                    kw.span(),
                    "expected the else branch in braces: `else { .. }`",
                );
                return None;
            };
            if let Some(extra) = rest.get(4) {
                cx.error(
                    extra.span(),
                    "unexpected tokens after `else { .. }`; separate steps with commas",
                );
                return None;
            }
            Some((kw.span(), steps(body.stream(), cx)))
        }
        Some(other) => {
            cx.error(
                other.span(),
                "expected `else { .. }` or a comma after the Conditional's branch",
            );
            return None;
        }
    };
    Some(CondStep {
        keyword,
        test: test_expr,
        then: steps(then.stream(), cx),
        then_brace: then.span(),
        otherwise,
        patch: None,
    })
}

/// Parses the rest of a version marker after its keyword: `("id") { new } else { old }`.
pub fn patched(keyword: Ident, mut rest: Vec<TokenTree>, cx: &mut Ctxt) -> Option<CondStep> {
    let Some(id) = group(rest.first(), Delimiter::Parenthesis) else {
        cx.error(
            keyword.span(),
            "expected `Patched(\"id\") { .. }`: the marker's id in parentheses",
        );
        return None;
    };
    let id = match syn::parse2::<syn::LitStr>(id.stream()) {
        Ok(id) => id,
        Err(_) => {
            cx.error(
                id.span(),
                "expected the marker's id as a string inside `Patched(..)`, as in `Patched(\"add-receipt\")`",
            );
            return None;
        }
    };
    let text = id.value();
    if text.is_empty()
        || !text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        cx.error(
            id.span(),
            "a `Patched` id is one or more ASCII letters, digits, `-`, `_` or `.`, as in `Patched(\"add-receipt\")`",
        );
        return None;
    }
    // The branches parse as a `Conditional`'s do; the test is the run's, not an expression.
    let mut test = proc_macro2::Group::new(Delimiter::Parenthesis, quote::quote!(true));
    test.set_span(rest[0].span());
    rest[0] = TokenTree::Group(test);
    let mut step = conditional(keyword, rest, cx)?;
    step.patch = Some(id);
    Some(step)
}
