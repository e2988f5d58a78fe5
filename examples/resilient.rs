//! What `flow` does when things go wrong: a flaky service retried with backoff, a slow one cut
//! off by a timeout, a panic contained in its step, and a failure caught by a `Conditional` that
//! takes a fallback path. The run still succeeds, and the report says what happened to each step.
//!
//! `cargo run --example resilient`

use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use flowdag::prelude::*;

/// An error from one of the pretend services.
#[derive(Debug)]
struct ServiceError(String);

impl fmt::Display for ServiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ServiceError {}

static INVENTORY_CALLS: AtomicU32 = AtomicU32::new(0);

/// The inventory service drops the first two requests, then answers.
#[operation(name = "inventory lookup", retries = 3, backoff = exponential("20ms", "200ms"))]
async fn inventory(sku: &str) -> Result<u32, ServiceError> {
    let call = INVENTORY_CALLS.fetch_add(1, Ordering::Relaxed) + 1;
    tokio::time::sleep(Duration::from_millis(10)).await;
    if call < 3 {
        return Err(ServiceError(format!("connection reset (call {call})")));
    }
    Ok(if sku == "espresso-machine" { 4 } else { 0 })
}

/// The recommendation service hangs; its step gives up after 100 ms.
async fn recommendations(sku: &str) -> Result<Vec<String>, ServiceError> {
    tokio::time::sleep(Duration::from_secs(30)).await;
    Ok(vec![format!("{sku}-descaler")])
}

/// A buggy price formatter that panics on this input.
async fn format_price(cents: u64) -> Result<String, ServiceError> {
    if cents % 100 == 99 {
        panic!("price formatter cannot handle {cents} cents");
    }
    Ok(format!("{}.{:02}", cents / 100, cents % 100))
}

/// The primary shipping quote service is down.
async fn shipping_quote(_sku: &str) -> Result<u64, ServiceError> {
    tokio::time::sleep(Duration::from_millis(15)).await;
    Err(ServiceError(
        "quote service: 503 Service Unavailable".into(),
    ))
}

/// A flat-rate fallback when no quote is available.
async fn flat_rate() -> Result<u64, ServiceError> {
    Ok(599)
}

/// Uses the live quote.
async fn use_quote(quote: &u64) -> Result<u64, ServiceError> {
    Ok(*quote)
}

/// The first three recommendations.
async fn top3(recs: &[String]) -> Result<Vec<String>, ServiceError> {
    Ok(recs.iter().take(3).cloned().collect())
}

/// A static list when recommendations are unavailable.
async fn bestsellers() -> Result<Vec<String>, ServiceError> {
    Ok(vec!["milk-frother".to_string(), "coffee-beans".to_string()])
}

/// Shows a formatted price.
async fn show(price: &str) -> Result<String, ServiceError> {
    Ok(price.to_string())
}

/// A placeholder when the price cannot be formatted.
async fn call_for_price() -> Result<String, ServiceError> {
    Ok("call for price".to_string())
}

/// Puts the product page together from whatever came back.
async fn render_page(
    stock: &u32,
    picks: Option<&Vec<String>>,
    price: Option<&String>,
    shipping: Option<u64>,
) -> Result<String, ServiceError> {
    Ok(format!(
        "price: {}, in stock: {stock}, shipping: {}, see also: {}",
        price.map_or("?", String::as_str),
        shipping.map_or("?".to_string(), |c| format!("{}.{:02}", c / 100, c % 100)),
        picks.map_or(String::new(), |p| p.join(", ")),
    ))
}

workflow! {
    /// Builds a product page from four services, three of which misbehave. Each failure is
    /// caught by a `Conditional` that takes a fallback, so the page is still built.
    ProductPage(sku: &str, cents: u64) -> String {
        Sequential {
            Parallel {
                // Retried by its `#[operation]` defaults until it answers.
                stock = Operation(inventory(sku)),
                Sequential {
                    // Cut off by its timeout, then replaced by a static list.
                    recs = Operation(recommendations(sku), timeout = "100ms"),
                    Conditional(recs.is_ok()) {
                        picks = Operation(top3(&recs)),
                    } else {
                        picks_fallback = Operation(bestsellers()),
                    },
                },
                Sequential {
                    // Panics; the panic fails this step only.
                    price = Operation(format_price(cents)),
                    Conditional(price.is_ok()) {
                        shown = Operation(show(&price)),
                    } else {
                        shown_fallback = Operation(call_for_price()),
                    },
                },
                Sequential {
                    // Returns an error; a flat rate replaces the quote.
                    quote = Operation(shipping_quote(sku)),
                    Conditional(quote.is_ok()) {
                        live = Operation(use_quote(&quote)),
                    } else {
                        fallback = Operation(flat_rate()),
                    },
                },
            },
            // Nodes of a branch read as `Option<&T>` after their Conditional.
            page = Operation(render_page(
                &stock,
                picks.or(picks_fallback),
                shown.or(shown_fallback),
                live.or(fallback).copied(),
            )),
        }
        => page.clone()
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // The panic below is contained in its step; print it as one line instead of the default
    // hook's message and backtrace.
    std::panic::set_hook(Box::new(|info| eprintln!("(contained in its step) {info}")));
    let outcome = ProductPage::runner()
        .execute(("espresso-machine", 129_999))
        .await;
    println!("{}", outcome.report);
    for node in outcome.report.nodes() {
        if !node.failed_attempts.is_empty() {
            println!(
                "{} retried after: {}",
                node.name,
                node.failed_attempts.join("; ")
            );
        }
    }
    match outcome.result {
        Ok(page) => println!("page: {page}"),
        Err(error) => {
            println!("the page could not be built: {error}");
            for failure in error.failures() {
                println!(
                    "  {}: {} (after {} attempt(s))",
                    failure.node, failure.error, failure.attempts
                );
            }
        }
    }
}
