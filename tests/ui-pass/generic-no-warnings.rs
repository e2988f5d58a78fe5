//! Generic workflows raise no warnings in a crate that denies them: declared lifetimes, type
//! and const parameters, a `where` clause, and a lifetime that only the parameters name.
#![deny(warnings, unused, missing_docs)]

use flowdag::prelude::*;
use std::convert::Infallible;

async fn pick<'a, T>(items: &'a [T], at: &usize) -> Result<&'a T, Infallible> {
    Ok(&items[*at % items.len()])
}

async fn total<const N: usize>(values: &[u64; N]) -> Result<u64, Infallible> {
    Ok(values.iter().sum())
}

workflow! {
    /// A lifetime and a type parameter; the output borrows the items.
    pub Pick<'a, T>(items: &'a [T], at: &usize) -> &'a T
    where
        T: Sync,
    {
        picked = Operation(pick(items, at))
        => picked
    }
}

workflow! {
    /// A const parameter, and a lifetime the output does not name.
    pub Total<'v, const N: usize>(values: &'v [u64; N]) -> u64 {
        sum = Operation(total(values))
        => sum
    }
}

fn main() {
    let items = [3u8, 4];
    let picked = futures::executor::block_on(Pick::run(&items, &1)).unwrap_or(&0);
    assert_eq!(*picked, 4);
    let sum = futures::executor::block_on(Total::run(&[1, 2, 3])).unwrap_or_default();
    assert_eq!(sum, 6);
}
