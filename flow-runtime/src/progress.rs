//! A terminal progress bar for long runs (feature `progress`, with indicatif).

use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressStyle};

use crate::events::{Event, EventKind, Observer};
use crate::path::NodePath;

/// An [`Observer`] that drives an indicatif progress bar.
///
/// [`Progress::new`] counts the run's work: one tick per node of the workflow that settles and
/// one per instance of its nest nodes that ends (a `ForEach`'s items, a `Loop`'s iterations, a
/// sub-workflow step's run; the bar's length grows by one as each instance starts), the last
/// failure or retry as the message, and a summary when the run ends. Only the run's own events
/// start, reset and finish the bar: an instance's events (those with a
/// [`path`](Event::path)) never do, and the nodes inside instances, and instances of nests
/// nested deeper, do not tick.
///
/// [`Progress::instances`] counts the instances of one nest node instead, against the total
/// the caller expects: the bar of a run that is one long `ForEach`.
///
/// ```no_run
/// # use flowdag_runtime::features::Progress;
/// // The bar of the run's nodes and its nest nodes' instances.
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
    /// The nest node whose instances the bar counts; `None`: the run's nodes and the
    /// instances of its nest nodes.
    nest: Option<String>,
    /// The bar's length, with `nest`.
    total: u64,
    counts: Mutex<Counts>,
}

/// What a [`Progress`] counts beside the bar's position.
#[derive(Debug, Default)]
struct Counts {
    /// The run's own nodes that failed.
    nodes_failed: u64,
    /// The instances counted that failed.
    instances_failed: u64,
    /// The last failure inside an instance counted: `charged[3]/charge: card declined`.
    last_failure: Option<String>,
}

impl Progress {
    /// A progress bar on standard error (hidden when it is not a terminal) over the run's
    /// nodes and the instances of its nest nodes.
    pub fn new() -> Self {
        Self::with_bar(ProgressBar::new(0))
    }

    /// Drives `bar` (for example a hidden one in tests, or one inside a `MultiProgress`) over
    /// the run's nodes and the instances of its nest nodes.
    pub fn with_bar(bar: ProgressBar) -> Self {
        Self::styled(bar, None, 0)
    }

