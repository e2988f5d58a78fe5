//! What a run did: statuses per node, and the result.

use std::fmt;

use crate::error::WorkflowError;
use crate::status::NodeStatus;

/// What happened to one node in a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeReport {
    /// The node's name.
    pub name: &'static str,
    /// The display name of the `#[operation]` the node called, if it called one.
    pub operation: Option<&'static str>,
    /// Its final status.
    pub status: NodeStatus,
    /// How many attempts it made: 0 if it never ran, more than 1 if it was retried.
    pub attempts: u32,
    /// The error of each failed attempt that was retried, in order.
    pub failed_attempts: Vec<String>,
    /// Its error, rendered, when it failed or was aborted.
    pub error: Option<String>,
}

/// What happened to every node of a finished run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    workflow: &'static str,
    nodes: Vec<NodeReport>,
}

impl Report {
    pub(crate) fn new(workflow: &'static str, nodes: Vec<NodeReport>) -> Self {
        Report { workflow, nodes }
    }

    /// The workflow's name.
    pub fn workflow(&self) -> &'static str {
        self.workflow
    }

    /// Every node, in node-id order (the order of the `GRAPH` constant).
    pub fn nodes(&self) -> &[NodeReport] {
        &self.nodes
    }

    /// The final status of the node called `name`.
    pub fn status(&self, name: &str) -> Option<NodeStatus> {
        self.nodes.iter().find(|n| n.name == name).map(|n| n.status)
    }

    /// How many nodes ended with `status`.
    pub fn count(&self, status: NodeStatus) -> usize {
        self.nodes.iter().filter(|n| n.status == status).count()
    }
}

impl fmt::Display for Report {
    /// A table: one row per node with its status and error.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self.nodes.iter().map(|n| n.name.len()).max().unwrap_or(4).max(4);
        writeln!(f, "{:<width$}  {:<9}  attempts  error", "node", "status")?;
        for node in &self.nodes {
            writeln!(
                f,
                "{:<width$}  {:<9}  {:>8}  {}",
                node.name,
                node.status,
                node.attempts,
                node.error.as_deref().unwrap_or("")
            )?;
        }
        Ok(())
    }
}

/// The result of a run together with its [`Report`], from a workflow's `runner()`.
#[derive(Debug)]
#[must_use = "an outcome holds the run's result, which may be an error"]
pub struct Outcome<T> {
    /// The workflow's output, or why the run failed.
    pub result: Result<T, WorkflowError>,
    /// What happened to every node.
    pub report: Report,
}

impl<T> Outcome<T> {
    /// The result alone.
    pub fn into_result(self) -> Result<T, WorkflowError> {
        self.result
    }
}
