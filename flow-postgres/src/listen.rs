//! Notifications (`LISTEN/NOTIFY`): how workers learn of new work without waiting for their
//! next poll.
//!
//! The transactions that make work write a `NOTIFY` on the store's channel (one per schema,
//! `flow_` and a hash of the schema's name), delivered when they commit: opening tasks
//! (payload empty), completing a task and sending a signal (payload `run:` and the run's id
//! while a live worker holds the run, `due:` and its id otherwise).
//! A store listens on one connection of its own, made at the first [`Store::watch`] and
//! remade after it breaks; each notification bumps a counter that the watchers wait on (one for
//! new tasks, one for runs made due, one per run watched).
//!
//! A notification is a hint. One lost with a broken connection is made up for: every
//! watcher is woken when the listener (re)connects, and callers keep polling, less often.
//!
//! [`Store::watch`]: flowdag_store::Store::watch

use std::collections::HashMap;
use std::future::poll_fn;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use flowdag_store::{Notified, Watch};
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio_postgres::{AsyncMessage, NoTls};

/// The channel of the store in `schema`: `flow_` and a 64-bit FNV-1a hash of the name, so
/// that it is a short identifier whatever the schema is called, and stores of different
/// schemas in one database never wake each other.
pub(crate) fn channel(schema: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in schema.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("flow_{hash:016x}")
}

/// The payload of a notification for the decider of `run` alone: a task of the run is done
/// (or a signal came) while a worker holds the run.
const RUN_PREFIX: &str = "run:";

/// The payload of a notification that makes `run` due for any worker: a task of the run is
/// done (or a signal came) while no live worker holds it.
const DUE_PREFIX: &str = "due:";

/// A count of the changes seen, and the watchers waiting for the next one.
#[derive(Default)]
struct Counter {
    seen: AtomicU64,
    notify: Notify,
}

impl Counter {
    fn bump(&self) {
        self.seen.fetch_add(1, Ordering::AcqRel);
        self.notify.notify_waiters();
    }

    /// A future that completes once the count has moved past what it is now.
    fn next(self: Arc<Self>) -> Notified {
        let at = self.seen.load(Ordering::Acquire);
        Box::pin(async move {
            loop {
                let notified = self.notify.notified();
                let mut notified = std::pin::pin!(notified);
                // Registered before the count is read again: a bump in between is not lost.
                notified.as_mut().enable();
                if self.seen.load(Ordering::Acquire) != at {
                    return;
                }
                notified.await;
            }
        })
    }
}

/// What the listening task shares with the store's watchers.
#[derive(Default)]
struct Shared {
    /// New tasks.
    tasks: Arc<Counter>,
    /// Runs made due.
    due: Arc<Counter>,
    /// The counters of the runs watched now (dropped with their last watcher).
    runs: Mutex<HashMap<String, Weak<Counter>>>,
}

impl Shared {
    /// A notification: an empty payload is new tasks (for the watchers of tasks); `due:` and
    /// a run's id wakes the run's watchers and those of due runs; `run:` and a run's id wakes
    /// the run's watchers alone (its holder decides it; other workers have nothing to do).
    fn heard(&self, payload: &str) {
        let (run, due) = match (
            payload.strip_prefix(RUN_PREFIX),
            payload.strip_prefix(DUE_PREFIX),
        ) {
            (Some(run), _) => (run, false),
            (None, Some(run)) => (run, true),
            (None, None) => return self.tasks.bump(),
        };
        let counter = self.runs().get(run).and_then(Weak::upgrade);
        if let Some(counter) = counter {
            counter.bump();
        }
        if due {
            self.due.bump();
        }
    }

    /// Wakes every watcher: after the listener (re)connected, notifications may have been
    /// missed.
    fn all(&self) {
        let counters: Vec<Arc<Counter>> = self.runs().values().filter_map(Weak::upgrade).collect();
        for counter in counters {
            counter.bump();
        }
        self.tasks.bump();
        self.due.bump();
    }

    fn runs(&self) -> std::sync::MutexGuard<'_, HashMap<String, Weak<Counter>>> {
        // A panic while the map was held leaves it whole: use it as it is.
        self.runs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn run(&self, run: String) -> Arc<Counter> {
        let mut runs = self.runs();
        if let Some(counter) = runs.get(&run).and_then(Weak::upgrade) {
            return counter;
        }
        // Forget the runs no one watches any more, before the map grows.
        if runs.len() >= 64 && runs.len().is_power_of_two() {
            runs.retain(|_, counter| counter.strong_count() > 0);
        }
        let counter = Arc::new(Counter::default());
        runs.insert(run, Arc::downgrade(&counter));
        counter
    }
}

