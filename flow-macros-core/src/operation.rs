//! `#[operation(...)]`: marks an `async fn` as a workflow operation.
//!
//! The function keeps its signature and stays callable as ordinary Rust. Its body is wrapped in
//! a scope that, on its first poll inside a running workflow node, hands the node the
//! operation's defaults (display name, timeout). A step may also call an un-annotated async fn:
//! it simply has no defaults.
//!
//! A step whose expression awaits before it reaches its operation (see [`awaits_inside`]) is
//! wrapped by `workflow!` in `Deferred`, so that the node keeps listening for the defaults on
//! every poll until the operation reports them.

use proc_macro2::{TokenStream, TokenTree};
use quote::quote;
use syn::punctuated::Punctuated;
use syn::{ItemFn, Token};

use crate::ctxt::Ctxt;
use crate::options::{POLICY_KEYS, POLICY_OPTIONS, Policy};
use crate::parse::{Opt, OptValue};

pub fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut cx = Ctxt::default();
    let end = crate::parse::last_span(&args);
    let options =
        match crate::parse::parse_within(Punctuated::<Opt, Token![,]>::parse_terminated, args, end)
        {
            Ok(options) => options.into_iter().collect::<Vec<_>>(),
            Err(error) => {
                cx.push(error);
                Vec::new()
            }
        };
    let mut function: ItemFn = match syn::parse2(item.clone()) {
        Ok(function) => function,
        Err(_) => {
            cx.error(
                proc_macro2::Span::call_site(),
                "`#[operation]` goes on an `async fn`, as in `#[operation] async fn fetch(id: u64) -> Result<T, E>`",
            );
            let mut out = cx
                .into_error()
                .map(|e| e.to_compile_error())
                .unwrap_or_default();
            out.extend(item);
            return out;
        }
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
            ("crate", value) => match crate::parse::crate_path(value) {
                Ok(path) => krate = Some(path),
                Err(error) => cx.push(error),
            },
            _ if policy.option(opt, &mut cx) => {}
            (other, _) => match crate::suggest::did_you_mean(other, std::iter::once("name").chain(POLICY_KEYS)) {
                hint if hint.is_empty() => cx.error(
                    opt.key.span(),
                    format!("unknown option `{other}` for `#[operation]`: expected `name = \"..\"`, {POLICY_OPTIONS}"),
                ),
                hint => cx.error(opt.key.span(), format!("unknown option `{other}` for `#[operation]`{hint}")),
            },
        }
    }

    if let Some(error) = cx.into_error() {
        let mut out = error.to_compile_error();
        out.extend(quote!(#function));
        return out;
    }

    let private = match &krate {
        Some(path) => quote!(#path::__private),
        None => quote!(::flow::__private),
    };
    let policy = policy.tokens(&private);
    // The new body is written as tokens around the user's block, never parsed again.
    let body = &function.block;
    let spec = quote! {
        const __FLOW_OPERATION: #private::OperationSpec = #private::operation_spec(#display, #policy);
    };
    let scope = quote!(#private::OperationScope::new(&__FLOW_OPERATION, async move #body).await);
    *function.block = syn::Block {
        brace_token: Default::default(),
        stmts: vec![
            syn::Stmt::Item(syn::Item::Verbatim(spec)),
            syn::Stmt::Expr(syn::Expr::Verbatim(scope), None),
        ],
    };
    quote!(#function)
}

/// Whether a step's expression contains an `.await`: then its first poll may run something
/// else before the operation it calls (`charge(rate().await)`, an `async` block), and the step
/// is wrapped so that the node listens for the operation's defaults until they come. A plain
/// call awaits nothing of its own and is left as it is, at no cost.
pub fn awaits_inside(tokens: TokenStream) -> bool {
    let mut dot = false;
    for token in tokens {
        match token {
            TokenTree::Ident(ident) if dot && ident == "await" => return true,
            TokenTree::Group(group) if awaits_inside(group.stream()) => return true,
            TokenTree::Punct(punct) => {
                dot = punct.as_char() == '.';
                continue;
            }
            _ => {}
        }
        dot = false;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::awaits_inside;
    use quote::quote;

    #[test]
    fn finds_an_await_anywhere_in_a_step() {
        assert!(awaits_inside(quote!(charge(rate().await))));
        assert!(awaits_inside(quote!(async {
            let x = rate().await;
            charge(x).await
        })));
        assert!(!awaits_inside(quote!(charge(order, stock))));
        assert!(!awaits_inside(quote!(client.get(7))));
        assert!(!awaits_inside(quote!(async {
            Ok::<_, Infallible>(await_count)
        })));
    }
}
