//! Continue as new: a run that follows a feed reads it three pages per generation, then starts
//! again under the same id from where it got to, with an empty journal, until the feed ends.
//! Each ended generation is kept as a run of its own (`feed-1~1`, `feed-1~2`, …) with the
//! status `continued`; the run's own journal is never longer than one generation's.
//!
//! ```text
//! cargo run -p flow-durable --example feed
//! cargo run -p flowdag-cli -- runs target/feed/feed.db          # the run and its generations
//! cargo run -p flowdag-cli -- show target/feed/feed.db feed-1~2  # one generation's journal
//! ```
//!
//! In your own crate these items are `flowdag::durable::Continue`, `flowdag::store` (feature
//! `durable` of `flowdag`) and `flowdag_sqlite::SqliteStore`.

use std::path::PathBuf;
use std::process::ExitCode;

use flowdag::durable::Continue;
use flowdag::prelude::*;
use flowdag::store::{RunFilter, Store};
use flowdag_sqlite::SqliteStore;
use serde::{Deserialize, Serialize};

/// How many items the feed has.
const FEED: u64 = 20;

/// How many items a poll reads at most.
const PAGE: u64 = 3;

#[derive(Debug)]
struct Unreachable;

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the feed cannot be reached")
    }
}

impl std::error::Error for Unreachable {}

/// What a poll read: where the next one starts, how many items were read in all, and whether
/// the feed ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Page {
    cursor: u64,
    read: u64,
    end: bool,
}

/// Reads the next page of the feed, after `at` (the previous poll of this generation) or from
/// the generation's `cursor`.
async fn poll(cursor: u64, read: u64, at: Option<&Page>) -> Result<Page, Unreachable> {
    let (from, read) = at.map_or((cursor, read), |p| (p.cursor, p.read));
    let to = (from + PAGE).min(FEED);
    println!("  poll items {from}..{to}");
    Ok(Page {
        cursor: to,
        read: read + (to - from),
        end: to == FEED,
    })
}

workflow! {
    /// Follows the feed from `cursor`: three polls per generation, then again from where they
    /// got to, until the feed ends; gives how many items were read.
    #[flow(durable, continue_as_new)]
    Follow(cursor: u64, read: u64) -> Continue<(u64, u64), u64> {
        Sequential {
            last = Loop(max = 3, prev = at, on_max = stop) {
                page = Operation(poll(cursor, read, at)),
                => page.clone()
            } until (page.end),
        }
        => match last.end {
            true => Continue::Done(last.read),
            false => Continue::Again((last.cursor, last.read)),
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/feed");
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(error) = std::fs::create_dir_all(&dir) {
        eprintln!("cannot make {}: {error}", dir.display());
        return ExitCode::FAILURE;
    }
    let store = match SqliteStore::open(dir.join("feed.db")) {
        Ok(store) => store,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::FAILURE;
        }
    };
    println!("following the feed ({FEED} items, {PAGE} a poll, 3 polls a generation):");
    let outcome = match Follow::runner()
        .durable(&store, "feed-1")
        .execute((0, 0))
        .await
    {
        Ok(outcome) => outcome,
        Err(error) => {
            eprintln!("the run stopped: {error}");
            return ExitCode::FAILURE;
        }
    };
    let read = match outcome.result {
        Ok(Continue::Done(read)) => read,
        other => {
            eprintln!("the run did not end with Done: {other:?}");
            return ExitCode::FAILURE;
        }
    };
    println!("read {read} items");
    let runs = match store.list_runs(&RunFilter::default()).await {
        Ok(runs) => runs,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::FAILURE;
        }
    };
    println!("\nthe store holds:");
    for run in &runs {
        let events = store.events(&run.id, 0).await.map_or(0, |e| e.len());
        println!("  {:<10} {:<10} {events} events", run.id, run.status);
    }
    // 20 items, 9 a generation: three generations, the first two kept.
    let ok = read == FEED && runs.len() == 3;
    if !ok {
        eprintln!("expected {FEED} items read and 3 runs");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
