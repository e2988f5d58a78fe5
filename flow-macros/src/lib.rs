//! The macros of [flow](https://docs.rs/flow). Use them through the `flow` crate.
//!
//! `workflow!` runs a pipeline whose stages are this crate's modules: `parse` turns the DSL
//! into an AST that keeps the user's tokens, `graph` builds the DAG, `validate` runs every
//! check and collects every error, and `expand` writes the Rust.

mod ctxt;
mod expand;
mod graph;
mod names;
mod operation;
mod options;
mod parse;
mod validate;

#[cfg(test)]
mod fuzz;

use proc_macro::TokenStream;

/// Declares a workflow: a static DAG of async steps, checked at compile time.
///
/// See the `flow` crate and `docs/dsl.md` for the language.
#[proc_macro]
pub fn workflow(input: TokenStream) -> TokenStream {
    expand::workflow(input.into()).into()
}

/// Marks an `async fn` as a workflow operation, with defaults a step can override.
///
/// See the `flow` crate and `docs/dsl.md`.
#[proc_macro_attribute]
pub fn operation(args: TokenStream, item: TokenStream) -> TokenStream {
    operation::expand(args.into(), item.into()).into()
}
