//! `flow`, the command line of durable runs: an operator looks inside a store without writing
//! code.
//!
//! ```text
//! flow runs   <db> [--status S,..] [--workflow W] [--id-contains TEXT] [--from TIME]
//!                  [--until TIME] [--newest] [--after RUN] [--limit N] [--json]
//!                                  # one line per run: id, workflow, status, events, times
//! flow show   <db> <run> [--json] [--full] [--follow [--interval MS]]
//!                                  # the run, its error, its input and result, its steps'
//!                                  # statuses and outputs, the ends of its nest instances,
//!                                  # its compensations, its timeline, its signals; with
//!                                  # --follow, then its new events until it ends
//! flow signal <db> <run> <name> <json>
//!                                  # stores a signal for the run (kept until a step takes it)
//! flow resume <db> <run>           # resumes the run here (needs its workflow: see below)
//! flow cancel    <db> <run> [--reason TEXT]
//!                                  # cancels the run (its compensations run)
//! flow terminate <db> <run> [--reason TEXT]
//! flow terminate <db> --workflow W [--graph-hash H] [--reason TEXT]
//!                                  # ends runs at once, cancelled, without compensation
//! flow redrive   <db> <run> [--json]
//!                                  # sets a failed or cancelled run going again
//! flow delete    <db> <run>.. | [--status S] [--workflow W] [--until TIME] [--id-contains T]
//!                                  # deletes finished runs
//! flow serve     <db> [--addr IP:PORT] [--allow-actions]
//!                                  # the web view of the store's runs (read-only unless
//!                                  # --allow-actions): see the module `web`
//! ```
//!
//! `docs/operations.md` says what each operation does and guarantees.
//!
//! Every command takes `--schema NAME` for a PostgreSQL store whose tables are not in the
//! schema `flow`.
//!
//! `<db>` is the file of a [`SqliteStore`], or the URL of a PostgreSQL store
//! (`postgres://user@host:port/dbname` or `postgresql://…`, tables in the schema `flow`: a
//! [`PostgresStore`]). The generic binary `flow` (this crate's `main.rs`)
//! runs every command but `resume`, which runs the user's code: a binary of the user's that
//! registers its workflows runs them all:
//!
//! ```no_run
//! # mod hidden { pub struct Order; }
//! # #[cfg(any())]
//! fn main() -> std::process::ExitCode {
//!     flowdag_cli::Cli::new().register::<Order>().run()
//! }
//! # fn main() {}
//! ```
//!
//! `show` reads the run's data without its lease ([`Store::run_data`]). On a terminal every
//! value read from the store is escaped (a control character or a bidirectional override is
//! shown as `\u{1b}`, never written), and a value (an input, an output, a result, a signal's
//! payload) longer than 200 characters is cut there with its length (`… (12,345 characters;
//! --full to see all)`) unless `--full`. `--json` prints one JSON object with the values whole,
//! as the JSON they are stored as: `run`, `error`, `input`, `result`, `steps` (each with its
//! `output`), `instances`, `compensations`, `events`, `signals`. `--follow` looks for new
//! events every `--interval` ms (200 by default) and prints each once until the run has ended,
//! then ``run `id` ended: <status>``; with `--json` one object a line after the run's:
//! `{"event": ..}` for each event, `{"ended": <run>}` at the end.
//!
//! Exit codes: 0 ok; 2 usage (clap); 3 run not found; 4 store unusable (missing, foreign,
//! corrupt, locked by another process, written by a newer flow); 5 signal refused (payload
//! not JSON, run ended); 6 operation refused by the run's status; 1 anything else (the run's
//! workflow is not registered, the store failed).
//!
//! A SQLite store is owned by one process at a time, which holds an exclusive lock on its
//! file (a `Worker`, the application). `runs`, `show` and `signal` open it as a client
//! ([`SqliteStore::open_client`]: no lock, no lease taken or freed), so they work while its
//! owner runs; `resume` owns the store, and a store another process holds is
//! [`StoreError::Locked`] naming the holder, exit code 4, with nothing changed. A PostgreSQL
//! store has no such lock: every command works while workers run. A PostgreSQL server that
//! cannot be reached is exit code 4.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::fmt;
use std::future::Future;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Arg, ArgAction, ArgMatches, Command};
use flowdag_postgres::{PostgresOptions, PostgresStore};
use flowdag_runtime::Outcome;
use flowdag_runtime::durable::{DurableError, DurableWorkflow, resume, runs_without_patch};
use flowdag_runtime::store::{
    NewSignal, RunCursor, RunData, RunFilter, RunStatus, RunSummary, SignalMode, SignalSent, Store,
    StoreError, StoredEvent, StoredOutput, StoredSignal,
};
use flowdag_sqlite::SqliteStore;
use serde_json::{Value, json};

mod operate;
mod table;
#[cfg(feature = "serve")]
pub mod web;

use table::{Table, printable, utc};

/// How the CLI resumes a run of one registered workflow.
type ResumeFn =
    fn(&Opened, &str) -> Pin<Box<dyn Future<Output = Result<Outcome<()>, DurableError>>>>;

/// The store a command works on: a SQLite file or a PostgreSQL database.
enum Opened {
    Sqlite(SqliteStore),
    Postgres(PostgresStore),
}

impl Opened {
    fn store(&self) -> &dyn Store {
        match self {
            Opened::Sqlite(store) => store,
            Opened::Postgres(store) => store,
        }
    }

    /// Whether this process may run the store's runs (not a SQLite client).
    fn owns(&self) -> bool {
        match self {
            Opened::Sqlite(store) => !store.is_client(),
            Opened::Postgres(_) => true,
        }
    }
}

/// Whether `db` names a PostgreSQL database rather than a file.
fn is_postgres(db: &str) -> bool {
    db.starts_with("postgres://") || db.starts_with("postgresql://")
}

/// The command line, with the workflows this binary can resume: `Cli::new()` for the generic
/// binary, `Cli::new().register::<Order>()` in a binary of the user's.
#[derive(Default)]
pub struct Cli {
    workflows: BTreeMap<String, Registered>,
}

/// What the command line can do with a workflow registered in its binary.
#[derive(Clone, Copy)]
struct Registered {
    /// Resumes a run of it.
    resume: ResumeFn,
    /// Checks a signal for a run of it (`DurableWorkflow::__check_signal`): `Ok(transient)`.
    check: CheckFn,
    /// What the web view knows of it: its graph and signals.
    #[cfg(feature = "serve")]
    known: fn() -> web::Known,
}

