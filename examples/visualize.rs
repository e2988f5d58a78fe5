//! Writes pictures of a workflow and of one run of it: the graph (SVG when Graphviz's `dot` is
//! installed, DOT otherwise), the run coloured by status, a timeline (SVG, Chrome trace JSON for
//! Perfetto, Mermaid gantt) and the report.
//!
//! `cargo run --example visualize [-- OUT_DIR]` (default `target/visualize`)

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use flowdag::prelude::*;

/// Why a step of the order flow failed.
#[derive(Debug)]
struct StepError(&'static str);

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for StepError {}

async fn wait(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// Loads an order.
async fn fetch_order(id: u64) -> Result<u64, StepError> {
    wait(20).await;
    Ok(id)
}

/// Reserves stock; slow.
async fn reserve_stock(order: &u64) -> Result<u64, StepError> {
    wait(60).await;
    Ok(*order)
}

/// Scores fraud risk; the scoring service is down.
async fn score_risk(_order: &u64) -> Result<f64, StepError> {
    wait(30).await;
    Err(StepError("risk service unavailable"))
}

/// Charges the card.
async fn charge(order: &u64) -> Result<u64, StepError> {
    wait(40).await;
    Ok(*order)
}

/// Queues the order for manual review.
async fn manual_review(order: &u64) -> Result<u64, StepError> {
    wait(25).await;
    Ok(*order)
}

/// Sends a confirmation.
async fn confirm(order: &u64) -> Result<(), StepError> {
    wait(10).await;
    let _ = order;
    Ok(())
}

workflow! {
    /// An order flow whose risk check fails and is caught: the order goes to manual review.
    Order(id: u64) {
        Sequential {
            order = Operation(fetch_order(id)),
            Parallel {
                stock = Operation(reserve_stock(&order)),
                risk = Operation(score_risk(&order)),
            },
            Conditional(risk.is_ok_and(|r| *r < 0.8)) {
                paid = Operation(charge(&order)),
            } else {
                review = Operation(manual_review(&order)),
            },
            Operation(confirm(&order), after = [stock]),
        }
    }
}

fn write(path: &Path, contents: &str) -> std::io::Result<()> {
    std::fs::write(path, contents)?;
    println!("wrote {}", path.display());
    Ok(())
}

/// Renders DOT to SVG with Graphviz; writes the DOT itself when `dot` is missing.
fn render(dot: &str, out: &Path, name: &str) -> std::io::Result<()> {
    let svg = out.join(format!("{name}.svg"));
    let child = Command::new("dot")
        .args(["-Tsvg", "-o"])
        .arg(&svg)
        .stdin(Stdio::piped())
        .spawn();
    match child {
        Ok(mut child) => {
            if let Some(stdin) = child.stdin.as_mut() {
                std::io::Write::write_all(stdin, dot.as_bytes())?;
            }
            let status = child.wait()?;
            if status.success() {
                println!("wrote {} (Graphviz)", svg.display());
                return Ok(());
            }
            Err(std::io::Error::other(format!(
                "dot failed on {name}: {status}"
            )))
        }
        Err(_) => {
            println!("Graphviz `dot` not found: writing DOT instead");
            write(&out.join(format!("{name}.dot")), dot)
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let out: PathBuf = std::env::args_os()
        .nth(1)
        .map_or_else(|| PathBuf::from("target/visualize"), PathBuf::from);
    std::fs::create_dir_all(&out)?;

    let outcome = Order::runner().execute(42).await;
    println!("{}", outcome.report);
    println!("result: {:?}", outcome.result.as_ref().map(|_| "ok"));

    render(&Order::GRAPH.to_dot(), &out, "order-graph")?;
    render(&outcome.report.to_dot(), &out, "order-run")?;
    write(
        &out.join("order-timeline.svg"),
        &outcome.report.to_svg_timeline(),
    )?;
    write(
        &out.join("order-trace.json"),
        &outcome.report.to_chrome_trace(),
    )?;
    write(
        &out.join("order-gantt.mmd"),
        &outcome.report.to_mermaid_gantt(),
    )?;
    write(&out.join("order-report.txt"), &outcome.report.to_string())?;
    write(
        &out.join("order-trace-matrix.txt"),
        &outcome.report.trace_matrix().to_string(),
    )?;
    Ok(())
}
