//! `[name =] Workflow(Child(args), options)`, a step that runs another workflow, and
//! `Complete(name)`.

use proc_macro2::TokenTree;
use quote::ToTokens;
use syn::parse::ParseStream;
use syn::spanned::Spanned;
use syn::{Expr, Ident};

use super::unknown;
use crate::ctxt::Ctxt;
use crate::parse::ast::{CompleteStep, NestStep, Opt, SubWorkflow, What};
use crate::parse::options::{after_list, duplicates, options_after};
use crate::parse::tokens::{call_args, parse_within};

const WORKFLOW: &str =
    "`Workflow(Payment(ctx, &order))`: the child workflow's type and the arguments of its `run`";

/// Parses the rest of a sub-workflow step (`Workflow(..)`) after its keyword.
pub fn workflow_step(
    name: Option<Ident>,
    keyword: Ident,
    rest: Vec<TokenTree>,
    cx: &mut Ctxt,
) -> Option<NestStep> {
    let args = call_args(
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
            "after" => after_list(opt, &mut after, cx),
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
    let args = call_args(&keyword, &rest, EXPECTED, EXPECTED, cx)?;
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
