//! Durable nests: what the code `#[flow(durable)]` generates for a `ForEach` or a `Loop`
//! calls, re-exported by `__private` only.
//!
//! Each instance's future is wrapped by [`journaled_instance`]: when the run was loaded with
//! the instance's end (it ended before the run stopped), the wrapper gives that end back
//! without running the body; otherwise it runs the body and hands its end to the journal,
//! which stores it with its next batch (`attempt::Records`, the run's outputs under the
//! instance's record: `ship[3]`). A `ForEach` instance's end carries a fingerprint of its item,
//! so that a resumed run whose source yields another item there stops with
//! [`DurableError::Instance`](super::DurableError::Instance) instead of mixing the two.
//!
//! The nest node's own output is stored when the node completes, as any step's is
//! ([`complete_durable_nest`]); an `on_failure = collect` output keeps each failed instance's
//! error as its failures' texts ([`complete_durable_collect`], [`restore_collect`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::generated::{capture, take_restore};
use super::{CURRENT, Durable};
use crate::attempt::{InstanceEnd, InstanceRecord, Records};
use crate::error::{NodeError, NodeFailure, WorkflowError};
use crate::graph::Graph;
use crate::nest_ctx::NestCtx;
use crate::report::{Outcome, Report};
use crate::scheduler::RunSetup;
use crate::slot::Slot;

/// The items of a durable `ForEach`: each instance's end is stored with a fingerprint of its
/// item (its JSON's hash), so that a resumed run whose source changed is refused.
#[diagnostic::on_unimplemented(
    message = "the items of a durable `ForEach` must be `Serialize`: `{Self}` is not",
    label = "the items of this source are not `Serialize`",
    note = "each instance's end is stored with a fingerprint of its item, so that a resumed run whose source changed is refused instead of mixing two items under one key; derive `serde::Serialize` for the item, or iterate over a key of it (an index, an id)"
)]
pub trait DurableItem {
    /// The item's fingerprint.
    fn fingerprint(&self) -> Option<u64>;
}

impl<T: Serialize + ?Sized> DurableItem for T {
    /// The hash of the item's JSON with object keys sorted (a map's keys serialize in its own
    /// order, a `HashMap`'s differently in each process): the same item gives the same
    /// fingerprint in every process.
    fn fingerprint(&self) -> Option<u64> {
        let value = serde_json::to_value(self).ok()?;
        let mut json = Vec::new();
        canonical(&value, &mut json);
        Some(crate::store::fnv1a(&[&json]))
    }
}

/// `value` as JSON with the keys of every object sorted, whatever order the map keeps them in.
fn canonical(value: &serde_json::Value, out: &mut Vec<u8>) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            out.push(b'{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(Value::String(key.clone()).to_string().as_bytes());
                out.push(b':');
                if let Some(inner) = map.get(key) {
                    canonical(inner, out);
                }
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical(item, out);
            }
            out.push(b']');
        }
        other => out.extend_from_slice(other.to_string().as_bytes()),
    }
}

/// The fingerprint of a durable `ForEach`'s item (see [`DurableItem`]).
fn fingerprint<T: DurableItem>(item: &T) -> Option<u64> {
    item.fingerprint()
}

/// How a durable `ForEach` fingerprints its items.
pub type FingerprintOf<T> = fn(&T) -> Option<u64>;

/// A `ForEach`'s source, checked at compile time to yield items a durable run can
/// fingerprint, and how each item is fingerprinted. Called by generated code, spanned on the
/// source.
pub fn durable_source<S>(source: S) -> (S, FingerprintOf<S::Item>)
where
    S: crate::drivers::ForEachSource,
    S::Item: DurableItem,
{
    (source, fingerprint::<S::Item>)
}

/// A stream `ForEach`'s source, checked as [`durable_source`] is.
pub fn durable_stream_source<S>(source: S) -> (S, FingerprintOf<S::Item>)
where
    S: crate::drivers::ForEachStream,
    S::Item: DurableItem,
{
    (source, fingerprint::<S::Item>)
}

