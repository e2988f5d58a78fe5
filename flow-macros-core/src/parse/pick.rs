//! `Pick` (deferred choice): arms that each start with the event that chooses them.
//!
//! ```text
//! Pick {
//!     ok = Signal(approve: Approval) => { Operation(ship(&ok)) },
//!     Delay("48h") => { Operation(expire()) },
//! }
//! ```
//!
//! A `Pick` is a gate of `min = 1, rest = cancel` whose arms are the triggers alone: the first
//! trigger to complete wins, and every other trigger and every other arm's steps are withdrawn.
//! Each arm's steps follow its trigger by ordinary edges, and the steps after the `Pick` follow
//! the last steps of every arm (see `graph::Builder::pick`).

use std::collections::BTreeMap;

use proc_macro2::{Delimiter, Span, TokenTree};
use syn::Ident;

use super::ast::{PickArm, PickStep, Step};
use super::steps::{step, steps};
use super::tokens::split_commas;
use crate::ctxt::Ctxt;
use crate::suggest::at_line;

const ARM: &str = "event => { steps }";
const EXAMPLE: &str = "Delay(\"48h\") => { Operation(expire()) }";

/// Parses the rest of a `Pick` step after its keyword, and checks its arms.
pub fn pick(keyword: Ident, rest: Vec<TokenTree>, cx: &mut Ctxt) -> Option<PickStep> {
    let body = match rest.first() {
        Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Brace => g.clone(),
        Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Parenthesis => {
            cx.error(g.span(), "`Pick` takes no options");
            return None;
        }
        _ => {
            cx.error(
                keyword.span(),
                format!("expected `Pick {{ .. }}`: its arms in braces, each `{ARM}`"),
            );
            return None;
        }
    };
    if let Some(extra) = rest.get(1) {
        cx.error(
            extra.span(),
            "unexpected tokens after `Pick { .. }`; separate steps with commas",
        );
        return None;
    }
    let mut arms = Vec::new();
    let mut written = 0;
    for (chunk, comma) in split_commas(body.stream()) {
        written += 1;
        match chunk.first() {
            None => cx.error(comma, "expected an arm of the `Pick` before this comma"),
            Some(first) => {
                let at = first.span();
                if let Some(arm) = arm(chunk, at, cx) {
                    arms.push(arm);
                }
            }
        }
    }
    if written < 2 {
        cx.error(
            keyword.span(),
            format!(
                "a `Pick` chooses between at least two events, found {written}; add an arm `{EXAMPLE}`, or write the step without `Pick`"
            ),
        );
    }
    same_signals(&arms, cx);
    Some(PickStep { keyword, arms })
}

/// One arm, `trigger => { steps }`; `at` is its first token.
fn arm(chunk: Vec<TokenTree>, at: Span, cx: &mut Ctxt) -> Option<PickArm> {
    let arrow = chunk.windows(2).position(|w| {
        matches!((&w[0], &w[1]), (TokenTree::Punct(eq), TokenTree::Punct(gt))
            if eq.as_char() == '=' && gt.as_char() == '>' && eq.spacing() == proc_macro2::Spacing::Joint)
    });
    let Some(arrow) = arrow else {
        cx.error(
            at,
            format!("expected `{ARM}`: a `Pick` arm is the event that chooses it, then the steps it runs, as in `{EXAMPLE}`"),
        );
        return None;
    };
    let mut trigger: Vec<TokenTree> = chunk;
    let after: Vec<TokenTree> = trigger.split_off(arrow).into_iter().skip(2).collect();
    let arrow_span = trigger.last().map_or(at, TokenTree::span);
    let body = match after.as_slice() {
        [TokenTree::Group(g)] if g.delimiter() == Delimiter::Brace => Some(g.stream()),
        [] => {
            cx.error(
                arrow_span,
                "expected the arm's steps in braces after `=>`, as in `=> { Operation(expire()) }`",
            );
            None
        }
        [first, ..] => {
            cx.error(
                first.span(),
                "expected the arm's steps in braces after `=>`, as in `=> { Operation(expire()) }`",
            );
            None
        }
    };
    if trigger.is_empty() {
        cx.error(
            at,
            format!("expected the event that chooses this arm before `=>`: a `Signal(..)` or a `Delay(..)`, as in `{EXAMPLE}`"),
        );
        return None;
    }
    let trigger = step(trigger, cx)?;
    if !matches!(trigger, Step::Signal(_) | Step::Delay(_)) {
        cx.error(
            at,
            "a Pick arm starts with the event that chooses it: a `Signal(..)` or a `Delay(..)`; move this step into the arm's braces",
        );
        return None;
    }
    let body = steps(body?, cx);
    Some(PickArm { trigger, body })
}

/// Two arms that wait for the same signal: one signal would choose both.
fn same_signals(arms: &[PickArm], cx: &mut Ctxt) {
    let mut seen: BTreeMap<String, &Ident> = BTreeMap::new();
    for arm in arms {
        let Step::Signal(signal) = &arm.trigger else {
            continue;
        };
        let name = &signal.signal;
        match seen.get(&name.to_string()) {
            Some(first) => cx.error(
                name.span(),
                format!(
                    "two arms of this `Pick` wait for the signal `{name}`{}: one signal would choose both; give each arm its own signal",
                    at_line(first.span())
                ),
            ),
            None => {
                seen.insert(name.to_string(), name);
            }
        }
    }
}
