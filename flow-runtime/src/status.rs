//! Node statuses.

use std::fmt;

/// Where a node is in its life: `Idle → Waiting → Ready → Running → Completed | Failed | Aborted`,
/// or `Skipped`, or `Withdrawn` (from any non-final status).
///
/// A node's fate is decided once, when its last predecessor settles: it is `Aborted` when an
/// uncaught failure reached it, `Skipped` when its branch was not taken or its data came from a
/// skipped node, and `Ready` otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub enum NodeStatus {
    /// No predecessor has settled yet.
    Idle,
    /// Some, not all, predecessors have settled.
    Waiting,
    /// Every predecessor has settled and the node may start (it may still wait for a
    /// concurrency slot).
    Ready,
    /// The node's operation is being polled.
    Running,
    /// The operation returned `Ok`, or the decision evaluated its test.
    Completed,
    /// The operation returned `Err`, panicked or timed out.
    Failed,
    /// The node never ran: a predecessor failed or was aborted and no `Conditional` caught it.
    Aborted,
    /// The node never ran: its branch was not taken, or its data came from a skipped node.
    Skipped,
    /// The node was withdrawn before it ended (its future, if it was running, was dropped):
    /// another branch won a race, a pick chose another event, a `Cancel` step cancelled its
    /// region, or `Terminate` ended the run. Not a failure: like `Skipped`, it counts as done.
    Withdrawn,
}

impl NodeStatus {
    /// Whether the status is final: completed, failed, aborted, skipped or withdrawn.
    pub const fn is_terminal(self) -> bool {
        matches!(
            self,
            NodeStatus::Completed
                | NodeStatus::Failed
                | NodeStatus::Aborted
                | NodeStatus::Skipped
                | NodeStatus::Withdrawn
        )
    }

    /// A lowercase name: `idle`, `waiting`, … `skipped`, `withdrawn`.
    pub const fn as_str(self) -> &'static str {
        match self {
            NodeStatus::Idle => "idle",
            NodeStatus::Waiting => "waiting",
            NodeStatus::Ready => "ready",
            NodeStatus::Running => "running",
            NodeStatus::Completed => "completed",
            NodeStatus::Failed => "failed",
            NodeStatus::Aborted => "aborted",
            NodeStatus::Skipped => "skipped",
            NodeStatus::Withdrawn => "withdrawn",
        }
    }
}

impl fmt::Display for NodeStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}
