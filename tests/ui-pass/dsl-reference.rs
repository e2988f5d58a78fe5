// Generated from docs/dsl.md by tests/dsl_reference.rs: do not edit by hand.
#![allow(dead_code, missing_docs, unused_imports)]

// ---- docs/dsl.md, block 0
use flowdag::prelude::*;
use std::convert::Infallible;
use std::fmt;

pub struct AppCtx;

#[derive(Debug, Clone)]
pub struct Order { pub id: u64, pub total: u64 }
#[derive(Debug, Clone)]
pub struct Reservation { pub order_id: u64 }
#[derive(Debug, Clone, Copy)]
pub struct Risk { pub score: f64 }
#[derive(Debug, Clone)]
pub struct Receipt { pub order_id: u64, pub amount: u64 }

#[derive(Debug)]
pub struct ShopError(pub &'static str);
impl fmt::Display for ShopError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(self.0) }
}
impl std::error::Error for ShopError {}

pub async fn fetch_order(_ctx: &AppCtx, id: u64) -> Result<Order, ShopError> {
    Ok(Order { id, total: 4200 })
}
pub async fn reserve_stock(_ctx: &AppCtx, order: &Order) -> Result<Reservation, ShopError> {
    Ok(Reservation { order_id: order.id })
}
pub async fn score_risk(order: &Order) -> Result<Risk, ShopError> {
    Ok(Risk { score: if order.total > 10_000 { 0.9 } else { 0.1 } })
}
pub async fn charge(order: &Order, _stock: &Reservation) -> Result<Receipt, ShopError> {
    Ok(Receipt { order_id: order.id, amount: order.total })
}
pub async fn reject(_ctx: &AppCtx, _order: &Order) -> Result<(), ShopError> {
    Ok(())
}
pub async fn notify(_ctx: &AppCtx, _order_id: u64) -> Result<(), ShopError> {
    Ok(())
}

// ---- docs/dsl.md, block 1
workflow! {
    /// Checks out one order: charge it if the risk is low, reject it otherwise.
    pub Checkout(ctx: &AppCtx, order_id: u64) -> Option<Receipt> {
        Sequential {
            order = Operation(fetch_order(ctx, order_id)),
            Parallel {
                stock = Operation(reserve_stock(ctx, &order)),
                risk = Operation(score_risk(&order), timeout = "500ms"),
            },
            Conditional(risk.is_ok_and(|r| r.score < 0.8)) {
                receipt = Operation(charge(&order, &stock)),
            } else {
                Operation(reject(ctx, &order)),
            },
        }
        => receipt.cloned()
    }
}

// ---- docs/dsl.md, block 2
workflow! {
    /// Notifies the customer about an order.
    ///
    /// Doc comments and other outer attributes go on the generated type.
    pub(crate) Notify(ctx: &AppCtx, order_id: u64) {
        Operation(notify(ctx, order_id))
    }
}

// ---- docs/dsl.md, block 3
workflow! {
    /// Reads the total of an order.
    pub OrderTotal(ctx: &AppCtx, order_id: u64) -> u64 {
        order = Operation(fetch_order(ctx, order_id))
        => order.total
    }
}

// ---- docs/dsl.md, block 4
pub async fn largest<'o>(orders: &'o [Order], _ctx: &AppCtx) -> Result<&'o Order, ShopError> {
    orders.iter().max_by_key(|o| o.total).ok_or(ShopError("no order"))
}

workflow! {
    /// The largest order; the output borrows the orders, not the context.
    pub Largest<'o>(orders: &'o [Order], ctx: &AppCtx) -> &'o Order {
        top = Operation(largest(orders, ctx))
        => top
    }
}

pub async fn first_of<T: Clone>(items: &[T]) -> Result<T, ShopError> {
    items.first().cloned().ok_or(ShopError("empty"))
}

workflow! {
    /// Generic over the item type: `First::run(&[1, 2])` finds `T = i32` in its argument.
    pub First<T>(items: &[T]) -> T
    where
        T: Clone + Send + Sync,
    {
        item = Operation(first_of(items))
        => item.clone()
    }
}

