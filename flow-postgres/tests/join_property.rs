//! A property of the store alone (no workflow): a join fires exactly once however the claims,
//! completions and decisions of its predecessors interleave.
//!
//! Each case makes a run whose 2–6 predecessor nodes are open tasks, and a join after them.
//! As many executors as predecessors, each on its own store (its own connections), claim tasks
//! and complete them after a random delay (some claims are abandoned, as by a worker that died,
//! and lapse to another executor); 2–4 deciders, each on its own store, loop `load_run`, and once
//! every predecessor is done and the join not requested, commit one batch with the predecessors'
//! `Completed`, a `TaskChange::Close` for each, the join's `Requested` and its
//! `TaskChange::Open`, after a random delay that may outlast their lease (another decider then
//! takes the run: the late commit is refused). Then the journal has one `Requested` of the join
//! and one `Completed` per predecessor, the join's task is the run's only one, and a completion
//! sent again with a stale claim is `Stale` and writes nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use flowdag_postgres::{PostgresOptions, PostgresStore, testing};
use flowdag_store::{
    Batch, Committed, Created, NewRun, Owner, RunFilter, Store, StoreError, StoredEvent,
    StoredOutput, TaskChange, TaskClaim, TaskCommitted, TaskOutcome, WorkflowVersion,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// How many cases run.
const CASES: u32 = 40;

/// The most predecessors, and deciders, of a case: one store each.
const MAX_PREDS: usize = 6;
const MAX_DECIDERS: usize = 4;

/// How long one case may take.
const CASE_LIMIT: Duration = Duration::from_secs(30);

/// The lease of a task claim: an abandoned claim lapses quickly.
const CLAIM: Duration = Duration::from_millis(150);

/// Join batches refused (another decider took the run, or committed first), in all cases.
static REFUSED: AtomicU32 = AtomicU32::new(0);

/// Claims taken over after they lapsed, in all cases.
static LAPSED: AtomicU32 = AtomicU32::new(0);

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }

    fn millis(&mut self, below: u64) -> Duration {
        Duration::from_millis(self.below(below))
    }
}

fn event(seq: u64, kind: &str, node: u32) -> StoredEvent {
    let mut event = StoredEvent::new(seq, kind);
    event.node = Some(node);
    event.node_name = Some(format!("n{node}"));
    event.attempt = 1;
    event
}

fn fail(why: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(why.to_string())
}

/// Whether a refused request is one a racer meets and tries again after.
fn lost_race(error: &StoreError) -> bool {
    matches!(
        error,
        StoreError::LeaseLost { .. } | StoreError::Conflict { .. } | StoreError::Busy { .. }
    ) || error.is_retryable()
}

/// One executor: claims tasks of the case's workflow and completes them, until every
/// predecessor is completed. Returns the claims it completed (`Applied`) and abandoned.
async fn execute(
    store: PostgresStore,
    owner: Owner,
    workflow: String,
    preds: u32,
    completed: Arc<AtomicU32>,
    seed: u64,
) -> Result<Vec<TaskClaim>, StoreError> {
    let mut rng = Rng::new(seed);
    let mut kept = Vec::new();
    // Every run of this test is created with graph 1 (`NewRun::new(.., 1, ..)`).
    let workflows = [WorkflowVersion::new(workflow, 1)];
    let give_up = Instant::now() + CASE_LIMIT;
    while completed.load(Ordering::SeqCst) < preds && Instant::now() < give_up {
        let claims = match store.claim_tasks(&owner, &workflows, 1, CLAIM).await {
            Ok(claims) => claims,
            Err(e) if e.is_retryable() => Vec::new(),
            Err(e) => return Err(e),
        };
        let Some(claim) = claims.into_iter().next() else {
            tokio::time::sleep(Duration::from_millis(2)).await;
            continue;
        };
        if claim.lapsed {
            LAPSED.fetch_add(1, Ordering::SeqCst);
        }
        if claim.node >= preds {
            // The join's task, opened once every predecessor completed: not ours to run.
            break;
        }
        tokio::time::sleep(rng.millis(20)).await;
        if rng.below(5) == 0 {
            // Abandoned, as by a worker that died: it lapses and another executor takes it.
            kept.push(claim);
            continue;
        }
        let outcome = TaskOutcome::Completed {
            type_name: "u32".to_owned(),
            bytes: claim.node.to_string().into_bytes(),
        };
        match store.complete_task(&claim, outcome).await? {
            TaskCommitted::Applied => {
                completed.fetch_add(1, Ordering::SeqCst);
            }
            // It lapsed while we waited, and another executor has it.
            TaskCommitted::Stale => {}
        }
        kept.push(claim);
    }
    Ok(kept)
}

