//! # flow
//!
//! Write a workflow over ordinary `async fn`s as `Sequential` / `Parallel` / `Conditional` /
//! `Operation` blocks; the [`workflow!`] macro turns it into a static DAG at compile time,
//! rejects invalid graphs with errors on your own tokens, and generates the scheduling tables;
//! a small runtime runs the nodes concurrently inside the caller's task.
//!
//! ```
//! use flow::prelude::*;
//!
//! #[derive(Debug)]
//! struct NotFound;
//! impl std::fmt::Display for NotFound {
//!     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
//!         f.write_str("not found")
//!     }
//! }
//! impl std::error::Error for NotFound {}
//!
//! async fn price(item: &str) -> Result<u32, NotFound> {
//!     match item {
//!         "apple" => Ok(3),
//!         "pear" => Ok(4),
//!         _ => Err(NotFound),
//!     }
//! }
//!
//! async fn total(a: &u32, b: &u32) -> Result<u32, NotFound> {
//!     Ok(a + b)
//! }
//!
//! workflow! {
//!     /// Prices two items at once, then adds them up.
//!     pub Basket(first: &str, second: &str) -> u32 {
//!         Sequential {
//!             Parallel {
//!                 a = Operation(price(first)),
//!                 b = Operation(price(second)),
//!             },
//!             sum = Operation(total(&a, &b)),
//!         }
//!         => sum
//!     }
//! }
//!
//! # futures::executor::block_on(async {
//! let sum = Basket::run("apple", "pear").await?;
//! assert_eq!(sum, 7);
//!
//! let err = Basket::run("apple", "plum").await.unwrap_err();
//! assert_eq!(err.failed().next().map(|f| f.node), Some("b"));
//! # Ok::<(), flow::WorkflowError>(())
//! # }).unwrap();
//! ```
//!
//! See `docs/dsl.md` for the whole language and `docs/semantics.md` for what a run does.

pub use flow_macros::{operation, workflow};
pub use flow_runtime::{
    BoxError, Edge, EdgeKind, Graph, IntoNodeResult, NodeError, NodeFailure, NodeInfo, NodeKind,
    NodeReport, NodeStatus, Outcome, Report, RunOptions, WorkflowError,
};

/// Everything a workflow file needs: `use flow::prelude::*;`.
pub mod prelude {
    pub use crate::{
        NodeError, NodeStatus, Outcome, Report, WorkflowError, operation, workflow,
    };
}

/// Paths used by the code `workflow!` generates. Not a public API: it may change in any release.
#[doc(hidden)]
pub mod __private {
    pub use flow_runtime::*;
    pub use std::{
        future::Future, option::Option, pin::Pin, result::Result, stringify, time::Duration,
    };
}