// ---- docs/dsl.md, block 5
pub async fn hold(sku: String) -> Result<String, ShopError> {
    Ok(format!("hold-{sku}"))
}

pub async fn unhold(_hold: &str) -> Result<(), ShopError> {
    Ok(())
}

pub async fn bill(sku: &str, hold: &str) -> Result<u64, ShopError> {
    Ok((sku.len() + hold.len()) as u64)
}

workflow! {
    /// Holds an item, then bills it; a failed bill releases the hold. Its parameter, its
    /// steps' outputs and its output are stored with the run: each is `Serialize +
    /// DeserializeOwned` and owned (`String`, not `&str`).
    #[flow(durable)]
    pub HoldItem(sku: String) -> u64 {
        Sequential {
            held = Operation(hold(sku.clone()), compensate = unhold(&held)),
            billed = Operation(bill(&sku, &held), retries = 2),
        }
        => billed
    }
}

// ---- docs/dsl.md, block 6
workflow! {
    /// Notifies three times, at most two at a time.
    pub NotifyAll(ctx: &AppCtx) {
        Parallel(max_concurrency = 2) {
            Operation(notify(ctx, 1)),
            Operation(notify(ctx, 2)),
            Operation(notify(ctx, 3)),
        }
    }
}

// ---- docs/dsl.md, block 7
workflow! {
    /// Notifies on each channel the customer chose, then once more when those are done.
    pub NotifyChosen(ctx: &AppCtx, email: bool, sms: bool) {
        Sequential {
            Parallel {
                Conditional(email) { Operation(notify(ctx, 1)) },
                Conditional(sms) { Operation(notify(ctx, 2)) },
            },
            Operation(notify(ctx, 3)),
        }
    }
}

// ---- docs/dsl.md, block 8
workflow! {
    /// Scores the order with whichever of two scorers answers first.
    pub FastestRisk(ctx: &AppCtx, order_id: u64) -> (usize, Option<Risk>) {
        order = Operation(fetch_order(ctx, order_id)),
        won = Race {
            primary = Operation(score_risk(&order)),
            fallback = Operation(score_risk(&order)),
        },
        => (won, primary.or(fallback).copied())
    }
}

workflow! {
    /// Notifies three channels and goes on once two of them answered; the third is withdrawn.
    pub NotifyTwo(ctx: &AppCtx, order_id: u64) -> Vec<usize> {
        got = Parallel(min = 2, rest = cancel) {
            Operation(notify(ctx, order_id)),
            Operation(notify(ctx, order_id + 1)),
            Operation(notify(ctx, order_id + 2)),
        },
        => got.clone()
    }
}

// ---- docs/dsl.md, block 9
workflow! {
    /// Notifies the customer about large orders only, then reserves stock.
    pub MaybeNotify(ctx: &AppCtx, order_id: u64) {
        order = Operation(fetch_order(ctx, order_id)),
        Conditional(order.is_ok_and(|o| o.total > 1_000)) {
            Operation(notify(ctx, order_id)),
        },
        Operation(reserve_stock(ctx, &order)),
    }
}

// ---- docs/dsl.md, block 10
workflow! {
    /// Bills a held item. New runs hold it a second time and bill that hold; runs started
    /// before that change bill the first hold.
    #[flow(durable)]
    pub HoldAgain(sku: String) -> u64 {
        held = Operation(hold(sku.clone())),
        Patched("hold-again") {
            again = Operation(hold(format!("{sku}-2"))),
            rebilled = Operation(bill(&sku, &again)),
        } else {
            billed = Operation(bill(&sku, &held)),
        },
        => rebilled.or(billed).copied().unwrap_or(0)
    }
}

// ---- docs/dsl.md, block 11
#[derive(Debug, Clone)]
pub struct Approval { pub by: String }

pub async fn ship_approved(order: &Order, approval: &Approval) -> Result<String, ShopError> {
    Ok(format!("order {} approved by {}", order.id, approval.by))
}

workflow! {
    /// Ships an order once someone approves it, after a cooling-off day.
    pub Approve(ctx: &AppCtx, order_id: u64) -> String {
        order = Operation(fetch_order(ctx, order_id)),
        ok = Signal(approve: Approval),
        Delay("1d"),
        Delay(std::time::Duration::from_millis(order.total)),
        shipped = Operation(ship_approved(&order, &ok)),
        => shipped.clone()
    }
}

