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

use super::policy;
use crate::ctxt::Ctxt;
use crate::parse::operation::Operation;

/// Expands `#[operation(args)]` on `item`: the function with its defaults attached, or the
/// errors beside the function as written.
pub fn operation(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut cx = Ctxt::default();
    let parsed = crate::parse::operation::operation(args, item.clone(), &mut cx);
    let error = cx.into_error().map(|error| error.to_compile_error());
    let Some(Operation {
        mut function,
        display,
        policy,
        krate,
    }) = parsed
    else {
        let mut out = error.unwrap_or_default();
        out.extend(item);
        return out;
    };
    if let Some(mut out) = error {
        out.extend(quote!(#function));
        return out;
    }

    let private = match &krate {
        Some(path) => quote!(#path::__private),
        None => quote!(::flowdag::__private),
    };
    let policy = policy::tokens(&policy, &private);
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
