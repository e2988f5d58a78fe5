//! The file: how a store is told apart from other SQLite files, its schema and its settings.

use std::path::Path;
use std::sync::OnceLock;

use flowdag_store::StoreError;
use rusqlite::Connection;

use crate::error::sql_error;
use crate::{Durability, SqliteOptions};

/// `PRAGMA application_id` of a flow store: "FLOW" in ASCII. A SQLite file with another id, or
/// with none and tables of its own, is another application's.
pub const APPLICATION_ID: i32 = 0x464C_4F57;

/// The schema version this crate writes and reads (`PRAGMA user_version`). A newer file is
/// refused ([`StoreError::SchemaVersion`]); an older one is migrated when a store opens it
/// ([`SqliteStore::open`](crate::SqliteStore::open)), and read as it is by a client
/// ([`SqliteStore::open_client`](crate::SqliteStore::open_client)), which writes nothing.
pub const SCHEMA_VERSION: u32 = 4;

/// Schema version 1; [`MIGRATIONS`] take it to [`SCHEMA_VERSION`], and a new store is made
/// the same way. Integers that are `u64` in Rust (hashes, times) are stored as SQLite's
/// signed 64-bit integers, bit for bit. A run-level timer has node -1; the workflow's own nodes
/// have instance ''.
pub(crate) const SCHEMA: &str = "
CREATE TABLE runs (
  id TEXT PRIMARY KEY,
  workflow TEXT NOT NULL,
  graph_hash INTEGER NOT NULL,
  input BLOB NOT NULL,
  input_hash INTEGER NOT NULL,
  options BLOB NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('running','waiting','compensating','succeeded','failed','cancelled','stuck')),
  next_seq INTEGER NOT NULL,
  version INTEGER NOT NULL,   -- bumped each time the run is loaded: the lease's fencing token
  owner TEXT,
  lease_until INTEGER,        -- ms since the epoch, the store's clock
  wake_at INTEGER,            -- earliest timer, or when an unconsumed signal a step waits for arrived
  ended INTEGER NOT NULL DEFAULT 0,
  result BLOB,
  error TEXT,
  created_ms INTEGER NOT NULL,
  updated_ms INTEGER NOT NULL
) STRICT;
CREATE INDEX runs_created ON runs(created_ms, id);
CREATE INDEX runs_wake ON runs(wake_at) WHERE wake_at IS NOT NULL;

CREATE TABLE nodes (
  run TEXT NOT NULL,
  node INTEGER NOT NULL,
  name TEXT NOT NULL,
  label TEXT NOT NULL,
  fingerprint INTEGER NOT NULL,
  preds TEXT NOT NULL,        -- predecessors' indices, comma-separated
  compensate TEXT NOT NULL,   -- the call that undoes the step, as written; empty for none
  PRIMARY KEY (run, node)
) STRICT, WITHOUT ROWID;

CREATE TABLE events (
  run TEXT NOT NULL,
  seq INTEGER NOT NULL,
  format INTEGER NOT NULL,
  node INTEGER,
  node_name TEXT,
  path TEXT,                  -- the instance path as shown (`charge[3]/poll@2`)
  attempt INTEGER NOT NULL,
  kind TEXT NOT NULL,
  data BLOB NOT NULL,
  at_us INTEGER NOT NULL,
  wall_ms INTEGER NOT NULL,
  PRIMARY KEY (run, seq)
) STRICT, WITHOUT ROWID;

CREATE TABLE outputs (
  run TEXT NOT NULL,
  node INTEGER NOT NULL,
  instance TEXT NOT NULL,
  type_name TEXT NOT NULL,
  codec TEXT NOT NULL DEFAULT 'json',
  bytes BLOB NOT NULL,
  PRIMARY KEY (run, node, instance)
) STRICT, WITHOUT ROWID;

CREATE TABLE timers (
  run TEXT NOT NULL,
  node INTEGER NOT NULL,
  instance TEXT NOT NULL,
  kind TEXT NOT NULL,
  due_ms INTEGER NOT NULL,
  PRIMARY KEY (run, node, instance, kind)
) STRICT, WITHOUT ROWID;
CREATE INDEX timers_due ON timers(due_ms);

