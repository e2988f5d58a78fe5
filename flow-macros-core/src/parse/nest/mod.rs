//! The syntax of nests: `ForEach`, `Loop` and sub-workflow steps (`Workflow(Child(..))`), and
//! `Complete`. A `ForEach`'s or a `Loop`'s body is parsed as a workflow of its own.
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

mod for_each;
mod repeat;
mod workflow;

pub use workflow::complete;

use proc_macro2::TokenTree;
use quote::ToTokens;
use syn::{Expr, Ident};

use super::ast::{NestStep, Opt, OptValue, Workflow};
use super::options::misplaced_compensate;
use super::steps::steps;
use super::tokens::{last_span, parse_within, split_output};
use crate::ctxt::Ctxt;
use crate::suggest::did_you_mean;

/// Parses the rest of a `ForEach`, `Loop` or `Workflow` step after its keyword.
pub fn nest(
    name: Option<Ident>,
    keyword: Ident,
    rest: Vec<TokenTree>,
    cx: &mut Ctxt,
) -> Option<NestStep> {
    match keyword.to_string().as_str() {
        "ForEach" => for_each::for_each(name, keyword, rest, cx),
        "Loop" => repeat::repeat(name, keyword, rest, cx),
        _ => workflow::workflow_step(name, keyword, rest, cx),
    }
}

/// A body's steps and output, as a workflow of its own.
fn body(keyword: &Ident, group: &proc_macro2::Group, cx: &mut Ctxt) -> Workflow {
    let (step_tokens, output) = split_output(group.stream());
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
            let end = last_span(&tokens);
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
    let steps = steps(step_tokens, cx);
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
        continue_as_new: None,
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

/// An unknown option of a nest step, with the closest known one or the list of them.
fn unknown(opt: &Opt, step: &str, known: &[&str], expected: &str, cx: &mut Ctxt) {
    if misplaced_compensate(&opt.key, &format!("a `{step}` step"), cx) {
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
