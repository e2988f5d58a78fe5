//! An embedded SQLite [`Store`] for durable flow runs: one file, no server.
//!
//! ```
//! use std::time::Duration;
//! use flowdag_store::{Batch, Committed, NewRun, Owner, Store, StoredEvent};
//! use flowdag_sqlite::SqliteStore;
//!
//! # let dir = std::env::temp_dir().join(format!("flow-sqlite-doc-{}", std::process::id()));
//! # let _ = std::fs::remove_dir_all(&dir);
//! # std::fs::create_dir_all(&dir).unwrap();
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = SqliteStore::open(dir.join("runs.db"))?;
//! let owner = Owner::process();
//! let lease = Duration::from_secs(30);
//! let created = store.create_run(NewRun::new("order-42", "Checkout", 7, owner, lease)).await?;
//! let mut batch = Batch::new(created.lease().expect("a new run"), 0, lease);
//! batch.events.push(StoredEvent::new(0, "RunStarted"));
//! // The future waits on a channel; the writer thread does the disk work.
//! assert_eq!(store.commit(batch).await?, Committed::Applied { next_seq: 1 });
//! # Ok::<(), flowdag_store::StoreError>(())
//! # }).unwrap();
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```
//!
//! # How it works
//!
//! - **One writer thread** owns the connection. Every [`Store`] method queues a request on a
//!   channel and returns a future that waits for the answer on a oneshot channel: the caller's
//!   task never touches the disk and never blocks.
//! - **Group commit**: the writer takes every request queued (up to
//!   [`SqliteOptions::max_group`]) and runs them in one transaction, batches of many runs
//!   together, so that one disk flush serves them all. Each request runs in a savepoint of its
//!   own: one that is refused (a conflict, a lost lease) leaves nothing behind and does not
//!   disturb the others (a request alone in its transaction needs no savepoint: a refused one
//!   rolls the transaction back). Answers are sent after `COMMIT` returns; if the commit fails, every
//!   request of the group gets the error and nothing of it was written.
//! - **WAL** journal mode; `synchronous = FULL` by default ([`Durability::Power`]: a commit
//!   acknowledged survives a power cut), `NORMAL` on request ([`Durability::Process`]: survives
//!   a crash of the process, not of the machine).
//! - **The file is checked before anything is written**: `PRAGMA application_id` is "FLOW"
//!   (`0x464C4F57`), `PRAGMA user_version` is the schema version, and a store has the tables
//!   and columns of that version. A SQLite file of another application is
//!   [`StoreError::Foreign`], a damaged one (a table missing or changed included)
//!   [`StoreError::Corrupt`], one from a newer flow [`StoreError::SchemaVersion`]; none of
//!   them is changed. A store of an older schema version is migrated to [`SCHEMA_VERSION`] when
//!   a store opens it (in one transaction), and read as it is by a client.
//! - **One process at a time**: opening takes an exclusive advisory lock on `<file>.lock` (and
//!   writes who holds it there); a second store on the same file, in this process or another,
//!   gets [`StoreError::Locked`] naming the holder. The operating system drops the lock when
//!   the process dies, however it dies. So when a store opens, every lease in its file was
//!   left by a store that closed or died: opening frees them, and a restarted process resumes
//!   its runs at once.
//! - **Clients**: [`SqliteStore::open_client`] opens an existing store without the lock, in
//!   any process, while its owner runs: it reads (`list_runs`, `events`, `run_data`,
//!   `signals`) and sends signals, which the owner's runs find at their next look; it refuses
//!   everything an owner does (creating, loading, committing runs, leases, timers). The
//!   command line's `flow runs`, `show` and `signal` go through it.

mod error;
mod ops;
mod schema;
mod writer;

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use flowdag_store::{
    Batch, Committed, ContinueRun, Created, DueTimer, Lease, Loaded, NewRun, NewSignal, NodeRow,
    Owner, RunData, RunFilter, RunSummary, SignalSent, Store, StoreError, StoreFuture, StoredEvent,
    StoredSignal,
};
use tokio::sync::oneshot;

pub use schema::{APPLICATION_ID, SCHEMA_VERSION};

use crate::ops::Db;
use crate::writer::{Answer, Counters, Job, Request};

/// What a commit acknowledged survives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// A power cut or an OS crash: every commit waits for the disk (`synchronous = FULL`).
    #[default]
    Power,
    /// A crash of the process: commits reach the OS, which writes them later
    /// (`synchronous = NORMAL` in WAL mode). Faster; a power cut may lose the last commits.
    Process,
}

/// How a [`SqliteStore`] is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteOptions {
    /// What an acknowledged commit survives.
    pub durability: Durability,
    /// A size limit, in pages (4 KiB each): a request that would grow the file past it fails
    /// with [`StoreError::Full`] and writes nothing. `None`: as large as the disk allows.
    pub max_pages: Option<u32>,
    /// How long to wait for a lock SQLite itself holds (a reader of another process).
    pub busy_timeout: Duration,
    /// At most this many requests in one transaction.
    pub max_group: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            durability: Durability::Power,
            max_pages: None,
            busy_timeout: Duration::from_secs(5),
            max_group: 256,
        }
    }
}

/// What the writer thread has done: [`SqliteStore::stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriterStats {
    /// Transactions run (each one disk flush at most).
    pub transactions: u64,
    /// Requests served in them.
    pub requests: u64,
}

