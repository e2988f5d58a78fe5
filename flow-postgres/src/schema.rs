//! The schema: its migrations, applied in order, once, however many workers start together.

use std::path::PathBuf;

use flowdag_store::StoreError;

use crate::ops::{Fail, text};
use crate::pool::{Pooled, quote_ident};

/// The schema version this crate writes and reads (the row of `schema_version`). A newer
/// database is refused ([`StoreError::SchemaVersion`]).
pub const SCHEMA_VERSION: u32 = 8;

/// The migrations, in order: `MIGRATIONS[0]` makes version 1, `MIGRATIONS[1]` version 2, and so on. Each
/// runs with `search_path` set to the store's schema, in the one transaction that migrates.
///
/// Integers that are `u64` in Rust (hashes, sequence numbers, times) are `bigint`, bit for bit;
/// times are milliseconds since the Unix epoch by the server's clock. A run-level timer has
/// node -1; the workflow's own nodes have instance ''.
pub const MIGRATIONS: [&str; 8] = [
    MIGRATION_1,
    MIGRATION_2,
    MIGRATION_3,
    MIGRATION_4,
    MIGRATION_5,
    MIGRATION_6,
    MIGRATION_7,
    MIGRATION_8,
];

/// Version 1: the durable runs.
const MIGRATION_1: &str = "
CREATE TABLE schema_version (
  version integer NOT NULL
);

CREATE TABLE runs (
  id text PRIMARY KEY,
  workflow text NOT NULL,
  graph_hash bigint NOT NULL,
  input bytea NOT NULL,
  input_hash bigint NOT NULL,
  options bytea NOT NULL,
  status text NOT NULL CHECK (status IN ('running','waiting','compensating','succeeded','failed','cancelled','stuck')),
  next_seq bigint NOT NULL,
  version bigint NOT NULL,   -- bumped each time the run is loaded: the lease's fencing token
  owner text,
  lease_until bigint,        -- ms since the epoch, the server's clock
  wake_at bigint,            -- earliest timer, or when an unconsumed signal a step waits for arrived
  ended boolean NOT NULL DEFAULT false,
  result bytea,
  error text,
  created_ms bigint NOT NULL,
  updated_ms bigint NOT NULL
);
CREATE INDEX runs_created ON runs (created_ms, id);
CREATE INDEX runs_unfinished ON runs (created_ms, id)
  WHERE status IN ('running','waiting','compensating');

CREATE TABLE nodes (
  run text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  node bigint NOT NULL,
  name text NOT NULL,
  label text NOT NULL,
  fingerprint bigint NOT NULL,
  preds bigint[] NOT NULL,
  compensate text NOT NULL,   -- the call that undoes the step, as written; empty for none
  PRIMARY KEY (run, node)
);

CREATE TABLE events (
  run text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  seq bigint NOT NULL,
  format integer NOT NULL,
  node bigint,
  node_name text,
  path text,                  -- the instance path as shown (`charge[3]/poll@2`)
  attempt bigint NOT NULL,
  kind text NOT NULL,
  data bytea NOT NULL,
  at_us bigint NOT NULL,
  wall_ms bigint NOT NULL,
  PRIMARY KEY (run, seq)
);

CREATE TABLE outputs (
  run text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  node bigint NOT NULL,
  instance text NOT NULL,
  type_name text NOT NULL,
  codec text NOT NULL DEFAULT 'json',
  bytes bytea NOT NULL,
  PRIMARY KEY (run, node, instance)
);

CREATE TABLE timers (
  run text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  node bigint NOT NULL,
  instance text NOT NULL,
  kind text NOT NULL,
  due_ms bigint NOT NULL,
  PRIMARY KEY (run, node, instance, kind)
);
CREATE INDEX timers_due ON timers (due_ms);

CREATE TABLE signals (
  id bigserial PRIMARY KEY,
  run text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  name text NOT NULL,
  payload bytea NOT NULL,
  mode text NOT NULL CHECK (mode IN ('kept','transient')),
  sent_ms bigint NOT NULL,
  consumed_seq bigint
);
CREATE INDEX signals_open ON signals (run, id) WHERE consumed_seq IS NULL;