/// Why a command failed. [`CliError::exit_code`] is the process's exit code.
#[derive(Debug)]
#[non_exhaustive]
pub enum CliError {
    /// The arguments are wrong (or `--help` was asked): clap's message.
    Usage(clap::Error),
    /// There is no store at this path (the commands never create one).
    NoStore {
        /// The path given.
        path: PathBuf,
    },
    /// The store refused or failed the request.
    Store(StoreError),
    /// The store has no run of this id.
    RunNotFound {
        /// The id given.
        run: String,
        /// The store's file.
        path: PathBuf,
    },
    /// The signal's payload is not JSON.
    BadPayload {
        /// The signal's name.
        signal: String,
        /// What the JSON parser said.
        why: String,
    },
    /// The workflow of the run (registered in this binary) declares no signal of this name,
    /// or the payload does not read as the signal's type: nothing was stored.
    SignalRefused {
        /// The run.
        run: String,
        /// The signal's name.
        signal: String,
        /// Why.
        why: String,
    },
    /// The password file given cannot be read.
    PasswordFile {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// The run has ended: no step will take a signal.
    RunEnded {
        /// The run.
        run: String,
        /// How it ended.
        status: String,
    },
    /// This binary does not know the run's workflow, so it cannot resume it.
    Unregistered {
        /// The run.
        run: String,
        /// Its workflow.
        workflow: String,
        /// The workflows this binary knows.
        known: Vec<String>,
    },
    /// The run's status (or its history) does not allow the operation: a redrive of a run
    /// that did not fail and was not cancelled, or whose compensations ran; a cancel,
    /// terminate or delete of a run in the wrong status. Nothing was changed.
    Refused {
        /// The run.
        run: String,
        /// Why.
        why: String,
    },
    /// Resuming the run failed.
    Resume(DurableError),
    /// `flow serve` could not serve (the address cannot be bound, or the feature `serve` is
    /// off in this build).
    Serve(String),
    /// Writing the output failed.
    Output(io::Error),
}

impl CliError {
    /// The exit code for this error: 2 usage, 3 run not found, 4 store unusable, 5 signal
    /// refused, 6 operation refused, 1 anything else (0 for `--help` and `--version`).
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(error) => u8::try_from(error.exit_code()).unwrap_or(2),
            CliError::PasswordFile { .. } => 2,
            CliError::RunNotFound { .. } | CliError::Store(StoreError::NotFound { .. }) => 3,
            CliError::NoStore { .. }
            | CliError::Store(
                StoreError::Foreign { .. }
                | StoreError::Corrupt { .. }
                | StoreError::Locked { .. }
                | StoreError::SchemaVersion { .. }
                | StoreError::Unreachable { .. },
            ) => 4,
            CliError::BadPayload { .. }
            | CliError::SignalRefused { .. }
            | CliError::RunEnded { .. } => 5,
            CliError::Refused { .. } => 6,
            _ => 1,
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Usage(error) => write!(f, "{error}"),
            CliError::NoStore { path } => write!(
                f,
                "no store at `{}`: the file does not exist (flow never creates one here)",
                path.display()
            ),
            CliError::Store(error) => write!(f, "{error}"),
            CliError::RunNotFound { run, path } => {
                write!(
                    f,
                    "no run `{run}` in `{}` (`flow runs` lists them)",
                    path.display()
                )
            }
            CliError::BadPayload { signal, why } => {
                write!(f, "the payload of signal `{signal}` is not JSON: {why}")
            }
            CliError::SignalRefused { run, signal, why } => write!(
                f,
                "signal `{signal}` for run `{run}` refused, nothing was stored: {why}"
            ),
            CliError::PasswordFile { path, why } => write!(
                f,
                "the password file `{}` cannot be read: {why}",
                path.display()
            ),
            CliError::RunEnded { run, status } => write!(
                f,
                "run `{run}` has ended ({status}): no step will take the signal; nothing was stored"
            ),
            CliError::Unregistered {
                run,
                workflow,
                known,
            } => {
                write!(
                    f,
                    "run `{run}` is a run of `{workflow}`, which this binary does not know"
                )?;
                if known.is_empty() {
                    write!(f, " (it knows no workflow)")?;
                } else {
                    write!(f, " (it knows {})", known.join(", "))?;
                }
                write!(
                    f,
                    "; resume it from a binary that registers it: `flowdag_cli::Cli::new().register::<{workflow}>().run()`, or with a `flowdag::Worker`"
                )
            }
            CliError::Refused { run, why } => write!(f, "run `{run}` refused: {why}"),
            CliError::Resume(error) => write!(f, "{error}"),
            CliError::Serve(why) => write!(f, "cannot serve the view: {why}"),
            CliError::Output(error) => write!(f, "cannot write the output: {error}"),
        }
    }
}

impl std::error::Error for CliError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CliError::Usage(error) => Some(error),
            CliError::Store(error) => Some(error),
            CliError::Resume(error) => Some(error),
            CliError::Output(error) => Some(error),
            _ => None,
        }
    }
}

impl From<StoreError> for CliError {
    fn from(error: StoreError) -> CliError {
        CliError::Store(error)
    }
}

impl From<io::Error> for CliError {
    fn from(error: io::Error) -> CliError {
        CliError::Output(error)
    }
}

impl Cli {
    /// A command line that knows no workflow: every command but `resume`.
    pub fn new() -> Cli {
        Cli::default()
    }

    /// Registers `W`: `flow resume` resumes its runs in this process.
    pub fn register<W: DurableWorkflow>(mut self) -> Cli {
        self.workflows.insert(
            W::durable_name().into_owned(),
            Registered {
                resume: resume_erased::<W>,
                check: W::__check_signal,
                #[cfg(feature = "serve")]
                known: web::Known::of::<W>,
            },
        );
        self
    }

