//! Starting, polling, timing and retrying a node's attempts.

use std::hash::{BuildHasher, Hasher};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::task::{Context, Poll};

use super::{SHARED_WAKER_LIMIT, Scheduler, Settle};
use crate::error::{NodeError, render};
use crate::events::EventKind;
use crate::graph::NodeKind;
use crate::nodes::Leaves;
use crate::panic::{panic_message, timer};
use crate::scope::{OperationSpec, is_later, listen};
use crate::status::NodeStatus;
use crate::verdict::IMPLIED;
use crate::wake::WakeSet;

/// A node's poll, with a panic caught.
pub(super) type PollResult = std::thread::Result<Poll<Result<(), NodeError>>>;

/// What [`Scheduler::poll_one`] did before it handed a node to [`Scheduler::poll_watched`].
enum Polled {
    /// Nothing: the node has timers or a span, the long way polls it.
    Not,
    /// It polled the node and the attempt failed.
    Failed(NodeError),
    /// It made the attempt's first poll, which heard an `#[operation]`'s defaults.
    Given(PollResult, Option<&'static OperationSpec>),
}

impl Scheduler {
    fn has_capacity(&self, node: u32) -> bool {
        if self.in_flight >= self.limit {
            return false;
        }
        let groups_free = match self.plan().node_groups.get(node as usize) {
            Some(groups) => groups
                .iter()
                .all(|&g| self.group_running[g as usize] < self.plan().group_limits[g as usize]),
            None => true,
        };
        groups_free && (self.group_holder.is_empty() || self.sections_free(node))
    }

    /// `node` starts (`delta` 1) or stops (-1) running: counts it in its limited blocks; on
    /// start, its critical sections hold their groups.
    fn occupy(&mut self, node: u32, delta: i32) {
        if delta > 0 && !self.group_holder.is_empty() {
            self.hold_sections(node);
        }
        if let Some(groups) = self.plan().node_groups.get(node as usize) {
            for &g in *groups {
                let count = &mut self.group_running[g as usize];
                *count = count.saturating_add_signed(delta);
            }
        }
    }

    /// Starts every ready node that may start, in the order they became ready. Decisions are
    /// evaluated on the spot.
    #[inline]
    pub(super) fn start_ready(&mut self, leaves: &mut Leaves<'_>) {
        if self.limited {
            return self.start_ready_limited(leaves);
        }
        // Walked by index: a node made ready meanwhile (by a decision, or a start that failed)
        // joins the end of the list and is started in this walk too.
        let mut i = 0;
        while !self.interrupt
            && let Some(&node) = self.ready.get(i)
        {
            i += 1;
            self.start_one(leaves, node);
        }
        if i == self.ready.len() {
            self.ready.clear();
        } else {
            // `interrupt`: the rest waits until the run has applied the withdrawals, or is
            // never started (a halt: `stop_all` aborts it).
            self.ready.drain(..i);
        }
    }

    /// [`Scheduler::start_ready`] under concurrency limits: a node without room stays ready,
    /// in its place, for a later turn.
    #[inline(never)]
    fn start_ready_limited(&mut self, leaves: &mut Leaves<'_>) {
        let mut i = 0;
        loop {
            if self.interrupt {
                if self.halt.is_some() {
                    return;
                }
                // The withdrawn nodes leave `ready`; the walk starts again from its head.
                self.apply_withdrawals(leaves);
                i = 0;
                continue;
            }
            let Some(&node) = self.ready.get(i) else {
                // A critical section that ended during the walk (a decision settled its last
                // node, a start failed, a node was withdrawn) lets the nodes passed over start
                // now.
                if std::mem::take(&mut self.section_freed) && !self.ready.is_empty() {
                    i = 0;
                    continue;
                }
                return;
            };
            if !self.nodes[node as usize].decision && !self.has_capacity(node) {
                i += 1;
                continue;
            }
            self.ready.remove(i);
            self.start_one(leaves, node);
        }
    }

    /// Starts a ready node: evaluates a decision, or starts an operation's first attempt.
    #[inline(always)]
    fn start_one(&mut self, leaves: &mut Leaves<'_>, node: u32) {
        if self.nodes[node as usize].decision {
            self.decide(leaves, node);
            return;
        }
        self.nodes[node as usize].status = NodeStatus::Running;
        if self.limited {
            self.occupy(node, 1);
        }
        self.in_flight += 1;
        let started = if self.lean {
            self.start_attempt(leaves, node)
        } else {
            self.start_first(leaves, node)
        };
        match started {
            Ok(()) => self.due.push(node),
            Err(error) => {
                self.release(node);
                self.fail(node, error);
            }
        }
    }

