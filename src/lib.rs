//! # flow
//!
//! Write a workflow over ordinary `async fn`s as `Sequential` / `Parallel` / `Conditional` /
//! `Operation` steps; the [`workflow!`] macro turns it into a static DAG at compile time,
//! rejects invalid graphs with errors on your own tokens, and generates the scheduling tables;
//! a small runtime runs the steps concurrently inside the caller's task.
//!
//! ```
//! use flowdag::prelude::*;
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
//! # Ok::<(), flowdag::WorkflowError>(())
//! # }).unwrap();
//! ```
//!
//! Beyond a fixed graph, `ForEach(item in expr, max_concurrency = N) { .. }` runs a body once
//! per item known at run time, `Loop(max = N) { .. } until (test)` repeats one, and
//! `Workflow(Child(args))` runs another workflow as one step; their instances' events and
//! reports nest in the run's.
//!
//! [`workflow!`] documents the whole language (its page is `docs/dsl.md`); what a run does,
//! statuses, failure propagation and skipping, nested graphs, is in `docs/semantics.md`.

/// Turns a block of `Sequential` / `Parallel` / `Conditional` / `Operation` steps (and `Race`,
/// `Pick`, `Signal`, `Delay`, `Cancel`, `Terminate`, `ForEach`, `Loop`, `Workflow`,
/// `Complete`) into a workflow type checked at compile time.
///
/// The rest of this page is the language reference, `docs/dsl.md` in the repository.
///
#[doc = include_str!("../docs/dsl.md")]
pub use flowdag_macros::workflow;

/// Gives an operation defaults (`name`, `timeout`, `retries`, `backoff`, …) that every step
/// calling it inherits. See [`workflow!`], section "Operations and `#[operation]`".
pub use flowdag_macros::operation;

/// The items of optional features (`progress`: `Progress`, `ProgressBar`), whichever are on.
// With no feature on the module is empty and the glob imports nothing.
#[allow(unused_imports)]
pub use flowdag_runtime::features::*;
pub use flowdag_runtime::{
    AppendError, ChannelObserver, Event, EventKind, EventStream, Observer, Recorder, RunId,
    TraceColumn, TraceMatrix, channel,
};
pub use flowdag_runtime::{
    Backoff, BoxError, CancelReason, CancelToken, Edge, EdgeKind, FailurePolicy, Graph,
    IntoNodeResult, NodeFailure, NodeInfo, NodeKind, NodePolicy, NodeReport, NodeStatus,
};
pub use flowdag_runtime::{Compensation, CompensationOutcome};
pub use flowdag_runtime::{NestKind, NestReport, NodePath, PathStep};

/// # Example
///
/// ```
/// use flowdag::prelude::*;
/// # use std::convert::Infallible;
/// # async fn load(n: u32) -> Result<u32, Infallible> { Ok(n) }
/// # async fn double(n: &u32) -> Result<u32, Infallible> { Ok(n * 2) }
///
/// workflow! {
///     Twice(n: u32) -> u32 {
///         Sequential {
///             loaded = Operation(load(n)),
///             doubled = Operation(double(&loaded)),
///         }
///         => doubled
///     }
/// }
///
/// # futures::executor::block_on(async {
/// let outcome: Outcome<u32> = Twice::runner().execute(21).await;
/// assert!(outcome.report.succeeded());
/// assert_eq!(outcome.into_result()?, 42);
/// # Ok::<(), WorkflowError>(())
/// # }).unwrap();
/// ```
pub use flowdag_runtime::Outcome;

/// # Example
///
/// ```
/// use flowdag::prelude::*;
/// # use std::convert::Infallible;
/// # async fn ping(host: &str) -> Result<u32, Infallible> { Ok(host.len() as u32) }
///
/// workflow! {
///     Ping(host: String) -> u32 {
///         Parallel {
///             first = Operation(ping(&host)),
///             second = Operation(ping(&host)),
///         }
///         => first + second
///     }
/// }
///
/// # futures::executor::block_on(async {
/// let report = Ping::runner().execute("example.org".to_string()).await.report;
/// assert!(report.succeeded());
/// assert_eq!(report.status("first"), Some(NodeStatus::Completed));
/// assert_eq!(report.count(NodeStatus::Completed), 2);
/// assert_eq!(report.node("second").map(|n| n.attempts), Some(1));
/// println!("{report}"); // a table: one line per node with its status, attempts and time
/// # });
/// ```
pub use flowdag_runtime::Report;

