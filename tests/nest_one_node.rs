//! A `ForEach` or `Loop` whose body is one `Operation` runs each instance without a nested
//! scheduler when nothing observes it (`flow-runtime/src/one.rs`). These tests hold that the
//! short path is taken, and that it ends every instance as a whole nested run does: the same
//! outputs and errors (compared with the same workflow run with an observer, which takes the
//! whole path), panics caught, `#[operation]` defaults applied, live instances dropped with
//! the run.

mod common;

use std::collections::HashMap;
use std::future::Future;
use std::pin::pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Waker};
use std::time::Duration;

use flowdag::prelude::*;
use flowdag::{Event, NodeError};

use common::Boom;

/// How many runs on this thread went without the scheduler (debug builds; `None` in release,
/// where the counter does not exist).
fn fast_runs() -> Option<u64> {
    #[cfg(debug_assertions)]
    return Some(flowdag::__private::fast_runs());
    #[cfg(not(debug_assertions))]
    None
}

/// Asserts that `runs` runs went without the scheduler since `before` (debug builds).
fn assert_fast(before: Option<u64>, runs: u64) {
    if let (Some(before), Some(now)) = (before, fast_runs()) {
        assert_eq!(now - before, runs, "runs without the scheduler");
    }
}

/// An observer that does nothing: attached, it makes every instance a whole nested run.
fn watched(_: &Event) {}

/// Ok for most items; a failure for items `≡ 1 (mod 5)`, a panic for items `≡ 3 (mod 5)`.
async fn check(n: u32) -> Result<u32, Boom> {
    tokio::task::yield_now().await;
    match n % 5 {
        1 => Err(Boom("odd one")),
        3 => panic!("item {n} panicked"),
        _ => Ok(n * 10),
    }
}

/// An instance's result as text: its output, or its error's message and `Debug` text (an
/// error that cannot be cloned, compared as text).
type Text = Result<u32, (String, String)>;

fn text(result: &Result<u32, WorkflowError>) -> Text {
    match result {
        Ok(value) => Ok(*value),
        Err(error) => Err((error.to_string(), format!("{error:?}"))),
    }
}

workflow! {
    /// A one-node body whose failures and panics are collected.
    Collected(count: u32) -> Vec<Text> {
        checked = ForEach(n in 0..count, on_failure = collect, max_concurrency = 4) {
            c = Operation(check(n)) => c
        }
        => checked.iter().map(text).collect()
    }
}

#[tokio::test]
async fn failures_and_panics_under_collect_are_those_of_a_whole_nested_run() {
    let before = fast_runs();
    let short = Collected::run(10)
        .await
        .expect("collect never fails the node");
    assert_fast(before, 10);
    let before = fast_runs();
    let outcome = Collected::runner().observer(watched).execute(10).await;
    assert_fast(before, 0);
    let whole = outcome.result.expect("collect never fails the node");
    assert_eq!(short, whole);
    // The failures are what they should be: the error and the panic, each with its instance.
    let failed: Vec<&(String, String)> = short.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(failed.len(), 4, "{failed:?}");
    for ((message, _), item) in failed.iter().zip([1, 3, 6, 8]) {
        assert!(message.contains(&format!("checked[{item}]")), "{message}");
    }
    assert!(failed[0].1.contains("odd one"), "{}", failed[0].1);
    assert!(
        failed[1].1.contains("Panicked(\"item 3 panicked\")"),
        "{}",
        failed[1].1
    );
    assert_eq!(short[0].as_ref().ok(), Some(&0));
    assert_eq!(short[9].as_ref().ok(), Some(&90));
    // The run's report counts them as the nested runs did.
    let nest = &outcome.report.nests()[0];
    assert_eq!((nest.completed, nest.failed), (6, 4));
}

