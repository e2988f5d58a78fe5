//! Typed step options: each value is checked and kept with its span; duplicates are rejected.

use proc_macro2::Span;
use proc_macro2::TokenStream;
use quote::{ToTokens, quote};
use syn::spanned::Spanned;
use syn::{Expr, Ident, Lit, LitStr};

use crate::ctxt::Ctxt;
use crate::parse::{Opt, OptValue};
use crate::rules::{self, Rule};
use crate::suggest::did_you_mean;

/// Options of an `Operation`.
#[derive(Default)]
pub struct OpOptions {
    pub after: Vec<Ident>,
    pub policy: Policy,
    /// `when = ..`, and where it is written.
    pub rule: Option<(Rule, Span)>,
    /// `exclusive = "group"`.
    pub exclusive: Option<LitStr>,
    /// `compensate = refund(&charge)`: what undoes the step when the run fails.
    pub compensate: Option<syn::Expr>,
}

/// Resilience settings, shared by `Operation(..)` and `#[operation(..)]`; unset fields fall
/// back at run time (step, then operation default, then built-in default).
#[derive(Default, Clone, PartialEq, Eq)]
pub struct Policy {
    pub timeout_ms: Option<u64>,
    pub retries: Option<u32>,
    pub backoff: Option<Backoff>,
    pub jitter: Option<bool>,
    pub deadline_ms: Option<u64>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Backoff {
    Fixed(u64),
    Exponential(u64, u64),
}

/// The keys of the resilience options.
pub const POLICY_KEYS: [&str; 5] = ["timeout", "retries", "backoff", "jitter", "deadline"];

pub const POLICY_OPTIONS: &str = "`timeout = \"2s\"`, `retries = 3`, `backoff = \"100ms\"` or `backoff = exponential(\"100ms\", \"5s\")`, `jitter = true`, `deadline = \"30s\"`";

fn some<T: ToTokens>(value: Option<T>) -> TokenStream {
    match value {
        Some(v) => quote!(::core::option::Option::Some(#v)),
        None => quote!(::core::option::Option::None),
    }
}

impl Policy {
    pub fn is_empty(&self) -> bool {
        *self == Policy::default()
    }

    /// Reads one resilience option; `false` if `opt` is not one.
    pub fn option(&mut self, opt: &Opt, cx: &mut Ctxt) -> bool {
        match opt.key.to_string().as_str() {
            "timeout" => self.timeout_ms = duration(&opt.key, &opt.value, cx),
            "deadline" => self.deadline_ms = duration(&opt.key, &opt.value, cx),
            "retries" => match &opt.value {
                OptValue::Int(lit) => match lit.base10_parse::<u32>() {
                    Ok(n) => self.retries = Some(n),
                    Err(_) => cx.error(
                        lit.span(),
                        "`retries` must be a whole number from 0 to 4294967295",
                    ),
                },
                other => cx.error(
                    other.span(),
                    "`retries` takes a whole number, as in `retries = 3`",
                ),
            },
            "jitter" => match &opt.value {
                OptValue::Other(expr) => match &**expr {
                    Expr::Lit(syn::ExprLit {
                        lit: Lit::Bool(b), ..
                    }) => self.jitter = Some(b.value),
                    _ => cx.error(opt.value.span(), "`jitter` takes `true` or `false`"),
                },
                other => cx.error(other.span(), "`jitter` takes `true` or `false`"),
            },
            "backoff" => self.backoff = backoff(&opt.value, cx),
            _ => return false,
        }
        true
    }
}

impl Policy {
    /// The policy as a constant expression, naming the runtime through `private` (the path of
    /// its hidden module).
    pub fn tokens(&self, private: &TokenStream) -> TokenStream {
        if self.is_empty() {
            return quote!(#private::NodePolicy::NONE);
        }
        let timeout = some(self.timeout_ms);
        let retries = some(self.retries);
        let backoff = some(self.backoff.map(|b| match b {
            Backoff::Fixed(ms) => quote!(#private::Backoff::Fixed { ms: #ms }),
            Backoff::Exponential(base_ms, max_ms) => {
                quote!(#private::Backoff::Exponential { base_ms: #base_ms, max_ms: #max_ms })
            }
        }));
        let jitter = some(self.jitter);
        let deadline = some(self.deadline_ms);
        quote!(#private::node_policy(#timeout, #retries, #backoff, #jitter, #deadline))
    }
}

fn backoff(value: &OptValue, cx: &mut Ctxt) -> Option<Backoff> {
    const EXPECTED: &str = "`backoff` takes a fixed delay like `\"100ms\"`, or `exponential(\"100ms\", \"5s\")` (first delay, largest delay)";
    match value {
        OptValue::Str(lit) => match parse_duration_ms(&lit.value()) {
            Ok(ms) => Some(Backoff::Fixed(ms)),
            Err(why) => {
                cx.error(
                    lit.span(),
                    format!("invalid duration {:?} for `backoff`: {why}", lit.value()),
                );
                None
            }
        },
        OptValue::Other(expr) if matches!(&**expr, Expr::Call(call) if matches!(&*call.func, Expr::Path(p) if p.path.is_ident("exponential"))) =>
        {
            let Expr::Call(call) = &**expr else {
                return None;
            };
            let mut values = Vec::new();
            for arg in &call.args {
                match arg {
                    Expr::Lit(syn::ExprLit {
                        lit: Lit::Str(lit), ..
                    }) => match parse_duration_ms(&lit.value()) {
                        Ok(ms) => values.push(ms),
                        Err(why) => {
                            cx.error(
                                lit.span(),
                                format!(
                                    "invalid duration {:?} in `exponential`: {why}",
                                    lit.value()
                                ),
                            );
                            return None;
                        }
                    },
                    other => {
                        cx.error(syn::spanned::Spanned::span(other), EXPECTED);
                        return None;
                    }
                }
            }
            match values[..] {
                [base] => Some(Backoff::Exponential(
                    base,
                    base.saturating_mul(100).max(base),
                )),
                [base, max] if max >= base => Some(Backoff::Exponential(base, max)),
                [_, _] => {
                    cx.error(
                        syn::spanned::Spanned::span(&call.args),
                        "the largest delay of `exponential` must not be shorter than the first",
                    );
                    None
                }
                _ => {
                    cx.error(syn::spanned::Spanned::span(call), EXPECTED);
                    None
                }
            }
        }
        other => {
            cx.error(other.span(), EXPECTED);
            None
        }
    }
}

/// Options of a `Parallel` block.
#[derive(Default)]
pub struct ParallelOptions {
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

fn check_duplicates(options: &[Opt], cx: &mut Ctxt) {
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

pub fn operation(options: &[Opt], cx: &mut Ctxt) -> OpOptions {
    check_duplicates(options, cx);
    let mut out = OpOptions::default();
    for opt in options {
        match opt.key.to_string().as_str() {
            "after" => match &opt.value {
                OptValue::Names(names, span) => {
                    if names.is_empty() {
                        cx.error(
                            *span,
                            "`after` needs at least one node name, as in `after = [fetch]`",
                        );
                    }
                    out.after.extend(names.iter().cloned());
                }
                other => cx.error(
                    other.span(),
                    "`after` takes a list of node names in brackets, as in `after = [one, two]`",
                ),
            },
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

pub fn parallel(options: &[Opt], cx: &mut Ctxt) -> ParallelOptions {
    check_duplicates(options, cx);
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
    check_duplicates(options, cx);
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
    check_duplicates(options, cx);
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

fn duration(key: &Ident, value: &OptValue, cx: &mut Ctxt) -> Option<u64> {
    let OptValue::Str(lit) = value else {
        cx.error(
            value.span(),
            format!("`{key}` takes a duration in quotes, as in `{key} = \"250ms\"`"),
        );
        return None;
    };
    match parse_duration_ms(&lit.value()) {
        Ok(0) => {
            cx.error(
                lit.span(),
                format!("`{key}` must be longer than zero; remove the option for no limit"),
            );
            None
        }
        Ok(ms) => Some(ms),
        Err(why) => {
            cx.error(
                lit.span(),
                format!("invalid duration {:?} for `{key}`: {why}", lit.value()),
            );
            None
        }
    }
}

/// Parses `"250ms"`, `"2s"`, `"1m"`, `"1h"` or a sum such as `"1m30s"` into milliseconds.
pub fn parse_duration_ms(text: &str) -> Result<u64, String> {
    const EXPECTED: &str = "expected whole numbers with units `ms`, `s`, `m` or `h`, like \"250ms\", \"2s\" or \"1m30s\"";
    parse_ms(text, EXPECTED, false)
}

/// As [`parse_duration_ms`], with days (`d`) too: the duration of a `Delay`.
pub fn parse_delay_ms(text: &str) -> Result<u64, String> {
    const EXPECTED: &str = "expected whole numbers with units `ms`, `s`, `m`, `h` or `d`, like \"250ms\", \"48h\" or \"1d12h\"";
    parse_ms(text, EXPECTED, true)
}

fn parse_ms(text: &str, expected: &str, days: bool) -> Result<u64, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err(expected.to_string());
    }
    let mut total: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return Err(expected.to_string());
        }
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| "the number is too large".to_string())?;
        rest = &rest[digits..];
        let unit_len = rest.len()
            - rest
                .trim_start_matches(|c: char| c.is_ascii_alphabetic())
                .len();
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let factor = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" if days => 86_400_000,
            "" => {
                // Only the message depends on what follows: a space, a fraction or nothing.
                let word: String = rest
                    .trim_start()
                    .chars()
                    .take_while(char::is_ascii_alphabetic)
                    .collect();
                return Err(match word.as_str() {
                    _ if rest.starts_with('.') => "fractions are not supported; use a smaller unit, as in \"1s500ms\" or \"1500ms\"".to_string(),
                    "ms" | "s" | "m" | "h" => format!("write the unit right after the number, as in \"{number}{word}\""),
                    "d" if days => format!("write the unit right after the number, as in \"{number}{word}\""),
                    "" => format!("missing unit after {number}; {expected}"),
                    other => format!("unknown unit `{other}`; {expected}"),
                });
            }
            other => return Err(format!("unknown unit `{other}`; {expected}")),
        };
        total = number
            .checked_mul(factor)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(|| "the duration is too long".to_string())?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::parse_duration_ms;

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("250ms"), Ok(250));
        assert_eq!(parse_duration_ms("2s"), Ok(2000));
        assert_eq!(parse_duration_ms("1m30s"), Ok(90_000));
        assert_eq!(parse_duration_ms("1h"), Ok(3_600_000));
        assert!(parse_duration_ms("5 parsecs").is_err());
        assert!(parse_duration_ms("5").is_err());
        assert!(parse_duration_ms("ms").is_err());
        assert!(parse_duration_ms("").is_err());
        assert!(parse_duration_ms("99999999999999999999s").is_err());
        assert!(parse_duration_ms("1d").is_err());
    }

    #[test]
    fn delays_take_days() {
        use super::parse_delay_ms;
        assert_eq!(parse_delay_ms("48h"), Ok(172_800_000));
        assert_eq!(parse_delay_ms("1d12h"), Ok(129_600_000));
        assert_eq!(parse_delay_ms("0ms"), Ok(0));
        let error = parse_delay_ms("2 weeks").expect_err("weeks are no unit");
        assert!(error.contains("`d`"), "{error}");
    }
}
