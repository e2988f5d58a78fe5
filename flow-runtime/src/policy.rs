//! Failure policies, retries, backoff and cancellation.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// What a run does when a node fails and no `Conditional` can catch the failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FailurePolicy {
    /// Let every node that does not depend on the failure run to the end (the default): partial
    /// success is normal and visible in the report.
    #[default]
    ContinueIndependent,
    /// Cancel the whole run at the first failure that no `Conditional` can catch, as
    /// `try_join!` would: running operations are dropped and every unfinished node is aborted.
    FailFast,
}

/// How long to wait between attempts of a retried node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backoff {
    /// The same delay before every retry.
    Fixed {
        /// The delay, in milliseconds.
        ms: u64,
    },
    /// `base`, `2 × base`, `4 × base`, … never more than `max`.
    Exponential {
        /// The first delay, in milliseconds.
        base_ms: u64,
        /// The largest delay, in milliseconds.
        max_ms: u64,
    },
}

impl Backoff {
    /// The default: exponential from 100 ms, at most 10 s.
    pub const DEFAULT: Backoff = Backoff::Exponential {
        base_ms: 100,
        max_ms: 10_000,
    };

    /// The delay before retry number `retry` (1 for the first retry), before jitter.
    pub fn delay(&self, retry: u32) -> Duration {
        let ms = match *self {
            Backoff::Fixed { ms } => ms,
            Backoff::Exponential { base_ms, max_ms } => {
                let factor = 1u64
                    .checked_shl(retry.saturating_sub(1))
                    .unwrap_or(u64::MAX);
                base_ms.saturating_mul(factor).min(max_ms)
            }
        };
        Duration::from_millis(ms)
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::DEFAULT
    }
}

/// The resilience settings of one node. Every field is optional: a step's own setting wins,
/// then its `#[operation]` default, then the built-in default (no timeout, no retry,
/// [`Backoff::DEFAULT`], no jitter, no deadline).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NodePolicy {
    /// Per-attempt timeout, in milliseconds.
    pub timeout_ms: Option<u64>,
    /// How many times a failed attempt is retried.
    pub retries: Option<u32>,
    /// The delay between attempts.
    pub backoff: Option<Backoff>,
    /// Whether each delay is drawn uniformly from zero to the backoff's value ("full jitter").
    pub jitter: Option<bool>,
    /// Total time allowed for all attempts and delays, in milliseconds.
    pub deadline_ms: Option<u64>,
}

impl NodePolicy {
    /// No setting at all.
    pub const NONE: NodePolicy = NodePolicy {
        timeout_ms: None,
        retries: None,
        backoff: None,
        jitter: None,
        deadline_ms: None,
    };

    /// `self`, with every unset field taken from `defaults`.
    pub const fn or(self, defaults: &NodePolicy) -> NodePolicy {
        NodePolicy {
            timeout_ms: match self.timeout_ms {
                Some(v) => Some(v),
                None => defaults.timeout_ms,
            },
            retries: match self.retries {
                Some(v) => Some(v),
                None => defaults.retries,
            },
            backoff: match self.backoff {
                Some(v) => Some(v),
                None => defaults.backoff,
            },
            jitter: match self.jitter {
                Some(v) => Some(v),
                None => defaults.jitter,
            },
            deadline_ms: match self.deadline_ms {
                Some(v) => Some(v),
                None => defaults.deadline_ms,
            },
        }
    }

    /// The per-attempt timeout, if any.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout_ms.map(Duration::from_millis)
    }

    /// The total deadline, if any.
    pub fn deadline(&self) -> Option<Duration> {
        self.deadline_ms.map(Duration::from_millis)
    }

    /// The number of retries (0 unless set).
    pub fn retries(&self) -> u32 {
        self.retries.unwrap_or(0)
    }
}