CREATE TABLE waits (
  run text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  node bigint NOT NULL,
  instance text NOT NULL,
  name text NOT NULL,
  PRIMARY KEY (run, node, instance)
);
";

/// Version 2: the tasks of distributed runs. A task's `version` comes from a sequence, so a
/// claim on a task that was closed and opened again never matches the new one.
const MIGRATION_2: &str = "
CREATE SEQUENCE task_versions;
CREATE SEQUENCE task_order;

CREATE TABLE tasks (
  run text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  node bigint NOT NULL,
  attempt bigint NOT NULL,
  version bigint NOT NULL,    -- the claim's fencing token: every change takes a new one
  opened bigint NOT NULL,     -- claims take the oldest first
  status text NOT NULL CHECK (status IN ('ready','running','done')),
  owner text,
  lease_until bigint,         -- ms since the epoch, the server's clock
  outcome text CHECK (outcome IN ('completed','failed')),
  type_name text,
  bytes bytea,
  error text,
  done_at bigint,
  PRIMARY KEY (run, node)
);
CREATE INDEX tasks_open ON tasks (opened) WHERE status <> 'done';
CREATE INDEX tasks_done ON tasks (run) WHERE status = 'done';
";

/// Version 3: claims and due runs served by indexes alone, whatever the backlog. A task
/// carries its run's workflow and graph hash, so a claim reads the oldest ready tasks of each
/// version a worker has from one index range (and the lapsed claims from another) instead of
/// walking every open task in order and joining its run; the runs a worker may decide are
/// found from the running ones, the waiting ones whose wake time has come, and the done tasks,
/// each by an index of its own.
const MIGRATION_3: &str = "
ALTER TABLE tasks ADD COLUMN workflow text, ADD COLUMN graph_hash bigint;
UPDATE tasks t SET workflow = r.workflow, graph_hash = r.graph_hash FROM runs r WHERE r.id = t.run;
ALTER TABLE tasks ALTER COLUMN workflow SET NOT NULL, ALTER COLUMN graph_hash SET NOT NULL;
DROP INDEX tasks_open;
CREATE INDEX tasks_ready ON tasks (workflow, graph_hash, opened) WHERE status = 'ready';
CREATE INDEX tasks_claimed ON tasks (workflow, graph_hash, lease_until) WHERE status = 'running';
CREATE INDEX runs_active ON runs (created_ms, id) WHERE status IN ('running','compensating');
CREATE INDEX runs_wake ON runs (wake_at) WHERE status = 'waiting';
";

/// Version 4: a node's kind and resilience settings, to say what changed when they did. Rows
/// written before have both empty (not stored).
const MIGRATION_4: &str = "
ALTER TABLE nodes
  ADD COLUMN kind text NOT NULL DEFAULT '',    -- `operation`, `signal`, …
  ADD COLUMN policy text NOT NULL DEFAULT '';  -- `timeout = 5s, retries = 3`; empty for none
";

/// Version 5: the status `continued` (a kept generation of a run that continued as new).
const MIGRATION_5: &str = "
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
  CHECK (status IN ('running','waiting','compensating','succeeded','failed','cancelled','stuck','continued'));
";

/// Version 6: tasks of nest instances. A task is named by its node and the record of the
/// instance it runs (`ship[3]`; empty for an attempt of the node itself).
const MIGRATION_6: &str = "
ALTER TABLE tasks ADD COLUMN instance text NOT NULL DEFAULT '';
ALTER TABLE tasks DROP CONSTRAINT tasks_pkey;
ALTER TABLE tasks ADD PRIMARY KEY (run, node, instance);
";

/// Version 7: loading a run reads its decided state, not its history. An output marked
/// `superseded` (a `Loop` iteration's end once the next one ended, the ends nested in an
/// ended instance) is left out of a load, and two partial indexes let a load read only the
/// live outputs and the run's own events (not its nest instances').
const MIGRATION_7: &str = "
ALTER TABLE outputs ADD COLUMN superseded boolean NOT NULL DEFAULT false;
CREATE INDEX outputs_live ON outputs (run, node, instance) WHERE NOT superseded;
CREATE INDEX events_own ON events (run, seq) WHERE path IS NULL;
";

