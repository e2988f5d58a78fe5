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
//! # pub struct Summary { name: String, spent: u64 }
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
    Outcome, Report, WorkflowError,
};

/// One run of a workflow, to configure and start: `MyWorkflow::runner()` makes one.
///
/// ```
/// use flow::prelude::*;
/// # #[derive(Debug)]
/// # struct Unavailable;
/// # impl std::fmt::Display for Unavailable {
/// #     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str("unavailable") }
/// # }
/// # impl std::error::Error for Unavailable {}
/// # pub struct Shop;
/// # async fn price(_: &Shop, id: u64) -> Result<u64, Unavailable> { Ok(id * 100) }
/// # async fn tax(_: &Shop, price: &u64) -> Result<u64, Unavailable> { Ok(price / 5) }
///
/// workflow! {
///     /// Prices an item with its tax.
///     pub Quote(shop: &Shop, id: u64) -> u64 {
///         Sequential {
///             net = Operation(price(shop, id)),
///             vat = Operation(tax(shop, &net)),
///         }
///         => net + vat
///     }
/// }
///
/// # futures::executor::block_on(async {
/// let shop = Shop;
/// // Several parameters travel as a tuple; one as itself; none as `()`.
/// let outcome = Quote::runner()
///     .failure_policy(FailurePolicy::FailFast)
///     .max_concurrency(std::num::NonZeroUsize::MIN)
///     .record(true)
///     .execute((&shop, 3))
///     .await;
/// assert_eq!(outcome.result?, 360);
/// assert_eq!(outcome.report.status("vat"), Some(NodeStatus::Completed));
///
/// // `run` returns the result alone, as `Quote::run(&shop, 3)` does.
/// let token = CancelToken::new();
/// let total = Quote::runner().cancel_on(token).run((&shop, 3)).await?;
/// assert_eq!(total, 360);
/// # Ok::<(), WorkflowError>(())
/// # }).unwrap();
/// ```
pub use flow_runtime::Runner;
pub use flow_runtime::Workflow;

/// Everything a workflow file needs: `use flow::prelude::*;`.
pub mod prelude {
    pub use crate::{
        CancelToken, FailurePolicy, NodeError, NodeStatus, Outcome, Report, Runner, Workflow,
        WorkflowError, operation, workflow,
    };
}

/// The interface between the code `workflow!` and `#[operation]` generate and the runtime.
///
/// **Not a public API**: it may change in any release, patch releases included. Generated code
/// names everything through this module (`::flow::__private::…`, or `path::__private` under
/// `#[flow(crate = path)]`), so users depend on `flow` alone.
#[doc(hidden)]
pub mod __private {
    pub use flow_runtime::__private::*;
}
