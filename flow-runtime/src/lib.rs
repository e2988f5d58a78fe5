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

// The modules in layers: each uses only modules of the layers above it (`use crate::…`), so
// no two depend on each other.
//
//   status, policy, slot, wake          plain data, output cells, the nodes' wakers
//   error, graph, events, scope         errors, the static graph, events, operation defaults
//   panic, signal                       caught panics' messages, timers; signals and mailboxes
//   run_state, report, options          what a decision's test sees, the report, a run's options
//   nodes, delay                        the node set; the node of a `Delay` step
//   verdict                             the end of a run: `Finished`, `Verdict`
//   scheduler (mod, attempt, settle)    the run loop: its state, attempts, settling
//   support                             what generated code calls: `execute*`, `input`, ...
//   runner                              `Workflow` and `Runner`: the public entry points
//   progress                            an observer (feature `progress`)
//   store                               the crate flowdag-store, re-exported, and the stored forms of
//                                       events and paths (feature `durable`): uses events, nest
//   worker                              resumes unfinished durable runs (feature `durable`): uses durable, store
//
// Outside the layers: nest (nested graphs; its plain types `NestKind`, `NodePath` are read by
// graph, events and error, and its context uses options, report and runner) and drivers
// (the nest nodes' futures, over nest).
mod delay;
mod drivers;
#[cfg(feature = "durable")]
pub mod durable;
mod error;
mod events;
mod graph;
mod nest;
mod nodes;
mod options;
mod panic;
mod policy;
#[cfg(feature = "progress")]
mod progress;
mod report;
mod run_state;
mod runner;
mod saga;
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
pub use nest::{NestKind, NestReport, NodePath, PathStep};
pub use policy::{Backoff, CancelReason, CancelToken, FailurePolicy, NodePolicy};
/// The items of optional features, whichever are enabled: the facade re-exports this module
/// whole, so a feature turned on anywhere in the build shows its items through `flow`.
pub mod features {
    /// indicatif's progress bar, to style or hide the one a [`Progress`] drives.
    #[cfg(feature = "progress")]
    pub use indicatif::ProgressBar;

    #[cfg(feature = "progress")]
    pub use crate::progress::Progress;
}
pub use report::{NodeReport, Outcome, Report, TraceColumn, TraceMatrix};
pub use runner::{Runner, Workflow};
pub use saga::{Compensation, CompensationOutcome};
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
    pub use crate::nest::{ChildRun, Nest, NestCtx, NestKind, NestOp, child};
    pub use crate::nodes::{ArenaOp, Decide, Decision, Idle, IntoNodes, Leaf, Nodes, Op, Pair};
    pub use crate::options::RunOptions;
    pub use crate::policy::{Backoff, CancelToken, FailurePolicy, NodePolicy};
    pub use crate::report::Outcome;
    pub use crate::run_state::RunState;
    pub use crate::runner::{Runner, Workflow, unreachable_run};
    pub use crate::scope::{Deferred, OperationScope, OperationSpec};
    pub use crate::signal::{Environment, Mailbox, SignalKey, WaitSignal, signal, with_mailbox};
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
    pub use crate::durable::{
        Durable, DurableError, DurableWorkflow, assert_durable, complete_durable, durable_signal,
        restore_output, restoring, resume, resume_all,
    };
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
