//! A PostgreSQL [`Store`] for durable flow runs: one database shared by many worker processes,
//! on many machines.
//!
//! ```no_run
//! use std::time::Duration;
//! use flowdag_store::{Batch, Committed, NewRun, Owner, Store, StoredEvent};
//! use flowdag_postgres::PostgresStore;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! // A URL or a key=value conninfo. Nothing is connected yet: `connect` only reads the string.
//! let store = PostgresStore::connect("postgres://flow@db.internal:5432/flow")?;
//! let owner = Owner::process();
//! let lease = Duration::from_secs(30);
//! // The first call connects and creates (or migrates) the schema `flow`.
//! let created = store.create_run(NewRun::new("order-42", "Checkout", 7, owner, lease)).await?;
//! let mut batch = Batch::new(created.lease().expect("a new run"), 0, lease);
//! batch.events.push(StoredEvent::new(0, "RunStarted"));
//! assert_eq!(store.commit(batch).await?, Committed::Applied { next_seq: 1 });
//! # Ok::<(), flowdag_store::StoreError>(())
//! # }).unwrap();
//! ```
//!
//! # Connecting
//!
//! [`PostgresStore::connect`] takes a URL (`postgres://user:password@host:port/dbname`,
//! `postgresql://…`) or a key=value conninfo (`host=… port=… user=… dbname=…`), as libpq does,
//! and connects nothing: connections are made when a method first needs one. A store made
//! while the server is down is fine; its calls answer [`StoreError::Unreachable`] until the
//! server is back, then work. Connections are plain TCP or Unix sockets (no TLS connector is
//! built in, so `sslmode=require` cannot connect: reach a remote server through a private
//! network or a local TLS proxy). Methods must be called inside a tokio runtime with I/O and
//! time enabled (each connection's I/O runs on a spawned task).
//!
//! # The schema
//!
//! Every table lives in the PostgreSQL schema `flow` ([`PostgresOptions::schema`] names
//! another), so the store shares a database with the application's own tables:
//!
//! - `runs`: one row per run: its status, its next sequence number, its lease (owner, version,
//!   expiry) and its wake-up time. Every decision about a run is a conditional update of this
//!   one row (`UPDATE runs SET next_seq = … WHERE id = … AND next_seq = … AND owner = … AND
//!   version = …`), after a `SELECT … FOR UPDATE` that orders concurrent writers: two
//!   deciders never both append at the same sequence number.
//! - `nodes`, `events`, `outputs`, `timers`, `signals`, `waits`: the graph, the journal, the
//!   stored outputs, the open timers, the signals (consumed by `UPDATE … WHERE consumed_seq IS
//!   NULL`: once), and the steps waiting for one.
//! - `tasks`: the operations of distributed runs, claimed by workers with `FOR UPDATE SKIP
//!   LOCKED` and a compare-and-set on the task's version (every change of a task takes a new
//!   version from a sequence: a former claimer's heartbeat and completion find it gone). A
//!   task carries its run's workflow and graph hash, so a claim reads one index range per
//!   version a worker has, whatever the backlog; the claim reads the task's inputs (the run's
//!   parameters, its predecessors' outputs) in the same transaction.
//! - `schema_version`: one row, the schema's version.
//!
//! All times (leases, timers, wake-ups, task claims) are milliseconds since the Unix epoch by
//! the *server's* clock (`clock_timestamp()`): the runtime hands the store durations, so the
//! clocks of the worker machines never meet.
//!
//! # Notifications
//!
//! The transactions that open tasks, complete one or send a signal notify the store's channel
//! ([`PostgresStore::channel`]) with `pg_notify`, delivered when they commit. A store listens
//! on a connection of its own from its first [`Store::watch`] (so a process holds one
//! connection more than its pool), and wakes the workers waiting for tasks, for due runs or
//! for one run's outcomes; a broken listening connection is made again, and every watcher is
//! woken when it listens again (it may have missed notifications). Workers still poll, less
//! often: a notification is a hint.
//!
//! # Migrations
//!
//! The first call of a store brings the schema to [`SCHEMA_VERSION`]: it applies the missing
//! [`MIGRATIONS`] in order, in one transaction, under a transaction-level advisory lock
//! (`pg_advisory_xact_lock`), so that of N workers starting together one migrates and the
//! others find the work done. Version 1 holds the durable runs; version 2 adds `tasks`;
//! version 3 gives tasks their run's workflow and graph hash and adds the indexes of claims
//! and due runs; version 4 adds each node's kind and policy (empty in the rows written
//! before: not stored). A schema of a newer flow is refused with [`StoreError::SchemaVersion`] (upgrade flow); a
//! schema `flow` with tables but no `schema_version` is another application's:
//! [`StoreError::Foreign`]. Nothing is written to a refused schema.
//!
//! # Errors
//!
//! - A connection refused, reset, closed or timed out (also a server shutting down) is
//!   [`StoreError::Unreachable`], naming `host:port/dbname` (never the password): workers
//!   retry it with backoff. The broken connection is dropped; the next call makes a new one.
//!   A commit whose answer was lost is sent again safely: commits are idempotent. A request
//!   that waits longer than the request timeout for a free connection of the store's own
//!   pool is `Unreachable` too (nothing was sent): a pool too small for the load shows as an
//!   error a worker retries, never as a caller that waits forever.
//! - A mistake of configuration is [`StoreError::Invalid`] from [`PostgresStore::connect_with`]
//!   itself, before any connection: a malformed URL, an empty schema name, one with a NUL
//!   character or longer than PostgreSQL's 63 bytes, `sslmode=require` (this crate connects
//!   without TLS). None of them is retried.
//! - A server that answers but refuses the connection (a wrong password, no such database) is
//!   [`StoreError::Io`] "connecting to `host:port/dbname`" with the server's reason in its
//!   message (`database "shop" does not exist`): a person must fix it; workers stop on it.
//! - Every other database error is [`StoreError::Io`] naming what was being done and the run,
//!   and the server's reason (``committing a batch of run `order-42`: writing events in
//!   `db:5432/flow`: db error: ERROR: …``).
//! - A transaction that PostgreSQL aborts for a serialization failure or a deadlock (SQLSTATE
//!   `40001`, `40P01`) is run again, up to five times.
//! - Each method is one transaction: a refused request writes nothing.
//!
//! # Tuning
//!
//! [`PostgresOptions::pool_size`] bounds the connections of one store (4 by default): a
//! worker's store needs about one per concurrent call (its deciders' commits, its task
//! claims, heartbeats and completions); the server's `max_connections` must cover every
//! worker's pool. [`PostgresOptions::connect_timeout`] bounds how long a call waits for a new
//! connection (5 s unless the URL sets `connect_timeout`), [`PostgresOptions::request_timeout`]
//! how long one request waits for a free connection of the pool and then for the server (30 s
//! each): a server that stops answering, or a pool that stays exhausted, is `Unreachable`,
//! not a hang. Each connection prepares every statement once and reuses it and
//! sets its session's `search_path`: behind a pooler such as PgBouncer, use session pooling
//! (transaction pooling would mix the sessions of different clients).
//!
//! The client is `tokio-postgres` with no default features but `runtime` (its protocol,
//! authentication and types crates make most of this crate's 74 dependencies, `cargo tree -p
//! flowdag-postgres -e normal`); the pool is this crate's own (a semaphore and a list of idle
//! connections, about a hundred lines): a pool crate such as `deadpool-postgres` would add its
//! own runtime abstraction and configuration layer for nothing this store uses.
//!
//! # Tests
//!
//! The feature `test-server` adds the module `testing`: a PostgreSQL server for tests
//! (`FLOW_PG_URL`, or the repository's throwaway cluster started by `.ci/postgres`) and stores
//! in fresh schemas. The crate's own tests turn it on.