CREATE TABLE signals (
  id INTEGER PRIMARY KEY,
  run TEXT NOT NULL,
  name TEXT NOT NULL,
  payload BLOB NOT NULL,
  mode TEXT NOT NULL CHECK (mode IN ('kept','transient')),
  sent_ms INTEGER NOT NULL,
  consumed_seq INTEGER
) STRICT;
CREATE INDEX signals_open ON signals(run, id) WHERE consumed_seq IS NULL;

CREATE TABLE waits (
  run TEXT NOT NULL,
  node INTEGER NOT NULL,
  instance TEXT NOT NULL,
  name TEXT NOT NULL,
  PRIMARY KEY (run, node, instance)
) STRICT, WITHOUT ROWID;
";

/// The migrations, in order: `MIGRATIONS[0]` takes version 1 to version 2, and so on.
const MIGRATIONS: [&str; SCHEMA_VERSION as usize - 1] = [MIGRATION_2, MIGRATION_3, MIGRATION_4];

/// Version 2: a node's kind and resilience settings, to say what changed when they did. Rows
/// written before have both empty (not stored).
const MIGRATION_2: &str = "
ALTER TABLE nodes ADD COLUMN kind TEXT NOT NULL DEFAULT '';    -- `operation`, `signal`, …
ALTER TABLE nodes ADD COLUMN policy TEXT NOT NULL DEFAULT '';  -- `timeout = 5s, retries = 3`; empty for none
";

/// Version 3: the status `continued` (a kept generation of a run that continued as new). A
/// table's CHECK cannot be altered in SQLite: the runs are copied into a table with the new
/// one, which takes the old name, and the indexes are made again.
const MIGRATION_3: &str = "
CREATE TABLE runs_v3 (
  id TEXT PRIMARY KEY,
  workflow TEXT NOT NULL,
  graph_hash INTEGER NOT NULL,
  input BLOB NOT NULL,
  input_hash INTEGER NOT NULL,
  options BLOB NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('running','waiting','compensating','succeeded','failed','cancelled','stuck','continued')),
  next_seq INTEGER NOT NULL,
  version INTEGER NOT NULL,
  owner TEXT,
  lease_until INTEGER,
  wake_at INTEGER,
  ended INTEGER NOT NULL DEFAULT 0,
  result BLOB,
  error TEXT,
  created_ms INTEGER NOT NULL,
  updated_ms INTEGER NOT NULL
) STRICT;
INSERT INTO runs_v3 (id, workflow, graph_hash, input, input_hash, options, status, next_seq,
  version, owner, lease_until, wake_at, ended, result, error, created_ms, updated_ms)
  SELECT id, workflow, graph_hash, input, input_hash, options, status, next_seq, version, owner,
    lease_until, wake_at, ended, result, error, created_ms, updated_ms FROM runs;
DROP TABLE runs;
ALTER TABLE runs_v3 RENAME TO runs;
CREATE INDEX runs_created ON runs(created_ms, id);
CREATE INDEX runs_wake ON runs(wake_at) WHERE wake_at IS NOT NULL;
";

/// Version 4: loading a run reads its decided state, not its history. An output row marked
/// `superseded` (a `Loop` iteration's end once the next one ended, the ends nested in an
/// ended instance) is left out of a load, and two partial indexes let a load read only the
/// live outputs and the run's own events (not its nest instances').
const MIGRATION_4: &str = "
ALTER TABLE outputs ADD COLUMN superseded INTEGER NOT NULL DEFAULT 0;
CREATE INDEX outputs_live ON outputs(run, node, instance) WHERE superseded = 0;
CREATE INDEX events_own ON events(run, seq) WHERE path IS NULL;
";

/// The schema of `version` (1 to [`SCHEMA_VERSION`]): [`SCHEMA`] and the migrations up to it.
fn schema(version: u32) -> String {
    let mut sql = SCHEMA.to_owned();
    for migration in MIGRATIONS.iter().take(version.saturating_sub(1) as usize) {
        sql.push_str(migration);
    }
    sql
}