pub async fn approve_and_run(ctx: &AppCtx) -> Result<String, WorkflowError> {
    let mut runner = Approve::runner();
    let signals: Signals = runner.signals();
    // Sent before the step waits: kept until it does.
    signals
        .send(Approve::APPROVE, Approval { by: "ann".to_string() })
        .expect("the run has not ended");
    runner.run((ctx, 7)).await
}

// ---- docs/dsl.md, block 12
pub async fn expire_order(order: &Order) -> Result<u64, ShopError> {
    Ok(order.id)
}

workflow! {
    /// Ships an approved order, or expires it when nobody approves it within two days.
    pub ApproveOrExpire(ctx: &AppCtx, order_id: u64) -> Option<String> {
        order = Operation(fetch_order(ctx, order_id)),
        Pick {
            ok = Signal(approve: Approval) => {
                shipped = Operation(ship_approved(&order, &ok)),
            },
            Delay("48h") => { Operation(expire_order(&order)) },
        },
        Operation(notify(ctx, order_id)),
        => shipped.cloned()
    }
}

// ---- docs/dsl.md, block 13
workflow! {
    /// Reserves stock for an order, unless the order is called off first.
    pub Reserve(ctx: &AppCtx, order_id: u64, abort: bool) -> Option<u64> {
        order = Operation(fetch_order(ctx, order_id)),
        Parallel {
            'reserve: Sequential {
                stock = Operation(reserve_stock(ctx, &order)),
                Operation(notify(ctx, order_id)),
            },
            Conditional(abort) {
                Cancel('reserve),                   // WCP 25: cancel a region
            },
        },
        // `stock` may be withdrawn: here it is an `Option<&Reservation>`.
        => stock.map(|s| s.order_id)
    }
}

// ---- docs/dsl.md, block 14
workflow! {
    /// Quotes a large order at its total, without scoring its risk.
    pub Quote(ctx: &AppCtx, order_id: u64) -> u64 {
        order = Operation(fetch_order(ctx, order_id)),
        Conditional(order.is_ok_and(|o| o.total > 1_000)) {
            Terminate(order.total),
        },
        risk = Operation(score_risk(&order)),
        => (risk.score * 100.0) as u64
    }
}

// ---- docs/dsl.md, block 15
workflow! {
    /// Charges every order of a batch, at most four at a time.
    pub ChargeAll(ctx: &AppCtx, ids: &[u64]) -> Vec<u64> {
        charged = ForEach(id in ids.iter(), max_concurrency = 4) {
            order = Operation(fetch_order(ctx, *id)),
            stock = Operation(reserve_stock(ctx, &order)),
            receipt = Operation(charge(&order, &stock)),
            => receipt.amount
        }
        => charged.clone()
    }
}

// ---- docs/dsl.md, block 16
workflow! {
    /// Prices orders for 50 ms, then goes on with the prices it has.
    pub QuickQuote(ctx: &AppCtx, ids: &[u64]) -> usize {
        Parallel {
            quotes = ForEach(id in ids.iter()) {
                order = Operation(fetch_order(ctx, *id)) => order.total
            },
            Sequential { Delay("50ms"), Complete(quotes) },
        },
        => quotes.len()
    }
}

// ---- docs/dsl.md, block 17
/// How far a parcel got: `ready` once it left.
#[derive(Debug, Clone)]
pub struct Shipping { pub ready: bool, pub tries: u32 }

pub async fn shipping(_ctx: &AppCtx, _order_id: u64, last: Option<&Shipping>) -> Result<Shipping, ShopError> {
    let tries = last.map_or(1, |s| s.tries + 1);
    Ok(Shipping { ready: tries >= 3, tries })
}

workflow! {
    /// Polls the shipping status until the parcel left, at most 20 times, 10 ms apart.
    pub AwaitShipping(ctx: &AppCtx, order_id: u64) -> u32 {
        shipped = Loop(max = 20, prev = last) {
            Delay("10ms"),
            status = Operation(shipping(ctx, order_id, last)),
            => status.clone()
        } until (status.ready)
        => shipped.tries
    }
}

