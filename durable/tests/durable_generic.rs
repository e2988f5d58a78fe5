//! Generic durable workflows: each instantiation's runs are stored under the workflow's name
//! with its arguments (`Relay<Parcel>`), resumed by that instantiation only, listed and found
//! by that name (a `Worker`, `resume_all`); a generic workflow is a child run too.

use std::sync::Mutex;
use std::time::Duration;

use flowdag::durable::{DurableError, DurableWorkflow, resume};
use flowdag::prelude::*;
use flowdag::store::{MemoryStore, RunFilter, Store};

#[path = "common/faulty.rs"]
mod faulty;

use faulty::Faulty;
use serde::{Serialize, de::DeserializeOwned};

#[derive(Debug)]
struct Never;

impl std::fmt::Display for Never {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("never")
    }
}

impl std::error::Error for Never {}

/// A parcel, stored as JSON.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Parcel {
    /// Where it goes.
    pub to: String,
    /// What it weighs.
    pub grams: u32,
}

/// What ran, by key.
static KEYS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// When set, `forward` of this run never returns (its process "stops" there).
static HANG: Mutex<Option<String>> = Mutex::new(None);

async fn copy<T: Clone>(item: &T) -> Result<T, Never> {
    if let Some(attempt) = flowdag::attempt() {
        KEYS.lock().expect("not poisoned").push(attempt.key());
    }
    Ok(item.clone())
}

async fn forward<T: Clone>(item: &T, times: u32) -> Result<Vec<T>, Never> {
    if let Some(attempt) = flowdag::attempt() {
        KEYS.lock().expect("not poisoned").push(attempt.key());
        let hangs = HANG.lock().expect("not poisoned").as_deref() == Some(attempt.run());
        if hangs {
            std::future::pending::<()>().await;
        }
    }
    Ok(vec![item.clone(); times as usize])
}

workflow! {
    /// Copies an item and forwards it `times` times: generic over the item.
    #[flow(durable)]
    pub Relay<T>(item: T, times: u32) -> Vec<T>
    where
        T: Clone + Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        Sequential {
            copied = Operation(copy(&item)),
            sent = Operation(forward(&copied, times)),
        }
        => sent.clone()
    }
}

workflow! {
    /// Relays a parcel as a child run.
    #[flow(durable)]
    pub Post(parcel: Parcel) -> usize {
        relayed = Workflow(Relay::<Parcel>((parcel.clone(), 2)))
        => relayed.len()
    }
}

fn keys_of(run: &str) -> Vec<String> {
    let prefix = format!("{run}/");
    KEYS.lock()
        .expect("not poisoned")
        .iter()
        .filter(|key| key.starts_with(&prefix))
        .cloned()
        .collect()
}

async fn workflow_of(store: &dyn Store, id: &str) -> String {
    let filter = RunFilter {
        id: Some(id.to_owned()),
        ..RunFilter::default()
    };
    store
        .list_runs(&filter)
        .await
        .expect("lists")
        .first()
        .map(|r| r.workflow.clone())
        .expect("the run is stored")
}

#[tokio::test]
async fn each_instantiation_is_stored_under_its_arguments() {
    assert_eq!(Relay::<u32>::durable_name(), "Relay<u32>");
    assert_eq!(Relay::<Parcel>::durable_name(), "Relay<Parcel>");
    assert_eq!(Relay::<Vec<String>>::durable_name(), "Relay<Vec<String>>");
    let store = MemoryStore::new();
    let numbers = Relay::<u32>::runner()
        .durable(&store, "g-1")
        .execute((7, 3))
        .await
        .expect("runs");
    assert_eq!(numbers.result.expect("succeeds"), [7, 7, 7]);
    let parcel = Parcel {
        to: "Lyon".into(),
        grams: 500,
    };
    let parcels = Relay::<Parcel>::runner()
        .durable(&store, "g-2")
        .execute((parcel.clone(), 1))
        .await
        .expect("runs");
    assert_eq!(parcels.result.expect("succeeds"), [parcel]);
    assert_eq!(workflow_of(&store, "g-1").await, "Relay<u32>");
    assert_eq!(workflow_of(&store, "g-2").await, "Relay<Parcel>");
    assert_eq!(keys_of("g-1"), ["g-1/copied/1", "g-1/sent/1"]);
    // Another instantiation does not take a run that is not its own.
    let wrong = resume::<Relay<String>, _>(&store, "g-1").await;
    assert!(
        matches!(&wrong, Err(DurableError::RunExists { why, .. }) if why.contains("Relay<u32>")),
        "{wrong:?}"
    );
    // `resume_all` of one instantiation lists its runs only.
    let all = Relay::<Parcel>::resume_all(&store).await.expect("lists");
    assert!(all.is_empty(), "both runs have ended: {all:?}");
}

