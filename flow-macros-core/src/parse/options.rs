//! Step options: `key = value` parsed into a config per kind of step (an `Operation`, a
//! `Parallel`, a gate block, a `Sequential`). Each value is checked and kept with its span;
//! duplicate and unknown keys are rejected, with "did you mean" when a valid key is close.

use proc_macro2::Span;
use quote::ToTokens;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, Ident, LitInt, LitStr, Token, bracketed};

use super::ast::{Opt, OptValue};
use super::policy::{POLICY_KEYS, Policy};
use super::rules::{self, Rule};
use crate::ctxt::Ctxt;
use crate::suggest::did_you_mean;

impl Parse for Opt {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        // Any identifier, keywords too: `crate = path` is an option.
        let key: Ident = input
            .call(syn::ext::IdentExt::parse_any)
            .map_err(|e| syn::Error::new(e.span(), "expected an option `name = value`"))?;
        if !input.peek(Token![=]) {
            return Err(syn::Error::new(
                key.span(),
                format!("expected `{key} = value`"),
            ));
        }
        input.parse::<Token![=]>()?;
        let value = if input.peek(syn::token::Bracket) {
            let content;
            let bracket = bracketed!(content in input);
            let names = Punctuated::<Ident, Token![,]>::parse_terminated(&content)?;
            OptValue::Names(names.into_iter().collect(), bracket.span.join())
        } else if input.peek(LitStr) {
            OptValue::Str(input.parse()?)
        } else if input.peek(LitInt) {
            OptValue::Int(input.parse()?)
        } else {
            OptValue::Other(Box::new(input.parse()?))
        };
        Ok(Opt { key, value })
    }
}

