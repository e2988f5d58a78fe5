//! How `#[operation]` defaults reach the node that runs the operation.
//!
//! The attribute keeps the function's signature and wraps its body in an [`OperationScope`].
//! While the scheduler polls a node's future for the first time, it listens on a thread-local;
//! the first scope polled during that poll reports its [`OperationSpec`]. Outside a workflow the
//! scope is a plain pass-through.

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

thread_local! {
    static LISTENING: Cell<bool> = const { Cell::new(false) };
    static HEARD: Cell<Option<&'static OperationSpec>> = const { Cell::new(None) };
}

/// Runs `poll` while listening for the first [`OperationScope`] polled inside it.
pub(crate) fn listen<R>(poll: impl FnOnce() -> R) -> (R, Option<&'static OperationSpec>) {
    let was_listening = LISTENING.with(|l| l.replace(true));
    let before = HEARD.with(|h| h.replace(None));
    // Restores the outer listener even if `poll` unwinds (the scheduler catches panics).
    struct Restore(bool, Option<&'static OperationSpec>);
    impl Drop for Restore {
        fn drop(&mut self) {
            LISTENING.with(|l| l.set(self.0));
            HEARD.with(|h| h.set(self.1));
        }
    }
    let restore = Restore(was_listening, before);
    let result = poll();
    let heard = HEARD.with(|h| h.get());
    drop(restore);
    (result, heard)
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
            if LISTENING.with(Cell::get) {
                let spec = *this.spec;
                HEARD.with(|h| {
                    if h.get().is_none() {
                        h.set(Some(spec));
                    }
                });
            }
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