/// A [`Store`] in one SQLite file. Cheap to clone: clones share the writer thread. See the
/// [crate documentation](crate).
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    jobs: Option<Sender<Job>>,
    writer: Option<JoinHandle<()>>,
    counters: Arc<Counters>,
    /// Held for the store's life: the advisory lock on `<file>.lock`; `None` for a client
    /// ([`SqliteStore::open_client`]), which takes no lock.
    _lock: Option<File>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .field("client", &self.is_client())
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (or creates) the store in the file `path` with the default options. Blocks while
    /// it checks the file and creates the schema (or migrates a store of an older schema
    /// version to [`SCHEMA_VERSION`]): call it at start-up (or in `spawn_blocking`), not inside
    /// a run.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_with(path, SqliteOptions::default())
    }

    /// Opens (or creates) the store in the file `path` with `options`.
    pub fn open_with(
        path: impl AsRef<Path>,
        options: SqliteOptions,
    ) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref().to_owned();
        let (lock, made) = lock(&path)?;
        let conn = match schema::open(&path, &options, true, false) {
            Ok(conn) => conn,
            Err(error) => {
                // A file refused for what it holds (not a store of flow, damaged, of a newer
                // flow) gets no lock file left beside it by this look. Removed while held: a
                // process that opens it meanwhile is refused the same way.
                let refused = matches!(
                    error,
                    StoreError::Foreign { .. }
                        | StoreError::Corrupt { .. }
                        | StoreError::SchemaVersion { .. }
                );
                if made && refused {
                    let _ = std::fs::remove_file(lock_path(&path));
                }
                return Err(error);
            }
        };
        // The file lock is ours: no other store of this file is alive, in this process or in
        // another, so every lease in the file was left by a store that closed or died. Freeing
        // them lets a restarted process resume its runs at once instead of after the leases
        // expire. Best effort: if it fails (a full disk), the leases expire by themselves.
        let _ = conn.execute(
            "UPDATE runs SET owner = NULL, lease_until = NULL WHERE owner IS NOT NULL",
            [],
        );
        SqliteStore::start(path, conn, &options, Some(lock), false)
    }

    /// Opens the existing store in the file `path` as a *client*: without the file's lock, so
    /// while another process (a worker, the application) owns the store, and without freeing
    /// any lease. A client reads ([`Store::list_runs`], [`Store::events`], [`Store::run_data`],
    /// [`Store::signals`]) and sends signals ([`Store::send_signal`]: a live run of the owner
    /// finds the signal at its next poll of the store, and a signal that a step waits for
    /// makes the run due, so a worker resumes a run that no process holds). Everything an
    /// owner does ([`Store::create_run`], [`Store::load_run`], [`Store::commit`],
    /// [`Store::heartbeat`], [`Store::release`], [`Store::due_timers`]) is refused with
    /// [`StoreError::Invalid`] naming the client mode.
    ///
    /// Blocks while it checks the file, like [`SqliteStore::open`].
    ///
    /// ```
    /// use flowdag_store::{NewRun, NewSignal, Owner, SignalMode, SignalSent, Store};
    /// use flowdag_sqlite::SqliteStore;
    /// # let dir = std::env::temp_dir().join(format!("flow-sqlite-client-doc-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// # let lease = std::time::Duration::from_secs(30);
    /// let owner = SqliteStore::open(dir.join("runs.db"))?; // the application's, holding the lock
    /// # owner.create_run(NewRun::new("order-42", "Order", 1, Owner::process(), lease)).await?;
    /// let client = SqliteStore::open_client(dir.join("runs.db"))?; // another process's
    /// let signal = NewSignal {
    ///     run: "order-42".into(),
    ///     name: "approve".into(),
    ///     payload: b"true".to_vec(),
    ///     mode: SignalMode::Kept,
    /// };
    /// assert!(matches!(client.send_signal(signal).await?, SignalSent::Stored { .. }));
    /// assert_eq!(owner.signals("order-42", 0).await?.len(), 1);
    /// # Ok::<(), flowdag_store::StoreError>(())
    /// # }).unwrap();
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    ///
    /// # Errors
    ///
    /// A missing file ([`StoreError::Io`]: a client never creates a store), and the errors of
    /// [`SqliteStore::open`] for a file that is not a store of flow ([`StoreError::Foreign`],
    /// an empty database included), a damaged one ([`StoreError::Corrupt`]) or one of a newer
    /// flow ([`StoreError::SchemaVersion`]). Nothing is written to a refused file, and a store
    /// of an older schema version is read as it is, not migrated (its owner migrates it).
    pub fn open_client(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref().to_owned();
        if !path.is_file() {
            return Err(StoreError::io(
                format!(
                    "opening `{}` as a client (a client never creates a store)",
                    path.display()
                ),
                std::io::Error::from(std::io::ErrorKind::NotFound),
            ));
        }
        let options = SqliteOptions::default();
        let conn = schema::open(&path, &options, false, false)?;
        SqliteStore::start(path, conn, &options, None, false)
    }

    /// Opens the existing store in the file `path` as a client ([`SqliteStore::open_client`])
    /// that never writes: its connection is opened read-only (`SQLITE_OPEN_READ_ONLY`), so
    /// [`Store::send_signal`] and every other write is refused by SQLite itself (an error
    /// naming the read-only database), the store's journal mode is left as it is, and closing
    /// it checkpoints nothing. No lock file is made; SQLite may make the `-wal` and `-shm`
    /// files of a store in WAL mode when its owner has closed (they hold no data).
    /// For those who only look, beside the process that owns the store: `flow serve` without
    /// `--allow-actions`.
    ///
    /// # Errors
    ///
    /// Those of [`SqliteStore::open_client`].
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref().to_owned();
        if !path.is_file() {
            return Err(StoreError::io(
                format!(
                    "opening `{}` read-only (a reader never creates a store)",
                    path.display()
                ),
                std::io::Error::from(std::io::ErrorKind::NotFound),
            ));
        }
        let options = SqliteOptions::default();
        let conn = schema::open(&path, &options, false, true)?;
        SqliteStore::start(path, conn, &options, None, true)
    }

    /// Whether this store was opened as a client ([`SqliteStore::open_client`]).
    pub fn is_client(&self) -> bool {
        self.inner._lock.is_none()
    }

    /// Starts the writer thread on `conn`.
    fn start(
        path: PathBuf,
        conn: rusqlite::Connection,
        options: &SqliteOptions,
        lock: Option<File>,
        read_only: bool,
    ) -> Result<SqliteStore, StoreError> {
        let (jobs, receiver) = mpsc::channel::<Job>();
        let counters = Arc::new(Counters::default());
        let writer = {
            let path = path.clone();
            let counters = Arc::clone(&counters);
            let max_group = options.max_group.max(1);
            std::thread::Builder::new()
                .name("flow-sqlite-writer".into())
                .spawn(move || writer::run(conn, path, receiver, max_group, counters, read_only))
                .map_err(|e| StoreError::io("starting the writer thread", e))?
        };
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                path,
                jobs: Some(jobs),
                writer: Some(writer),
                counters,
                _lock: lock,
            }),
        })
    }

    /// The refusal of an owner's method `method` by a client.
    fn client_refuses<T: Send + 'static>(&self, method: &str) -> Option<StoreFuture<'static, T>> {
        if !self.is_client() {
            return None;
        }
        let error = StoreError::Invalid {
            why: format!(
                "`{method}` is refused: `{}` was opened in client mode (`SqliteStore::open_client`), which only reads and sends signals; the process that runs the workflows opens it with `SqliteStore::open`",
                self.inner.path.display()
            ),
        };
        Some(Box::pin(std::future::ready(Err(error))))
    }

    /// The store's file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// What the writer thread has done so far.
    pub fn stats(&self) -> WriterStats {
        WriterStats {
            transactions: self.inner.counters.transactions.load(Ordering::Relaxed),
            requests: self.inner.counters.requests.load(Ordering::Relaxed),
        }
    }

    /// Queues `work` for the writer thread; the future waits for its answer.
    fn call<T, F>(&self, work: F) -> StoreFuture<'static, T>
    where
        T: Send + 'static,
        F: FnOnce(&Db<'_>) -> Result<T, StoreError> + Send + 'static,
    {
        let (answer, answered) = oneshot::channel();
        let job: Job = Box::new(Call { work, answer });
        let queued = self
            .inner
            .jobs
            .as_ref()
            .map(|jobs| jobs.send(job).is_ok())
            .unwrap_or(false);
        Box::pin(async move {
            if !queued {
                return Err(StoreError::Closed);
            }
            answered.await.unwrap_or(Err(StoreError::Closed))
        })
    }
}