workflow! {
    /// A one-node body whose first failure fails the `ForEach`.
    FailFast(count: u32) -> Vec<u32> {
        checked = ForEach(n in 0..count, max_concurrency = 2) {
            c = Operation(check(n)) => c
        }
        => checked.clone()
    }
}

#[tokio::test]
async fn a_failed_instance_fails_the_foreach_as_a_whole_nested_run_does() {
    let before = fast_runs();
    let short = FailFast::run(8).await.expect_err("item 1 fails");
    assert!(fast_runs().is_none_or(|now| now > before.unwrap_or(0)));
    let whole = FailFast::runner()
        .observer(watched)
        .execute(8)
        .await
        .result
        .expect_err("item 1 fails");
    assert_eq!(format!("{short:?}"), format!("{whole:?}"));
    let inner = short.failed().next().expect("the ForEach failed");
    let NodeError::Workflow(instance) = &inner.error else {
        panic!("{:?}", inner.error)
    };
    assert_eq!(
        instance.path().map(ToString::to_string).as_deref(),
        Some("checked[1]")
    );
}

/// Counts the futures alive.
#[derive(Default)]
struct Live {
    started: AtomicUsize,
    alive: AtomicUsize,
}

/// Decrements [`Live::alive`] when dropped.
struct Guard<'a>(&'a Live);

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        self.0.alive.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Never ends; counted alive until dropped.
async fn forever(n: u64, live: &Live) -> Result<u64, Boom> {
    live.started.fetch_add(1, Ordering::SeqCst);
    live.alive.fetch_add(1, Ordering::SeqCst);
    let _guard = Guard(live);
    std::future::pending::<()>().await;
    Ok(n)
}

workflow! {
    /// Instances that never end.
    Forever(live: &Live) -> Vec<u64> {
        all = ForEach(n in 0..100u64, max_concurrency = 8) {
            f = Operation(forever(n, live)) => f
        }
        => all.clone()
    }
}

#[test]
fn dropping_the_run_drops_the_live_instances() {
    let live = Live::default();
    let before = fast_runs();
    {
        let mut run = pin!(Forever::run(&live));
        let mut cx = Context::from_waker(Waker::noop());
        assert!(run.as_mut().poll(&mut cx).is_pending());
        assert!(run.as_mut().poll(&mut cx).is_pending());
        assert_eq!(live.started.load(Ordering::SeqCst), 8);
        assert_eq!(live.alive.load(Ordering::SeqCst), 8);
    }
    assert_fast(before, 8);
    assert_eq!(live.alive.load(Ordering::SeqCst), 0, "dropped with the run");
}

/// Attempts per item.
#[derive(Default)]
struct Tries(Mutex<HashMap<u32, u32>>);

impl Tries {
    /// Counts an attempt of `n`; returns which it is (1 for the first).
    fn bump(&self, n: u32) -> u32 {
        let mut tries = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let count = tries.entry(n).or_default();
        *count += 1;
        *count
    }

    fn of(&self, n: u32) -> u32 {
        let tries = self.0.lock().unwrap_or_else(|p| p.into_inner());
        tries.get(&n).copied().unwrap_or(0)
    }
}

/// Fails its first two attempts of each item.
#[operation(retries = 2, backoff = "1ms")]
async fn flaky(n: u32, tries: &Tries) -> Result<u32, Boom> {
    tokio::task::yield_now().await;
    match tries.bump(n) {
        1 | 2 => Err(Boom("not yet")),
        _ => Ok(n + 100),
    }
}

/// Panics on its first attempt of each item.
#[operation(retries = 1, backoff = "1ms")]
async fn shaky(n: u32, tries: &Tries) -> Result<u32, Boom> {
    if tries.bump(n) == 1 {
        panic!("first attempt of {n}");
    }
    Ok(n + 200)
}

/// Its item, after a turn of the runtime: a step that awaits it first (`Deferred`).
async fn later(n: u32) -> u32 {
    tokio::task::yield_now().await;
    n
}