// ---- docs/dsl.md, block 18
/// The id after the last order read, or 0.
pub fn next_id(last: Option<&Order>) -> u64 {
    last.map_or(0, |o| o.id + 1)
}

workflow! {
    /// Reads orders 0, 1, 2 .. until one costs more than 4000, at most 100.
    pub FirstLarge(ctx: &AppCtx) -> u64 {
        found = Loop(max = 100, prev = last) while (last.is_none_or(|o| o.total <= 4000)) {
            order = Operation(fetch_order(ctx, next_id(last)))
            => order.clone()
        }
        => found.as_ref().map_or(0, |o| o.id)
    }
}

// ---- docs/dsl.md, block 19
workflow! {
    /// Checks out an order as one step, then notifies.
    pub CheckoutAndNotify(ctx: &AppCtx, order_id: u64) -> Option<u64> {
        receipt = Workflow(Checkout(ctx, order_id)),
        Operation(notify(ctx, order_id)),
        => receipt.as_ref().map(|r| r.amount)
    }
}

// ---- docs/dsl.md, block 20
pub async fn archive(order: Order) -> Result<u64, ShopError> {
    Ok(order.id)
}

workflow! {
    /// Shows the ways a step reads names.
    pub Reads(ctx: &AppCtx, order_id: u64) {
        order = Operation(fetch_order(ctx, order_id)),
        Parallel {
            Operation(reserve_stock(ctx, &order)),
            Operation(notify(ctx, order.id)),
            Operation(archive(order.clone())),
        },
    }
}

// ---- docs/dsl.md, block 21
pub async fn pay_by_card(order: &Order) -> Result<Receipt, ShopError> {
    Ok(Receipt { order_id: order.id, amount: order.total })
}
pub async fn pay_by_invoice(order: &Order) -> Result<Receipt, ShopError> {
    Ok(Receipt { order_id: order.id, amount: order.total })
}
pub async fn confirm_payment(_ctx: &AppCtx, receipt: Option<&Receipt>) -> Result<(), ShopError> {
    let _ = receipt.map(|r| r.amount);
    Ok(())
}

workflow! {
    /// Charges the card or falls back to an invoice, then confirms whichever happened.
    pub Settle(ctx: &AppCtx, order_id: u64) {
        order = Operation(fetch_order(ctx, order_id)),
        risk = Operation(score_risk(&order)),
        Conditional(risk.is_ok_and(|r| r.score < 0.8)) {
            card = Operation(pay_by_card(&order)),
        } else {
            invoice = Operation(pay_by_invoice(&order)),
        },
        // `card` and `invoice` are `Option<&Receipt>` here.
        Operation(confirm_payment(ctx, card.or(invoice))),
    }
}

// ---- docs/dsl.md, block 22
pub async fn step(n: u64) -> Result<u64, Infallible> { Ok(n) }
pub async fn add(a: &u64, b: &u64) -> Result<u64, Infallible> { Ok(a + b) }

workflow! {
    /// Step 4 needs 1 and 2 only; the long steps 3 and 5 run on beside it.
    pub Pattern() {
        Parallel {
            Sequential { one = Operation(step(1)), Operation(step(3 + one)) },
            Sequential { two = Operation(step(2)), Operation(step(5 + two)) },
            // `after` makes `one` and `two` readable here: they are sure to be done.
            Operation(add(&one, &two), after = [one, two]),
        }
    }
}

// ---- docs/dsl.md, block 23
workflow! {
    /// Scores an order with a flaky service: 2 retries, 50 ms then 100 ms apart, 1 s in all.
    pub Resilient(ctx: &AppCtx, order_id: u64) -> f64 {
        order = Operation(fetch_order(ctx, order_id), timeout = "200ms"),
        risk = Operation(
            score_risk(&order),
            timeout = "250ms",
            retries = 2,
            backoff = exponential("50ms", "1s"),
            jitter = false,
            deadline = "1s",
        )
        => risk.score
    }
}

