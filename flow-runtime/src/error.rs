//! Errors of nodes and of whole runs.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::path::NodePath;
use crate::policy::CancelReason;

/// The boxed error type an operation's error is stored as.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Why one node did not complete.
///
/// In a `Conditional` test, a node's name stands for `Result<&T, &NodeError>`, so a test can
/// look at a failure and route around it.
#[derive(Debug)]
#[non_exhaustive]
pub enum NodeError {
    /// The operation returned `Err`.
    Failed(BoxError),
    /// The operation (or a decision's test) panicked; the payload's message is kept.
    Panicked(String),
    /// An attempt ran longer than the node's `timeout`.
    TimedOut(Duration),
    /// All attempts and delays together ran longer than the node's `deadline`.
    DeadlineExceeded(Duration),
    /// The node never ran because the failure of `cause` reached it.
    Aborted {
        /// The node whose failure started the chain of aborts.
        cause: &'static str,
    },
    /// The run was cancelled from outside (a [`CancelToken`](crate::CancelToken) or the
    /// run's deadline) before the node finished.
    Cancelled,
    /// A nested run failed: a sub-workflow step's child workflow, or an instance of a
    /// `ForEach` or a `Loop` ([`WorkflowError::path`] names it: `payment`, `charge[3]`). Its
    /// message is the nested run's; [`source`](StdError::source) is the nested run's
    /// [`WorkflowError`].
    Workflow(Box<WorkflowError>),
    /// A `Loop` ran `max` iterations without its test ending it.
    LoopExhausted {
        /// The loop's `max`.
        max: u32,
    },
    /// A fault of flow itself, not of the operation (for example a step started before one of
    /// its inputs was ready). Please report it: it is a bug.
    Internal(&'static str),
}

impl NodeError {
    /// The operation's own error, if the node failed by returning `Err`.
    pub fn source_error(&self) -> Option<&(dyn StdError + Send + Sync + 'static)> {
        match self {
            NodeError::Failed(e) => Some(e.as_ref()),
            _ => None,
        }
    }

    /// The operation's error as `E`, if it failed with an error of that type.
    pub fn downcast_ref<E: StdError + 'static>(&self) -> Option<&E> {
        match self {
            NodeError::Failed(e) => e.downcast_ref::<E>(),
            _ => None,
        }
    }

    /// Whether the node never ran because another node failed.
    pub fn is_aborted(&self) -> bool {
        matches!(self, NodeError::Aborted { .. })
    }
}

/// `Failed` is transparent, as thiserror's `#[error(transparent)]` and `std::io::Error` are:
/// its `Display` is the operation error's, and [`source`](StdError::source) is that error's own
/// source. A chain printed level by level (anyhow's `{:#}`, eyre's report) shows each message
/// once; [`NodeError::source_error`] and [`NodeError::downcast_ref`] reach the operation's error.
impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeError::Failed(e) => fmt::Display::fmt(e, f),
            NodeError::Panicked(msg) => write!(f, "panicked: {msg}"),
            NodeError::TimedOut(after) => write!(f, "timed out after {after:?}"),
            NodeError::DeadlineExceeded(after) => write!(f, "missed its deadline of {after:?}"),
            NodeError::Aborted { cause } => write!(f, "aborted because `{cause}` failed"),
            NodeError::Cancelled => f.write_str("cancelled"),
            NodeError::Workflow(error) => fmt::Display::fmt(error, f),
            NodeError::LoopExhausted { max } => {
                write!(
                    f,
                    "the loop ran its {max} iterations without its test ending it"
                )
            }
            NodeError::Internal(what) => write!(f, "flow internal error: {what}"),
        }
    }
}

impl StdError for NodeError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            NodeError::Failed(e) => e.source(),
            NodeError::Workflow(error) => Some(error.as_ref()),
            _ => None,
        }
    }
}

