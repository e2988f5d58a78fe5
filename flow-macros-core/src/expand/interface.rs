//! The items every workflow has: the struct, its `Workflow` impl and the inherent shortcuts;
//! and the skeleton written beside errors.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::Ident;
use syn::spanned::Spanned;

use super::durable::durable_items;
use super::generics::declaration;
use super::input::Input;
use super::tokens::private_path;
use crate::parse::Workflow;

/// The items every workflow has, around its graph and its run's body: the struct, its
/// `Workflow` impl, and the inherent shortcuts `GRAPH`, `runner()` and `run(..)`. The builder
/// methods are the runtime's `Runner`'s, written once for every workflow.
pub fn interface(
    workflow: &Workflow,
    input: &Input,
    private: &TokenStream,
    (graph, body, run, keys): (TokenStream, TokenStream, TokenStream, TokenStream),
    compensates: TokenStream,
) -> TokenStream {
    let name = &workflow.name;
    let vis = &workflow.vis;
    let attrs = &workflow.attrs;
    let output_ty = match &workflow.output_ty {
        Some(ty) => quote!(#ty),
        None => quote!(()),
    };
    let Input {
        ty: input_ty,
        lifetime,
        pattern,
        params,
        run_params,
        marked,
    } = input;
    let declaration = declaration(workflow, &marked.iter().collect::<Vec<_>>());
    let (impl_generics, ty_generics, where_clause) = workflow.generics.split_for_impl();
    // A generic workflow's parameters outlive the run's borrow (`Workflow::Input`).
    let outlives = match workflow.generics.params.is_empty() {
        true => TokenStream::new(),
        false => quote!(where Self: #lifetime),
    };
    let options = Ident::new("__flow_options", Span::mixed_site());
    // On the user's tokens: a `pub` workflow whose parameter or output type is private is
    // rustc's "private type in public interface", which should point at the type.
    let input_span = workflow
        .params
        .first()
        .map_or_else(|| name.span(), |p| p.ty.span());
    let input_item = quote_spanned!(input_span=> type Input<#lifetime> = #input_ty #outlives;);
    let output_span = workflow
        .output_ty
        .as_ref()
        .map_or_else(|| name.span(), |ty| ty.span());
    let output_item = quote_spanned!(output_span=> type Output = #output_ty;);
    let run_doc = format!(
        "Runs `{name}` with default options and returns its output, or a `WorkflowError` that lists every failed and aborted node. `{name}::runner()` sets options and returns a report."
    );
    // With a declared lifetime, `run` returns the runner's future itself: an `async fn` would
    // hold it in a coroutine whose `Send` rustc cannot prove ("implementation of `Workflow` is
    // not general enough", rust-lang/rust#100013), so `tokio::spawn(W::run(..))` would not
    // compile. Its borrows are the run's lifetime, named, as in `Input`, so that the future
    // can capture them. Otherwise `async fn`.
    let result_ty = quote!(#private::Result<#output_ty, #private::WorkflowError>);
    let run_fn = match workflow.generics.lifetimes().next() {
        None => quote! {
            #vis async fn run(#(#params),*) -> #result_ty {
                #run.await
            }
        },
        Some(_) => quote! {
            #vis fn run<#lifetime>(#(#run_params),*) -> impl #private::Future<Output = #result_ty> + #lifetime
            where
                Self: #lifetime,
            {
                #run
            }
        },
    };
    let durable = match &workflow.durable {
        Some(_) => durable_items(workflow, input, private, &output_ty, compensates),
        None => TokenStream::new(),
    };
    quote! {
        #(#attrs)*
        #declaration

        #durable

        #[allow(unused_variables, unused_braces, unused_parens, clippy::all)]
        impl #impl_generics #private::Workflow for #name #ty_generics #where_clause {
            const GRAPH: #private::Graph = #graph;
            #input_item
            #output_item

            fn __execute<#lifetime>(
                #options: #private::RunSetup,
                #pattern: <Self as #private::Workflow>::Input<#lifetime>,
            ) -> impl #private::Future<Output = #private::Outcome<#output_ty>> #outlives {
                #body
            }
        }

        #[allow(unused_variables, dead_code, clippy::all)]
        impl #impl_generics #name #ty_generics #where_clause {
            /// The static graph of this workflow, built at compile time: nodes, edges and
            /// scheduling tables. Draw it with `to_dot()` or `to_mermaid()`.
            #vis const GRAPH: #private::Graph = <Self as #private::Workflow>::GRAPH;

            /// A runner with default options: set options (`max_concurrency`, `failure_policy`,
            /// `cancel_on`, `deadline`, `observer`, `record`), then `execute` or `run` it with
            /// the workflow's parameters (`()` for none, the value for one, a tuple for several).
            #vis fn runner() -> #private::Runner<Self> {
                #private::Runner::new()
            }

            #[doc = #run_doc]
            #run_fn

            #keys
        }
    }
}

/// The workflow type with its interface, but no graph and no body: emitted beside errors so
/// that code using the workflow still type-checks and only the real mistakes are reported. Its
/// run is the runtime's `unreachable_run` (a crate with errors never runs).
pub fn skeleton(workflow: &Workflow, input: &Input, keys: TokenStream) -> TokenStream {
    let private = private_path(workflow);
    let name = &workflow.name;
    let graph = quote!(#private::Graph::__new(
        ::core::stringify!(#name),
        &[],
        &[],
        #private::Plan::EMPTY,
    ));
    let body = quote!(#private::unreachable_run());
    // Not through the runner: a parameter type may be one `Input` cannot hold.
    let run = quote!(async { #private::unreachable_run().await.result });
    interface(
        workflow,
        input,
        &private,
        (graph, body, run, keys),
        quote!(false),
    )
}
