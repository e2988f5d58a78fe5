//! The steps written as one call: `Operation(call, options)`, `Cancel(target)` and
//! `Terminate(value)`.

use proc_macro2::TokenTree;
use syn::parse::{Parse, ParseStream};
use syn::{Expr, Ident};

use super::ast::{CancelStep, CancelTarget, OpStep, Opt, TermStep};
use super::options::options_after;
use super::tokens::{call_args, parse_within};
use crate::ctxt::Ctxt;

/// `Cancel('label)` or `Cancel(name)`.
pub fn cancel(keyword: Ident, rest: Vec<TokenTree>, cx: &mut Ctxt) -> Option<CancelStep> {
    const EXPECTED: &str = "`Cancel` takes what it withdraws: the `'label` of a block or the name of a step, as in `Cancel('export)` or `Cancel(part)`";
    let args = call_args(&keyword, &rest, EXPECTED, EXPECTED, cx)?;
    let parser = |input: ParseStream| -> syn::Result<CancelTarget> {
        let target = if input.peek(syn::Lifetime) {
            CancelTarget::Label(input.parse()?)
        } else if input.peek(Ident) {
            CancelTarget::Node(input.parse()?)
        } else {
            return Err(input.error(EXPECTED));
        };
        if !input.is_empty() {
            return Err(input.error(EXPECTED));
        }
        Ok(target)
    };
    match parse_within(parser, args.stream(), args.span_close()) {
        Ok(target) => Some(CancelStep { keyword, target }),
        Err(e) => {
            cx.push(e);
            None
        }
    }
}

/// `Terminate(expr)`.
pub fn terminate(keyword: Ident, rest: Vec<TokenTree>, cx: &mut Ctxt) -> Option<TermStep> {
    const EXPECTED: &str = "expected the run's output inside `Terminate(..)`, as in `Terminate(cached.clone())`; write `Terminate(())` in a workflow without output";
    let args = call_args(&keyword, &rest, EXPECTED, EXPECTED, cx)?;
    match parse_within(Expr::parse, args.stream(), args.span_close()) {
        Ok(value) => Some(TermStep { keyword, value }),
        Err(e) => {
            cx.push(e);
            None
        }
    }
}

/// `[name =] Operation(call, options)`.
pub fn operation(
    name: Option<Ident>,
    keyword: Ident,
    rest: Vec<TokenTree>,
    cx: &mut Ctxt,
) -> Option<OpStep> {
    let args = call_args(
        &keyword,
        &rest,
        "expected `Operation(call(..))`: the async call in parentheses",
        "expected the async call inside `Operation(..)`, as in `Operation(fetch(id))`",
        cx,
    )?;
    let parser = |input: ParseStream| -> syn::Result<(Expr, Vec<Opt>)> {
        let call: Expr = input.parse()?;
        Ok((call, options_after(input)?))
    };
    match parse_within(parser, args.stream(), args.span_close()) {
        Ok((call, options)) => Some(OpStep {
            name,
            keyword,
            call,
            options,
        }),
        Err(e) => {
            cx.push(e);
            None
        }
    }
}