mod listen;
mod ops;
mod pool;
mod schema;
#[cfg(feature = "test-server")]
pub mod testing;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use flowdag_store::{
    Batch, Committed, ContinueRun, Created, DueTimer, Lease, Loaded, NewRun, NewSignal, NodeRow,
    Notified, Owner, RunData, RunFilter, RunSummary, SignalSent, Store, StoreError, StoreFuture,
    StoredEvent, StoredSignal, TaskClaim, TaskCommitted, TaskInputs, TaskOutcome, TaskResult,
    Watch, WorkflowVersion,
};
use tokio::sync::OnceCell;

pub use schema::{MIGRATIONS, SCHEMA_VERSION};

use crate::listen::Listener;
use crate::ops::Fail;
use crate::pool::{Pool, Pooled, describe, is_connection_error, is_retry};

/// How a [`PostgresStore`] connects.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresOptions {
    /// The PostgreSQL schema that holds the store's tables (`flow`). Stores of different
    /// schemas in one database are independent.
    pub schema: String,
    /// At most this many connections at once.
    pub pool_size: usize,
    /// How long connecting may take (the socket, the server's greeting, the session's
    /// settings), unless the URL sets `connect_timeout`.
    pub connect_timeout: Duration,
    /// How long one request (its whole transaction) may wait for the server: past it, the
    /// connection is dropped and the answer is [`StoreError::Unreachable`] (the transaction
    /// was not committed, or it was and a request sent again finds it applied). A request
    /// also waits at most this long for a free connection of the pool, and then gets
    /// `Unreachable` without having sent anything.
    pub request_timeout: Duration,
    /// The password, when the connection string has none: so that it need not be written in
    /// a URL that shows in process lists and logs (read it from a file or the environment).
    /// A password in the connection string wins. Never shown by `Debug`.
    pub password: Option<String>,
    /// Never create or migrate the schema: a schema without a store, or with a store of an
    /// older version, is an error instead ([`StoreError::Foreign`], [`StoreError::Invalid`]).
    /// For those who only look (`flow serve` without `--allow-actions`): the schema's owner,
    /// the application or its workers, creates and migrates it. `false` by default.
    pub read_only: bool,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            schema: "flow".to_owned(),
            pool_size: 4,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            password: None,
            read_only: false,
        }
    }
}