/// Opens the connection: tells a store from a foreign or damaged file, creates the schema in a
/// new one and migrates an older one (when `create`: a store's owner; a client refuses an
/// empty file and reads an older one as it is), and applies the settings. Writes nothing to a
/// file it refuses.
///
/// A `read_only` connection is opened with `SQLITE_OPEN_READ_ONLY`: it reads the store as it
/// is, leaves its journal mode alone and can write nothing, not even a checkpoint when it
/// closes.
pub(crate) fn open(
    path: &Path,
    options: &SqliteOptions,
    create: bool,
    read_only: bool,
) -> Result<Connection, StoreError> {
    let conn = match read_only {
        false => Connection::open(path),
        true => Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        ),
    }
    .map_err(|e| sql_error(path, "opening", e))?;
    conn.busy_timeout(options.busy_timeout)
        .map_err(|e| sql_error(path, "setting the busy timeout", e))?;
    // The first read of the header: a file that is not a database fails here.
    let (app_id, version, objects) = conn
        .query_row(
            "SELECT (SELECT application_id FROM pragma_application_id),
                    (SELECT user_version FROM pragma_user_version),
                    (SELECT count(*) FROM sqlite_schema)",
            [],
            |row| {
                Ok((
                    row.get::<_, i32>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, i64>(2)?,
                ))
            },
        )
        .map_err(|e| match e.sqlite_error_code() {
            // A header that SQLite reads but does not support: a damaged file.
            Some(rusqlite::ErrorCode::Unknown) => StoreError::Corrupt {
                path: path.to_owned(),
                why: e.to_string(),
            },
            _ => sql_error(path, "reading the header", e),
        })?;
    let version = u32::try_from(version).unwrap_or(u32::MAX);
    match (app_id, objects) {
        (APPLICATION_ID, _) if version > SCHEMA_VERSION => {
            return Err(StoreError::SchemaVersion {
                path: path.to_owned(),
                found: version,
                known: SCHEMA_VERSION,
            });
        }
        (APPLICATION_ID, _) if version == SCHEMA_VERSION => tables_present(&conn, path, version)?,
        // An older store: checked as its version made it, then migrated by its owner.
        (APPLICATION_ID, _) if version >= 1 => {
            tables_present(&conn, path, version)?;
            if create {
                migrate(&conn, path, version)?;
            }
        }
        (0, 0) | (APPLICATION_ID, _) if !create => {
            return Err(StoreError::Foreign {
                path: path.to_owned(),
                why: "an empty database: no store of flow was created in it (a client never creates one)".to_owned(),
            });
        }
        (0, 0) | (APPLICATION_ID, _) => self::create(&conn, path)?,
        (0, n) => {
            return Err(StoreError::Foreign {
                path: path.to_owned(),
                why: format!(
                    "a SQLite database of another application ({n} tables and indexes, no flow application id)"
                ),
            });
        }
        (other, _) => {
            return Err(StoreError::Foreign {
                path: path.to_owned(),
                why: format!(
                    "a SQLite database with application id {other:#010x} (flow's is {APPLICATION_ID:#010x})"
                ),
            });
        }
    }
    if read_only {
        return Ok(conn);
    }
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .map_err(|e| sql_error(path, "turning WAL on", e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Io {
            context: format!("turning WAL on for `{}`", path.display()),
            source: std::sync::Arc::new(std::io::Error::other(format!(
                "the file stays in journal mode `{mode}`"
            ))),
        });
    }
    let synchronous = match options.durability {
        Durability::Power => "FULL",
        Durability::Process => "NORMAL",
    };
    conn.execute_batch(&format!("PRAGMA synchronous = {synchronous};"))
        .map_err(|e| sql_error(path, "setting synchronous", e))?;
    if let Some(pages) = options.max_pages {
        conn.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |_| Ok(()))
            .map_err(|e| sql_error(path, "setting the size limit", e))?;
    }
    Ok(conn)
}