/// `, key = value` options until the end of `input`, after a step's first argument.
pub fn options_after(input: ParseStream) -> syn::Result<Vec<Opt>> {
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

/// Options of an `Operation`.
#[derive(Default)]
pub struct OpOptions {
    /// `after = [..]`.
    pub after: Vec<Ident>,
    /// The resilience options.
    pub policy: Policy,
    /// `when = ..`, and where it is written.
    pub rule: Option<(Rule, Span)>,
    /// `exclusive = "group"`.
    pub exclusive: Option<LitStr>,
    /// `compensate = refund(&charge)`: what undoes the step when the run fails.
    pub compensate: Option<syn::Expr>,
}

/// Options of a `Parallel` block.
#[derive(Default)]
pub struct ParallelOptions {
    /// `max_concurrency = N`.
    pub max_concurrency: Option<u32>,
    /// `exclusive = "group"`.
    pub exclusive: Option<LitStr>,
}

const OPERATION_OPTIONS: &str = "`after = [name, ..]`, `when = all_done`, `exclusive = \"group\"`, `compensate = undo(..)`, `timeout = \"2s\"`, `retries = 3`, `backoff = \"100ms\"`, `jitter = true` or `deadline = \"30s\"`";

/// Reports `compensate = ..` written on a step that is not an `Operation` (`step` names it),
/// and returns whether it did.
pub fn misplaced_compensate(key: &Ident, step: &str, cx: &mut Ctxt) -> bool {
    if key != "compensate" {
        return false;
    }
    cx.error(
        key.span(),
        format!("`compensate` goes on an `Operation`, not on {step}: put it on the step whose effect it undoes, as in `Operation(charge(&order), compensate = refund(&charge))`"),
    );
    true
}

/// Reports every key given twice, on its second occurrence.
pub fn duplicates(options: &[Opt], cx: &mut Ctxt) {
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

/// `after = [a, b]`: the steps to wait for, beyond those the step reads, added to `after`.
pub fn after_list(opt: &Opt, after: &mut Vec<Ident>, cx: &mut Ctxt) {
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

/// The options of an `Operation`.
pub fn operation(options: &[Opt], cx: &mut Ctxt) -> OpOptions {
    duplicates(options, cx);
    let mut out = OpOptions::default();
    for opt in options {
        match opt.key.to_string().as_str() {
            "after" => after_list(opt, &mut out.after, cx),
            "when" => out.rule = Some((rules::when(opt, cx), opt.key.span())),
            "exclusive" => out.exclusive = rules::exclusive(opt, cx),
            "compensate" => match &opt.value {
                OptValue::Other(expr) => out.compensate = Some((**expr).clone()),
                other => cx.error(
                    other.span(),
                    "`compensate` takes the call that undoes the step, as in `compensate = refund(&charge)`",
                ),
            },
            _ if out.policy.option(opt, cx) => {}
            other => {
                let keys = ["after", "when", "exclusive", "compensate"]
                    .into_iter()
                    .chain(POLICY_KEYS);
                let message = match did_you_mean(other, keys) {
                    hint if hint.is_empty() => format!(
                        "unknown option `{other}` for an `Operation`: expected {OPERATION_OPTIONS}"
                    ),
                    hint => format!("unknown option `{other}` for an `Operation`{hint}"),
                };
                cx.error(opt.key.span(), message);
            }
        }
    }
    out
}

/// The options of a `Parallel` block without `min`.
pub fn parallel(options: &[Opt], cx: &mut Ctxt) -> ParallelOptions {
    duplicates(options, cx);
    let mut out = ParallelOptions::default();
    for opt in options {
        match opt.key.to_string().as_str() {
            "max_concurrency" => out.max_concurrency = max_concurrency(&opt.value, cx),
            "rest" => cx.error(
                opt.key.span(),
                "`rest` needs `min`: it says what happens to the branches still running once `min` of them completed, as in `Parallel(min = 2, rest = cancel)`",
            ),
            "exclusive" => out.exclusive = rules::exclusive(opt, cx),
            "when" => rules::when_on_block(opt, "Parallel", cx),
            _ if misplaced_compensate(&opt.key, "a `Parallel` block", cx) => {}
            other => {
                let hint = did_you_mean(other, ["max_concurrency", "exclusive", "min", "rest"]);
                cx.error(
                    opt.key.span(),
                    format!(
                        "unknown option `{other}` for `Parallel`{}",
                        if hint.is_empty() {
                            ": expected `max_concurrency = N` or `exclusive = \"group\"`"
                        } else {
                            &hint
                        }
                    ),
                );
            }
        }
    }
    out
}

/// The value of `max_concurrency = N` on a block.
fn max_concurrency(value: &OptValue, cx: &mut Ctxt) -> Option<u32> {
    match value {
        OptValue::Int(lit) => match lit.base10_parse::<u32>() {
            Ok(0) => cx.error(
                lit.span(),
                "`max_concurrency` must be at least 1; remove the option for no limit",
            ),
            Ok(n) => return Some(n),
            Err(_) => cx.error(
                lit.span(),
                "`max_concurrency` must be a whole number from 1 to 4294967295",
            ),
        },
        other => cx.error(
            other.span(),
            "`max_concurrency` takes a whole number, as in `max_concurrency = 4`",
        ),
    }
    None
}

/// Options of a gate block: `Race(..)` or `Parallel(min = k, ..)`.
pub struct GateOptions {
    /// How many arms must complete (1 for a race).
    pub min: u32,
    /// `rest = cancel` (the default): withdraw the other arms when the gate fires.
    pub rest_cancel: bool,
    /// `max_concurrency = N`.
    pub max_concurrency: Option<u32>,
    /// `exclusive = "group"`: the whole block is a critical section.
    pub exclusive: Option<LitStr>,
}

/// Reads a gate block's options; `arms` is its number of children, `keyword` its keyword.
pub fn gate(
    options: &[Opt],
    race: bool,
    arms: usize,
    keyword: &Ident,
    cx: &mut Ctxt,
) -> GateOptions {
    duplicates(options, cx);
    let mut out = GateOptions {
        min: 1,
        rest_cancel: true,
        max_concurrency: None,
        exclusive: None,
    };
    let mut limits = Vec::new();
    for opt in options {
        match opt.key.to_string().as_str() {
            "min" if race => cx.error(
                opt.key.span(),
                "a `Race` waits for its first branch: it takes no `min`; for k of n write `Parallel(min = k) { .. }`",
            ),
            "rest" if race => cx.error(
                opt.key.span(),
                "a `Race` always withdraws its losers: it takes no `rest`; to let them run on write `Parallel(min = 1, rest = run) { .. }`",
            ),
            "min" => match &opt.value {
                OptValue::Int(lit) => match lit.base10_parse::<u32>() {
                    Ok(0) => cx.error(
                        lit.span(),
                        "`min` must be at least 1: the number of branches that must complete",
                    ),
                    Ok(n) if n as usize > arms => cx.error(
                        lit.span(),
                        format!(
                            "`min = {n}` is more than the {arms} branch{} of this `Parallel`; lower `min` or add branches",
                            if arms == 1 { "" } else { "es" }
                        ),
                    ),
                    Ok(n) => out.min = n,
                    Err(_) => cx.error(
                        lit.span(),
                        "`min` must be a whole number from 1 to the number of branches",
                    ),
                },
                other => cx.error(
                    other.span(),
                    "`min` takes a whole number, as in `min = 2`",
                ),
            },
            "rest" => match &opt.value {
                OptValue::Other(expr) => match &**expr {
                    Expr::Path(path) if path.path.is_ident("cancel") => out.rest_cancel = true,
                    Expr::Path(path) if path.path.is_ident("run") => out.rest_cancel = false,
                    other => {
                        let text = other.to_token_stream().to_string();
                        let hint = match did_you_mean(&text, ["cancel", "run"]) {
                            hint if hint.is_empty() => ": expected `rest = cancel` (withdraw the branches still running, the default) or `rest = run` (let them finish)".to_string(),
                            hint => hint,
                        };
                        cx.error(
                            other.span(),
                            format!("unknown `rest = {text}`{hint}"),
                        );
                    }
                },
                other => cx.error(
                    other.span(),
                    "`rest` takes `cancel` or `run`, as in `rest = cancel`",
                ),
            },
            "max_concurrency" => {
                limits.push(opt);
            }
            "exclusive" => out.exclusive = rules::exclusive(opt, cx),
            "when" => rules::when_on_block(opt, &keyword.to_string(), cx),
            _ if misplaced_compensate(&opt.key, &format!("a `{keyword}` block"), cx) => {}
            other => {
                let known: &[&str] = if race {
                    &["max_concurrency", "exclusive"]
                } else {
                    &["max_concurrency", "min", "rest", "exclusive"]
                };
                let hint = did_you_mean(other, known.iter().copied());
                cx.error(
                    opt.key.span(),
                    format!(
                        "unknown option `{other}` for `{keyword}`{}",
                        if hint.is_empty() {
                            if race {
                                ": expected `max_concurrency = N` or `exclusive = \"group\"`"
                            } else {
                                ": expected `min = k`, `rest = cancel | run`, `max_concurrency = N` or `exclusive = \"group\"`"
                            }
                        } else {
                            &hint
                        }
                    ),
                );
            }
        }
    }
    for opt in limits {
        out.max_concurrency = max_concurrency(&opt.value, cx);
    }
    out
}

/// Options of a `Sequential` block: `exclusive = "group"`, if given.
pub fn sequential(options: &[Opt], cx: &mut Ctxt) -> Option<LitStr> {
    duplicates(options, cx);
    let mut exclusive = None;
    for opt in options {
        match opt.key.to_string().as_str() {
            "exclusive" => exclusive = rules::exclusive(opt, cx),
            "when" => rules::when_on_block(opt, "Sequential", cx),
            _ if misplaced_compensate(&opt.key, "a `Sequential` block", cx) => {}
            other => cx.error(
                opt.key.span(),
                format!(
                    "unknown option `{other}` for `Sequential`{}",
                    match did_you_mean(other, ["exclusive"]) {
                        _ if other == "max_concurrency" => "; `max_concurrency` limits a `Parallel` block, and `Sequential` takes only `exclusive = \"group\"`".to_string(),
                        hint if hint.is_empty() =>
                            ": it takes only `exclusive = \"group\"`".to_string(),
                        hint => hint,
                    }
                ),
            ),
        }
    }
    exclusive
}
