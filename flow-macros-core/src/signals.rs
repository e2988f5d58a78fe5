//! `Signal` and `Delay`: steps whose end the environment decides. Their syntax, the checks
//! of the signals a workflow declares, the `SignalKey` constants on the workflow type and the
//! `Control::signals` table.
//!
//! ```text
//! ok = Signal(approve: Approval),            // waits for `approve`; `ok: &Approval` downstream
//! Signal(ping: u8, transient),               // refused when sent while no step waits
//! Delay("48h"),                              // ms, s, m, h, d; checked here
//! Delay(Duration::from_secs(retry_after)),   // a `Duration` expression, which may read nodes
//! ```

use std::collections::BTreeMap;

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{ToTokens, quote, quote_spanned};
use syn::parse::ParseStream;
use syn::spanned::Spanned;
use syn::{Expr, Ident, Token, Type};

use crate::control::ControlTables;
use crate::ctxt::Ctxt;
use crate::graph::{Dag, Waits};
use crate::parse::parse_within;
use crate::suggest::{at_line, did_you_mean};
use crate::validate::Checked;

/// `name = Signal(signal: Type, transient)`.
pub struct SignalStep {
    pub name: Option<Ident>,
    pub keyword: Ident,
    /// The signal's name.
    pub signal: Ident,
    /// The payload's type.
    pub ty: Type,
    pub transient: bool,
    /// What is inside the parentheses, for the node's label.
    pub args: TokenStream,
}

/// `name = Delay("48h")` or `Delay(expr)`.
pub struct DelayStep {
    pub name: Option<Ident>,
    pub keyword: Ident,
    /// The literal or the `Duration` expression.
    pub after: Expr,
    /// The literal's duration in milliseconds; `None` for an expression.
    pub ms: Option<u64>,
}

fn args(
    keyword: &Ident,
    rest: &[TokenTree],
    example: &str,
    cx: &mut Ctxt,
) -> Option<proc_macro2::Group> {
    crate::parse::call_args(
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
        }) => match crate::options::parse_delay_ms(&lit.value()) {
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

/// The key constant's name of signal `name`: upper-cased, without a raw prefix.
fn key_name(name: &Ident) -> String {
    let text = name.to_string();
    text.strip_prefix("r#").unwrap_or(&text).to_uppercase()
}

/// The signals of a workflow, each once: (name, payload type, transient), in source order.
/// Reports two declarations of one signal that disagree, and names whose keys clash (which
/// are left out, so that their constants do not add errors of their own).
pub fn declared<'a>(dag: &'a Dag, cx: &mut Ctxt) -> Vec<(&'a Ident, &'a Type, bool)> {
    let mut first: BTreeMap<String, (&Ident, &Type, bool)> = BTreeMap::new();
    let mut out: Vec<(&Ident, &Type, bool)> = Vec::new();
    for node in &dag.nodes {
        let Some(Waits::Signal {
            signal,
            ty,
            transient,
        }) = &node.waits
        else {
            continue;
        };
        let text = signal.to_string();
        if let Some(&(earlier, earlier_ty, earlier_transient)) = first.get(&text) {
            let (was, is) = (type_text(earlier_ty), type_text(ty));
            if was != is {
                cx.error(
                    ty.span(),
                    format!(
                        "the signal `{signal}` carries `{was}`{}, and here `{is}`: a signal has one payload type; give it the same type at every step, or use another name",
                        at_line(earlier.span())
                    ),
                );
            } else if earlier_transient != *transient {
                let (there, here) = match transient {
                    true => ("kept", "transient"),
                    false => ("transient", "kept"),
                };
                cx.error(
                    signal.span(),
                    format!(
                        "the signal `{signal}` is {there}{} and {here} here: declare it the same way at every step (`transient` or not)",
                        at_line(earlier.span())
                    ),
                );
            }
            continue;
        }
        first.insert(text, (signal, &**ty, *transient));
        let key = key_name(signal);
        if key == "GRAPH" {
            cx.error(
                signal.span(),
                format!("a signal cannot be called `{signal}`: its key would be `GRAPH`, the workflow's graph; rename the signal"),
            );
        } else if let Some((other, ..)) = out.iter().find(|(other, ..)| key_name(other) == key) {
            cx.error(
                signal.span(),
                format!(
                    "the signals `{other}`{} and `{signal}` would both have the key `{key}`; rename one of them",
                    at_line(other.span())
                ),
            );
        } else {
            out.push((signal, &**ty, *transient));
        }
    }
    out
}

fn type_text(ty: &Type) -> String {
    ty.to_token_stream().to_string().replace(' ', "")
}

/// The `SignalKey` constants of the workflow type, one per signal.
pub fn keys(
    declared: &[(&Ident, &Type, bool)],
    vis: &syn::Visibility,
    private: &TokenStream,
) -> TokenStream {
    let consts = declared.iter().map(|(signal, ty, transient)| {
        let key = Ident::new(&key_name(signal), signal.span());
        let text = signal.to_string();
        let doc = format!(
            "The key of the signal `{text}`: send it to a run with `Signals::send` (from the runner's `signals()`), or to a durable run with `flowdag::durable::send_signal`."
        );
        let span = ty.span();
        let key_ty = quote_spanned!(span=> #private::SignalKey<#ty>);
        let value = match transient {
            true => quote!(#private::SignalKey::__new(#text).__transient()),
            false => quote!(#private::SignalKey::__new(#text)),
        };
        quote! {
            #[doc = #doc]
            #vis const #key: #key_ty = #value;
        }
    });
    quote!(#(#consts)*)
}

/// Fills `Control::signals`: one row per `Signal` step, in runtime order.
pub(crate) fn fill(
    tables: &mut ControlTables,
    checked: &Checked,
    pos: &[usize],
    private: &TokenStream,
) {
    tables.signals = table(checked, pos, private);
}

fn table(checked: &Checked, pos: &[usize], private: &TokenStream) -> Vec<TokenStream> {
    let mut rows: Vec<(usize, TokenStream)> = checked
        .dag
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(id, node)| match &node.waits {
            Some(Waits::Signal {
                signal,
                ty,
                transient,
            }) => {
                let at = pos[id] as u32;
                let text = signal.to_string();
                let span = ty.span();
                let payload = quote_spanned!(span=> #private::TypeId::of::<#ty>);
                Some((
                    pos[id],
                    quote!(#private::SignalInfo::new(#at, #text, #transient, #payload)),
                ))
            }
            _ => None,
        })
        .collect();
    rows.sort_by_key(|(at, _)| *at);
    rows.into_iter().map(|(_, row)| row).collect()
}

/// The mailbox a workflow with `Signal` steps reads from: the runner's, or a private one.
pub fn mailbox_statement(private: &TokenStream) -> TokenStream {
    let options = Ident::new("__flow_options", Span::mixed_site());
    let mailbox = mailbox_ident();
    quote! {
        let (#options, #mailbox) = #private::with_mailbox(
            #options, &<Self as #private::Workflow>::GRAPH,
        );
        let #mailbox: &#private::Mailbox = &#mailbox;
    }
}

/// The binding of the run's mailbox in generated code.
pub fn mailbox_ident() -> Ident {
    Ident::new("__flow_mailbox", Span::mixed_site())
}
