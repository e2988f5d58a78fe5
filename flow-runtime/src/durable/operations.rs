//! Operations on durable runs from outside them: cancel, terminate, redrive, delete.
//!
//! None of them needs the workflow's code: they work on the store alone, from any process
//! (an operator's `flow` command, an admin endpoint of the application). What a run's code
//! must do (cancel its steps, run its compensations) the run does itself, the next time it is
//! polled live or loaded: the operation leaves it a request (see `journal/requests.rs`).
//!
//! A **redrive** appends one event to a failed or cancelled run, `Redriven`, which names the
//! place in the journal where the run failed or was cancelled (`from`) and the steps that
//! failed with their last attempt (`floors`), and sets the run `running` again. Whoever loads
//! it replays the journal up to `from`, skips what came after (the failure, the steps it
//! skipped or aborted, the run's end) and goes on live from there: the steps that completed
//! keep their outputs, the steps that were running run again with the same attempt (and key),
//! and each failed step gets a new attempt, numbered after its last one (so a new key), with
//! its whole retry budget again. A step that completed after the failure (a branch that
//! went on without the failed step) is not run again: when the redriven run requests it, it
//! takes the output the step stored, and its completion is journaled anew. The events from
//! before the redrive stay in the journal.

use std::time::Duration;

use serde_json::{Value, json};

use super::DurableError;
use super::journal::{CANCEL_REQUESTED, TERMINATED};
use crate::store::{
    Batch, NewSignal, Owner, RunEnd, RunFilter, RunStatus, RunSummary, SignalMode, SignalSent,
    Store, StoreError, StoredEvent, TimerChange, requests,
};

/// The kind of the event that reopens a failed or cancelled run.
pub(crate) const REDRIVEN: &str = "Redriven";

/// What [`cancel_run`] and [`terminate_run`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stop {
    /// The run has ended (`terminate_run` on a run nobody held).
    Ended,
    /// The request is stored: the run carries it out the next time it runs. `holder` is the
    /// owner whose lease held the run when the request was made (it sees the request within
    /// its `request_poll`, at once on PostgreSQL, and may have carried it out by the time
    /// this returns); `None`: nobody held it, and the next worker (or resume) that loads it
    /// carries it out.
    Requested {
        /// Who holds the run, if anyone.
        holder: Option<String>,
    },
}

/// What [`redrive_run`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redriven {
    /// The run, now `running` with no owner.
    pub run: RunSummary,
    /// The steps that get a new attempt, by name, with their last attempt.
    pub failed: Vec<(String, u32)>,
    /// The journal's sequence number from which the old events are not replayed.
    pub from: u64,
}

/// Asks run `run` to cancel itself: its running steps are cancelled and its compensations run
/// as its failure rules say, as when its cancel token is cancelled; the run ends `cancelled`
/// (its error lists its compensations, and which failed for good, if one did). `reason` is
/// journaled with the request.
///
/// The request is a stored signal (`flow.cancel`): a live run sees it within its
/// `request_poll` (at once on PostgreSQL), a run nobody drives is made due, and the next
/// worker or resume that loads it cancels it before anything else runs.
///
/// # Errors
///
/// [`DurableError::Store`]: no such run ([`StoreError::NotFound`]), it has finished
/// ([`StoreError::Finished`]), or the store failed.
pub async fn cancel_run<S: Store + ?Sized>(
    store: &S,
    run: &str,
    reason: Option<&str>,
) -> Result<Stop, DurableError> {
    // Read first: the holder may hear the request and end the run before a read after it.
    let holder = holder(store, run).await?;
    request(store, run, requests::CANCEL, reason).await?;
    Ok(Stop::Requested { holder })
}