/// The settings that are set, as a step writes them, without quotes and in this order:
/// `timeout = 5s, retries = 3, backoff = exponential(100ms, 10s), jitter = true,
/// deadline = 1m30s` (a fixed backoff is `backoff = 100ms`). Durations are exact, in the units of
/// the DSL (`1h`, `1m30s`, `1s500ms`, `0ms`). [`NodePolicy::NONE`] is the empty string.
///
/// ```
/// use flowdag_runtime::{Backoff, NodePolicy};
///
/// let policy = NodePolicy {
///     retries: Some(3),
///     backoff: Some(Backoff::Fixed { ms: 1_500 }),
///     ..NodePolicy::NONE
/// };
/// assert_eq!(policy.to_string(), "retries = 3, backoff = 1s500ms");
/// assert_eq!(NodePolicy::NONE.to_string(), "");
/// ```
impl fmt::Display for NodePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut setting = |f: &mut fmt::Formatter<'_>, name: &str| -> fmt::Result {
            if !std::mem::take(&mut first) {
                f.write_str(", ")?;
            }
            write!(f, "{name} = ")
        };
        if let Some(ms) = self.timeout_ms {
            setting(f, "timeout")?;
            write_ms(f, ms)?;
        }
        if let Some(retries) = self.retries {
            setting(f, "retries")?;
            write!(f, "{retries}")?;
        }
        match self.backoff {
            Some(Backoff::Fixed { ms }) => {
                setting(f, "backoff")?;
                write_ms(f, ms)?;
            }
            Some(Backoff::Exponential { base_ms, max_ms }) => {
                setting(f, "backoff")?;
                f.write_str("exponential(")?;
                write_ms(f, base_ms)?;
                f.write_str(", ")?;
                write_ms(f, max_ms)?;
                f.write_str(")")?;
            }
            None => {}
        }
        if let Some(jitter) = self.jitter {
            setting(f, "jitter")?;
            write!(f, "{jitter}")?;
        }
        if let Some(ms) = self.deadline_ms {
            setting(f, "deadline")?;
            write_ms(f, ms)?;
        }
        Ok(())
    }
}

/// Writes `ms` milliseconds exactly, in the DSL's units: `1h`, `1m30s`, `1s500ms`, `0ms`.
fn write_ms(f: &mut fmt::Formatter<'_>, ms: u64) -> fmt::Result {
    if ms == 0 {
        return f.write_str("0ms");
    }
    let parts = [
        (ms / 3_600_000, "h"),
        (ms / 60_000 % 60, "m"),
        (ms / 1_000 % 60, "s"),
        (ms % 1_000, "ms"),
    ];
    for (value, unit) in parts {
        if value > 0 {
            write!(f, "{value}{unit}")?;
        }
    }
    Ok(())
}

/// Why a run was cancelled from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CancelReason {
    /// The run's [`CancelToken`] was cancelled.
    Token,
    /// An operator asked for it: a durable run's cancel request
    /// ([`durable::cancel_run`](crate::durable::cancel_run), `flow cancel`).
    Requested,
    /// The run's deadline (set with the runner's `deadline`) passed.
    Deadline(Duration),
    /// The run has a deadline but no timer could be made for it (the run is not polled inside
    /// a tokio runtime with time enabled): it was cancelled before any node started.
    NoTimer(Duration),
}

/// Cancels runs from outside: give a clone to a workflow's `runner().cancel_on(..)`, and call
/// [`CancelToken::cancel`] from anywhere.
///
/// ```
/// let token = flowdag_runtime::CancelToken::new();
/// let for_run = token.clone();
/// assert!(!for_run.is_cancelled());
/// token.cancel();
/// assert!(for_run.is_cancelled());
/// ```
#[derive(Debug, Clone, Default)]
pub struct CancelToken {
    inner: Arc<TokenInner>,
}

#[derive(Debug, Default)]
struct TokenInner {
    cancelled: AtomicBool,
    notify: Notify,
}

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels every run that watches this token (and every later one).
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::Release);
        self.inner.notify.notify_waiters();
    }

    /// Whether [`CancelToken::cancel`] has been called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::Acquire)
    }

    /// Resolves once the token is cancelled.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it resolves has no effect on the token.
    pub async fn cancelled(&self) {
        loop {
            let notified = self.inner.notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_reads_as_a_step_writes_it() {
        let all = NodePolicy {
            timeout_ms: Some(5_000),
            retries: Some(0),
            backoff: Some(Backoff::DEFAULT),
            jitter: Some(false),
            deadline_ms: Some(90_000),
        };
        assert_eq!(
            all.to_string(),
            "timeout = 5s, retries = 0, backoff = exponential(100ms, 10s), jitter = false, deadline = 1m30s"
        );
        let odd = NodePolicy {
            timeout_ms: Some(3_723_004),
            backoff: Some(Backoff::Fixed { ms: 0 }),
            ..NodePolicy::NONE
        };
        assert_eq!(odd.to_string(), "timeout = 1h2m3s4ms, backoff = 0ms");
        assert_eq!(NodePolicy::NONE.to_string(), "");
    }
}
