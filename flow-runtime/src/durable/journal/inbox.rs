//! Durable `Signal` steps in the scheduler: the run's inbox of stored signals.
//!
//! A durable run's `Signal` steps take their payloads from the store, never from the
//! in-memory mailbox. The inbox is made when the run requests its first `Signal` step (a run
//! without one has none and never asks the store for signals):
//!
//! - a step's wait is opened in the batch of its `Requested` (`WaitChange::Open`), so that a
//!   `transient` signal is stored while it waits; the step joins the waiters, in order;
//! - the inbox starts from the run's unconsumed signals as loaded, and while a step waits
//!   (live) it asks the store for newer ones every `signal_poll` (`Store::signals(run,
//!   after)`); no step waiting, no timer and no request;
//! - each signal is handed to the first waiter of its name, one at a time, through the
//!   attempt's [`SignalCtx`]; the step decodes it. Taken: its `SignalReceived` and
//!   `Completed`, its output, the signal's consumption and the wait's close are in one batch
//!   (the store refuses a second consumption: `StoreError::SignalTaken`). Refused (the payload
//!   does not decode): `SignalRejected`, the signal is consumed in that batch, and the step
//!   is handed the next one;
//! - a step that stops waiting otherwise (withdrawn, aborted) has its wait closed, and a
//!   signal handed to it and not taken goes back to the inbox.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Sleep;

use super::Journal;
use crate::durable::{AttemptCtx, SignalCtx, Taken};
use crate::events::EventKind;
use crate::panic::timer;
use crate::scheduler::Run;
use crate::status::NodeStatus;
use crate::store::{StoreFuture, StoredEvent, StoredSignal, WaitChange};

/// The signals of a durable run and the `Signal` steps that wait for them.
pub(super) struct Inbox {
    /// Unconsumed signals not handed to a step, oldest first.
    known: Vec<StoredSignal>,
    /// The highest signal id seen: the store is asked for newer ones.
    after: u64,
    /// The steps that wait, in the order they were requested.
    waiters: Vec<Waiter>,
    /// Between two requests to the store.
    every: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
    fetch: Option<StoreFuture<'static, Vec<StoredSignal>>>,
}

/// A `Signal` step that waits.
struct Waiter {
    node: u32,
    name: &'static str,
    /// The signal handed to it and not yet taken by its poll.
    delivery: Option<StoredSignal>,
    /// Its waker, once it has been polled.
    waker: Option<Waker>,
}

impl Inbox {
    fn new(journal: &Journal) -> Box<Inbox> {
        let known = journal.setup.signals.clone();
        let after = known.iter().map(|s| s.id).max().unwrap_or(0);
        Box::new(Inbox {
            known,
            after,
            waiters: Vec::new(),
            every: journal.setup.signal_poll,
            sleep: None,
            fetch: None,
        })
    }

    /// Stops looking at the store: drops the request in flight, if any (which gives its
    /// connection back to the store's pool) and the wait for the next one.
    pub(super) fn stop(&mut self) {
        self.sleep = None;
        self.fetch = None;
    }

    /// Hands each waiter without a signal the oldest one of its name; wakes those that were
    /// polled already. Whether one was handed a signal.
    fn deal(&mut self) -> bool {
        let mut dealt = false;
        for waiter in self.waiters.iter_mut().filter(|w| w.delivery.is_none()) {
            if let Some(i) = self.known.iter().position(|s| s.name == waiter.name) {
                waiter.delivery = Some(self.known.remove(i));
                if let Some(waker) = &waiter.waker {
                    waker.wake_by_ref();
                }
                dealt = true;
            }
        }
        dealt
    }

    /// Keeps signals the store returned, newer than every one seen.
    fn add(&mut self, signals: Vec<StoredSignal>) {
        for signal in signals {
            if signal.id > self.after {
                self.after = signal.id;
                self.known.push(signal);
            }
        }
    }