/// Version 8: when a task became ready to claim (the server's clock), so that a worker can
/// measure how long it waited in the queue. Tasks opened before it have none.
const MIGRATION_8: &str = "
ALTER TABLE tasks ADD COLUMN ready_ms bigint;
";

/// The advisory lock every migrating process takes (with the schema's name): "flow" in ASCII.
const LOCK_KEY: i32 = 0x666C_6F77;

/// Brings the schema `schema` to [`SCHEMA_VERSION`], in one transaction under an advisory
/// lock: of N processes starting together, one migrates and the others find it done. A
/// `read_only` store only checks: a schema that is not at [`SCHEMA_VERSION`] is an error.
pub(crate) async fn migrate(
    conn: &mut Pooled,
    schema: &str,
    place: &str,
    read_only: bool,
) -> Result<(), Fail> {
    let store = || PathBuf::from(format!("{place} (schema {schema})"));
    let tx = conn.begin().await?;
    tx.tx
        .execute(
            "SELECT pg_advisory_xact_lock($1, hashtext($2))",
            &[&LOCK_KEY, &schema],
        )
        .await
        .map_err(|e| Fail::Db("locking the schema to migrate it", e))?;
    let tables = tx
        .tx
        .query(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1",
            &[&schema],
        )
        .await
        .map_err(|e| Fail::Db("reading the schema", e))?;
    let names: Vec<String> = tables
        .iter()
        .map(|row| text(row, 0))
        .collect::<Result<_, _>>()?;
    let found: u32 = if names.iter().any(|n| n == "schema_version") {
        let row = tx
            .tx
            .query_opt(
                &format!(
                    "SELECT max(version) FROM {}.schema_version",
                    quote_ident(schema)
                ),
                &[],
            )
            .await
            .map_err(|e| Fail::Db("reading the schema version", e))?;
        let version: Option<i32> = match row {
            Some(row) => row
                .try_get(0)
                .map_err(|e| Fail::Db("reading the schema version", e))?,
            None => None,
        };
        match version {
            Some(v) => u32::try_from(v).unwrap_or(0),
            None => {
                return Err(Fail::Store(StoreError::Foreign {
                    path: store(),
                    why: "its table `schema_version` is empty".to_owned(),
                }));
            }
        }
    } else if names.is_empty() {
        0
    } else {
        return Err(Fail::Store(StoreError::Foreign {
            path: store(),
            why: format!(
                "the schema has tables ({}) but no `schema_version`: another application's",
                names.join(", ")
            ),
        }));
    };
    if found > SCHEMA_VERSION {
        return Err(Fail::Store(StoreError::SchemaVersion {
            path: store(),
            found,
            known: SCHEMA_VERSION,
        }));
    }
    if found == SCHEMA_VERSION {
        return tx.commit().await;
    }
    if read_only {
        return Err(Fail::Store(match found {
            0 => StoreError::Foreign {
                path: store(),
                why: "the schema holds no store of flow (a read-only store creates none)"
                    .to_owned(),
            },
            _ => StoreError::Invalid {
                why: format!(
                    "{} holds a store of schema version {found}, older than this flow's {SCHEMA_VERSION}: a read-only store does not migrate it (its owner, a worker or the application, does when it starts)",
                    store().display()
                ),
            },
        }));
    }
    let mut sql = format!(
        "CREATE SCHEMA IF NOT EXISTS {0}; SET LOCAL search_path TO {0};",
        quote_ident(schema)
    );
    for migration in &MIGRATIONS[found as usize..] {
        sql.push_str(migration);
    }
    sql.push_str(&format!(
        "DELETE FROM schema_version; INSERT INTO schema_version (version) VALUES ({SCHEMA_VERSION});"
    ));
    tx.tx
        .batch_execute(&sql)
        .await
        .map_err(|e| Fail::Db("migrating the schema", e))?;
    tx.commit().await
}
