//! `ForEach` in the DSL: one instance of the body per item, outputs in input order, a limit on
//! the instances in flight, the item and the parent's nodes read in the body, `on_failure =
//! collect`, `min` and `Complete`.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flow::prelude::*;
use flow::{NodeKind, NodeStatus};
use tokio::time::sleep;

use common::Boom;

async fn double(n: &u32, millis: u64) -> Result<u32, Boom> {
    sleep(Duration::from_millis(millis)).await;
    Ok(n * 2)
}

async fn numbers(count: u32) -> Result<Vec<u32>, Boom> {
    Ok((1..=count).collect())
}

workflow! {
    Doubles(count: u32) -> Vec<u32> {
        Sequential {
            items = Operation(numbers(count)),
            doubled = ForEach(n in items.iter()) {
                d = Operation(double(n, 10 * u64::from(5 - *n % 5)))
                => d
            },
        }
        => doubled.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn outputs_come_in_input_order_whatever_order_instances_end_in() {
    assert_eq!(Doubles::run(6).await.unwrap(), vec![2, 4, 6, 8, 10, 12]);
}
