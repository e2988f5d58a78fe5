//! Generated code raises no warnings in a crate that denies them: a workflow of one node (no
//! edges), one with a `Conditional` and skipped reads, one above the inline limit, and one whose
//! step passes a function named like a node (the macro binds the node's name there, unused, so
//! that rustc could suggest it for a misspelling).
#![deny(warnings, unused, missing_docs)]

use flowdag::prelude::*;
use std::convert::Infallible;

async fn add(x: &u64, y: u64) -> Result<u64, Infallible> {
    Ok(*x + y)
}

macro_rules! large {
    ($($name:ident)*) => {
        workflow! {
            /// More nodes than the macro keeps inline.
            pub Large(x: u64) -> u64 {
                Sequential {
                    $( $name = Operation(add(&x, 1)), )*
                    last = Operation(add(&x, 2)),
                }
                => last
            }
        }
    };
}

large!(
    a0 a1 a2 a3 a4 a5 a6 a7 a8 a9 b0 b1 b2 b3 b4 b5 b6 b7 b8 b9 c0 c1 c2 c3 c4 c5 c6 c7 c8 c9
    d0 d1 d2 d3 d4 d5 d6 d7 d8 d9 e0 e1 e2 e3 e4 e5 e6 e7 e8 e9 f0 f1 f2 f3 f4 f5 f6 f7 f8 f9
    g0 g1 g2 g3 g4 g5 g6 g7 g8 g9
);

workflow! {
    /// One node, so no edges.
    pub Single(x: u64) -> u64 {
        one = Operation(add(&x, 1))
        => one
    }
}

workflow! {
    /// A decision and a branch that may be skipped.
    pub Branching(x: u64) -> u64 {
        Sequential {
            first = Operation(add(&x, 1)),
            Conditional(first.is_ok()) {
                second = Operation(add(&first, 1)),
            },
            third = Operation(add(&first, 1)),
        }
        => second.copied().unwrap_or(third)
    }
}

fn double(v: u64) -> u64 {
    v * 2
}

async fn apply(x: &u64, f: fn(u64) -> u64) -> Result<u64, Infallible> {
    Ok(f(*x))
}

workflow! {
    /// `double` is a function, one edit away from the node `doubles`.
    pub Hinted(x: u64) -> u64 {
        Sequential {
            doubles = Operation(apply(&x, double)),
            Operation(apply(&x, double)),
        }
        => doubles
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    assert_eq!(rt.block_on(Single::run(1)).ok(), Some(2));
    assert_eq!(rt.block_on(Branching::run(1)).ok(), Some(3));
    assert_eq!(rt.block_on(Large::run(1)).ok(), Some(3));
    assert_eq!(rt.block_on(Hinted::run(4)).ok(), Some(8));
}
