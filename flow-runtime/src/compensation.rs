//! Saga compensation: what a failed run did to undo its completed steps.
//!
//! A step written `Operation(charge(&order), compensate = refund(&charge))` has a
//! compensation. When a run fails, the scheduler runs the compensations of the steps that
//! completed, one at a time, in reverse graph order (`scheduler/compensate.rs`), and records what
//! each did as a [`Compensation`], which the run's [`Report`](crate::Report) and
//! [`WorkflowError`](crate::WorkflowError) list.

use std::fmt;
use std::sync::Arc;

/// How one step's compensation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub enum CompensationOutcome {
    /// The compensation succeeded.
    Compensated,
    /// Its last attempt failed: the step's effect is not undone. Compensation stops there.
    Failed {
        /// The last attempt's error, rendered.
        error: Arc<str>,
    },
    /// It never ran: a compensation that runs after it in reverse graph order failed for good
    /// first, and compensation stopped.
    NotRun,
}

/// What a failed run did to undo one completed step.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Compensation {
    pub(crate) node: &'static str,
    pub(crate) attempts: u32,
    pub(crate) outcome: CompensationOutcome,
}

impl Compensation {
    /// The step whose effect the compensation undoes.
    pub fn node(&self) -> &'static str {
        self.node
    }

    /// How many attempts the compensation made (0 when it never ran).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// How it ended.
    pub fn outcome(&self) -> &CompensationOutcome {
        &self.outcome
    }

    /// Whether the step's effect was undone.
    pub fn is_compensated(&self) -> bool {
        self.outcome == CompensationOutcome::Compensated
    }
}

impl fmt::Display for Compensation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let node = self.node;
        match &self.outcome {
            CompensationOutcome::Compensated => write!(f, "`{node}` compensated"),
            CompensationOutcome::Failed { error } => {
                let attempts = self.attempts;
                let noun = if attempts == 1 { "attempt" } else { "attempts" };
                write!(
                    f,
                    "the compensation of `{node}` failed after {attempts} {noun}: {error}"
                )
            }
            CompensationOutcome::NotRun => write!(f, "`{node}` not compensated"),
        }
    }
}
