//! The event log of a run, and observers that see it as it grows.
//!
//! Every state change of a run is an [`Event`]: which run, its sequence number, which node and
//! attempt, a monotonic timestamp and what happened. Node statuses are a projection of the log:
//! [`EventLog::statuses`] replays it. A run records its log when a report is asked for (a
//! workflow's `execute`) or an observer is attached; a plain `run` records nothing and builds no
//! event at all.

use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::status::NodeStatus;

/// Identifies one run within the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RunId(pub u64);

impl RunId {
    pub(crate) fn next() -> RunId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        RunId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "run-{}", self.0)
    }
}

/// One state change of a run.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Event {
    /// The run it belongs to.
    pub run: RunId,
    /// Its position in the run's log, from 0.
    pub seq: u64,
    /// The node it concerns, by index in the workflow's `GRAPH.nodes()`; `None` for run-level
    /// events.
    pub node: Option<u32>,
    /// The name of that node, as in `GRAPH` (`"fetch_user"`, `"decision#1"`); `None` for
    /// run-level events.
    pub node_name: Option<&'static str>,
    /// The node's attempt (1 for the first); 0 for events outside an attempt.
    pub attempt: u32,
    /// Time since the run started, from tokio's monotonic clock (paused in tests).
    pub at: Duration,
    /// What happened.
    pub kind: EventKind,
    /// The nest instance the node belongs to (`charge[3]`), when the event comes from an
    /// instance of a `ForEach`, a `Loop` or a sub-workflow step; then `node` and `node_name`
    /// are the node's in the body's graph. `None` for the workflow's own nodes.
    pub path: Option<crate::path::NodePath>,
}

/// What an [`Event`] records.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub enum EventKind {
    /// The run started.
    RunStarted {
        /// The workflow's name.
        workflow: &'static str,
        /// How many nodes it has.
        nodes: u32,
    },
    /// An attempt of an operation started.
    Requested,
    /// The node completed. For a decision, `branch` is the branch it took (`true` for `then`).
    Completed {
        /// The branch a decision took; `None` for an operation.
        branch: Option<bool>,
    },
    /// The node failed for good (its last attempt failed).
    Failed {
        /// The error, rendered.
        error: Arc<str>,
    },
    /// An attempt timed out (a `Retrying` or `Failed` follows).
    TimedOut {
        /// The timeout.
        after: Duration,
    },
    /// An attempt failed and the node will try again after `delay`.
    Retrying {
        /// The failed attempt's error, rendered.
        error: Arc<str>,
        /// The wait before the next attempt.
        delay: Duration,
    },
    /// The node will not run: its branch was not taken or its data came from a skipped node.
    Skipped,
    /// The node will not run, or was stopped: `cause` failed, or the run was cancelled (`None`).
    Aborted {
        /// The node whose failure aborted this one; `None` when the run was cancelled.
        cause: Option<&'static str>,
    },
    /// The node was withdrawn (its future dropped, if it was running) by the node that
    /// decided it: the gate that fired (a `Race`, a `Pick`, a `Parallel(min = k)`, whose `Won`
    /// names the winning arms), or a `Cancel` or `Terminate` step.
    Withdrawn {
        /// The node whose decision withdrew this one.
        cause: &'static str,
    },
    /// A gate (`Race`, `Pick`, `Parallel(min = k)`) fired: `arms` of its arms completed, in
    /// the order they did (0-based, in source order).
    Won {
        /// The arms that completed when the gate fired.
        arms: Vec<u32>,
    },
    /// A `Signal` step received its signal.
    SignalReceived {
        /// The signal's name.
        signal: &'static str,
    },
    /// A `Signal` step of a durable run was sent a payload that does not deserialize into
    /// its type: the signal is consumed (it is not tried again) and the step keeps waiting.
    SignalRejected {
        /// The signal's name.
        name: &'static str,
        /// Why the payload was refused (the deserializer's message).
        error: Arc<str>,
    },
    /// A `Delay` step set its timer.
    TimerSet {
        /// How long it waits.
        after: Duration,
    },
    /// A `Delay` step's timer fired.
    TimerFired,
    /// An attempt of a completed step's compensation started (the run failed; see
    /// `docs/semantics.md`, "Compensation").
    Compensating,
    /// The step's compensation succeeded: its effect is undone.
    Compensated,
    /// An attempt of a compensation failed and it will try again after `delay`.
    CompensationRetrying {
        /// The failed attempt's error, rendered.
        error: Arc<str>,
        /// The wait before the next attempt.
        delay: Duration,
    },
    /// The compensation's last attempt failed: the step's effect is not undone, and no
    /// further compensation runs.
    CompensationFailed {
        /// The error, rendered.
        error: Arc<str>,
    },
    /// The run ended.
    RunFinished {
        /// Whether the run succeeded.
        succeeded: bool,
    },
}