    /// A progress bar on standard error over the instances of the nest node called `node` (a
    /// `ForEach`'s items, a `Loop`'s iterations), `total` of them expected: one tick per
    /// instance that ended, completed or failed, and the failed ones counted in the message,
    /// with the last failure. The run's own nodes do not tick. Instances of that node inside
    /// other nests count too (the name is matched against the innermost step of each
    /// instance's path). An instance withdrawn before it ended does not tick; the bar
    /// finishes when the run ends.
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
            counts: Mutex::new(Counts::default()),
        }
    }

    /// The bar, to read its position in tests or to style it.
    pub fn bar(&self) -> &ProgressBar {
        &self.bar
    }

    /// Updates the counts (a poisoned lock is taken as it is: the counts stay valid between
    /// statements).
    fn counts<T>(&self, update: impl FnOnce(&mut Counts) -> T) -> T {
        let mut counts = self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        update(&mut counts)
    }

    /// Whether the bar counts the instance at `path`.
    fn counts_instance(&self, path: &NodePath) -> bool {
        match &self.nest {
            None => path.steps().len() == 1,
            Some(nest) => path.steps().last().is_some_and(|step| step.node == nest),
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
        self.counts(|counts| *counts = Counts::default());
    }

    /// The run ended.
    fn finished(&self, succeeded: bool) {
        let (nodes, instances) = self.counts(|c| (c.nodes_failed, c.instances_failed));
        let mut message = match succeeded {
            true => "done".to_string(),
            false => format!("failed ({nodes} node(s))"),
        };
        if instances > 0 {
            message.push_str(&format!(", {instances} instance(s) failed"));
        }
        self.bar.finish_with_message(message);
    }

    /// An event of one of the run's own nodes.
    fn on_node_event(&self, event: &Event) {
        let tick = self.nest.is_none();
        match &event.kind {
            EventKind::Completed { .. }
            | EventKind::Skipped
            | EventKind::Aborted { .. }
            | EventKind::Withdrawn { .. }
                if tick =>
            {
                self.bar.inc(1)
            }
            EventKind::Failed { error } => {
                self.counts(|counts| counts.nodes_failed += 1);
                if tick {
                    self.bar.inc(1);
                    self.bar.set_message(format!("failed: {error}"));
                }
            }
            EventKind::Retrying { error, delay } if tick => {
                self.bar
                    .set_message(format!("retrying in {delay:?}: {error}"));
            }
            _ => {}
        }
    }

    /// An event of an instance at `path`, or of one of its nodes.
    fn on_instance_event(&self, path: &NodePath, event: &Event) {
        if !self.counts_instance(path) {
            return;
        }
        // `node` is `None` for the instance's own run-level events.
        let run = event.node.is_none();
        match &event.kind {
            EventKind::RunStarted { .. } if run && self.nest.is_none() => self.bar.inc_length(1),
            EventKind::RunFinished { succeeded } if run => {
                if !*succeeded {
                    let message = self.counts(|counts| {
                        counts.instances_failed += 1;
                        let failed = counts.instances_failed;
                        match counts.last_failure.take() {
                            Some(last) => format!("{failed} failed, last {last}"),
                            None => format!("{failed} failed, last {path}"),
                        }
                    });
                    self.bar.set_message(message);
                }
                self.bar.inc(1);
            }
            // A node of the instance failed: the instance will end failed, and this is the
            // bar's message once it has.
            EventKind::Failed { error } => {
                let node = event.node_name.unwrap_or("?");
                let last = format!("{}: {error}", path.name_of(node));
                self.counts(|counts| counts.last_failure = Some(last));
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
        match (&event.path, &event.kind) {
            (None, EventKind::RunStarted { workflow, nodes }) => self.started(workflow, *nodes),
            (None, EventKind::RunFinished { succeeded }) => self.finished(*succeeded),
            (None, _) => self.on_node_event(event),
            (Some(path), _) => self.on_instance_event(path, event),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::events::RunId;
    use crate::path::{NestKind, NodePath, PathStep};

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
    fn instance_events_neither_reset_nor_finish_the_bar_and_each_instance_ticks_once() {
        let progress = Progress::with_bar(ProgressBar::hidden());
        let mut events = run_of(3, &[1]);
        // An instance of a nest inside `charged[0]`: deeper than the run's own nest nodes.
        let deeper = instance("charged", 0).map(|path| {
            path.child(PathStep {
                node: "inner",
                kind: NestKind::Loop,
                index: 0,
            })
        });
        let at = events.len() - 2;
        events.insert(
            at,
            event(
                deeper.clone(),
                None,
                EventKind::RunStarted {
                    workflow: "inner",
                    nodes: 1,
                },
            ),
        );
        events.insert(
            at + 1,
            event(deeper, None, EventKind::RunFinished { succeeded: true }),
        );
        let (before_end, end) = events.split_at(events.len() - 1);
        let (mut started, mut ticks) = (0, 0);
        for event in before_end {
            progress.on_event(event);
            let top = event.path.as_ref().is_some_and(|p| p.steps().len() == 1);
            match (&event.kind, event.node) {
                (EventKind::RunStarted { .. }, None) if top => started += 1,
                (EventKind::RunFinished { .. }, None) if top => ticks += 1,
                (EventKind::Completed { .. }, Some(_)) if event.path.is_none() => ticks += 1,
                _ => {}
            }
            // The run's two nodes and one tick per instance of `charged` started so far;
            // whatever an instance does, the bar stays the run's.
            assert_eq!(
                progress.bar().length(),
                Some(2 + started),
                "after {event:?}"
            );
            assert_eq!(progress.bar().position(), ticks, "after {event:?}");
            assert_eq!(progress.bar().prefix(), "Batch", "after {event:?}");
            assert!(!progress.bar().is_finished(), "after {event:?}");
        }
        assert_eq!(progress.bar().position(), 5);
        progress.on_event(&end[0]);
        assert!(progress.bar().is_finished());
        assert_eq!(progress.bar().message(), "done, 1 instance(s) failed");
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
