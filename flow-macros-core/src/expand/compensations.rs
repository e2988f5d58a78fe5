//! Compensations: one more leaf per compensable step, after the forward nodes.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;

use super::names::Names;
use super::tokens::{balanced, respan};
use crate::check::Use;

/// The compensations of a workflow (or nest body) with `compensate = ..` options: one leaf
/// per compensable step, in execution order, after the forward nodes of the run's node set
/// (`(tree, compensations)`), and the run's options naming each leaf's step. Returns the
/// statements to put before the run and the node tree to run; nothing changes for a workflow
/// without compensations.
pub fn compensations(
    names: &Names<'_>,
    options: TokenStream,
    tree: TokenStream,
) -> (TokenStream, TokenStream) {
    let checked = names.checked;
    if checked.compensations.is_empty() {
        return (TokenStream::new(), tree);
    }
    let mut undo: Vec<&(usize, syn::Expr, Vec<Use>)> = checked.compensations.iter().collect();
    undo.sort_by_key(|(node, ..)| names.pos[*node]);
    let mut statements = TokenStream::new();
    let mut leaves = Vec::new();
    let mut steps = Vec::new();
    for (k, (node, expr, reads)) in undo.into_iter().enumerate() {
        let span = expr.span();
        let private = respan(&names.private, span);
        let rewritten = names.rewrite(expr, reads.iter().map(|u| &u.ident));
        let inputs = reads.iter().map(
            |Use {
                 ident,
                 source,
                 optional,
             }| {
                let slot = names.slot(*source);
                if *optional {
                    quote!(let #ident = &#slot.get();)
                } else {
                    quote!(let #ident = #private::input(#slot)?;)
                }
            },
        );
        let finish = quote_spanned!(span=> #private::discard((#rewritten).await));
        let var = format_ident!("__flow_undo_{}", k, span = Span::mixed_site());
        statements.extend(quote! {
            let #var = (move || async move {
                #(#inputs)*
                #finish
            },);
        });
        leaves.push(quote!(#var));
        let step = names.pos[*node] as u32;
        steps.push(quote!(#step));
    }
    let private = &names.private;
    let undo_tree = balanced(&leaves);
    statements.extend(quote! {
        let #options = #private::compensated(#options, &[#(#steps),*]);
    });
    (statements, quote!((#tree, #undo_tree)))
}