impl EventKind {
    /// A short name: `RunStarted`, `Requested`, `Completed`, …
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::RunStarted { .. } => "RunStarted",
            EventKind::Requested => "Requested",
            EventKind::Completed { .. } => "Completed",
            EventKind::Failed { .. } => "Failed",
            EventKind::TimedOut { .. } => "TimedOut",
            EventKind::Retrying { .. } => "Retrying",
            EventKind::Skipped => "Skipped",
            EventKind::Aborted { .. } => "Aborted",
            EventKind::Withdrawn { .. } => "Withdrawn",
            EventKind::Won { .. } => "Won",
            EventKind::SignalReceived { .. } => "SignalReceived",
            EventKind::SignalRejected { .. } => "SignalRejected",
            EventKind::TimerSet { .. } => "TimerSet",
            EventKind::TimerFired => "TimerFired",
            EventKind::Compensating => "Compensating",
            EventKind::Compensated => "Compensated",
            EventKind::CompensationRetrying { .. } => "CompensationRetrying",
            EventKind::CompensationFailed { .. } => "CompensationFailed",
            EventKind::RunFinished { .. } => "RunFinished",
        }
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} #{} {:>10.3?} ", self.run, self.seq, self.at)?;
        match (self.node_name, self.node) {
            (Some(name), _) => write!(f, "{name} attempt {} ", self.attempt)?,
            (None, Some(node)) => write!(f, "node {node} attempt {} ", self.attempt)?,
            (None, None) => {}
        }
        match &self.kind {
            EventKind::RunStarted { workflow, nodes } => {
                write!(f, "RunStarted {workflow} ({nodes} nodes)")
            }
            EventKind::Completed { branch: Some(b) } => {
                write!(f, "Completed ({} branch)", if *b { "then" } else { "else" })
            }
            EventKind::Failed { error } => write!(f, "Failed: {error}"),
            EventKind::TimedOut { after } => write!(f, "TimedOut after {after:?}"),
            EventKind::Retrying { error, delay } => write!(f, "Retrying in {delay:?}: {error}"),
            EventKind::Aborted { cause: Some(cause) } => {
                write!(f, "Aborted because `{cause}` failed")
            }
            EventKind::Aborted { cause: None } => f.write_str("Aborted (cancelled)"),
            EventKind::Withdrawn { cause } => write!(f, "Withdrawn by `{cause}`"),
            EventKind::Won { arms } => write!(f, "Won by arms {arms:?}"),
            EventKind::SignalReceived { signal } => write!(f, "SignalReceived `{signal}`"),
            EventKind::SignalRejected { name, error } => {
                write!(f, "SignalRejected `{name}`: {error}")
            }
            EventKind::TimerSet { after } => write!(f, "TimerSet for {after:?}"),
            EventKind::RunFinished { succeeded } => write!(f, "RunFinished succeeded={succeeded}"),
            other => f.write_str(other.name()),
        }
    }
}

/// Why an event could not be appended to an [`EventLog`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendError {
    /// The event belongs to another run.
    OtherRun {
        /// The log's run.
        log: RunId,
        /// The event's run.
        event: RunId,
    },
    /// The event's sequence number leaves a gap.
    Gap {
        /// The next sequence number the log expects.
        expected: u64,
        /// The event's.
        found: u64,
    },
}

