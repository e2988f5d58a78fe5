//! An operator's requests to a live durable run: cancel it, terminate it.
//!
//! A request is a signal with a reserved name (`flow.cancel`, `flow.terminate`; see
//! `store::requests`), stored by `durable::cancel_run` or `durable::terminate_run` (or `flow
//! cancel`, `flow terminate`) from any process. A stored request makes its run due, so a run
//! that nobody drives is loaded by the next worker and finds the request among the signals it
//! loaded; a live run asks the store for requests every `request_poll`, and at once when the
//! store tells it of a signal (`Store::watch`, PostgreSQL's `LISTEN/NOTIFY`).
//!
//! The run carries a request out between two polls of the scheduler, and journals it:
//!
//! - **cancel**: a `CancelRequested` event goes to the batch with the signal's consumption,
//!   then the run is cancelled as by its token (its running steps are aborted, its
//!   compensations run as its failure rules say). A replay meets the `CancelRequested` at
//!   the same place and cancels the run there again;
//! - **terminate**: a `Terminated` event, the signal's consumption and the final status
//!   `cancelled` are committed together, and the run stops as a process that exits would:
//!   nothing more runs, no compensation. The caller of the run gets
//!   [`DurableError::Terminated`].

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Sleep;

use super::Journal;
use crate::durable::DurableError;
use crate::panic::timer;
use crate::policy::CancelReason;
use crate::scheduler::Run;
use crate::store::{Notified, StoreFuture, StoredEvent, StoredSignal, Watch, requests};

/// The kind of the event that journals a cancel request.
pub(crate) const CANCEL_REQUESTED: &str = "CancelRequested";
/// The kind of the event that journals a termination (by the run, or by an operator on a run
/// nobody held).
pub(crate) const TERMINATED: &str = "Terminated";

/// The requests of a live run: the ones known and not carried out, and the look at the store
/// for new ones.
pub(super) struct Requests {
    /// Requests known, oldest first.
    known: Vec<StoredSignal>,
    /// The highest signal id seen: the store is asked for newer ones.
    after: u64,
    every: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
    fetch: Option<StoreFuture<'static, Vec<StoredSignal>>>,
    watch: Option<Notified>,
    /// No timer can be made (no tokio time driver): the run takes the requests it loaded.
    no_timer: bool,
}

impl Requests {
    /// The requests among the signals the run was loaded with.
    pub(super) fn new(loaded: &[StoredSignal], every: Duration) -> Box<Requests> {
        Box::new(Requests {
            known: loaded
                .iter()
                .filter(|s| requests::is_request(&s.name))
                .cloned()
                .collect(),
            after: loaded.iter().map(|s| s.id).max().unwrap_or(0),
            every,
            sleep: None,
            fetch: None,
            watch: None,
            no_timer: false,
        })
    }

    /// Stops looking at the store (the run's forward phase has ended).
    pub(super) fn stop(&mut self) {
        self.sleep = None;
        self.fetch = None;
        self.watch = None;
    }

    /// The first request known, if any; else looks at the store when it is time to
    /// (registering `cx` for the next look).
    fn next(&mut self, journal_store: &Journal, cx: &mut Context<'_>) -> Option<StoredSignal> {
        loop {
            if let Some(at) = self
                .known
                .iter()
                .position(|s| s.name == requests::TERMINATE)
            {
                return Some(self.known.remove(at));
            }
            if !self.known.is_empty() {
                return Some(self.known.remove(0));
            }
            if let Some(fetch) = self.fetch.as_mut() {
                match fetch.as_mut().poll(cx) {
                    Poll::Pending => return None,
                    Poll::Ready(result) => {
                        self.fetch = None;
                        // A failed look is made again after the next interval.
                        if let Ok(signals) = result {
                            self.after = signals.iter().map(|s| s.id).max().unwrap_or(self.after);
                            self.known.extend(
                                signals
                                    .into_iter()
                                    .filter(|s| requests::is_request(&s.name)),
                            );
                        }
                        continue;
                    }
                }
            }
            if self.no_timer {
                return None;
            }
            let store = &journal_store.setup.store;
            let run = &journal_store.setup.lease.run;
            if self.watch.is_none() {
                self.watch = store.watch(Watch::Run(run.clone()));
            }
            let told = self
                .watch
                .as_mut()
                .is_some_and(|watch| watch.as_mut().poll(cx).is_ready());
            if told {
                self.watch = None;
            }
            if self.sleep.is_none() {
                match timer(self.every) {
                    Ok(sleep) => self.sleep = Some(sleep),
                    Err(_) => {
                        self.no_timer = true;
                        return None;
                    }
                }
            }
            let due = self
                .sleep
                .as_mut()
                .is_some_and(|sleep| sleep.as_mut().poll(cx).is_ready());
            if !due && !told {
                return None;
            }
            self.sleep = None;
            let store = Arc::clone(store);
            let run = run.clone();
            let after = self.after;
            self.fetch = Some(Box::pin(async move { store.signals(&run, after).await }));
        }
    }
}

