//! `StoredEvent`: an [`Event`] in the owned, versioned form a store keeps.

use std::fmt;
use std::str::FromStr;

use super::StoreError;
use crate::events::Event;
use crate::nest::{NestKind, NodePath};

/// An event as a store keeps it: owned (the runtime's [`Event`] borrows `&'static str`s from
/// the workflow's tables) and versioned ([`StoredEvent::FORMAT`]), so that a journal written by
/// one release is read by the next.
///
/// The store compares stored events for equality (a re-sent batch) and never looks inside
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
    /// What happened: [`EventKind::name`](crate::EventKind::name) (`Requested`, `Completed`, …).
    pub kind: String,
    /// The kind's fields as a JSON object (`{"branch":true}`); empty when it has none.
    pub data: Vec<u8>,
    /// Time since the run started, in µs (the runtime's monotonic clock).
    pub at_us: u64,
}

impl StoredEvent {
    /// The format this release writes: 1.
    pub const FORMAT: u16 = 1;

    /// An event of `kind` at `seq`, with no node, attempt, data or time.
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

    /// The stored form of `event`.
    pub fn from_event(event: &Event) -> Result<StoredEvent, StoreError> {
        let invalid = |e: serde_json::Error| StoreError::Invalid {
            why: format!("event #{} cannot be stored: {e}", event.seq),
        };
        let data = match serde_json::to_value(&event.kind).map_err(invalid)? {
            // A variant with fields is `{"Name": {fields}}`; one without is `"Name"`.
            serde_json::Value::Object(map) => match map.into_iter().next() {
                Some((_, fields)) => serde_json::to_vec(&fields).map_err(invalid)?,
                None => Vec::new(),
            },
            _ => Vec::new(),
        };
        Ok(StoredEvent {
            format: StoredEvent::FORMAT,
            seq: event.seq,
            node: event.node,
            node_name: event.node_name.map(str::to_owned),
            path: event.path.as_ref().map(StoredPath::from),
            attempt: event.attempt,
            kind: event.kind.name().to_owned(),
            data,
            at_us: u64::try_from(event.at.as_micros()).unwrap_or(u64::MAX),
        })
    }
}

/// One step of a [`StoredPath`]: an instance of a nest node.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StoredStep {
    /// The nest node's name.
    pub node: String,
    /// Its kind.
    pub kind: NestKind,
    /// The instance (item index, iteration, or 0 for a sub-workflow).
    pub index: u64,
}

/// The owned form of a [`NodePath`]: where a nested node sits. Shown (and parsed) as the path
/// is: `charge[3]`, `poll@2`, `payment`, nested with `/`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct StoredPath(pub Vec<StoredStep>);

impl From<&NodePath> for StoredPath {
    fn from(path: &NodePath) -> StoredPath {
        StoredPath(
            path.steps()
                .iter()
                .map(|step| StoredStep {
                    node: step.node.to_owned(),
                    kind: step.kind,
                    index: step.index,
                })
                .collect(),
        )
    }
}

impl fmt::Display for StoredPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, step) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("/")?;
            }
            match step.kind {
                NestKind::ForEach => write!(f, "{}[{}]", step.node, step.index)?,
                NestKind::Loop => write!(f, "{}@{}", step.node, step.index)?,
                NestKind::Workflow => f.write_str(&step.node)?,
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
                (node, NestKind::ForEach, index(digits)?)
            } else if let Some((node, digits)) = part.rsplit_once('@') {
                (node, NestKind::Loop, index(digits)?)
            } else {
                (part, NestKind::Workflow, 0)
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
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::events::{EventKind, RunId};
    use crate::nest::PathStep;

    fn event(kind: EventKind, path: Option<NodePath>) -> Event {
        Event {
            run: RunId(7),
            seq: 4,
            node: Some(2),
            node_name: Some("charge"),
            attempt: 3,
            at: Duration::from_micros(1500),
            kind,
            path,
        }
    }

    #[test]
    fn events_are_stored_with_their_fields_and_path() {
        let path = NodePath::new(PathStep {
            node: "orders",
            kind: NestKind::ForEach,
            index: 3,
        })
        .child(PathStep {
            node: "poll",
            kind: NestKind::Loop,
            index: 2,
        });
        let stored = StoredEvent::from_event(&event(
            EventKind::Retrying {
                error: Arc::from("no route"),
                delay: Duration::from_millis(20),
            },
            Some(path),
        ))
        .expect("valid");
        assert_eq!(stored.format, 1);
        assert_eq!((stored.seq, stored.node, stored.attempt), (4, Some(2), 3));
        assert_eq!(stored.node_name.as_deref(), Some("charge"));
        assert_eq!(stored.kind, "Retrying");
        assert_eq!(stored.at_us, 1500);
        let data: serde_json::Value = serde_json::from_slice(&stored.data).expect("valid");
        assert_eq!(data["error"], "no route");
        assert_eq!(data["delay"]["nanos"], 20_000_000);
        assert_eq!(
            stored.path.as_ref().expect("valid").to_string(),
            "orders[3]/poll@2"
        );

        let plain = StoredEvent::from_event(&event(EventKind::Requested, None)).expect("valid");
        assert_eq!(plain.kind, "Requested");
        assert!(plain.data.is_empty());
        assert_eq!(plain.path, None);
        let branch =
            StoredEvent::from_event(&event(EventKind::Completed { branch: Some(true) }, None))
                .expect("valid");
        assert_eq!(branch.data, br#"{"branch":true}"#);
    }

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
        assert_eq!(path.0[1].kind, NestKind::Workflow);
        assert_eq!(path.0[0].index, 1);
        for bad in ["a[x]", "a]", "@3", "a/", "p@"] {
            assert!(bad.parse::<StoredPath>().is_err(), "{bad}");
        }
    }
}