/// An error rendered once, to be shared by the report and the events (an error message can be
/// large: a copy for each would multiply it).
pub(crate) fn render(error: &NodeError) -> Arc<str> {
    Arc::from(error.to_string())
}

/// One node's entry in a [`WorkflowError`].
#[derive(Debug)]
pub struct NodeFailure {
    /// The node's name.
    pub node: &'static str,
    /// How many attempts the node made (0 if it never started).
    pub attempts: u32,
    /// What happened to it: its own error, or [`NodeError::Aborted`] with the failure that
    /// aborted it.
    pub error: NodeError,
}

/// A run that did not succeed: at least one failure was not caught by a `Conditional`.
///
/// Lists every failed node with its error and every aborted node with the failure that
/// aborted it, in node order.
#[derive(Debug)]
pub struct WorkflowError {
    workflow: &'static str,
    failures: Vec<NodeFailure>,
    cancelled: Option<CancelReason>,
    /// The nest instance that failed (`charge[3]`), for a run nested in another.
    path: Option<NodePath>,
    /// What the run did to undo its completed steps (`compensate = ..`).
    compensations: Vec<crate::compensation::Compensation>,
}

impl WorkflowError {
    pub(crate) fn new(
        workflow: &'static str,
        failures: Vec<NodeFailure>,
        cancelled: Option<CancelReason>,
    ) -> Self {
        WorkflowError {
            workflow,
            failures,
            cancelled,
            path: None,
            compensations: Vec::new(),
        }
    }

    /// Records what the run's compensation phase did.
    pub(crate) fn set_compensations(
        &mut self,
        compensations: Vec<crate::compensation::Compensation>,
    ) {
        self.compensations = compensations;
    }

    /// What the failed run did to undo its completed steps (`compensate = ..` options), in the
    /// order it did it: empty when no completed step has a compensation.
    pub fn compensations(&self) -> &[crate::compensation::Compensation] {
        &self.compensations
    }

    /// Whether every compensation the run started succeeded (`true` when there were none).
    pub fn compensated(&self) -> bool {
        self.compensations
            .iter()
            .all(crate::compensation::Compensation::is_compensated)
    }

    /// Names the nest instance this error is the failure of.
    pub(crate) fn set_path(&mut self, path: NodePath) {
        self.path = Some(path);
    }

    /// The nest instance that failed (`charge[3]`, `payment`), when the run was an instance
    /// of a `ForEach`, a `Loop` or a sub-workflow step; `None` for a workflow run by itself.
    pub fn path(&self) -> Option<&NodePath> {
        self.path.as_ref()
    }

    /// The workflow's name.
    pub fn workflow(&self) -> &'static str {
        self.workflow
    }

    /// Every failed and aborted node, in node order.
    pub fn failures(&self) -> &[NodeFailure] {
        &self.failures
    }

    /// The nodes that failed by themselves (not aborted).
    pub fn failed(&self) -> impl Iterator<Item = &NodeFailure> {
        self.failures.iter().filter(|f| !f.error.is_aborted())
    }

    /// The nodes that were aborted, each with its cause.
    pub fn aborted(&self) -> impl Iterator<Item = &NodeFailure> {
        self.failures.iter().filter(|f| f.error.is_aborted())
    }

    /// The error of the node called `node`, if it failed or was aborted.
    pub fn error_of(&self, node: &str) -> Option<&NodeError> {
        self.failures
            .iter()
            .find(|f| f.node == node)
            .map(|f| &f.error)
    }

    /// Whether the run was cancelled from outside (token or deadline).
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.is_some()
    }

    /// Why the run was cancelled, if it was.
    pub fn cancel_reason(&self) -> Option<CancelReason> {
        self.cancelled
    }
}

/// How many nodes of each kind [`WorkflowError`]'s `Display` names before "and N more".
const NAMED: usize = 3;

