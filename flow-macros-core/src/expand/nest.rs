//! The code of a nest node (`(Nest, make)`, whose driver runs the body's instances) and the
//! `Control::nests` table with each body's graph.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::spanned::Spanned;
use syn::{Expr, Ident};

use super::compensations::compensations;
use super::names::Names;
use super::node;
use super::output::output;
use super::tables::graph_const;
use super::tokens::{INLINE_LIMIT, balanced, node_ident, respan, respan_deep};
use crate::check::Checked;
use crate::graph::Kind;
use crate::parse::{What, Workflow};

/// The names a nest's body is generated with: its own checked workflow, in the parent's
/// runtime crate path.
fn body_names<'a>(names: &Names<'_>, stub: &'a Workflow, checked: &'a Checked) -> Names<'a> {
    Names::new(stub, names.private.clone(), checked)
}

/// `Control::nests`: one `NestInfo` per nest node, in node order, each with its body's graph
/// (the child's `GRAPH` for a sub-workflow step) as a constant.
pub fn table(names: &Names<'_>) -> Vec<TokenStream> {
    let private = &names.private;
    let mut rows: Vec<(usize, TokenStream)> = names
        .checked
        .nests
        .iter()
        .map(|nest| {
            let at = names.pos[nest.node];
            let node = at as u32;
            let (kind, body) = match (&nest.step.what, &nest.body) {
                (What::Workflow(sub), _) => {
                    let child = &sub.child;
                    let span = child.span();
                    let body = quote::quote_spanned!(span=> &<#child as #private::Workflow>::GRAPH);
                    (quote!(Workflow), body)
                }
                (what, Some((stub, checked))) => {
                    let graph = graph_const(&body_names(names, stub, checked));
                    let kind = match what {
                        What::ForEach(_) => quote!(ForEach),
                        _ => quote!(Loop),
                    };
                    (
                        kind,
                        quote!({
                            const __FLOW_BODY: #private::Graph = #graph;
                            &__FLOW_BODY
                        }),
                    )
                }
                // A body with errors: no code is generated.
                (_, None) => (quote!(ForEach), quote!(&#private::Graph::__new("", &[], &[], #private::Plan::EMPTY))),
            };
            (
                at,
                quote!(#private::NestInfo { node: #node, kind: #private::NestKind::#kind, body: #body }),
            )
        })
        .collect();
    rows.sort_by_key(|(at, _)| *at);
    rows.into_iter().map(|(_, row)| row).collect()
}

/// The statements of a nest node: its output slot (when named), then `(Nest, make)`, where
/// `make` reads the node's inputs from the parent and runs the driver, whose body runs one
/// instance: the body's node statements and one `execute` of the body's graph, exactly as a
/// workflow's `__execute` does.
pub fn node_statements(names: &Names<'_>, id: usize) -> TokenStream {
    let checked = names.checked;
    let private = &names.private;
    let node = &checked.dag.nodes[id];
    let var = node_ident(names.pos[id]);
    let Some(nest) = checked.nests.iter().find(|n| n.node == id) else {
        return TokenStream::new();
    };
    let uses = &checked.uses[id];
    let reads: Vec<&Ident> = uses.iter().map(|u| &u.ident).collect();
    let inputs = uses.iter().map(|read| {
        let ident = &read.ident;
        let slot = names.slot(read.source);
        if read.optional {
            quote!(let #ident = &#slot.get();)
        } else {
            quote!(let #ident = #private::input(#slot)?;)
        }
    });
    let nest_ctx = Ident::new("__flow_nest", Span::mixed_site());
    // In a durable workflow the node's output is journaled with its completion (an
    // `on_failure = collect` output in a form of its own), and restored instead of running.
    let durable = names.workflow.durable.is_some();
    let collect = matches!(&nest.step.what, What::ForEach(each) if each.collect);
    // `min` with `rest = run`: the node completes at the settle while its driver runs on.
    let lingers = matches!(&nest.step.what, What::ForEach(each) if each.min.unwrap_or(0) > 0 && !each.rest_cancel);
    let complete = match (durable, collect) {
        (false, _) => quote!(complete_nest),
        (true, false) => quote!(complete_durable_nest),
        (true, true) => quote!(complete_durable_collect),
    };
    let (slot_decl, mut finish) = match &node.name {
        Some(name) => {
            let slot = names.slot(id);
            let span = name.span();
            (
                quote::quote_spanned!(span=> let #slot = &#private::Slot::new();),
                respan(
                    &quote!(#private::#complete(#slot, __flow_result)),
                    node.keyword.span(),
                ),
            )
        }
        None => (
            TokenStream::new(),
            quote!(#private::Result::map(__flow_result, ::core::mem::drop)),
        ),
    };
    let restore = match (durable, &node.name) {
        (false, _) => TokenStream::new(),
        (true, Some(_)) => {
            let slot = names.slot(id);
            let display = &node.display;
            let restored = match collect {
                true => {
                    quote!(#private::restore_collect(__flow_restore_slot, #display, __flow_restore_nest))
                }
                false => quote!(#private::restore_output(__flow_restore_slot, #display)),
            };
            // Spanned on the keyword, arguments and all (bound to plain locals first): an
            // output that cannot be stored is one error there.
            let restored = respan_deep(&restored, node.keyword.span());
            let restored = quote!({
                let __flow_restore_slot = #slot;
                let __flow_restore_nest = &#nest_ctx;
                let _ = __flow_restore_nest;
                #restored
            });
            // A `ForEach` or `Loop` restored whole: its instances' stored ends make its
            // summary, as if they had ended here.
            let summary = match nest.step.what {
                What::Workflow(_) => TokenStream::new(),
                _ => quote! {
                    if __flow_restored.is_ok() {
                        #private::restore_summary(&#nest_ctx);
                    }
                },
            };
            match lingers {
                // Its output restored, its driver runs again: the instances whose end was
                // stored come back from the store (and make its summary), the others run on.
                true => quote! {
                    if let ::core::option::Option::Some(__flow_restored) = #restored {
                        if __flow_restored.is_err() {
                            return __flow_restored;
                        }
                        #private::settle_restored(&#nest_ctx);
                    }
                },
                false => quote! {
                    if let ::core::option::Option::Some(__flow_restored) = #restored {
                        #summary
                        return __flow_restored;
                    }
                },
            }
        }
        (true, None) if lingers => quote! {
            if #private::restoring() {
                #private::settle_restored(&#nest_ctx);
            }
        },
        (true, None) => quote! {
            if #private::restoring() {
                return #private::Result::Ok(());
            }
        },
    };
    // `min` with `rest = run`: the driver puts the output in the slot itself, at the settle,
    // and the node completes then while its driver lingers.
    let put = match (&node.name, durable) {
        (Some(_), false) => {
            let slot = names.slot(id);
            quote!(move |__flow_output| #slot.put(__flow_output))
        }
        // Journaled with the node's completion, and not put again by a restored node's driver.
        (Some(_), true) => {
            let slot = names.slot(id);
            let settle = match collect {
                true => quote!(settle_durable_collect),
                false => quote!(settle_durable_nest),
            };
            quote!(move |__flow_output| #private::#settle(#slot, __flow_output))
        }
        (None, _) => quote!(::core::mem::drop),
    };
    // A durable nest's instance records its end, and a resumed run takes it from there
    // (`journaled_instance`), spanned on the nest's keyword: an output that cannot be stored
    // is an error there.
    let keyword = node.keyword.span();
    let journaled_instance = respan(
        &quote!(#private::journaled_instance(__flow_body, __flow_record, __flow_fingerprint, __flow_instance)),
        keyword,
    );
    let journaled = |fingerprint: TokenStream, instance: TokenStream| match durable {
        false => quote!(async move { #instance }),
        true => quote! {{
            let __flow_record = #private::instance_record(&__flow_opts);
            let __flow_fingerprint = match &__flow_record {
                ::core::option::Option::Some(_) => #fingerprint,
                ::core::option::Option::None => ::core::option::Option::None,
            };
            let __flow_instance = async move { #instance };
            #journaled_instance
        }},
    };
    let run = match (&nest.step.what, &nest.body) {
        (What::Workflow(sub), _) => {
            let child = &sub.child;
            let args: Vec<Expr> = sub
                .args
                .iter()
                .map(|arg| names.rewrite(arg, reads.iter().copied()))
                .collect();
            let input = match &args[..] {
                [one] => quote!(#one),
                _ => quote!((#(#args,)*)),
            };
            let span = child.span();
            let ended = quote! {
                #private::Result::map_err(#nest_ctx.ended(0, __flow_outcome), |__flow_error| #private::NodeError::Workflow(::std::boxed::Box::new(__flow_error)))
            };
            match durable {
                // In a durable workflow the child is a durable run of its own (spanned on the
                // child's name: a child that is not durable is an error there).
                true => {
                    let spanned = respan(private, span);
                    let run = quote::quote_spanned!(span=> #spanned::durable_child::<#child>(&#nest_ctx, #input));
                    let awaited = quote::quote_spanned!(span=> #run.await);
                    quote! {
                        match #awaited {
                            #private::Result::Ok(__flow_outcome) => #ended,
                            #private::Result::Err(__flow_error) => #private::Result::Err(__flow_error),
                        }
                    }
                }
                false => {
                    let run = quote::quote_spanned!(span=> <#child as #private::Workflow>::__execute(#nest_ctx.instance(0), #input));
                    quote! {
                        let __flow_outcome = #run.await;
                        #ended
                    }
                }
            }
        }
        (what, Some((stub, body_checked))) => {
            let body = body_names(names, stub, body_checked);
            let instance = instance(&body);
            match what {
                What::ForEach(each) => {
                    let source = names.rewrite(&each.source, reads.iter().copied());
                    let span = each.source.span();
                    // On the user's tokens: an error about the source points at it.
                    let private = &respan(private, span);
                    // A durable source also gives how its items are fingerprinted (a
                    // function pointer, so that its bound is asked once, on the source).
                    let source = match (durable, each.stream) {
                        (false, _) => quote!(#source),
                        (true, false) => quote::quote_spanned!(span=> {
                            let (__flow_source, __flow_of) = #private::durable_source(#source);
                            __flow_fingerprint_of = __flow_of;
                            __flow_source
                        }),
                        (true, true) => quote::quote_spanned!(span=> {
                            let (__flow_source, __flow_of) = #private::durable_stream_source(#source);
                            __flow_fingerprint_of = __flow_of;
                            __flow_source
                        }),
                    };
                    let (mut driver, source) = match (each.stream, each.collect) {
                        (false, false) => (
                            quote!(for_each),
                            quote::quote_spanned!(span=> #private::for_each_source(#source)),
                        ),
                        (false, true) => (
                            quote!(for_each_collect),
                            quote::quote_spanned!(span=> #private::for_each_source(#source)),
                        ),
                        (true, false) => (
                            quote!(for_each_stream),
                            quote::quote_spanned!(span=> #private::for_each_stream_source(#source)),
                        ),
                        (true, true) => (
                            quote!(for_each_stream_collect),
                            quote::quote_spanned!(span=> #private::for_each_stream_source(#source)),
                        ),
                    };
                    let max = each.max_concurrency.unwrap_or(0) as usize;
                    let min = each.min.unwrap_or(0) as usize;
                    let rest = each.rest_cancel;
                    if lingers {
                        let name = quote::format_ident!("{}_into", driver.to_string());
                        driver = quote!(#name);
                        finish = quote!(__flow_result);
                    }
                    let put = lingers.then_some(quote!(, #put));
                    let item = &each.item;
                    let config = quote!(#private::ForEachConfig { max_concurrency: #max, min: #min, rest_cancel: #rest });
                    let fingerprint = quote!(__flow_fingerprint_of(&__flow_item));
                    let instance = journaled(
                        fingerprint,
                        quote! {
                            let #item = &__flow_item;
                            #instance
                        },
                    );
                    let body = quote! {
                        move |__flow_item, __flow_opts: #private::RunSetup| #instance
                    };
                    // The driver's call on the source too: its bound on the items repeats the
                    // source's error, which rustc then shows once.
                    let call = quote::quote_spanned!(span=> #private::#driver(#nest_ctx, __flow_items, #config, #body #put));
                    let declare = durable.then(|| quote!(let __flow_fingerprint_of;));
                    quote! {
                        #declare
                        let __flow_items = #source;
                        #call.await
                    }
                }
                What::Loop(repeat) => {
                    let max = repeat.max;
                    let stop = repeat.stop_at_max;
                    let config = quote!(#private::LoopConfig { max: #max, stop_at_max: #stop });
                    let prev = repeat
                        .prev
                        .as_ref()
                        .map(|prev| quote!(let #prev = &__flow_prev.as_ref();));
                    let instance = journaled(
                        quote!(::core::option::Option::None),
                        quote! {
                            #prev
                            #instance
                        },
                    );
                    let body = quote! {
                        move |__flow_prev, __flow_opts: #private::RunSetup| #instance
                    };
                    if repeat.while_ {
                        let mut readable: Vec<&Ident> = reads.clone();
                        readable.extend(repeat.prev.as_ref());
                        let test = names.rewrite(&repeat.test, readable);
                        let span = repeat.test.span();
                        let test = quote::quote_spanned!(span=> { let __flow_test: bool = #test; __flow_test });
                        let prev = repeat
                            .prev
                            .as_ref()
                            .map(|prev| quote!(let #prev = &__flow_prev;));
                        // The body first, so that its output type is known when the test
                        // (which comes first in the driver's call) reads `prev`.
                        quote! {
                            fn __flow_while_body<__FlowB, __FlowF, __FlowO>(body: __FlowB) -> __FlowB
                            where
                                __FlowB: ::core::ops::Fn(::core::option::Option<__FlowO>, #private::RunSetup) -> __FlowF,
                                __FlowF: #private::Future<Output = #private::Outcome<__FlowO>>,
                            {
                                body
                            }
                            let __flow_iteration = __flow_while_body(#body);
                            #private::repeat_while(
                                #nest_ctx,
                                #config,
                                move |__flow_prev| -> bool { #prev #test },
                                __flow_iteration,
                            ).await
                        }
                    } else {
                        quote!(#private::repeat_until(#nest_ctx, #config, #body).await)
                    }
                }
                What::Workflow(_) => TokenStream::new(),
            }
        }
        // A body with errors: no code is generated.
        (_, None) => return TokenStream::new(),
    };
    let body_graph = match nest.step.what {
        What::Workflow(_) => TokenStream::new(),
        _ => quote!(let __flow_body: &'static #private::Graph = #nest_ctx.body();),
    };
    // Unused bindings that let rustc suggest a node of the workflow for a misspelled name in
    // the body (`check::Checked::hints`).
    let hints = checked.hints[id].iter().map(
        |hint| quote!(#[allow(unused_variables)] let #hint = ::core::marker::PhantomData::<()>;),
    );
    quote! {
        #slot_decl
        let #var = (#private::Nest, move |#nest_ctx: #private::NestCtx| async move {
            #restore
            #(#inputs)*
            #(#hints)*
            #body_graph
            let __flow_result = { #run };
            #finish
        });
    }
}

/// One instance of a body: its nodes' statements, one `execute` of its graph with the
/// instance's options, and its output (for an `until` loop, with the test's answer).
fn instance(body: &Names<'_>) -> TokenStream {
    let checked = body.checked;
    let private = &body.private;
    let statements: Vec<TokenStream> = checked
        .order
        .iter()
        .map(|&id| node::node_statements(body, id))
        .collect();
    let tree = balanced(
        &(0..checked.order.len())
            .map(|p| {
                let node = node_ident(p);
                quote!(#node)
            })
            .collect::<Vec<_>>(),
    );
    // A body that is one `Operation` (without `compensate`) runs through `execute_one`,
    // which goes without the scheduler when nothing observes the instance and the step has
    // no options (the runtime's `one.rs` states the rule).
    let one_operation = matches!(&checked.order[..], [id] if checked.dag.nodes[*id].kind == Kind::Operation)
        && checked.compensations.is_empty();
    let execute = if one_operation {
        quote!(execute_one)
    } else if checked.order.len() <= INLINE_LIMIT {
        quote!(execute)
    } else {
        quote!(execute_in_arena)
    };
    let output = output(body);
    let (undo, tree) = compensations(body, quote!(__flow_opts), tree);
    quote! {
        #(#statements)*
        #undo
        let __flow_finished = #private::#execute(__flow_body, __flow_opts, #tree).await;
        __flow_finished.output(move || #output)
    }
}
