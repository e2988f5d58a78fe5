//! Steps: a block's body split at its top-level commas, each piece parsed on its own, so one
//! malformed step does not hide the errors of the others. A step is `[name =] Kind ..` or
//! `'label: step`; its kind's parser reads the rest.

use proc_macro2::{TokenStream, TokenTree};
use syn::Ident;
use syn::Token;
use syn::parse::ParseStream;

use super::ast::{GateStep, Step};
use super::blocks::{block, conditional, has_min, patched};
use super::calls::{cancel, operation, terminate};
use super::nest::{complete, nest};
use super::pick::pick;
use super::signals::{delay, signal};
use super::tokens::{last_span, parse_within, split_commas};
use crate::ctxt::Ctxt;
use crate::suggest::did_you_mean;

/// Every kind of step, for messages.
pub const STEP_KINDS: &str = "`Operation`, `Sequential`, `Parallel`, `Conditional`, `Patched`, `Race`, `Pick`, `Signal`, `Delay`, `ForEach`, `Loop`, `Workflow`, `Cancel`, `Complete` or `Terminate`";

/// Splits a block's tokens at top-level commas and parses each piece as a step.
pub fn steps(tokens: TokenStream, cx: &mut Ctxt) -> Vec<Step> {
    let mut out = Vec::new();
    for (chunk, comma) in split_commas(tokens) {
        if chunk.is_empty() {
            cx.error(comma, "expected a step before this comma");
            out.push(Step::Invalid);
            continue;
        }
        out.push(step(chunk, cx).unwrap_or(Step::Invalid));
    }
    out
}

/// Parses one step: the tokens between two commas.
pub fn step(chunk: Vec<TokenTree>, cx: &mut Ctxt) -> Option<Step> {
    if let Some(TokenTree::Punct(quote)) = chunk.first()
        && quote.as_char() == '\''
    {
        return labelled(chunk, cx);
    }
    let mut trees = chunk.into_iter().peekable();
    let first = trees.next()?;
    // `name = Kind(..)`?
    let (name, keyword) = match (&first, trees.peek()) {
        (TokenTree::Ident(name), Some(TokenTree::Punct(eq))) if eq.as_char() == '=' => {
            let name = name.clone();
            trees.next();
            match trees.next() {
                Some(TokenTree::Ident(kw)) => (Some(name), kw),
                Some(other) => {
                    cx.error(
                        other.span(),
                        format!("expected a step after `{name} =`: one of {STEP_KINDS}"),
                    );
                    return None;
                }
                None => {
                    cx.error(
                        name.span(),
                        format!(
                            "expected a step after `{name} =`, as in `{name} = Operation(call())`"
                        ),
                    );
                    return None;
                }
            }
        }
        (TokenTree::Ident(kw), _) => (None, kw.clone()),
        (other, _) => {
            cx.error(
                other.span(),
                format!("expected a step: one of {STEP_KINDS}"),
            );
            return None;
        }
    };
    let name = name.and_then(|name| step_name(name, cx));
    let rest: Vec<TokenTree> = trees.collect();
    let kind = keyword.to_string();
    // A `Race` or a `Parallel(min = k)` may be named: the name binds its winners; a `Signal`
    // or a `Delay` like an operation.
    if !matches!(
        kind.as_str(),
        "Operation" | "Race" | "Parallel" | "Signal" | "Delay" | "ForEach" | "Loop" | "Workflow"
    ) && let Some(name) = &name
    {
        cx.error(
            name.span(),
            format!("only an `Operation`, a `Signal`, a `Delay`, a `ForEach`, a `Loop`, a `Workflow`, a `Race` or a `Parallel(min = k)` can be named, not a `{kind}` block; name the operations inside it"),
        );
    }
    match kind.as_str() {
        "Operation" => operation(name, keyword, rest, cx).map(Step::Operation),
        "Race" => {
            let block = block(keyword.clone(), rest, cx)?;
            Some(Step::Gate(GateStep {
                name,
                keyword,
                race: true,
                block,
            }))
        }
        "Parallel" if name.is_some() || has_min(&rest) => {
            let block = block(keyword.clone(), rest, cx)?;
            if !block.options.iter().any(|o| o.key == "min")
                && let Some(name) = &name
            {
                cx.error(
                    name.span(),
                    "only an `Operation`, a `Signal`, a `Delay`, a `Race` or a `Parallel(min = k)` can be named, not a `Parallel` block without `min`; name the operations inside it",
                );
            }
            Some(Step::Gate(GateStep {
                name,
                keyword,
                race: false,
                block,
            }))
        }
        "Sequential" | "Parallel" => {
            let block = block(keyword, rest, cx)?;
            Some(if kind == "Sequential" {
                Step::Sequential(block)
            } else {
                Step::Parallel(block)
            })
        }
        "Conditional" => conditional(keyword, rest, cx).map(Step::Conditional),
        "Patched" => patched(keyword, rest, cx).map(Step::Conditional),
        "Signal" => signal(name, keyword, rest, cx).map(Step::Signal),
        "Delay" => delay(name, keyword, rest, cx).map(Step::Delay),
        "Pick" => pick(keyword, rest, cx).map(Step::Pick),
        "ForEach" | "Loop" | "Workflow" => {
            nest(name, keyword, rest, cx).map(|nest| Step::Nest(std::rc::Rc::new(nest)))
        }
        "Complete" => complete(keyword, rest, cx).map(Step::Complete),
        "Cancel" => cancel(keyword, rest, cx).map(Step::Cancel),
        "Terminate" => terminate(keyword, rest, cx).map(Step::Terminate),
        other => {
            let lower = other.to_ascii_lowercase();
            // Short forms users bring from other languages, then the closest keyword.
            let hint = match lower.as_str() {
                "op" => "; did you mean `Operation`?".to_string(),
                "sequence" | "seq" => "; did you mean `Sequential`?".to_string(),
                "par" => "; did you mean `Parallel`?".to_string(),
                "if" | "cond" => "; did you mean `Conditional`?".to_string(),
                _ => did_you_mean(
                    other,
                    [
                        "Operation",
                        "Sequential",
                        "Parallel",
                        "Conditional",
                        "Race",
                        "Signal",
                        "Delay",
                        "Pick",
                        "ForEach",
                        "Loop",
                        "Workflow",
                        "Cancel",
                        "Complete",
                        "Terminate",
                    ],
                ),
            };
            let message = if hint.is_empty() {
                format!("unknown step `{other}`: expected {STEP_KINDS}")
            } else {
                format!("unknown step `{other}`{hint}")
            };
            cx.error(keyword.span(), message);
            None
        }
    }
}

