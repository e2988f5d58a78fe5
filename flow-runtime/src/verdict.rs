//! The end of a run: whether it succeeded, which failures its error lists, and the
//! [`Finished`] run that generated code turns into an [`Outcome`].

use std::sync::Arc;

use crate::error::{NodeError, NodeFailure, WorkflowError, render};
use crate::events::{EventLog, RunId};
use crate::graph::{Graph, NodeKind, Rule};
use crate::policy::CancelReason;
use crate::report::NestReport;
use crate::report::{HookEnd, NodeReport, Outcome, Report, ReportParts};
use crate::scope::OperationSpec;
use crate::status::NodeStatus;

use std::time::Duration;

/// Per-node records that only runs with failures, retries or `#[operation]`s need; empty
/// otherwise, so a plain run allocates nothing for them.
#[derive(Default)]
pub(crate) struct Extras {
    pub(crate) operations: Vec<Option<&'static OperationSpec>>,
    pub(crate) attempts: Vec<u32>,
    pub(crate) failed_attempts: Vec<Vec<Arc<str>>>,
    /// Each failed node's final error as its `Failed` event rendered it, for the report to share.
    pub(crate) rendered: Vec<Option<Arc<str>>>,
}

/// In `Extras::attempts`: the node's status implies its attempts.
pub(crate) const IMPLIED: u32 = u32::MAX;

/// How many attempts a node made: recorded, or implied by its status (1 for a node that
/// completed or failed, 0 for one that never ran).
#[inline]
pub(crate) fn attempts_of(recorded: &[u32], node: usize, status: NodeStatus) -> u32 {
    match recorded.get(node) {
        Some(&n) if n != IMPLIED => n,
        _ => u32::from(matches!(status, NodeStatus::Completed | NodeStatus::Failed)),
    }
}

/// Whether a finished run succeeded, and which nodes its error lists.
pub(crate) struct Verdict {
    pub(crate) succeeded: bool,
    pub(crate) listed: Vec<bool>,
}

impl Verdict {
    /// The verdict of a run where no node failed or was aborted.
    pub(crate) const SUCCEEDED: Verdict = Verdict {
        succeeded: true,
        listed: Vec::new(),
    };

    /// The run fails when a failure reached the end of the graph (a node without successors
    /// ended failed or aborted), when it was cancelled, or when a failed node's failure was not
    /// caught: no `Conditional` test that ran named it, or named a node its failure aborted.
    /// The error lists every failed node not caught, every aborted node no test named, and
    /// every failure that reached an aborted node it lists. Called only when some node failed
    /// or was aborted ([`Verdict::SUCCEEDED`] otherwise).
    pub(crate) fn judge(graph: &Graph, statuses: &[NodeStatus], named: &[u32]) -> Verdict {
        let n = statuses.len();
        // The failed nodes whose failure reached each aborted node, in one forward pass (ids
        // are in topological order). Aborts with no failure behind them are cancellations.
        // A step with a trigger rule that ran after failures passes them on as an aborted
        // node would.
        let rules = graph.plan.control.rules;
        let ruled = |node: usize| rules.get(node).is_some_and(|r| *r != Rule::Default);
        let mut roots: Vec<Vec<u32>> = vec![Vec::new(); n];
        for node in 0..n {
            let from = match statuses[node] {
                NodeStatus::Failed => vec![node as u32],
                NodeStatus::Aborted => roots[node].clone(),
                NodeStatus::Completed if ruled(node) && !roots[node].is_empty() => {
                    roots[node].clone()
                }
                _ => continue,
            };
            graph.plan.for_each_target(node, |succ, caught| {
                if !caught && (statuses[succ] == NodeStatus::Aborted || ruled(succ)) {
                    for &root in &from {
                        if !roots[succ].contains(&root) {
                            roots[succ].push(root);
                        }
                    }
                }
            });
        }
        let mut is_named = vec![false; n];
        let mut caught = vec![false; n];
        for &node in named {
            let node = node as usize;
            is_named[node] = true;
            match statuses[node] {
                NodeStatus::Failed => caught[node] = true,
                NodeStatus::Aborted => roots[node].iter().for_each(|&r| caught[r as usize] = true),
                _ => {}
            }
        }
        let mut succeeded = true;
        let mut listed = vec![false; n];
        for node in 0..n {
            let sink = graph.plan.successors(node).is_empty();
            match statuses[node] {
                NodeStatus::Failed => {
                    listed[node] = !caught[node] || sink;
                    succeeded &= !listed[node];
                }
                NodeStatus::Aborted => {
                    listed[node] = !is_named[node];
                    succeeded &= !sink && !roots[node].is_empty();
                }
                _ => {}
            }
        }
        for node in 0..n {
            if listed[node] && statuses[node] == NodeStatus::Aborted {
                for &root in &roots[node] {
                    listed[root as usize] = true;
                }
            }
        }
        Verdict { succeeded, listed }
    }
}

