//! Two ways to beat a slow replica.
//!
//! - A **hedged request**: the same read goes to two replicas at once, the first answer wins, and
//!   the other request is withdrawn (its future dropped at once, its step marked `withdrawn`).
//! - A **quorum read**: the read goes to three replicas and the workflow goes on as soon as two
//!   answered; the third is withdrawn.
//!
//! `cargo run --example hedged`

use std::fmt;
use std::time::Duration;

use flowdag::prelude::*;

/// An error from a replica.
#[derive(Debug)]
struct ReplicaError(String);

impl fmt::Display for ReplicaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ReplicaError {}

/// Reads `key` from `replica`, which answers after `ms` milliseconds.
async fn read(replica: &str, key: &str, ms: u64) -> Result<String, ReplicaError> {
    tokio::time::sleep(Duration::from_millis(ms)).await;
    Ok(format!("{key}=42 (from {replica})"))
}

/// A replica that is down.
async fn read_down(replica: &str, key: &str) -> Result<String, ReplicaError> {
    tokio::time::sleep(Duration::from_millis(5)).await;
    Err(ReplicaError(format!(
        "{replica}: connection refused reading {key}"
    )))
}

workflow! {
    /// Reads `key` from whichever of two replicas answers first.
    Hedged(key: &str) -> String {
        won = Race {
            eu = Operation(read("eu-west", key, 40)),
            us = Operation(read("us-east", key, 15)),
        }
        // After the race, each branch's node reads as `Option<&T>`; `won` says which one won.
        => {
            let (arm, answer) = (won, eu.or(us).map_or("?", String::as_str));
            format!("arm {arm} won: {answer}")
        }
    }
}

workflow! {
    /// Reads `key` from three replicas and goes on when two of them answered. A replica that
    /// fails does not count; the quorum fails at once when two answers are out of reach.
    Quorum(key: &str) -> Vec<String> {
        got = Parallel(min = 2, rest = cancel) {
            r1 = Operation(read("r1", key, 10)),
            r2 = Operation(read("r2", key, 300)),
            r3 = Operation(read("r3", key, 20)),
        }
        // `got` lists the arms that answered, in the order they did.
        => got.iter().filter_map(|&arm| [r1, r2, r3][arm].cloned()).collect()
    }
}

workflow! {
    /// The same quorum when one replica is down and another is slow: the failure does not
    /// count, and the quorum still goes on with the two that answered.
    DegradedQuorum(key: &str) -> Vec<String> {
        Parallel(min = 2) {
            r1 = Operation(read("r1", key, 10)),
            r2 = Operation(read_down("r2", key)),
            r3 = Operation(read("r3", key, 60)),
        }
        => [r1, r2, r3].into_iter().flatten().cloned().collect()
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let outcome = Hedged::runner().execute("user:7").await;
    println!("{}", outcome.report);
    match &outcome.result {
        Ok(answer) => println!("hedged read: {answer}\n"),
        Err(error) => println!("hedged read failed: {error}\n"),
    }

    let outcome = Quorum::runner().execute("user:7").await;
    println!("{}", outcome.report);
    match &outcome.result {
        Ok(answers) => println!("quorum read: {answers:?}\n"),
        Err(error) => println!("quorum read failed: {error}\n"),
    }

    let outcome = DegradedQuorum::runner().execute("user:7").await;
    println!("{}", outcome.report);
    match &outcome.result {
        Ok(answers) => println!("degraded quorum read: {answers:?}"),
        Err(error) => println!("degraded quorum read failed: {error}"),
    }
}
