//! A terminal progress bar for long runs (feature `progress`, with indicatif).

use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressStyle};

use crate::events::{Event, EventKind, Observer};

/// An [`Observer`] that drives an indicatif progress bar.
///
/// [`Progress::new`] counts the workflow's own nodes: one tick per node that settles, the last
/// failure or retry as the message, and a summary when the run ends. The events of nest
/// instances (a `ForEach`'s instances, a `Loop`'s iterations, a sub-workflow's nodes: events
/// with a [`path`](Event::path)) do not move that bar: only the nest node itself does, once,
/// when it settles.
///
/// [`Progress::instances`] counts the instances of one nest node instead: one tick per
/// instance that ended, the failed ones counted in the message. This is the bar of a run that
/// is one long `ForEach`:
///
/// ```no_run
/// # use flow_runtime::features::Progress;
/// // The bar of the nodes of the run.
/// let progress = Progress::new();
/// // Checkout::runner().observer(progress).execute(..)
///
/// // The bar of the 10,000 instances of `charged = ForEach(line in lines.iter(), ..) { .. }`.
/// let progress = Progress::instances("charged", 10_000);
/// // Batch::runner().observer(progress).execute(..)
/// ```
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
    /// The nest node whose instances the bar counts; `None`: the run's own nodes.
    nest: Option<String>,
    /// The bar's length in instances (with `nest`).
    total: u64,
    failures: Mutex<u64>,
    /// The last failure of an instance that has not ended yet (with `nest`).
    last_failure: Mutex<Option<String>>,
}

impl Progress {
    /// A progress bar on standard error (hidden when it is not a terminal) over the run's
    /// nodes.
    pub fn new() -> Self {
        Self::with_bar(ProgressBar::new(0))
    }

    /// Drives `bar` (for example a hidden one in tests, or one inside a `MultiProgress`) over
    /// the run's nodes.
    pub fn with_bar(bar: ProgressBar) -> Self {
        Self::styled(bar, None, 0)
    }

    /// A progress bar on standard error over the instances of the nest node called `node` (a
    /// `ForEach`'s items, a `Loop`'s iterations), `total` of them expected: one tick per
    /// instance that ended, completed or failed. Instances of that node inside other nests
    /// count too (the node's name is matched against the innermost step of each instance's
    /// path). An instance withdrawn before it ended does not tick; the bar finishes when the
    /// run ends.
    pub fn instances(node: impl Into<String>, total: u64) -> Self {
        Self::instances_with_bar(ProgressBar::new(total), node, total)
    }

    /// As [`Progress::instances`], driving `bar`.
    pub fn instances_with_bar(bar: ProgressBar, node: impl Into<String>, total: u64) -> Self {
        Self::styled(bar, Some(node.into()), total)
    }

    fn styled(bar: ProgressBar, nest: Option<String>, total: u64) -> Self {
        let style = ProgressStyle::with_template(
            "{prefix:.bold} [{elapsed_precise}] {wide_bar} {pos}/{len} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        if nest.is_some() {
            bar.set_length(total);
        }
        Progress {
            bar,
            nest,
            total,
            failures: Mutex::new(0),
            last_failure: Mutex::new(None),
        }
    }

    /// The bar, to read its position in tests or to style it.
    pub fn bar(&self) -> &ProgressBar {
        &self.bar
    }

    /// Counts one more failure and returns the count.
    fn failed(&self) -> u64 {
        match self.failures.lock() {
            Ok(mut failures) => {
                *failures += 1;
                *failures
            }
            Err(_) => 0,
        }
    }

    fn failures(&self) -> u64 {
        self.failures.lock().map(|f| *f).unwrap_or(0)
    }

    fn reset_failures(&self) {
        if let Ok(mut failures) = self.failures.lock() {
            *failures = 0;
        }
        if let Ok(mut last) = self.last_failure.lock() {
            *last = None;
        }
    }

