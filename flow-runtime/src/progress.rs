//! A terminal progress bar for long runs (feature `progress`, with indicatif).

use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressStyle};

use crate::events::{Event, EventKind, Observer};

/// An [`Observer`] that drives an indicatif progress bar: one tick per node that settles and
/// per instance of a `ForEach`, `Loop` or sub-workflow step that ends, the last failure as the
/// message, and a summary when the run ends.
///
/// ```no_run
/// # use flow_runtime::features::Progress;
/// let progress = Progress::new();
/// // Checkout::runner().observer(progress).execute(..)
/// ```
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
    names: Mutex<Option<&'static str>>,
    failures: Mutex<u32>,
}

impl Progress {
    /// A progress bar on standard error (hidden when it is not a terminal).
    pub fn new() -> Self {
        Self::with_bar(ProgressBar::new(0))
    }

    /// Drives `bar` (for example a hidden one in tests, or one inside a `MultiProgress`).
    pub fn with_bar(bar: ProgressBar) -> Self {
        let style = ProgressStyle::with_template(
            "{prefix:.bold} [{elapsed_precise}] {wide_bar} {pos}/{len} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        Progress {
            bar,
            names: Mutex::new(None),
            failures: Mutex::new(0),
        }
    }

    /// The bar, to read its position in tests or to style it.
    pub fn bar(&self) -> &ProgressBar {
        &self.bar
    }
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

impl Observer for Progress {
    fn on_event(&self, event: &Event) {
        if let Some(path) = &event.path {
            // An instance of a nest node (`ForEach`, `Loop`, sub-workflow): each one of the
            // workflow's own nest nodes adds a tick, given when it ends.
            if path.steps().len() == 1 {
                match &event.kind {
                    EventKind::RunStarted { .. } => self.bar.inc_length(1),
                    EventKind::RunFinished { succeeded } => {
                        self.bar.inc(1);
                        if !succeeded {
                            self.bar.set_message(format!("failed: {path}"));
                        }
                    }
                    _ => {}
                }
            }
            return;
        }
        match &event.kind {
            EventKind::RunStarted { workflow, nodes } => {
                self.bar.set_length(u64::from(*nodes));
                self.bar.set_position(0);
                self.bar.set_prefix(*workflow);
                if let Ok(mut name) = self.names.lock() {
                    *name = Some(workflow);
                }
            }
            EventKind::Requested => {}
            EventKind::Completed { .. } | EventKind::Skipped => self.bar.inc(1),
            EventKind::Failed { error } => {
                if let Ok(mut failures) = self.failures.lock() {
                    *failures += 1;
                }
                self.bar.inc(1);
                self.bar.set_message(format!("failed: {error}"));
            }
            EventKind::Aborted { .. } | EventKind::Withdrawn { .. } => self.bar.inc(1),
            EventKind::Retrying { error, delay } => {
                self.bar
                    .set_message(format!("retrying in {delay:?}: {error}"));
            }
            EventKind::RunFinished { succeeded } => {
                let failures = self.failures.lock().map(|f| *f).unwrap_or(0);
                let message = if *succeeded {
                    "done".to_string()
                } else {
                    format!("failed ({failures} node(s))")
                };
                self.bar.finish_with_message(message);
            }
            _ => {}
        }
    }
}