    /// A running node has stopped: it no longer counts against any limit, and its timers go.
    #[inline(always)]
    pub(super) fn release(&mut self, node: u32) {
        let state = &mut self.nodes[node as usize];
        state.attempt = 0;
        state.fresh = false;
        // Tested first: assigning alone calls the box's drop glue out of line for every node,
        // though most have no `Watch` (and most runs no `watches` at all).
        if let Some(watch) = self.watches.get_mut(node as usize)
            && watch.is_some()
        {
            *watch = None;
        }
        self.in_flight -= 1;
        if self.limited {
            self.occupy(node, -1);
        }
    }

    /// Starts `node`'s first attempt when the run is not lean: its deadline over all attempts
    /// first.
    #[inline(never)]
    fn start_first(&mut self, leaves: &mut Leaves<'_>, node: u32) -> Result<(), NodeError> {
        if !self.plan().control.nests.is_empty()
            && let Some(nest) = self.plan().control.nest(node)
        {
            let ctx = self.nest_ctx(nest);
            leaves[node as usize].as_mut().nest(ctx);
        }
        if self.hook.is_some() {
            // The hook starts it, now or later; until then `poll_watched` passes it.
            return self.hooked(
                leaves,
                None,
                None,
                |steps, run| steps.request(run, node, false),
                Ok(()),
            );
        }
        if let Some(after) = self.plan().policy(node as usize).deadline() {
            self.watch(node).deadline = Some(timer(after)?);
        }
        self.start_attempt(leaves, node)
    }

    /// Makes the future of `node`'s next attempt. In a lean run that is all; otherwise
    /// [`Scheduler::attempt_started`] sets the attempt's timeout and span and records it.
    #[inline(always)]
    fn start_attempt(&mut self, leaves: &mut Leaves<'_>, node: u32) -> Result<(), NodeError> {
        let started = catch_unwind(AssertUnwindSafe(|| leaves[node as usize].as_mut().start()));
        if let Err(payload) = started {
            return Err(NodeError::Panicked(panic_message(payload)));
        }
        let state = &mut self.nodes[node as usize];
        state.attempt += 1;
        state.fresh = true;
        if self.lean {
            return Ok(());
        }
        self.attempt_started(leaves, node)
    }

    /// The rest of [`Scheduler::start_attempt`] outside a lean run: the attempt's timeout, its
    /// span, its event; what the previous attempt left (backoff, timeout, span) goes.
    #[inline(never)]
    fn attempt_started(&mut self, leaves: &mut Leaves<'_>, node: u32) -> Result<(), NodeError> {
        let timeout = self.node_policy(node).timeout().map(timer).transpose()?;
        if let Some(watch) = self.watch_of(node) {
            watch.backoff = None;
            watch.timeout = None;
            #[cfg(feature = "tracing")]
            {
                watch.span = None;
            }
        }
        if let Some(timeout) = timeout {
            self.watch(node).timeout = Some(timeout);
        }
        if self.keyed() {
            // Polled the long way, where its key is set.
            self.watch(node);
        }
        let attempt = self.nodes[node as usize].attempt;
        #[cfg(feature = "tracing")]
        {
            let span = tracing::info_span!(
                "flow_node",
                workflow = self.graph.name,
                node = self.graph.nodes[node as usize].name,
                attempt
            );
            if !span.is_disabled() {
                self.watch(node).span = Some(span);
            }
        }
        self.emit(Some(node), attempt, || EventKind::Requested);
        if self.recording.is_some()
            && self.graph.nodes[node as usize].kind == NodeKind::Delay
            && let Some(after) = leaves[node as usize].delay()
        {
            self.emit(Some(node), attempt, || EventKind::TimerSet { after });
        }
        Ok(())
    }

    /// Records a failed attempt's error, rendered once: the report and the `Retrying` event
    /// share the returned text.
    pub(super) fn record_attempt_error(&mut self, node: u32, error: &NodeError) -> Arc<str> {
        if self.extras.failed_attempts.is_empty() {
            self.extras
                .failed_attempts
                .resize_with(self.len(), Vec::new);
        }
        let rendered = render(error);
        self.extras.failed_attempts[node as usize].push(Arc::clone(&rendered));
        rendered
    }