/// Terminates run `run`: it ends `cancelled` at once, without compensation, and nothing of it
/// runs again (what a step is doing when its run is terminated goes on in its process until
/// that run's next commit, which fails). `reason` is journaled with it.
///
/// When nobody holds the run, `owner` takes its lease and ends it here ([`Stop::Ended`]).
/// When a live owner holds it, the request is left for that owner, which ends it within its
/// `request_poll` ([`Stop::Requested`]); so does a store that this process may not write runs
/// to (a SQLite store opened as a client while another process owns it).
///
/// # Errors
///
/// As [`cancel_run`].
pub async fn terminate_run<S: Store + ?Sized>(
    store: &S,
    run: &str,
    reason: Option<&str>,
    owner: &Owner,
) -> Result<Stop, DurableError> {
    let id = request(store, run, requests::TERMINATE, reason).await?;
    let loaded = match store.load_run(run, owner, Duration::from_secs(10)).await {
        Ok(loaded) => loaded,
        Err(StoreError::Busy { owner, .. }) => {
            return Ok(Stop::Requested {
                holder: Some(owner),
            });
        }
        // A client of a SQLite store, or a store that cannot load runs: the owner does it.
        Err(StoreError::Invalid { .. } | StoreError::Unsupported { .. }) => {
            return Ok(Stop::Requested { holder: None });
        }
        Err(error) => return Err(error.into()),
    };
    let lease = loaded.lease.clone();
    if loaded.run.status.is_finished() {
        // It ended meanwhile (the request was refused if it had ended before).
        let _ = store.release(owner, std::slice::from_ref(&lease)).await;
        return Ok(Stop::Ended);
    }
    let mut batch = Batch::new(&lease, loaded.run.next_seq, Duration::ZERO);
    let mut event = StoredEvent::new(loaded.run.next_seq, TERMINATED);
    if let Some(reason) = reason {
        event.data = json!({ "reason": reason }).to_string().into_bytes();
    }
    batch.events.push(event);
    batch.consumed.push(id);
    // Its timers go with it: a redrive must not find its old deadlines.
    batch.timers = loaded
        .timers
        .iter()
        .map(|timer| TimerChange::Clear {
            key: timer.key.clone(),
        })
        .collect();
    batch.status = Some(RunStatus::Cancelled);
    batch.end = Some(RunEnd {
        result: None,
        error: Some(terminated_text(reason)),
    });
    let committed = store.commit(batch).await;
    // Best effort: a lease that is not released expires by itself.
    let _ = store.release(owner, std::slice::from_ref(&lease)).await;
    committed?;
    crate::metrics::run_terminated(&loaded.run.workflow);
    // Its child runs that have not ended are asked to cancel (a run that does not continue as
    // new: one that does names its children after its generation, which only its code knows;
    // they cancel themselves when next loaded).
    super::child::cancel_orphans(store, run, None).await;
    Ok(Stop::Ended)
}

/// The run's stored error when it was terminated.
pub(crate) fn terminated_text(reason: Option<&str>) -> String {
    match reason {
        Some(reason) => format!("terminated by an operator: {reason}"),
        None => "terminated by an operator".to_owned(),
    }
}

/// Stores request `name` for `run`; its signal id.
async fn request<S: Store + ?Sized>(
    store: &S,
    run: &str,
    name: &str,
    reason: Option<&str>,
) -> Result<u64, DurableError> {
    let payload = match reason {
        Some(reason) => json!({ "reason": reason }),
        None => json!({}),
    };
    let sent = store
        .send_signal(NewSignal {
            run: run.to_owned(),
            name: name.to_owned(),
            payload: payload.to_string().into_bytes(),
            mode: SignalMode::Kept,
        })
        .await?;
    match sent {
        SignalSent::Stored { id } => Ok(id),
        // A kept signal is never dropped.
        SignalSent::Dropped => Err(DurableError::Store(StoreError::Invalid {
            why: format!("the store dropped the request `{name}` to run `{run}`"),
        })),
    }
}

/// Who holds `run`'s lease now, if anyone (an expired lease holds nothing).
async fn holder<S: Store + ?Sized>(store: &S, run: &str) -> Result<Option<String>, DurableError> {
    let summary = one(store, run).await?;
    let now = crate::store::now_ms();
    Ok(summary
        .owner
        .filter(|_| summary.lease_until_ms.is_some_and(|until| until > now)))
}

