//! A run of a one-node graph without the scheduler: what a `ForEach` or `Loop` instance whose
//! body is a single `Operation` runs ([`execute_one`]).
//!
//! Such a run has nothing to schedule: its one node starts at once, and the run ends when the
//! node's future ends. When nothing else would make the scheduler do more than that, the
//! instance polls the node's future itself and turns its end into the one-node [`Finished`]
//! the scheduler would have made. Otherwise it is an ordinary run. The rule ([`alone`]):
//!
//! - the step has no options of its own (no retries, timeout, deadline, `exclusive` group or
//!   concurrency limit) and the graph no control tables;
//! - nothing observes or steers the run: no event log, no report, no observer, no sink for
//!   events, no hook (a durable run's journal), no compensation, no cancel token or deadline,
//!   no keys of a durable step's attempt, no `tracing` subscriber that wants spans;
//! - it is a nest instance (a run at the top keeps the whole path).
//!
//! What an operation brings on its first poll is heard as the scheduler hears it: an
//! `#[operation]` whose defaults set no policy (no timeout, retry or deadline) changes nothing
//! in such a run; one whose defaults do hands the node, started and polled, to an ordinary run
//! of the graph ([`Adopted`]), which applies them from that poll on, exactly as a run that had
//! polled the node itself. A panic in the node is caught and fails it with
//! [`NodeError::Panicked`], as the scheduler does; dropping the run drops the node's future.

use std::future::{Future, poll_fn};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::NodeError;
use crate::graph::{Graph, NodeKind};
use crate::nodes::{Leaf, Nodes, Op};
use crate::panic::panic_message;
use crate::policy::NodePolicy;
use crate::run_state::RunState;
use crate::scheduler::{RunSetup, run_nodes};
use crate::scope::{OperationSpec, announce, is_later, listen};
use crate::verdict::Finished;

/// A node's poll, with a panic caught.
type PollResult = std::thread::Result<Poll<Result<(), NodeError>>>;

/// Runs a graph of one operation node, `node` (the tuple `workflow!` builds for it): without
/// the scheduler when nothing needs it (see the module's rule), else as [`execute`] does.
/// Called by the code `workflow!` generates for a `ForEach` or `Loop` body that is a single
/// `Operation` without `compensate`.
///
/// [`execute`]: crate::support::execute
///
/// # Cancel safety
///
/// Dropping the returned future drops the operation's future.
pub fn execute_one<F, Fut>(
    graph: &'static Graph,
    setup: RunSetup,
    node: (F,),
) -> impl Future<Output = Finished>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), NodeError>>,
{
    let mut op = Op::new(node.0);
    // An `async` block holding the node once, pinned in place (as `execute_nodes` does).
    async move {
        // SAFETY: `op` is a variable of this future's state, which is pinned while it is
        // polled, and it is never moved again: the name now stands for the pinned reference.
        let mut op = unsafe { Pin::new_unchecked(&mut op) };
        if !alone(graph, &setup) {
            // Boxed: its state (a scheduler) would make every instance's future as large.
            return Box::pin(run_nodes(graph, setup, op)).await;
        }
        #[cfg(debug_assertions)]
        FAST_RUNS.with(|runs| runs.set(runs.get() + 1));
        let ended = match catch_unwind(AssertUnwindSafe(|| op.as_mut().start())) {
            Ok(()) => poll_alone(op.as_mut()).await,
            Err(payload) => Ended::Done(Err(NodeError::Panicked(panic_message(payload)))),
        };
        match ended {
            Ended::Done(result) => {
                if result.is_err() {
                    // A panic leaves the attempt's future in place (a failed one dropped itself).
                    op.as_mut().stop();
                }
                Finished::one(graph, result)
            }
            Ended::Heard(given, spec) => {
                let mut adopted = Adopted {
                    leaf: op,
                    given: Some((given, spec)),
                };
                Box::pin(run_nodes(graph, setup, Pin::new(&mut adopted))).await
            }
        }
    }
}