    /// Runs the command of this process's arguments, prints its output to stdout and an
    /// error to stderr; returns the exit code ([`CliError::exit_code`]).
    pub fn run(self) -> ExitCode {
        let mut out = io::stdout().lock();
        match self.run_with(std::env::args_os(), &mut out) {
            Ok(()) => ExitCode::SUCCESS,
            Err(CliError::Usage(error)) => {
                // clap prints help to stdout and errors to stderr, styled.
                let _ = error.print();
                ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2))
            }
            Err(error) => {
                let _ = out.flush();
                eprintln!("error: {}", printable(&error.to_string()));
                ExitCode::from(error.exit_code())
            }
        }
    }

    /// Runs the command of `args` (the first is the program's name), writing its output to
    /// `out`.
    ///
    /// # Errors
    ///
    /// [`CliError`]: the arguments, the store, the run, the payload, or the output.
    pub fn run_with<I, T>(&self, args: I, out: &mut dyn Write) -> Result<(), CliError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let matches = command()
            .try_get_matches_from(args)
            .map_err(CliError::Usage)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| CliError::Store(StoreError::io("starting the async runtime", e)))?;
        let (name, sub) = matches.subcommand().ok_or_else(|| {
            CliError::Usage(command().error(
                clap::error::ErrorKind::MissingSubcommand,
                "a command is required",
            ))
        })?;
        let db = string(sub, "db");
        if name == "serve" {
            #[cfg(feature = "serve")]
            return runtime.block_on(self.serve(sub, &db, out));
            #[cfg(not(feature = "serve"))]
            return Err(CliError::Serve(
                "this `flow` was built without its feature `serve`".to_owned(),
            ));
        }
        // `runs`, `show` and `signal` open a SQLite store as a client: they work while the
        // application or a worker owns the store, never create one, and write no lock file.
        let (opened, path) = if is_postgres(&db) {
            let schema = sub
                .get_one::<String>("schema")
                .cloned()
                .unwrap_or_else(|| "flow".to_owned());
            let options = PostgresOptions {
                schema,
                password: password(sub.get_one::<PathBuf>("password-file"))?,
                ..PostgresOptions::default()
            };
            let store = PostgresStore::connect_with(&db, options)?;
            // Errors name the server, never the URL (it may hold a password).
            let at = PathBuf::from(store.at());
            (Opened::Postgres(store), at)
        } else {
            let path = PathBuf::from(db);
            let store = match name {
                "resume" => open(&path)?,
                // Owned when nobody else owns it, so as to end or cancel a run here; a client
                // beside the owner, which then carries the request out.
                "cancel" | "terminate" => match open(&path) {
                    Err(CliError::Store(StoreError::Locked { .. })) => open_client(&path)?,
                    opened => opened?,
                },
                _ => open_client(&path)?,
            };
            (Opened::Sqlite(store), path)
        };
        let store = opened.store();
        let json = sub.try_get_one::<bool>("json").ok().flatten() == Some(&true);
        runtime.block_on(async {
            match name {
                "runs" => {
                    let mut filter = filter(sub);
                    if let Some(after) = sub.get_one::<String>("after") {
                        let run = find(store, &path, after).await?;
                        filter.after = Some(RunCursor::of(&run));
                    }
                    let patch = sub.get_one::<String>("without-patch").map(String::as_str);
                    runs(store, &filter, patch, json, out).await
                }
                "show" => {
                    let id = string(sub, "run");
                    let flag = |name: &str| sub.get_flag(name);
                    let args = ShowArgs {
                        id: &id,
                        json,
                        full: flag("full"),
                        follow: flag("follow").then(|| {
                            let ms = sub.get_one::<u64>("interval").copied().unwrap_or(200);
                            Duration::from_millis(ms)
                        }),
                        workflows: &self.workflows,
                    };
                    show(store, &path, args, out).await
                }
                "signal" => {
                    let (run, signal) = (string(sub, "run"), string(sub, "name"));
                    let payload = string(sub, "payload");
                    let to = SignalArgs {
                        id: &run,
                        name: &signal,
                        payload: &payload,
                    };
                    send(store, &path, to, &self.workflows, out).await
                }
                "cancel" | "terminate" | "redrive" | "delete" => {
                    operate::run(name, sub, &opened, &path, &self.workflows, out).await
                }
                _ => self.resume(&opened, &path, &string(sub, "run"), out).await,
            }
        })
    }

    /// `flow serve`: the web view of the store, until the process is stopped. A store that
    /// cannot be opened (missing, corrupt, of another version, a server that does not answer)
    /// is served as an error page on every path, so whoever looks sees why.
    #[cfg(feature = "serve")]
    async fn serve(&self, sub: &ArgMatches, db: &str, out: &mut dyn Write) -> Result<(), CliError> {
        let addr = sub
            .get_one::<std::net::SocketAddr>("addr")
            .copied()
            .unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], 7070)));
        let actions = sub.get_flag("allow-actions");
        let opened: Result<(std::sync::Arc<dyn Store>, String), CliError> = async {
            if is_postgres(db) {
                let options = PostgresOptions {
                    schema: string(sub, "schema"),
                    password: password(sub.get_one::<PathBuf>("password-file"))?,
                    // Without its actions the view never writes: not even a migration.
                    read_only: !actions,
                    ..PostgresOptions::default()
                };
                let store = PostgresStore::connect_with(db, options)?;
                let at = store.at().to_owned();
                Ok((std::sync::Arc::new(store) as std::sync::Arc<dyn Store>, at))
            } else {
                let path = PathBuf::from(db);
                // Without its actions the view never writes: a read-only open.
                let store = match actions {
                    true => open_client(&path)?,
                    false => open_read_only(&path)?,
                };
                Ok((
                    std::sync::Arc::new(store) as std::sync::Arc<dyn Store>,
                    path.display().to_string(),
                ))
            }
        }
        .await;
        let router = match opened {
            Ok((store, name)) => {
                // A store that cannot be read is said at once, and on every page.
                let read = store
                    .list_runs(&RunFilter {
                        limit: Some(1),
                        ..RunFilter::default()
                    })
                    .await;
                match read {
                    Ok(_) => {
                        let mut view = web::View::from_arc(store)
                            .name(&name)
                            .allow_actions(actions);
                        if sub.get_flag("metrics") {
                            view = view.store_metrics();
                        }
                        for host in sub.get_many::<String>("allow-host").into_iter().flatten() {
                            view = view.allow_host(host);
                        }
                        // Reached at a non-loopback address it listens on, by that address.
                        if !addr.ip().is_loopback() && !addr.ip().is_unspecified() {
                            view = view
                                .allow_host(&addr.to_string())
                                .allow_host(&addr.ip().to_string());
                        }
                        for (workflow, registered) in &self.workflows {
                            view = view.known(workflow.clone(), (registered.known)());
                        }
                        view.router()
                    }
                    Err(error) => {
                        let error = CliError::Store(error);
                        writeln!(out, "error: {error}")?;
                        web::unavailable(&name, &error.to_string())
                    }
                }
            }
            Err(error @ CliError::PasswordFile { .. }) => return Err(error),
            Err(error) => {
                writeln!(out, "error: {error}")?;
                // Never the URL on a page: it may hold a password.
                let name = match is_postgres(db) {
                    true => "the PostgreSQL store",
                    false => db,
                };
                web::unavailable(name, &error.to_string())
            }
        };
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| CliError::Serve(format!("cannot listen on {addr}: {e}")))?;
        let bound = listener
            .local_addr()
            .map_err(|e| CliError::Serve(e.to_string()))?;
        let mode = if actions {
            "actions on: signal, cancel, redrive"
        } else {
            "read-only"
        };
        writeln!(out, "serving http://{bound}/runs ({mode}); Ctrl-C stops it")?;
        if !bound.ip().is_loopback() {
            writeln!(
                out,
                "warning: {bound} is reachable from other machines, and the view has no authentication"
            )?;
        }
        out.flush()?;
        axum::serve(listener, router)
            .await
            .map_err(|e| CliError::Serve(e.to_string()))
    }

    async fn resume(
        &self,
        opened: &Opened,
        path: &Path,
        id: &str,
        out: &mut dyn Write,
    ) -> Result<(), CliError> {
        let store = opened.store();
        let run = find(store, path, id).await?;
        let Some(Registered { resume, .. }) = self.workflows.get(run.workflow.as_str()) else {
            return Err(CliError::Unregistered {
                run: run.id,
                workflow: run.workflow,
                known: self.workflows.keys().cloned().collect(),
            });
        };
        let outcome = resume(opened, id).await.map_err(CliError::Resume)?;
        let run = find(store, path, id).await?;
        match outcome.result {
            Ok(()) => writeln!(out, "run `{}` resumed: {}", printable(id), run.status)?,
            Err(error) => writeln!(
                out,
                "run `{}` resumed: {}: {}",
                printable(id),
                run.status,
                printable(&error.to_string())
            )?,
        }
        Ok(())
    }
}

