//! Generated code for labels, `Cancel` and `Terminate` raises no warnings in a crate that denies
//! them: a region cancelled from a parallel branch and read as an `Option` after it, and a
//! `Terminate` that reads a node.
#![deny(warnings, unused, missing_docs)]

use flowdag::prelude::*;
use std::convert::Infallible;

async fn add(x: &u64, y: u64) -> Result<u64, Infallible> {
    Ok(*x + y)
}

async fn maybe(x: Option<&u64>) -> Result<u64, Infallible> {
    Ok(x.copied().unwrap_or(0))
}

workflow! {
    /// Cancels a region, or ends early.
    pub Cancels(x: u64, stop: bool) -> u64 {
        Sequential {
            Parallel {
                'work: Sequential {
                    a = Operation(add(&x, 1)),
                    b = Operation(add(&a, 1)),
                },
                Conditional(stop) {
                    Cancel('work),
                },
            },
            c = Operation(maybe(b)),
            Conditional(c.is_ok_and(|c| *c > 10)) {
                Terminate(c * 2),
            },
        }
        => c.copied().unwrap_or(0) + a.copied().unwrap_or(0)
    }
}

fn main() {
    let _ = Cancels::run(1, false);
}