/// Run `run` as listed, looked up by id.
pub(crate) async fn one<S: Store + ?Sized>(
    store: &S,
    run: &str,
) -> Result<RunSummary, DurableError> {
    let filter = RunFilter {
        id: Some(run.to_owned()),
        ..RunFilter::default()
    };
    let mut runs = store.list_runs(&filter).await?;
    match runs.pop() {
        Some(summary) => Ok(summary),
        None => Err(DurableError::Store(StoreError::NotFound {
            run: run.to_owned(),
        })),
    }
}

/// Sets a failed or cancelled run `run` going again from where it failed or was cancelled
/// (see the module's documentation): the steps that completed keep their outputs, each failed
/// step gets a new attempt (a new key) with its whole retry budget, the steps that were
/// running run again. The run is left `running` with no owner: a worker picks it up, or
/// resume it with [`resume`](super::resume).
///
/// A run whose compensations ran is refused: the steps they undid would not run again.
///
/// # Errors
///
/// [`DurableError::Redrive`] for a run whose compensations ran or whose journal has no
/// failure or cancellation; [`DurableError::Store`]: no such run, or a run that neither
/// failed nor was cancelled ([`StoreError::WrongStatus`]), or the store failed.
pub async fn redrive_run<S: Store + ?Sized>(
    store: &S,
    run: &str,
) -> Result<Redriven, DurableError> {
    let summary = one(store, run).await?;
    if !matches!(summary.status, RunStatus::Failed | RunStatus::Cancelled) {
        return Err(DurableError::Store(StoreError::WrongStatus {
            run: run.to_owned(),
            status: summary.status,
            needs: "only a failed or cancelled run can be redriven",
        }));
    }
    let stored = store.events(run, 0).await?;
    let next = stored.last().map_or(0, |event| event.seq + 1);
    let replayed = Replay::of(stored);
    let cut = match Cut::find(&replayed.events) {
        Ok(cut) => cut,
        Err(why) => {
            return Err(DurableError::Redrive {
                run: run.to_owned(),
                why,
            });
        }
    };
    let mut marker = StoredEvent::new(next, REDRIVEN);
    let floors: Vec<Value> = cut
        .floors
        .iter()
        .map(|(node, name, attempt)| json!([node, attempt, name]))
        .collect();
    marker.data = json!({ "from": cut.from, "floors": floors })
        .to_string()
        .into_bytes();
    let summary = store.reopen(run, marker).await?;
    Ok(Redriven {
        run: summary,
        failed: cut
            .floors
            .into_iter()
            .map(|(_, name, attempt)| (name, attempt))
            .collect(),
        from: cut.from,
    })
}

/// Reopens run `run`, which succeeded, to undo it: a marker cuts its journal before its end
/// and says to undo it, and the run is set `running` with no owner. Whoever loads it next
/// replays its journal (running nothing), then cancels it (a `CancelRequested` in its
/// journal), which runs the compensations of its completed steps; it ends `cancelled`, its
/// error listing them. Used for a child run whose parent compensates.
///
/// # Errors
///
/// [`DurableError::Store`]: no such run, a run that did not succeed
/// ([`StoreError::WrongStatus`]), or the store failed; [`DurableError::Redrive`] for a
/// journal without an end.
pub(crate) async fn undo_run<S: Store + ?Sized>(store: &S, run: &str) -> Result<(), DurableError> {
    let summary = one(store, run).await?;
    if summary.status != RunStatus::Succeeded {
        return Err(DurableError::Store(StoreError::WrongStatus {
            run: run.to_owned(),
            status: summary.status,
            needs: "only a run that succeeded can be undone",
        }));
    }
    let stored = store.events(run, 0).await?;
    let next = stored.last().map_or(0, |event| event.seq + 1);
    let replayed = Replay::of(stored);
    let Some(end) = replayed
        .events
        .iter()
        .rev()
        .find(|e| e.node.is_none() && e.kind == "RunFinished")
    else {
        return Err(DurableError::Redrive {
            run: run.to_owned(),
            why: "its journal has no end to undo".to_owned(),
        });
    };
    let mut marker = StoredEvent::new(next, REDRIVEN);
    marker.data = json!({ "from": end.seq, "floors": [], "undo": true })
        .to_string()
        .into_bytes();
    store.reopen(run, marker).await?;
    Ok(())
}