/// One decider: commits the join's batch once every predecessor is done. `true` when its
/// commit was the one applied.
async fn decide(
    store: PostgresStore,
    owner: Owner,
    run: String,
    preds: u32,
    seed: u64,
) -> Result<bool, StoreError> {
    let mut rng = Rng::new(seed);
    let join = preds;
    let give_up = Instant::now() + CASE_LIMIT;
    while Instant::now() < give_up {
        let lease = Duration::from_millis(30 + rng.below(90));
        let loaded = match store.load_run(&run, &owner, lease).await {
            Ok(loaded) => loaded,
            Err(e) if lost_race(&e) => {
                tokio::time::sleep(rng.millis(5)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let requested = loaded
            .events
            .iter()
            .any(|e| e.kind == "Requested" && e.node == Some(join));
        let mut done: Vec<_> = loaded.tasks.iter().filter(|t| t.node < preds).collect();
        if requested || done.len() < preds as usize {
            let _ = store
                .release(&owner, std::slice::from_ref(&loaded.lease))
                .await;
            if requested {
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
            continue;
        }
        done.sort_by_key(|t| t.node);
        let mut batch = Batch::new(&loaded.lease, loaded.run.next_seq, lease);
        let mut seq = loaded.run.next_seq;
        for task in &done {
            batch.events.push(event(seq, "Completed", task.node));
            batch.tasks.push(TaskChange::Close {
                node: task.node,
                instance: String::new(),
            });
            // As the scheduler does: the journaled completion makes the output the node's.
            if let TaskOutcome::Completed { type_name, bytes } = &task.outcome {
                batch.outputs.push(StoredOutput {
                    node: task.node,
                    instance: String::new(),
                    type_name: type_name.clone(),
                    bytes: bytes.clone(),
                });
            }
            seq += 1;
        }
        batch.events.push(event(seq, "Requested", join));
        batch.tasks.push(TaskChange::Open {
            node: join,
            instance: String::new(),
            attempt: 1,
        });
        // Up to one and a half leases: another decider may take the run meanwhile.
        tokio::time::sleep(rng.millis(lease.as_millis() as u64 * 3 / 2)).await;
        match store.commit(batch).await {
            Ok(Committed::Applied { .. }) => return Ok(true),
            Ok(Committed::AlreadyApplied { .. }) => return Ok(false),
            Err(e) if lost_race(&e) => {
                REFUSED.fetch_add(1, Ordering::SeqCst);
                continue;
            }
            Err(e) => return Err(e),
        }
    }
    Err(StoreError::Invalid {
        why: format!("decider `{owner}` gave up after {CASE_LIMIT:?}"),
    })
}

/// The run's task rows and outputs, and its wake-up time, as the database has them.
async fn snapshot(
    client: &tokio_postgres::Client,
    schema: &str,
    run: &str,
) -> (Vec<(i64, i64, String)>, Vec<(i64, Vec<u8>)>, Option<i64>) {
    let tasks = client
        .query(
            &format!(
                "SELECT node, attempt, status FROM {schema}.tasks WHERE run = $1 ORDER BY node"
            ),
            &[&run],
        )
        .await
        .expect("reads the tasks")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let outputs = client
        .query(
            &format!("SELECT node, bytes FROM {schema}.outputs WHERE run = $1 ORDER BY node"),
            &[&run],
        )
        .await
        .expect("reads the outputs")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let wake = client
        .query_one(
            &format!("SELECT wake_at FROM {schema}.runs WHERE id = $1"),
            &[&run],
        )
        .await
        .expect("reads the run")
        .get(0);
    (tasks, outputs, wake)
}

/// One case: `preds` predecessors, `deciders` deciders, delays from `seed`.
async fn case(
    stores: &[PostgresStore],
    client: &tokio_postgres::Client,
    schema: &str,
    n: u32,
    preds: u32,
    deciders: usize,
    seed: u64,
) -> Result<(), TestCaseError> {
    let run = format!("join-{n}");
    let workflow = format!("J{n}");
    let join = preds;
    let creator = Owner::new("creator");
    let lease = Duration::from_secs(60);
    let created = stores[0]
        .create_run(NewRun::new(&*run, &*workflow, 1, creator.clone(), lease))
        .await
        .map_err(fail)?;
    let Created::New { lease: held, .. } = created else {
        return Err(fail(format!("run {run} existed")));
    };
    let mut batch = Batch::new(&held, 0, lease);
    batch.events.push(StoredEvent::new(0, "RunStarted"));
    for node in 0..preds {
        batch
            .events
            .push(event(1 + u64::from(node), "Requested", node));
        batch.tasks.push(TaskChange::Open {
            node,
            instance: String::new(),
            attempt: 1,
        });
    }
    stores[0].commit(batch).await.map_err(fail)?;
    stores[0]
        .release(&creator, std::slice::from_ref(&held))
        .await
        .map_err(fail)?;

    let completed = Arc::new(AtomicU32::new(0));
    let mut executors = Vec::new();
    for i in 0..preds as usize {
        executors.push(tokio::spawn(execute(
            stores[1 + i].clone(),
            Owner::new(format!("executor-{i}")),
            workflow.clone(),
            preds,
            Arc::clone(&completed),
            seed.wrapping_add(i as u64 * 7919),
        )));
    }
    let mut racers = Vec::new();
    for j in 0..deciders {
        racers.push(tokio::spawn(decide(
            stores[1 + MAX_PREDS + j].clone(),
            Owner::new(format!("decider-{j}")),
            run.clone(),
            preds,
            seed.wrapping_add(104_729 + j as u64 * 31),
        )));
    }
    let mut claims = Vec::new();
    for executor in executors {
        claims.extend(executor.await.map_err(fail)?.map_err(fail)?);
    }
    let mut winners = 0;
    for racer in racers {
        winners += u32::from(racer.await.map_err(fail)?.map_err(fail)?);
    }
    prop_assert_eq!(winners, 1, "one decider's join batch was applied");

    let journal = stores[0].events(&run, 0).await.map_err(fail)?;
    let count = |kind: &str, node: u32| {
        journal
            .iter()
            .filter(|e| e.kind == kind && e.node == Some(node))
            .count()
    };
    prop_assert_eq!(
        count("Requested", join),
        1,
        "the join fired once: {:?}",
        journal
    );
    for node in 0..preds {
        prop_assert_eq!(count("Completed", node), 1, "node {} completed once", node);
    }
    let (tasks, outputs, wake) = snapshot(client, schema, &run).await;
    prop_assert_eq!(tasks.len(), 1, "only the join's task is left: {:?}", tasks);
    prop_assert_eq!(
        (tasks[0].0, tasks[0].1),
        (i64::from(join), 1),
        "the join's task"
    );
    prop_assert_eq!(outputs.len(), preds as usize, "one output per predecessor");

    // Every claim an executor held, sent again: stale, nothing written.
    prop_assert!(!claims.is_empty());
    for claim in &claims {
        let again = TaskOutcome::Completed {
            type_name: "u32".to_owned(),
            bytes: b"999".to_vec(),
        };
        let answer = stores[0].complete_task(claim, again).await.map_err(fail)?;
        prop_assert_eq!(answer, TaskCommitted::Stale, "{:?}", claim);
    }
    prop_assert_eq!(
        snapshot(client, schema, &run).await,
        (tasks, outputs, wake),
        "a stale completion writes nothing"
    );
    Ok(())
}

#[test]
fn a_join_fires_once_whatever_the_claims_completions_and_deciders_do() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let url = testing::server();
    let schema = testing::fresh_schema("join");
    let stores: Vec<PostgresStore> = (0..1 + MAX_PREDS + MAX_DECIDERS)
        .map(|_| {
            let options = PostgresOptions {
                schema: schema.clone(),
                pool_size: 2,
                ..PostgresOptions::default()
            };
            PostgresStore::connect_with(&url, options).expect("the test server's URL")
        })
        .collect();
    let client = runtime.block_on(async {
        stores[0]
            .list_runs(&RunFilter::default())
            .await
            .expect("the schema is created");
        testing::client().await
    });
    let started = Instant::now();
    let next = AtomicU32::new(0);
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        max_shrink_iters: 16,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (2u32..=MAX_PREDS as u32, 2usize..=MAX_DECIDERS, any::<u64>());
    let result = runner.run(&strategy, |(preds, deciders, seed)| {
        let n = next.fetch_add(1, Ordering::SeqCst);
        runtime.block_on(async {
            let one = case(&stores, &client, &schema, n, preds, deciders, seed);
            match tokio::time::timeout(CASE_LIMIT, one).await {
                Ok(result) => result,
                Err(_) => Err(fail(format!(
                    "case {n} ({preds} predecessors, {deciders} deciders, seed {seed}) took over {CASE_LIMIT:?}"
                ))),
            }
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let (refused, lapsed) = (
        REFUSED.load(Ordering::SeqCst),
        LAPSED.load(Ordering::SeqCst),
    );
    eprintln!(
        "join property: {} cases in {:?}; {refused} join batches refused, {lapsed} lapsed claims taken over",
        next.load(Ordering::SeqCst),
        started.elapsed()
    );
    assert!(
        refused > 0,
        "the deciders raced: some join batches were refused"
    );
    assert!(lapsed > 0, "some abandoned claims were taken over");
    runtime.block_on(testing::drop_schemas("join"));
}