impl fmt::Display for AppendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppendError::OtherRun { log, event } => {
                write!(f, "event of {event} appended to the log of {log}")
            }
            AppendError::Gap { expected, found } => {
                write!(f, "event #{found} appended where #{expected} was expected")
            }
        }
    }
}

impl std::error::Error for AppendError {}

/// The ordered events of one run.
#[derive(Debug, Clone, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct EventLog {
    events: Vec<Event>,
}

impl EventLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `event`. Appending an event whose sequence number the log already holds changes
    /// nothing (`Ok(false)`): delivery may repeat. A gap, or another run's event, is an error.
    pub fn append(&mut self, event: Event) -> Result<bool, AppendError> {
        if let Some(first) = self.events.first()
            && first.run != event.run
        {
            return Err(AppendError::OtherRun {
                log: first.run,
                event: event.run,
            });
        }
        let expected = self.events.len() as u64;
        match event.seq {
            seq if seq < expected => Ok(false),
            seq if seq == expected => {
                self.events.push(event);
                Ok(true)
            }
            found => Err(AppendError::Gap { expected, found }),
        }
    }

    /// The events, in order.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// The number of events.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether the log is empty.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The status of every node of the run, by node index, rebuilt from the log alone: `Idle`
    /// before any event, `Running` from a `Requested`, and the status each terminal event names.
    /// Only the workflow's own nodes count: the events of nest instances (with a
    /// [`path`](Event::path)) are the instances' nodes, not the run's.
    ///
    /// The node count comes from the log's `RunStarted` event; a log without one (built by hand)
    /// covers the nodes up to the highest index an event names.
    ///
    /// ```
    /// use std::time::Duration;
    /// use flowdag_runtime::{Event, EventKind, EventLog, NodeStatus, RunId};
    ///
    /// let event = |seq, node: Option<u32>, kind| Event {
    ///     run: RunId(1),
    ///     seq,
    ///     node,
    ///     node_name: node.map(|n| ["fetch", "store"][n as usize]),
    ///     attempt: u32::from(node.is_some()),
    ///     at: Duration::ZERO,
    ///     kind,
    ///     path: None,
    /// };
    /// let mut log = EventLog::new();
    /// let run_started = EventKind::RunStarted { workflow: "Save", nodes: 2 };
    /// log.append(event(0, None, run_started))?;
    /// log.append(event(1, Some(0), EventKind::Requested))?;
    /// log.append(event(2, Some(0), EventKind::Completed { branch: None }))?;
    /// log.append(event(3, Some(1), EventKind::Requested))?;
    ///
    /// // By node index: `fetch` completed, `store` is still running.
    /// assert_eq!(log.statuses(), [NodeStatus::Completed, NodeStatus::Running]);
    /// # Ok::<(), flowdag_runtime::AppendError>(())
    /// ```
    pub fn statuses(&self) -> Vec<NodeStatus> {
        let own = || self.events.iter().filter(|event| event.path.is_none());
        let nodes = own()
            .find_map(|event| match event.kind {
                EventKind::RunStarted { nodes, .. } => Some(nodes as usize),
                _ => None,
            })
            .unwrap_or_else(|| {
                own()
                    .filter_map(|event| event.node)
                    .max()
                    .map_or(0, |highest| highest as usize + 1)
            });
        let mut statuses = vec![NodeStatus::Idle; nodes];
        for event in own() {
            let Some(node) = event.node else { continue };
            let Some(status) = statuses.get_mut(node as usize) else {
                continue;
            };
            match event.kind {
                EventKind::Requested | EventKind::Retrying { .. } => *status = NodeStatus::Running,
                EventKind::Completed { .. } => *status = NodeStatus::Completed,
                EventKind::Failed { .. } => *status = NodeStatus::Failed,
                EventKind::Skipped => *status = NodeStatus::Skipped,
                EventKind::Aborted { .. } => *status = NodeStatus::Aborted,
                EventKind::Withdrawn { .. } => *status = NodeStatus::Withdrawn,
                _ => {}
            }
        }
        statuses
    }

    pub(crate) fn push(&mut self, event: Event) {
        self.events.push(event);
    }

    pub(crate) fn reserve(&mut self, additional: usize) {
        self.events.reserve(additional);
    }
}