#[tokio::test]
async fn a_generic_run_stopped_midway_is_resumed_by_its_instantiation() {
    let store = Faulty::new().leases(|_| Duration::from_millis(100));
    *HANG.lock().expect("not poisoned") = Some("g-3".to_owned());
    let stopped = tokio::time::timeout(
        Duration::from_millis(200),
        Relay::<String>::runner()
            .durable(&store, "g-3")
            .execute(("hello".to_owned(), 2)),
    )
    .await;
    assert!(stopped.is_err(), "the run waits in `forward`");
    *HANG.lock().expect("not poisoned") = None;
    tokio::time::sleep(Duration::from_millis(150)).await;
    // Another instantiation's `resume_all` does not see it; its own resumes it.
    let others = Relay::<u32>::resume_all(&store).await.expect("lists");
    assert!(others.iter().all(|(id, _)| id != "g-3"), "{others:?}");
    let resumed = Relay::<String>::resume_all(&store).await.expect("lists");
    let (_, result) = resumed
        .into_iter()
        .find(|(id, _)| id == "g-3")
        .expect("the run is found under `Relay<String>`");
    let outcome = result.expect("resumes");
    assert_eq!(outcome.result.expect("succeeds"), ["hello", "hello"]);
    assert_eq!(
        keys_of("g-3"),
        ["g-3/copied/1", "g-3/sent/1", "g-3/sent/1"],
        "the step in flight runs again with its key; the completed one does not"
    );
}

#[tokio::test]
async fn a_generic_workflow_is_a_child_run() {
    let store = MemoryStore::new();
    let parcel = Parcel {
        to: "Oslo".into(),
        grams: 120,
    };
    let outcome = Post::runner()
        .durable(&store, "g-4")
        .execute(parcel)
        .await
        .expect("runs");
    assert_eq!(outcome.result.expect("succeeds"), 2);
    assert_eq!(workflow_of(&store, "g-4/relayed").await, "Relay<Parcel>");
    assert_eq!(
        keys_of("g-4/relayed"),
        ["g-4/relayed/copied/1", "g-4/relayed/sent/1"]
    );
}

async fn batch<const N: usize>(item: &u32) -> Result<Vec<u32>, Never> {
    Ok(vec![*item; N])
}

workflow! {
    /// Generic over a const: its runs are stored under `Batch<3>`.
    #[flow(durable)]
    pub Batch<const N: usize>(item: u32, tag: Tagged<N>) -> Vec<u32> {
        made = Operation(batch::<N>(&item))
        => made.clone()
    }
}

/// A parameter type that names the const parameter.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Tagged<const N: usize>(pub u32);

#[tokio::test]
async fn a_const_parameter_names_the_runs_too() {
    assert_eq!(Batch::<3>::durable_name(), "Batch<3>");
    let store = MemoryStore::new();
    let outcome = Batch::<3>::runner()
        .durable(&store, "g-5")
        .execute((4, Tagged::<3>(1)))
        .await
        .expect("runs");
    assert_eq!(outcome.result.expect("succeeds"), [4, 4, 4]);
    assert_eq!(workflow_of(&store, "g-5").await, "Batch<3>");
}