/// A failed instance's error as it is stored: each failure's node, attempts and text.
#[derive(Serialize, Deserialize)]
struct StoredFailure {
    /// The instance's index in its nest (the last step of the error's path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    index: Option<u64>,
    failures: Vec<StoredNodeFailure>,
}

#[derive(Serialize, Deserialize)]
struct StoredNodeFailure {
    node: String,
    attempts: u32,
    error: String,
}

impl StoredFailure {
    fn of(error: &WorkflowError) -> StoredFailure {
        StoredFailure {
            index: error
                .path()
                .and_then(|path| path.steps().last())
                .map(|step| step.index),
            failures: error
                .failures()
                .iter()
                .map(|failure| StoredNodeFailure {
                    node: failure.node.to_owned(),
                    attempts: failure.attempts,
                    error: failure.error.to_string(),
                })
                .collect(),
        }
    }

    /// The error back, its nodes named by `body`'s nodes (an unknown name by the body's
    /// workflow), each failure's error its text.
    fn into_error(self, body: &'static Graph) -> WorkflowError {
        let failures = self
            .failures
            .into_iter()
            .map(|failure| NodeFailure {
                node: body
                    .nodes
                    .iter()
                    .find(|node| node.name == failure.node)
                    .map_or(body.name, |node| node.name),
                attempts: failure.attempts,
                error: NodeError::Failed(failure.error.into()),
            })
            .collect();
        WorkflowError::new(body.name, failures, None)
    }
}

/// An end as stored: the output, or the failure.
#[derive(Serialize, Deserialize)]
enum Ended<O> {
    Ok(O),
    Err(StoredFailure),
}

/// An instance's stored end: its item's fingerprint (`ForEach`) and its end.
#[derive(Serialize, Deserialize)]
struct StoredEnd<O> {
    item: Option<u64>,
    end: Ended<O>,
}

/// An end, serialized as [`StoredEnd`] without cloning the output.
#[derive(Serialize)]
struct StoredEndRef<'a, O> {
    item: Option<u64>,
    end: Ended<&'a O>,
}

/// What an instance records its end under, if it belongs to a durable run's nest. Called by
/// generated code with the instance's setup, before the setup goes to the body.
pub fn instance_record(setup: &RunSetup) -> Option<InstanceRecord> {
    setup.keys.as_ref()?.record.clone()
}

/// Wraps the future of one instance of a durable nest (see the module's documentation):
/// `body` is the nest's body graph, `record` what [`instance_record`] gave, `item` the
/// fingerprint of a `ForEach`'s item.
pub fn journaled_instance<O, F>(
    body: &'static Graph,
    record: Option<InstanceRecord>,
    item: Option<u64>,
    future: F,
) -> JournaledInstance<F, O>
where
    O: Durable,
    F: Future<Output = Outcome<O>>,
{
    JournaledInstance {
        body,
        record,
        item,
        looked: false,
        task: None,
        encode: encode::<O>,
        decode: restored::<O>,
        future,
    }
}

/// An instance's end as stored ([`StoredEnd`]).
fn encode<O: Serialize>(
    item: Option<u64>,
    result: &Result<O, WorkflowError>,
) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&StoredEndRef {
        item,
        end: match result {
            Ok(output) => Ended::Ok(output),
            Err(error) => Ended::Err(StoredFailure::of(error)),
        },
    })
}

pin_project! {
    /// The future of one instance of a durable nest ([`journaled_instance`]). Its output's
    /// (de)serialization is kept as function pointers, so that only [`journaled_instance`]
    /// asks for `Durable` (one error on an output that cannot be stored).
    #[must_use = "futures do nothing unless polled"]
    pub struct JournaledInstance<F, O> {
        body: &'static Graph,
        record: Option<InstanceRecord>,
        item: Option<u64>,
        looked: bool,
        // Executed as a task by a worker (a distributed run): what it waits for.
        task: Option<InstanceTask>,
        encode: Encode<O>,
        decode: Decode<O>,
        #[pin]
        future: F,
    }
}