/// Takes the advisory lock of the store at `path`, and writes who holds it.
/// The lock file of the store in `path`: `<file>.lock`.
fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Takes the advisory lock of the store in `path`, and writes this process's name in its
/// file; also whether the lock file was made now.
fn lock(path: &Path) -> Result<(File, bool), StoreError> {
    let lock_path = lock_path(path);
    let io = |e: std::io::Error| StoreError::io(format!("locking `{}`", path.display()), e);
    let made = !lock_path.exists();
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)
        .map_err(io)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            // The holder writes its name just after it takes the lock: a look in between
            // finds the file empty, so look again a few times (50 ms at most).
            let mut holder = String::new();
            for _ in 0..10 {
                holder.clear();
                let _ = file.rewind();
                let _ = file.read_to_string(&mut holder);
                if !holder.trim().is_empty() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            let holder = holder.trim();
            return Err(StoreError::Locked {
                path: path.to_owned(),
                holder: (!holder.is_empty()).then(|| holder.to_owned()),
            });
        }
        Err(TryLockError::Error(e)) => return Err(io(e)),
    }
    file.set_len(0).map_err(io)?;
    file.rewind().map_err(io)?;
    writeln!(file, "{}", Owner::process()).map_err(io)?;
    file.flush().map_err(io)?;
    Ok((file, made))
}

