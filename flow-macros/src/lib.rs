//! The macros of [flow](https://docs.rs/flowdag). Use them through the `flowdag` crate.
//!
//! Each entry point is one line: the logic lives in the plain library `flowdag-macros-core`, so
//! tests and benches can call it outside the compiler.

use proc_macro::TokenStream;

/// Declares a workflow: a static DAG of async steps, checked at compile time.
///
/// See the `flowdag` crate and `docs/dsl.md` for the language.
#[proc_macro]
pub fn workflow(input: TokenStream) -> TokenStream {
    flowdag_macros_core::workflow(input.into()).into()
}

/// Marks an `async fn` as a workflow operation, with defaults a step can override.
///
/// See the `flowdag` crate and `docs/dsl.md`.
#[proc_macro_attribute]
pub fn operation(args: TokenStream, item: TokenStream) -> TokenStream {
    flowdag_macros_core::operation(args.into(), item.into()).into()
}
