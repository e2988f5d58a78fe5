//! Metrics of durable runs, workers and stores, through the [`metrics`](https://docs.rs/metrics)
//! facade crate (feature `metrics`).
//!
//! With the feature on, durable runs (those a [`DurableRunner`](crate::durable::DurableRunner)
//! or a [`Worker`](crate::worker::Worker) drives, in this process) and workers record the
//! metrics below into whichever recorder the application installed: Prometheus ([`Prometheus`],
//! feature `prometheus`), OpenTelemetry (through a `metrics` exporter such as
//! `metrics-exporter-opentelemetry`), StatsD, or any other. Without the feature this module
//! holds the names alone, and every recording call of the runtime is an empty function.
//!
//! | name | kind | labels |
//! |---|---|---|
//! | `flow_runs_started_total` | counter | `workflow` |
//! | `flow_runs_finished_total` | counter | `workflow`, `status` (`succeeded`, `failed`, `cancelled`) |
//! | `flow_attempts_total` | counter | `workflow`, `outcome` (`completed`, `failed`, `retrying`, `timed_out`, `aborted`) |
//! | `flow_tasks_claimed_total` | counter | `workflow` |
//! | `flow_tasks_lost_total` | counter | `workflow` |
//! | `flow_store_retries_total` | counter | `operation` (`due_runs`, `claim_tasks`, `complete_task`, `heartbeat_tasks`) |
//! | `flow_step_duration_seconds` | histogram | `workflow`, `step` |
//! | `flow_decision_latency_seconds` | histogram | `workflow` |
//! | `flow_queue_lag_seconds` | histogram | `workflow`, `kind` (`run`, `task`) |
//! | `flow_runs_in_flight` | gauge | `workflow` |
//! | `flow_tasks_in_flight` | gauge | `workflow` |
//!
//! What each one measures, exactly, is in `docs/observability.md` ("Metrics") and on its
//! constant here. Runs that are not durable record nothing: the in-memory runner has no call
//! into this module, so a plain run costs the same with the feature on or off, and with or
//! without a recorder.

/// Runs created in a store by this process (a new run, not one resumed), by `workflow`.
pub const RUNS_STARTED: &str = "flow_runs_started_total";
/// Runs whose end this process committed, by `workflow` and `status` (`succeeded`, `failed`,
/// `cancelled`; a terminated run is `cancelled`).
pub const RUNS_FINISHED: &str = "flow_runs_finished_total";
/// Attempts of steps that ended, journaled live by this process, by `workflow` and `outcome`:
/// `completed`, `failed` (its last attempt), `retrying` (another attempt follows), `timed_out`
/// (whatever follows), `aborted` (stopped while it ran: a cancellation, a failure elsewhere, a
/// gate that withdrew it).
pub const ATTEMPTS: &str = "flow_attempts_total";
/// Tasks of distributed runs a worker claimed, by `workflow`.
pub const TASKS_CLAIMED: &str = "flow_tasks_claimed_total";
/// Tasks a worker executed whose claim it lost (its heartbeat found it lost, or its completion
/// was stale), by `workflow`.
pub const TASKS_LOST: &str = "flow_tasks_lost_total";
/// Requests of a worker to its store that failed with a retryable error and were made again
/// after a backoff, by `operation` (the `Store` method: `due_runs`, `claim_tasks`,
/// `complete_task`, `heartbeat_tasks`).
pub const STORE_RETRIES: &str = "flow_store_retries_total";
/// The duration of each attempt that ended, in seconds, by `workflow` and `step` (the node's
/// name, without a nest instance's path): from its `Requested` event (which waits for its
/// batch to commit before the attempt starts) to its end, on the run's clock.
pub const STEP_DURATION: &str = "flow_step_duration_seconds";
/// The time from the first event of a journal batch (the scheduler's decision, or the outcome
/// that prompts one) to the commit of that batch in the store, in seconds, by `workflow`: how
/// long a decision takes to become durable.
pub const DECISION_LATENCY: &str = "flow_decision_latency_seconds";
/// The time from when a run was due to when a worker picked it up, in seconds, by `workflow`
/// and `kind` (`run`): a waiting run's wake-up time; else the end of the lease it was left
/// with; else its last update (its release). Tasks (`kind="task"`) are not measured: a claim
/// does not carry the time its task became ready.
pub const QUEUE_LAG: &str = "flow_queue_lag_seconds";
/// Durable runs this process holds in memory now (loaded and driven, not unloaded), by
/// `workflow`.
pub const RUNS_IN_FLIGHT: &str = "flow_runs_in_flight";
/// Tasks of distributed runs a worker of this process executes now, by `workflow`.
pub const TASKS_IN_FLIGHT: &str = "flow_tasks_in_flight";

#[cfg(feature = "metrics")]
mod on;
#[cfg(feature = "metrics")]
pub(crate) use on::*;

#[cfg(not(feature = "metrics"))]
mod off;
#[cfg(not(feature = "metrics"))]
pub(crate) use off::*;

#[cfg(feature = "prometheus")]
mod prometheus;
#[cfg(feature = "prometheus")]
pub(crate) use prometheus::Listener;
#[cfg(feature = "prometheus")]
pub use prometheus::{MetricsError, Prometheus};

/// Without feature `prometheus`: a worker serves no endpoint.
#[cfg(not(feature = "prometheus"))]
pub(crate) struct Listener;

#[cfg(not(feature = "prometheus"))]
impl Listener {
    /// No address.
    pub(crate) fn none() -> Listener {
        Listener
    }

    /// No endpoint to serve.
    pub(crate) fn serve(&self) -> Option<Endpoint> {
        None
    }
}

/// Without feature `prometheus`: no endpoint is ever served.
#[cfg(not(feature = "prometheus"))]
pub(crate) enum Endpoint {}