impl std::fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresOptions")
            .field("schema", &self.schema)
            .field("pool_size", &self.pool_size)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("password", &self.password.as_ref().map(|_| "…"))
            .field("read_only", &self.read_only)
            .finish()
    }
}

/// A [`Store`] in a PostgreSQL database. Cheap to clone: clones share the connections. See the
/// [crate documentation](crate).
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Arc<Pool>,
    schema: String,
    request_timeout: Duration,
    /// [`PostgresOptions::read_only`].
    read_only: bool,
    /// Set once the schema is known to be at [`SCHEMA_VERSION`].
    migrated: OnceCell<()>,
    /// The store's notifications (`LISTEN/NOTIFY`), listened to from the first watch.
    listener: Listener,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("at", &self.inner.pool.at)
            .field("schema", &self.inner.schema)
            .finish_non_exhaustive()
    }
}

/// Runs `$body` (a future using `&mut $tx`) in a transaction on a pooled connection, commits
/// it, and runs it again on a serialization failure or a deadlock.
macro_rules! transact {
    ($store:expr, $doing:expr, |$tx:ident| $body:expr) => {{
        let store: &PostgresStore = $store;
        let mut tries = 0u32;
        loop {
            let mut conn = store.conn().await?;
            let work = async {
                let mut $tx = conn.begin().await?;
                let value = $body.await?;
                $tx.commit().await?;
                Ok::<_, Fail>(value)
            };
            let result = tokio::time::timeout(store.inner.request_timeout, work)
                .await
                .unwrap_or(Err(Fail::Timeout));
            match result {
                Ok(value) => break Ok(value),
                Err(fail) => {
                    tries += 1;
                    if let Some(error) = store.settle(&mut conn, fail, &$doing, tries) {
                        break Err(error);
                    }
                }
            }
        }
    }};
}

impl PostgresStore {
    /// A store on the database of `url` (a URL or a key=value conninfo), with the default
    /// options. Connects nothing: the first call does (so a server that is down is no error
    /// here). Errors: [`StoreError::Invalid`] for a malformed string.
    pub fn connect(url: &str) -> Result<PostgresStore, StoreError> {
        PostgresStore::connect_with(url, PostgresOptions::default())
    }

