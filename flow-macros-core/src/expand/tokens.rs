//! Small pieces of generated code that every part of the expansion uses.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use syn::Ident;

use crate::parse::Workflow;

/// `tokens` with every span set to `span`.
pub fn respan(tokens: &TokenStream, span: Span) -> TokenStream {
    tokens
        .clone()
        .into_iter()
        .map(|mut token| {
            token.set_span(span);
            token
        })
        .collect()
}

/// `tokens` with every token set to `span`, inside groups too: a call whose errors must point
/// at one of the user's tokens, whatever the spans of the arguments interpolated into it.
pub fn respan_deep(tokens: &TokenStream, span: Span) -> TokenStream {
    tokens
        .clone()
        .into_iter()
        .map(|token| match token {
            proc_macro2::TokenTree::Group(group) => {
                let mut inner =
                    proc_macro2::Group::new(group.delimiter(), respan_deep(&group.stream(), span));
                inner.set_span(span);
                proc_macro2::TokenTree::Group(inner)
            }
            mut other => {
                other.set_span(span);
                other
            }
        })
        .collect()
}

/// `::flowdag::__private`, or `path::__private` under `#[flow(crate = path)]`.
pub fn private_path(workflow: &Workflow) -> TokenStream {
    match &workflow.krate {
        Some(path) => quote!(#path::__private),
        None => quote!(::flowdag::__private),
    }
}

/// Workflows with at most this many nodes keep node futures inline.
pub const INLINE_LIMIT: usize = 64;

/// The variable that holds the node at runtime index `p` until the final call.
pub fn node_ident(p: usize) -> Ident {
    format_ident!("__flow_node_{}", p, span = Span::mixed_site())
}

/// A balanced tree of 2-tuples over `leaves`.
pub fn balanced(leaves: &[TokenStream]) -> TokenStream {
    match leaves {
        [] => quote!(::core::compile_error!(
            "flow: a workflow needs at least one step"
        )),
        [leaf] => leaf.clone(),
        _ => {
            let (left, right) = leaves.split_at(leaves.len() / 2);
            let left = balanced(left);
            let right = balanced(right);
            quote!((#left, #right))
        }
    }
}
