//! The attempt being polled, and its idempotency key ([`Attempt`], `flowdag::attempt()`).
//!
//! A durable run's journal polls each attempt of its nodes inside an [`AttemptCtx`] (its key,
//! the output to restore, the output it stored, a `Signal` step's exchange); a plain run made
//! inside such an attempt polls its own steps inside contexts whose keys extend it
//! ([`KeyScope`]). This module is plain data and a thread-local: the scheduler, below the
//! durable layer, sets it for the steps of such plain runs.

use std::any::Any;
use std::cell::RefCell;
use std::sync::Arc;

/// The attempt a node of a durable run is making: read it with `flowdag::attempt()` to make the
/// operation's side effect idempotent.
///
/// A plain workflow run inside a durable step (`Operation(ship_all(..))` whose code awaits
/// `Lines::run(..)`) gives each of its own steps an attempt too, its key extending the durable
/// step's: `"{run}/{step}/{attempt}/{inner step}/{inner attempt}"`, and, inside the plain
/// run's `ForEach` instance 3 of `lines` (`Loop` iteration 7 of `poll`),
/// `"…/lines[3]/{inner step}/{inner attempt}"` (`"…/poll@7/…"`). The plain run is not
/// journaled: when the durable step runs again (a retry, or a resume after a crash), the
/// plain run runs again whole, its steps with the same keys as before (the same attempt of
/// the durable step), so a service that deduplicates by key does each thing once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    run: Arc<str>,
    node: &'static str,
    attempt: u32,
    /// An attempt of the node's compensation (`compensate = ..`), not of the node.
    compensation: bool,
    /// A step of a plain run inside a durable step: what its key starts with instead of the
    /// run's id (the durable step's key, and the instances around the step).
    scope: Option<Arc<str>>,
}

impl Attempt {
    /// `"{run}/{node}/{attempt}"`: the same for an attempt and for its re-execution after a
    /// crash, different for each retry. For an attempt of a compensation,
    /// `"{run}/{node}:compensate/{attempt}"`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.node_key(), self.attempt)
    }

    /// `"{run}/{node}"`: the same for every attempt of the node (one key across retries, as
    /// payment APIs want); `"{run}/{node}:compensate"` for its compensation.
    pub fn node_key(&self) -> String {
        let prefix = self.scope.as_deref().unwrap_or(&self.run);
        match self.compensation {
            true => format!("{prefix}/{}:compensate", self.node),
            false => format!("{prefix}/{}", self.node),
        }
    }

    /// Whether this is an attempt of the node's compensation rather than of the node.
    pub fn is_compensation(&self) -> bool {
        self.compensation
    }

    /// Makes this an attempt of the node's compensation.
    pub(crate) fn set_compensation(&mut self) {
        self.compensation = true;
    }

    /// The attempt's number, 1 for the first.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The run's id.
    pub fn run(&self) -> &str {
        &self.run
    }

    /// The node's name.
    pub fn node(&self) -> &'static str {
        self.node
    }
}

/// What the scheduler tells a node of a durable run while it polls it.
pub(crate) struct AttemptCtx {
    pub(crate) attempt: Attempt,
    /// Restore the node's output from these bytes instead of running it (`Some(empty)` for a
    /// node without output).
    pub(crate) restore: Option<Vec<u8>>,
    /// The output the node stored: (its type, its JSON).
    pub(crate) captured: Option<(&'static str, Vec<u8>)>,
    /// A durable `Signal` step's exchange with the scheduler (the journal's `SignalCtx`;
    /// `None` for every other node).
    pub(crate) signal: Option<Box<dyn Any + Send>>,
}

thread_local! {
    pub(crate) static CURRENT: RefCell<Option<AttemptCtx>> = const { RefCell::new(None) };
}

/// The attempt being polled, if any (`durable::attempt`).
pub(crate) fn current() -> Option<Attempt> {
    CURRENT.with(|c| c.borrow().as_ref().map(|ctx| ctx.attempt.clone()))
}

/// Polls `poll` with `ctx` as the current attempt; returns what it returned and the context
/// (with what the node captured).
pub(crate) fn with_attempt<R>(ctx: AttemptCtx, poll: impl FnOnce() -> R) -> (R, AttemptCtx) {
    struct Reset(Option<AttemptCtx>);
    impl Drop for Reset {
        fn drop(&mut self) {
            let previous = self.0.take();
            // Also on unwind: the scheduler catches a node's panic, the context must not stay.
            let _ = CURRENT.try_with(|c| c.replace(previous));
        }
    }
    let previous = CURRENT.with(|c| c.replace(Some(ctx)));
    let reset = Reset(previous);
    let result = poll();
    let ctx = CURRENT.with(|c| c.replace(None));
    drop(reset);
    (result, ctx.unwrap_or_else(unreachable_ctx))
}

#[cold]
fn unreachable_ctx() -> AttemptCtx {
    // Only a node that replaced the context itself could remove it; give an empty one back.
    attempt_ctx(&Arc::from(""), "", 0)
}

/// The keys of a plain run's steps when the run is made inside a durable step's attempt (see
/// [`Attempt`]): the durable run, and the prefix of every key of the plain run.
#[derive(Clone, Debug)]
pub(crate) struct KeyScope {
    run: Arc<str>,
    scope: Arc<str>,
}

impl KeyScope {
    /// The scope of a plain run made while an attempt is polled: its keys extend that
    /// attempt's key. `None` outside any attempt.
    pub(crate) fn inside_attempt() -> Option<KeyScope> {
        CURRENT.with(|current| {
            let current = current.borrow();
            let attempt = &current.as_ref()?.attempt;
            Some(KeyScope {
                run: Arc::clone(&attempt.run),
                scope: Arc::from(attempt.key()),
            })
        })
    }

    /// The scope of instance `step` (`lines[3]`) of the nest node being polled: its keys
    /// extend those of the run that holds the node. `None` outside any attempt.
    pub(crate) fn instance(step: &dyn std::fmt::Display) -> Option<KeyScope> {
        CURRENT.with(|current| {
            let current = current.borrow();
            let attempt = &current.as_ref()?.attempt;
            let around = attempt.scope.as_deref().unwrap_or(&attempt.run);
            Some(KeyScope {
                run: Arc::clone(&attempt.run),
                scope: Arc::from(format!("{around}/{step}")),
            })
        })
    }

    /// The context attempt `attempt` of step `node` of the plain run is polled with.
    pub(crate) fn ctx(&self, node: &'static str, attempt: u32) -> AttemptCtx {
        let mut ctx = attempt_ctx(&self.run, node, attempt);
        ctx.attempt.scope = Some(Arc::clone(&self.scope));
        ctx
    }
}

/// Makes the context of an attempt of `node` in run `run`.
pub(crate) fn attempt_ctx(run: &Arc<str>, node: &'static str, attempt: u32) -> AttemptCtx {
    AttemptCtx {
        attempt: Attempt {
            run: Arc::clone(run),
            node,
            attempt,
            compensation: false,
            scope: None,
        },
        restore: None,
        captured: None,
        signal: None,
    }
}