/// Where a redrive cuts a journal, and the failed steps' last attempts.
struct Cut {
    /// The sequence number of the first event not replayed.
    from: u64,
    /// (node, name, last attempt) of each step that failed for good.
    floors: Vec<(u32, String, u32)>,
}

impl Cut {
    /// The cut of the replayed journal `events` (a run's own events, earlier redrives
    /// applied): its first failure for good, cancellation or termination; refused when its
    /// compensations ran.
    fn find(events: &[StoredEvent]) -> Result<Cut, String> {
        if events
            .iter()
            .any(|e| e.kind == "Compensating" || e.kind == "Compensated")
        {
            return Err(
                "its compensations ran: the steps they undid would not run again; start a new run"
                    .to_owned(),
            );
        }
        let at = events
            .iter()
            .position(|e| match e.kind.as_str() {
                "Failed" => e.node.is_some(),
                "Aborted" => e.node.is_some() && cause(e).is_none(),
                CANCEL_REQUESTED | TERMINATED | "RunFinished" => e.node.is_none(),
                _ => false,
            })
            .ok_or_else(|| "its journal has no failure, cancellation or end".to_owned())?;
        let mut floors: Vec<(u32, String, u32)> = Vec::new();
        for event in &events[at..] {
            let (Some(node), "Failed") = (event.node, event.kind.as_str()) else {
                continue;
            };
            let last = events
                .iter()
                .filter(|e| e.node == Some(node))
                .map(|e| e.attempt)
                .max()
                .unwrap_or(event.attempt);
            if !floors.iter().any(|(n, _, _)| *n == node) {
                let name = event.node_name.clone().unwrap_or_else(|| node.to_string());
                floors.push((node, name, last));
            }
        }
        Ok(Cut {
            from: events[at].seq,
            floors,
        })
    }
}

/// The `cause` field of a stored `Aborted` event: `None` for a cancellation.
fn cause(event: &StoredEvent) -> Option<String> {
    serde_json::from_slice::<Value>(&event.data)
        .ok()?
        .get("cause")?
        .as_str()
        .map(str::to_owned)
}

/// A run's journal as it is replayed: its own events (not its nest instances'), without those
/// that redrives cut off, and each redrive's failed steps.
pub(crate) struct Replay {
    /// The events to replay, in order.
    pub(crate) events: Vec<StoredEvent>,
    /// Each redrive: the index in `events` of its first event, and its failed steps with
    /// their last attempt before it.
    pub(crate) epochs: Vec<(usize, Vec<(u32, u32)>)>,
    /// The run's own steps that completed in a part of the journal a redrive cut off (a
    /// branch that went on after the failure): a redriven run that requests one of them
    /// again takes its stored output instead of running it again.
    pub(crate) salvage: Vec<u32>,
    /// The last marker reopened a run that had succeeded to undo it ([`undo_run`]), and the
    /// replay has not met the cancellation that carries it out: once live, the run cancels
    /// itself, which runs its compensations.
    pub(crate) undo: bool,
}

impl Replay {
    /// The replay of a run's stored journal.
    pub(crate) fn of(stored: Vec<StoredEvent>) -> Replay {
        Replay::of_moved(stored, &[])
    }