    /// Puts a signal handed out and not taken back in its place.
    fn give_back(&mut self, signal: StoredSignal) {
        let at = self.known.partition_point(|s| s.id < signal.id);
        self.known.insert(at, signal);
    }

    fn waiter(&mut self, node: u32) -> Option<&mut Waiter> {
        self.waiters.iter_mut().find(|w| w.node == node)
    }
}

/// The name of the signal `Signal` step `node` waits for.
fn signal_name(run: &Run<'_, '_>, node: u32) -> Option<&'static str> {
    run.graph()
        .plan
        .control
        .signals
        .iter()
        .find(|s| s.node == node)
        .map(|s| s.name)
}

/// The run's inbox, if it has one.
fn inbox<'a>(run: &'a mut Run<'_, '_>) -> Option<&'a mut Inbox> {
    run.hook::<Journal>()?.inbox.as_deref_mut()
}

/// Whether `node` is a `Signal` step that waits with nothing handed to it: it can wait
/// as long as it takes, and a run whose every running step is idle may be unloaded (its
/// wait stays open in the store, and a signal sent makes the run due).
pub(super) fn signal_idle(run: &mut Run<'_, '_>, node: u32) -> bool {
    inbox(run)
        .and_then(|inbox| inbox.waiters.iter().find(|w| w.node == node))
        .is_some_and(|w| w.delivery.is_none())
}

/// `Signal` step `node` is requested: it waits from now on, and (live) its wait is
/// opened in the batch of its `Requested`.
pub(super) fn signal_requested(run: &mut Run<'_, '_>, node: u32) {
    let Some(name) = signal_name(run, node) else {
        return;
    };
    let Some(journal) = run.hook::<Journal>() else {
        return;
    };
    if journal.inbox.is_none() {
        journal.inbox = Some(Inbox::new(journal));
    }
    if journal.live {
        journal.pending.waits.push(WaitChange::Open {
            node,
            instance: String::new(),
            name: name.to_owned(),
        });
    }
    if let Some(inbox) = journal.inbox.as_deref_mut()
        && inbox.waiter(node).is_none()
    {
        inbox.waiters.push(Waiter {
            node,
            name,
            delivery: None,
            waker: None,
        });
    }
}

/// The replay restores `Signal` step `node` from its `SignalReceived`: it waits no more
/// (its wait was closed by the batch that consumed its signal).
pub(super) fn signal_replayed(run: &mut Run<'_, '_>, node: u32) {
    if let Some(inbox) = inbox(run) {
        inbox.waiters.retain(|w| w.node != node);
    }
}

/// What `Signal` step `node` is handed for this poll.
pub(super) fn signal_ctx(run: &mut Run<'_, '_>, node: u32) -> SignalCtx {
    let delivery = inbox(run)
        .and_then(|inbox| inbox.waiter(node))
        .and_then(|w| w.delivery.take());
    SignalCtx {
        delivery,
        ..SignalCtx::default()
    }
}

/// What `Signal` step `node` did in its poll: took its signal (consumed with its
/// completion), refused it (`SignalRejected`, consumed; it waits for the next), or waits.
pub(super) fn signal_polled(run: &mut Run<'_, '_>, node: u32, ctx: &mut AttemptCtx) {
    let Some(signal) = ctx
        .signal
        .take()
        .and_then(|s| s.downcast::<SignalCtx>().ok())
    else {
        return;
    };
    let rejected = {
        let Some(journal) = run.hook::<Journal>() else {
            return;
        };
        let Some(inbox) = journal.inbox.as_deref_mut() else {
            return;
        };
        match signal.taken {
            Some(Taken::Consumed(id)) => {
                inbox.waiters.retain(|w| w.node != node);
                journal.pending.consumed.push(id);
                journal.pending.waits.push(WaitChange::Close {
                    node,
                    instance: String::new(),
                });
                None
            }
            Some(Taken::Rejected(id, error)) => {
                journal.pending.consumed.push(id);
                if let Some(waiter) = inbox.waiter(node) {
                    waiter.waker = signal.waker;
                }
                Some(error)
            }
            None => {
                if let Some(waiter) = inbox.waiter(node) {
                    if signal.waker.is_some() {
                        waiter.waker = signal.waker;
                    }
                    if let Some(delivery) = signal.delivery {
                        waiter.delivery = Some(delivery);
                    }
                }
                None
            }
        }
    };
    if let Some(error) = rejected {
        let name = signal_name(run, node).unwrap_or("");
        let attempt = run.attempt(node);
        run.emit(
            Some(node),
            attempt,
            EventKind::SignalRejected {
                name,
                error: error.into(),
            },
        );
        // The next signal of its name, if one is known, is handed to it at once.
        if let Some(inbox) = inbox(run) {
            inbox.deal();
        }
    }
}