/// A step's name binds the step's output in the expressions that read it, so it must be an
/// identifier Rust can bind: not a keyword (`fn`, `match`, `self`) and not `_`. Anything else is
/// reported on the name, and the step is parsed as if it had none.
fn step_name(name: Ident, cx: &mut Ctxt) -> Option<Ident> {
    // `Ident`'s parser refuses exactly the words that cannot be a binding.
    if syn::parse2::<Ident>(quote::ToTokens::to_token_stream(&name)).is_ok() {
        return Some(name);
    }
    let text = name.to_string();
    let message = match text.as_str() {
        "_" => "`_` cannot name a step; remove `_ =` to leave the step unnamed, or give it a name"
            .to_string(),
        // The four keywords a raw identifier cannot spell.
        "self" | "Self" | "super" | "crate" => format!(
            "`{text}` is a Rust keyword and cannot name a step, not even as a raw identifier; choose another name"
        ),
        _ => format!(
            "`{text}` is a Rust keyword and cannot name a step; choose another name, or write the raw identifier `r#{text}`"
        ),
    };
    cx.error(name.span(), message);
    None
}

/// `'label: step`: the label (Rust's loop-label syntax), then the step it names.
fn labelled(chunk: Vec<TokenTree>, cx: &mut Ctxt) -> Option<Step> {
    let tokens: TokenStream = chunk.iter().cloned().collect();
    let end = last_span(&tokens);
    let parser = |input: ParseStream| -> syn::Result<(syn::Lifetime, TokenStream)> {
        let label: syn::Lifetime = input.parse()?;
        if !input.peek(Token![:]) || input.peek(Token![::]) {
            return Err(syn::Error::new(
                label.span(),
                format!(
                    "expected `{label}: ` and a step after the label, as in `{label}: Sequential {{ .. }}`"
                ),
            ));
        }
        input.parse::<Token![:]>()?;
        Ok((label, input.parse()?))
    };
    let (label, rest) = match parse_within(parser, tokens, end) {
        Ok(parsed) => parsed,
        Err(e) => {
            cx.push(e);
            return None;
        }
    };
    let rest: Vec<TokenTree> = rest.into_iter().collect();
    if rest.is_empty() {
        cx.error(
            label.span(),
            format!("expected a step after `{label}:`, as in `{label}: Sequential {{ .. }}`"),
        );
        return None;
    }
    if let Some(TokenTree::Punct(quote)) = rest.first()
        && quote.as_char() == '\''
    {
        cx.error(quote.span(), "a step takes one label; remove one of them");
        return None;
    }
    let inner = step(rest, cx)?;
    Some(Step::Labelled(label, Box::new(inner)))
}
