//! `flowdag::Progress` in a run with nest instances: the instances' runs tick the bar once each
//! and never reset or finish it, and `Progress::instances` counts the instances of one
//! `ForEach`.

mod common;

use std::sync::{Arc, Mutex};

use flowdag::prelude::*;
use flowdag::{Event, EventKind, Observer};

use common::Boom;

async fn load(count: u32) -> Result<Vec<u32>, Boom> {
    Ok((0..count).collect())
}

async fn check(n: u32) -> Result<u32, Boom> {
    tokio::task::yield_now().await;
    if n == 2 { Err(Boom("two")) } else { Ok(n) }
}

async fn total(checked: &[Result<u32, WorkflowError>]) -> Result<u32, Boom> {
    Ok(checked.iter().filter_map(|r| r.as_ref().ok()).sum())
}

workflow! {
    /// Three nodes; the ForEach runs five instances, of which `each[2]` fails.
    Checked(count: u32) -> u32 {
        Sequential {
            items = Operation(load(count)),
            each = ForEach(n in items.clone(), max_concurrency = 2, on_failure = collect) {
                c = Operation(check(n)) => c
            },
            sum = Operation(total(&each)),
        }
        => sum
    }
}

#[tokio::test]
async fn the_default_bar_counts_the_runs_nodes_and_its_foreachs_instances() {
    let progress = flowdag::Progress::with_bar(flowdag::ProgressBar::hidden());
    let bar = progress.bar().clone();
    let outcome = Checked::runner().observer(progress).execute(5).await;
    assert_eq!(outcome.result.ok(), Some(8));
    // Three nodes and five instances, not the instances' own nodes; the instances' runs
    // neither reset the bar (nor its prefix) nor finish it.
    assert_eq!(bar.length(), Some(3 + 5));
    assert_eq!(bar.position(), 3 + 5);
    assert_eq!(bar.prefix(), "Checked");
    assert!(bar.is_finished());
    assert_eq!(bar.message(), "done, 1 instance(s) failed");
}

/// Hands each event to `progress` and records the bar's position after each instance's end.
struct Watch {
    progress: flowdag::Progress,
    positions: Arc<Mutex<Vec<u64>>>,
}

impl Observer for Watch {
    fn on_event(&self, event: &Event) {
        self.progress.on_event(event);
        let instance_ended = event.path.is_some()
            && event.node.is_none()
            && matches!(event.kind, EventKind::RunFinished { .. });
        if instance_ended && let Ok(mut positions) = self.positions.lock() {
            positions.push(self.progress.bar().position());
        }
    }
}

#[tokio::test]
async fn instances_counts_the_instances_of_the_named_foreach() {
    let progress = flowdag::Progress::instances_with_bar(flowdag::ProgressBar::hidden(), "each", 5);
    let bar = progress.bar().clone();
    let positions = Arc::new(Mutex::new(Vec::new()));
    let watch = Watch {
        progress,
        positions: positions.clone(),
    };
    let outcome = Checked::runner().observer(watch).execute(5).await;
    assert_eq!(outcome.result.ok(), Some(8));
    assert_eq!(*positions.lock().expect("not poisoned"), [1, 2, 3, 4, 5]);
    assert_eq!(bar.length(), Some(5));
    assert!(bar.is_finished());
    assert_eq!(bar.message(), "done, 1 instance(s) failed");
}
