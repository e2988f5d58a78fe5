//! Failure semantics and operation policies: error boundaries, retries, backoff, timeouts,
//! deadlines, fail-fast, cancellation and concurrency limits. Time is tokio's paused clock.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::time::Duration;

use flowdag::prelude::*;
use flowdag::{Backoff, CancelReason};
use tokio::time::{Instant, sleep};

#[derive(Debug, Clone, PartialEq)]
struct Failure(String);
impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for Failure {}

/// Shared record of a run: which steps started, when, and how often.
#[derive(Default)]
struct Log {
    events: RefCell<Vec<(String, Duration)>>,
    start: Cell<Option<Instant>>,
}

impl Log {
    fn note(&self, what: impl Into<String>) {
        let start = *self.start.get().get_or_insert_with(Instant::now);
        self.start.set(Some(start));
        self.events
            .borrow_mut()
            .push((what.into(), start.elapsed()));
    }
    fn count(&self, what: &str) -> usize {
        self.events
            .borrow()
            .iter()
            .filter(|(w, _)| w == what)
            .count()
    }
    fn times(&self, what: &str) -> Vec<Duration> {
        self.events
            .borrow()
            .iter()
            .filter(|(w, _)| w == what)
            .map(|(_, t)| *t)
            .collect()
    }
}

async fn ok(log: &Log, name: &'static str, ms: u64) -> Result<u32, Failure> {
    log.note(name);
    sleep(Duration::from_millis(ms)).await;
    Ok(1)
}

async fn fails(log: &Log, name: &'static str, ms: u64) -> Result<u32, Failure> {
    log.note(name);
    sleep(Duration::from_millis(ms)).await;
    Err(Failure(format!("{name} failed")))
}

/// Fails until the `succeed_on`-th attempt.
async fn flaky(log: &Log, name: &'static str, succeed_on: usize) -> Result<u32, Failure> {
    log.note(name);
    let attempt = log.count(name);
    if attempt >= succeed_on {
        Ok(attempt as u32)
    } else {
        Err(Failure(format!("attempt {attempt} failed")))
    }
}

// --- The flowgraph seed's error boundary ---------------------------------------------------

workflow! {
    /// `fetch` fails; the Conditional catches it and takes the else branch.
    Boundary(log: &Log) -> u32 {
        Sequential {
            fetch = Operation(fails(log, "fetch", 10)),
            Conditional(fetch.is_ok()) {
                transform = Operation(ok(log, "transform", 10)),
                store = Operation(ok(log, "store", 10)),
            } else {
                notify_error = Operation(ok(log, "notify_error", 10)),
            },
            audit = Operation(ok(log, "audit", 10)),
        }
        => audit
    }
}

#[tokio::test(start_paused = true)]
async fn conditional_catches_failure_and_run_succeeds() {
    let log = Log::default();
    let outcome = Boundary::runner().execute(&log).await;
    let report = &outcome.report;
    assert_eq!(report.status("fetch"), Some(NodeStatus::Failed));
    assert_eq!(report.status("decision#1"), Some(NodeStatus::Completed));
    assert_eq!(report.status("transform"), Some(NodeStatus::Skipped));
    assert_eq!(report.status("store"), Some(NodeStatus::Skipped));
    assert_eq!(report.status("notify_error"), Some(NodeStatus::Completed));
    assert_eq!(report.status("audit"), Some(NodeStatus::Completed));
    assert_eq!(outcome.result.expect("the failure is caught"), 1);
    assert_eq!(log.count("transform") + log.count("store"), 0);
}

// --- Fail-fast --------------------------------------------------------------------------

workflow! {
    /// One branch fails fast while the other is slow.
    Racing(log: &Log) {
        Sequential {
            Parallel {
                Operation(fails(log, "quick", 10)),
                slow = Operation(ok(log, "slow", 1_000)),
            },
            next = Operation(ok(log, "after", 10)),
        }
    }
}