/// Checks that a store of schema version `version` (1 to [`SCHEMA_VERSION`]) has the tables and
/// columns of that version's [`schema`] (names, types, nullability, keys, exactly; other tables
/// are left alone): one that lost a table or whose schema was edited is damaged
/// ([`StoreError::Corrupt`], naming the first table that differs), not a store to fail on at
/// each query that reads it.
fn tables_present(conn: &Connection, path: &Path, version: u32) -> Result<(), StoreError> {
    const COLUMNS: &str = "SELECT m.name, p.name, p.type, p.\"notnull\", p.pk
        FROM sqlite_schema m JOIN pragma_table_info(m.name) p
        WHERE m.type = 'table' ORDER BY m.name, p.cid";
    type Columns = Vec<(String, String, String, bool, i64)>;
    let columns = |conn: &Connection| -> rusqlite::Result<Columns> {
        conn.prepare(COLUMNS)?
            .query_map([], |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                ))
            })?
            .collect()
    };
    // Flow's own, made once per process and version in memory.
    static EXPECTED: [OnceLock<Result<Columns, String>>; SCHEMA_VERSION as usize] =
        [const { OnceLock::new() }; SCHEMA_VERSION as usize];
    let slot = version
        .checked_sub(1)
        .and_then(|at| EXPECTED.get(at as usize))
        .ok_or_else(|| StoreError::Invalid {
            why: format!(
                "no schema version {version} to compare `{}` with",
                path.display()
            ),
        })?;
    let expected = slot
        .get_or_init(|| {
            Connection::open_in_memory()
                .and_then(|flow| {
                    flow.execute_batch(&schema(version))?;
                    columns(&flow)
                })
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|why| {
            StoreError::io(
                format!("making flow's schema to compare `{}` with", path.display()),
                std::io::Error::other(why.clone()),
            )
        })?;
    let found = columns(conn).map_err(|e| sql_error(path, "reading the schema", e))?;
    let table = |columns: &Columns, name: &str| -> Columns {
        columns.iter().filter(|c| c.0 == name).cloned().collect()
    };
    let mut names: Vec<&str> = expected.iter().map(|c| c.0.as_str()).collect();
    names.dedup();
    let Some(name) = names
        .into_iter()
        .find(|name| table(&found, name) != table(expected, name))
    else {
        return Ok(());
    };
    Err(StoreError::Corrupt {
        path: path.to_owned(),
        why: if table(&found, name).is_empty() {
            format!("its table `{name}` is missing")
        } else {
            format!("its table `{name}` does not have the columns flow made")
        },
    })
}

/// Creates the schema of [`SCHEMA_VERSION`] in an empty file, with the application id, in one
/// transaction.
fn create(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let schema = schema(SCHEMA_VERSION);
    conn.execute_batch(&format!(
        "BEGIN IMMEDIATE;
         {schema}
         PRAGMA application_id = {APPLICATION_ID};
         PRAGMA user_version = {SCHEMA_VERSION};
         COMMIT;"
    ))
    .map_err(|e| {
        let _ = conn.execute_batch("ROLLBACK");
        sql_error(path, "creating the schema", e)
    })
}

/// Migrates a store of schema version `version` (checked) to [`SCHEMA_VERSION`], in one
/// transaction: a failure leaves it as it was.
fn migrate(conn: &Connection, path: &Path, version: u32) -> Result<(), StoreError> {
    let mut sql = String::from("BEGIN IMMEDIATE;");
    for migration in MIGRATIONS.iter().skip(version.saturating_sub(1) as usize) {
        sql.push_str(migration);
    }
    sql.push_str(&format!(
        "PRAGMA user_version = {SCHEMA_VERSION};
         COMMIT;"
    ));
    conn.execute_batch(&sql).map_err(|e| {
        let _ = conn.execute_batch("ROLLBACK");
        sql_error(
            path,
            &format!("migrating the schema from version {version}"),
            e,
        )
    })?;
    // Checked as a store of this version: the migrations made what `create` makes.
    tables_present(conn, path, SCHEMA_VERSION)
}
