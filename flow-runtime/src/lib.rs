//! The runtime of [flow](https://docs.rs/flowdag): the scheduler that runs the code `workflow!`
//! generates, node statuses, errors and the static graph.
//!
//! Use it through the `flow` crate, which re-exports everything here; generated code reaches it
//! only through `::flowdag::__private`.
//!
//! ```
//! use flowdag_runtime::{FailurePolicy, NodeStatus};
//! assert!(NodeStatus::Skipped.is_terminal());
//! assert_eq!(FailurePolicy::default(), FailurePolicy::ContinueIndependent);
//! ```

// The modules in layers, lowest first: each imports (`use crate::…`, or a `crate::…` path)
// only modules of the layers before its own, so the import graph has no cycle.
// `tests/layers.rs` holds the same table and fails on an import against it.
//
//   status, policy, slot, wake, path,   plain data: statuses, policies, output cells, wakers,
//   compensation, exclusion, attempt    paths in nested graphs, compensation records, a run
//                                       tree's exclusion groups, the attempt being polled
//   error, graph, events, scope         errors, the static graph, events, operation defaults
//   panic, signal, run_state, progress  timers and panics; mailboxes; what a test reads; a bar
//   report                              the report (with `report/summary.rs`: a `Report` holds
//                                       `NestReport`s, which hold `Report`s)
//   options, verdict                    a runner's options; the end of a run (`Finished`)
//   nest_ctx                            what a nest node's driver gets from its run
//   nodes                               the node set (`Leaf::nest` takes a `NestCtx`)
//   scheduler, delay                    the run loop and a run's setup (one folder; durable runs
//                                       only through its hook, `scheduler/hook.rs`); a `Delay` step
//   support, one                        what generated code calls: `execute*`, `input`, ...;
//                                       a one-node nest instance without the scheduler
//   runner                              `Workflow` and `Runner`: the public entry points
//   nest                                nest nodes, the sub-workflow driver (runs `Workflow`s)
//   drivers                             the drivers of `ForEach` and `Loop` nodes
//   store, metrics                      durable runs (feature `durable`): storage; the metrics
//                                       of durable runs and workers (no-op without `metrics`)
//   durable, worker                     the journal (the scheduler's hook) and the user's side,
//                                       the worker
//   lib                                 re-exports and `__private`
//
// A run is recursive (a nest node's driver runs nested `execute`s, whose nodes may be nest
// nodes), but through the `Workflow` trait and the closures generated code hands over, not
// through imports: `nest` and `drivers` sit above the scheduler they call back into.
#[cfg(feature = "durable")]
mod attempt;
mod compensation;
mod delay;
mod drivers;
#[cfg(feature = "durable")]
pub mod durable;
mod error;
mod events;
mod exclusion;
mod graph;
#[cfg(feature = "durable")]
pub mod metrics;
mod nest;
mod nest_ctx;
mod nodes;
mod one;
mod options;
mod panic;
mod path;
mod policy;
#[cfg(feature = "progress")]
mod progress;
mod report;
mod run_state;
mod runner;
mod scheduler;
mod scope;
mod signal;
mod slot;
mod status;
#[cfg(feature = "durable")]
pub mod store;
mod support;
mod verdict;
mod wake;
#[cfg(feature = "durable")]
pub mod worker;

pub use error::{BoxError, IntoNodeResult, NodeError, NodeFailure, WorkflowError};
pub use events::{
    AppendError, ChannelObserver, Event, EventKind, EventLog, EventStream, Observer, Recorder,
    RunId, channel,
};
pub use graph::{Edge, EdgeKind, Graph, NodeInfo, NodeKind};
pub use path::{NestKind, NodePath, PathStep};
pub use policy::{Backoff, CancelReason, CancelToken, FailurePolicy, NodePolicy};
pub use report::NestReport;
/// The items of optional features, whichever are enabled: the facade re-exports this module
/// whole, so a feature turned on anywhere in the build shows its items through `flowdag`.
pub mod features {
    /// indicatif's progress bar, to style or hide the one a [`Progress`] drives.
    #[cfg(feature = "progress")]
    pub use indicatif::ProgressBar;