/// A store's listener: started at the first watch, stopped when the store is dropped.
pub(crate) struct Listener {
    config: tokio_postgres::Config,
    channel: String,
    shared: Arc<Shared>,
    task: OnceLock<AbortHandle>,
}

impl Listener {
    pub(crate) fn new(config: tokio_postgres::Config, schema: &str) -> Listener {
        Listener {
            config,
            channel: channel(schema),
            shared: Arc::default(),
            task: OnceLock::new(),
        }
    }

    /// The store's channel.
    pub(crate) fn channel(&self) -> &str {
        &self.channel
    }

    /// A wake-up for `what`; `None` outside a tokio runtime (nothing can listen).
    pub(crate) fn watch(&self, what: Watch) -> Option<Notified> {
        if self.task.get().is_none() {
            let runtime = tokio::runtime::Handle::try_current().ok()?;
            let _ = self.task.get_or_init(|| {
                let listen = listen(
                    self.config.clone(),
                    self.channel.clone(),
                    Arc::clone(&self.shared),
                );
                runtime.spawn(listen).abort_handle()
            });
        }
        Some(match what {
            Watch::Tasks => Arc::clone(&self.shared.tasks).next(),
            Watch::Runs => Arc::clone(&self.shared.due).next(),
            Watch::Run(run) => self.shared.run(run).next(),
        })
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(task) = self.task.get() {
            task.abort();
        }
    }
}

/// The first wait before connecting again after the listening connection failed; it doubles
/// up to [`MAX_RETRY`].
const MIN_RETRY: Duration = Duration::from_millis(100);
const MAX_RETRY: Duration = Duration::from_secs(5);

/// The listening task: connects, `LISTEN`s, hands every notification to the watchers, and
/// connects again when the connection breaks. Runs until the store drops its listener.
async fn listen(config: tokio_postgres::Config, channel: String, shared: Arc<Shared>) {
    let mut wait = MIN_RETRY;
    loop {
        if let Ok((client, mut connection)) = config.connect(NoTls).await {
            let heard = Arc::clone(&shared);
            // The connection's messages, notifications among them, until it breaks.
            let messages = tokio::spawn(async move {
                while let Some(Ok(message)) = poll_fn(|cx| connection.poll_message(cx)).await {
                    if let AsyncMessage::Notification(note) = message {
                        heard.heard(note.payload());
                    }
                }
            });
            if client
                .batch_execute(&format!("LISTEN \"{channel}\""))
                .await
                .is_ok()
            {
                wait = MIN_RETRY;
                // Whatever was notified before this point was missed: everyone looks.
                shared.all();
                let _ = messages.await;
            } else {
                messages.abort();
            }
            drop(client);
        }
        shared.all();
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(MAX_RETRY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_are_short_identifiers_of_their_schema() {
        assert_eq!(channel("flow"), channel("flow"));
        assert_ne!(channel("flow"), channel("flow2"));
        let long = "x".repeat(200);
        assert_eq!(channel(&long).len(), 21);
        assert!(
            channel(&long)
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        );
    }

    #[tokio::test]
    async fn a_bump_after_the_watch_wakes_it_even_before_it_is_polled() {
        let shared = Shared::default();
        let work = Arc::clone(&shared.due).next();
        let run = shared.run("r1".to_owned()).next();
        let other = shared.run("r2".to_owned()).next();
        // Held by its worker: the run's watchers alone.
        shared.heard("run:r1");
        run.await;
        let mut work = work;
        assert!(futures_poll_once(&mut work).is_pending());
        // Due for anyone: every worker too.
        shared.heard("due:r1");
        work.await;
        // `r2` heard nothing: it is still waiting.
        let mut other = other;
        assert!(futures_poll_once(&mut other).is_pending());
        shared.all();
        other.await;
        // New tasks wake the watchers of tasks alone.
        let mut tasks = Arc::clone(&shared.tasks).next();
        assert!(futures_poll_once(&mut tasks).is_pending());
        let mut due = Arc::clone(&shared.due).next();
        shared.heard("");
        tasks.await;
        assert!(futures_poll_once(&mut due).is_pending());
    }

    fn futures_poll_once(future: &mut Notified) -> std::task::Poll<()> {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        future.as_mut().poll(&mut cx)
    }
}
