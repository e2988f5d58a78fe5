//! The logic of flow's macros, as a plain library: the proc-macro crate `flowdag-macros` wraps
//! these functions in one-line entry points, and tests and benches call them directly. Use the
//! macros through the `flow` crate; this crate's interface follows `flowdag-macros`, not semver.
//!
//! `workflow!` runs a pipeline of four stages, one folder each: `parse` turns the DSL into an
//! AST that keeps the user's tokens, `graph` builds the DAG, `check` runs every check and
//! collects every error, and `expand` writes the Rust (and drives the pipeline).
//!
//! ```
//! let input: proc_macro2::TokenStream = "Hello() { Operation(greet()) }".parse().unwrap();
//! let output = flowdag_macros_core::workflow(input).to_string();
//! assert!(!output.contains("compile_error"));
//! ```

// The layers, bottom up. A module imports from its own layer and from the layers it may
// import, never from a layer above it. `tests/layers.rs` holds the same table and fails on an
// import (`use crate::..`, a `crate::..` path in code, `super::..`) that breaks it.
//
// | layer  | modules           | may import                |
// |--------|-------------------|---------------------------|
// | base   | `ctxt`, `suggest` | -                         |
// | parse  | `parse`           | base                      |
// | graph  | `graph`           | base, parse               |
// | check  | `check`           | base, parse, graph        |
// | expand | `expand`          | base, parse, graph, check |
//
// `lib.rs` itself declares the modules, and its entry points call `expand`.
//
// A feature (signals, rules, nests, `Pick`, options) has a file in each stage it takes part
// in: `parse/signals.rs` reads its syntax, `check/signals.rs` checks it, `expand/signals.rs`
// writes its code. Inside a stage, files call one another where the language is recursive: a
// block holds steps and a nest's body is a workflow, so parsing, building, checking and
// writing one goes through the stage's own entry point again.

mod check;
mod ctxt;
mod expand;
mod graph;
mod parse;
mod suggest;

use proc_macro2::TokenStream;

/// Expands the body of a `workflow!` invocation: the generated code, or every error found as
/// `compile_error!` invocations beside a best-effort skeleton of the workflow type.
pub fn workflow(input: TokenStream) -> TokenStream {
    expand::workflow(input)
}

/// Expands `#[operation(args)]` on `item`: the function with its defaults attached, or the
/// errors beside the function as written.
pub fn operation(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::operation(args, item)
}