    /// The run started: a fresh bar.
    fn started(&self, workflow: &'static str, nodes: u32) {
        let length = match self.nest {
            Some(_) => self.total,
            None => u64::from(nodes),
        };
        self.bar.set_length(length);
        self.bar.set_position(0);
        self.bar.set_prefix(workflow);
        self.bar.set_message("");
        self.reset_failures();
    }

    /// The run ended.
    fn finished(&self, succeeded: bool) {
        let failures = self.failures();
        let message = match (&self.nest, succeeded) {
            (None, true) => "done".to_string(),
            (None, false) => format!("failed ({failures} node(s))"),
            (Some(_), true) if failures == 0 => "done".to_string(),
            (Some(_), true) => format!("done, {failures} instance(s) failed"),
            (Some(_), false) => format!("failed, {failures} instance(s) failed"),
        };
        self.bar.finish_with_message(message);
    }

    /// A root event, counting the run's nodes.
    fn on_node_event(&self, event: &Event) {
        match &event.kind {
            EventKind::Completed { .. } | EventKind::Skipped => self.bar.inc(1),
            EventKind::Failed { error } => {
                self.failed();
                self.bar.inc(1);
                self.bar.set_message(format!("failed: {error}"));
            }
            EventKind::Aborted { .. } | EventKind::Withdrawn { .. } => self.bar.inc(1),
            EventKind::Retrying { error, delay } => {
                self.bar
                    .set_message(format!("retrying in {delay:?}: {error}"));
            }
            _ => {}
        }
    }

