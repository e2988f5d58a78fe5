//! A durable `ForEach` with `min` and `rest = run`: the node completes with the first `min`
//! outputs while its other instances run on, with keys of their own and their ends journaled;
//! the run ends after them. A run stopped while they run is resumed with the node's stored
//! output: the instances whose end was stored do not run again, the one in flight runs again
//! with its key, and nothing after the node runs again.

use std::sync::Mutex;
use std::time::Duration;

use flowdag::durable::resume;
use flowdag::prelude::*;
use flowdag::store::{MemoryStore, RunFilter, RunStatus, Store};

#[path = "common/faulty.rs"]
mod faulty;

use faulty::Faulty;

#[derive(Debug)]
struct Never;

impl std::fmt::Display for Never {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("never")
    }
}

impl std::error::Error for Never {}

/// Every key a step ran under, in order.
static KEYS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The run whose item 3 never ends (its process is stopped there).
static HANG: Mutex<Option<String>> = Mutex::new(None);

fn note(what: &str) -> Option<String> {
    let attempt = flowdag::attempt()?;
    let key = attempt.key();
    KEYS.lock()
        .expect("not poisoned")
        .push(format!("{what} {key}"));
    Some(attempt.run().to_owned())
}

/// Items 0 and 1 answer at once, the others after 30 ms.
async fn quote(item: u32) -> Result<u32, Never> {
    let run = note("quote");
    if item >= 2 {
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let hangs = item == 3 && run.is_some() && *HANG.lock().expect("not poisoned") == run;
    if hangs {
        std::future::pending::<()>().await;
    }
    note("quoted");
    Ok(item * 100)
}

async fn pick(quotes: &[u32]) -> Result<u32, Never> {
    note("pick");
    Ok(quotes.iter().copied().min().unwrap_or(0))
}

workflow! {
    /// Asks for four quotes and picks from the first two to answer; the others are still
    /// asked for (their answers are journaled).
    #[flow(durable)]
    pub Quotes(n: u32) -> u32 {
        Sequential {
            first = ForEach(i in 0..n, min = 2, rest = run) {
                quoted = Operation(quote(i))
                => quoted
            },
            picked = Operation(pick(&first)),
        }
        => picked
    }
}

/// What ran under run `run`'s keys, in order: `"quote q-1/first[0]/quoted/1"`.
fn ran(run: &str) -> Vec<String> {
    let prefix = format!(" {run}/");
    KEYS.lock()
        .expect("not poisoned")
        .iter()
        .filter(|line| line.contains(&prefix))
        .cloned()
        .collect()
}

/// The instances whose end is stored for run `run`.
async fn stored_ends(store: &dyn Store, run: &str) -> Vec<String> {
    let data = store.run_data(run).await.expect("the run's data");
    let mut ends: Vec<String> = data
        .outputs
        .into_iter()
        .map(|o| o.instance)
        .filter(|i| !i.is_empty())
        .collect();
    ends.sort();
    ends
}

async fn status(store: &dyn Store, run: &str) -> Option<RunStatus> {
    let filter = RunFilter {
        id: Some(run.to_owned()),
        ..RunFilter::default()
    };
    store
        .list_runs(&filter)
        .await
        .expect("lists")
        .first()
        .map(|r| r.status)
}

#[tokio::test]
async fn the_rest_runs_on_with_keys_and_journaled_ends() {
    let store = MemoryStore::new();
    let outcome = Quotes::runner()
        .durable(&store, "q-1")
        .execute(4)
        .await
        .expect("runs");
    assert_eq!(outcome.result.expect("succeeds"), 0);
    let ran = ran("q-1");
    let position = |line: &str| ran.iter().position(|l| l == line);
    let picked = position("pick q-1/picked/1").expect("`pick` ran");
    for item in 0..4 {
        let key = format!("q-1/first[{item}]/quoted/1");
        assert!(
            position(&format!("quote {key}")).is_some(),
            "item {item} ran under its own key: {ran:?}"
        );
    }
    let late = position("quoted q-1/first[3]/quoted/1").expect("item 3 ended");
    assert!(
        picked < late,
        "the node completed with the first two, before the rest ended: {ran:?}"
    );
    assert_eq!(
        stored_ends(&store, "q-1").await,
        ["first[0]", "first[1]", "first[2]", "first[3]"],
        "every instance's end is journaled, the rest's too"
    );
    assert_eq!(status(&store, "q-1").await, Some(RunStatus::Succeeded));
}

#[tokio::test]
async fn a_run_stopped_while_the_rest_runs_resumes_only_the_rest_in_flight() {
    let store = Faulty::new().leases(|_| Duration::from_millis(100));
    *HANG.lock().expect("not poisoned") = Some("q-2".to_owned());
    let stopped = tokio::time::timeout(
        Duration::from_millis(300),
        Quotes::runner().durable(&store, "q-2").execute(4),
    )
    .await;
    assert!(stopped.is_err(), "the run waits for item 3");
    assert!(
        ran("q-2").contains(&"pick q-2/picked/1".to_owned()),
        "the node had completed: {:?}",
        ran("q-2")
    );
    assert_eq!(
        stored_ends(&store, "q-2").await,
        ["first[0]", "first[1]", "first[2]"],
        "item 3's end is not stored"
    );
    *HANG.lock().expect("not poisoned") = None;
    tokio::time::sleep(Duration::from_millis(150)).await;
    let outcome = tokio::time::timeout(Duration::from_secs(10), resume::<Quotes, _>(&store, "q-2"))
        .await
        .expect("ends")
        .expect("resumes");
    assert_eq!(outcome.result.expect("succeeds"), 0);
    let ran = ran("q-2");
    let count = |line: &str| ran.iter().filter(|l| *l == line).count();
    for item in 0..3 {
        assert_eq!(
            count(&format!("quote q-2/first[{item}]/quoted/1")),
            1,
            "item {item}'s end was stored: it does not run again: {ran:?}"
        );
    }
    assert_eq!(
        count("quote q-2/first[3]/quoted/1"),
        2,
        "item 3 runs again with its key: {ran:?}"
    );
    assert_eq!(count("pick q-2/picked/1"), 1, "`pick` does not run again");
    assert_eq!(
        stored_ends(&store, "q-2").await,
        ["first[0]", "first[1]", "first[2]", "first[3]"]
    );
    assert_eq!(status(&store, "q-2").await, Some(RunStatus::Succeeded));
}