    /// A store on the database of `url` with `options`.
    pub fn connect_with(url: &str, options: PostgresOptions) -> Result<PostgresStore, StoreError> {
        let mut config =
            tokio_postgres::Config::from_str(url).map_err(|e| StoreError::Invalid {
                why: format!("the PostgreSQL connection string is malformed: {e}"),
            })?;
        if let Some(password) = &options.password
            && config.get_password().is_none()
        {
            config.password(password);
        }
        if options.schema.is_empty() {
            return Err(StoreError::Invalid {
                why: "the PostgreSQL schema of a store must have a name".to_owned(),
            });
        }
        // Mistakes of configuration are refused here, at once: met when connecting, they would
        // look like a server that cannot be reached, and a worker would try again for ever.
        if options.schema.contains('\0') {
            return Err(StoreError::Invalid {
                why: "the PostgreSQL schema's name holds a NUL character".to_owned(),
            });
        }
        if options.schema.len() > 63 {
            return Err(StoreError::Invalid {
                why: format!(
                    "the PostgreSQL schema's name is {} bytes long: PostgreSQL keeps 63 of an identifier, and two names that begin alike would be one schema",
                    options.schema.len()
                ),
            });
        }
        if config.get_ssl_mode() == tokio_postgres::config::SslMode::Require {
            return Err(StoreError::Invalid {
                why: "the connection string asks for TLS (`sslmode=require`), which this build of flowdag-postgres does not speak: connect over a local network or a TLS tunnel, with `sslmode=disable` or `prefer`".to_owned(),
            });
        }
        let listener = Listener::new(config.clone(), &options.schema);
        let pool = Pool::new(
            config,
            &options.schema,
            options.pool_size,
            options.connect_timeout,
            options.request_timeout,
        );
        Ok(PostgresStore {
            inner: Arc::new(Inner {
                pool: Arc::new(pool),
                schema: options.schema,
                request_timeout: options.request_timeout,
                read_only: options.read_only,
                migrated: OnceCell::new(),
                listener,
            }),
        })
    }

    /// Where the store is: `host:port/dbname` (no user, no password).
    pub fn at(&self) -> &str {
        &self.inner.pool.at
    }

    /// The PostgreSQL schema of its tables.
    pub fn schema(&self) -> &str {
        &self.inner.schema
    }

    /// The channel of its notifications: `flow_` and a hash of the schema's name. Every
    /// transaction that opens tasks, completes one or sends a signal notifies it; a worker
    /// listens to it ([`Store::watch`]). A program of yours may `LISTEN` to it too.
    pub fn channel(&self) -> &str {
        self.inner.listener.channel()
    }

    /// Connects (if no connection is open) and brings the schema to [`SCHEMA_VERSION`] now,
    /// rather than at the first call: to fail early at start-up.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        self.conn().await.map(drop)
    }

    /// A connection, the schema migrated.
    async fn conn(&self) -> Result<Pooled, StoreError> {
        let mut conn = self.inner.pool.get().await?;
        if self.inner.migrated.initialized() {
            return Ok(conn);
        }
        let migrated = self
            .inner
            .migrated
            .get_or_try_init(|| async {
                let mut tries = 0u32;
                loop {
                    tries += 1;
                    let done = schema::migrate(
                        &mut conn,
                        &self.inner.schema,
                        &self.inner.pool.at,
                        self.inner.read_only,
                    )
                    .await;
                    match done {
                        Ok(()) => return Ok(()),
                        Err(fail) => {
                            if let Some(error) =
                                self.settle(&mut conn, fail, "migrating the schema", tries)
                            {
                                return Err(error);
                            }
                        }
                    }
                }
            })
            .await;
        migrated.map(|_| conn)
    }

    /// What to answer for `fail`, met `doing` something: `None` to run the transaction again.
    fn settle(&self, conn: &mut Pooled, fail: Fail, doing: &str, tries: u32) -> Option<StoreError> {
        match fail {
            Fail::Store(error) => Some(error),
            Fail::Timeout => {
                conn.broken = true;
                Some(StoreError::Unreachable {
                    at: self.inner.pool.at.clone(),
                    why: format!(
                        "no answer within {:?} (PostgresOptions::request_timeout)",
                        self.inner.request_timeout
                    ),
                })
            }
            Fail::Db(_, error) if is_retry(&error) && tries < 5 => None,
            Fail::Db(_, error) if is_connection_error(&error) => {
                conn.broken = true;
                Some(StoreError::Unreachable {
                    at: self.inner.pool.at.clone(),
                    why: describe(&error),
                })
            }
            Fail::Db(step, error) => Some(StoreError::io(
                format!("{doing}: {step} in `{}`", self.inner.pool.at),
                std::io::Error::other(describe(&error)),
            )),
        }
    }
}