    /// The replay of a run's stored journal whose steps a compatible change renumbered
    /// (`moved`, as in `Batch::renumber`): a redrive marker that names a failed step by its
    /// number alone names it by its stored number.
    pub(crate) fn of_moved(stored: Vec<StoredEvent>, moved: &[(u32, u32)]) -> Replay {
        let mut events: Vec<StoredEvent> = Vec::with_capacity(stored.len());
        let mut epochs: Vec<(usize, Vec<(u32, u32)>)> = Vec::new();
        let mut salvage: Vec<u32> = Vec::new();
        let mut undo = false;
        for event in stored {
            if event.path.is_some() {
                continue;
            }
            if event.node.is_none() && event.kind == CANCEL_REQUESTED {
                undo = false;
            }
            if event.node.is_none() && event.kind == REDRIVEN {
                let data = serde_json::from_slice::<Value>(&event.data).unwrap_or(Value::Null);
                undo = data.get("undo").and_then(Value::as_bool) == Some(true);
                let from = data
                    .get("from")
                    .and_then(Value::as_u64)
                    .unwrap_or(event.seq);
                let floors = data
                    .get("floors")
                    .and_then(Value::as_array)
                    .map(|floors| {
                        floors
                            .iter()
                            .filter_map(|floor| {
                                let attempt = u32::try_from(floor.get(1)?.as_u64()?).ok()?;
                                // By name, when the marker has it: the step's index in the
                                // events (renumbered if a compatible change moved it).
                                let named = floor.get(2).and_then(Value::as_str).and_then(|name| {
                                    events.iter().find_map(|e| {
                                        (e.node_name.as_deref() == Some(name))
                                            .then_some(e.node)
                                            .flatten()
                                    })
                                });
                                let node = match named {
                                    Some(node) => node,
                                    None => crate::store::renumbered(
                                        moved,
                                        u32::try_from(floor.get(0)?.as_u64()?).ok()?,
                                    ),
                                };
                                Some((node, attempt))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                for cut in events.iter().filter(|e| e.seq >= from) {
                    if let (Some(node), "Completed") = (cut.node, cut.kind.as_str())
                        && !salvage.contains(&node)
                    {
                        salvage.push(node);
                    }
                }
                events.retain(|e| e.seq < from);
                epochs.retain(|&(start, _)| start <= events.len());
                epochs.push((events.len(), floors));
                continue;
            }
            events.push(event);
        }
        Replay {
            events,
            epochs,
            salvage,
            undo,
        }
    }
}

/// Deletes every finished run that `filter` selects (its `statuses` default to the finished
/// ones, the kept generations of runs that continued as new among them; an unfinished status
/// in it selects nothing), page by page; returns the ids deleted. A run's kept generations
/// (`{id}~{n}`) and its child runs (`{id}/{step}`) are runs of their own: select them too
/// (`id_contains`) before the id is used again.
///
/// # Errors
///
/// [`DurableError::Store`]: listing or deleting failed (the runs deleted before stay deleted).
pub async fn delete_runs<S: Store + ?Sized>(
    store: &S,
    filter: &RunFilter,
) -> Result<Vec<String>, DurableError> {
    let mut page = filter.clone();
    let finished = [
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::Cancelled,
        RunStatus::Continued,
    ];
    if !page.statuses.is_empty() {
        page.statuses.retain(|s| s.is_finished());
        if page.statuses.is_empty() {
            // Only unfinished statuses asked for: nothing of them is deleted.
            return Ok(Vec::new());
        }
    } else {
        page.statuses = finished.to_vec();
    }
    let wanted = filter.limit.map(|n| n as usize);
    let mut deleted = Vec::new();
    loop {
        let left = wanted.map_or(500, |n| n.saturating_sub(deleted.len()).min(500));
        if left == 0 {
            break;
        }
        page.limit = u32::try_from(left).ok();
        let runs = store.list_runs(&page).await?;
        let Some(last) = runs.last() else {
            break;
        };
        page.after = Some(crate::store::RunCursor::of(last));
        let full = runs.len() == left;
        for run in runs {
            match store.delete_run(&run.id).await {
                Ok(()) => deleted.push(run.id),
                // Gone meanwhile, or set going again (redriven): not deleted.
                Err(StoreError::NotFound { .. } | StoreError::WrongStatus { .. }) => {}
                Err(error) => return Err(error.into()),
            }
        }
        if !full {
            break;
        }
    }
    Ok(deleted)
}