/// How a run without the scheduler ended.
enum Ended {
    /// The node ended: completed or failed.
    Done(Result<(), NodeError>),
    /// The node's `#[operation]` reported defaults that set a policy, on the poll that gave
    /// this: an ordinary run takes the node over ([`Adopted`]).
    Heard(PollResult, &'static OperationSpec),
}

/// Polls the started node `op` to its end, listening for its operation's defaults as the
/// scheduler does: on the first poll, and on each poll after it while a `Deferred` step has
/// not reached its operation.
async fn poll_alone<L: Leaf + ?Sized>(mut op: Pin<&mut L>) -> Ended {
    let mut listening = true;
    poll_fn(|cx| {
        let polled = if listening {
            let (polled, heard) = listen(|| poll_caught(op.as_mut(), cx));
            match heard {
                None => listening = false,
                Some(spec) if is_later(spec) => {}
                Some(spec) if spec.policy == NodePolicy::NONE => listening = false,
                Some(spec) => return Poll::Ready(Ended::Heard(polled, spec)),
            }
            polled
        } else {
            poll_caught(op.as_mut(), cx)
        };
        match polled {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(result)) => Poll::Ready(Ended::Done(result)),
            Err(payload) => Poll::Ready(Ended::Done(Err(NodeError::Panicked(panic_message(
                payload,
            ))))),
        }
    })
    .await
}

/// Polls `leaf`, a panic caught.
#[inline]
fn poll_caught<L: Leaf + ?Sized>(leaf: Pin<&mut L>, cx: &mut Context<'_>) -> PollResult {
    catch_unwind(AssertUnwindSafe(|| leaf.poll(cx)))
}

/// Whether a run of `graph` from `setup` can go without the scheduler: the module's rule.
fn alone(graph: &Graph, setup: &RunSetup) -> bool {
    let plan = &graph.plan;
    let control = plan.control;
    let options = &setup.options;
    #[cfg(feature = "durable")]
    let keyed = setup.keys.is_some();
    #[cfg(not(feature = "durable"))]
    let keyed = false;
    // The graph: one operation with no options and no control tables.
    graph.nodes.len() == 1
        && graph.nodes[0].kind == NodeKind::Operation
        && plan.policy(0) == NodePolicy::NONE
        && plan.group_limits.is_empty()
        && control.sections.is_empty()
        && control.rules.is_empty()
        && control.gates.is_empty()
        && control.instants.is_empty()
        && control.nests.is_empty()
        // The run: a nest instance nothing observes or steers.
        && setup.instance
        && !keyed
        && setup.hook.is_none()
        && setup.sink.is_none()
        && setup.compensations.is_empty()
        && !options.record
        && !options.report
        && options.observers.is_empty()
        && options.cancel.is_none()
        && options.deadline.is_none()
        && !crate::scheduler::spans()
}

/// A node started and polled outside the scheduler, handed to an ordinary run: its first
/// start is the one already made, and its first poll gives what that poll gave, with the
/// `#[operation]` defaults it heard. From then on it is the node itself (a retry starts it
/// again).
struct Adopted<'a, L: ?Sized> {
    leaf: Pin<&'a mut L>,
    given: Option<(PollResult, &'static OperationSpec)>,
}

impl<L: Leaf + ?Sized> Leaf for Adopted<'_, L> {
    fn start(mut self: Pin<&mut Self>) {
        if self.given.is_none() {
            self.leaf.as_mut().start();
        }
    }

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), NodeError>> {
        match self.given.take() {
            Some((polled, spec)) => {
                // Heard again by the run's listener, on the attempt's first poll.
                announce(spec);
                match polled {
                    Ok(poll) => poll,
                    // Caught again by the run, with the same payload.
                    Err(payload) => resume_unwind(payload),
                }
            }
            None => self.leaf.as_mut().poll(cx),
        }
    }

    fn stop(mut self: Pin<&mut Self>) {
        self.given = None;
        self.leaf.as_mut().stop();
    }

    fn decide(self: Pin<&mut Self>, _: &RunState) -> bool {
        false
    }
}

// SAFETY: collects itself.
unsafe impl<L: Leaf + ?Sized> Nodes for Adopted<'_, L> {
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

#[cfg(debug_assertions)]
thread_local! {
    static FAST_RUNS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many runs on this thread went without the scheduler ([`execute_one`]'s rule held).
/// Debug builds only, for tests that check the short path is taken.
#[cfg(debug_assertions)]
#[doc(hidden)]
pub fn fast_runs() -> u64 {
    FAST_RUNS.with(std::cell::Cell::get)
}