/// Writes "1 node failed (`a`)" or "500 nodes failed (`a`, `b`, `c` and 497 more)".
fn write_group<'a>(
    f: &mut fmt::Formatter<'_>,
    what: &str,
    nodes: impl Iterator<Item = &'a NodeFailure>,
    count: usize,
) -> fmt::Result {
    let noun = if count == 1 { "node" } else { "nodes" };
    write!(f, "{count} {noun} {what} (")?;
    for (i, failure) in nodes.take(NAMED).enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "`{}`", failure.node)?;
    }
    if count > NAMED {
        write!(f, " and {} more", count - NAMED)?;
    }
    f.write_str(")")
}

/// One line whatever the number of failures: why the run ended, then how many nodes failed and
/// were aborted, naming the first few of each. Each node's own error is not repeated here: the
/// first failure is the [`source`](StdError::source) (a chain printed level by level shows it
/// next), and [`WorkflowError::failures`] lists every one.
impl fmt::Display for WorkflowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let is_cancelled = |n: &&NodeFailure| matches!(n.error, NodeError::Cancelled);
        let failed = || self.failed().filter(|n| !is_cancelled(n));
        let (failed_count, aborted_count) = (failed().count(), self.aborted().count());
        let cancelled_count = self.failures.iter().filter(is_cancelled).count();
        let workflow = self.workflow;
        let at = self
            .path
            .as_ref()
            .map(|p| format!(" (`{p}`)"))
            .unwrap_or_default();
        let workflow = format_args!("{workflow}`{at}");
        match self.cancelled {
            Some(CancelReason::Token) => write!(f, "workflow `{workflow} was cancelled")?,
            Some(CancelReason::Requested) => write!(
                f,
                "workflow `{workflow} was cancelled at an operator's request"
            )?,
            Some(CancelReason::Deadline(after)) => write!(
                f,
                "workflow `{workflow} was cancelled: its deadline of {after:?} passed"
            )?,
            Some(CancelReason::NoTimer(after)) => write!(
                f,
                "workflow `{workflow} was cancelled before it started: its deadline of \
                 {after:?} needs a tokio runtime with time enabled"
            )?,
            None => write!(f, "workflow `{workflow} failed")?,
        }
        let mut separator = if self.cancelled.is_some() { "; " } else { ": " };
        if failed_count > 0 {
            f.write_str(separator)?;
            write_group(f, "failed", failed(), failed_count)?;
            separator = ", ";
        }
        if aborted_count > 0 {
            f.write_str(separator)?;
            write_group(f, "aborted", self.aborted(), aborted_count)?;
            separator = ", ";
        }
        if cancelled_count > 0 && self.cancelled.is_none() {
            f.write_str(separator)?;
            let noun = if cancelled_count == 1 {
                "node"
            } else {
                "nodes"
            };
            write!(f, "{cancelled_count} {noun} cancelled")?;
        }
        // A compensation that failed for good leaves an effect not undone: the reader must
        // know which.
        for compensation in self.compensations.iter().filter(|c| !c.is_compensated()) {
            if matches!(
                compensation.outcome(),
                crate::compensation::CompensationOutcome::Failed { .. }
            ) {
                write!(f, "; {compensation}")?;
            }
        }
        Ok(())
    }
}

impl StdError for WorkflowError {
    /// The first node that failed by itself (not aborted, not cancelled), if any; for a node
    /// that ran a nested workflow, that workflow's error, whose message the node's error
    /// shows as it is (so a chain printed level by level shows it once).
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        let failure = self
            .failed()
            .find(|f| !matches!(f.error, NodeError::Cancelled))?;
        Some(match &failure.error {
            NodeError::Workflow(nested) => nested.as_ref(),
            error => error,
        })
    }
}

