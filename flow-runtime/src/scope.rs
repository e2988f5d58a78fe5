//! How `#[operation]` defaults reach the node that runs the operation.
//!
//! The attribute keeps the function's signature and wraps its body in an [`OperationScope`].
//! While the scheduler polls a node's future for the first time, it listens on a thread-local;
//! the first scope polled during that poll reports its [`OperationSpec`]. Outside a workflow the
//! scope is a plain pass-through.
//!
//! A step whose expression awaits something else before it calls its operation
//! (`Operation(charge(rate().await))`, or an `async` block) does not poll the operation on its
//! first poll. `workflow!` wraps the future of such a step in a [`Deferred`], which answers the
//! listener "not yet": the scheduler then listens again on the node's next poll, and on every
//! poll after it until an operation reports or the attempt ends. Steps without an `.await` in
//! their expression are not wrapped and are listened to on their first poll only.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::policy::NodePolicy;

/// The defaults `#[operation(...)]` attaches to an async fn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OperationSpec {
    /// The display name (the function's name unless `name = ".."` was given).
    pub name: &'static str,
    /// The defaults for timeout, retries, backoff, jitter and deadline.
    pub policy: NodePolicy,
}

/// What [`listen`] hears from a [`Deferred`] step that has not reached its operation yet: not
/// an operation's defaults, but "listen on the next poll too" (tell it with [`is_later`]).
static LATER: OperationSpec = OperationSpec {
    name: "",
    policy: NodePolicy::NONE,
};

/// Whether `heard` is the answer of a [`Deferred`] step that has not called its operation yet.
#[inline]
pub(crate) fn is_later(heard: &'static OperationSpec) -> bool {
    std::ptr::eq(heard, &LATER)
}

/// What the current thread's node is listening for.
#[derive(Clone, Copy)]
enum Ear {
    /// No node is being polled for the first time.
    Deaf,
    /// A node's first poll is under way and no operation has reported yet.
    Listening,
    /// As `Listening`, and a [`Deferred`] step asks to be listened to on its next poll too.
    Later,
    /// The first operation polled during that poll.
    Heard(&'static OperationSpec),
}

thread_local! {
    static EAR: Cell<Ear> = const { Cell::new(Ear::Deaf) };
}

/// Runs `poll` while listening for the first [`OperationScope`] polled inside it; an outer
/// listener (a workflow run inside an operation) is restored afterwards.
///
/// `poll` must not unwind (the scheduler passes a `catch_unwind`ed poll); if it did, the
/// thread would go on listening, which only attributes a later node's defaults wrongly.
#[inline]
pub(crate) fn listen<R>(poll: impl FnOnce() -> R) -> (R, Option<&'static OperationSpec>) {
    let outer = EAR.with(|ear| ear.replace(Ear::Listening));
    let result = poll();
    let heard = match EAR.with(|ear| ear.replace(outer)) {
        Ear::Heard(spec) => Some(spec),
        Ear::Later => Some(&LATER),
        Ear::Deaf | Ear::Listening => None,
    };
    (result, heard)
}

/// Tells the node being polled, if it listens, that its operation is `spec`: what an
/// [`OperationScope`] does on its first poll, and what a node polled once outside the
/// scheduler says again when a run takes it over (`one.rs`).
#[inline]
pub(crate) fn announce(spec: &'static OperationSpec) {
    EAR.with(|ear| {
        if let Ear::Listening | Ear::Later = ear.get() {
            ear.set(Ear::Heard(spec));
        }
    });
}

pin_project! {
    /// The body of an `#[operation]` fn: reports the operation's defaults to the workflow node
    /// that polls it first, then runs the body unchanged.
    #[must_use = "futures do nothing unless polled"]
    pub struct OperationScope<F> {
        spec: &'static OperationSpec,
        reported: bool,
        #[pin]
        body: F,
    }
}

impl<F: Future> OperationScope<F> {
    /// Wraps an operation's body.
    pub const fn new(spec: &'static OperationSpec, body: F) -> Self {
        OperationScope {
            spec,
            reported: false,
            body,
        }
    }
}

impl<F: Future> Future for OperationScope<F> {
    type Output = F::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        if !*this.reported {
            *this.reported = true;
            announce(this.spec);
        }
        this.body.poll(cx)
    }
}

impl<F> std::fmt::Debug for OperationScope<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperationScope")
            .field("spec", self.spec)
            .finish_non_exhaustive()
    }
}

pin_project! {
    /// The future of a step whose expression awaits something else before it calls its
    /// operation: `workflow!` wraps such a step so that the scheduler listens for the
    /// operation's defaults on each of its polls, until an [`OperationScope`] reports them,
    /// and not on its first poll only.
    #[must_use = "futures do nothing unless polled"]
    pub struct Deferred<F> {
        #[pin]
        body: F,
    }
}

impl<F: Future> Deferred<F> {
    /// Wraps a step's future.
    pub const fn new(body: F) -> Self {
        Deferred { body }
    }
}

impl<F: Future> Future for Deferred<F> {
    type Output = F::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // Only while a node listens: after an operation has reported, the scheduler stops
        // listening and this is a plain pass-through.
        EAR.with(|ear| {
            if let Ear::Listening = ear.get() {
                ear.set(Ear::Later);
            }
        });
        self.project().body.poll(cx)
    }
}

impl<F> std::fmt::Debug for Deferred<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deferred").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::future::{Future, pending, ready};
    use std::pin::pin;
    use std::task::{Context, Waker};

    use super::{Deferred, OperationScope, OperationSpec, is_later, listen};
    use crate::policy::NodePolicy;

    static CHARGE: OperationSpec = OperationSpec {
        name: "charge",
        policy: NodePolicy::NONE,
    };

    #[test]
    fn a_deferred_step_asks_to_be_heard_until_its_operation_reports() {
        let mut cx = Context::from_waker(Waker::noop());
        // Awaiting something else first: "not yet".
        let mut waiting = pin!(Deferred::new(pending::<()>()));
        let (_, heard) = listen(|| waiting.as_mut().poll(&mut cx));
        assert!(heard.is_some_and(is_later));
        // Reaching the operation in the same poll: its defaults.
        let mut reached = pin!(Deferred::new(OperationScope::new(&CHARGE, ready(()))));
        let (_, heard) = listen(|| reached.as_mut().poll(&mut cx));
        assert!(heard.is_some_and(|spec| std::ptr::eq(spec, &CHARGE)));
        // A step that is not deferred and polls no operation: nothing.
        let mut plain = pin!(pending::<()>());
        let (_, heard) = listen(|| plain.as_mut().poll(&mut cx));
        assert!(heard.is_none());
        // Outside a node's poll, a deferred step is a plain pass-through.
        assert!(waiting.as_mut().poll(&mut cx).is_pending());
    }
}
