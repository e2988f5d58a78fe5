//! Generated code for `ForEach`, `Loop`, sub-workflow steps and `Complete` raises no warnings in
//! a crate that denies them: named and unnamed nests, a body that reads the workflow's nodes and
//! parameters, a nest inside a body, a `while` loop, and a child workflow.
#![deny(warnings, unused, missing_docs)]

use flowdag::prelude::*;
use std::convert::Infallible;

async fn add(x: &u64, y: u64) -> Result<u64, Infallible> {
    Ok(*x + y)
}

async fn next(last: Option<&u64>) -> Result<u64, Infallible> {
    Ok(last.copied().unwrap_or(0) + 1)
}

workflow! {
    /// The child.
    pub Child(x: u64) -> u64 {
        c = Operation(add(&x, 1))
        => c
    }
}

workflow! {
    /// Every kind of nest.
    pub Nests(x: u64, items: &[u64]) -> u64 {
        Sequential {
            base = Operation(add(&x, 1)),
            Parallel {
                each = ForEach(item in items.iter(), max_concurrency = 2) {
                    one = Operation(add(item, base)),
                    inner = ForEach(k in 0..2u64, on_failure = collect) {
                        Operation(add(&k, one))
                    }
                    => one + inner.len() as u64
                },
                Sequential { Operation(add(&x, 0)), Complete(each) },
            },
            ForEach(item in items.iter()) { Operation(add(item, x)) },
            until = Loop(max = 3, prev = last, on_max = stop) {
                n = Operation(next(last))
                => n
            } until (n >= 2),
            during = Loop(max = 5, prev = last) while (last.is_none_or(|p| *p < 3)) {
                n = Operation(next(last))
                => n
            },
            child = Workflow(Child(base)),
        }
        => each.iter().sum::<u64>() + until + during.unwrap_or(0) + child
    }
}

fn main() {
    let total = futures::executor::block_on(Nests::run(1, &[1, 2])).unwrap_or(0);
    assert!(total > 0);
}
