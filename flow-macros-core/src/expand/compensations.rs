//! Compensations: one more leaf per compensable step, after the forward nodes.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;

use super::names::Names;
use super::tokens::{balanced, respan};
use crate::check::Use;
use crate::parse::What;

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
    let children = children(names);
    if checked.compensations.is_empty() && children.is_empty() {
        return (TokenStream::new(), tree);
    }
    // Each compensable step: its `compensate = ..` call, or its child run (a `Workflow` step
    // takes no `compensate`).
    let mut undo: Vec<(usize, Undo<'_>)> = checked
        .compensations
        .iter()
        .map(|call| (call.0, Undo::Call(call)))
        .chain(
            children
                .into_iter()
                .map(|(node, child)| (node, Undo::Child(child))),
        )
        .collect();
    undo.sort_by_key(|(node, _)| names.pos[*node]);
    let mut statements = TokenStream::new();
    let mut leaves = Vec::new();
    let mut steps = Vec::new();
    let mut live = Vec::new();
    for (k, (node, undo)) in undo.into_iter().enumerate() {
        let body = match undo {
            Undo::Call((_, expr, reads)) => {
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
                live.push(quote!(true));
                quote! {
                    #(#inputs)*
                    #finish
                }
            }
            Undo::Child(child) => {
                let private = respan(&names.private, child.span());
                // Nothing to do for a child that compensates nothing: the phase skips it.
                live.push(quote!(<#child as #private::DurableWorkflow>::__COMPENSATES));
                quote_spanned!(child.span()=> #private::undo_child::<#child>().await)
            }
        };
        let var = format_ident!("__flow_undo_{}", k, span = Span::mixed_site());
        statements.extend(quote! {
            let #var = (move || async move {
                #body
            },);
        });
        leaves.push(quote!(#var));
        let step = names.pos[node] as u32;
        steps.push(quote!(#step));
    }
    let private = &names.private;
    let undo_tree = balanced(&leaves);
    statements.extend(quote! {
        let #options = #private::compensated(#options, &[#(#steps),*], const { &[#(#live),*] });
    });
    (statements, quote!((#tree, #undo_tree)))
}

/// What undoes a compensable step.
enum Undo<'a> {
    /// Its `compensate = ..` call, with the names the call reads.
    Call(&'a (usize, syn::Expr, Vec<Use>)),
    /// The child run a `Workflow` step of a durable workflow started.
    Child(&'a syn::Path),
}

/// The `Workflow` steps of a durable workflow (each starts its child as a durable run of its
/// own, which its compensation undoes), with their child workflow.
pub fn children<'a>(names: &Names<'a>) -> Vec<(usize, &'a syn::Path)> {
    if names.workflow.durable.is_none() {
        return Vec::new();
    }
    names
        .checked
        .nests
        .iter()
        .filter_map(|nest| match &nest.step.what {
            What::Workflow(sub) => Some((nest.node, &sub.child)),
            _ => None,
        })
        .collect()
}
