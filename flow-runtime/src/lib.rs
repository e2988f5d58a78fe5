//! The runtime of [flow](https://docs.rs/flow): the scheduler that runs the code `workflow!`
//! generates, node statuses, errors and the static graph.
//!
//! Use it through the `flow` crate, which re-exports everything here; generated code reaches it
//! only through `::flow::__private`.
//!
//! ```
//! use flow_runtime::{NodeStatus, Plan};
//! assert!(NodeStatus::Skipped.is_terminal());
//! assert_eq!(Plan::EMPTY.roots.len(), 0);
//! ```

mod error;
mod events;
mod graph;
mod nodes;
mod panic;
mod policy;
#[cfg(feature = "progress")]
mod progress;
mod report;
mod scheduler;
mod scope;
mod status;
mod wake;

pub use error::{BoxError, IntoNodeResult, NodeError, NodeFailure, WorkflowError};
pub use events::{
    AppendError, ChannelObserver, Event, EventKind, EventLog, EventStream, Observer, Recorder,
    RunId, channel,
};
pub use graph::{Edge, EdgeKind, Graph, NodeInfo, NodeKind, Plan};
pub use nodes::{ArenaOp, Decide, Decision, IntoNodes, Leaf, Nodes, Op, Pair, Slot};
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
pub use scheduler::{
    Finished, RunOptions, RunState, complete, discard, execute, execute_in_arena, execute_nodes,
    input, require,
};
pub use scope::{OperationScope, OperationSpec};
pub use status::NodeStatus;
