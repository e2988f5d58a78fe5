//! `Signal` and `Delay`: steps whose end the environment decides.
//!
//! ```text
//! ok = Signal(approve: Approval),            // waits for `approve`; `ok: &Approval` downstream
//! Signal(ping: u8, transient),               // refused when sent while no step waits
//! Delay("48h"),                              // ms, s, m, h, d; checked here
//! Delay(Duration::from_secs(retry_after)),   // a `Duration` expression, which may read nodes
//! ```

use proc_macro2::TokenTree;
use syn::parse::ParseStream;
use syn::{Expr, Ident, Token, Type};

use super::ast::{DelayStep, SignalStep};
use super::duration::parse_delay_ms;
use super::tokens::{call_args, parse_within};
use crate::ctxt::Ctxt;
use crate::suggest::did_you_mean;

/// The parenthesized arguments of a `Signal` or `Delay` step.
fn args(
    keyword: &Ident,
    rest: &[TokenTree],
    example: &str,
    cx: &mut Ctxt,
) -> Option<proc_macro2::Group> {
    call_args(
        keyword,
        rest,
        &format!("expected `{keyword}(..)` with its arguments in parentheses, as in `{example}`"),
        &format!("expected the arguments of `{keyword}(..)`, as in `{example}`"),
        cx,
    )
}

/// Parses the rest of a `Signal` step after its keyword.
pub fn signal(
    name: Option<Ident>,
    keyword: Ident,
    rest: Vec<TokenTree>,
    cx: &mut Ctxt,
) -> Option<SignalStep> {
    const EXAMPLE: &str = "Signal(approve: Approval)";
    let args = args(&keyword, &rest, EXAMPLE, cx)?;
    let parser = |input: ParseStream| -> syn::Result<(Ident, Type, bool)> {
        let signal: Ident = input.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                format!("expected the signal's name, as in `{EXAMPLE}`"),
            )
        })?;
        if !input.peek(Token![:]) {
            return Err(input.error(format!(
                "expected `:` and the payload's type after the signal's name, as in `{EXAMPLE}`"
            )));
        }
        input.parse::<Token![:]>()?;
        let ty: Type = input.parse()?;
        let mut transient: Option<Ident> = None;
        while !input.is_empty() {
            input.parse::<Token![,]>()?;
            if input.is_empty() {
                break;
            }
            let option: Ident = input.parse()?;
            match option.to_string().as_str() {
                "transient" if transient.is_some() => {
                    return Err(syn::Error::new(
                        option.span(),
                        "duplicate option `transient`; keep one",
                    ));
                }
                "transient" => transient = Some(option),
                other => {
                    let hint = match did_you_mean(other, ["transient"]) {
                        hint if hint.is_empty() => ": expected `transient`".to_string(),
                        hint => hint,
                    };
                    return Err(syn::Error::new(
                        option.span(),
                        format!("unknown option `{other}` for `Signal`{hint}"),
                    ));
                }
            }
        }
        Ok((signal, ty, transient.is_some()))
    };
    match parse_within(parser, args.stream(), args.span_close()) {
        Ok((signal, ty, transient)) => Some(SignalStep {
            name,
            keyword,
            signal,
            ty,
            transient,
            args: args.stream(),
        }),
        Err(error) => {
            cx.push(error);
            None
        }
    }
}

/// Parses the rest of a `Delay` step after its keyword; a duration literal is checked here.
pub fn delay(
    name: Option<Ident>,
    keyword: Ident,
    rest: Vec<TokenTree>,
    cx: &mut Ctxt,
) -> Option<DelayStep> {
    let args = args(&keyword, &rest, "Delay(\"48h\")", cx)?;
    let after = match parse_within(
        <Expr as syn::parse::Parse>::parse,
        args.stream(),
        args.span_close(),
    ) {
        Ok(after) => after,
        Err(error) => {
            cx.push(error);
            return None;
        }
    };
    let ms = match &after {
        Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(lit),
            ..
        }) => match parse_delay_ms(&lit.value()) {
            Ok(ms) => Some(ms),
            Err(why) => {
                cx.error(
                    lit.span(),
                    format!("invalid duration {:?} for `Delay`: {why}", lit.value()),
                );
                return None;
            }
        },
        _ => None,
    };
    Some(DelayStep {
        name,
        keyword,
        after,
        ms,
    })
}
