//! Stage 4, the checked DAG → Rust, and the driver of the pipeline ([`workflow`]).
//!
//! The generated code is small per node: a closure that binds the node's inputs and builds its
//! future from the user's expression. Everything else is constant tables (the `GRAPH`) and one
//! call into the runtime's scheduler, which is ordinary code compiled once. Generated code names
//! the runtime only through `::flowdag::__private` (or `path::__private` under
//! `#[flow(crate = path)]`), and builds its tables through `const fn`s, never struct literals.
//!
//! Per workflow it emits a unit struct (a generic one for a generic workflow: `generics.rs`),
//! its `Workflow` impl (the graph, and the run's body) and three inherent shortcuts (`GRAPH`,
//! `runner()`, `run(..)`); the builder methods are the runtime's `Runner`'s. When there were
//! errors it writes them beside a skeleton of the workflow type, so that code calling the
//! workflow still type-checks and only the real mistakes are reported.
//!
//! Imports `parse`, `graph` and `check`.

mod compensations;
mod control;
mod durable;
mod gates;
mod generics;
mod input;
mod interface;
mod labels;
mod names;
mod nest;
mod node;
mod operation;
mod output;
mod plan;
mod policy;
mod rules;
mod signals;
mod tables;
mod tokens;

pub use operation::operation;

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::Ident;

use self::compensations::compensations;
use self::input::Input;
use self::interface::{interface, skeleton};
use self::names::Names;
use self::node::node_statements;
use self::output::{output, term_cell};
use self::tables::graph_const;
use self::tokens::{INLINE_LIMIT, balanced, node_ident, private_path};
use crate::check::{self, Checked};
use crate::ctxt::Ctxt;
use crate::graph::{self, Kind};
use crate::parse::{self, Workflow};

/// Expands one `workflow!` invocation: generated code, or every error found, beside a
/// best-effort skeleton of the workflow type so that one mistake does not cascade.
pub fn workflow(input: TokenStream) -> TokenStream {
    let mut cx = Ctxt::default();
    let mut workflow = match parse::workflow(input, &mut cx) {
        Ok(workflow) => workflow,
        Err(error) => {
            cx.push(error);
            return errors(cx);
        }
    };
    check::header::check(&mut workflow, &mut cx);
    let input = Input::new(&workflow);
    let dag = graph::build(&workflow, &mut cx);
    let declared = check::signals::declared(&dag, &mut cx);
    let keys = signals::keys(
        &declared,
        &workflow.vis,
        &private_path(&workflow),
        workflow.durable.is_some(),
    );
    let checked = check::check(&workflow, dag, &mut cx);
    if checked.is_some() && workflow.durable.is_some() {
        check::durable::check(&workflow, &mut cx);
    }
    match (checked, cx.has_errors()) {
        (Some(checked), false) => generate(&workflow, &checked, &input, keys),
        _ => {
            let mut out = errors(cx);
            out.extend(skeleton(&workflow, &input, keys));
            out
        }
    }
}

/// Every error of `cx`, as `compile_error!` invocations.
fn errors(cx: Ctxt) -> TokenStream {
    match cx.into_error() {
        Some(error) => error.to_compile_error(),
        None => quote!(::core::compile_error!("flow: the workflow could not be expanded");),
    }
}

/// The code of a checked workflow.
fn generate(
    workflow: &Workflow,
    checked: &Checked,
    input: &Input,
    keys: TokenStream,
) -> TokenStream {
    let names = Names::new(workflow, private_path(workflow), checked);
    let private = &names.private;
    let param_names: Vec<&Ident> = workflow.params.iter().map(|p| &p.name).collect();

    // One statement per slot and per node, each slot right before the node that fills it, then
    // one call with the tuple tree of the nodes (see `node_statements`).
    let statements: Vec<TokenStream> = checked
        .order
        .iter()
        .map(|&id| node_statements(&names, id))
        .collect();
    let tree = balanced(
        &(0..checked.order.len())
            .map(|p| {
                let node = node_ident(p);
                quote!(#node)
            })
            .collect::<Vec<_>>(),
    );
    // Small workflows keep every node's future inline (no allocation per node); large ones put
    // them in one arena per run, so the run's future does not hold a thousand.
    let execute = if checked.order.len() <= INLINE_LIMIT {
        quote!(execute)
    } else {
        quote!(execute_in_arena)
    };
    let graph = graph_const(&names);
    let output = output(&names);
    // A workflow with a `Terminate` step keeps the output it gives in a cell, which the output
    // expression takes first.
    let terminates = checked
        .order
        .iter()
        .any(|&id| checked.dag.nodes[id].kind == Kind::Terminate);
    let (term_cell, output) = if terminates {
        let cell = term_cell();
        let output_ty = match &workflow.output_ty {
            Some(ty) => quote!(#ty),
            None => quote!(()),
        };
        (
            quote!(let #cell = &#private::TermCell::<#output_ty>::new();),
            quote!(match #cell.take() {
                ::core::option::Option::Some(__flow_value) => #private::Result::Ok(__flow_value),
                ::core::option::Option::None => #output,
            }),
        )
    } else {
        (TokenStream::new(), output)
    };
    let options = Ident::new("__flow_options", Span::mixed_site());
    // Only a workflow with `Signal` steps has a mailbox.
    let mailbox = match checked.dag.nodes.iter().any(|n| n.kind == Kind::Signal) {
        true => signals::mailbox_statement(private),
        false => TokenStream::new(),
    };

    let (undo, tree) = compensations(&names, quote!(#options), tree);
    let body = quote! {
        async move {
            #(let #param_names = &#param_names;)*
            #mailbox
            #term_cell
            #(#statements)*
            #undo
            let __flow_finished = #private::#execute(
                &<Self as #private::Workflow>::GRAPH, #options, #tree,
            ).await;
            __flow_finished.output(move || #output)
        }
    };
    // `run`'s parameters, passed on as the input value: the same names as the pattern.
    let value = &input.pattern;
    let run = quote!(#private::Runner::<Self>::new().run(#value));
    // Whether a run of it has anything to undo when it is cancelled: a durable parent skips
    // the compensation of a child run of it otherwise.
    let own = !checked.compensations.is_empty();
    let private = &names.private;
    let children = self::compensations::children(&names)
        .into_iter()
        .map(|(_, child)| quote!(<#child as #private::DurableWorkflow>::__COMPENSATES));
    let compensates = quote!(#own #(|| #children)*);
    interface(
        workflow,
        input,
        &names.private,
        (graph, body, run, keys),
        compensates,
    )
}