/// The event that journals a request, at the pending batch's next sequence number, with the
/// request's reason (its payload's `reason`, if it has one).
fn marker(journal: &Journal, kind: &str, request: &StoredSignal) -> StoredEvent {
    let mut event = StoredEvent::new(journal.pending.end_seq(), kind);
    event.data = match reason(request) {
        Some(reason) => serde_json::json!({ "reason": reason })
            .to_string()
            .into_bytes(),
        None => Vec::new(),
    };
    event
}

/// The `reason` of a request's payload.
fn reason(request: &StoredSignal) -> Option<String> {
    serde_json::from_slice::<serde_json::Value>(&request.payload)
        .ok()?
        .get("reason")?
        .as_str()
        .map(str::to_owned)
}

/// Live: carries out the run's first request, if it has one. Returns `true` when the run was
/// cancelled or terminated (its forward phase ends: the caller returns `Ready`).
pub(super) fn poll_requests(run: &mut Run<'_, '_>, cx: &mut Context<'_>) -> bool {
    let Some(journal) = run.hook::<Journal>() else {
        return false;
    };
    if journal.broken {
        return false;
    }
    let Some(mut requests) = journal.requests.take() else {
        return false;
    };
    let request = requests.next(journal, cx);
    journal.requests = Some(requests);
    let Some(request) = request else {
        return false;
    };
    match request.name.as_str() {
        requests::TERMINATE => {
            let event = marker(journal, TERMINATED, &request);
            journal.pending.events.push(event);
            journal.pending.consumed.push(request.id);
            journal.terminated = Some(reason(&request));
            // Nothing more is journaled or run (no compensation: `Before::Stop`); the
            // journal's `finish` commits the end.
            journal.broken = true;
            run.drop_out();
            true
        }
        requests::CANCEL => {
            let event = marker(journal, CANCEL_REQUESTED, &request);
            journal.pending.events.push(event);
            journal.pending.consumed.push(request.id);
            run.cancel(CancelReason::Requested);
            true
        }
        // A request of a later flow: left for it.
        _ => false,
    }
}

/// Going live: carries out a request the run was loaded with, before anything of the run
/// starts (its held attempts start after this). Returns `true` when it did.
pub(super) fn loaded_request(run: &mut Run<'_, '_>) -> bool {
    let known = run
        .hook::<Journal>()
        .and_then(|journal| journal.requests.as_deref())
        .is_some_and(|requests| !requests.known.is_empty());
    // A known request is taken without looking at the store: no waker is registered.
    known && poll_requests(run, &mut Context::from_waker(std::task::Waker::noop()))
}

/// Going live in a run reopened to be undone (`operations::undo_run`: a child whose parent
/// compensates): journals a `CancelRequested` and cancels the run, which runs the
/// compensations of its completed steps. A replay meets that event and cancels it at the same
/// place. Returns `true` when it did.
pub(super) fn undo(run: &mut Run<'_, '_>) -> bool {
    let Some(journal) = run.hook::<Journal>() else {
        return false;
    };
    if !std::mem::take(&mut journal.undo) {
        return false;
    }
    let mut event = StoredEvent::new(journal.pending.end_seq(), CANCEL_REQUESTED);
    event.data = serde_json::json!({ "reason": UNDONE })
        .to_string()
        .into_bytes();
    journal.pending.events.push(event);
    run.cancel(CancelReason::Requested);
    true
}

/// The reason journaled with the cancellation of a run reopened to be undone.
const UNDONE: &str = "undone: its compensations run";

/// Replaying: when the journal's next event is a `CancelRequested`, the run was cancelled
/// there: cancels it again (which emits the journal's `Aborted` events) and returns `true`.
/// When it is a `Terminated`, the run was terminated there: it stops, writing nothing, and its
/// caller gets [`DurableError::Terminated`] (a terminated run's resume says so).
pub(super) fn replay_request(run: &mut Run<'_, '_>) -> bool {
    let Some(journal) = run.hook::<Journal>() else {
        return false;
    };
    let Some(event) = journal.setup.events.get(journal.cursor) else {
        return false;
    };
    if event.node.is_some() {
        return false;
    }
    match event.kind.as_str() {
        CANCEL_REQUESTED => {
            journal.cursor += 1;
            journal.last_replayed = true;
            run.cancel(CancelReason::Requested);
            true
        }
        TERMINATED => {
            let reason = serde_json::from_slice::<serde_json::Value>(&event.data)
                .ok()
                .and_then(|v| v.get("reason")?.as_str().map(str::to_owned));
            journal.cursor = journal.setup.events.len();
            let id = journal.run.to_string();
            journal.fail(terminated_error(&id, reason));
            run.drop_out();
            true
        }
        _ => false,
    }
}

/// The error a terminated run's caller gets.
pub(super) fn terminated_error(run: &str, reason: Option<String>) -> DurableError {
    DurableError::Terminated {
        run: run.to_owned(),
        reason,
    }
}
