//! The reference for durable nests is the live run: for workflows drawn from a seed (a
//! `ForEach` whose instances fail or not, collected; a `Loop` of a drawn length), the replay of
//! a finished run's journal, and a run stopped at any of its commits and resumed, give the
//! live run's result, each step's status and attempts, and each nest's counts and failures.

use std::sync::atomic::Ordering;

use flowdag::durable::resume;
#[path = "common/faulty.rs"]
mod faulty;

use faulty::Faulty;
use flowdag::{Outcome, Report};
use proptest::prelude::*;

#[derive(Debug)]
struct Refused(u64);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "item {} refused", self.0)
    }
}

impl std::error::Error for Refused {}

/// How many items the seed's `ForEach` has (1 to 6).
fn items(seed: u64) -> u64 {
    1 + seed % 6
}

/// Item `i` of the seed fails.
async fn work(seed: u64, i: u64) -> Result<u64, Refused> {
    tokio::task::yield_now().await;
    match (seed >> (8 + i)) & 1 == 1 {
        true => Err(Refused(i)),
        false => Ok(i * 10),
    }
}

/// One more round.
async fn tick(last: Option<&u32>) -> Result<u32, Refused> {
    tokio::task::yield_now().await;
    Ok(last.copied().unwrap_or(0) + 1)
}

mod flows {
    use super::*;
    use flowdag::prelude::*;

    workflow! {
        #[flow(durable)]
        pub Nested(seed: u64) -> (Vec<String>, u32) {
            Sequential {
                done = ForEach(i in 0..items(seed), max_concurrency = 3, on_failure = collect) {
                    x = Operation(work(seed, i))
                    => x
                },
                rounds = Loop(max = 8, prev = last) {
                    y = Operation(tick(last))
                    => y
                } until (u64::from(y) >= 1 + (seed >> 16) % 5),
            }
            => (
                done.iter()
                    .map(|r| match r {
                        Ok(x) => x.to_string(),
                        Err(e) => e.to_string(),
                    })
                    .collect(),
                rounds,
            )
        }
    }
}

/// What a run's outcome is compared by: its result, each step's status and attempts, each
/// nest's counts and failures.
#[derive(Debug, PartialEq)]
struct Seen {
    result: Result<(Vec<String>, u32), String>,
    steps: Vec<(String, String, u32)>,
    nests: Vec<Nest>,
}

/// A nest's summary as compared: its node, started, completed and failed instances, and the
/// failures by index.
type Nest = (String, u64, u64, u64, Vec<(u64, String)>);

fn seen(outcome: Outcome<(Vec<String>, u32)>) -> Seen {
    let report: &Report = &outcome.report;
    Seen {
        steps: report
            .nodes()
            .iter()
            .map(|n| (n.name.to_owned(), format!("{:?}", n.status), n.attempts))
            .collect(),
        nests: report
            .nests()
            .iter()
            .map(|n| {
                (n.node.to_owned(), n.started, n.completed, n.failed, {
                    // In the order of their indices (live, in the order they ended).
                    let mut failures: Vec<(u64, String)> = n
                        .failures
                        .iter()
                        .map(|(i, e)| (*i, e.to_string()))
                        .collect();
                    failures.sort();
                    failures
                })
            })
            .collect(),
        result: outcome.result.map_err(|e| e.to_string()),
    }
}

/// The live run of `seed`, its replay, and the run stopped at commit `stop % commits` and
/// resumed.
async fn case(seed: u64, stop: usize) -> (Seen, Seen, Seen) {
    let live_store = Faulty::new();
    let live = flows::Nested::runner()
        .durable(&live_store, "r")
        .execute(seed)
        .await
        .expect("the live run ends");
    let commits = live_store.commits.load(Ordering::SeqCst).max(1);
    let replayed = resume::<flows::Nested, _>(&live_store, "r")
        .await
        .expect("the finished run replays");
    let stopped_store = Faulty::new().failing(move |n, _| n == stop % commits);
    let stopped = flows::Nested::runner()
        .durable(&stopped_store, "r")
        .execute(seed)
        .await;
    let resumed = match stopped {
        Ok(outcome) => outcome,
        Err(_) => resume::<flows::Nested, _>(&stopped_store, "r")
            .await
            .expect("the stopped run resumes"),
    };
    (seen(live), seen(replayed), seen(resumed))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn replay_and_resume_give_the_live_runs_statuses_and_outputs(
        seed in any::<u64>(),
        stop in 0usize..64,
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime");
        let (live, replayed, resumed) = runtime.block_on(case(seed, stop));
        prop_assert_eq!(&replayed, &live, "the replay of the finished run");
        prop_assert_eq!(&resumed, &live, "the run stopped at a commit and resumed");
    }
}

/// The seeds cover instances that fail and loops of more than one round.
#[test]
fn the_cases_fail_instances_and_loop() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let seed = 0b1_0000_0101 << 8 | 5;
    let (live, ..) = runtime.block_on(case(seed, 3));
    let (items, rounds) = live
        .result
        .clone()
        .expect("the run succeeds, failures collected");
    assert!(items.iter().any(|i| i.contains("failed")), "{live:?}");
    assert!(rounds > 1, "{live:?}");
    assert!(
        live.nests.iter().any(|n| n.3 > 0),
        "a nest counts failures: {live:?}"
    );
}
