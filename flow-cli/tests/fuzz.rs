//! A fuzz test of the command line: every read command (`runs` and `runs --json` with random
//! filters, `show`, `show --json`, `show --full`, and `signal` with a random name and payload)
//! on random and damaged SQLite stores, in this process (`Cli::run_with`). Nothing may panic,
//! here or on a store's writer thread (whose death fails a request with
//! `StoreError::Closed`): every failure is a `CliError`, with the exit code of a usage error, a
//! missing run, a damaged store or a refused signal (2 to 5). What the commands print is
//! checked too: a table never carries a control character or a bidirectional override to the
//! terminal, and `--json` prints JSON.
//!
//! The stores are made once by real durable runs (a run that succeeded, one stopped midway,
//! a `ForEach` and a `Loop` whose instances ended, a saga that compensated, a run that waits
//! for a signal, a run whose id is hostile, and runs whose end holds a result or an error).
//! Each case copies one of them and then either changes its rows through SQL (random text,
//! control characters and huge values in text columns, random blobs and JSON in `data`,
//! `bytes`, `input` and `payload`, extreme integers, NULLs where the schema allows them,
//! deleted and duplicated rows, statuses outside the schema's checks, text that is not UTF-8,
//! a dropped table, another schema version or application id; on a copy whose tables are not
//! `STRICT`, values of any type in any column), or flips, zeroes or cuts bytes of the file.
//! Cases run on a few threads, each on a file of its own (in `/dev/shm` where there is one).
//!
//! `FLOW_FUZZ_CASES=n` runs n cases (10,000 by default); `FLOW_FUZZ_SEED=s` starts from seed
//! s (by default the clock's, printed at the start: `--nocapture` shows it). A failure names
//! the seed of its case: `FLOW_FUZZ_SEED=<that seed> FLOW_FUZZ_CASES=1` replays that case
//! alone.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::ThreadId;
use std::time::Duration;

use flowdag::prelude::*;
use flowdag_cli::{Cli, CliError};
use flowdag_runtime::store::{
    Batch, NewRun, Owner, RunEnd, RunStatus, Store, StoreError, StoredEvent,
};
use flowdag_sqlite::SqliteStore;
use rusqlite::Connection;
use rusqlite::types::Value as Sql;

mod common;
use common::{Failing, Order, fetch};

