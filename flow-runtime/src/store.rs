//! Storage for durable runs (feature `durable`): the crate `flowdag-store` (the [`Store`] trait,
//! the records a store keeps, [`StoreError`], [`MemoryStore`]), re-exported whole.
//!
//! A store depends on `flowdag-store` alone, never on this engine; what joins the two lives here,
//! on the engine's side: the stored form of an [`Event`] (`StoredEvent::try_from(&event)`), of
//! a [`NodePath`] (`StoredPath::from(&path)`) and of a [`NestKind`]. See the documentation of
//! `flowdag-store` for what a store keeps and how to write one.
//!
//! ```
//! use flowdag_runtime::store::{MemoryStore, RunFilter, Store};
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = MemoryStore::new();
//! assert!(store.list_runs(&RunFilter::default()).await?.is_empty());
//! # Ok::<(), flowdag_runtime::store::StoreError>(())
//! # }).unwrap();
//! ```

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use flowdag_store::*;

use crate::events::Event;
use crate::nest::{NestKind, NodePath};

/// The stored form of an event: its kind by name, the kind's fields as a JSON object, its path
/// as text. [`StoreError::Invalid`] when the fields cannot be serialized.
impl TryFrom<&Event> for StoredEvent {
    type Error = StoreError;

    fn try_from(event: &Event) -> Result<StoredEvent, StoreError> {
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

/// The stored form of a node's path: the same steps, owned; shown alike.
impl From<&NodePath> for StoredPath {
    fn from(path: &NodePath) -> StoredPath {
        StoredPath(
            path.steps()
                .iter()
                .map(|step| StoredStep {
                    node: step.node.to_owned(),
                    kind: step.kind.into(),
                    index: step.index,
                })
                .collect(),
        )
    }
}

/// The kind of a stored path's step.
impl From<NestKind> for StepKind {
    fn from(kind: NestKind) -> StepKind {
        match kind {
            NestKind::ForEach => StepKind::ForEach,
            NestKind::Loop => StepKind::Loop,
            NestKind::Workflow => StepKind::Workflow,
        }
    }
}

/// The lease of a task claim by default: a worker heartbeats every third of it.
pub(crate) const TASK_LEASE: Duration = Duration::from_secs(30);

/// Milliseconds since the Unix epoch by this process's clock.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `now + after` in ms, saturating.
pub(crate) fn due_after(now_ms: u64, after: Duration) -> u64 {
    now_ms.saturating_add(u64::try_from(after.as_millis()).unwrap_or(u64::MAX))
}

/// FNV-1a 64 over the concatenated `parts`: a hash that is the same in every release and on
/// every machine (std's `DefaultHasher` is not), for graph fingerprints and input hashes.
pub(crate) fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in *part {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    hash
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

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
        let stored = StoredEvent::try_from(&event(
            EventKind::Retrying {
                error: Arc::from("no route"),
                delay: Duration::from_millis(20),
            },
            Some(path.clone()),
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
        let stored_path = stored.path.as_ref().expect("valid");
        assert_eq!(stored_path.to_string(), "orders[3]/poll@2");
        // The store shows a path as the engine does, and parses it back to the same steps.
        assert_eq!(stored_path.to_string(), path.to_string());
        assert_eq!(stored_path.to_string().parse(), Ok(stored_path.clone()));
        assert_eq!(stored_path.0[1].kind, StepKind::Loop);

        let plain = StoredEvent::try_from(&event(EventKind::Requested, None)).expect("valid");
        assert_eq!(plain.kind, "Requested");
        assert!(plain.data.is_empty());
        assert_eq!(plain.path, None);
        let branch =
            StoredEvent::try_from(&event(EventKind::Completed { branch: Some(true) }, None))
                .expect("valid");
        assert_eq!(branch.data, br#"{"branch":true}"#);
    }

    #[test]
    fn every_nest_kind_has_a_step_kind_shown_alike() {
        for (kind, shown) in [
            (NestKind::ForEach, "n[1]"),
            (NestKind::Loop, "n@1"),
            (NestKind::Workflow, "n"),
        ] {
            let path = NodePath::new(PathStep {
                node: "n",
                kind,
                index: 1,
            });
            assert_eq!(path.to_string(), shown);
            assert_eq!(StoredPath::from(&path).to_string(), shown);
        }
    }

    #[test]
    fn fnv1a_is_the_published_function() {
        // Test vectors of FNV-1a 64.
        assert_eq!(fnv1a(&[b""]), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(&[b"a"]), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(&[b"foo", b"bar"]), fnv1a(&[b"foobar"]));
    }
}
