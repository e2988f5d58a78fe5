//! Signals from outside a run: the typed [`SignalKey`]s a workflow declares, the [`Signals`]
//! handle that sends them, and the in-memory [`Mailbox`] that keeps them until a `Signal` step
//! takes them.
//!
//! A `Signal` step is an ordinary node whose future asks the run's [`Environment`] for a
//! payload: a kept one, or else it registers its waker and waits. Sending wakes the first step
//! that waits for that name, through the node's own waker, so the run's poll loop needs no
//! mechanism of its own, and a run that waits for a signal costs nothing while idle.
//!
//! ```
//! use flowdag_runtime::{SendError, SignalKey};
//! # use flowdag_runtime::__private::{Mailbox, SignalInfo};
//! # #[derive(Debug, PartialEq)]
//! # struct Approval { by: &'static str }
//! const APPROVE: SignalKey<Approval> = SignalKey::__new("approve");
//! # static SIGNALS: [SignalInfo; 1] = [SignalInfo::new(0, "approve", false, std::any::TypeId::of::<Approval>)];
//! # let signals = Mailbox::new(&SIGNALS).handle();
//! // Kept until a step waits for it.
//! signals.send(APPROVE, Approval { by: "ann" })?;
//! # Ok::<(), SendError<Approval>>(())
//! ```

use std::any::{Any, TypeId};
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use crate::error::NodeError;
use crate::graph::SignalInfo;
use crate::slot::Slot;

/// The payload of a signal on its way to a step.
type Payload = Box<dyn Any + Send>;

/// The typed name of a signal a workflow waits for: `workflow!` declares one constant per
/// signal on the workflow type (`Approval::APPROVE` for `Signal(approve: Approval)`), and
/// [`Signals::send`] takes it, so a payload of the wrong type does not compile.
pub struct SignalKey<T> {
    name: &'static str,
    transient: bool,
    payload: PhantomData<fn() -> T>,
}

impl<T> SignalKey<T> {
    /// A key. For the code `workflow!` generates: not a public API.
    #[doc(hidden)]
    pub const fn __new(name: &'static str) -> Self {
        SignalKey {
            name,
            transient: false,
            payload: PhantomData,
        }
    }

    /// The key of a `transient` signal. For the code `workflow!` generates: not a public API.
    #[doc(hidden)]
    pub const fn __transient(self) -> Self {
        SignalKey {
            transient: true,
            ..self
        }
    }

    /// The signal's name, as written in the workflow (`"approve"`).
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// Whether the signal is `transient` (`Signal(ping: u8, transient)`): dropped when no
    /// step waits for it, instead of kept until one does.
    pub const fn is_transient(&self) -> bool {
        self.transient
    }
}

impl<T> Clone for SignalKey<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for SignalKey<T> {}

impl<T> fmt::Debug for SignalKey<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SignalKey").field(&self.name).finish()
    }
}

/// Why [`Signals::send`] refused a signal; the value comes back.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum SendError<T> {
    /// The run has ended: no step will ever take the signal.
    Finished(T),
    /// No step waits for the signal and it is not kept: a `transient` signal sent while no
    /// step waited for it, or a key of a signal this workflow does not declare.
    NotWaiting(T),
}

impl<T> SendError<T> {
    /// The value that was not sent.
    pub fn into_inner(self) -> T {
        match self {
            SendError::Finished(value) | SendError::NotWaiting(value) => value,
        }
    }
}

impl<T> fmt::Debug for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::Finished(_) => f.write_str("Finished(..)"),
            SendError::NotWaiting(_) => f.write_str("NotWaiting(..)"),
        }
    }
}

impl<T> fmt::Display for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::Finished(_) => {
                f.write_str("the run has ended: no step will take the signal")
            }
            SendError::NotWaiting(_) => {
                f.write_str("no step waits for the signal, and it is not kept")
            }
        }
    }
}