#[derive(Debug)]
struct Refused(&'static str);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Refused {}

async fn pack(line: u64) -> Result<u64, Refused> {
    match line {
        1 => Err(Refused("no box fits\u{1b}[2J")),
        _ => Ok(line),
    }
}

workflow! {
    #[flow(durable)]
    Packing(lines: u64) -> usize {
        packed = ForEach(line in 0..lines, on_failure = collect) {
            parcel = Operation(pack(line))
            => parcel
        }
        => packed.iter().filter(|p| p.is_ok()).count()
    }
}

async fn count(prev: Option<&u64>) -> Result<u64, Refused> {
    Ok(prev.copied().unwrap_or(0) + 1)
}

workflow! {
    #[flow(durable)]
    Counting(limit: u64) -> u64 {
        counted = Loop(max = 5, prev = last) {
            n = Operation(count(last))
            => n
        } until (n >= limit)
        => counted
    }
}

async fn reserve(order: u64) -> Result<u64, Refused> {
    Ok(order)
}

async fn release(_stock: &u64) -> Result<(), Refused> {
    Ok(())
}

async fn dispatch() -> Result<(), Refused> {
    Err(Refused("no courier"))
}

workflow! {
    #[flow(durable)]
    Saga(order: u64) -> u64 {
        Sequential {
            stock = Operation(reserve(order), compensate = release(&stock)),
            shipped = Operation(dispatch()),
        }
        => stock
    }
}

workflow! {
    #[flow(durable)]
    Confirming(order: u64) -> bool {
        Sequential {
            Operation(fetch(order)),
            confirmed = Signal(confirm: bool),
        }
        => confirmed
    }
}

/// A small PRNG (splitmix64): reproducible from its seed, no dependency.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n` (n > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True once in `n` times.
    fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// An integer, often one at an edge.
    fn integer(&mut self) -> i64 {
        match self.below(10) {
            0 => 0,
            1 => -1,
            2 => i64::MIN,
            3 => i64::MAX,
            4 => i64::from(u32::MAX),
            5 => i64::from(u32::MAX) + 1,
            6 => self.below(20) as i64,
            7 => -(self.below(1000) as i64),
            _ => self.next() as i64,
        }
    }

    /// Text, often hostile: control characters, bidirectional overrides, huge, or words the
    /// store or the command line give a meaning to.
    fn text(&mut self) -> String {
        const WORDS: &[&str] = &[
            "running",
            "waiting",
            "succeeded",
            "failed",
            "cancelled",
            "stuck",
            "compensating",
            "kept",
            "transient",
            "Requested",
            "Completed",
            "Failed",
            "Retrying",
            "TimerSet",
            "Compensating",
            "CompensationFailed",
            "RunStarted",
            "RunFinished",
            "SignalRejected",
            "packed[1]",
            "counted@2",
            "a[1]/b@2/c",
            "a[x]",
            "]",
            "@",
            "[",
            "/",
            "a//b",
            "delay",
            "backoff",
            "run_deadline",
            "0,1,2",
            ",",
            "1,,x",
            "done",
            "stopped",
        ];
        const CHARS: &[char] = &[
            'a',
            'Z',
            '0',
            ' ',
            '-',
            '%',
            '{',
            '}',
            '"',
            '\\',
            '\n',
            '\r',
            '\t',
            '\0',
            '\u{7}',
            '\u{1b}',
            '\u{7f}',
            '\u{85}',
            '\u{9b}',
            '\u{202e}',
            '\u{2066}',
            '\u{200b}',
            'é',
            '\u{301}',
            '日',
            '🦀',
            '\u{fffd}',
            '\u{10ffff}',
        ];
        match self.below(8) {
            0 => String::new(),
            1 | 2 => (*self.pick(WORDS)).to_owned(),
            3 if self.one_in(8) => {
                let n = self.below(70_000);
                let mut text = "x".repeat(n);
                text.push_str("\u{1b}]0;owned\u{7}");
                text
            }
            _ => {
                let n = self.below(40);
                (0..n).map(|_| *self.pick(CHARS)).collect()
            }
        }
    }

    /// Bytes for a blob: JSON (valid, deep, huge, with fields flow reads), text, or noise.
    fn blob(&mut self) -> Vec<u8> {
        match self.below(10) {
            0 => Vec::new(),
            1 => (0..self.below(64)).map(|_| self.next() as u8).collect(),
            2 => {
                let depth = self.below(5_000);
                let mut json = "[".repeat(depth);
                json.push_str(&"]".repeat(self.below(depth + 1)));
                json.into_bytes()
            }
            3 if self.one_in(8) => format!("\"{}\"", "w".repeat(self.below(70_000))).into_bytes(),
            4 => format!(r#"{{"secs":{},"nanos":{}}}"#, self.integer(), self.next()).into_bytes(),
            5 => format!(
                r#"{{"delay":{{"secs":{},"nanos":{}}},"error":{}}}"#,
                self.next(),
                self.integer(),
                json_string(&self.text())
            )
            .into_bytes(),
            6 => json_string(&self.text()).into_bytes(),
            7 => self.text().into_bytes(),
            _ => self.json(3).into_bytes(),
        }
    }

    /// A random JSON value, `depth` levels deep at most.
    fn json(&mut self, depth: usize) -> String {
        match self.below(if depth == 0 { 4 } else { 6 }) {
            0 => "null".to_owned(),
            1 => self.integer().to_string(),
            2 => json_string(&self.text()),
            3 => ["true", "1e999", "-0.0", "18446744073709551616"][self.below(4)].to_owned(),
            4 => {
                let items: Vec<String> = (0..self.below(4)).map(|_| self.json(depth - 1)).collect();
                format!("[{}]", items.join(","))
            }
            _ => {
                let fields: Vec<String> = (0..self.below(4))
                    .map(|_| {
                        let key =
                            *self.pick(&["error", "secs", "nanos", "branch", "k", "Ok", "Err"]);
                        format!("\"{key}\":{}", self.json(depth - 1))
                    })
                    .collect();
                format!("{{{}}}", fields.join(","))
            }
        }
    }

    /// A value for a column declared `declared` (`INTEGER`, `TEXT`, `BLOB`); of any type when
    /// `lax` (the table is not `STRICT`), `NULL` sometimes when `nullable`.
    fn value(&mut self, declared: &str, nullable: bool, lax: bool) -> Sql {
        if nullable && self.one_in(5) {
            return Sql::Null;
        }
        let declared = if lax && self.one_in(3) {
            *self.pick(&["INTEGER", "TEXT", "BLOB", "REAL", "NULL"])
        } else {
            declared
        };
        match declared {
            "INTEGER" => Sql::Integer(self.integer()),
            "TEXT" => Sql::Text(self.text()),
            "REAL" => Sql::Real(*self.pick(&[0.5, -1e300, f64::MAX, 3.0])),
            "NULL" => Sql::Null,
            _ => Sql::Blob(self.blob()),
        }
    }
}

/// `text` as a JSON string.
fn json_string(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

/// A column of a store's table.
struct Column {
    name: String,
    /// Its declared type: `INTEGER`, `TEXT`, `BLOB`.
    declared: String,
    nullable: bool,
    /// Part of the table's primary key.
    key: bool,
}

/// A table of a store, with its columns.
type Table = (String, Vec<Column>);

/// The tables of a store, with their columns.
fn tables(conn: &Connection) -> Vec<Table> {
    let names: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
        .and_then(|mut stmt| {
            stmt.query_map([], |row| row.get(0))?
                .collect::<rusqlite::Result<_>>()
        })
        .expect("the base store's tables");
    names
        .into_iter()
        .map(|table| {
            let columns = conn
                .prepare(&format!("PRAGMA table_info(\"{table}\")"))
                .and_then(|mut stmt| {
                    stmt.query_map([], |row| {
                        Ok(Column {
                            name: row.get(1)?,
                            declared: row.get(2)?,
                            nullable: row.get::<_, i64>(3)? == 0,
                            key: row.get::<_, i64>(5)? > 0,
                        })
                    })?
                    .collect::<rusqlite::Result<_>>()
                })
                .expect("the base store's columns");
            (table, columns)
        })
        .collect()
}

/// One change to the rows of a store through SQL; errors (a constraint) are expected and
/// leave the store as it was.
fn mutate(conn: &Connection, tables: &[Table], random: &mut Random, lax: bool) {
    let (table, columns) = random.pick(tables);
    let key: Vec<&str> = columns
        .iter()
        .filter(|c| c.key)
        .map(|c| c.name.as_str())
        .collect();
    let key = if key.is_empty() {
        "rowid".to_owned()
    } else {
        key.join(", ")
    };
    let rows: i64 = conn
        .query_row(&format!("SELECT count(*) FROM \"{table}\""), [], |r| {
            r.get(0)
        })
        .unwrap_or(0);
    let offset = random.below(rows.max(1) as usize) as i64;
    let one = format!("({key}) IN (SELECT {key} FROM \"{table}\" LIMIT 1 OFFSET {offset})");
    let _ = match random.below(12) {
        // A cell, of one row or of every row.
        0..=5 => {
            let Column {
                name: column,
                declared,
                nullable,
                ..
            } = random.pick(columns);
            let value = random.value(declared, *nullable, lax);
            let rows = if random.one_in(5) { "1" } else { &one };
            let or = *random.pick(&["", "OR IGNORE", "OR REPLACE"]);
            conn.execute(
                &format!("UPDATE {or} \"{table}\" SET \"{column}\" = ?1 WHERE {rows}"),
                [value],
            )
        }
        // Text that is not UTF-8.
        6 => {
            let column = &random.pick(columns).name;
            conn.execute(
                &format!(
                    "UPDATE OR IGNORE \"{table}\" SET \"{column}\" = CAST(?1 AS TEXT) WHERE {one}"
                ),
                [vec![0xff_u8, b'a', 0xc3, 0x28]],
            )
        }
        // Rows deleted: one, or all.
        7 => {
            let rows = if random.one_in(8) { "1" } else { &one };
            conn.execute(&format!("DELETE FROM \"{table}\" WHERE {rows}"), [])
        }
        // A row copied under another key (a duplicated event, a second run with the same
        // content), replacing the row that had that key.
        8 | 9 => {
            let changed = random.pick(columns);
            let value = random.value(&changed.declared, false, lax);
            let select: Vec<String> = columns
                .iter()
                .map(|c| {
                    if c.name == changed.name {
                        "?1".to_owned()
                    } else {
                        format!("\"{}\"", c.name)
                    }
                })
                .collect();
            let names: Vec<String> = columns.iter().map(|c| format!("\"{}\"", c.name)).collect();
            conn.execute(
                &format!(
                    "INSERT OR REPLACE INTO \"{table}\" ({}) SELECT {} FROM \"{table}\" LIMIT 1 OFFSET {offset}",
                    names.join(", "),
                    select.join(", ")
                ),
                [value],
            )
        }
        // A row of random values, for an existing run most times.
        10 => {
            let run: Option<String> = conn
                .query_row("SELECT id FROM runs ORDER BY random() LIMIT 1", [], |r| {
                    r.get(0)
                })
                .ok();
            let values: Vec<Sql> = columns
                .iter()
                .map(|c| match (&run, c.name.as_str()) {
                    (Some(run), "run" | "id") if !random.one_in(4) && c.declared == "TEXT" => {
                        Sql::Text(run.clone())
                    }
                    _ => random.value(&c.declared, c.nullable, lax),
                })
                .collect();
            let marks: Vec<String> = (1..=values.len()).map(|i| format!("?{i}")).collect();
            conn.execute(
                &format!(
                    "INSERT OR REPLACE INTO \"{table}\" VALUES ({})",
                    marks.join(", ")
                ),
                rusqlite::params_from_iter(values),
            )
        }
        // The file's identity or schema.
        _ => match random.below(4) {
            0 => conn.execute_batch(&format!("PRAGMA user_version = {}", random.integer())),
            1 => conn.execute_batch(&format!("PRAGMA application_id = {}", random.next() as i32)),
            2 => conn.execute_batch(&format!("DROP TABLE \"{table}\"")),
            _ => conn.execute_batch("DROP INDEX IF EXISTS runs_created"),
        }
        .map(|()| 0),
    };
}

/// Flips, zeroes or cuts bytes of the file.
fn damage(bytes: &mut Vec<u8>, random: &mut Random) {
    match random.below(6) {
        0 => {
            let cut = random.below(bytes.len());
            bytes.truncate(cut);
        }
        1 => {
            let page = 4096;
            let at = random.below(bytes.len().div_ceil(page)) * page;
            let end = (at + page).min(bytes.len());
            let noise = random.one_in(2);
            for byte in &mut bytes[at..end] {
                *byte = if noise { random.next() as u8 } else { 0 };
            }
        }
        _ => {
            for _ in 0..=random.below(16) {
                // Half of the flips in the first page: the header and the schema.
                let at = if random.one_in(2) {
                    random.below(bytes.len().min(4096))
                } else {
                    random.below(bytes.len())
                };
                bytes[at] ^= 1 << random.below(8);
            }
        }
    }
}

/// The base store, made by real durable runs: its file's bytes, and its run ids.
fn base(dir: &Path) -> Vec<u8> {
    let path = dir.join("base.db");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let store = SqliteStore::open(&path).expect("opens");
        let done = Order::runner().durable(&store, "done").execute(1).await;
        assert!(done.expect("runs").result.is_ok());
        let stopped = Order::runner()
            .durable(&Failing::new(store.clone(), 1), "stopped")
            .execute(2)
            .await;
        assert!(stopped.is_err(), "stopped at its second commit");
        let packed = Packing::runner()
            .durable(&store, "packing")
            .execute(3)
            .await;
        assert!(packed.expect("runs").result.is_ok());
        let counted = Counting::runner()
            .durable(&store, "counting")
            .execute(3)
            .await;
        assert_eq!(counted.expect("runs").result.expect("counts"), 3);
        let saga = Saga::runner().durable(&store, "saga").execute(4).await;
        assert!(saga.expect("runs").result.is_err());
        let hostile = "\u{1b}]0;owned\u{7}\u{9b}31m\u{202e}";
        let run = Order::runner().durable(&store, hostile).execute(5).await;
        assert!(run.expect("runs").result.is_ok());
        let waiting = Confirming::runner()
            .durable(&store, "waiting")
            .unload_when_waiting(Duration::ZERO)
            .execute(6)
            .await;
        assert!(waiting.expect("runs").is_unloaded());
        let sent =
            flowdag_runtime::durable::send_signal(&store, "waiting", Confirming::CONFIRM, true)
                .await;
        assert!(sent.is_ok(), "{sent:?}");
        // Runs whose end holds a result and an error.
        let lease = Duration::from_secs(60);
        for (id, status, end) in [
            (
                "ended-ok",
                RunStatus::Succeeded,
                RunEnd {
                    result: Some(br#"{"parcel":"P-1"}"#.to_vec()),
                    error: None,
                },
            ),
            (
                "ended-failed",
                RunStatus::Failed,
                RunEnd {
                    result: None,
                    error: Some("declined\u{1b}[2J".to_owned()),
                },
            ),
        ] {
            let mut run = NewRun::new(id, "Order", 1, Owner::process(), lease);
            run.input = b"42".to_vec();
            run.events = vec![StoredEvent::new(0, "RunStarted")];
            let created = store.create_run(run).await.expect("creates");
            let mut batch = Batch::new(created.lease().expect("a new run"), 1, lease);
            batch.events = vec![StoredEvent::new(1, "RunFinished")];
            batch.status = Some(status);
            batch.end = Some(end);
            store.commit(batch).await.expect("commits");
        }
    });
    std::fs::read(&path).expect("the base store")
}

/// The base store's bytes with its tables not `STRICT`: a column then takes a value of any
/// type.
fn lax(dir: &Path, strict: &[u8]) -> Vec<u8> {
    let path = dir.join("lax.db");
    std::fs::write(&path, strict).expect("writes");
    {
        let conn = Connection::open(&path).expect("opens");
        conn.execute_batch(
            // A `TEXT PRIMARY KEY` of a table that is neither `STRICT` nor `WITHOUT ROWID`
            // takes NULL unless it says `NOT NULL`: said, so the schema stays flow's.
            "PRAGMA writable_schema = ON;
             UPDATE sqlite_schema SET sql = replace(replace(replace(sql,
                 ') STRICT, WITHOUT ROWID', ') WITHOUT ROWID'), ') STRICT', ')'),
                 'id TEXT PRIMARY KEY', 'id TEXT PRIMARY KEY NOT NULL')
               WHERE type = 'table';
             PRAGMA writable_schema = OFF;",
        )
        .expect("the tables are not STRICT");
        let integrity: String = conn
            .query_row("PRAGMA integrity_check", [], |row| row.get(0))
            .expect("checks");
        assert_eq!(integrity, "ok");
    }
    // flow reads it as one of its stores.
    let read = SqliteStore::open_client(&path).map(|_| ());
    assert_eq!(read, Ok(()), "the lax copy opens");
    std::fs::read(&path).expect("the lax store")
}

/// The panics of every thread (the stores' writer threads included), kept by the panic hook
/// with the thread that panicked, for the case that runs on it to claim.
static PANICKED: Mutex<Vec<(ThreadId, String)>> = Mutex::new(Vec::new());

/// The panics of the thread `me`, taken from [`PANICKED`]; and, when `writers`, those of the
/// stores' writer threads (another case's among them, when cases run side by side: the case
/// is the one whose store lost its writer).
fn panics(me: ThreadId, writers: bool) -> Vec<String> {
    let mut all = lock(&PANICKED);
    let (mine, others): (Vec<_>, Vec<_>) =
        std::mem::take(&mut *all)
            .into_iter()
            .partition(|(thread, message)| {
                *thread == me || (writers && message.contains("flow-sqlite-writer"))
            });
    *all = others;
    mine.into_iter().map(|(_, message)| message).collect()
}

/// Commands run so far: the watchdog's measure of progress.
static PROGRESS: AtomicU64 = AtomicU64::new(0);

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `text` would reach a terminal with a control character (other than the line
/// breaks between lines) or a bidirectional override in it.
fn hostile(text: &str) -> Option<char> {
    text.chars().find(|&c| {
        (c.is_control() && c != '\n')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    })
}

/// The seed of case `i` from the run's seed: case 0's is the run's own, so that a case's
/// seed replays it alone.
fn case_seed(seed: u64, i: u64) -> u64 {
    if i == 0 {
        return seed;
    }
    Random(seed ^ i.wrapping_mul(0xa076_1d64_78bd_642f)).next()
}

/// Options of `flow runs`, each there or not: a limit, a page after a run, text in the id,
/// statuses, a workflow, creation times (some of them malformed).
fn filters(random: &mut Random, ids: &[String]) -> Vec<String> {
    let mut args = Vec::new();
    let mut option = |random: &mut Random, name: &str, value: String| {
        if random.one_in(5) {
            args.push(name.to_owned());
            args.push(value);
        }
    };
    let limit = random
        .pick(&["0", "1", "2", "3", "1000", "4294967295", "4294967296", "-1"])
        .to_string();
    option(random, "--limit", limit);
    let after = if ids.is_empty() || random.one_in(3) {
        random.text()
    } else {
        random.pick(ids).clone()
    };
    option(random, "--after", after);
    let text = random.text();
    option(random, "--id-contains", text);
    let statuses: Vec<&str> = (0..=random.below(3))
        .map(|_| *random.pick(&["running", "waiting", "succeeded", "failed", "stuck", "done"]))
        .collect();
    option(random, "--status", statuses.join(","));
    let workflow = match random.below(3) {
        0 => "Order".to_owned(),
        1 => "Packing".to_owned(),
        _ => random.text(),
    };
    option(random, "--workflow", workflow);
    for name in ["--from", "--until"] {
        let time = match random.below(8) {
            0 => random.integer().to_string(),
            1 => random.text(),
            _ => random
                .pick(&[
                    "0",
                    "2026-11-27",
                    "2026-11-27T09:30:00Z",
                    "9999-12-31T23:59:59",
                ])
                .to_string(),
        };
        option(random, name, time);
    }
    args
}

/// The base stores and what a case needs of them.
struct Bases {
    strict: Vec<u8>,
    lax: Vec<u8>,
    tables: Vec<Table>,
}

/// Runs one case on the file `work`; `Err` says what went wrong.
fn case(seed: u64, work: &Path, bases: &Bases) -> Result<(), String> {
    let mut random = Random(seed);
    for suffix in ["", "-wal", "-shm", ".lock"] {
        let mut leftover = work.as_os_str().to_owned();
        leftover.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(leftover));
    }
    let lax = random.one_in(3);
    let mut bytes = if lax { &bases.lax } else { &bases.strict }.clone();
    let damaged = random.one_in(4);
    if damaged {
        damage(&mut bytes, &mut random);
    }
    std::fs::write(work, &bytes).map_err(|e| format!("writing the case's store: {e}"))?;
    drop(bytes);
    let mut ids = Vec::new();
    if let Ok(conn) = Connection::open(work) {
        if !damaged {
            let _ = conn.execute_batch("PRAGMA ignore_check_constraints = ON");
            for _ in 0..=random.below(4) {
                mutate(&conn, &bases.tables, &mut random, lax);
            }
        }
        if let Ok(mut stmt) = conn.prepare("SELECT id FROM runs")
            && let Ok(rows) = stmt.query_map([], |row| row.get::<_, String>(0))
        {
            ids = rows.flatten().collect();
        }
    }
    let id = if ids.is_empty() || random.one_in(5) {
        random.text()
    } else {
        random.pick(&ids).clone()
    };
    let db = work.to_str().ok_or("the store's path is not UTF-8")?;
    let name = random.text();
    let payload = if random.one_in(4) {
        random.text()
    } else {
        random.json(3)
    };
    let filters = filters(&mut random, &ids);
    let mut runs = vec!["runs", db];
    runs.extend(filters.iter().map(String::as_str));
    let mut runs_json = runs.clone();
    runs_json.push("--json");
    let commands: [&[&str]; 6] = [
        &runs,
        &runs_json,
        &["show", db, &id],
        &["show", db, &id, "--json"],
        &["show", db, &id, "--full"],
        &["signal", db, &id, &name, &payload],
    ];
    for args in commands {
        let shown = || format!("`flow {:.300}`", args.join(" ").escape_debug());
        let mut out = Vec::new();
        let answer = catch_unwind(AssertUnwindSafe(|| {
            Cli::new().run_with(
                std::iter::once("flow").chain(args.iter().copied()),
                &mut out,
            )
        }));
        PROGRESS.fetch_add(1, Ordering::Relaxed);
        let me = std::thread::current().id();
        match answer {
            Err(_) => {
                let panics = panics(me, false).join("; ");
                return Err(format!("{} panicked: {panics}", shown()));
            }
            // The store's writer thread died (a panic there drops the request's answer).
            Ok(Err(CliError::Store(StoreError::Closed))) => {
                let panics = panics(me, true).join("; ");
                return Err(format!(
                    "{}: the store's writer thread died: {panics}",
                    shown()
                ));
            }
            // A damaged store is exit code 4, not 1 (the store failed): every value read is
            // checked, and a file or schema that is not flow's is refused when opened.
            Ok(Err(error)) => {
                let code = error.exit_code();
                if !(2..=5).contains(&code) {
                    return Err(format!("{}: exit code {code} for {error}", shown()));
                }
            }
            Ok(Ok(())) => {
                let text =
                    String::from_utf8(out).map_err(|e| format!("{}: not UTF-8: {e}", shown()))?;
                if args.contains(&"--json") {
                    for line in text.lines() {
                        if let Err(e) = serde_json::from_str::<serde_json::Value>(line) {
                            return Err(format!("{}: not JSON ({e}): {line:.300}", shown()));
                        }
                    }
                } else if let Some(c) = hostile(&text) {
                    return Err(format!("{}: printed {c:?} to the terminal", shown()));
                }
            }
        }
    }
    Ok(())
}

/// A directory for the cases' files, removed when dropped: in memory (`/dev/shm`) where the
/// system has it, since every case writes its store anew; else in the target directory.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let shm = Path::new("/dev/shm");
        let root = if shm.is_dir() {
            shm.to_owned()
        } else {
            PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        };
        let dir = root.join(format!("flow-fuzz-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a directory");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn the_read_commands_survive_random_and_damaged_stores() {
    let cases: u64 = std::env::var("FLOW_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000);
    let seed: u64 = std::env::var("FLOW_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        });
    eprintln!("fuzz: {cases} cases from FLOW_FUZZ_SEED={seed}");
    let scratch = Scratch::new();
    let strict = base(&scratch.0);
    let bases = Bases {
        lax: lax(&scratch.0, &strict),
        tables: tables(&Connection::open(scratch.0.join("base.db")).expect("opens")),
        strict,
    };

    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("a thread");
        lock(&PANICKED).push((thread.id(), format!("{name}: {info}")));
        default_hook(info);
    }));
    // A command that hangs stops the test, naming the seed (a bound against a hang, not a
    // measure of speed: a command takes milliseconds).
    std::thread::spawn(move || {
        let mut seen = u64::MAX;
        loop {
            std::thread::sleep(Duration::from_secs(60));
            let now = PROGRESS.load(Ordering::Relaxed);
            if now == seen {
                eprintln!(
                    "fuzz: no command returned for 60 s; replay with FLOW_FUZZ_SEED={seed} and the number of cases"
                );
                std::process::abort();
            }
            seen = now;
        }
    });
    // The cases are shared by a few threads, each with a file of its own.
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 4)) as u64;
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for worker in 0..workers {
            let (bases, failures) = (&bases, &failures);
            let work = scratch.0.join(format!("work-{worker}.db"));
            scope.spawn(move || {
                for i in (worker..cases).step_by(workers as usize) {
                    if lock(failures).len() >= 10 {
                        return;
                    }
                    let seed = case_seed(seed, i);
                    if let Err(why) = case(seed, &work, bases) {
                        lock(failures).push(format!(
                            "case {i}: {why}\n  FLOW_FUZZ_SEED={seed} FLOW_FUZZ_CASES=1 replays it"
                        ));
                    }
                }
            });
        }
    });
    let _ = std::panic::take_hook();
    let mut failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    // A panic no case claimed (a thread of the store's that died without failing a
    // request): the seed of the run replays it.
    for (_, message) in std::mem::take(&mut *lock(&PANICKED)) {
        failures.push(format!(
            "{message}\n  FLOW_FUZZ_SEED={seed} FLOW_FUZZ_CASES={cases} replays it"
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