// ---- docs/dsl.md, block 24
workflow! {
    /// Notifies twice; stops everything at the first uncaught failure.
    #[flow(failure = FailFast)]
    pub NotifyTwice(ctx: &AppCtx) {
        Parallel {
            Operation(notify(ctx, 1)),
            Operation(notify(ctx, 2)),
        }
    }
}

// ---- docs/dsl.md, block 25
workflow! {
    /// Releases the reservation whether or not the charge went through; reports a failure.
    pub ChargeOnce(ctx: &AppCtx, order_id: u64) {
        order = Operation(fetch_order(ctx, order_id)),
        stock = Operation(reserve_stock(ctx, &order)),
        receipt = Operation(charge(&order, &stock)),
        Parallel {
            Operation(notify(ctx, stock.map_or(0, |s| s.order_id)), when = all_done),
            Operation(notify(ctx, order_id), when = one_failed),
        },
    }
}

// ---- docs/dsl.md, block 26
workflow! {
    /// Two postings that must not interleave, beside an independent notification.
    pub Postings(ctx: &AppCtx) {
        Parallel {
            Sequential(exclusive = "ledger") {
                first = Operation(fetch_order(ctx, 1)),
                Operation(reserve_stock(ctx, &first)),
            },
            Operation(fetch_order(ctx, 2), exclusive = "ledger"),
            Operation(notify(ctx, 3)),
        }
    }
}

// ---- docs/dsl.md, block 27
workflow! {
    /// Reserves, charges, then scores the risk; when scoring fails, the charge is undone, then
    /// the reservation (a notification stands for the refund and for the release here).
    pub Undone(ctx: &AppCtx, order_id: u64) {
        Sequential {
            order = Operation(fetch_order(ctx, order_id)),
            stock = Operation(reserve_stock(ctx, &order), compensate = notify(ctx, stock.order_id)),
            receipt = Operation(
                charge(&order, &stock),
                retries = 3,
                compensate = notify(ctx, receipt.order_id),
            ),
            Operation(score_risk(&order)),
        }
    }
}

// ---- docs/dsl.md, block 28
pub struct Client;
impl Client {
    pub async fn get(&self, id: u64) -> Result<u64, ShopError> { Ok(id) }
}

workflow! {
    /// Calls a method, and an async block.
    pub Calls(client: &Client) -> u64 {
        id = Operation(client.get(7)),
        double = Operation(async { Ok::<_, Infallible>(id * 2) })
        => double
    }
}

// ---- docs/dsl.md, block 29
#[operation(name = "charge card", timeout = "2s")]
pub async fn charge_card(order: &Order, stock: &Reservation) -> Result<Receipt, ShopError> {
    charge(order, stock).await
}

workflow! {
    /// Charges an order: the step inherits the 2s timeout of `charge_card`.
    pub Pay(ctx: &AppCtx, order_id: u64) -> Receipt {
        order = Operation(fetch_order(ctx, order_id)),
        stock = Operation(reserve_stock(ctx, &order)),
        receipt = Operation(charge_card(&order, &stock))
        => receipt.clone()
    }
}

// ---- docs/dsl.md, block 30
workflow! {
    /// Rejects orders whose risk is high or could not be scored in time.
    pub Screen(ctx: &AppCtx, order_id: u64) {
        order = Operation(fetch_order(ctx, order_id)),
        risk = Operation(score_risk(&order), timeout = "500ms"),
        Conditional(
            risk.is_err_and(|e| matches!(e, NodeError::TimedOut(_)))
                || risk.is_ok_and(|r| r.score >= 0.8)
        ) {
            Operation(reject(ctx, &order)),
        },
    }
}

// ---- docs/dsl.md, block 31
workflow! {
    /// Charges an order and returns the receipt, if the risk was low.
    pub Receipted(ctx: &AppCtx, order_id: u64) -> (u64, Option<Receipt>) {
        order = Operation(fetch_order(ctx, order_id)),
        stock = Operation(reserve_stock(ctx, &order)),
        risk = Operation(score_risk(&order)),
        Conditional(risk.is_ok_and(|r| r.score < 0.8)) {
            receipt = Operation(charge(&order, &stock)),
        },
        Operation(notify(ctx, order_id)),
        // `receipt` is in a branch and `order`, `stock` sit upstream of the tested `risk`:
        // all three are `Option<&T>` here. `order_id` is a parameter: a `u64`.
        => (order.map_or(order_id, |o| o.id), receipt.cloned())
    }
}

