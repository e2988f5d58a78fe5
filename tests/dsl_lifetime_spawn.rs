//! A workflow with a declared lifetime, run inside an async block that is spawned: awaited
//! there unboxed, rustc cannot prove the block `Send` (rust-lang/rust#100013, see
//! `docs/dsl.md`, "Generics"); the forms the docs give compile and run.

use std::future::Future;
use std::pin::Pin;

use flowdag::prelude::*;

mod common;
use common::Boom;

/// Items the run's output borrows from.
pub struct Shelf {
    /// The items.
    pub items: Vec<u32>,
}

/// Which item to find: borrowed for the run alone.
pub struct Query {
    /// Its index.
    pub index: usize,
}

static SHELF: Shelf = Shelf { items: Vec::new() };

async fn find(shelf: &Shelf, q: &Query) -> Result<usize, Boom> {
    match q.index < shelf.items.len() + 1 {
        true => Ok(q.index),
        false => Err(Boom("no such item")),
    }
}

workflow! {
    /// Finds an item on the shelf; the output borrows the shelf.
    pub Find<'a>(shelf: &'a Shelf, q: &Query) -> Option<&'a u32> {
        at = Operation(find(shelf, q))
        => shelf.items.get(at)
    }
}

#[tokio::test]
async fn the_run_of_a_workflow_with_a_lifetime_is_spawned_from_an_async_block_boxed() {
    let handle = tokio::spawn(async {
        let q = Query { index: 0 };
        futures::FutureExt::boxed(Find::run(&SHELF, &q))
            .await
            .map(|found| found.copied())
    });
    assert!(matches!(handle.await, Ok(Ok(None))));

    let handle = tokio::spawn(async {
        let q = Query { index: 5 };
        let run: Pin<Box<dyn Future<Output = _> + Send + '_>> = Box::pin(Find::run(&SHELF, &q));
        run.await.map(|found| found.copied())
    });
    assert!(matches!(handle.await, Ok(Err(_))), "the failure comes back");
}

#[tokio::test]
async fn the_run_of_a_workflow_with_a_lifetime_is_spawned_directly() {
    static Q: Query = Query { index: 0 };
    let handle = tokio::spawn(Find::run(&SHELF, &Q));
    assert!(matches!(handle.await, Ok(Ok(None))));
}
