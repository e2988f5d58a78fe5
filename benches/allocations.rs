//! Heap allocations per run, as a function of the node count, for flow and for the
//! hand-written code: a counting global allocator around one run on a `current_thread` runtime
//! (after one warm-up run, so that thread-locals and the runtime's own buffers are in place).
//!
//! The last table is the peak heap of a `ForEach` over 100,000 and 1,000,000 items, 64 in
//! flight, against `futures::stream::iter(..).map(..).buffer_unordered(64)` over the same
//! items: both hold what is in flight, not the items.
//!
//! `cargo bench -p flow-benches --bench allocations` prints the markdown tables of
//! docs/performance.md.

mod common;

use std::future::Future;

use futures::StreamExt;
use tokio::runtime::Runtime;

use common::counting::{Counting, Usage, measure};
use common::{WIDTH, hand, ops};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// One module per operation, with every workflow this bench runs calling it as `op`.
mod imm {
    use crate::common::ops::imm as op;
    use flowdag::workflow;

    include!("generated/chain_10.rs");
    include!("generated/chain_50.rs");
    include!("generated/chain_100.rs");
    include!("generated/chain_1000.rs");
    include!("generated/fan_10.rs");
    include!("generated/fan_50.rs");
    include!("generated/fan_100.rs");
    include!("generated/fan_1000.rs");
    include!("generated/layered_10.rs");
    include!("generated/layered_50.rs");
    include!("generated/layered_100.rs");
    include!("generated/layered_1000.rs");
    include!("common/mixed.rs");
}

/// A `ForEach` whose body yields once per item, `()` output: what `ForEach` itself holds.
mod each {
    use crate::common::ops::yld as op;
    use flowdag::workflow;

    workflow! {
        /// `items` items, at most 64 instances in flight.
        pub Each(items: u64) -> usize {
            all = ForEach(item in 0..items, max_concurrency = 64) {
                Operation(op(item))
                => ()
            }
            => all.len()
        }
    }
}

/// The same work as [`each::Each`] by hand: a stream of the items, 64 futures in flight.
async fn buffered(items: u64) -> usize {
    futures::stream::iter(0..items)
        .map(common::ops::yld)
        .buffer_unordered(64)
        .map(|result| {
            common::ok(result);
        })
        .collect::<Vec<()>>()
        .await
        .len()
}

/// What one run of `make()` allocates, after a warm-up run.
fn usage<F: Future>(rt: &Runtime, make: impl Fn() -> F) -> Usage {
    drop(rt.block_on(make()));
    let (output, usage) = measure(|| rt.block_on(make()));
    drop(output);
    usage
}

fn kib(bytes: usize) -> String {
    format!("{:.1}", bytes as f64 / 1024.0)
}