    #[cfg(feature = "progress")]
    pub use crate::progress::Progress;
}
pub use compensation::{Compensation, CompensationOutcome};
pub use report::{NodeReport, Outcome, Report, TraceColumn, TraceMatrix};
pub use runner::{Runner, Workflow};
pub use signal::{SendError, SignalKey, Signals};
pub use status::NodeStatus;

/// The interface between the code `workflow!` and `#[operation]` generate and this runtime.
///
/// **Not a public API**: everything here may change in any release, patch releases included.
/// The crates of flow pin each other's exact version, so generated code always meets the
/// runtime it was generated for. Generated code names every item it uses through this module
/// (`::flowdag::__private::…`, re-exported by the facade), and nothing else.
#[doc(hidden)]
pub mod __private {
    pub use crate::delay::{Timer, Wait};
    pub use crate::drivers::{
        ForEachConfig, ForEachSource, ForEachStream, LoopConfig, complete_nest, for_each,
        for_each_collect, for_each_collect_into, for_each_into, for_each_source, for_each_stream,
        for_each_stream_collect, for_each_stream_collect_into, for_each_stream_into,
        for_each_stream_source, repeat_until, repeat_while,
    };
    pub use crate::error::{IntoNodeResult, NodeError, NodeFailure, WorkflowError};
    pub use crate::events::Observer;
    pub use crate::graph::{
        Arm, Control, Edge, EdgeKind, Gate, Graph, Instant, NestInfo, NodeInfo, NodeKind, Plan,
        Rest, Rule, Section, SignalInfo,
    };
    pub use crate::nest::{ChildRun, Nest, NestOp, child};
    pub use crate::nest_ctx::NestCtx;
    pub use crate::nodes::{ArenaOp, Decide, Decision, Idle, IntoNodes, Leaf, Nodes, Op, Pair};
    pub use crate::one::execute_one;
    #[cfg(debug_assertions)]
    pub use crate::one::fast_runs;
    pub use crate::path::NestKind;
    pub use crate::policy::{Backoff, CancelToken, FailurePolicy, NodePolicy};
    pub use crate::report::Outcome;
    pub use crate::run_state::RunState;
    pub use crate::runner::{Runner, Workflow, unreachable_run};
    pub use crate::scheduler::{RunSetup, with_mailbox};
    pub use crate::scope::{Deferred, OperationScope, OperationSpec};
    pub use crate::signal::{Environment, Mailbox, SignalKey, WaitSignal, signal};
    pub use crate::slot::{Slot, TermCell};
    pub use crate::support::{
        compensated, complete, discard, execute, execute_in_arena, execute_nodes, input, require,
    };
    pub use crate::verdict::Finished;
    pub use std::{
        any::TypeId, future::Future, option::Option, pin::Pin, result::Result, stringify,
        time::Duration,
    };

    #[cfg(feature = "durable")]
    pub use crate::durable::child::{durable_child, undo_child};
    #[cfg(feature = "durable")]
    pub use crate::durable::generated::{
        assert_durable, complete_durable, generic_name, restore_output, restoring, type_argument,
    };
    #[cfg(feature = "durable")]
    pub use crate::durable::nested::{
        complete_durable_collect, complete_durable_nest, durable_source, durable_stream_source,
        instance_record, journaled_instance, restore_collect, restore_summary,
        settle_durable_collect, settle_durable_nest, settle_restored,
    };
    #[cfg(feature = "durable")]
    pub use crate::durable::stored_signals::{
        CheckAny, CheckDurable, PayloadProbe, durable_signal,
    };
    #[cfg(feature = "durable")]
    pub use crate::durable::{Durable, DurableError, DurableWorkflow, again, resume, resume_all};
    #[cfg(feature = "durable")]
    pub use crate::store::Store;

    /// The defaults of one `#[operation]`: its display name and its policy.
    pub const fn operation_spec(name: &'static str, policy: NodePolicy) -> OperationSpec {
        OperationSpec { name, policy }
    }

    /// The resilience settings written at one step or on one `#[operation]`.
    pub const fn node_policy(
        timeout_ms: Option<u64>,
        retries: Option<u32>,
        backoff: Option<Backoff>,
        jitter: Option<bool>,
        deadline_ms: Option<u64>,
    ) -> NodePolicy {
        NodePolicy {
            timeout_ms,
            retries,
            backoff,
            jitter,
            deadline_ms,
        }
    }
}