impl Store for PostgresStore {
    fn create_run(&self, run: NewRun) -> StoreFuture<'_, Created> {
        Box::pin(async move {
            let doing = format!("creating run `{}`", run.id);
            transact!(self, doing, |tx| ops::create_run(&mut tx, run.clone()))
        })
    }

    fn load_run<'a>(
        &'a self,
        run: &'a str,
        owner: &'a Owner,
        lease: Duration,
    ) -> StoreFuture<'a, Loaded> {
        Box::pin(async move {
            let doing = format!("loading run `{run}`");
            transact!(self, doing, |tx| ops::load_run(&mut tx, run, owner, lease))
        })
    }

    fn list_runs<'a>(&'a self, filter: &'a RunFilter) -> StoreFuture<'a, Vec<RunSummary>> {
        Box::pin(
            async move { transact!(self, "listing runs", |tx| ops::list_runs(&mut tx, filter)) },
        )
    }

    fn events<'a>(&'a self, run: &'a str, from_seq: u64) -> StoreFuture<'a, Vec<StoredEvent>> {
        Box::pin(async move {
            let doing = format!("reading the events of run `{run}`");
            transact!(self, doing, |tx| ops::events(&mut tx, run, from_seq))
        })
    }

    fn run_data<'a>(&'a self, run: &'a str) -> StoreFuture<'a, RunData> {
        Box::pin(async move {
            let doing = format!("reading the data of run `{run}`");
            transact!(self, doing, |tx| ops::run_data(&mut tx, run))
        })
    }

    fn nodes<'a>(&'a self, run: &'a str) -> StoreFuture<'a, Vec<NodeRow>> {
        Box::pin(async move {
            let doing = format!("reading the nodes of run `{run}`");
            transact!(self, doing, |tx| ops::nodes(&mut tx, run))
        })
    }

    fn commit(&self, batch: Batch) -> StoreFuture<'_, Committed> {
        Box::pin(async move {
            let doing = format!("committing a batch of run `{}`", batch.run);
            transact!(self, doing, |tx| ops::commit(
                &mut tx,
                &batch,
                self.channel()
            ))
        })
    }

    fn due_timers(&self, horizon: Duration, limit: u32) -> StoreFuture<'_, Vec<DueTimer>> {
        Box::pin(async move {
            transact!(self, "reading the due timers", |tx| ops::due_timers(
                &mut tx, horizon, limit
            ))
        })
    }

    fn send_signal(&self, signal: NewSignal) -> StoreFuture<'_, SignalSent> {
        Box::pin(async move {
            let doing = format!("sending signal `{}` to run `{}`", signal.name, signal.run);
            transact!(self, doing, |tx| ops::send_signal(
                &mut tx,
                &signal,
                self.channel()
            ))
        })
    }

    fn signals<'a>(&'a self, run: &'a str, after: u64) -> StoreFuture<'a, Vec<StoredSignal>> {
        Box::pin(async move {
            let doing = format!("reading the signals of run `{run}`");
            transact!(self, doing, |tx| ops::signals(&mut tx, run, after))
        })
    }

    fn heartbeat<'a>(
        &'a self,
        owner: &'a Owner,
        held: &'a [Lease],
        lease: Duration,
    ) -> StoreFuture<'a, Vec<Lease>> {
        Box::pin(async move {
            let doing = format!("extending the leases of `{owner}`");
            transact!(self, doing, |tx| ops::heartbeat(
                &mut tx, owner, held, lease
            ))
        })
    }

    fn release<'a>(&'a self, owner: &'a Owner, held: &'a [Lease]) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let doing = format!("releasing the leases of `{owner}`");
            transact!(self, doing, |tx| ops::release(&mut tx, owner, held))
        })
    }

    fn reopen<'a>(&'a self, run: &'a str, marker: StoredEvent) -> StoreFuture<'a, RunSummary> {
        Box::pin(async move {
            let doing = format!("redriving run `{run}`");
            transact!(self, doing, |tx| ops::reopen(
                &mut tx,
                run,
                &marker,
                self.channel()
            ))
        })
    }

    fn delete_run<'a>(&'a self, run: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let doing = format!("deleting run `{run}`");
            transact!(self, doing, |tx| ops::delete_run(&mut tx, run))
        })
    }

    fn continue_run<'a>(&'a self, lease: &'a Lease, next: ContinueRun) -> StoreFuture<'a, Lease> {
        Box::pin(async move {
            let doing = format!("continuing run `{}` as new", lease.run);
            transact!(self, doing, |tx| ops::continue_run(
                &mut tx,
                lease,
                next.clone()
            ))
        })
    }

    fn due_runs<'a>(
        &'a self,
        owner: &'a Owner,
        workflows: &'a [WorkflowVersion],
        limit: u32,
    ) -> StoreFuture<'a, Vec<RunSummary>> {
        Box::pin(async move {
            transact!(self, "listing the due runs", |tx| ops::due_runs(
                &mut tx, owner, workflows, limit
            ))
        })
    }

    fn claim_tasks<'a>(
        &'a self,
        owner: &'a Owner,
        workflows: &'a [WorkflowVersion],
        limit: u32,
        lease: Duration,
    ) -> StoreFuture<'a, Vec<TaskClaim>> {
        Box::pin(async move {
            let doing = format!("claiming tasks for `{owner}`");
            transact!(self, doing, |tx| ops::claim_tasks(
                &mut tx, owner, workflows, limit, lease
            ))
        })
    }

    fn heartbeat_tasks<'a>(
        &'a self,
        held: &'a [TaskClaim],
        lease: Duration,
    ) -> StoreFuture<'a, Vec<TaskClaim>> {
        Box::pin(async move {
            transact!(self, "extending task claims", |tx| ops::heartbeat_tasks(
                &mut tx, held, lease
            ))
        })
    }

    fn complete_task<'a>(
        &'a self,
        claim: &'a TaskClaim,
        outcome: TaskOutcome,
    ) -> StoreFuture<'a, TaskCommitted> {
        Box::pin(async move {
            let doing = format!(
                "completing the task of node {} of run `{}`",
                claim.node, claim.run
            );
            transact!(self, doing, |tx| ops::complete_task(
                &mut tx,
                claim,
                &outcome,
                self.channel()
            ))
        })
    }

    fn task_results<'a>(&'a self, run: &'a str) -> StoreFuture<'a, Vec<TaskResult>> {
        Box::pin(async move {
            let doing = format!("reading the task results of run `{run}`");
            transact!(self, doing, |tx| ops::task_results(&mut tx, run))
        })
    }

    fn task_inputs<'a>(&'a self, run: &'a str) -> StoreFuture<'a, TaskInputs> {
        Box::pin(async move {
            let doing = format!("reading the task inputs of run `{run}`");
            transact!(self, doing, |tx| ops::task_inputs(&mut tx, run))
        })
    }

    fn watch(&self, what: Watch) -> Option<Notified> {
        self.inner.listener.watch(what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn password_of(url: &str, password: Option<&str>) -> Option<Vec<u8>> {
        let options = PostgresOptions {
            password: password.map(str::to_owned),
            ..PostgresOptions::default()
        };
        let store = PostgresStore::connect_with(url, options).expect("a store");
        store.inner.pool.password().map(<[u8]>::to_vec)
    }

    #[test]
    fn the_password_option_is_used_when_the_url_has_none_and_never_shown() {
        assert_eq!(
            password_of("postgres://ann@db/orders", Some("s3cret")),
            Some(b"s3cret".to_vec())
        );
        assert_eq!(
            password_of("postgres://ann:inurl@db/orders", Some("s3cret")),
            Some(b"inurl".to_vec()),
            "the URL's password wins"
        );
        assert_eq!(password_of("postgres://ann@db/orders", None), None);
        let options = PostgresOptions {
            password: Some("s3cret".to_owned()),
            ..PostgresOptions::default()
        };
        assert!(!format!("{options:?}").contains("s3cret"));
    }
}
