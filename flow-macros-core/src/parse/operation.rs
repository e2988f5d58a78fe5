//! `#[operation(options)]` on an `async fn`: the options (`name`, `crate`, and the resilience
//! options) and the function.

use proc_macro2::TokenStream;
use syn::punctuated::Punctuated;
use syn::{ItemFn, Token};

use super::ast::{Opt, OptValue};
use super::header::crate_path;
use super::policy::{POLICY_KEYS, POLICY_OPTIONS, Policy};
use super::tokens::{last_span, parse_within};
use crate::ctxt::Ctxt;
use crate::suggest::did_you_mean;

/// An operation: the function as written, and the defaults its options give.
pub struct Operation {
    /// The function, as written.
    pub function: ItemFn,
    /// The name shown in reports: `name = ".."`, or the function's name.
    pub display: String,
    /// Its resilience options.
    pub policy: Policy,
    /// `crate = path`: where generated code finds flow (`::flow` when `None`).
    pub krate: Option<syn::Path>,
}

/// Parses `#[operation(args)]` on `item`. Every mistake goes to `cx`; `None` when `item` is no
/// function at all.
pub fn operation(args: TokenStream, item: TokenStream, cx: &mut Ctxt) -> Option<Operation> {
    let end = last_span(&args);
    let options = match parse_within(Punctuated::<Opt, Token![,]>::parse_terminated, args, end) {
        Ok(options) => options.into_iter().collect::<Vec<_>>(),
        Err(error) => {
            cx.push(error);
            Vec::new()
        }
    };
    let Ok(function) = syn::parse2::<ItemFn>(item) else {
        cx.error(
            proc_macro2::Span::call_site(),
            "`#[operation]` goes on an `async fn`, as in `#[operation] async fn fetch(id: u64) -> Result<T, E>`",
        );
        return None;
    };
    if function.sig.asyncness.is_none() {
        cx.error(
            function.sig.fn_token.span,
            format!(
                "`#[operation]` goes on an `async fn`; write `async fn {}`",
                function.sig.ident
            ),
        );
    }

    let mut display = function.sig.ident.to_string();
    let mut policy = Policy::default();
    let mut krate = None;
    for (i, opt) in options.iter().enumerate() {
        if options[..i].iter().any(|o| o.key == opt.key) {
            cx.error(opt.key.span(), format!("duplicate option `{}`", opt.key));
            continue;
        }
        match (opt.key.to_string().as_str(), &opt.value) {
            ("name", OptValue::Str(lit)) => display = lit.value(),
            ("name", other) => cx.error(other.span(), "`name` takes a string, as in `name = \"charge card\"`"),
            ("crate", value) => match crate_path(value) {
                Ok(path) => krate = Some(path),
                Err(error) => cx.push(error),
            },
            _ if policy.option(opt, cx) => {}
            (other, _) => match did_you_mean(other, std::iter::once("name").chain(POLICY_KEYS)) {
                hint if hint.is_empty() => cx.error(
                    opt.key.span(),
                    format!("unknown option `{other}` for `#[operation]`: expected `name = \"..\"`, {POLICY_OPTIONS}"),
                ),
                hint => cx.error(opt.key.span(), format!("unknown option `{other}` for `#[operation]`{hint}")),
            },
        }
    }
    Some(Operation {
        function,
        display,
        policy,
        krate,
    })
}