impl fmt::Debug for Cli {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cli")
            .field("workflows", &self.workflows.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The commands and their arguments.
fn command() -> Command {
    let db = || {
        Arg::new("db")
            .required(true)
            .value_name("DB")
            .help("The store: a SQLite file, or a PostgreSQL URL (postgres://user@host:port/db)")
    };
    let run = || {
        Arg::new("run")
            .required(true)
            .value_name("RUN")
            .help("The run's id")
    };
    let schema = || {
        Arg::new("schema")
            .long("schema")
            .value_name("NAME")
            .default_value("flow")
            .help("The PostgreSQL schema of the store's tables (PostgreSQL stores only)")
    };
    let password_file = || {
        Arg::new("password-file")
            .long("password-file")
            .value_name("FILE")
            .value_parser(clap::value_parser!(PathBuf))
            .help("Read the PostgreSQL password from FILE (its first line), when the URL has none; else it is taken from PGPASSWORD. Never write it in the URL: process lists show arguments")
    };
    let json = || {
        Arg::new("json")
            .long("json")
            .action(ArgAction::SetTrue)
            .help("Print JSON, for scripts")
    };
    Command::new("flow")
        .about("Look inside a store of durable flow runs")
        .version(env!("CARGO_PKG_VERSION"))
        .subcommand_required(true)
        .arg_required_else_help(true)
        .subcommand(
            Command::new("runs")
                .about("List the runs with their status, oldest first")
                .arg(db())
                .arg(schema())
                .arg(password_file())
                .arg(
                    Arg::new("status")
                        .long("status")
                        .value_name("STATUS")
                        .value_parser(RunStatus::ALL.map(RunStatus::as_str))
                        .value_delimiter(',')
                        .action(ArgAction::Append)
                        .help("Only runs in one of these statuses (repeat it or separate with commas)"),
                )
                .arg(
                    Arg::new("workflow")
                        .long("workflow")
                        .value_name("NAME")
                        .help("Only runs of this workflow"),
                )
                .arg(
                    Arg::new("id-contains")
                        .long("id-contains")
                        .value_name("TEXT")
                        .help("Only runs whose id contains TEXT (as written: no pattern)"),
                )
                .arg(
                    Arg::new("without-patch")
                        .long("without-patch")
                        .value_name("ID")
                        .help("Only runs that started before the version marker `Patched(\"ID\")` was written (they take its old path); with --status running,waiting,compensating, none listed means the marker can be removed. Applied to the page --limit selects"),
                )
                .arg(
                    Arg::new("from")
                        .long("from")
                        .value_name("TIME")
                        .value_parser(parse_time)
                        .help("Only runs created at or after TIME (UTC: 2026-11-27, 2026-11-27T09:30:00Z, or ms since the epoch)"),
                )
                .arg(
                    Arg::new("until")
                        .long("until")
                        .value_name("TIME")
                        .value_parser(parse_time)
                        .help("Only runs created before TIME (as --from)"),
                )
                .arg(
                    Arg::new("newest")
                        .long("newest")
                        .action(ArgAction::SetTrue)
                        .help("The newest runs first (--after then pages towards older ones)"),
                )
                .arg(
                    Arg::new("after")
                        .long("after")
                        .value_name("RUN")
                        .help("Only runs after run RUN in the list: the next page after a page that ended with RUN"),
                )
                .arg(
                    Arg::new("limit")
                        .long("limit")
                        .value_name("N")
                        .value_parser(clap::value_parser!(u32))
                        .help("At most N runs (the oldest, or the newest with --newest): a page"),
                )
                .arg(json()),
        )
        .subcommand(
            Command::new("show")
                .about("Show a run: its input, its steps' statuses and outputs, its timeline, its unconsumed signals")
                .arg(db())
                .arg(schema())
                .arg(password_file())
                .arg(run())
                .arg(json())
                .arg(
                    Arg::new("full")
                        .long("full")
                        .action(ArgAction::SetTrue)
                        .help("Print values (input, outputs, result, payloads) whole; without it a value is cut at 200 characters (--json always prints them whole)"),
                )
                .arg(
                    Arg::new("follow")
                        .long("follow")
                        .short('f')
                        .action(ArgAction::SetTrue)
                        .help("Then print the run's new events as they are committed, until it ends (with --json: one JSON object a line)"),
                )
                .arg(
                    Arg::new("interval")
                        .long("interval")
                        .value_name("MS")
                        .value_parser(clap::value_parser!(u64).range(1..=3_600_000))
                        .default_value("200")
                        .requires("follow")
                        .help("With --follow: look for new events every MS milliseconds"),
                ),
        )
        .subcommand(
            Command::new("signal")
                .about("Send a signal to a run: stored, kept until a step takes it (works while a worker owns the store)")
                .arg(db())
                .arg(schema())
                .arg(password_file())
                .arg(run())
                .arg(
                    Arg::new("name")
                        .required(true)
                        .value_name("NAME")
                        .help("The signal's name, as the workflow declares it"),
                )
                .arg(
                    Arg::new("payload")
                        .required(true)
                        .value_name("JSON")
                        // A negative number is JSON, not an option.
                        .allow_hyphen_values(true)
                        .help("The payload, as JSON (`true`, `{\"by\":\"ann\"}`)"),
                ),
        )
        .subcommand(
            Command::new("resume")
                .about("Resume a run in this process (its workflow must be registered)")
                .arg(db())
                .arg(schema())
                .arg(password_file())
                .arg(run()),
        )
        .subcommand(serve_command(db(), schema(), password_file()))
        .subcommands(operate::commands(
            |command| command.arg(db()).arg(schema()).arg(password_file()),
            run,
        ))
}

/// `flow serve`'s arguments (the command is there without the feature `serve`, to say so).
fn serve_command(db: Arg, schema: Arg, password_file: Arg) -> Command {
    Command::new("serve")
        .about("Serve the web view of the store's runs (read-only unless --allow-actions)")
        .arg(db)
        .arg(schema)
        .arg(password_file)
        .arg(
            Arg::new("addr")
                .long("addr")
                .value_name("IP:PORT")
                .value_parser(clap::value_parser!(std::net::SocketAddr))
                .default_value("127.0.0.1:7070")
                .help("Listen on this address (loopback by default; port 0 picks a free one)"),
        )
        .arg(
            Arg::new("metrics")
                .long("metrics")
                .action(ArgAction::SetTrue)
                .help("Serve the store's gauges at /metrics for Prometheus: unfinished runs by workflow and status, runs due that no worker has taken, how long the oldest has waited"),
        )
        .arg(
            Arg::new("allow-host")
                .long("allow-host")
                .value_name("HOST")
                .action(ArgAction::Append)
                .help("Answer requests for this host name too (the name users type, or a proxy sends); by default only loopback names, against DNS rebinding"),
        )
        .arg(
            Arg::new("allow-actions")
                .long("allow-actions")
                .action(ArgAction::SetTrue)
                .help("Let the pages send signals, cancel and redrive runs (the view writes to the store only with it)"),
        )
}

/// A required string argument (clap has checked it is there).
fn string(matches: &ArgMatches, id: &str) -> String {
    matches.get_one::<String>(id).cloned().unwrap_or_default()
}

/// The filter of `flow runs`' options (clap has checked each status's name).
fn filter(matches: &ArgMatches) -> RunFilter {
    RunFilter {
        id: None,
        workflow: matches.get_one::<String>("workflow").cloned(),
        statuses: matches
            .get_many::<String>("status")
            .into_iter()
            .flatten()
            .filter_map(|name| name.parse().ok())
            .collect(),
        id_contains: matches.get_one::<String>("id-contains").cloned(),
        created_from_ms: matches.get_one::<u64>("from").copied(),
        created_before_ms: matches.get_one::<u64>("until").copied(),
        limit: matches.get_one::<u32>("limit").copied(),
        newest_first: matches.get_flag("newest"),
        ..RunFilter::default()
    }
}

/// A time given to `--from` or `--until`, in ms since the Unix epoch: UTC `2026-11-27`,
/// `2026-11-27T09:30`, `2026-11-27T09:30:00` (a `Z` after it, or a space for the `T`, are
/// taken too), or a number of ms since the epoch.
fn parse_time(text: &str) -> Result<u64, String> {
    let bad = || {
        format!(
            "`{text}` is not a time: write a UTC date and time (2026-11-27, 2026-11-27T09:30:00Z) or ms since the Unix epoch"
        )
    };
    if let Ok(ms) = text.parse::<u64>() {
        return Ok(ms);
    }
    let text = text.trim_end_matches('Z');
    let (date, time) = match text.split_once(['T', ' ']) {
        Some((date, time)) => (date, time),
        None => (text, "00:00:00"),
    };
    let numbers = |part: &str, sep: char| -> Option<Vec<u64>> {
        part.split(sep).map(|n| n.parse::<u64>().ok()).collect()
    };
    let (Some(date), Some(time)) = (numbers(date, '-'), numbers(time, ':')) else {
        return Err(bad());
    };
    let (&[year, month, day], [hour, minute, rest @ ..]) = (date.as_slice(), time.as_slice())
    else {
        return Err(bad());
    };
    let second = match rest {
        [] => 0,
        [second] => *second,
        _ => return Err(bad()),
    };
    let valid = (1970..=9999).contains(&year)
        && (1..=12).contains(&month)
        && (1..=days_in(year, month)).contains(&day)
        && *hour < 24
        && *minute < 60
        && second < 60;
    if !valid {
        return Err(bad());
    }
    let days = days_from_civil(year, month, day);
    Ok(((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000)
}

/// The days of `month` in `year` (Gregorian).
fn days_in(year: u64, month: u64) -> u64 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to a date at or after it (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The PostgreSQL password: the first line of `file` when given (a missing or unreadable file
/// is a configuration error), else the environment's `PGPASSWORD`, else none (the URL's, or a
/// server that asks for none).
fn password(file: Option<&PathBuf>) -> Result<Option<String>, CliError> {
    if let Some(file) = file {
        let text = std::fs::read_to_string(file).map_err(|error| CliError::PasswordFile {
            path: file.clone(),
            why: error.to_string(),
        })?;
        let line = text.lines().next().unwrap_or_default();
        return Ok(Some(line.to_owned()));
    }
    Ok(std::env::var("PGPASSWORD").ok().filter(|p| !p.is_empty()))
}

/// Opens the store at `path`, which must exist and be a store of flow, as its owner (for
/// `resume`). Looked at as a client first: `SqliteStore::open` would make a store of an empty
/// file, and the CLI never creates one.
fn open(path: &Path) -> Result<SqliteStore, CliError> {
    drop(open_client(path)?);
    Ok(SqliteStore::open(path)?)
}

/// The runs that pass `filter`, oldest first (newest first with `--newest`), in the store's
/// order (the order `--after` continues in: a PostgreSQL store orders ids by the database's
/// collation).
async fn list(store: &dyn Store, filter: &RunFilter) -> Result<Vec<RunSummary>, CliError> {
    Ok(store.list_runs(filter).await?)
}

/// The summary of run `id`, if the store has it.
async fn summary(store: &dyn Store, id: &str) -> Result<Option<RunSummary>, StoreError> {
    let one = RunFilter {
        id: Some(id.to_owned()),
        ..RunFilter::default()
    };
    Ok(store.list_runs(&one).await?.into_iter().next())
}

/// The run `id`, or [`CliError::RunNotFound`].
async fn find(store: &dyn Store, path: &Path, id: &str) -> Result<RunSummary, CliError> {
    summary(store, id)
        .await?
        .ok_or_else(|| CliError::RunNotFound {
            run: id.to_owned(),
            path: path.to_owned(),
        })
}

fn opt_time(ms: Option<u64>) -> String {
    ms.map_or_else(|| "-".to_owned(), utc)
}

async fn runs(
    store: &dyn Store,
    filter: &RunFilter,
    without_patch: Option<&str>,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let runs =
        match without_patch {
            Some(patch) => runs_without_patch(store, filter, patch)
                .await
                .map_err(|error| match error {
                    DurableError::Store(error) => CliError::Store(error),
                    error => CliError::Resume(error),
                })?,
            None => list(store, filter).await?,
        };
    if json {
        let list: Vec<Value> = runs.iter().map(run_json).collect();
        writeln!(out, "{}", Value::Array(list))?;
        return Ok(());
    }
    let mut table = Table::new([
        "ID", "WORKFLOW", "STATUS", "EVENTS", "CREATED", "UPDATED", "WAKE",
    ]);
    for run in &runs {
        table.row([
            run.id.clone(),
            run.workflow.clone(),
            run.status.to_string(),
            run.next_seq.to_string(),
            utc(run.created_ms),
            utc(run.updated_ms),
            opt_time(run.wake_at_ms),
        ]);
    }
    table.write(out)?;
    if let (Some(limit), Some(last)) = (filter.limit, runs.last())
        && runs.len() == limit as usize
    {
        writeln!(
            out,
            "(a page of {limit}: the next with `{}--after {}`)",
            if filter.newest_first { "--newest " } else { "" },
            printable(&last.id)
        )?;
    }
    Ok(())
}

fn run_json(run: &RunSummary) -> Value {
    json!({
        "id": run.id,
        "workflow": run.workflow,
        "graph_hash": format!("{:016x}", run.graph_hash),
        "status": run.status.as_str(),
        "events": run.next_seq,
        "owner": run.owner,
        "lease_until_ms": run.lease_until_ms,
        "wake_at_ms": run.wake_at_ms,
        "created_ms": run.created_ms,
        "updated_ms": run.updated_ms,
    })
}

/// One step of a run as its journal shows it.
struct Step {
    name: String,
    /// A step of a nest instance: its failure is the instance's, not the run's.
    nested: bool,
    status: &'static str,
    attempts: u32,
    error: Option<String>,
}

/// Whether `kind` is an event of the compensation phase (`Compensating`, `Compensated`,
/// `CompensationRetrying`, `CompensationFailed`): its attempt is the compensation's.
fn is_compensation(kind: &str) -> bool {
    kind.starts_with("Compensat")
}

/// The index of the entry named `name` in `list`, added by `new` when there is none;
/// `index` maps each name to its entry (one look-up per event, whatever the count of steps).
fn entry<T>(
    list: &mut Vec<T>,
    index: &mut HashMap<String, usize>,
    name: &str,
    new: impl FnOnce() -> T,
) -> usize {
    if let Some(&i) = index.get(name) {
        return i;
    }
    list.push(new());
    index.insert(name.to_owned(), list.len() - 1);
    list.len() - 1
}

/// The name a step's event is shown under: the step's name, after its nest instance's path
/// for a step of an instance (`shipped[3]/parcel`); `None` for a run-level event.
fn step_name(event: &StoredEvent) -> Option<String> {
    let name = event.node_name.as_ref()?;
    Some(match &event.path {
        Some(path) => format!("{path}/{name}"),
        None => name.clone(),
    })
}

/// The steps' statuses, projected from the journal, in the order they first appear (the
/// steps of nest instances under their path).
fn steps(events: &[StoredEvent]) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut index = HashMap::new();
    for event in events {
        let Some(name) = step_name(event) else {
            continue;
        };
        if is_compensation(&event.kind) {
            continue;
        }
        let nested = event.path.is_some();
        let i = entry(&mut steps, &mut index, &name, || Step {
            nested,
            name: name.clone(),
            status: "requested",
            attempts: 0,
            error: None,
        });
        let step = &mut steps[i];
        step.attempts = step.attempts.max(event.attempt);
        step.status = match event.kind.as_str() {
            "Requested" => "running",
            "TimerSet" => "waiting (timer)",
            "TimerFired" => "running",
            "Retrying" => "in backoff",
            "TimedOut" => "timed out",
            "Completed" => "completed",
            "Failed" => "failed",
            "Skipped" => "skipped",
            "Aborted" => "aborted",
            "Withdrawn" => "withdrawn",
            "Won" => "won",
            _ => step.status,
        };
        if matches!(event.kind.as_str(), "Failed" | "Retrying")
            && let Some(error) = data(event).get("error").and_then(Value::as_str)
        {
            step.error = Some(error.to_owned());
        }
    }
    steps
}

/// The compensation of one step (`compensate = ..`) as the journal shows it.
struct Undo {
    step: String,
    status: &'static str,
    attempts: u32,
    error: Option<String>,
}

/// The compensations a failed run started, in the order it started them (the reverse order
/// of the graph): each with its status, its attempts and its last error.
fn compensations(events: &[StoredEvent]) -> Vec<Undo> {
    let mut undo: Vec<Undo> = Vec::new();
    let mut index = HashMap::new();
    for event in events.iter().filter(|e| is_compensation(&e.kind)) {
        let Some(name) = step_name(event) else {
            continue;
        };
        let i = entry(&mut undo, &mut index, &name, || Undo {
            step: name.clone(),
            status: "running",
            attempts: 0,
            error: None,
        });
        let this = &mut undo[i];
        this.attempts = this.attempts.max(event.attempt);
        this.status = match event.kind.as_str() {
            "Compensated" => "compensated",
            "CompensationRetrying" => "in backoff",
            "CompensationFailed" => "failed",
            _ => "running",
        };
        if let Some(error) = data(event).get("error").and_then(Value::as_str) {
            this.error = Some(error.to_owned());
        }
    }
    undo
}

/// Why the run failed, read from its journal: the steps that failed for good and the
/// compensations that failed; `None` when neither did (for a cancelled run, its status says
/// it).
fn run_error(steps: &[Step], undo: &[Undo]) -> Option<String> {
    let mut why: Vec<String> = steps
        .iter()
        .filter(|s| !s.nested && matches!(s.status, "failed" | "timed out"))
        .map(|s| match &s.error {
            Some(error) => format!("step `{}` failed: {error}", s.name),
            None => format!("step `{}` {}", s.name, s.status),
        })
        .collect();
    why.extend(undo.iter().filter(|u| u.status == "failed").map(|u| {
        let noun = if u.attempts == 1 {
            "attempt"
        } else {
            "attempts"
        };
        format!(
            "the compensation of `{}` failed after {} {noun}: {}",
            u.step,
            u.attempts,
            u.error.as_deref().unwrap_or("no error recorded")
        )
    }));
    (!why.is_empty()).then(|| why.join("; "))
}

/// An event's fields, as JSON (`null` when it has none).
fn data(event: &StoredEvent) -> Value {
    serde_json::from_slice(&event.data).unwrap_or(Value::Null)
}

/// A duration as serde writes it (`{"secs":..,"nanos":..}`), if it is one: `None` for fields
/// that are missing, out of range or overflow together.
fn duration(fields: &serde_json::Map<String, Value>) -> Option<std::time::Duration> {
    let secs = fields.get("secs")?.as_u64()?;
    let nanos = fields.get("nanos")?.as_u64()?;
    std::time::Duration::from_secs(secs).checked_add(std::time::Duration::from_nanos(nanos))
}

/// An event's fields, shown on one line.
fn detail(event: &StoredEvent) -> String {
    match data(event) {
        Value::Null => String::new(),
        Value::Object(map) => map
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k}={s}"),
                Value::Object(d) if d.contains_key("secs") => match duration(d) {
                    Some(duration) => format!("{k}={duration:?}"),
                    // Not a duration flow wrote: shown as it is stored.
                    None => format!("{k}={v}"),
                },
                other => format!("{k}={other}"),
            })
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

/// What `flow show` was asked for.
struct ShowArgs<'a> {
    /// The run's id.
    id: &'a str,
    /// JSON for scripts rather than tables.
    json: bool,
    /// Values whole, not cut at [`SHOWN_CHARS`] characters.
    full: bool,
    /// Whether to follow the run to its end, looking this often for new events.
    follow: Option<Duration>,
    /// The workflows this binary knows: their signals are checked against the run's.
    workflows: &'a BTreeMap<String, Registered>,
}

/// What `show` says of an unconsumed signal: `None` while a step of the run may still take
/// it; else why nothing will (the run ended; the run's workflow, registered in this binary,
/// does not take it) or that it is an operator's request the run has not carried out yet.
fn signal_note(run: &RunSummary, signal: &StoredSignal, check: Option<CheckFn>) -> Option<String> {
    if run.status.is_finished() {
        return Some("expired: the run ended without taking it".to_owned());
    }
    if flowdag_runtime::store::requests::is_request(&signal.name) {
        return Some("an operator's request, not carried out yet".to_owned());
    }
    check?(&signal.name, &signal.payload)
        .err()
        .map(|why| format!("no step will take it: {why}"))
}

/// A workflow's check of a signal for a run of it (`DurableWorkflow::__check_signal`):
/// `Ok(transient)`, or why it does not take it.
type CheckFn = fn(&str, &[u8]) -> Result<bool, String>;

/// Why a signal is not stored ([`signal_mode`]).
enum SignalRefusal {
    /// The run has ended: no step will take it.
    Ended,
    /// The name is an operator's request (`flow.cancel`): not a signal one sends.
    Reserved,
    /// The run's workflow does not take it: why.
    Refused(String),
}

/// How a signal `name` with `payload` is stored for `run`, as `flow signal` and the web view
/// check it: the run has not ended, the name is not an operator's request, and, when the run's
/// workflow is known (`check`), it declares the signal and the payload reads as its type (it
/// then says whether the signal is transient); an unknown workflow's signal is kept.
fn signal_mode(
    run: &RunSummary,
    name: &str,
    payload: &[u8],
    check: Option<CheckFn>,
) -> Result<SignalMode, SignalRefusal> {
    if run.status.is_finished() {
        return Err(SignalRefusal::Ended);
    }
    if flowdag_runtime::store::requests::is_request(name) {
        return Err(SignalRefusal::Reserved);
    }
    match check.map(|check| check(name, payload)) {
        Some(Ok(true)) => Ok(SignalMode::Transient),
        Some(Ok(false)) | None => Ok(SignalMode::Kept),
        Some(Err(why)) => Err(SignalRefusal::Refused(why)),
    }
}

/// How many characters of a value (an input, an output, a result, a signal's payload) `show`
/// prints on a terminal without `--full`.
const SHOWN_CHARS: usize = 200;

/// `bytes` (a stored value, JSON when flow wrote it) as text for a terminal: whole with
/// `full`, else its first [`SHOWN_CHARS`] characters and how long it is. Not escaped yet: a
/// table or [`printable`] escapes it. Takes the bytes, so that a value is not held twice.
fn shown(bytes: Vec<u8>, full: bool) -> String {
    let text = String::from_utf8(bytes)
        .unwrap_or_else(|error| String::from_utf8_lossy(error.as_bytes()).into_owned());
    if full {
        return text;
    }
    match text.char_indices().nth(SHOWN_CHARS) {
        Some((cut, _)) => format!(
            "{}… ({} characters; --full to see all)",
            &text[..cut],
            thousands(text.chars().count())
        ),
        None => text,
    }
}

/// `n` with a comma between each group of three digits: `12,345`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// A stored value as JSON: the value it holds, `null` for none (empty), and its text as a
/// JSON string when it is not JSON (a store not written by flow). Takes the bytes, so that a
/// value is not held twice.
fn stored_json(bytes: Vec<u8>) -> Value {
    if bytes.is_empty() {
        return Value::Null;
    }
    match serde_json::from_slice(&bytes) {
        Ok(value) => value,
        Err(_) => Value::String(
            String::from_utf8(bytes)
                .unwrap_or_else(|error| String::from_utf8_lossy(error.as_bytes()).into_owned()),
        ),
    }
}

/// Where each stored output belongs: to a step of the workflow (an index in `steps`), or
/// shown under its own name (a nest instance's record, `packed[1]`; `#3` for a node no event
/// names).
enum OutputOf {
    Step(usize),
    Other(String),
}

/// The place of each of `outputs` among `steps` (the names of the workflow's nodes are read
/// from the journal's events).
fn output_places(
    events: &[StoredEvent],
    steps: &[Step],
    outputs: &[StoredOutput],
) -> Vec<OutputOf> {
    let mut names: HashMap<u32, &str> = HashMap::new();
    for event in events.iter().filter(|e| e.path.is_none()) {
        if let (Some(node), Some(name)) = (event.node, &event.node_name) {
            names.entry(node).or_insert(name);
        }
    }
    let index: HashMap<&str, usize> = steps
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.nested)
        .map(|(i, s)| (s.name.as_str(), i))
        .collect();
    outputs
        .iter()
        .map(|output| {
            let name = names.get(&output.node).copied();
            if !output.instance.is_empty() {
                return OutputOf::Other(output.instance.clone());
            }
            match name.and_then(|name| index.get(name)) {
                Some(&i) => OutputOf::Step(i),
                None => {
                    OutputOf::Other(name.map_or_else(|| format!("#{}", output.node), str::to_owned))
                }
            }
        })
        .collect()
}

/// The cells of an event's line in the timeline.
fn event_row(event: &StoredEvent) -> [String; 6] {
    [
        event.seq.to_string(),
        format!("{:.3}ms", event.at_us as f64 / 1000.0),
        step_name(event).unwrap_or_else(|| match &event.path {
            Some(path) => path.to_string(),
            None => "-".to_owned(),
        }),
        event.kind.clone(),
        if event.node.is_some() {
            event.attempt.to_string()
        } else {
            String::new()
        },
        detail(event),
    ]
}

/// An event as JSON: an entry of `events` in `flow show --json`.
fn event_json(e: &StoredEvent) -> Value {
    json!({
        "seq": e.seq, "at_us": e.at_us, "node": e.node_name,
        "path": e.path.as_ref().map(ToString::to_string), "attempt": e.attempt,
        "kind": e.kind, "data": data(e),
    })
}

/// The sequence number after the last of `events`, or `next` when that is further.
fn after(events: &[StoredEvent], next: u64) -> u64 {
    events
        .last()
        .map_or(next, |e| e.seq.saturating_add(1).max(next))
}

async fn show(
    store: &dyn Store,
    path: &Path,
    args: ShowArgs<'_>,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let ShowArgs {
        id,
        json,
        full,
        follow,
        workflows,
    } = args;
    let run = find(store, path, id).await?;
    let events = store.events(id, 0).await?;
    let run_data = store.run_data(id).await?;
    let signals: Vec<(StoredSignal, Option<String>)> = store
        .signals(id, 0)
        .await?
        .into_iter()
        .map(|signal| {
            let check = workflows.get(run.workflow.as_str()).map(|w| w.check);
            let note = signal_note(&run, &signal, check);
            (signal, note)
        })
        .collect();
    let next = after(&events, 0);
    if json {
        show_json(&run, &events, run_data, &signals, out)?;
    } else {
        show_text(&run, &events, run_data, signals, full, out)?;
    }
    drop(events);
    match follow {
        Some(every) => follow_run(store, path, id, next, json, every, out).await,
        None => Ok(()),
    }
}

/// What `show` prints of a run: its stored data, and its steps, compensations and error as
/// its journal shows them (the error stored with its end when the journal shows none).
struct Projected {
    input: Vec<u8>,
    outputs: Vec<StoredOutput>,
    result: Option<Vec<u8>>,
    error: Option<String>,
    steps: Vec<Step>,
    undo: Vec<Undo>,
}

fn project(events: &[StoredEvent], run_data: RunData) -> Projected {
    let RunData {
        input,
        outputs,
        end,
        ..
    } = run_data;
    let steps = steps(events);
    let undo = compensations(events);
    let (result, stored_error) = end.map_or((None, None), |end| (end.result, end.error));
    let error = run_error(&steps, &undo).or(stored_error);
    Projected {
        input,
        outputs,
        result,
        error,
        steps,
        undo,
    }
}

fn show_json(
    run: &RunSummary,
    events: &[StoredEvent],
    run_data: RunData,
    signals: &[(StoredSignal, Option<String>)],
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let (parent, generation) = lineage(&run_data.options);
    let Projected {
        input,
        outputs,
        result,
        error,
        steps,
        undo,
    } = project(events, run_data);
    let places = output_places(events, &steps, &outputs);
    let mut step_outputs: Vec<Value> = vec![Value::Null; steps.len()];
    let mut others = Vec::new();
    for (output, place) in outputs.into_iter().zip(places) {
        let (node, instance) = (output.node, output.instance);
        let value = stored_json(output.bytes);
        match place {
            OutputOf::Step(i) => step_outputs[i] = value,
            OutputOf::Other(name) => others.push(json!({
                "node": node,
                "instance": (!instance.is_empty()).then_some(instance),
                "name": name,
                "output": value,
            })),
        }
    }
    let value = json!({
        "run": run_json(run),
        "parent": parent,
        "generation": generation,
        "error": error,
        "input": stored_json(input),
        "result": result.map_or(Value::Null, stored_json),
        "steps": steps.iter().zip(step_outputs).map(|(s, output)| json!({
            "name": s.name, "status": s.status, "attempts": s.attempts, "error": s.error,
            "output": output,
        })).collect::<Vec<_>>(),
        "instances": others,
        "compensations": undo.iter().map(|u| json!({
            "step": u.step, "status": u.status, "attempts": u.attempts, "error": u.error,
        })).collect::<Vec<_>>(),
        "events": events.iter().map(event_json).collect::<Vec<_>>(),
        "signals": signals.iter().map(|(signal, note)| {
            let mut value = signal_json(signal);
            value["note"] = json!(note);
            value
        }).collect::<Vec<_>>(),
    });
    writeln!(out, "{value}")?;
    Ok(())
}

/// The run that started a run at a `Workflow` step (a child run's parent), and the generation
/// of a run that continued as new (1 for the first), from its stored runner options; options
/// that cannot be read say neither.
fn lineage(options: &[u8]) -> (Option<String>, u64) {
    let options: Value = serde_json::from_slice(options).unwrap_or(Value::Null);
    let parent = options
        .get("parent")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let generation = options
        .get("generation")
        .and_then(Value::as_u64)
        .unwrap_or(1);
    (parent, generation)
}

fn show_text(
    run: &RunSummary,
    events: &[StoredEvent],
    run_data: RunData,
    signals: Vec<(StoredSignal, Option<String>)>,
    full: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let (parent, generation) = lineage(&run_data.options);
    let Projected {
        input,
        outputs,
        result,
        error,
        steps,
        undo,
    } = project(events, run_data);
    writeln!(out, "run       {}", printable(&run.id))?;
    writeln!(out, "workflow  {}", printable(&run.workflow))?;
    writeln!(out, "status    {}", run.status)?;
    if let Some(parent) = &parent {
        writeln!(out, "parent    {}", printable(parent))?;
    }
    if generation > 1 {
        writeln!(out, "generation {generation}")?;
    }
    if let Some(error) = &error {
        writeln!(out, "error     {}", printable(error))?;
    }
    writeln!(out, "events    {}", run.next_seq)?;
    writeln!(out, "created   {}", utc(run.created_ms))?;
    writeln!(out, "updated   {}", utc(run.updated_ms))?;
    writeln!(out, "wake      {}", opt_time(run.wake_at_ms))?;
    match (&run.owner, run.lease_until_ms) {
        (Some(owner), Some(until)) => {
            writeln!(
                out,
                "owner     {} (lease until {})",
                printable(owner),
                utc(until)
            )?;
        }
        _ => writeln!(out, "owner     -")?,
    }
    let input = if input.is_empty() {
        "-".to_owned()
    } else {
        shown(input, full)
    };
    writeln!(out, "input     {}", printable(&input))?;
    drop(input);
    if let Some(result) = result {
        writeln!(out, "result    {}", printable(&shown(result, full)))?;
    }
    writeln!(out)?;
    let places = output_places(events, &steps, &outputs);
    let mut step_outputs: Vec<Option<String>> = vec![None; steps.len()];
    let mut others = Table::new(["OUTPUT OF", "VALUE"]);
    let mut any_other = false;
    for (output, place) in outputs.into_iter().zip(places) {
        let value = shown(output.bytes, full);
        match place {
            OutputOf::Step(i) => step_outputs[i] = Some(value),
            OutputOf::Other(name) => {
                others.row([name, value]);
                any_other = true;
            }
        }
    }
    let mut table = Table::new(["STEP", "STATUS", "ATTEMPTS", "ERROR", "OUTPUT"]);
    for (step, output) in steps.iter().zip(step_outputs) {
        table.row([
            step.name.clone(),
            step.status.to_owned(),
            step.attempts.to_string(),
            step.error.clone().unwrap_or_default(),
            output.unwrap_or_default(),
        ]);
    }
    table.write(out)?;
    drop(table);
    if any_other {
        writeln!(out)?;
        others.write(out)?;
    }
    drop(others);
    if !undo.is_empty() {
        writeln!(out)?;
        let mut table = Table::new(["COMPENSATION", "STATUS", "ATTEMPTS", "ERROR"]);
        for u in &undo {
            table.row([
                u.step.clone(),
                u.status.to_owned(),
                u.attempts.to_string(),
                u.error.clone().unwrap_or_default(),
            ]);
        }
        table.write(out)?;
    }
    writeln!(out)?;
    let mut table = Table::new(["SEQ", "AT", "STEP", "EVENT", "ATTEMPT", "DETAIL"]);
    for event in events {
        table.row(event_row(event));
    }
    table.write(out)?;
    drop(table);
    if !signals.is_empty() {
        writeln!(out)?;
        let mut table = Table::new(["SIGNAL", "ID", "PAYLOAD", "SENT", "NOTE"]);
        for (signal, note) in signals {
            table.row([
                signal.name,
                signal.id.to_string(),
                shown(signal.payload, full),
                utc(signal.sent_ms),
                note.unwrap_or_default(),
            ]);
        }
        table.write(out)?;
    }
    Ok(())
}

/// `flow show --follow`: prints the events of run `id` from `next` on as they are committed,
/// looking every `every`, until the run has finished; then its final status.
///
/// The run's status is read before its events, each time: the batch that ends a run holds
/// its last events, so once the status read is final, the events read after it are all
/// there are.
async fn follow_run(
    store: &dyn Store,
    path: &Path,
    id: &str,
    mut next: u64,
    json: bool,
    every: Duration,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    loop {
        let run = find(store, path, id).await?;
        let events = store.events(id, next).await?;
        next = after(&events, next);
        if json {
            for event in &events {
                writeln!(out, "{}", json!({ "event": event_json(event) }))?;
            }
        } else if !events.is_empty() {
            let mut table = Table::headless();
            for event in &events {
                table.row(event_row(event));
            }
            table.write(out)?;
        }
        drop(events);
        if run.status.is_finished() {
            if json {
                writeln!(out, "{}", json!({ "ended": run_json(&run) }))?;
            } else {
                writeln!(out, "run `{}` ended: {}", printable(&run.id), run.status)?;
            }
            out.flush()?;
            return Ok(());
        }
        out.flush()?;
        tokio::time::sleep(every).await;
    }
}

fn signal_json(signal: &StoredSignal) -> Value {
    json!({
        "id": signal.id,
        "name": signal.name,
        "payload": serde_json::from_slice::<Value>(&signal.payload).unwrap_or(Value::Null),
        "mode": signal.mode.as_str(),
        "sent_ms": signal.sent_ms,
    })
}

/// Opens the store at `path`, which must exist, read-only: as a client that cannot write
/// ([`SqliteStore::open_read_only`]).
#[cfg(feature = "serve")]
fn open_read_only(path: &Path) -> Result<SqliteStore, CliError> {
    if !path.is_file() {
        return Err(CliError::NoStore {
            path: path.to_owned(),
        });
    }
    Ok(SqliteStore::open_read_only(path)?)
}

/// Opens the store at `path`, which must exist, as a client: no file lock (it works while
/// another process owns the store), reads and signals only.
fn open_client(path: &Path) -> Result<SqliteStore, CliError> {
    if !path.is_file() {
        return Err(CliError::NoStore {
            path: path.to_owned(),
        });
    }
    Ok(SqliteStore::open_client(path)?)
}

/// What `flow signal` sends: to which run, which signal, with what JSON.
struct SignalArgs<'a> {
    id: &'a str,
    name: &'a str,
    payload: &'a str,
}

