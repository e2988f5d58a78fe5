//! Borrowed parameters of every form: each elided lifetime becomes the run's own, and types
//! that bind lifetimes of their own (`fn(&str)`, `dyn Fn(&str)`, `for<'x>`) keep them.
use std::borrow::Cow;

use flowdag::prelude::*;

struct Ctx {
    base: u64,
}

async fn total(
    ctx: &Ctx,
    items: &[u64],
    label: &Cow<'_, str>,
    name: &'static str,
    scale: fn(&u64) -> u64,
    check: &dyn Fn(&str) -> bool,
    pick: &Box<dyn for<'x> Fn(&'x [u64]) -> &'x u64>,
) -> Result<u64, std::io::Error> {
    let ok = check(label) && check(name);
    Ok(ctx.base + items.iter().map(scale).sum::<u64>() + *pick(items) + u64::from(ok))
}

workflow! {
    Borrowing(
        ctx: &Ctx,
        items: &[u64],
        label: Cow<'_, str>,
        name: &'static str,
        scale: fn(&u64) -> u64,
        check: &dyn Fn(&str) -> bool,
        pick: Box<dyn for<'x> Fn(&'x [u64]) -> &'x u64>,
    ) -> u64 {
        sum = Operation(total(ctx, items, &label, name, scale, check, &pick))
        => sum
    }
}

workflow! {
    /// No parameter: the input is `()`.
    Nothing() -> u64 {
        n = Operation(seven())
        => n
    }
}

async fn seven() -> Result<u64, std::io::Error> {
    Ok(7)
}

fn double(n: &u64) -> u64 {
    n * 2
}

fn main() {
    let ctx = Ctx { base: 100 };
    let items = vec![1, 2, 3];
    let check = |s: &str| !s.is_empty();
    let run = Borrowing::run(
        &ctx,
        &items,
        Cow::Borrowed("label"),
        "name",
        double,
        &check,
        Box::new(|items: &[u64]| &items[0]),
    );
    assert_eq!(futures::executor::block_on(run).unwrap(), 100 + 12 + 1 + 1);
    let outcome = futures::executor::block_on(Borrowing::runner().execute((
        &ctx,
        &items,
        Cow::Owned("owned".to_string()),
        "name",
        double,
        &check,
        Box::new(|items: &[u64]| &items[2]),
    )));
    assert_eq!(outcome.result.unwrap(), 100 + 12 + 3 + 1);
    assert_eq!(futures::executor::block_on(Nothing::runner().execute(())).result.unwrap(), 7);
    assert_eq!(futures::executor::block_on(Nothing::run()).unwrap(), 7);
}