workflow! {
    /// Operations whose `#[operation]` defaults retry them.
    Defaults(tries: &Tries, panics: &Tries, deferred: &Tries) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
        Sequential {
            retried = ForEach(n in 0..4u32) { r = Operation(flaky(n, tries)) => r },
            caught = ForEach(n in 0..4u32) { r = Operation(shaky(n, panics)) => r },
            awaited = ForEach(n in 0..4u32) {
                r = Operation(flaky(later(n).await, deferred)) => r
            },
        }
        => (retried.clone(), caught.clone(), awaited.clone())
    }
}

#[tokio::test(start_paused = true)]
async fn operation_defaults_heard_on_the_first_poll_still_apply() {
    let (tries, panics, deferred) = (Tries::default(), Tries::default(), Tries::default());
    let (retried, caught, awaited) = Defaults::run(&tries, &panics, &deferred)
        .await
        .expect("every item succeeds on a retry");
    assert_eq!(retried, vec![100, 101, 102, 103]);
    assert_eq!(caught, vec![200, 201, 202, 203]);
    assert_eq!(awaited, vec![100, 101, 102, 103]);
    for n in 0..4 {
        assert_eq!(tries.of(n), 3, "item {n}: retried twice");
        assert_eq!(panics.of(n), 2, "item {n}: retried after its panic");
        assert_eq!(deferred.of(n), 3, "item {n}: retried twice after its await");
    }
}

/// Slower than its default timeout allows.
#[operation(name = "slow call", timeout = "20ms")]
async fn slow(n: u32) -> Result<u32, Boom> {
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(n)
}

/// Named, with no policy: changes nothing in a run nothing observes.
#[operation(name = "named call")]
async fn named(n: u32) -> Result<u32, Boom> {
    tokio::task::yield_now().await;
    Ok(n + 1)
}

workflow! {
    /// A default timeout, and an operation default with no policy.
    Timed() -> (Vec<Text>, Vec<u32>) {
        Sequential {
            timed = ForEach(n in 0..3u32, on_failure = collect) {
                s = Operation(slow(n)) => s
            },
            plain = ForEach(n in 0..3u32) { p = Operation(named(n)) => p },
        }
        => (timed.iter().map(text).collect(), plain.clone())
    }
}

#[tokio::test(start_paused = true)]
async fn a_default_timeout_applies_and_a_default_name_alone_keeps_the_short_path() {
    let before = fast_runs();
    let (timed, plain) = Timed::run().await.expect("collect");
    // Every instance of both started without the scheduler; the timed ones were handed over.
    assert_fast(before, 6);
    assert_eq!(plain, vec![1, 2, 3]);
    let whole = Timed::runner()
        .observer(watched)
        .execute(())
        .await
        .result
        .expect("collect");
    assert_eq!(timed, whole.0);
    for result in &timed {
        let (_, debug) = result.as_ref().expect_err("timed out");
        assert!(debug.contains("TimedOut(20ms)"), "{debug}");
    }
}

workflow! {
    /// A `Loop` whose body is one operation.
    Counting() -> u32 {
        total = Loop(max = 10, prev = last) {
            c = Operation(named(last.copied().unwrap_or(0))) => c
        } until (c >= 5)
        => total
    }
}

#[tokio::test]
async fn a_loop_of_one_operation_takes_the_short_path_too() {
    let before = fast_runs();
    assert_eq!(Counting::run().await.expect("counts"), 5);
    assert_fast(before, 5);
}

workflow! {
    /// A one-node body with a step option: the whole path.
    StepOption() -> Vec<u32> {
        all = ForEach(n in 0..3u32) { p = Operation(named(n), timeout = "1s") => p }
        => all.clone()
    }
}

#[tokio::test]
async fn a_step_with_options_takes_the_whole_path() {
    let before = fast_runs();
    assert_eq!(StepOption::run().await.expect("runs"), vec![1, 2, 3]);
    assert_fast(before, 0);
}