/// `flow signal`: checks the signal against the run's workflow when this binary registered it
/// (its name declared, its payload of the declared type, kept or transient as declared), says
/// what it could not check otherwise, and stores it.
async fn send(
    store: &dyn Store,
    path: &Path,
    SignalArgs { id, name, payload }: SignalArgs<'_>,
    workflows: &BTreeMap<String, Registered>,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let value: Value = serde_json::from_str(payload).map_err(|error| CliError::BadPayload {
        signal: name.to_owned(),
        why: error.to_string(),
    })?;
    let run = find(store, path, id).await?;
    let bytes = value.to_string().into_bytes();
    let check = workflows.get(run.workflow.as_str()).map(|w| w.check);
    let refused = |why: String| CliError::SignalRefused {
        run: run.id.clone(),
        signal: name.to_owned(),
        why,
    };
    let mode = match signal_mode(&run, name, &bytes, check) {
        Ok(mode) => mode,
        Err(SignalRefusal::Ended) => {
            return Err(CliError::RunEnded {
                run: run.id,
                status: run.status.to_string(),
            });
        }
        Err(SignalRefusal::Reserved) => {
            return Err(refused(format!(
                "names that start with `{}` are an operator's requests: use `flow cancel` or `flow terminate`",
                flowdag_runtime::store::requests::PREFIX
            )));
        }
        Err(SignalRefusal::Refused(why)) => return Err(refused(why)),
    };
    let unchecked = check.is_none().then(|| run.workflow.clone());
    let sent = store
        .send_signal(NewSignal {
            run: id.to_owned(),
            name: name.to_owned(),
            payload: bytes,
            mode,
        })
        .await?;
    match sent {
        SignalSent::Stored { id: signal } => {
            writeln!(
                out,
                "signal `{}` stored for run `{}` (id {signal})",
                printable(name),
                printable(id)
            )?;
        }
        SignalSent::Dropped => writeln!(
            out,
            "signal `{}` dropped: no step of `{}` waits",
            printable(name),
            printable(id)
        )?,
    }
    if let Some(workflow) = unchecked {
        writeln!(
            out,
            "not checked: this binary does not have workflow `{}`, so neither the signal's name nor its payload's type was checked (a binary that registers it with `Cli::register` checks both)",
            printable(&workflow)
        )?;
    }
    Ok(())
}

