//! Shared helpers of the behaviour tests: an event log on tokio's clock and logging operations.
#![allow(dead_code)]

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::{Instant, sleep};

/// The error of the test operations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Boom(pub &'static str);

impl fmt::Display for Boom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "boom: {}", self.0)
    }
}

impl std::error::Error for Boom {}

/// One entry of a [`Log`]: the operation's name, `"start"` or `"end"`, and when.
pub type Event = (String, &'static str, Instant);

/// A shared event log: every logging operation appends a `"start"` and an `"end"` entry
/// stamped with tokio's (paused) clock. `Sync`, so a workflow taking `&Log` stays `Send`.
#[derive(Debug)]
pub struct Log {
    t0: Instant,
    events: Mutex<Vec<Event>>,
}

impl Default for Log {
    fn default() -> Self {
        Self::new()
    }
}

impl Log {
    /// An empty log whose time zero is now.
    pub fn new() -> Self {
        Log {
            t0: Instant::now(),
            events: Mutex::new(Vec::new()),
        }
    }

    /// Appends `(name, what, now)`.
    pub fn record(&self, name: &str, what: &'static str) {
        self.lock().push((name.to_string(), what, Instant::now()));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Event>> {
        self.events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Every entry, in the order they were appended.
    pub fn events(&self) -> Vec<Event> {
        self.lock().clone()
    }

    /// The position in the log of the single `what` entry of `name`; panics unless there is
    /// exactly one.
    pub fn index(&self, name: &str, what: &str) -> usize {
        let events = self.lock();
        let found: Vec<usize> = events
            .iter()
            .enumerate()
            .filter(|(_, (n, w, _))| n == name && *w == what)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "expected exactly one `{what}` of `{name}` in the log, found {}: {events:?}",
            found.len()
        );
        found[0]
    }

    /// When the single `what` entry of `name` happened, as time since the log was created.
    pub fn at(&self, name: &str, what: &str) -> Duration {
        let index = self.index(name, what);
        self.lock()[index].2 - self.t0
    }

    /// The names with a `"start"` entry, in log order.
    pub fn started(&self) -> Vec<String> {
        self.names("start")
    }

    /// The names with an `"end"` entry, in log order.
    pub fn ended(&self) -> Vec<String> {
        self.names("end")
    }

    fn names(&self, what: &str) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|(_, w, _)| *w == what)
            .map(|(n, _, _)| n.clone())
            .collect()
    }

    /// Time since the log was created.
    pub fn elapsed(&self) -> Duration {
        Instant::now() - self.t0
    }
}

/// `n` milliseconds.
pub const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Logs `start`, sleeps `millis` on tokio's clock, logs `end`, returns `millis`.
pub async fn work(log: &Log, name: &'static str, millis: u64) -> Result<u64, Boom> {
    log.record(name, "start");
    sleep(ms(millis)).await;
    log.record(name, "end");
    Ok(millis)
}

/// Like [`work`], reading an input (so that the step has a data edge): returns `input + millis`.
pub async fn work_on(log: &Log, name: &'static str, input: &u64, millis: u64) -> Result<u64, Boom> {
    log.record(name, "start");
    sleep(ms(millis)).await;
    log.record(name, "end");
    Ok(input + millis)
}

/// Logs `start`, sleeps `millis`, logs `end`, then fails with `Boom(name)`.
pub async fn fail(log: &Log, name: &'static str, millis: u64) -> Result<u64, Boom> {
    log.record(name, "start");
    sleep(ms(millis)).await;
    log.record(name, "end");
    Err(Boom(name))
}

/// Returns `future` unchanged; compiles only if it is `Send`.
pub fn require_send<F: Future + Send>(future: F) -> F {
    future
}

/// Autoref specialization: `is_send!(value)` is `true` exactly when the value's
/// type is `Send`, decided at compile time for a concrete type.
pub struct Probe<T>(PhantomData<T>);

pub fn probe<T>(_: &T) -> Probe<T> {
    Probe(PhantomData)
}

pub trait SendProbe {
    fn is_send(&self) -> bool {
        true
    }
}
impl<T: Send> SendProbe for &Probe<T> {}

pub trait AnyProbe {
    fn is_send(&self) -> bool {
        false
    }
}
impl<T> AnyProbe for Probe<T> {}

/// Whether the value of `$value` has a `Send` type.
#[allow(unused_macros, reason = "only some test crates ask")]
macro_rules! is_send {
    ($value:expr) => {{
        #[allow(
            clippy::needless_borrow,
            reason = "autoref specialization needs both borrows"
        )]
        #[allow(unused_imports)]
        use $crate::common::{AnyProbe as _, SendProbe as _};
        let send = (&&$crate::common::probe(&$value)).is_send();
        send
    }};
}
