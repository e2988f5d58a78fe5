//! `PostgresStore` passes the contract every store must pass (`contract::all`) and the one of
//! the stores shared by worker processes (`contract::distributed`), each case in a fresh schema.

use std::sync::Arc;

use flowdag_postgres::testing;
use flowdag_store::{Store, contract};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_passes_the_contract_suite() {
    contract::all(|| Arc::new(testing::store("contract")) as Arc<dyn Store>).await;
    testing::drop_schemas("contract").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_passes_the_tasks_contract() {
    contract::distributed(|| Arc::new(testing::store("tasks")) as Arc<dyn Store>).await;
    testing::drop_schemas("tasks").await;
}
