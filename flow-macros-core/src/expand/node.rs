//! The code of each node: a `let` of the node as a plain tuple, after its output slot.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::Ident;
use syn::spanned::Spanned;

use super::gates::gate_order;
use super::names::Names;
use super::nest;
use super::operation::awaits_inside;
use super::output::term_cell;
use super::signals::mailbox_ident;
use super::tokens::{node_ident, respan};
use crate::check::Use;
use crate::graph::{Kind, Waits};

/// The statements of one node: its output slot (a named operation only), then a `let` of the
/// node as a plain tuple: `(make,)` for an operation, whose closure makes its future, and
/// `(Decision, test)` for a decision.
///
/// The shape is chosen for the type checker. A closure passed to a generic function (such as
/// `Op::new`) leaves obligations that every later statement rescans, and a slot declared far
/// from its producer stays untyped until the producer is checked: both made `cargo check`
/// quadratic in the node count. Plain tuples in `let`s, slots declared where they are filled,
/// and one generic call at the end (`IntoNodes`, in the runtime) bring it to about n^1.3
/// (docs/performance.md, "Compile time").
pub fn node_statements(names: &Names<'_>, id: usize) -> TokenStream {
    let checked = names.checked;
    let private = &names.private;
    let node = &checked.dag.nodes[id];
    let uses = &checked.uses[id];
    let expr = names.rewrite(&node.expr, uses.iter().map(|u| &u.ident));
    let span = node.expr.span();
    let var = node_ident(names.pos[id]);
    // Unused bindings that let rustc suggest a node for a misspelled name (`Checked::hints`).
    let hints = checked.hints[id].iter().map(
        |hint| quote!(#[allow(unused_variables)] let #hint = ::core::marker::PhantomData::<()>;),
    );
    let inputs = uses.iter().map(
        |Use {
             ident,
             source,
             optional,
         }| {
            let slot = names.slot(*source);
            if *optional {
                // In a branch this step is not in: `Option<&T>`, `None` when skipped.
                quote!(let #ident = &#slot.get();)
            } else {
                // No name of the producer here: a constant in each node's code would
                // keep LLVM from merging the code of nodes of the same shape.
                quote!(let #ident = #private::input(#slot)?;)
            }
        },
    );
    match node.kind {
        Kind::Signal => {
            let Some(Waits::Signal { signal, ty, .. }) = &node.waits else {
                return TokenStream::new();
            };
            let text = signal.to_string();
            let mailbox = mailbox_ident();
            let span = ty.span();
            // A durable workflow's step reads its signals from the run's store (when it has
            // one): the payload must be `Durable`, checked on the user's type.
            let wait = match names.workflow.durable {
                Some(_) => quote_spanned!(span=> #private::durable_signal::<#ty>),
                None => quote_spanned!(span=> #private::signal::<#ty>),
            };
            if node.name.is_some() {
                let slot = names.slot(id);
                quote! {
                    let #slot = &#private::Slot::new();
                    let #var = (move || #wait(#mailbox, #text, #private::Option::Some(#slot)),);
                }
            } else {
                quote! {
                    let #var = (move || #wait(#mailbox, #text, #private::Option::None),);
                }
            }
        }
        Kind::Delay => {
            let after = match &node.waits {
                Some(Waits::Delay { ms: Some(ms) }) => {
                    quote!(#private::Duration::from_millis(#ms))
                }
                _ => quote_spanned!(span=> {
                    let __flow_after: #private::Duration = #expr;
                    __flow_after
                }),
            };
            quote! {
                let #var = (
                    #private::Timer,
                    move || -> #private::Result<#private::Duration, #private::NodeError> {
                        #(#inputs)*
                        #(#hints)*
                        #private::Result::Ok(#after)
                    },
                );
            }
        }
        Kind::Operation => {
            let awaited = quote_spanned!(span=> (#expr).await);
            // On the user's tokens, so that an error about the result points at the call.
            let private = respan(private, span);
            let durable = names.workflow.durable.is_some();
            let (slot, finish) = if node.name.is_some() {
                let slot = names.slot(id);
                let finish = if durable {
                    quote_spanned!(span=> #private::complete_durable(#slot, #awaited))
                } else {
                    quote_spanned!(span=> #private::complete(#slot, #awaited))
                };
                (quote!(let #slot = &#private::Slot::new();), finish)
            } else {
                (
                    TokenStream::new(),
                    quote_spanned!(span=> #private::discard(#awaited)),
                )
            };
            // A durable step restored from the journal puts its stored output in its slot and
            // runs none of the user's code.
            let restore = match (durable, node.name.is_some()) {
                (false, _) => TokenStream::new(),
                (true, true) => {
                    let slot = names.slot(id);
                    let display = &node.display;
                    quote! {
                        if let ::core::option::Option::Some(__flow_restored) =
                            #private::restore_output(#slot, #display)
                        {
                            return __flow_restored;
                        }
                    }
                }
                (true, false) => quote! {
                    if #private::restoring() {
                        return #private::Result::Ok(());
                    }
                },
            };
            let future = quote! {
                async move {
                    #restore
                    #(#inputs)*
                    #(#hints)*
                    #finish
                }
            };
            // A step that awaits before it reaches its operation is listened to until the
            // operation's defaults come (`flowdag_runtime::Deferred`).
            let future = if awaits_inside(quote!(#expr)) {
                quote!(#private::Deferred::new(#future))
            } else {
                future
            };
            quote! {
                #slot
                let #var = (move || #future,);
            }
        }
        Kind::Gate => gate_statements(names, id),
        Kind::ForEach | Kind::Loop | Kind::Workflow => nest::node_statements(names, id),
        Kind::Decision => {
            let state = Ident::new("__flow_state", Span::mixed_site());
            let inputs = uses.iter().map(
                |Use {
                     ident,
                     source,
                     optional,
                 }| {
                    let slot = names.slot(*source);
                    let index = names.pos[*source];
                    if *optional {
                        // `Option<Result<&T, &NodeError>>`, `None` when skipped.
                        quote!(let #ident = &#state.outcome_if_run(#slot, #index);)
                    } else {
                        quote!(let #ident = &#state.outcome(#slot, #index);)
                    }
                },
            );
            let test = match &node.patch {
                // A version marker's test is the run's: whether it started with the marker.
                Some(_) => {
                    let index = names.pos[id] as u32;
                    quote!(#state.patched(#index))
                }
                None => quote_spanned!(span=> { let __flow_test: bool = #expr; __flow_test }),
            };
            quote! {
                let #var = (#private::Decision, move |#state: &#private::RunState| -> bool {
                    #(#inputs)*
                    #(#hints)*
                    #test
                });
            }
        }
        // An instant node: the scheduler withdraws its target (completes its `ForEach`) when
        // it starts.
        Kind::Cancel | Kind::Complete => quote! {
            let #var = (#private::Decision, move |_: &#private::RunState| -> bool { true });
        },
        // Reads like an operation and puts the run's output in the cell; `false` only if an
        // input is missing, which the scheduler reports as the step's failure.
        Kind::Terminate => {
            let inputs = uses.iter().map(
                |Use {
                     ident,
                     source,
                     optional,
                 }| {
                    let slot = names.slot(*source);
                    if *optional {
                        quote!(let #ident = &#slot.get();)
                    } else {
                        quote!(let #ident = match #slot.get() {
                            ::core::option::Option::Some(__flow_value) => __flow_value,
                            ::core::option::Option::None => return false,
                        };)
                    }
                },
            );
            let output_ty = match &names.workflow.output_ty {
                Some(ty) => quote!(#ty),
                None => quote!(()),
            };
            let cell = term_cell();
            let value =
                quote_spanned!(span=> { let __flow_output: #output_ty = #expr; __flow_output });
            quote! {
                let #var = (#private::Decision, move |_: &#private::RunState| -> bool {
                    #(#inputs)*
                    #(#hints)*
                    #cell.put(#value);
                    true
                });
            }
        }
    }
}

/// The statements of a gate's node: started when the gate fires, it writes the winners to its
/// slot when the block is named (`won = Race {..}`: the winning arm; `got = Parallel(min = k)
/// {..}`: the completed arms in completion order).
fn gate_statements(names: &Names<'_>, id: usize) -> TokenStream {
    let checked = names.checked;
    let private = &names.private;
    let node = &checked.dag.nodes[id];
    let var = node_ident(names.pos[id]);
    let state = Ident::new("__flow_state", Span::mixed_site());
    let Some(name) = &node.name else {
        return quote!(let #var = (#private::Decision, move |_: &#private::RunState| -> bool { true }););
    };
    let index = gate_order(checked, &names.pos)
        .iter()
        .position(|&g| checked.dag.gates[g].node == id)
        .unwrap_or_default();
    let race = checked.dag.gates.iter().any(|g| g.node == id && g.race);
    let slot = names.slot(id);
    let (ty, write) = if race {
        (
            quote!(usize),
            quote!(if let ::core::option::Option::Some(&__flow_won) = #state.winners(#index).first() {
                #slot.put(__flow_won);
            }),
        )
    } else {
        (
            quote!(::std::vec::Vec<usize>),
            quote!(#slot.put(#state.winners(#index).to_vec());),
        )
    };
    let slot_decl = quote_spanned!(name.span()=> let #slot = &#private::Slot::<#ty>::new(););
    quote! {
        #slot_decl
        let #var = (#private::Decision, move |#state: &#private::RunState| -> bool {
            #write
            true
        });
    }
}