/// What an operation's future may resolve to: `Result<T, E>` with `E` a std error.
#[diagnostic::on_unimplemented(
    message = "an operation must resolve to `Result<T, E>` with `E: std::error::Error + Send + Sync + 'static`, not `{Self}`",
    label = "this resolves to `{Self}`",
    note = "wrap an infallible value as `Ok::<_, std::convert::Infallible>(value)`"
)]
pub trait IntoNodeResult {
    /// The success value.
    type Ok;
    /// Converts into the node's result.
    fn into_node_result(self) -> Result<Self::Ok, NodeError>;
}

impl<T, E> IntoNodeResult for Result<T, E>
where
    E: StdError + Send + Sync + 'static,
{
    type Ok = T;
    #[inline]
    fn into_node_result(self) -> Result<T, NodeError> {
        self.map_err(|e| NodeError::Failed(Box::new(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Io;

    impl fmt::Display for Io {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("connection reset")
        }
    }

    impl StdError for Io {}

    #[derive(Debug)]
    struct Fetch(Io);

    impl fmt::Display for Fetch {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("could not fetch the user")
        }
    }

    impl StdError for Fetch {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            Some(&self.0)
        }
    }

    /// Every level of `error`'s chain, as anyhow's `{:#}` and eyre's reports print it.
    fn chain(error: &(dyn StdError + 'static)) -> Vec<String> {
        let mut levels = vec![error.to_string()];
        let mut next = error.source();
        while let Some(level) = next {
            levels.push(level.to_string());
            next = level.source();
        }
        levels
    }

    fn failure(node: &'static str, error: NodeError) -> NodeFailure {
        NodeFailure {
            node,
            attempts: 1,
            error,
        }
    }

    #[test]
    fn a_chain_shows_each_message_once() {
        let error = WorkflowError::new(
            "Signup",
            vec![
                failure("user", NodeError::Failed(Box::new(Fetch(Io)))),
                failure("mail", NodeError::Aborted { cause: "user" }),
            ],
            None,
        );
        let levels = chain(&error);
        assert_eq!(
            levels,
            [
                "workflow `Signup` failed: 1 node failed (`user`), 1 node aborted (`mail`)",
                "could not fetch the user",
                "connection reset",
            ]
        );
        for message in ["could not fetch the user", "connection reset"] {
            let shown = levels.iter().filter(|l| l.contains(message)).count();
            assert_eq!(shown, 1, "{message:?} in {levels:#?}");
        }
        let node = error.error_of("user").expect("listed");
        assert!(node.downcast_ref::<Fetch>().is_some());
        assert_eq!(
            chain(node),
            ["could not fetch the user", "connection reset"]
        );
    }

    #[test]
    fn the_message_of_a_run_with_hundreds_of_failures_stays_short() {
        let names: Vec<&'static str> = (0..500)
            .map(|i| &*Box::leak(format!("node_{i}").into_boxed_str()))
            .collect();
        let failures = names
            .iter()
            .map(|&name| failure(name, NodeError::TimedOut(std::time::Duration::from_secs(1))))
            .collect();
        let error = WorkflowError::new("Fan", failures, None);
        let message = error.to_string();
        assert_eq!(
            message,
            "workflow `Fan` failed: 500 nodes failed (`node_0`, `node_1`, `node_2` and 497 more)"
        );
        assert!(message.len() < 120);
        assert_eq!(
            error.failures().len(),
            500,
            "the full list through the methods"
        );
        assert_eq!(error.failed().count(), 500);
    }

    #[test]
    fn internal_errors_and_cancelled_runs_say_what_they_are() {
        assert_eq!(
            NodeError::Internal("a step started early").to_string(),
            "flow internal error: a step started early"
        );
        let after = std::time::Duration::from_millis(1_500);
        let error = WorkflowError::new(
            "Slow",
            vec![failure("a", NodeError::Cancelled)],
            Some(CancelReason::NoTimer(after)),
        );
        assert_eq!(
            error.to_string(),
            "workflow `Slow` was cancelled before it started: its deadline of 1.5s needs a tokio \
             runtime with time enabled"
        );
        assert!(error.source().is_none(), "no node failed by itself");
    }
}