/// One row: flow's `run`, flow with the event log, and the hand-written variants.
struct Row {
    shape: &'static str,
    nodes: usize,
    run: Usage,
    log: Usage,
    hand: Vec<(&'static str, Usage)>,
}

/// Measures workflow `$w` of `$n` nodes against the hand-written `$hand` (name, closure) pairs.
macro_rules! row {
    ($rt:expr, $shape:literal, $n:expr, $w:ty, [$(($name:literal, $hand:expr)),*]) => {
        Row {
            shape: $shape,
            nodes: $n,
            run: usage($rt, || <$w>::run(0)),
            log: usage($rt, || <$w>::runner().execute(0)),
            hand: vec![$(($name, usage($rt, $hand))),*],
        }
    };
}

fn main() {
    let rt = common::current_thread();
    let op = ops::imm;
    let baseline = usage(&rt, || async {});
    let rows = vec![
        row!(
            &rt,
            "chain",
            10,
            imm::Chain10,
            [("await", || hand::chain(op, 0, 10))]
        ),
        row!(
            &rt,
            "chain",
            50,
            imm::Chain50,
            [("await", || hand::chain(op, 0, 50))]
        ),
        row!(
            &rt,
            "chain",
            100,
            imm::Chain100,
            [("await", || hand::chain(op, 0, 100))]
        ),
        row!(
            &rt,
            "chain",
            1000,
            imm::Chain1000,
            [("await", || hand::chain(op, 0, 1000))]
        ),
        row!(
            &rt,
            "fan",
            10,
            imm::Fan10,
            [
                ("join_all", || hand::fan_join_all(op, 0, 10)),
                ("FuturesUnordered", || hand::fan_unordered(op, 0, 10))
            ]
        ),
        row!(
            &rt,
            "fan",
            50,
            imm::Fan50,
            [
                ("join_all", || hand::fan_join_all(op, 0, 50)),
                ("FuturesUnordered", || hand::fan_unordered(op, 0, 50))
            ]
        ),
        row!(
            &rt,
            "fan",
            100,
            imm::Fan100,
            [
                ("join_all", || hand::fan_join_all(op, 0, 100)),
                ("FuturesUnordered", || hand::fan_unordered(op, 0, 100))
            ]
        ),
        row!(
            &rt,
            "fan",
            1000,
            imm::Fan1000,
            [
                ("join_all", || hand::fan_join_all(op, 0, 1000)),
                ("FuturesUnordered", || hand::fan_unordered(op, 0, 1000))
            ]
        ),
        row!(
            &rt,
            "layered",
            10,
            imm::Layered10,
            [("join_all", || hand::layered(op, 0, 10, WIDTH))]
        ),
        row!(
            &rt,
            "layered",
            50,
            imm::Layered50,
            [("join_all", || hand::layered(op, 0, 50, WIDTH))]
        ),
        row!(
            &rt,
            "layered",
            100,
            imm::Layered100,
            [("join_all", || hand::layered(op, 0, 100, WIDTH))]
        ),
        row!(
            &rt,
            "layered",
            1000,
            imm::Layered1000,
            [("join_all", || hand::layered(op, 0, 1000, WIDTH))]
        ),
        row!(
            &rt,
            "mixed",
            50,
            imm::Mixed,
            [("try_join!", || hand::mixed(op, 0))]
        ),
    ];

    println!(
        "Heap allocation calls (alloc + realloc) and bytes per run, immediate operation, \
         `current_thread`; `block_on(async {{}})` alone: {} calls, {} bytes.\n",
        baseline.calls, baseline.bytes
    );
    println!(
        "| shape | nodes | flow `run` calls | per node | KiB | peak KiB | flow + event log calls \
         | KiB | hand-written | calls | KiB |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|");
    for row in &rows {
        for (i, (name, hand)) in row.hand.iter().enumerate() {
            let flow = if i == 0 {
                format!(
                    "| {} | {} | {} | {:.2} | {} | {} | {} | {} ",
                    row.shape,
                    row.nodes,
                    row.run.calls,
                    row.run.calls as f64 / row.nodes as f64,
                    kib(row.run.bytes),
                    kib(row.run.peak),
                    row.log.calls,
                    kib(row.log.bytes)
                )
            } else {
                "| | | | | | | | ".to_string()
            };
            println!("{flow}| {name} | {} | {} |", hand.calls, kib(hand.bytes));
        }
    }

    println!(
        "\nGrowth per added node (between the two sizes, node futures in the run arena above 64 nodes):\n"
    );
    println!(
        "| shape | sizes | flow `run` calls/node | flow + log calls/node | hand-written calls/node |"
    );
    println!("|---|---|---:|---:|---:|");
    for shape in ["chain", "fan", "layered"] {
        let of = |n: usize| rows.iter().find(|r| r.shape == shape && r.nodes == n);
        for (small, large) in [(10, 50), (100, 1000)] {
            let (Some(a), Some(b)) = (of(small), of(large)) else {
                continue;
            };
            let per = |x: usize, y: usize| (y as f64 - x as f64) / (large - small) as f64;
            let hand: Vec<String> = a
                .hand
                .iter()
                .zip(&b.hand)
                .map(|((name, x), (_, y))| format!("{name} {:.2}", per(x.calls, y.calls)))
                .collect();
            println!(
                "| {shape} | {small} → {large} | {:.2} | {:.2} | {} |",
                per(a.run.calls, b.run.calls),
                per(a.log.calls, b.log.calls),
                hand.join(", ")
            );
        }
    }

    let yielding = usage(&rt, || hand::chain(ops::yld, 0, 1000));
    let immediate = usage(&rt, || hand::chain(ops::imm, 0, 1000));
    println!(
        "\nHand-written chain of 1000 with the immediate operation: {} calls; with the yielding \
         one: {} calls (tokio's list of deferred wake-ups).",
        immediate.calls, yielding.calls
    );

    println!(
        "\nPeak heap of a `ForEach` (`max_concurrency = 64`, `()` output, the body one yielding \
         operation) against `stream::iter(..).map(..).buffer_unordered(64)` over the same items:\n"
    );
    println!(
        "| items | `ForEach` peak KiB | calls | calls per item | `buffer_unordered(64)` peak KiB | calls | calls per item |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for items in [100_000u64, 1_000_000] {
        let flow = usage(&rt, || each::Each::run(items));
        let stream = usage(&rt, || buffered(items));
        println!(
            "| {items} | {} | {} | {:.2} | {} | {} | {:.2} |",
            kib(flow.peak),
            flow.calls,
            flow.calls as f64 / items as f64,
            kib(stream.peak),
            stream.calls,
            stream.calls as f64 / items as f64
        );
    }
}