impl Drop for Inner {
    /// Stops the writer after the requests already queued, and waits for it: when the last
    /// handle is dropped, everything acknowledged is on disk and the file is closed.
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

/// A request: the work, and where its answer goes.
struct Call<T, F> {
    work: F,
    answer: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Request for Call<T, F>
where
    T: Send + 'static,
    F: FnOnce(&Db<'_>) -> Result<T, StoreError> + Send + 'static,
{
    fn run(self: Box<Self>, db: &Db<'_>) -> (bool, Answer) {
        let Call { work, answer } = *self;
        let result = work(db);
        let ok = result.is_ok();
        (
            ok,
            Box::new(move |failed: Option<&StoreError>| {
                let result = match (result, failed) {
                    (Ok(_), Some(error)) => Err(error.clone()),
                    (result, _) => result,
                };
                // The caller may have dropped its future: then nobody wants the answer.
                let _ = answer.send(result);
            }),
        )
    }

    fn refuse(self: Box<Self>, error: StoreError) {
        let _ = self.answer.send(Err(error));
    }
}

impl Store for SqliteStore {
    fn create_run(&self, run: NewRun) -> StoreFuture<'_, Created> {
        if let Some(refused) = self.client_refuses("create_run") {
            return refused;
        }
        self.call(move |db| ops::create_run(db, run))
    }

    fn load_run<'a>(
        &'a self,
        run: &'a str,
        owner: &'a Owner,
        lease: Duration,
    ) -> StoreFuture<'a, Loaded> {
        if let Some(refused) = self.client_refuses("load_run") {
            return refused;
        }
        let (run, owner) = (run.to_owned(), owner.clone());
        self.call(move |db| ops::load_run(db, &run, &owner, lease))
    }

