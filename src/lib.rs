//! # flow
//!
//! Write a workflow over ordinary `async fn`s as `Sequential` / `Parallel` / `Conditional` /
//! `Operation` steps; the [`workflow!`] macro turns it into a static DAG at compile time,
//! rejects invalid graphs with errors on your own tokens, and generates the scheduling tables;
//! a small runtime runs the steps concurrently inside the caller's task.
//!
//! ```
//! use flow::prelude::*;
//! # use std::convert::Infallible;
//! #
//! # #[derive(Debug)]
//! # struct NotFound(u64);
//! # impl std::fmt::Display for NotFound {
//! #     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
//! #         write!(f, "no user with id {}", self.0)
//! #     }
//! # }
//! # impl std::error::Error for NotFound {}
//! # struct User { name: String }
//! # struct Order { total: u64 }
//! # #[derive(Clone, Debug, PartialEq)]
//! # struct Summary { name: String, spent: u64 }
//! # async fn fetch_user(id: u64) -> Result<User, NotFound> {
//! #     if id == 7 { Ok(User { name: "Ada".into() }) } else { Err(NotFound(id)) }
//! # }
//! # async fn fetch_orders(_user_id: u64) -> Result<Vec<Order>, NotFound> {
//! #     Ok(vec![Order { total: 1250 }, Order { total: 800 }])
//! # }
//! # async fn summarize(user: &User, orders: &[Order]) -> Result<Summary, Infallible> {
//! #     Ok(Summary { name: user.name.clone(), spent: orders.iter().map(|o| o.total).sum() })
//! # }
//!
//! workflow! {
//!     /// Loads a user and their orders in parallel, then summarises them.
//!     pub UserSummary(user_id: u64) -> Summary {
//!         Sequential {
//!             Parallel {
//!                 user = Operation(fetch_user(user_id)),
//!                 orders = Operation(fetch_orders(user_id)),
//!             },
//!             summary = Operation(summarize(&user, &orders)),
//!         }
//!         => summary.clone()
//!     }
//! }
//!
//! # futures::executor::block_on(async {
//! // fetch_user, fetch_orders and summarize are plain `async fn`s returning `Result<T, E>`.
//! let summary = UserSummary::run(7).await?;
//! assert_eq!(summary.spent, 2050);
//!
//! // The runner returns the result together with a report of every step.
//! let outcome = UserSummary::runner().execute(404).await;
//! assert_eq!(outcome.report.status("summary"), Some(NodeStatus::Aborted));
//! let error = outcome.result.unwrap_err();
//! assert_eq!(error.failed().next().map(|f| f.node), Some("user"));
//!
//! // The graph is a constant, built at compile time.
//! println!("{}", UserSummary::GRAPH.to_mermaid());
//! # Ok::<(), flow::WorkflowError>(())
//! # }).unwrap();
//! ```
//!
//! See `docs/dsl.md` for the whole language and `docs/semantics.md` for what a run does.

pub use flow_macros::{operation, workflow};
/// The items of optional features (`progress`: `Progress`, `ProgressBar`), whichever are on.
// With no feature on the module is empty and the glob imports nothing.
#[allow(unused_imports)]
pub use flow_runtime::features::*;
pub use flow_runtime::{
    AppendError, ChannelObserver, Event, EventKind, EventLog, EventStream, Observer, Recorder,
    RunId, TraceColumn, TraceMatrix, channel,
};
pub use flow_runtime::{
    Backoff, BoxError, CancelReason, CancelToken, Edge, EdgeKind, FailurePolicy, Graph,
    IntoNodeResult, NodeError, NodeFailure, NodeInfo, NodeKind, NodePolicy, NodeReport, NodeStatus,
    Outcome, Report, RunOptions, WorkflowError,
};

/// Everything a workflow file needs: `use flow::prelude::*;`.
pub mod prelude {
    pub use crate::{
        CancelToken, FailurePolicy, NodeError, NodeStatus, Outcome, Report, WorkflowError,
        operation, workflow,
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
