//! An order checkout with a decision: charge the card when the risk is low, reject otherwise.
//!
//! ```text
//! cargo run --example checkout
//! ```
//!
//! The workflow fetches the order, then reserves stock and scores the fraud risk at the same
//! time, then a `Conditional` picks a branch: charge the card, or reject the order. It runs
//! twice, for a low-risk and a high-risk order, and prints each result and report: the branch
//! not taken is `skipped`.
//!
//! The payment gateway drops the first request; `charge` is declared with `retries = 2`, so the
//! first checkout succeeds on its second attempt, which the report shows.
//!
//! The test `risk.is_ok_and(..)` sees `risk` as a `Result<&Risk, &NodeError>`, so a failed or
//! timed-out risk service does not abort the checkout: the test is false and the order is
//! rejected. The Conditional is an error boundary.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use flowdag::prelude::*;
use tokio::time::sleep;

// ----- The domain. -----

#[derive(Debug, Clone)]
struct Order {
    id: u64,
    customer: String,
    item: &'static str,
    quantity: u32,
    total_cents: u64,
}

#[derive(Debug, Clone)]
struct Reservation {
    item: &'static str,
    quantity: u32,
}

#[derive(Debug, Clone, Copy)]
struct Risk {
    score: f64,
}

/// Proof of a charged order.
#[derive(Debug, Clone, PartialEq)]
pub struct Receipt {
    order_id: u64,
    amount_cents: u64,
}

/// Everything that can go wrong in the shop.
#[derive(Debug)]
enum ShopError {
    NoSuchOrder(u64),
    OutOfStock(&'static str),
}

impl fmt::Display for ShopError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShopError::NoSuchOrder(id) => write!(f, "no order {id}"),
            ShopError::OutOfStock(item) => write!(f, "{item} is out of stock"),
        }
    }
}

impl std::error::Error for ShopError {}

/// The shop's state, shared by reference with every step of a run.
pub struct Shop {
    name: &'static str,
    orders: HashMap<u64, Order>,
    stock: HashMap<&'static str, u32>,
}

impl Shop {
    fn new() -> Self {
        let order = |id, customer: &str, item, quantity, total_cents| Order {
            id,
            customer: customer.to_string(),
            item,
            quantity,
            total_cents,
        };
        Shop {
            name: "shop.example",
            orders: HashMap::from([
                (1, order(1, "Grace", "keyboard", 1, 8900)),
                (2, order(2, "Mallory", "laptop", 3, 749_700)),
            ]),
            stock: HashMap::from([("keyboard", 12), ("laptop", 5)]),
        }
    }
}

// ----- The operations: ordinary async fns. -----

async fn fetch_order(shop: &Shop, id: u64) -> Result<Order, ShopError> {
    sleep(Duration::from_millis(20)).await;
    shop.orders
        .get(&id)
        .cloned()
        .ok_or(ShopError::NoSuchOrder(id))
}

async fn reserve_stock(shop: &Shop, order: &Order) -> Result<Reservation, ShopError> {
    sleep(Duration::from_millis(40)).await;
    match shop.stock.get(order.item) {
        Some(&available) if available >= order.quantity => Ok(Reservation {
            item: order.item,
            quantity: order.quantity,
        }),
        _ => Err(ShopError::OutOfStock(order.item)),
    }
}

/// A pretend fraud model: big orders look risky.
async fn score_risk(order: &Order) -> Result<Risk, ShopError> {
    sleep(Duration::from_millis(60)).await;
    let score = if order.total_cents > 100_000 {
        0.93
    } else {
        0.12
    };
    Ok(Risk { score })
}

/// Declines an order: gives the reserved items back and tells the customer.
async fn reject(shop: &Shop, order: &Order, stock: &Reservation) -> Result<(), ShopError> {
    println!("  released {} x {}", stock.quantity, stock.item);
    println!(
        "  email from {} to {}: order {} was declined",
        shop.name, order.customer, order.id
    );
    Ok(())
}

/// The payment provider, in its own module: steps may call functions by path.
mod payments {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::{Order, Receipt, Reservation};
    use flowdag::prelude::*;

    /// How many requests the gateway will still drop: it drops the first one it gets, a
    /// transient failure that a retry gets past.
    static DROPS_LEFT: AtomicU32 = AtomicU32::new(1);

    /// Why a payment failed.
    #[derive(Debug)]
    pub struct PaymentError(pub String);

    impl std::fmt::Display for PaymentError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "payment failed: {}", self.0)
        }
    }

    impl std::error::Error for PaymentError {}

    /// Charges the customer's card for a reserved order.
    ///
    /// `#[operation]` leaves the signature alone (this is still a plain async fn); it gives the
    /// operation a display name for reports, and defaults that steps calling it inherit: a
    /// timeout per attempt, and two retries 100 ms apart.
    #[operation(name = "charge card", timeout = "2s", retries = 2, backoff = "100ms")]
    pub async fn charge(order: &Order, stock: &Reservation) -> Result<Receipt, PaymentError> {
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        let dropped =
            DROPS_LEFT.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if dropped.is_ok() {
            return Err(PaymentError("the gateway did not answer".to_string()));
        }
        println!(
            "  charged {} for {} x {}",
            order.customer, stock.quantity, stock.item
        );
        Ok(Receipt {
            order_id: order.id,
            amount_cents: order.total_cents,
        })
    }
}

// ----- The workflow. -----

workflow! {
    /// Checks out one order: charge it if the risk is low, reject it otherwise.
    pub Checkout(shop: &Shop, order_id: u64) -> Option<Receipt> {
        Sequential {
            order = Operation(fetch_order(shop, order_id)),
            // Both read `order`; neither reads the other, so they run at the same time.
            Parallel {
                stock = Operation(reserve_stock(shop, &order)),
                risk = Operation(score_risk(&order), timeout = "500ms"),
            },
            // In the test, `risk` is a `Result<&Risk, &NodeError>`.
            Conditional(risk.is_ok_and(|r| r.score < 0.8)) {
                receipt = Operation(payments::charge(&order, &stock)),
            } else {
                // Unnamed: reports call it after the function, `reject`.
                Operation(reject(shop, &order, &stock)),
            },
        }
        // `receipt` is in a branch, so it may be skipped: here it is an `Option<&Receipt>`.
        => receipt.cloned()
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let shop = Shop::new();

    for order_id in [1, 2] {
        println!("order {order_id}:");
        let outcome = Checkout::runner().execute((&shop, order_id)).await;
        match &outcome.result {
            Ok(Some(receipt)) => println!(
                "  result: receipt for order {}, {} cents",
                receipt.order_id, receipt.amount_cents
            ),
            Ok(None) => println!("  result: rejected, nothing charged"),
            Err(error) => println!("  result: {error}"),
        }
        println!("\n{}", outcome.report);
        // A node that ran an `#[operation]` reports the operation's display name, and every
        // node its attempts and the errors of the attempts that were retried.
        for node in outcome.report.nodes() {
            if let Some(operation) = node.operation {
                println!(
                    "`{}` ran the operation \"{operation}\" in {} attempt(s); retried after: {:?}\n",
                    node.name, node.attempts, node.failed_attempts
                );
            }
        }
    }

    println!("{}", Checkout::GRAPH);
}