impl<T> std::error::Error for SendError<T> {}

/// The seam between a run's `Signal` steps and where signals come from. The in-memory
/// [`Mailbox`] implements it; a durable store can implement it with rows of its own. Not a
/// public API yet.
#[doc(hidden)]
pub trait Environment: Send + Sync {
    /// A payload for `name`, or `Pending` with `waker` registered to be woken when one comes.
    /// `ticket` is the step's place in the queue of waiters: `None` before its first poll, set
    /// while it waits, `None` again once it has its payload.
    fn poll_signal(
        &self,
        name: &'static str,
        ticket: &mut Option<u64>,
        waker: &Waker,
    ) -> Poll<Payload>;

    /// The step holding `ticket` no longer waits (it was withdrawn or the run was dropped).
    fn stop_waiting(&self, name: &'static str, ticket: u64);
}

/// One step waiting for a signal.
struct Waiter {
    name: &'static str,
    ticket: u64,
    waker: Waker,
    /// A payload sent to this step, not yet taken by its poll.
    delivered: Option<Payload>,
}

#[derive(Default)]
struct MailState {
    /// Payloads sent while no step waited, oldest first.
    kept: VecDeque<(&'static str, Payload)>,
    /// Steps waiting, in the order they began to wait.
    waiting: Vec<Waiter>,
    next_ticket: u64,
    finished: bool,
}

/// The in-memory mailbox of one run: signals kept until a step takes them, and the steps that
/// wait. Made by [`Runner::signals`](crate::Runner::signals), or privately by a run that has
/// `Signal` steps and no mailbox.
#[doc(hidden)]
pub struct Mailbox {
    /// The signals the workflow declares (names, payload types, kept or transient).
    infos: &'static [SignalInfo],
    state: Mutex<MailState>,
}

impl Mailbox {
    /// An empty mailbox for a workflow that declares the signals `infos`.
    pub fn new(infos: &'static [SignalInfo]) -> Arc<Mailbox> {
        Arc::new(Mailbox {
            infos,
            state: Mutex::new(MailState::default()),
        })
    }

    /// A handle that sends into this mailbox.
    pub fn handle(self: &Arc<Self>) -> Signals {
        Signals {
            mailbox: Arc::clone(self),
        }
    }

    fn lock(&self) -> MutexGuard<'_, MailState> {
        // The state stays consistent at every unlock: a panic elsewhere leaves nothing half done.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn send<T: Send + 'static>(&self, name: &'static str, value: T) -> Result<(), SendError<T>> {
        let declared = self
            .infos
            .iter()
            .find(|info| info.name == name && (info.payload)() == TypeId::of::<T>());
        let Some(info) = declared else {
            return Err(SendError::NotWaiting(value));
        };
        let mut state = self.lock();
        if state.finished {
            return Err(SendError::Finished(value));
        }
        if let Some(waiter) = state
            .waiting
            .iter_mut()
            .find(|w| w.name == name && w.delivered.is_none())
        {
            waiter.delivered = Some(Box::new(value));
            let waker = waiter.waker.clone();
            drop(state);
            waker.wake();
            return Ok(());
        }
        if info.transient {
            return Err(SendError::NotWaiting(value));
        }
        state.kept.push_back((name, Box::new(value)));
        Ok(())
    }

    /// The run has ended: later signals are refused, kept ones are dropped.
    pub fn finish(&self) {
        let mut state = self.lock();
        state.finished = true;
        let kept = std::mem::take(&mut state.kept);
        let waiting = std::mem::take(&mut state.waiting);
        drop(state);
        // Payloads are the user's values: dropped outside the lock.
        drop((kept, waiting));
    }