/// # Example
///
/// ```
/// use flowdag::prelude::*;
/// # #[derive(Debug)]
/// # struct Unreachable;
/// # impl std::fmt::Display for Unreachable {
/// #     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
/// #         f.write_str("host unreachable")
/// #     }
/// # }
/// # impl std::error::Error for Unreachable {}
/// # async fn connect(_port: u16) -> Result<u16, Unreachable> { Err(Unreachable) }
/// # async fn send(port: &u16) -> Result<(), Unreachable> { Ok(()) }
///
/// workflow! {
///     Deliver(port: u16) {
///         Sequential {
///             connection = Operation(connect(port)),
///             Operation(send(&connection)),
///         }
///     }
/// }
///
/// # futures::executor::block_on(async {
/// let error: WorkflowError = Deliver::run(443).await.unwrap_err();
/// let failed: Vec<&str> = error.failed().map(|f| f.node).collect();
/// assert_eq!(failed, ["connection"]);
/// let aborted: Vec<&str> = error.aborted().map(|f| f.node).collect();
/// assert_eq!(aborted, ["send"]);
/// assert!(error.error_of("connection").is_some());
/// assert!(!error.is_cancelled());
/// # });
/// ```
pub use flowdag_runtime::WorkflowError;

/// # Example
///
/// ```
/// use flowdag::prelude::*;
/// # #[derive(Debug, PartialEq)]
/// # struct Declined { code: u16 }
/// # impl std::fmt::Display for Declined {
/// #     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
/// #         write!(f, "declined with code {}", self.code)
/// #     }
/// # }
/// # impl std::error::Error for Declined {}
/// # async fn charge(_cents: u64) -> Result<u64, Declined> { Err(Declined { code: 51 }) }
/// # async fn ship(_receipt: &u64) -> Result<(), Declined> { Ok(()) }
///
/// workflow! {
///     Buy(cents: u64) {
///         Sequential {
///             receipt = Operation(charge(cents)),
///             shipped = Operation(ship(&receipt)),
///         }
///     }
/// }
///
/// # futures::executor::block_on(async {
/// let error = Buy::run(1999).await.unwrap_err();
///
/// // The operation's own error, typed.
/// let charge: &NodeError = error.error_of("receipt").expect("receipt failed");
/// assert_eq!(charge.downcast_ref::<Declined>(), Some(&Declined { code: 51 }));
/// assert!(matches!(charge, NodeError::Failed(_)));
///
/// // A node that never ran because of it names the cause.
/// let ship = error.error_of("shipped").expect("shipped was aborted");
/// assert!(ship.is_aborted());
/// assert!(matches!(ship, NodeError::Aborted { cause: "receipt" }));
/// # });
/// ```
pub use flowdag_runtime::NodeError;

/// # Example
///
/// ```
/// use flowdag::prelude::*;
/// # use std::convert::Infallible;
/// # async fn step(n: u8) -> Result<u8, Infallible> { Ok(n) }
///
/// workflow! {
///     Steps(n: u8) {
///         Sequential {
///             one = Operation(step(n)),
///             two = Operation(step(one + 1)),
///         }
///     }
/// }
///
/// # futures::executor::block_on(async {
/// let log: EventLog = Steps::runner().execute(1).await.report.log().clone();
/// for event in &log {
///     // Node events carry the node's name: `one attempt 1 Requested`, …
///     println!("{event}");
/// }
/// let requested: Vec<&str> = log
///     .events()
///     .iter()
///     .filter(|e| e.kind == EventKind::Requested)
///     .filter_map(|e| e.node_name)
///     .collect();
/// assert_eq!(requested, ["one", "two"]);
/// assert_eq!(log.statuses(), [NodeStatus::Completed, NodeStatus::Completed]);
/// # });
/// ```
pub use flowdag_runtime::EventLog;

/// One run of a workflow, to configure and start: `MyWorkflow::runner()` makes one.
///
/// ```
/// use flowdag::prelude::*;
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
pub use flowdag_runtime::Runner;
pub use flowdag_runtime::Workflow;

/// # Example
///
/// ```
/// use flowdag::prelude::*;
/// # #[derive(Debug)]
/// # struct Approval { by: &'static str }
/// # async fn ship(a: &Approval) -> Result<String, std::convert::Infallible> { Ok(a.by.to_string()) }
///
/// workflow! {
///     Release() -> String {
///         Sequential {
///             ok = Signal(approve: Approval),
///             shipped = Operation(ship(&ok)),
///         }
///         => shipped.clone()
///     }
/// }
///
/// # futures::executor::block_on(async {
/// let mut runner = Release::runner();
/// let signals: Signals = runner.signals();
/// // Sent before the step waits: kept for it.
/// signals.send(Release::APPROVE, Approval { by: "ann" })?;
/// assert_eq!(runner.run(()).await?, "ann");
/// // The run has ended: nobody takes a signal any more, and the value comes back.
/// let late = signals.send(Release::APPROVE, Approval { by: "bob" });
/// assert!(matches!(late, Err(SendError::Finished(Approval { by: "bob" }))));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub use flowdag_runtime::Signals;
pub use flowdag_runtime::{SendError, SignalKey};

