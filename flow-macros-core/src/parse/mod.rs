//! Stage 1, the DSL → AST: [`workflow`] reads the header with syn, then splits each block's
//! body at its top-level commas and parses every step on its own. A malformed step is recorded
//! in the error context and skipped, so the next step's errors are still found. Steps keep the
//! user's tokens for spans.
//!
//! Parsing reports what is wrong with the input as written: syntax, option values, names that
//! cannot be bindings. Whether the steps fit together is the business of `check`. Step options
//! (`options`, `policy`, `rules`) are read into typed values when the graph is built, which
//! calls them here.
//!
//! Imports no other stage.

mod ast;
mod blocks;
mod calls;
mod duration;
mod header;
mod nest;
pub mod operation;
pub mod options;
mod pick;
pub mod policy;
pub mod rules;
mod signals;
mod steps;
mod tokens;

pub use ast::{
    BlockStep, CancelTarget, CondStep, DelayStep, GateStep, Loop, NestStep, OpStep, Param,
    PickStep, SignalStep, Step, What, Workflow,
};
pub use header::workflow;
