//! The node of a `Delay` step: a tokio timer, whose duration the scheduler can read to record
//! it (`TimerSet`).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Sleep;

use crate::error::NodeError;
use crate::nodes::{Idle, IntoNodes, Leaf, Nodes};
use crate::panic::timer;
use crate::run_state::RunState;

/// Marks a `Delay` step in the tuple tree that generated code hands to `execute`: the pair
/// `(Timer, after)` becomes a [`Wait`], where `after` computes the duration (it may read
/// other nodes' outputs, and fails like an operation when one is missing).
#[derive(Debug, Clone, Copy)]
pub struct Timer;

/// The node of a `Delay` step: on each start it computes its duration and sets a tokio timer
/// (through the runtime's timer helper, so that a missing tokio timer fails the node with an
/// error, not a panic); it completes when the timer fires, with no output.
pub struct Wait<F> {
    after: F,
    /// The current attempt's duration and timer, or why it could not start.
    running: Option<Result<Started, NodeError>>,
}

/// A started wait: its duration and its timer.
type Started = (Duration, Pin<Box<Sleep>>);

impl<F: Fn() -> Result<Duration, NodeError>> Wait<F> {
    /// Wraps the closure that computes the duration.
    pub const fn new(after: F) -> Self {
        Wait {
            after,
            running: None,
        }
    }
}

// SAFETY: collects itself.
unsafe impl<F: Fn() -> Result<Duration, NodeError>> Nodes for Wait<F> {
    const LEN: usize = 1;

    #[inline]
    unsafe fn collect<'a>(
        self: Pin<&'a mut Self>,
        _arena: *mut u8,
        out: &mut Vec<Pin<&'a mut (dyn Leaf + 'a)>>,
    ) where
        Self: 'a,
    {
        out.push(self);
    }
}

impl<F: Fn() -> Result<Duration, NodeError>> Leaf for Wait<F> {
    fn start(self: Pin<&mut Self>) {
        let this = self.get_mut();
        this.running = None;
        this.running = Some((this.after)().and_then(|after| Ok((after, timer(after)?))));
    }

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), NodeError>> {
        let this = self.get_mut();
        let fired = match &mut this.running {
            Some(Ok((_, sleep))) => sleep.as_mut().poll(cx).is_ready(),
            Some(Err(_)) => true,
            None => {
                return Poll::Ready(Err(NodeError::Internal(
                    "polled a delay that was not started",
                )));
            }
        };
        if !fired {
            return Poll::Pending;
        }
        match this.running.take() {
            Some(Err(error)) => Poll::Ready(Err(error)),
            _ => Poll::Ready(Ok(())),
        }
    }

    fn stop(self: Pin<&mut Self>) {
        self.get_mut().running = None;
    }

    fn decide(self: Pin<&mut Self>, _: &RunState) -> bool {
        false
    }

    fn delay(&self) -> Option<Duration> {
        match &self.running {
            Some(Ok((after, _))) => Some(*after),
            _ => None,
        }
    }

    fn idle(&self) -> Option<Idle> {
        match &self.running {
            Some(Ok((_, sleep))) => Some(Idle::Until(sleep.deadline())),
            _ => None,
        }
    }

    fn resume_timer(self: Pin<&mut Self>, left: Duration) {
        let this = self.get_mut();
        if let Some(Ok((after, _))) = &this.running {
            let after = *after;
            this.running = Some(timer(left).map(|sleep| (after, sleep)));
        }
    }
}

// The timer is pinned in its box; nothing else is structurally pinned.
impl<F> Unpin for Wait<F> {}

impl<F> std::fmt::Debug for Wait<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wait")
            .field("running", &self.running.is_some())
            .finish()
    }
}

impl<F> IntoNodes for (Timer, F)
where
    F: Fn() -> Result<Duration, NodeError>,
{
    type Inline = Wait<F>;
    type InArena = Wait<F>;

    #[inline]
    fn inline(self) -> Self::Inline {
        Wait::new(self.1)
    }

    #[inline]
    fn in_arena(self) -> Self::InArena {
        Wait::new(self.1)
    }
}

#[cfg(test)]
mod tests {
    use std::pin::pin;
    use std::task::Waker;

    use super::*;

    #[test]
    fn without_a_tokio_timer_the_delay_fails() {
        let mut wait = pin!(Wait::new(|| Ok(Duration::from_secs(1))));
        wait.as_mut().start();
        assert_eq!(wait.delay(), None);
        let polled = wait.as_mut().poll(&mut Context::from_waker(Waker::noop()));
        assert!(
            matches!(&polled, Poll::Ready(Err(NodeError::Panicked(m))) if m.contains("tokio runtime with time enabled")),
            "{polled:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_resumed_timer_waits_what_is_left() {
        let start = tokio::time::Instant::now();
        let mut wait = pin!(Wait::new(|| Ok(Duration::from_secs(3600))));
        wait.as_mut().start();
        wait.as_mut().resume_timer(Duration::from_millis(40));
        // The step's duration is still the one it was written with (for its `TimerSet`).
        assert_eq!(wait.delay(), Some(Duration::from_secs(3600)));
        std::future::poll_fn(|cx| wait.as_mut().poll(cx))
            .await
            .expect("the timer fires");
        assert_eq!(start.elapsed(), Duration::from_millis(40));
    }

    #[tokio::test(start_paused = true)]
    async fn waits_its_duration() {
        let start = tokio::time::Instant::now();
        let mut wait = pin!(Wait::new(|| Ok(Duration::from_millis(250))));
        wait.as_mut().start();
        assert_eq!(wait.delay(), Some(Duration::from_millis(250)));
        std::future::poll_fn(|cx| wait.as_mut().poll(cx))
            .await
            .expect("the timer fires");
        assert!(start.elapsed() >= Duration::from_millis(250));
    }
}