/// Everything a workflow file needs: `use flowdag::prelude::*;`.
///
/// The macros, the types a run returns ([`Outcome`], [`Report`], [`WorkflowError`],
/// [`NodeError`], [`NodeStatus`]), the runner and its options ([`Runner`], [`Workflow`],
/// [`CancelToken`], [`FailurePolicy`]), and what a user of events needs ([`Event`], [`EventKind`], [`EventLog`], [`Recorder`],
/// [`CancelReason`], [`TraceMatrix`]), and what sends signals to a run ([`Signals`],
/// [`SignalKey`], [`SendError`]).
pub mod prelude {
    pub use crate::{
        CancelReason, CancelToken, Event, EventKind, EventLog, FailurePolicy, NodeError,
        NodeStatus, Outcome, Recorder, Report, Runner, TraceMatrix, Workflow, WorkflowError,
        operation, workflow,
    };
    pub use crate::{SendError, SignalKey, Signals};
}

/// Durable runs (feature `durable`): a workflow declared `#[flow(durable)]` runs with a store
/// and a run id (`W::runner().durable(&store, "order-42").execute(input)`), journals every
/// event before it acts on it, and resumes after a crash (`W::resume(&store, "order-42")`)
/// without running again what completed; attempts in flight run again with the same
/// idempotency key ([`attempt`]). A run that waits long can be unloaded
/// (`unload_when_waiting`) and resumed by a [`Worker`] when it is due.
/// `docs/durability.md` states the guarantees; `flowdag-sqlite` is the store that survives the
/// process.
///
/// ```
/// use flowdag::prelude::*;
/// use flowdag::store::MemoryStore;
/// # use std::convert::Infallible;
/// # async fn charge(order: u64) -> Result<String, Infallible> { Ok(format!("receipt {order}")) }
///
/// workflow! {
///     #[flow(durable)]
///     Checkout(order: u64) -> String {
///         Sequential {
///             receipt = Operation(charge(order)),
///         }
///         => receipt.clone()
///     }
/// }
///
/// # futures::executor::block_on(async {
/// let store = MemoryStore::new();
/// let outcome = Checkout::runner().durable(&store, "order-42").execute(42).await?;
/// assert_eq!(outcome.into_result()?, "receipt 42");
/// // The run has finished: resuming it gives its result again, without running anything.
/// let again = Checkout::resume(&store, "order-42").await?;
/// assert_eq!(again.into_result()?, "receipt 42");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[cfg(feature = "durable")]
pub mod durable {
    pub use flowdag_runtime::durable::{
        Attempt, Continue, Durable, DurableError, DurableRunner, DurableWorkflow, GraphChange,
        attempt, graph_changes, graph_rows, incompatible_changes, resume, resume_all,
        runs_without_patch, send_signal, send_signal_json,
    };
    pub use flowdag_runtime::durable::{Ended, UnloadingRunner, resume_or_unload};
    pub use flowdag_runtime::durable::{
        Redriven, Stop, cancel_run, delete_runs, redrive_run, terminate_run,
    };
}

/// Storage for durable runs (feature `durable`): the `Store` trait and `MemoryStore`.
#[cfg(feature = "durable")]
pub use flowdag_runtime::store;

/// The idempotency key of the attempt being polled, inside an operation of a durable run.
#[cfg(feature = "durable")]
pub use flowdag_runtime::durable::attempt;

/// Metrics of durable runs and workers through the `metrics` facade crate (feature `metrics`;
/// `Prometheus` with feature `prometheus`): their names here, what they measure in
/// `docs/observability.md`.
#[cfg(feature = "durable")]
pub use flowdag_runtime::metrics;

/// The worker that resumes the unfinished runs of a store (feature `durable`).
#[cfg(feature = "durable")]
pub use flowdag_runtime::worker::{Resumed, Unloaded, Worker, WorkerReport};

/// The interface between the code `workflow!` and `#[operation]` generate and the runtime.
///
/// **Not a public API**: it may change in any release, patch releases included. Generated code
/// names everything through this module (`::flowdag::__private::…`, or `path::__private` under
/// `#[flow(crate = path)]`), so users depend on `flow` alone.
#[doc(hidden)]
pub mod __private {
    pub use flowdag_runtime::__private::*;
}
