//! Resilience options, shared by `Operation(..)` and `#[operation(..)]`: `timeout`, `retries`,
//! `backoff`, `jitter` and `deadline`.

use syn::{Expr, Ident, Lit};

use super::ast::{Opt, OptValue};
use super::duration::parse_duration_ms;
use crate::ctxt::Ctxt;

/// Resilience settings, shared by `Operation(..)` and `#[operation(..)]`; unset fields fall
/// back at run time (step, then operation default, then built-in default).
#[derive(Default, Clone, PartialEq, Eq)]
pub struct Policy {
    /// `timeout`: how long one attempt may take.
    pub timeout_ms: Option<u64>,
    /// `retries`: how many times a failed attempt is tried again.
    pub retries: Option<u32>,
    /// `backoff`: how long to wait before a retry.
    pub backoff: Option<Backoff>,
    /// `jitter`: whether the backoff is randomised.
    pub jitter: Option<bool>,
    /// `deadline`: how long the step may take, retries included.
    pub deadline_ms: Option<u64>,
}

/// How long to wait before a retry.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Backoff {
    Fixed(u64),
    Exponential(u64, u64),
}

/// The keys of the resilience options.
pub const POLICY_KEYS: [&str; 5] = ["timeout", "retries", "backoff", "jitter", "deadline"];

/// The resilience options, for messages.
pub const POLICY_OPTIONS: &str = "`timeout = \"2s\"`, `retries = 3`, `backoff = \"100ms\"` or `backoff = exponential(\"100ms\", \"5s\")`, `jitter = true`, `deadline = \"30s\"`";

impl Policy {
    /// Whether no option is set.
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

/// A duration option (`timeout`, `deadline`): a literal such as `"250ms"`, longer than zero.
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