    /// Records how many attempts `node` made, unless its final status implies it (1 for an
    /// operation that completed or failed, 0 otherwise), so plain runs allocate nothing here.
    #[inline]
    pub(super) fn record_attempts(&mut self, node: u32, attempts: u32, implied: u32) {
        if attempts == implied && self.extras.attempts.is_empty() {
            return;
        }
        if self.extras.attempts.is_empty() {
            self.extras.attempts.resize(self.len(), IMPLIED);
        }
        self.extras.attempts[node as usize] = attempts;
    }

    /// A pseudo-random fraction in [0, 1) for jitter: per run, node and attempt.
    fn jitter_fraction(&mut self, node: u32, attempt: u32) -> f64 {
        if self.seed == 0 {
            self.seed = std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish()
                | 1;
        }
        let mut x = self.seed ^ (u64::from(node) << 32 | u64::from(attempt));
        // splitmix64
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^= x >> 31;
        (x >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Polls the due nodes (started or woken since the last poll), each with its own waker.
    ///
    /// While few nodes are in flight (`SHARED_WAKER_LIMIT`), a node is polled with the run's own
    /// waker instead, as `join_all` does for small sets: its wake-up then costs what a
    /// hand-written `join!` pays, and the run polls every such node (at most that many) on each
    /// wake-up, since it cannot tell which one was woken.
    #[inline]
    pub(super) fn poll_due(
        &mut self,
        leaves: &mut Leaves<'_>,
        wakes: &mut Option<Arc<WakeSet>>,
        parent: &Context<'_>,
    ) {
        // Polling adds nothing to `due` (nodes started from here on are polled by the next
        // round), so the list is walked by index and cleared at the end, keeping its room.
        // On `interrupt` the walk stops and what it has not reached stays.
        let mut i = 0;
        while let Some(&node) = self.due.get(i) {
            if self.interrupt {
                // A halt stops whatever is still running; withdrawals are applied by the run
                // loop before it polls the rest.
                break;
            }
            i += 1;
            if self.nodes[node as usize].status != NodeStatus::Running {
                // Woken after it ended (a timer or an earlier attempt's future).
                continue;
            }
            let shared = self.in_flight <= SHARED_WAKER_LIMIT;
            let own;
            let waker = if shared {
                parent.waker()
            } else {
                // Made on first use: small and narrow workflows never need it.
                let wakes = wakes.get_or_insert_with(|| {
                    let wakes = WakeSet::new(self.len());
                    wakes.register(parent.waker());
                    wakes
                });
                wakes.polling(node);
                own = wakes.waker(node);
                &*own
            };
            // One call site, so that the short path is inlined here.
            let result = self.poll_one(leaves, node, &mut Context::from_waker(waker));
            if let Some(result) = result {
                if result.is_err() {
                    // A failed future has ended, but a timeout, a deadline or a panic leaves
                    // the attempt's future in place (a completed one dropped itself).
                    leaves[node as usize].as_mut().stop();
                }
                let attempts = self.nodes[node as usize].attempt;
                self.release(node);
                self.record_attempts(node, attempts, 1);
                match result {
                    Ok(()) => self.settle(node, Settle::Completed),
                    Err(error) => self.fail(node, error),
                }
            } else if shared {
                self.shared.push(node);
            }
        }
        if self.interrupt {
            // The rest is polled once the withdrawals are applied (or never: a halt).
            self.due.drain(..i);
        } else {
            self.due.clear();
        }
    }

    /// Polls one running node. `None` while it is still going; `Some` with its final result.
    ///
    /// The common case is short: a node without timers or span. Everything else (timers, an
    /// `#[operation]`'s defaults heard on the first poll, a failed attempt) goes through
    /// [`Scheduler::poll_watched`].
    #[inline(always)]
    fn poll_one(
        &mut self,
        leaves: &mut Leaves<'_>,
        node: u32,
        cx: &mut Context<'_>,
    ) -> Option<Result<(), NodeError>> {
        let index = node as usize;
        if self.watch_of(node).is_some() {
            return self.poll_watched(leaves, node, cx, Polled::Not);
        }
        let state = &mut self.nodes[index];
        let polled = if state.fresh {
            state.fresh = false;
            // The attempt's first poll: it may hear an `#[operation]`'s defaults.
            let (polled, heard) =
                listen(|| catch_unwind(AssertUnwindSafe(|| leaves[index].as_mut().poll(cx))));
            if let Some(spec) = heard {
                if !is_later(spec) {
                    // Its defaults may bring timers: the long way applies them.
                    return self.poll_watched(leaves, node, cx, Polled::Given(polled, heard));
                }
                // A step that has not reached its operation yet: listen on its next poll too.
                self.nodes[index].fresh = true;
            }
            polled
        } else {
            catch_unwind(AssertUnwindSafe(|| leaves[index].as_mut().poll(cx)))
        };
        match polled {
            Ok(Poll::Pending) => None,
            Ok(Poll::Ready(Ok(()))) => Some(Ok(())),
            Ok(Poll::Ready(Err(error))) => {
                self.poll_watched(leaves, node, cx, Polled::Failed(error))
            }
            Err(payload) => {
                let error = NodeError::Panicked(panic_message(payload));
                self.poll_watched(leaves, node, cx, Polled::Failed(error))
            }
        }
    }

    /// Polls one running node the long way: its deadline, its backoff, then its attempt and
    /// the attempt's timeout. `polled` says what [`Scheduler::poll_one`] has already done.
    #[inline(never)]
    fn poll_watched(
        &mut self,
        leaves: &mut Leaves<'_>,
        node: u32,
        cx: &mut Context<'_>,
        polled: Polled,
    ) -> Option<Result<(), NodeError>> {
        let (mut failed, mut given) = match polled {
            Polled::Not => (None, None),
            Polled::Failed(error) => (Some(error), None),
            Polled::Given(result, heard) => (None, Some((result, heard))),
        };
        if let Some(hook) = &self.hook
            && hook.holds(node)
        {
            // Its hook holds it: no attempt to poll.
            return None;
        }
        loop {
            if let Some(error) = failed.take() {
                // An attempt that failed: retry it after its backoff, or give up.
                if let Some(done) = self.retry_or_give_up(leaves, node, error) {
                    return Some(done);
                }
                continue;
            }
            if let Some(deadline) = self.timer(node, |w| &mut w.deadline)
                && deadline.as_mut().poll(cx).is_ready()
            {
                let after = self.node_policy(node).deadline().unwrap_or_default();
                return Some(Err(NodeError::DeadlineExceeded(after)));
            }
            if let Some(backoff) = self.timer(node, |w| &mut w.backoff) {
                if backoff.as_mut().poll(cx).is_pending() {
                    return None;
                }
                if self.hook.is_some() {
                    let requested = self.hooked(
                        leaves,
                        None,
                        None,
                        |steps, run| steps.request(run, node, true),
                        Ok(()),
                    );
                    return requested.err().map(Err);
                }
                if let Err(error) = self.start_attempt(leaves, node) {
                    return Some(Err(error));
                }
            }
            let had_deadline = self.timer(node, |w| &mut w.deadline).is_some();
            let polled = match self.hook.is_some() {
                true => self.hooked(
                    leaves,
                    None,
                    given.take(),
                    |steps, run| steps.poll(run, node, cx),
                    Poll::Pending,
                ),
                false => self.poll_attempt(leaves, node, cx, given.take()),
            };
            let error = match polled {
                Poll::Pending => {
                    // A deadline that this poll made (an `#[operation]`'s default, heard on the
                    // attempt's first poll) must be polled once to wake the node when it passes:
                    // nothing else polls a node that nobody wakes.
                    if !had_deadline
                        && let Some(deadline) = self.timer(node, |w| &mut w.deadline)
                        && deadline.as_mut().poll(cx).is_ready()
                    {
                        let after = self.node_policy(node).deadline().unwrap_or_default();
                        return Some(Err(NodeError::DeadlineExceeded(after)));
                    }
                    return None;
                }
                Poll::Ready(Ok(())) => return Some(Ok(())),
                Poll::Ready(Err(error)) => error,
            };
            if let Some(done) = self.retry_or_give_up(leaves, node, error) {
                return Some(done);
            }
            // Loop: poll the new backoff so that its timer is registered (or fires at once).
        }
    }

    /// An attempt of `node` failed: sets the backoff timer before the next attempt and returns
    /// `None`, or returns the node's final error when no retry is left (or no timer can be made).
    fn retry_or_give_up(
        &mut self,
        leaves: &mut Leaves<'_>,
        node: u32,
        error: NodeError,
    ) -> Option<Result<(), NodeError>> {
        let attempt = self.nodes[node as usize].attempt;
        // A redriven step's attempts count from the redrive (`Hook::attempts_before`).
        let counted = match self.hook.as_deref() {
            Some(hook) => attempt.saturating_sub(hook.attempts_before(node)),
            None => attempt,
        };
        let policy = self.node_policy(node);
        if counted > policy.retries() {
            return Some(Err(error));
        }
        leaves[node as usize].as_mut().stop();
        let rendered = self.record_attempt_error(node, &error);
        let mut delay = policy.backoff.unwrap_or_default().delay(counted);
        if policy.jitter.unwrap_or(false) {
            delay = delay.mul_f64(self.jitter_fraction(node, attempt));
        }
        self.emit(Some(node), attempt, || EventKind::Retrying {
            error: rendered,
            delay,
        });
        let backoff = match timer(delay) {
            Ok(backoff) => backoff,
            Err(error) => return Some(Err(error)),
        };
        let watch = self.watch(node);
        watch.timeout = None;
        watch.backoff = Some(backoff);
        None
    }

    /// Polls the current attempt of `node` and its timeout.
    ///
    /// `given` is the result and what was heard of a first poll already made.
    pub(super) fn poll_attempt(
        &mut self,
        leaves: &mut Leaves<'_>,
        node: u32,
        cx: &mut Context<'_>,
        given: Option<(PollResult, Option<&'static OperationSpec>)>,
    ) -> Poll<Result<(), NodeError>> {
        let index = node as usize;
        #[cfg(feature = "tracing")]
        let span = self.watch_of(node).and_then(|w| w.span.clone());
        #[cfg(feature = "tracing")]
        let _entered = span.as_ref().map(tracing::Span::enter);
        let polled = if let Some((polled, heard)) = given {
            match heard.map(|spec| self.heard(node, spec)) {
                Some(Err(error)) => Ok(Poll::Ready(Err(error))),
                _ => polled,
            }
        } else if self.nodes[index].fresh {
            self.nodes[index].fresh = false;
            let (polled, heard) = listen(|| self.poll_leaf(leaves, node, cx));
            match heard.map(|spec| self.heard(node, spec)) {
                Some(Err(error)) => Ok(Poll::Ready(Err(error))),
                _ => polled,
            }
        } else {
            self.poll_leaf(leaves, node, cx)
        };
        match polled {
            Ok(Poll::Ready(result)) => Poll::Ready(result),
            Err(payload) => Poll::Ready(Err(NodeError::Panicked(panic_message(payload)))),
            Ok(Poll::Pending) => {
                let expired = match self.timer(node, |w| &mut w.timeout) {
                    Some(timeout) => timeout.as_mut().poll(cx).is_ready(),
                    None => false,
                };
                if expired {
                    let after = self.node_policy(node).timeout().unwrap_or_default();
                    let attempt = self.nodes[index].attempt;
                    self.emit(Some(node), attempt, || EventKind::TimedOut { after });
                    Poll::Ready(Err(NodeError::TimedOut(after)))
                } else {
                    Poll::Pending
                }
            }
        }
    }

    /// Polls `node`'s future, a panic caught; in a plain run inside a durable step, with the
    /// step's own key set (`attempt::KeyScope`).
    #[inline]
    fn poll_leaf(&self, leaves: &mut Leaves<'_>, node: u32, cx: &mut Context<'_>) -> PollResult {
        let mut poll =
            || catch_unwind(AssertUnwindSafe(|| leaves[node as usize].as_mut().poll(cx)));
        #[cfg(feature = "durable")]
        if let Some(keys) = self.keys.as_deref() {
            let name = self.graph.nodes[node as usize].name;
            let ctx = keys.ctx(name, self.nodes[node as usize].attempt);
            return crate::attempt::with_attempt(ctx, poll).0;
        }
        poll()
    }

    /// Applies the defaults of the `#[operation]` that `node` called.
    fn heard(&mut self, node: u32, spec: &'static OperationSpec) -> Result<(), NodeError> {
        let node = node as usize;
        if is_later(spec) {
            // A step that has not reached its operation yet: listen on its next poll too.
            self.nodes[node].fresh = true;
            return Ok(());
        }
        // From now on attempts may have defaults to apply.
        self.lean = false;
        if self.extras.operations.is_empty() {
            self.extras.operations.resize(self.len(), None);
        }
        let first = self.extras.operations[node].is_none();
        self.extras.operations[node] = Some(spec);
        let own = self.plan().policy(node);
        if own.timeout_ms.is_none()
            && let Some(after) = spec.policy.timeout()
        {
            self.watch(node as u32).timeout = Some(timer(after)?);
        }
        if first
            && own.deadline_ms.is_none()
            && let Some(after) = spec.policy.deadline()
        {
            self.watch(node as u32).deadline = Some(timer(after)?);
        }
        Ok(())
    }
}