/// An instance of a distributed run's nest executed as a task: the decider waits for its
/// outcome instead of running its body. Dropped before the outcome came (the nest failed, or
/// was withdrawn), its task is closed.
struct InstanceTask {
    records: Arc<Records>,
    node: u32,
    record: Arc<str>,
    done: bool,
}

impl Drop for InstanceTask {
    fn drop(&mut self) {
        if !self.done {
            self.records.drop_wanted(self.node, &self.record);
        }
    }
}

/// Whether an instance runs as a task: its run is distributed, it is an instance of one of
/// the run's own nests (nested deeper, it runs inside its outer instance, wherever that
/// runs), the nest's driver did not keep it here (a `ForEach` over a stream), and its body
/// may run in any process (no step that waits for the run's signals, starts a child run, or
/// completes, cancels or terminates something outside the instance).
fn runs_as_task(record: &InstanceRecord, body: &'static Graph) -> bool {
    record.records.is_remote(record.node) && !record.record.contains('/') && body.runs_anywhere()
}

/// How an instance's outcome is stored.
type Encode<O> = fn(Option<u64>, &Result<O, WorkflowError>) -> serde_json::Result<Vec<u8>>;
/// How an instance's stored end is read back (`Err`: why it cannot be used).
type Decode<O> = fn(&[u8], Option<u64>, &'static Graph) -> Result<Outcome<O>, String>;

impl<F, O> Future for JournaledInstance<F, O>
where
    F: Future<Output = Outcome<O>>,
{
    type Output = Outcome<O>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome<O>> {
        let this = self.project();
        if !*this.looked {
            *this.looked = true;
            if let Some(record) = this.record.as_ref() {
                if let Some(bytes) = record.records.loaded_end(record.node, &record.record) {
                    return match (this.decode)(&bytes, *this.item, this.body) {
                        Ok(outcome) => Poll::Ready(outcome),
                        Err(reason) => {
                            // The journal stops the run after this poll.
                            record.records.break_on(&record.record, reason);
                            Poll::Pending
                        }
                    };
                }
                if runs_as_task(record, this.body) {
                    *this.task = Some(InstanceTask {
                        records: Arc::clone(&record.records),
                        node: record.node,
                        record: Arc::clone(&record.record),
                        done: false,
                    });
                }
            }
        }
        if let Some(task) = this.task.as_mut() {
            if task.done {
                return Poll::Pending;
            }
            let outcome = std::task::ready!(
                task.records
                    .want(task.node, &task.record, cx.waker())
                    .map_or(Poll::Pending, Poll::Ready)
            );
            task.done = true;
            let bytes = match outcome {
                Ok(bytes) => Ok(bytes),
                // The worker could not run the instance (its inputs could not be restored,
                // its driver did not start it): the instance failed with that.
                Err(error) => (this.encode)(*this.item, &Err(task_failure(this.body, error)))
                    .map_err(|error| format!("its failure cannot be stored: {error}")),
            };
            let restored = bytes.and_then(|bytes| {
                let outcome = (this.decode)(&bytes, *this.item, this.body)?;
                Ok((bytes, outcome))
            });
            return match restored {
                Ok((bytes, outcome)) => {
                    task.records.ended(InstanceEnd {
                        node: task.node,
                        record: task.record.to_string(),
                        type_name: std::any::type_name::<O>(),
                        bytes,
                        remote: true,
                    });
                    Poll::Ready(outcome)
                }
                Err(reason) => {
                    task.records.break_on(&task.record, reason);
                    Poll::Pending
                }
            };
        }
        let outcome = std::task::ready!(this.future.poll(cx));
        if let Some(record) = this.record.as_ref() {
            match (this.encode)(*this.item, &outcome.result) {
                Ok(bytes) => record.records.ended(InstanceEnd {
                    node: record.node,
                    record: record.record.to_string(),
                    type_name: std::any::type_name::<O>(),
                    bytes,
                    remote: false,
                }),
                Err(error) => record.records.break_on(
                    &record.record,
                    format!("its output cannot be stored: {error}"),
                ),
            }
        }
        Poll::Ready(outcome)
    }
}

/// The error of an instance whose task a worker could not run: one failure of the body,
/// `why`.
fn task_failure(body: &'static Graph, why: String) -> WorkflowError {
    WorkflowError::new(
        body.name,
        vec![NodeFailure {
            node: body.name,
            attempts: 1,
            error: NodeError::Failed(why.into()),
        }],
        None,
    )
}

/// An instance's outcome from its stored end; `Err`: why it cannot be used.
fn restored<O: DeserializeOwned>(
    bytes: &[u8],
    item: Option<u64>,
    body: &'static Graph,
) -> Result<Outcome<O>, String> {
    let stored: StoredEnd<O> = serde_json::from_slice(bytes).map_err(|error| {
        format!(
            "its stored end cannot be read as `{}`: {error}",
            std::any::type_name::<O>()
        )
    })?;
    if stored.item != item {
        return Err("its item is not the one it had before the run stopped: the `ForEach`'s source yields other items now".to_owned());
    }
    let result = match stored.end {
        Ended::Ok(output) => Ok(output),
        Ended::Err(failure) => Err(failure.into_error(body)),
    };
    let report = Report::restored(body, result.is_ok());
    Ok(Outcome { result, report })
}

/// Puts a durable nest node's output in its slot and hands its JSON to the scheduler, which
/// journals it with the node's completion: `complete_durable` for a driver's result, whose
/// error is already the node's. Called by generated code.
pub fn complete_durable_nest<T: Durable>(
    slot: &Slot<T>,
    result: Result<T, NodeError>,
) -> Result<(), NodeError> {
    let value = result?;
    capture(&value, std::any::type_name::<T>())?;
    slot.put(value);
    Ok(())
}

/// The settle of a durable `ForEach` whose other instances run on after `min` (`rest =
/// run`): puts the output in the node's slot and hands its JSON to the scheduler, which
/// journals it with the node's completion. A node restored from the store has its output in
/// the slot already (its driver runs again only for the instances whose end was not stored):
/// the settle of that driver is dropped. Called by generated code.
pub fn settle_durable_nest<T: Durable>(slot: &Slot<T>, value: T) {
    if slot.get().is_some() {
        return;
    }
    // An output that cannot be stored is not journaled: the node runs again on resume.
    let _ = capture(&value, std::any::type_name::<T>());
    slot.put(value);
}

/// A restored `ForEach` whose other instances run on after `min`: its output is in its slot,
/// so it is settled now, whatever its driver does (the node completes at once and the driver
/// lingers, running the instances whose end was not stored). Called by generated code.
pub fn settle_restored(nest: &NestCtx) {
    nest.settle();
}

/// [`settle_durable_nest`] for an `on_failure = collect` output.
pub fn settle_durable_collect<O: Durable>(
    slot: &Slot<Vec<Result<O, WorkflowError>>>,
    value: Vec<Result<O, WorkflowError>>,
) {
    if slot.get().is_some() {
        return;
    }
    let _ = capture(
        &collected(&value),
        std::any::type_name::<Vec<Result<O, WorkflowError>>>(),
    );
    slot.put(value);
}

/// The stored form of an `on_failure = collect` output.
fn collected<O: Serialize>(value: &[Result<O, WorkflowError>]) -> Vec<Ended<&O>> {
    value
        .iter()
        .map(|entry| match entry {
            Ok(output) => Ended::Ok(output),
            Err(error) => Ended::Err(StoredFailure::of(error)),
        })
        .collect()
}

/// [`complete_durable_nest`] for an `on_failure = collect` output: each failed instance's
/// error is stored as its failures' texts.
pub fn complete_durable_collect<O: Durable>(
    slot: &Slot<Vec<Result<O, WorkflowError>>>,
    result: Result<Vec<Result<O, WorkflowError>>, NodeError>,
) -> Result<(), NodeError> {
    let value = result?;
    capture(
        &collected(&value),
        std::any::type_name::<Vec<Result<O, WorkflowError>>>(),
    )?;
    slot.put(value);
    Ok(())
}

/// After a durable nest step was restored whole from its stored output: its instances'
/// stored ends go into the step's summary (the report's `NestReport`: started, completed,
/// failed, the first failures), as if they had ended in this process. Called by generated
/// code.
pub fn restore_summary(nest: &NestCtx) {
    let found = CURRENT.with(|c| {
        let c = c.borrow();
        let ctx = c.as_ref()?;
        let nested = ctx.nest.as_ref()?;
        Some(
            nested
                .records
                .loaded_of(&nested.within, nest.node(), ctx.attempt.attempt()),
        )
    });
    let body = nest.body();
    let mut found = found.unwrap_or_default();
    // A loop's iterations before the ones it goes on from succeeded (their ends were
    // superseded; see `attempt::loop_start`).
    if nest.kind() == crate::nest::NestKind::Loop
        && let Some(first) = crate::attempt::loop_start(found.iter().map(|(index, _)| *index))
    {
        found.retain(|(index, _)| *index >= first);
        nest.restored_before(first);
    }
    for (index, bytes) in found {
        let Ok(stored) = serde_json::from_slice::<StoredEnd<serde::de::IgnoredAny>>(&bytes) else {
            continue;
        };
        match stored.end {
            Ended::Ok(_) => nest.restored(index, None),
            Ended::Err(failure) => {
                let mut error = failure.into_error(body);
                error.set_path(nest.path_of(index));
                nest.restored(index, Some(&error));
            }
        }
    }
}

/// `restore_output` for an `on_failure = collect` output: each failed instance's error comes
/// back with its failures' texts, its nodes named by `body`'s.
pub fn restore_collect<O: Durable>(
    slot: &Slot<Vec<Result<O, WorkflowError>>>,
    node: &'static str,
    nest: &NestCtx,
) -> Option<Result<(), NodeError>> {
    let body = nest.body();
    let bytes = take_restore()?;
    Some(match serde_json::from_slice::<Vec<Ended<O>>>(&bytes) {
        Ok(entries) => {
            slot.put(
                entries
                    .into_iter()
                    .map(|entry| match entry {
                        Ended::Ok(output) => Ok(output),
                        Ended::Err(failure) => {
                            let index = failure.index;
                            let mut error = failure.into_error(body);
                            if let Some(index) = index {
                                error.set_path(nest.path_of(index));
                            }
                            Err(error)
                        }
                    })
                    .collect(),
            );
            Ok(())
        }
        Err(error) => Err(NodeError::Failed(
            format!(
                "the stored output of `{node}` cannot be read as `{}`: {error}",
                std::any::type_name::<Vec<Result<O, WorkflowError>>>()
            )
            .into(),
        )),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::DurableItem;

    #[test]
    fn an_item_has_one_fingerprint_whatever_order_its_maps_keep() {
        let entries: Vec<(String, u32)> = (0..64).map(|i| (format!("key-{i}"), i)).collect();
        let forward: HashMap<String, u32> = entries.iter().cloned().collect();
        let backward: HashMap<String, u32> = entries.iter().rev().cloned().collect();
        let mut other = forward.clone();
        other.insert("key-7".to_owned(), 8);
        assert_eq!(forward.fingerprint(), backward.fingerprint());
        assert_ne!(forward.fingerprint(), other.fingerprint());
        assert_ne!(3u32.fingerprint(), 4u32.fingerprint());
        assert_ne!("a".fingerprint(), "b".fingerprint());
    }
}