impl<'a> IntoIterator for &'a EventLog {
    type Item = &'a Event;
    type IntoIter = std::slice::Iter<'a, Event>;
    fn into_iter(self) -> Self::IntoIter {
        self.events.iter()
    }
}

/// Sees every event of a run as it is appended, synchronously, on the run's task.
///
/// Keep `on_event` quick: the run waits for it. Attach observers with a workflow's
/// `runner().observer(..)`.
pub trait Observer: Send + Sync {
    /// Called once per event, in order.
    fn on_event(&self, event: &Event);
}

impl<F: Fn(&Event) + Send + Sync> Observer for F {
    fn on_event(&self, event: &Event) {
        self(event)
    }
}

/// An observer that keeps every event it sees, from any number of runs. Cheap to clone: clones
/// share the record.
///
/// ```
/// let recorder = flowdag_runtime::Recorder::new();
/// assert!(recorder.events().is_empty());
/// ```
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    events: Arc<Mutex<Vec<Event>>>,
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every event seen so far.
    pub fn events(&self) -> Vec<Event> {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The log of one run.
    pub fn log(&self, run: RunId) -> EventLog {
        let mut log = EventLog::new();
        for event in self.events().into_iter().filter(|e| e.run == run) {
            // Events of one run arrive in order; a failure here would be a scheduler bug.
            let _ = log.append(event);
        }
        log
    }
}

impl Observer for Recorder {
    fn on_event(&self, event: &Event) {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(event.clone());
    }
}

/// An observer that sends every event into an [`EventStream`]: `let (observer, stream) =
/// channel();`.
#[derive(Debug, Clone)]
pub struct ChannelObserver {
    sender: mpsc::UnboundedSender<Event>,
}

/// The receiving end of a [`ChannelObserver`]: an async stream of events (`futures::Stream`),
/// which ends when every observer clone and every run holding one is dropped.
#[derive(Debug)]
pub struct EventStream {
    receiver: mpsc::UnboundedReceiver<Event>,
}

/// A channel observer and the stream of the events it sees.
pub fn channel() -> (ChannelObserver, EventStream) {
    let (sender, receiver) = mpsc::unbounded_channel();
    (ChannelObserver { sender }, EventStream { receiver })
}

impl Observer for ChannelObserver {
    fn on_event(&self, event: &Event) {
        // A dropped stream means nobody listens any more; the run goes on.
        let _ = self.sender.send(event.clone());
    }
}

impl EventStream {
    /// The next event, or `None` when the stream has ended.
    pub async fn next(&mut self) -> Option<Event> {
        self.receiver.recv().await
    }
}

impl futures_core::Stream for EventStream {
    type Item = Event;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        self.receiver.poll_recv(cx)
    }
}

/// Where the events of a recorded run's nest instances wait for the run at the top (the
/// *root*) to sequence them: every instance, at any depth, pushes its events here with their
/// path; the root drains the buffer into its own log and observers, in order, each time it has
/// polled its nodes and before each event of its own.
pub(crate) struct EventSink {
    /// The root run's id, which every nested event carries.
    pub(crate) run: RunId,
    /// The root run's start: nested events are timed from it, on the root's timeline.
    pub(crate) start: tokio::time::Instant,
    events: Mutex<Vec<Event>>,
}

impl EventSink {
    pub(crate) fn new(run: RunId, start: tokio::time::Instant) -> EventSink {
        EventSink {
            run,
            start,
            events: Mutex::new(Vec::new()),
        }
    }

    /// Queues a nested event (its `seq` is given when the root drains it).
    pub(crate) fn push(&self, event: Event) {
        lock(&self.events).push(event);
    }

    /// Moves the queued events into `into` (emptied first), keeping the buffer's capacity.
    pub(crate) fn take(&self, into: &mut Vec<Event>) {
        into.clear();
        let mut events = lock(&self.events);
        if !events.is_empty() {
            std::mem::swap(&mut *events, into);
        }
    }
}

/// Locks `mutex`, whether or not a panic poisoned it: every value guarded here stays valid
/// between statements.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