    fn transient(&self, name: &str) -> bool {
        self.infos.iter().any(|i| i.name == name && i.transient)
    }
}

impl Environment for Mailbox {
    fn poll_signal(
        &self,
        name: &'static str,
        ticket: &mut Option<u64>,
        waker: &Waker,
    ) -> Poll<Payload> {
        let mut state = self.lock();
        if let Some(mine) = *ticket {
            let Some(at) = state.waiting.iter().position(|w| w.ticket == mine) else {
                // Not registered any more (the run has ended): wait no longer for nothing.
                *ticket = None;
                return Poll::Pending;
            };
            if let Some(payload) = state.waiting[at].delivered.take() {
                state.waiting.remove(at);
                *ticket = None;
                return Poll::Ready(payload);
            }
            if !state.waiting[at].waker.will_wake(waker) {
                state.waiting[at].waker = waker.clone();
            }
            return Poll::Pending;
        }
        if let Some(at) = state.kept.iter().position(|(n, _)| *n == name)
            && let Some((_, payload)) = state.kept.remove(at)
        {
            return Poll::Ready(payload);
        }
        if state.finished {
            return Poll::Pending;
        }
        let mine = state.next_ticket;
        state.next_ticket += 1;
        state.waiting.push(Waiter {
            name,
            ticket: mine,
            waker: waker.clone(),
            delivered: None,
        });
        *ticket = Some(mine);
        Poll::Pending
    }

    fn stop_waiting(&self, name: &'static str, ticket: u64) {
        let mut state = self.lock();
        let Some(at) = state.waiting.iter().position(|w| w.ticket == ticket) else {
            return;
        };
        let Some(payload) = state.waiting.remove(at).delivered else {
            return;
        };
        // A payload sent to this step that it never took goes to the next step waiting for
        // the name, or back to the front of the kept ones; a transient one is lost.
        if let Some(next) = state
            .waiting
            .iter_mut()
            .find(|w| w.name == name && w.delivered.is_none())
        {
            next.delivered = Some(payload);
            let waker = next.waker.clone();
            drop(state);
            waker.wake();
        } else if !self.transient(name) {
            state.kept.push_front((name, payload));
        } else {
            drop(state);
            drop(payload);
        }
    }
}

impl fmt::Debug for Mailbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("Mailbox")
            .field("kept", &state.kept.len())
            .field("waiting", &state.waiting.len())
            .field("finished", &state.finished)
            .finish()
    }
}

/// A handle that sends signals to one run: [`Runner::signals`](crate::Runner::signals) makes
/// it. Cheap to clone, and `Send + Sync`: hand it to another task or thread.
///
/// A signal sent before its step waits is kept, oldest first per name, until a step takes it;
/// a `transient` signal that no step waits for is refused ([`SendError::NotWaiting`]). Once
/// the run has ended, every send is refused ([`SendError::Finished`]).
#[derive(Clone)]
pub struct Signals {
    mailbox: Arc<Mailbox>,
}

impl Signals {
    /// Sends `value` as the signal `key`: it wakes the first step waiting for it, or is kept
    /// for the next one; refused, with the value given back, when the run has ended or when
    /// the signal is transient and no step waits.
    pub fn send<T: Send + 'static>(&self, key: SignalKey<T>, value: T) -> Result<(), SendError<T>> {
        self.mailbox.send(key.name, value)
    }
}

impl fmt::Debug for Signals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signals")
            .field("mailbox", &self.mailbox)
            .finish()
    }
}

/// The future of a `Signal` step: waits for the signal `name` and stores its payload in the
/// step's slot (if the step is named). Dropping it (a withdrawn step, a dropped run) stops the
/// wait.
#[must_use = "futures do nothing unless polled"]
pub struct WaitSignal<'a, T> {
    env: &'a dyn Environment,
    name: &'static str,
    slot: Option<&'a Slot<T>>,
    ticket: Option<u64>,
}

/// The future of a `Signal` step waiting in `env` for the signal `name`, whose payload goes to
/// `slot`.
pub fn signal<'a, T: 'static>(
    env: &'a Mailbox,
    name: &'static str,
    slot: Option<&'a Slot<T>>,
) -> WaitSignal<'a, T> {
    WaitSignal {
        env,
        name,
        slot,
        ticket: None,
    }
}