/// A run that has ended: every node's status and every failure. Generated code turns it into an
/// [`Outcome`].
pub struct Finished {
    pub(crate) graph: &'static Graph,
    pub(crate) statuses: Vec<NodeStatus>,
    pub(crate) errors: Vec<Option<NodeError>>,
    pub(crate) verdict: Verdict,
    pub(crate) extras: Extras,
    pub(crate) cancelled: Option<CancelReason>,
    pub(crate) run: Option<RunId>,
    pub(crate) elapsed: Option<Duration>,
    pub(crate) log: Option<EventLog>,
    /// Whether to build the per-node report (not for a plain `run`).
    pub(crate) report: bool,
    /// A `Terminate` step ended the run, with the output it put in the run's `TermCell`.
    pub(crate) terminated: bool,
    /// What the nest nodes that started did, in node order.
    pub(crate) nests: Vec<NestReport>,
    /// What a failed run did to undo its completed steps, in the order it did it.
    pub(crate) compensations: Vec<crate::compensation::Compensation>,
    /// What the run's hook gave back, if it had one.
    pub(crate) hook: HookEnd,
}

impl Finished {
    /// Whether the run succeeded: it was not cancelled, and a `Terminate` step ended it or no
    /// failure reached the end of the graph (every node without successors completed or was
    /// skipped) and every failure was caught by a `Conditional`.
    pub fn succeeded(&self) -> bool {
        self.cancelled.is_none() && (self.terminated || self.verdict.succeeded)
    }

    /// The end of a run of a one-node graph that nothing observed (no report, no events), as
    /// the scheduler would make it: the node completed, or failed with `result`'s error.
    pub(crate) fn one(graph: &'static Graph, result: Result<(), NodeError>) -> Finished {
        let (statuses, errors, verdict) = match result {
            Ok(()) => (Vec::new(), Vec::new(), Verdict::SUCCEEDED),
            // A failed node without successors: the run fails, its error lists the node.
            Err(error) => (
                vec![NodeStatus::Failed],
                vec![Some(error)],
                Verdict {
                    succeeded: false,
                    listed: vec![true],
                },
            ),
        };
        Finished {
            graph,
            statuses,
            errors,
            verdict,
            extras: Extras::default(),
            cancelled: None,
            run: None,
            elapsed: None,
            log: None,
            report: false,
            terminated: false,
            nests: Vec::new(),
            compensations: Vec::new(),
            hook: HookEnd::default(),
        }
    }

    /// The run, with what its compensation phase did.
    pub(crate) fn compensated(
        mut self,
        compensations: Vec<crate::compensation::Compensation>,
    ) -> Self {
        self.compensations = compensations;
        self
    }

    /// Finishes the run: on success evaluates `output` (the workflow's output expression), on
    /// failure returns the [`WorkflowError`]. Either way the [`Report`] comes with it.
    pub fn output<T>(self, output: impl FnOnce() -> Result<T, NodeFailure>) -> Outcome<T> {
        let succeeded = self.succeeded();
        let Finished {
            graph,
            statuses,
            mut errors,
            verdict,
            mut extras,
            cancelled,
            run,
            elapsed,
            log,
            report: wants_report,
            terminated: _,
            nests,
            compensations,
            hook,
        } = self;
        let attempts = |id: usize, status: NodeStatus| attempts_of(&extras.attempts, id, status);
        let report = Report::new(ReportParts {
            graph,
            run,
            succeeded,
            elapsed,
            log,
            nests,
            compensations: compensations.clone(),
            hook,
            nodes: graph
                .nodes
                .iter()
                .zip(&statuses)
                .take(if wants_report { usize::MAX } else { 0 })
                .enumerate()
                .map(|(id, (node, &status))| NodeReport {
                    name: node.name,
                    operation: extras
                        .operations
                        .get(id)
                        .copied()
                        .flatten()
                        .map(|spec| spec.name),
                    status,
                    attempts: if node.kind == NodeKind::Decision {
                        u32::from(status == NodeStatus::Completed || status == NodeStatus::Failed)
                    } else {
                        attempts(id, status)
                    },
                    failed_attempts: extras
                        .failed_attempts
                        .get_mut(id)
                        .map(std::mem::take)
                        .unwrap_or_default(),
                    error: extras
                        .rendered
                        .get_mut(id)
                        .and_then(Option::take)
                        .or_else(|| errors.get(id).and_then(Option::as_ref).map(render)),
                    started: None,
                    ended: None,
                    withdrawn_by: None,
                })
                .collect(),
        });
        let result = if succeeded {
            output().map_err(|failure| WorkflowError::new(graph.name, vec![failure], None))
        } else {
            let failures = errors
                .iter_mut()
                .enumerate()
                .filter(|(id, _)| verdict.listed.get(*id).copied().unwrap_or(false))
                .filter_map(|(id, error)| {
                    error.take().map(|error| NodeFailure {
                        node: graph.nodes[id].name,
                        attempts: attempts(id, statuses[id]),
                        error,
                    })
                })
                .collect();
            let mut error = WorkflowError::new(graph.name, failures, cancelled);
            error.set_compensations(compensations);
            Err(error)
        };
        Outcome { result, report }
    }
}
