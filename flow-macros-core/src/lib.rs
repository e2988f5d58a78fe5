//! The logic of flow's macros, as a plain library: the proc-macro crate `flowdag-macros` wraps
//! these functions in one-line entry points, and tests and benches call them directly. Use the
//! macros through the `flowdag` crate; this crate's interface follows `flowdag-macros`, not semver.
//!
//! `workflow!` runs a pipeline whose stages are this crate's modules: `parse` turns the DSL
//! into an AST that keeps the user's tokens, `graph` builds the DAG, `validate` runs every
//! check and collects every error, and `expand` writes the Rust.
//!
//! ```
//! let input: proc_macro2::TokenStream = "Hello() { Operation(greet()) }".parse().unwrap();
//! let output = flowdag_macros_core::workflow(input).to_string();
//! assert!(!output.contains("compile_error"));
//! ```

mod control;
mod ctxt;
mod expand;
mod generics;
mod graph;
mod names;
mod nest;
mod operation;
mod options;
mod parse;
mod pick;
mod rules;
mod signals;
mod suggest;
mod validate;

use proc_macro2::TokenStream;

/// Expands the body of a `workflow!` invocation: the generated code, or every error found as
/// `compile_error!` invocations beside a best-effort skeleton of the workflow type.
pub fn workflow(input: TokenStream) -> TokenStream {
    expand::workflow(input)
}

/// Expands `#[operation(args)]` on `item`: the function with its defaults attached, or the
/// errors beside the function as written.
pub fn operation(args: TokenStream, item: TokenStream) -> TokenStream {
    operation::expand(args, item)
}
