//! Signals in generated code: the `SignalKey` constants of the workflow type, the
//! `Control::signals` table and the run's mailbox.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Ident, Type};

use crate::check::Checked;
use crate::check::signals::key_name;
use crate::graph::Waits;

/// The `SignalKey` constants of the workflow type, one per signal.
pub fn keys(
    declared: &[(&Ident, &Type, bool)],
    vis: &syn::Visibility,
    private: &TokenStream,
    durable: bool,
) -> TokenStream {
    let check = durable.then(|| check_fn(declared, private));
    let consts = declared.iter().map(|(signal, ty, transient)| {
        // An identifier: `check::signals::declared` leaves out the signals whose key is none.
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
    quote!(#(#consts)* #check)
}

/// A durable workflow's check of a signal before it is stored (`DurableWorkflow::
/// __check_signal` calls it): the name must be declared and the payload must read as its
/// type; `Ok(transient)`. Hidden, and only in durable workflows, whose payload types are
/// `Durable`.
fn check_fn(declared: &[(&Ident, &Type, bool)], private: &TokenStream) -> TokenStream {
    let arms = declared.iter().map(|(signal, ty, transient)| {
        let text = signal.to_string();
        quote! {
            #text => (&#private::PayloadProbe::<#ty>::new())
                .check_payload(#text, __flow_payload)
                .map(|()| #transient),
        }
    });
    let names: Vec<String> = declared.iter().map(|(s, ..)| format!("`{s}`")).collect();
    let declares = match names.len() {
        0 => "declares no signal".to_owned(),
        _ => format!("declares {}", names.join(", ")),
    };
    quote! {
        #[doc(hidden)]
        #[allow(dead_code, clippy::all)]
        pub fn __flow_check_signal(
            __flow_name: &str,
            __flow_payload: &[u8],
        ) -> ::core::result::Result<bool, ::std::string::String> {
            #[allow(unused_imports)]
            use #private::{CheckAny as _, CheckDurable as _};
            match __flow_name {
                #(#arms)*
                _ => ::core::result::Result::Err(::std::format!(
                    "the workflow has no signal `{}`: it {}",
                    __flow_name,
                    #declares
                )),
            }
        }
    }
}

/// `Control::signals`: one row per `Signal` step, in runtime order.
pub fn table(checked: &Checked, pos: &[usize], private: &TokenStream) -> Vec<TokenStream> {
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
