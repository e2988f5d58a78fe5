//! `StoredEvent`: an event of a run's journal in the owned, versioned form a store keeps, and
//! `StoredPath`: where a nested node sits.

use std::fmt;
use std::str::FromStr;

use super::StoreError;

/// An event of a run's journal as a store keeps it: owned and versioned
/// ([`StoredEvent::FORMAT`]), so that a journal written by one release is read by the next.
///
/// The engine makes it from its own event type, and reads it back when it resumes the run. The
/// store compares stored events for equality (a re-sent batch) and never looks inside `kind` or
/// `data`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    /// The format of `kind` and `data` ([`StoredEvent::FORMAT`] when written by this release).
    pub format: u16,
    /// Its position in the run's journal, from 0.
    pub seq: u64,
    /// The node, by index in its graph; `None` for run-level events.
    pub node: Option<u32>,
    /// The node's name; `None` for run-level events.
    pub node_name: Option<String>,
    /// The nest instance the node belongs to; `None` for the workflow's own nodes.
    pub path: Option<StoredPath>,
    /// The attempt (1 for the first); 0 outside an attempt.
    pub attempt: u32,
    /// What happened, by name: `RunStarted`, `Requested`, `Completed`, …
    pub kind: String,
    /// The kind's fields as a JSON object (`{"branch":true}`); empty when it has none.
    pub data: Vec<u8>,
    /// Time since the run started, in µs (the engine's monotonic clock).
    pub at_us: u64,
}

impl StoredEvent {
    /// The format this release writes: 1.
    pub const FORMAT: u16 = 1;

    /// An event of `kind` at `seq`, with no node, path, attempt, data or time.
    pub fn new(seq: u64, kind: impl Into<String>) -> StoredEvent {
        StoredEvent {
            format: StoredEvent::FORMAT,
            seq,
            node: None,
            node_name: None,
            path: None,
            attempt: 0,
            kind: kind.into(),
            data: Vec::new(),
            at_us: 0,
        }
    }
}

/// What kind of nest a [`StoredStep`] is an instance of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StepKind {
    /// A `ForEach`: one instance per item, shown `node[index]`.
    ForEach,
    /// A `Loop`: one instance per iteration, shown `node@index`.
    Loop,
    /// A sub-workflow step: one instance, shown `node`.
    Workflow,
}

/// One step of a [`StoredPath`]: an instance of a nest node.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StoredStep {
    /// The nest node's name.
    pub node: String,
    /// Its kind.
    pub kind: StepKind,
    /// The instance (item index, iteration, or 0 for a sub-workflow).
    pub index: u64,
}

/// Where a nested node sits: the nest instances that hold it, outermost first. Shown (and
/// parsed) as the engine shows a node's path: `charge[3]`, `poll@2`, `payment`, nested with
/// `/` (`order/charge[3]/poll@2`); stores keep it as that text.
///
/// ```
/// use flowdag_store::{StepKind, StoredPath};
///
/// let path: StoredPath = "order/charge[3]/poll@2".parse()?;
/// assert_eq!(path.0[1].kind, StepKind::ForEach);
/// assert_eq!(path.0[1].index, 3);
/// assert_eq!(path.to_string(), "order/charge[3]/poll@2");
/// # Ok::<(), flowdag_store::StoreError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct StoredPath(pub Vec<StoredStep>);

impl fmt::Display for StoredPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, step) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("/")?;
            }
            match step.kind {
                StepKind::ForEach => write!(f, "{}[{}]", step.node, step.index)?,
                StepKind::Loop => write!(f, "{}@{}", step.node, step.index)?,
                StepKind::Workflow => f.write_str(&step.node)?,
            }
        }
        Ok(())
    }
}

impl FromStr for StoredPath {
    type Err = StoreError;

    /// Parses the shown form; the empty string is the empty path.
    fn from_str(s: &str) -> Result<StoredPath, StoreError> {
        if s.is_empty() {
            return Ok(StoredPath::default());
        }
        let bad = |why: &str| StoreError::Invalid {
            why: format!("instance path `{s}`: {why}"),
        };
        let index = |digits: &str| {
            digits
                .parse::<u64>()
                .map_err(|_| bad("an index is not a number"))
        };
        let mut steps = Vec::new();
        for part in s.split('/') {
            let step = if let Some(open) = part.strip_suffix(']') {
                let (node, digits) = open
                    .rsplit_once('[')
                    .ok_or_else(|| bad("`]` without `[`"))?;
                (node, StepKind::ForEach, index(digits)?)
            } else if let Some((node, digits)) = part.rsplit_once('@') {
                (node, StepKind::Loop, index(digits)?)
            } else {
                (part, StepKind::Workflow, 0)
            };
            if step.0.is_empty() {
                return Err(bad("a step has no node name"));
            }
            steps.push(StoredStep {
                node: step.0.to_owned(),
                kind: step.1,
                index: step.2,
            });
        }
        Ok(StoredPath(steps))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_round_trip_through_their_shown_form() {
        for shown in [
            "",
            "charge[3]",
            "poll@12",
            "payment",
            "order/charge[3]/retry@1",
        ] {
            let path: StoredPath = shown.parse().expect("valid");
            assert_eq!(path.to_string(), shown);
        }
        let path: StoredPath = "a[1]/b".parse().expect("valid");
        assert_eq!(path.0[1].kind, StepKind::Workflow);
        assert_eq!(path.0[0].index, 1);
        for bad in ["a[x]", "a]", "@3", "a/", "p@"] {
            assert!(bad.parse::<StoredPath>().is_err(), "{bad}");
        }
    }
}