// ---- docs/dsl.md, block 32
use std::num::NonZeroUsize;
use std::time::Duration;

pub async fn demo(ctx: &AppCtx) -> Result<(), WorkflowError> {
    let receipt: Option<Receipt> = Checkout::run(ctx, 42).await?;
    assert!(receipt.is_some());

    let token = CancelToken::new();
    let outcome = Checkout::runner()
        .max_concurrency(NonZeroUsize::MIN)
        .failure_policy(FailurePolicy::FailFast)
        .cancel_on(token.clone())
        .deadline(Duration::from_secs(5))
        .execute((ctx, 42))
        .await;
    assert_eq!(outcome.report.status("reject"), Some(NodeStatus::Skipped));
    println!("{}", outcome.report);
    println!("{}", Checkout::GRAPH.to_mermaid());
    outcome.result.map(drop)
}

// The `main` of tests/ui-pass/dsl-reference.rs: runs the workflows of docs/dsl.md.

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let ctx = AppCtx;
    demo(&ctx).await.expect("demo");
    assert_eq!(OrderTotal::run(&ctx, 3).await.expect("total"), 4200);
    Notify::run(&ctx, 1).await.expect("notify");
    NotifyAll::run(&ctx).await.expect("notifyall");
    MaybeNotify::run(&ctx, 1).await.expect("maybe");
    Reads::run(&ctx, 1).await.expect("reads");
    Pattern::run().await.expect("pattern");
    assert_eq!(Calls::run(&Client).await.expect("calls"), 14);
    let o = Pay::runner().execute((&ctx, 5)).await;
    println!("{:?}", o.report.nodes());
    assert_eq!(o.report.nodes()[2].operation, Some("charge card"));
    Screen::run(&ctx, 1).await.expect("screen");
    let (id, r) = Receipted::run(&ctx, 9).await.expect("receipted");
    assert_eq!(id, 9); assert!(r.is_some());
    println!("{}", Checkout::GRAPH);
    println!("{}", Pattern::GRAPH);
    println!("{}", Calls::GRAPH);
    Settle::run(&ctx, 4).await.expect("settle");
    more().await;
    generic().await;
    println!("all ok");
}
#[allow(dead_code)]
async fn more() {
    let ctx = AppCtx;
    assert_eq!(Resilient::run(&ctx, 1).await.expect("resilient"), 0.1);
    NotifyTwice::run(&ctx).await.expect("twice");
    assert_eq!(Reserve::run(&ctx, 7, false).await.expect("reserve"), Some(7));
    assert_eq!(Reserve::run(&ctx, 7, true).await.expect("cancelled"), None);
    assert_eq!(Quote::run(&ctx, 1).await.expect("quote"), 4200);
    assert_eq!(ChargeAll::run(&ctx, &[1, 2]).await.expect("charge all"), [4200, 4200]);
    assert!(QuickQuote::run(&ctx, &[1, 2]).await.expect("quick quote") <= 2);
    assert_eq!(AwaitShipping::run(&ctx, 1).await.expect("shipping"), 3);
    assert_eq!(FirstLarge::run(&ctx).await.expect("first large"), 0);
    assert_eq!(CheckoutAndNotify::run(&ctx, 2).await.expect("checkout"), Some(4200));
    println!("more ok");
}
#[allow(dead_code)]
async fn generic() {
    let ctx = AppCtx;
    let orders = vec![Order { id: 1, total: 5 }, Order { id: 2, total: 9 }];
    let top = Largest::run(&orders, &ctx).await.expect("largest");
    assert!(std::ptr::eq(top, &orders[1]));
    assert_eq!(First::run(&[4, 5]).await.expect("first"), 4);
    let outcome = First::runner().execute(&["a", "b"]).await;
    assert_eq!(outcome.result.expect("first"), "a");
    assert_eq!(First::<String>::GRAPH.name(), "First");
    println!("generic ok");
}