workflow! {
    /// The same shape, fail-fast by default.
    #[flow(failure = FailFast)]
    RacingFast(log: &Log) {
        Sequential {
            Parallel {
                Operation(fails(log, "quick", 10)),
                slow = Operation(ok(log, "slow", 1_000)),
            },
            next = Operation(ok(log, "after", 10)),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn continue_independent_lets_running_work_finish() {
    let log = Log::default();
    let start = Instant::now();
    let outcome = Racing::runner().execute(&log).await;
    assert_eq!(start.elapsed(), Duration::from_millis(1_000));
    assert_eq!(outcome.report.status("slow"), Some(NodeStatus::Completed));
    assert_eq!(outcome.report.status("next"), Some(NodeStatus::Aborted));
    let error = outcome.result.expect_err("the failure is not caught");
    assert_eq!(
        error.failed().map(|f| f.node).collect::<Vec<_>>(),
        ["fails"]
    );
}

#[tokio::test(start_paused = true)]
async fn fail_fast_cancels_running_operations() {
    let log = Log::default();
    let start = Instant::now();
    let outcome = Racing::runner()
        .failure_policy(FailurePolicy::FailFast)
        .execute(&log)
        .await;
    assert_eq!(
        start.elapsed(),
        Duration::from_millis(10),
        "the slow node was dropped"
    );
    let report = &outcome.report;
    assert_eq!(report.status("fails"), Some(NodeStatus::Failed));
    assert_eq!(report.status("slow"), Some(NodeStatus::Aborted));
    assert_eq!(report.status("next"), Some(NodeStatus::Aborted));
    let error = outcome.result.expect_err("fail-fast fails the run");
    assert!(matches!(
        error.error_of("slow"),
        Some(NodeError::Aborted { cause: "fails" })
    ));

    // The workflow-level option gives the same, and a run can switch it back.
    let log = Log::default();
    let start = Instant::now();
    let outcome = RacingFast::runner().execute(&log).await;
    assert_eq!(start.elapsed(), Duration::from_millis(10));
    assert_eq!(outcome.report.status("slow"), Some(NodeStatus::Aborted));
    let start = Instant::now();
    let outcome = RacingFast::runner()
        .failure_policy(FailurePolicy::ContinueIndependent)
        .execute(&log)
        .await;
    assert_eq!(start.elapsed(), Duration::from_millis(1_000));
    assert_eq!(outcome.report.status("slow"), Some(NodeStatus::Completed));
}

workflow! {
    /// Fail-fast does not fire for a failure a Conditional will catch.
    CaughtFast(log: &Log) -> u32 {
        Parallel {
            Sequential {
                f = Operation(fails(log, "f", 10)),
                Conditional(f.is_err()) { Operation(ok(log, "recover", 10)) },
            },
            slow = Operation(ok(log, "slow", 100)),
        }
        => slow
    }
}

#[tokio::test(start_paused = true)]
async fn fail_fast_ignores_caught_failures() {
    let log = Log::default();
    let outcome = CaughtFast::runner()
        .failure_policy(FailurePolicy::FailFast)
        .execute(&log)
        .await;
    assert_eq!(outcome.report.status("slow"), Some(NodeStatus::Completed));
    assert_eq!(outcome.report.status("ok"), Some(NodeStatus::Completed));
    assert_eq!(outcome.result.expect("caught"), 1);
}

// --- Retries, backoff, timeouts and deadlines -------------------------------------------

workflow! {
    /// Retries with a fixed delay.
    Retried(log: &Log) -> u32 {
        Sequential {
            value = Operation(flaky(log, "flaky", 3), retries = 4, backoff = "100ms"),
        }
        => value
    }
}

#[tokio::test(start_paused = true)]
async fn retries_until_success_with_fixed_backoff() {
    let log = Log::default();
    let outcome = Retried::runner().execute(&log).await;
    assert_eq!(outcome.result.expect("third attempt succeeds"), 3);
    let node = &outcome.report.nodes()[0];
    assert_eq!(node.attempts, 3);
    assert_eq!(
        node.failed_attempts
            .iter()
            .map(|e| &**e)
            .collect::<Vec<_>>(),
        ["attempt 1 failed", "attempt 2 failed"]
    );
    let ms: Vec<u128> = log.times("flaky").iter().map(Duration::as_millis).collect();
    assert_eq!(ms, [0, 100, 200]);
}

/// Waits `ms` first, then fails until the `succeed_on`-th attempt: each failure comes on a later
/// poll than the attempt's first, and attempt 2 panics instead of returning an error.
async fn slow_flaky(
    log: &Log,
    name: &'static str,
    ms: u64,
    succeed_on: usize,
) -> Result<u32, Failure> {
    log.note(name);
    let attempt = log.count(name);
    sleep(Duration::from_millis(ms)).await;
    match attempt {
        a if a >= succeed_on => Ok(a as u32),
        2 => panic!("attempt 2 panicked"),
        a => Err(Failure(format!("attempt {a} failed"))),
    }
}

workflow! {
    /// Retries of attempts that fail after they were pending, beside a node that is not retried.
    RetriedLater(log: &Log) -> u32 {
        Parallel {
            value = Operation(slow_flaky(log, "slow", 10, 3), retries = 2, backoff = "100ms"),
            other = Operation(ok(log, "other", 5)),
        }
        => value + other
    }
}

#[tokio::test(start_paused = true)]
async fn attempts_that_fail_after_pending_are_retried() {
    let log = Log::default();
    let outcome = RetriedLater::runner().execute(&log).await;
    assert_eq!(outcome.result.expect("third attempt succeeds"), 4);
    let node = &outcome.report.nodes()[0];
    assert_eq!(node.attempts, 3);
    assert_eq!(
        node.failed_attempts
            .iter()
            .map(|e| &**e)
            .collect::<Vec<_>>(),
        ["attempt 1 failed", "panicked: attempt 2 panicked"]
    );
    // Each attempt waits 10 ms before it fails; then the backoff of 100 ms.
    let ms: Vec<u128> = log.times("slow").iter().map(Duration::as_millis).collect();
    assert_eq!(ms, [0, 110, 220]);
}

workflow! {
    /// Exponential backoff with a cap; gives up after the last retry.
    Exhausted(log: &Log) {
        Operation(flaky(log, "flaky", 100), retries = 4, backoff = exponential("100ms", "300ms"))
    }
}

#[tokio::test(start_paused = true)]
async fn exponential_backoff_is_capped_and_retries_run_out() {
    let log = Log::default();
    let outcome = Exhausted::runner().execute(&log).await;
    let ms: Vec<u128> = log.times("flaky").iter().map(Duration::as_millis).collect();
    // Delays 100, 200, 300 (capped), 300.
    assert_eq!(ms, [0, 100, 300, 600, 900]);
    let error = outcome.result.expect_err("every attempt fails");
    let failure = error.failed().next().expect("one failed node");
    assert_eq!(failure.attempts, 5);
    assert_eq!(failure.error.to_string(), "attempt 5 failed");
    assert_eq!(outcome.report.nodes()[0].failed_attempts.len(), 4);
}

workflow! {
    /// Jittered delays stay within the backoff.
    Jittered(log: &Log) {
        Operation(flaky(log, "flaky", 6), retries = 5, backoff = "1s", jitter = true)
    }
}

#[tokio::test(start_paused = true)]
async fn jitter_draws_delays_within_the_backoff() {
    let log = Log::default();
    Jittered::run(&log).await.expect("sixth attempt succeeds");
    let times = log.times("flaky");
    assert_eq!(times.len(), 6);
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.iter().all(|g| *g <= Duration::from_secs(1)),
        "{gaps:?}"
    );
    assert!(
        gaps.iter().any(|g| *g < Duration::from_secs(1)),
        "jitter shortened no delay: {gaps:?}"
    );
}

#[flowdag::operation(name = "slow call", timeout = "50ms", retries = 2, backoff = "10ms")]
async fn slow_call(log: &Log, ms: u64) -> Result<u32, Failure> {
    ok(log, "slow_call", ms).await
}

workflow! {
    /// Timeouts: per attempt, from the operation's defaults or the step.
    Timeouts(log: &Log) {
        Parallel {
            defaulted = Operation(slow_call(log, 100)),
            overridden = Operation(slow_call(log, 100), timeout = "200ms", retries = 0),
            plain = Operation(ok(log, "plain", 100), timeout = "20ms"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn timeouts_come_from_step_or_operation_defaults() {
    let log = Log::default();
    let outcome = Timeouts::runner().execute(&log).await;
    let report = &outcome.report;
    let node = |name: &str| {
        report
            .nodes()
            .iter()
            .find(|n| n.name == name)
            .expect("node exists")
            .clone()
    };

    let defaulted = node("defaulted");
    assert_eq!(defaulted.status, NodeStatus::Failed);
    assert_eq!(defaulted.operation, Some("slow call"));
    assert_eq!(
        defaulted.attempts, 3,
        "two retries from the operation's defaults"
    );
    assert_eq!(
        defaulted
            .failed_attempts
            .iter()
            .map(|e| &**e)
            .collect::<Vec<_>>(),
        ["timed out after 50ms", "timed out after 50ms"]
    );

    let overridden = node("overridden");
    assert_eq!(overridden.status, NodeStatus::Completed);
    assert_eq!(overridden.attempts, 1);

    let plain = node("plain");
    assert_eq!(plain.status, NodeStatus::Failed);
    let error = outcome.result.expect_err("two nodes fail");
    assert!(
        matches!(error.error_of("plain"), Some(NodeError::TimedOut(d)) if *d == Duration::from_millis(20))
    );
}

/// A step's first await that is not its operation: returns `ms` after `ms` milliseconds.
async fn wait(ms: u64) -> u64 {
    sleep(Duration::from_millis(ms)).await;
    ms
}

workflow! {
    /// Steps that await something else before they call their `#[operation]`.
    AwaitFirst(log: &Log) {
        Parallel {
            in_argument = Operation(slow_call(log, 90 + wait(10).await)),
            in_block = Operation(async {
                let ms = wait(10).await;
                slow_call(log, 90 + ms).await
            }),
            overridden = Operation(slow_call(log, 90 + wait(10).await), timeout = "200ms", retries = 0),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn operation_defaults_apply_after_an_earlier_await() {
    let log = Log::default();
    let outcome = AwaitFirst::runner().execute(&log).await;
    let report = &outcome.report;
    for name in ["in_argument", "in_block"] {
        let node = report
            .nodes()
            .iter()
            .find(|n| n.name == name)
            .expect("node exists");
        assert_eq!(
            node.status,
            NodeStatus::Failed,
            "{name}: the 50ms timeout applies"
        );
        assert_eq!(node.operation, Some("slow call"), "{name}");
        assert_eq!(
            node.attempts, 3,
            "{name}: two retries from the operation's defaults"
        );
        assert_eq!(
            node.failed_attempts
                .iter()
                .map(|e| &**e)
                .collect::<Vec<_>>(),
            ["timed out after 50ms", "timed out after 50ms"],
            "{name}"
        );
    }
    let overridden = report
        .nodes()
        .iter()
        .find(|n| n.name == "overridden")
        .expect("node exists");
    assert_eq!(
        overridden.status,
        NodeStatus::Completed,
        "the step's own timeout wins"
    );
    assert_eq!(overridden.attempts, 1);
    let error = outcome.result.expect_err("two nodes time out");
    assert!(
        matches!(error.error_of("in_block"), Some(NodeError::TimedOut(d)) if *d == Duration::from_millis(50))
    );
    assert_eq!(log.count("slow_call"), 7, "three attempts each, and one");
}

workflow! {
    /// A deadline over all attempts.
    Deadline(log: &Log) {
        Operation(flaky(log, "flaky", 100), retries = 100, backoff = "40ms", deadline = "100ms")
    }
}

#[tokio::test(start_paused = true)]
async fn deadline_bounds_all_attempts() {
    let log = Log::default();
    let start = Instant::now();
    let error = Deadline::run(&log).await.expect_err("the deadline passes");
    assert_eq!(start.elapsed(), Duration::from_millis(100));
    assert_eq!(log.count("flaky"), 3, "attempts at 0, 40 and 80 ms");
    assert!(
        matches!(error.failures()[0].error, NodeError::DeadlineExceeded(d) if d == Duration::from_millis(100))
    );
}

// --- Panics -------------------------------------------------------------------------------

async fn panics(log: &Log) -> Result<u32, Failure> {
    log.note("panics");
    panic!("the operation broke")
}

workflow! {
    /// A panic is contained in its node, and retried like any failure.
    Panicky(log: &Log) {
        Parallel {
            Operation(panics(log), retries = 1, backoff = "1ms"),
            fine = Operation(ok(log, "fine", 10)),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn panics_fail_their_node_only() {
    let log = Log::default();
    let outcome = Panicky::runner().execute(&log).await;
    assert_eq!(outcome.report.status("fine"), Some(NodeStatus::Completed));
    assert_eq!(log.count("panics"), 2);
    let error = outcome.result.expect_err("the panic fails the run");
    assert!(
        matches!(error.error_of("panics"), Some(NodeError::Panicked(m)) if m == "the operation broke")
    );
}

// --- Cancellation -------------------------------------------------------------------------

struct DropFlag<'a>(&'a Cell<u32>);
impl Drop for DropFlag<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}

async fn guarded(dropped: &Cell<u32>, ms: u64) -> Result<u32, Failure> {
    let _guard = DropFlag(dropped);
    sleep(Duration::from_millis(ms)).await;
    std::mem::forget(_guard);
    Ok(1)
}

workflow! {
    /// Two long operations, then a third.
    Long(dropped: &Cell<u32>) {
        Sequential {
            Parallel {
                Operation(guarded(dropped, 1_000)),
                Operation(guarded(dropped, 2_000)),
            },
            Operation(guarded(dropped, 10)),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn cancel_token_aborts_the_run() {
    let dropped = Cell::new(0);
    let token = CancelToken::new();
    let canceller = token.clone();
    let run = Long::runner().cancel_on(token).execute(&dropped);
    let cancel = async {
        sleep(Duration::from_millis(500)).await;
        canceller.cancel();
    };
    let (outcome, ()) = tokio::join!(run, cancel);
    assert_eq!(dropped.get(), 2, "both running operations were dropped");
    assert_eq!(outcome.report.count(NodeStatus::Aborted), 3);
    let error = outcome.result.expect_err("cancelled");
    assert!(error.is_cancelled());
    assert_eq!(error.cancel_reason(), Some(CancelReason::Token));
    assert!(
        error
            .failures()
            .iter()
            .all(|f| matches!(f.error, NodeError::Cancelled))
    );
}

#[tokio::test(start_paused = true)]
async fn run_deadline_aborts_the_run() {
    let dropped = Cell::new(0);
    let start = Instant::now();
    let outcome = Long::runner()
        .deadline(Duration::from_millis(1_500))
        .execute(&dropped)
        .await;
    assert_eq!(start.elapsed(), Duration::from_millis(1_500));
    assert_eq!(dropped.get(), 1, "the 2 s operation was dropped");
    assert_eq!(outcome.report.count(NodeStatus::Completed), 1);
    assert_eq!(outcome.report.count(NodeStatus::Aborted), 2);
    let error = outcome.result.expect_err("deadline passed");
    assert_eq!(
        error.cancel_reason(),
        Some(CancelReason::Deadline(Duration::from_millis(1_500)))
    );
    assert!(error.to_string().contains("deadline"));
}

#[tokio::test(start_paused = true)]
async fn dropping_the_run_drops_operations() {
    let dropped = Cell::new(0);
    let result = tokio::time::timeout(Duration::from_millis(100), Long::run(&dropped)).await;
    assert!(result.is_err(), "the run was still going");
    assert_eq!(dropped.get(), 2);
}

// --- Concurrency limits -------------------------------------------------------------------

#[derive(Default)]
struct Gauge {
    now: Cell<u32>,
    peak: Cell<u32>,
    done: Cell<u32>,
}

async fn gauged(gauge: &Gauge) -> Result<(), Failure> {
    gauge.now.set(gauge.now.get() + 1);
    gauge.peak.set(gauge.peak.get().max(gauge.now.get()));
    sleep(Duration::from_millis(1)).await;
    gauge.now.set(gauge.now.get() - 1);
    gauge.done.set(gauge.done.get() + 1);
    Ok(())
}

macro_rules! thousand {
    ($($name:ident)*) => {
        workflow! {
            /// A thousand operations, at most three at a time.
            Thousand(gauge: &Gauge) {
                Parallel(max_concurrency = 3) {
                    $( $name = Operation(gauged(gauge)), )*
                }
            }
        }
    };
}

// Names n000..n999 are spelled out by a build-free helper below.
include!("data/thousand_names.rs");

#[tokio::test(start_paused = true)]
async fn parallel_limit_holds_over_a_thousand_operations() {
    let gauge = Gauge::default();
    Thousand::run(&gauge)
        .await
        .expect("every operation succeeds");
    assert_eq!(gauge.peak.get(), 3);
    assert_eq!(gauge.done.get(), 1000);
    assert_eq!(Thousand::GRAPH.len(), 1000);
}

#[tokio::test(start_paused = true)]
async fn run_wide_limit_holds() {
    let gauge = Gauge::default();
    let limit = std::num::NonZeroUsize::new(2).expect("non-zero");
    let outcome = Thousand::runner()
        .max_concurrency(limit)
        .execute(&gauge)
        .await;
    outcome.result.expect("every operation succeeds");
    assert_eq!(gauge.peak.get(), 2);
    assert_eq!(gauge.done.get(), 1000);
}

#[test]
fn backoff_delays() {
    let exp = Backoff::Exponential {
        base_ms: 100,
        max_ms: 1_000,
    };
    let delays: Vec<u128> = (1..=6).map(|r| exp.delay(r).as_millis()).collect();
    assert_eq!(delays, [100, 200, 400, 800, 1_000, 1_000]);
    assert_eq!(
        exp.delay(200).as_millis(),
        1_000,
        "no overflow on huge retry counts"
    );
    assert_eq!(Backoff::Fixed { ms: 30 }.delay(9).as_millis(), 30);
}

workflow! {
    /// A timeout outside any tokio runtime.
    NoRuntime() -> u32 {
        Sequential { value = Operation(async { Ok::<u32, Failure>(7) }, timeout = "1s") }
        => value
    }
}

#[test]
fn timers_without_a_tokio_runtime_fail_the_node_not_the_process() {
    let outcome = futures::executor::block_on(NoRuntime::runner().execute(()));
    let error = outcome.result.expect_err("no timer can be made");
    let message = error
        .error_of("value")
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(
        message.contains("need a tokio runtime with time enabled"),
        "{message}"
    );
}

workflow! {
    /// A retried node beside a skipped branch.
    RetriedBranch(log: &Log) {
        Sequential {
            value = Operation(flaky(log, "flaky", 2), retries = 1, backoff = "1ms"),
            Conditional(value.is_err()) { never = Operation(ok(log, "never", 1)) },
        }
    }
}

#[tokio::test(start_paused = true)]
async fn attempts_are_exact_for_every_status() {
    let log = Log::default();
    let outcome = RetriedBranch::runner().execute(&log).await;
    let attempts = |name: &str| outcome.report.node(name).map(|n| n.attempts);
    assert_eq!(attempts("value"), Some(2));
    assert_eq!(attempts("never"), Some(0), "a skipped node made no attempt");
    assert_eq!(
        outcome.report.attempts(),
        2 + 1,
        "two attempts and one decision"
    );

    // Fail-fast stops `slow` during its first attempt: one attempt, aborted.
    let log = Log::default();
    let outcome = Racing::runner()
        .failure_policy(FailurePolicy::FailFast)
        .execute(&log)
        .await;
    let slow = outcome.report.node("slow").expect("slow exists");
    assert_eq!((slow.status, slow.attempts), (NodeStatus::Aborted, 1));
    let next = outcome.report.node("next").expect("next exists");
    assert_eq!((next.status, next.attempts), (NodeStatus::Aborted, 0));
}