/// Replays a `SignalRejected` of the journal (its signal was consumed with it).
pub(super) fn emit_rejected(run: &mut Run<'_, '_>, node: u32, event: &StoredEvent) {
    let name = signal_name(run, node).unwrap_or("");
    let error: Arc<str> = serde_json::from_slice::<serde_json::Value>(&event.data)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(Arc::from))
        .unwrap_or_else(|| Arc::from("rejected (no message stored)"));
    run.emit(
        Some(node),
        event.attempt,
        EventKind::SignalRejected { name, error },
    );
}

/// The live run's inbox step, in each round: closes the waits of steps that stopped
/// waiting, hands out the signals it knows, and while a step waits asks the store for
/// new ones every `signal_poll`. Whether a waiting step was handed a signal (the run
/// polls again).
pub(super) fn poll_signals(run: &mut Run<'_, '_>, cx: &mut Context<'_>) -> bool {
    let Some(waiting) =
        inbox(run).map(|inbox| inbox.waiters.iter().map(|w| w.node).collect::<Vec<u32>>())
    else {
        return false;
    };
    let stopped: Vec<u32> = waiting
        .into_iter()
        .filter(|&node| (node as usize) >= run.len() || run.status(node) != NodeStatus::Running)
        .collect();
    let Some(journal) = run.hook::<Journal>() else {
        return false;
    };
    let Some(inbox) = journal.inbox.as_deref_mut() else {
        return false;
    };
    let mut given_back = Vec::new();
    inbox.waiters.retain_mut(|w| {
        let waits = !stopped.contains(&w.node);
        if !waits {
            given_back.push((w.node, w.delivery.take()));
        }
        waits
    });
    for (node, delivery) in given_back {
        journal.pending.waits.push(WaitChange::Close {
            node,
            instance: String::new(),
        });
        if let Some(signal) = delivery {
            inbox.give_back(signal);
        }
    }
    if inbox.waiters.is_empty() {
        // Nothing waits: no timer, no request.
        inbox.sleep = None;
        inbox.fetch = None;
        return false;
    }
    let mut dealt = inbox.deal();
    loop {
        if let Some(fetch) = inbox.fetch.as_mut() {
            match fetch.as_mut().poll(cx) {
                Poll::Pending => return dealt,
                Poll::Ready(result) => {
                    inbox.fetch = None;
                    // A failed request is made again after the next interval.
                    if let Ok(signals) = result {
                        inbox.add(signals);
                        dealt |= inbox.deal();
                    }
                }
            }
        }
        if inbox.sleep.is_none() {
            match timer(inbox.every) {
                Ok(sleep) => inbox.sleep = Some(sleep),
                // No tokio timer: the run takes the signals it loaded, and asks no more.
                Err(_) => return dealt,
            }
        }
        if let Some(sleep) = inbox.sleep.as_mut()
            && sleep.as_mut().poll(cx).is_pending()
        {
            return dealt;
        }
        inbox.sleep = None;
        let store = Arc::clone(&journal.setup.store);
        let run = journal.setup.lease.run.clone();
        let after = inbox.after;
        inbox.fetch = Some(Box::pin(async move { store.signals(&run, after).await }));
    }
}