    /// An instance's event, counting the instances of the nest node `nest`.
    fn on_instance_event(&self, nest: &str, event: &Event) {
        let Some(path) = &event.path else {
            return;
        };
        let Some(step) = path.steps().last() else {
            return;
        };
        if step.node != nest {
            return;
        }
        match &event.kind {
            // The instance's own run ended (`node` is `None` for run-level events).
            EventKind::RunFinished { succeeded } if event.node.is_none() => {
                if !*succeeded {
                    let failures = self.failed();
                    let message = match self.last_failure.lock().ok().and_then(|mut l| l.take()) {
                        Some(last) => format!("{failures} failed, last {last}"),
                        None => format!("{failures} failed"),
                    };
                    self.bar.set_message(message);
                }
                self.bar.inc(1);
            }
            // A node of the instance failed: the instance will end failed, and its message
            // is the bar's once it has.
            EventKind::Failed { error } => {
                let node = event.node_name.unwrap_or("?");
                if let Ok(mut last) = self.last_failure.lock() {
                    *last = Some(format!("{}: {error}", path.name_of(node)));
                }
            }
            _ => {}
        }
    }
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

impl Observer for Progress {
    fn on_event(&self, event: &Event) {
        let root = event.path.is_none();
        match (&event.kind, &self.nest) {
            (EventKind::RunStarted { workflow, nodes }, _) if root => {
                self.started(workflow, *nodes);
            }
            (EventKind::RunFinished { succeeded }, _) if root => self.finished(*succeeded),
            (_, None) if root => self.on_node_event(event),
            (_, None) => {}
            (_, Some(nest)) => self.on_instance_event(nest, event),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::events::RunId;
    use crate::nest::{NestKind, NodePath, PathStep};

    fn event(path: Option<NodePath>, node: Option<(u32, &'static str)>, kind: EventKind) -> Event {
        Event {
            run: RunId(1),
            seq: 0,
            node: node.map(|(id, _)| id),
            node_name: node.map(|(_, name)| name),
            attempt: 0,
            at: Duration::ZERO,
            kind,
            path,
        }
    }

    fn instance(nest: &'static str, index: u64) -> Option<NodePath> {
        Some(NodePath::new(PathStep {
            node: nest,
            kind: NestKind::ForEach,
            index,
        }))
    }

    /// The events of a root run of two nodes, `load` and the ForEach `charged`, whose
    /// instances (one node `charge` each) run between `charged`'s start and its end; the
    /// instances of `failing` fail.
    fn run_of(instances: u64, failing: &[u64]) -> Vec<Event> {
        let mut events = vec![
            event(
                None,
                None,
                EventKind::RunStarted {
                    workflow: "Batch",
                    nodes: 2,
                },
            ),
            event(None, Some((0, "load")), EventKind::Requested),
            event(
                None,
                Some((0, "load")),
                EventKind::Completed { branch: None },
            ),
            event(None, Some((1, "charged")), EventKind::Requested),
        ];
        for index in 0..instances {
            let path = instance("charged", index);
            let ok = !failing.contains(&index);
            events.push(event(
                path.clone(),
                None,
                EventKind::RunStarted {
                    workflow: "charged",
                    nodes: 1,
                },
            ));
            events.push(event(
                path.clone(),
                Some((0, "charge")),
                EventKind::Requested,
            ));
            events.push(event(
                path.clone(),
                Some((0, "charge")),
                if ok {
                    EventKind::Completed { branch: None }
                } else {
                    EventKind::Failed {
                        error: Arc::from("card declined"),
                    }
                },
            ));
            events.push(event(path, None, EventKind::RunFinished { succeeded: ok }));
        }
        events.push(event(
            None,
            Some((1, "charged")),
            EventKind::Completed { branch: None },
        ));
        events.push(event(
            None,
            None,
            EventKind::RunFinished { succeeded: true },
        ));
        events
    }

    #[test]
    fn instance_events_neither_reset_nor_finish_the_bar_of_the_runs_nodes() {
        let progress = Progress::with_bar(ProgressBar::hidden());
        let events = run_of(3, &[1]);
        let (before_end, end) = events.split_at(events.len() - 1);
        for event in before_end {
            progress.on_event(event);
            // Whatever an instance does, the bar stays the root's: two nodes.
            assert_eq!(progress.bar().length(), Some(2), "after {event:?}");
            assert!(!progress.bar().is_finished(), "after {event:?}");
        }
        assert_eq!(progress.bar().position(), 2);
        assert_eq!(progress.bar().prefix(), "Batch");
        progress.on_event(&end[0]);
        assert!(progress.bar().is_finished());
        assert_eq!(progress.bar().message(), "done");
    }

    #[test]
    fn instances_counts_the_instances_of_one_nest_node() {
        let progress = Progress::instances_with_bar(ProgressBar::hidden(), "charged", 5);
        let events = run_of(5, &[1, 3]);
        let (before_end, end) = events.split_at(events.len() - 1);
        let mut ended = 0;
        for event in before_end {
            progress.on_event(event);
            if event.path.is_some() && matches!(event.kind, EventKind::RunFinished { .. }) {
                ended += 1;
            }
            assert_eq!(progress.bar().length(), Some(5), "after {event:?}");
            assert_eq!(progress.bar().position(), ended, "after {event:?}");
            assert!(!progress.bar().is_finished(), "after {event:?}");
        }
        assert_eq!(progress.bar().position(), 5);
        assert_eq!(
            progress.bar().message(),
            "2 failed, last charged[3]/charge: card declined"
        );
        progress.on_event(&end[0]);
        assert!(progress.bar().is_finished());
        assert_eq!(progress.bar().message(), "done, 2 instance(s) failed");
    }

    #[test]
    fn instances_ignores_other_nests_and_shows_the_last_failure() {
        let progress = Progress::instances_with_bar(ProgressBar::hidden(), "other", 5);
        let events = run_of(4, &[2]);
        let (before_end, end) = events.split_at(events.len() - 1);
        for event in before_end {
            progress.on_event(event);
        }
        assert_eq!(progress.bar().position(), 0);
        assert_eq!(progress.bar().message(), "");
        progress.on_event(&end[0]);
        assert_eq!(progress.bar().message(), "done");

        let progress = Progress::instances_with_bar(ProgressBar::hidden(), "charged", 4);
        let events = run_of(4, &[2]);
        // Up to the failed instance's end.
        for event in events.iter().take(4 + 3 * 4) {
            progress.on_event(event);
        }
        assert_eq!(progress.bar().position(), 3);
        assert_eq!(
            progress.bar().message(),
            "1 failed, last charged[2]/charge: card declined"
        );
    }
}