/// [`resume`] of `W`, its output dropped (it is in the store).
fn resume_erased<W: DurableWorkflow>(
    opened: &Opened,
    id: &str,
) -> Pin<Box<dyn Future<Output = Result<Outcome<()>, DurableError>>>> {
    let erase = |outcome: Outcome<W::Output>| Outcome {
        result: outcome.result.map(|_| ()),
        report: outcome.report,
    };
    match opened {
        Opened::Sqlite(store) => {
            let run = resume::<W, SqliteStore>(store, id);
            Box::pin(async move { run.await.map(erase) })
        }
        Opened::Postgres(store) => {
            let run = resume::<W, PostgresStore>(store, id);
            Box::pin(async move { run.await.map(erase) })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_time;

    #[test]
    fn times_are_read_as_utc() {
        assert_eq!(parse_time("0"), Ok(0));
        assert_eq!(parse_time("1970-01-02"), Ok(86_400_000));
        assert_eq!(parse_time("2000-03-01T00:00:00Z"), Ok(951_868_800_000));
        assert_eq!(parse_time("2000-02-29 12:30"), Ok(951_827_400_000));
        assert_eq!(parse_time("2024-12-31T23:59:59"), Ok(1_735_689_599_000));
        for bad in [
            "2023-02-29",
            "2026-13-01",
            "2026-11-27T24:00",
            "1969-12-31",
            "yesterday",
            "2026-11",
            "2026-11-27T09:30:00:00",
        ] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }
}
