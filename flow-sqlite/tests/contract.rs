//! `SqliteStore` passes the contract every store must pass, on a fresh file per case.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use flowdag_sqlite::{Durability, SqliteOptions, SqliteStore};
use flowdag_store::{Store, contract};

#[tokio::test]
async fn sqlite_store_passes_the_contract_suite() {
    let dir = common::dir("contract");
    let next = AtomicU32::new(0);
    contract::all(|| {
        let n = next.fetch_add(1, Ordering::Relaxed);
        let store = SqliteStore::open(dir.join(format!("case-{n}.db"))).expect("a new store");
        Arc::new(store) as Arc<dyn Store>
    })
    .await;
}

#[tokio::test]
async fn sqlite_store_passes_the_contract_suite_with_process_durability() {
    let dir = common::dir("contract-normal");
    let next = AtomicU32::new(0);
    contract::all(|| {
        let n = next.fetch_add(1, Ordering::Relaxed);
        let options = SqliteOptions {
            durability: Durability::Process,
            ..SqliteOptions::default()
        };
        let store =
            SqliteStore::open_with(dir.join(format!("case-{n}.db")), options).expect("a store");
        Arc::new(store) as Arc<dyn Store>
    })
    .await;
}
