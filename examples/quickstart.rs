//! Quickstart: load a user and their orders at the same time, then summarise them.
//!
//! ```text
//! cargo run --example quickstart
//! ```
//!
//! The two fetches do not depend on each other, so they sit in a `Parallel` block and run
//! concurrently; the summary reads both, so it comes after them in a `Sequential`. The example
//! prints the summary, the report of every node, what a failed run looks like, and the static
//! graph that `workflow!` built at compile time.

use std::convert::Infallible;
use std::fmt;
use std::time::Duration;

use flowdag::prelude::*;
use tokio::time::{Instant, sleep};

// ----- The domain: plain types and plain async functions, nothing flow-specific. -----

#[derive(Debug, Clone)]
struct User {
    id: u64,
    name: String,
}

#[derive(Debug, Clone)]
struct Order {
    id: u64,
    total_cents: u64,
}

/// What the workflow returns. Public, as the output type of a `pub` workflow must be: it is
/// part of the workflow's `Workflow` impl.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    name: String,
    orders: usize,
    spent_cents: u64,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (euros, cents) = (self.spent_cents / 100, self.spent_cents % 100);
        write!(
            f,
            "{} placed {} orders for {euros}.{cents:02} EUR",
            self.name, self.orders
        )
    }
}

/// The error of our pretend database. Operations may return any `std::error::Error`.
#[derive(Debug)]
struct NotFound(u64);

impl fmt::Display for NotFound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no user with id {}", self.0)
    }
}

impl std::error::Error for NotFound {}

/// Pretends to query the users table (30 ms).
async fn fetch_user(id: u64) -> Result<User, NotFound> {
    sleep(Duration::from_millis(30)).await;
    match id {
        7 => Ok(User {
            id,
            name: "Ada".to_string(),
        }),
        _ => Err(NotFound(id)),
    }
}

/// Pretends to query the orders service (50 ms).
async fn fetch_orders(user_id: u64) -> Result<Vec<Order>, NotFound> {
    sleep(Duration::from_millis(50)).await;
    Ok(match user_id {
        7 => vec![
            Order {
                id: 1001,
                total_cents: 1250,
            },
            Order {
                id: 1002,
                total_cents: 4999,
            },
            Order {
                id: 1003,
                total_cents: 800,
            },
        ],
        _ => Vec::new(),
    })
}

/// Combines both results. It cannot fail, so its error type is `Infallible`.
async fn summarize(user: &User, orders: &[Order]) -> Result<Summary, Infallible> {
    println!(
        "  summarizing user {} with orders {:?}",
        user.id,
        orders.iter().map(|o| o.id).collect::<Vec<_>>()
    );
    Ok(Summary {
        name: user.name.clone(),
        orders: orders.len(),
        spent_cents: orders.iter().map(|o| o.total_cents).sum(),
    })
}

// ----- The workflow. -----

workflow! {
    /// Loads a user and their orders in parallel, then summarises them.
    pub UserSummary(user_id: u64) -> Summary {
        Sequential {
            Parallel {
                // `user_id` is a parameter: it reads like a `u64` here.
                user = Operation(fetch_user(user_id)),
                orders = Operation(fetch_orders(user_id)),
            },
            // Naming `user` and `orders` makes data edges: this step waits for both and
            // borrows their outputs (`&user` is a `&User`, `&orders` a `&Vec<Order>`).
            summary = Operation(summarize(&user, &orders)),
        }
        // The output expression reads node outputs by reference: clone what you return.
        => summary.clone()
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // The runner gives the result together with a report of every node.
    let started = Instant::now();
    let outcome = UserSummary::runner().execute(7).await;
    match &outcome.result {
        Ok(summary) => println!("summary: {summary}"),
        Err(error) => println!("error: {error}"),
    }
    // Both fetches ran at once: about 50 ms, not 30 + 50.
    println!("took {} ms\n", started.elapsed().as_millis());
    println!("{}", outcome.report);

    // The plain call returns the output, or a `WorkflowError` naming every failed node: here
    // `user` fails, so `summary` never runs and is aborted.
    match UserSummary::run(404).await {
        Ok(summary) => println!("user 404: {summary}"),
        Err(error) => println!("user 404: {error}\n"),
    }

    // The graph is a constant built at compile time: as text, and as Mermaid for Markdown.
    println!("{}", UserSummary::GRAPH);
    println!("{}", UserSummary::GRAPH.to_mermaid());
}