impl<T: 'static> Future for WaitSignal<'_, T> {
    type Output = Result<(), NodeError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let payload = match this
            .env
            .poll_signal(this.name, &mut this.ticket, cx.waker())
        {
            Poll::Ready(payload) => payload,
            Poll::Pending => return Poll::Pending,
        };
        match payload.downcast::<T>() {
            Ok(value) => {
                if let Some(slot) = this.slot {
                    slot.put(*value);
                }
                Poll::Ready(Ok(()))
            }
            Err(_) => Poll::Ready(Err(NodeError::Internal(
                "a signal's payload has another type than its step's",
            ))),
        }
    }
}

impl<T> Drop for WaitSignal<'_, T> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.env.stop_waiting(self.name, ticket);
        }
    }
}

impl<T> fmt::Debug for WaitSignal<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaitSignal")
            .field("name", &self.name)
            .field("waiting", &self.ticket.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::task::Waker;

    use super::*;

    #[derive(Debug, PartialEq)]
    struct Approval(u32);

    static SIGNALS: [SignalInfo; 2] = [
        SignalInfo::new(0, "approve", false, TypeId::of::<Approval>),
        SignalInfo::new(1, "ping", true, TypeId::of::<u8>),
    ];
    const APPROVE: SignalKey<Approval> = SignalKey::__new("approve");
    const PING: SignalKey<u8> = SignalKey::__new("ping");

    fn poll<T: 'static>(wait: &mut WaitSignal<'_, T>) -> Poll<Result<(), NodeError>> {
        Pin::new(wait).poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn kept_signals_are_taken_in_order() {
        let mailbox = Mailbox::new(&SIGNALS);
        let signals = mailbox.handle();
        assert_eq!(signals.send(APPROVE, Approval(1)), Ok(()));
        assert_eq!(signals.send(APPROVE, Approval(2)), Ok(()));
        let (one, two) = (Slot::new(), Slot::new());
        assert!(poll(&mut signal(&mailbox, "approve", Some(&one))).is_ready());
        assert!(poll(&mut signal(&mailbox, "approve", Some(&two))).is_ready());
        assert_eq!(
            (one.get(), two.get()),
            (Some(&Approval(1)), Some(&Approval(2)))
        );
    }

    #[test]
    fn a_dropped_waiter_passes_its_signal_on() {
        let mailbox = Mailbox::new(&SIGNALS);
        let signals = mailbox.handle();
        let mut first = signal::<Approval>(&mailbox, "approve", None);
        let slot = Slot::new();
        let mut second = signal(&mailbox, "approve", Some(&slot));
        assert!(poll(&mut first).is_pending());
        assert!(poll(&mut second).is_pending());
        assert_eq!(signals.send(APPROVE, Approval(7)), Ok(()));
        drop(first);
        assert!(poll(&mut second).is_ready());
        assert_eq!(slot.get(), Some(&Approval(7)));
    }

    #[test]
    fn refusals() {
        let mailbox = Mailbox::new(&SIGNALS);
        let signals = mailbox.handle();
        assert_eq!(signals.send(PING, 1), Err(SendError::NotWaiting(1)));
        let other: SignalKey<u8> = SignalKey::__new("approve");
        assert_eq!(signals.send(other, 2), Err(SendError::NotWaiting(2)));
        mailbox.finish();
        let refused = signals.send(APPROVE, Approval(3));
        assert_eq!(refused, Err(SendError::Finished(Approval(3))));
        assert_eq!(refused.map_err(SendError::into_inner), Err(Approval(3)));
    }

    #[test]
    fn handles_are_send_and_sync() {
        fn is<T: Send + Sync + Clone>() {}
        is::<Signals>();
        is::<SignalKey<Approval>>();
    }
}