    fn list_runs<'a>(&'a self, filter: &'a RunFilter) -> StoreFuture<'a, Vec<RunSummary>> {
        let filter = filter.clone();
        self.call(move |db| ops::list_runs(db, &filter))
    }

    fn events<'a>(&'a self, run: &'a str, from_seq: u64) -> StoreFuture<'a, Vec<StoredEvent>> {
        let run = run.to_owned();
        self.call(move |db| ops::events(db, &run, from_seq))
    }

    fn run_data<'a>(&'a self, run: &'a str) -> StoreFuture<'a, RunData> {
        let run = run.to_owned();
        self.call(move |db| ops::run_data(db, &run))
    }

    fn nodes<'a>(&'a self, run: &'a str) -> StoreFuture<'a, Vec<NodeRow>> {
        let run = run.to_owned();
        self.call(move |db| ops::nodes(db, &run))
    }

    fn commit(&self, batch: Batch) -> StoreFuture<'_, Committed> {
        if let Some(refused) = self.client_refuses("commit") {
            return refused;
        }
        self.call(move |db| ops::commit(db, batch))
    }

    fn due_timers(&self, horizon: Duration, limit: u32) -> StoreFuture<'_, Vec<DueTimer>> {
        if let Some(refused) = self.client_refuses("due_timers") {
            return refused;
        }
        self.call(move |db| ops::due_timers(db, horizon, limit))
    }

    fn send_signal(&self, signal: NewSignal) -> StoreFuture<'_, SignalSent> {
        self.call(move |db| ops::send_signal(db, signal))
    }

    fn signals<'a>(&'a self, run: &'a str, after: u64) -> StoreFuture<'a, Vec<StoredSignal>> {
        let run = run.to_owned();
        self.call(move |db| ops::signals(db, &run, after))
    }

    fn heartbeat<'a>(
        &'a self,
        owner: &'a Owner,
        held: &'a [Lease],
        lease: Duration,
    ) -> StoreFuture<'a, Vec<Lease>> {
        if let Some(refused) = self.client_refuses("heartbeat") {
            return refused;
        }
        let (owner, held) = (owner.clone(), held.to_vec());
        self.call(move |db| ops::heartbeat(db, &owner, &held, lease))
    }

    fn release<'a>(&'a self, owner: &'a Owner, held: &'a [Lease]) -> StoreFuture<'a, ()> {
        if let Some(refused) = self.client_refuses("release") {
            return refused;
        }
        let (owner, held) = (owner.clone(), held.to_vec());
        self.call(move |db| ops::release(db, &owner, &held))
    }

    /// Allowed to a client: a failed or cancelled run has no owner.
    fn reopen<'a>(&'a self, run: &'a str, marker: StoredEvent) -> StoreFuture<'a, RunSummary> {
        let run = run.to_owned();
        self.call(move |db| ops::reopen(db, &run, marker))
    }

    /// Allowed to a client: a finished run has no owner.
    fn delete_run<'a>(&'a self, run: &'a str) -> StoreFuture<'a, ()> {
        let run = run.to_owned();
        self.call(move |db| ops::delete_run(db, &run))
    }

    fn continue_run<'a>(&'a self, lease: &'a Lease, next: ContinueRun) -> StoreFuture<'a, Lease> {
        if let Some(refused) = self.client_refuses("continue_run") {
            return refused;
        }
        let lease = lease.clone();
        self.call(move |db| ops::continue_run(db, &lease, next))
    }
}
