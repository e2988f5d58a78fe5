//! What each request of the [`Store`](flowdag_store::Store) trait does to the database.
//! Every function runs inside one transaction (`READ COMMITTED`); the caller commits it, or
//! drops it (a rollback) when the function returns an error. A function that writes to a run
//! first locks the run's row (`SELECT .. FOR UPDATE`), so the writes of one run are applied one
//! after the other, each seeing the last; the decisive update is conditional on what was read.

use std::collections::HashMap;
use std::time::Duration;

use flowdag_store::{
    Batch, Committed, ContinueRun, Created, DueTimer, Lease, Loaded, NewRun, NewSignal, NodeRow,
    Owner, RunData, RunEnd, RunFilter, RunStatus, RunSummary, SignalMode, SignalSent, StoreError,
    StoredEvent, StoredOutput, StoredPath, StoredSignal, StoredTimer, TaskChange, TaskClaim,
    TaskCommitted, TaskInputs, TaskOutcome, TaskResult, TimerChange, TimerKey, TimerKind,
    WaitChange, WorkflowVersion, previous_instance,
};
use tokio_postgres::Row;

use crate::pool::Tx;

/// Why a request failed inside its transaction: the store's answer, or a database error met
/// while doing something (which the store turns into a [`StoreError`] naming the run).
pub(crate) enum Fail {
    /// The store's answer (a conflict, a lost lease, a missing run).
    Store(StoreError),
    /// The database failed while doing this.
    Db(&'static str, tokio_postgres::Error),
    /// The database did not answer in time.
    Timeout,
}

impl From<StoreError> for Fail {
    fn from(error: StoreError) -> Fail {
        Fail::Store(error)
    }
}

type R<T> = Result<T, Fail>;

/// `u64` to PostgreSQL's `bigint`, bit for bit (hashes use all 64 bits).
fn i(value: u64) -> i64 {
    value as i64
}

/// Back from `bigint`, bit for bit.
fn u(value: i64) -> u64 {
    value as u64
}

/// A duration in ms, as `bigint`.
fn ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// A lease in ms, to add to the server's clock inside a statement: at most a quarter of
/// `bigint`'s range, so the sum never overflows.
fn lease_ms(lease: Duration) -> i64 {
    ms(lease).min(i64::MAX / 4)
}

fn corrupt(why: String) -> Fail {
    Fail::Store(StoreError::Invalid {
        why: format!("the database holds a value flow does not read: {why}"),
    })
}

fn get<'a, T: tokio_postgres::types::FromSql<'a>>(row: &'a Row, idx: usize) -> R<T> {
    row.try_get(idx)
        .map_err(|e| Fail::Db("reading a column", e))
}

/// The text column `idx` of `row`.
pub(crate) fn text(row: &Row, idx: usize) -> R<String> {
    get(row, idx)
}

fn u32_of(value: i64, what: &str) -> R<u32> {
    u32::try_from(value).map_err(|_| corrupt(format!("{what} {value}")))
}

fn summary(row: &Row) -> R<RunSummary> {
    let status: String = get(row, 4)?;
    let id: String = get(row, 0)?;
    let status = status
        .parse::<RunStatus>()
        .map_err(|e| corrupt(format!("run `{id}`: {e}")))?;
    Ok(RunSummary {
        id,
        workflow: get(row, 1)?,
        graph_hash: u(get(row, 2)?),
        input_hash: u(get(row, 3)?),
        status,
        next_seq: u(get(row, 5)?),
        version: u(get(row, 6)?),
        owner: get(row, 7)?,
        lease_until_ms: get::<Option<i64>>(row, 8)?.map(u),
        wake_at_ms: get::<Option<i64>>(row, 9)?.map(u),
        created_ms: u(get(row, 10)?),
        updated_ms: u(get(row, 11)?),
    })
}

fn not_found(run: &str) -> Fail {
    Fail::Store(StoreError::NotFound {
        run: run.to_owned(),
    })
}

/// The run, its row locked until the transaction ends, and the server's clock.
/// Renumbers the steps of a run ([`Batch::renumber`]), table by table: the rows of each moved
/// node to `-2 - new` (`$2` old and `$3` new indices), then every such row to `new`.
macro_rules! renumber_sql {
    ($table:literal, $own:literal) => {
        (
            concat!(
                "UPDATE ",
                $table,
                " AS t SET node = -2 - m.new FROM unnest($2::bigint[], $3::bigint[]) AS m (old, new) \
                 WHERE t.run = $1 AND t.node = m.old",
                $own
            ),
            concat!(
                "UPDATE ",
                $table,
                " SET node = -2 - node WHERE run = $1 AND node <= -2"
            ),
        )
    };
}

const RENUMBER: [(&str, &str); 5] = [
    renumber_sql!("events", " AND t.path IS NULL"),
    // Not the ends of instances nested deeper (`ship[3]/pack@2`): their node is the body's.
    renumber_sql!("outputs", " AND t.instance NOT LIKE '%/%'"),
    renumber_sql!("timers", ""),
    renumber_sql!("waits", ""),
    renumber_sql!("tasks", ""),
];

async fn lock_run(tx: &mut Tx<'_>, run: &str) -> R<(RunSummary, u64)> {
    const SQL: &str =
        "SELECT id, workflow, graph_hash, input_hash, status, next_seq, version, owner,
        lease_until, wake_at, created_ms, updated_ms,
        (extract(epoch FROM clock_timestamp()) * 1000)::bigint
        FROM runs WHERE id = $1 FOR UPDATE";
    let row = tx.query_opt("locking a run", SQL, &[&run]).await?;
    let row = row.ok_or_else(|| not_found(run))?;
    Ok((summary(&row)?, u(get(&row, 12)?)))
}

/// The run, unlocked.
async fn read_run(tx: &mut Tx<'_>, run: &str) -> R<Option<RunSummary>> {
    const SQL: &str =
        "SELECT id, workflow, graph_hash, input_hash, status, next_seq, version, owner,
        lease_until, wake_at, created_ms, updated_ms FROM runs WHERE id = $1";
    let row = tx.query_opt("reading a run", SQL, &[&run]).await?;
    row.as_ref().map(summary).transpose()
}

async fn existing(tx: &mut Tx<'_>, run: &str) -> R<RunSummary> {
    read_run(tx, run).await?.ok_or_else(|| not_found(run))
}

/// Writes `events` in one statement (one round trip however many there are).
async fn insert_events(tx: &mut Tx<'_>, run: &str, events: &[StoredEvent], now: u64) -> R<()> {
    const SQL: &str = "INSERT INTO events (run, seq, format, node, node_name, path, attempt, kind, data, at_us, wall_ms)
        SELECT $1, seq, format, node, node_name, path, attempt, kind, data, at_us, $2
        FROM unnest($3::bigint[], $4::integer[], $5::bigint[], $6::text[], $7::text[],
                    $8::bigint[], $9::text[], $10::bytea[], $11::bigint[])
            AS e (seq, format, node, node_name, path, attempt, kind, data, at_us)";
    if events.is_empty() {
        return Ok(());
    }
    let seqs: Vec<i64> = events.iter().map(|e| i(e.seq)).collect();
    let formats: Vec<i32> = events.iter().map(|e| i32::from(e.format)).collect();
    let nodes: Vec<Option<i64>> = events.iter().map(|e| e.node.map(i64::from)).collect();
    let names: Vec<Option<&str>> = events.iter().map(|e| e.node_name.as_deref()).collect();
    let paths: Vec<Option<String>> = events
        .iter()
        .map(|e| e.path.as_ref().map(ToString::to_string))
        .collect();
    let attempts: Vec<i64> = events.iter().map(|e| i64::from(e.attempt)).collect();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    let data: Vec<&[u8]> = events.iter().map(|e| e.data.as_slice()).collect();
    let at_us: Vec<i64> = events.iter().map(|e| i(e.at_us)).collect();
    tx.execute(
        "writing events",
        SQL,
        &[
            &run,
            &i(now),
            &seqs,
            &formats,
            &nodes,
            &names,
            &paths,
            &attempts,
            &kinds,
            &data,
            &at_us,
        ],
    )
    .await?;
    Ok(())
}

async fn read_events(tx: &mut Tx<'_>, run: &str, from: u64, to: u64) -> R<Vec<StoredEvent>> {
    const SQL: &str =
        "SELECT seq, format, node, node_name, path, attempt, kind, data, at_us FROM events
        WHERE run = $1 AND seq >= $2 AND seq < $3 ORDER BY seq";
    let rows = tx
        .query("reading events", SQL, &[&run, &i(from), &i(to)])
        .await?;
    events_of(run, &rows)
}

/// The events of `run` itself, in order: not those of its nest instances (`events_own`).
async fn own_events(tx: &mut Tx<'_>, run: &str) -> R<Vec<StoredEvent>> {
    const SQL: &str =
        "SELECT seq, format, node, node_name, path, attempt, kind, data, at_us FROM events
        WHERE run = $1 AND path IS NULL ORDER BY seq";
    let rows = tx.query("reading events", SQL, &[&run]).await?;
    events_of(run, &rows)
}

fn events_of(run: &str, rows: &[Row]) -> R<Vec<StoredEvent>> {
    rows.iter()
        .map(|row| {
            let seq = u(get(row, 0)?);
            let format: i32 = get(row, 1)?;
            let path = match get::<Option<String>>(row, 4)? {
                Some(path) => Some(path.parse::<StoredPath>().map_err(|e| {
                    corrupt(format!("run `{run}` event #{seq}: path `{path}`: {e}"))
                })?),
                None => None,
            };
            Ok(StoredEvent {
                format: u16::try_from(format)
                    .map_err(|_| corrupt(format!("run `{run}` event #{seq}: format {format}")))?,
                seq,
                node: get::<Option<i64>>(row, 2)?
                    .map(|n| u32_of(n, "node"))
                    .transpose()?,
                node_name: get(row, 3)?,
                path,
                attempt: u32_of(get(row, 5)?, "attempt")?,
                kind: get(row, 6)?,
                data: get(row, 7)?,
                at_us: u(get(row, 8)?),
            })
        })
        .collect()
}

fn timer_node(key: &TimerKey) -> i64 {
    key.node.map_or(-1, i64::from)
}

fn timer_key(node: i64, instance: String, kind: &str) -> R<TimerKey> {
    Ok(TimerKey {
        node: u32::try_from(node).ok(),
        instance,
        kind: kind
            .parse::<TimerKind>()
            .map_err(|e| corrupt(e.to_string()))?,
    })
}

async fn apply_timers(tx: &mut Tx<'_>, run: &str, changes: &[TimerChange], now: u64) -> R<()> {
    // The last change of each timer is the one that holds: one statement sets, one clears.
    let mut last: Vec<(&TimerKey, Option<i64>)> = Vec::new();
    for change in changes {
        let (key, due) = match change {
            TimerChange::Set { key, after } => (key, Some(i(now).saturating_add(ms(*after)))),
            TimerChange::Clear { key } => (key, None),
        };
        match last.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = due,
            None => last.push((key, due)),
        }
    }
    let (set, clear): (Vec<_>, Vec<_>) = last.into_iter().partition(|(_, due)| due.is_some());
    if !clear.is_empty() {
        let nodes: Vec<i64> = clear.iter().map(|(k, _)| timer_node(k)).collect();
        let instances: Vec<&str> = clear.iter().map(|(k, _)| k.instance.as_str()).collect();
        let kinds: Vec<&str> = clear.iter().map(|(k, _)| k.kind.as_str()).collect();
        tx.execute(
            "writing timers",
            "DELETE FROM timers t USING unnest($2::bigint[], $3::text[], $4::text[]) AS c (node, instance, kind)
             WHERE t.run = $1 AND t.node = c.node AND t.instance = c.instance AND t.kind = c.kind",
            &[&run, &nodes, &instances, &kinds],
        )
        .await?;
    }
    if !set.is_empty() {
        let nodes: Vec<i64> = set.iter().map(|(k, _)| timer_node(k)).collect();
        let instances: Vec<&str> = set.iter().map(|(k, _)| k.instance.as_str()).collect();
        let kinds: Vec<&str> = set.iter().map(|(k, _)| k.kind.as_str()).collect();
        let due: Vec<i64> = set.iter().map(|(_, due)| due.unwrap_or(0)).collect();
        tx.execute(
            "writing timers",
            "INSERT INTO timers (run, node, instance, kind, due_ms)
             SELECT $1, node, instance, kind, due_ms
             FROM unnest($2::bigint[], $3::text[], $4::text[], $5::bigint[]) AS s (node, instance, kind, due_ms)
             ON CONFLICT (run, node, instance, kind) DO UPDATE SET due_ms = EXCLUDED.due_ms",
            &[&run, &nodes, &instances, &kinds, &due],
        )
        .await?;
    }
    Ok(())
}

/// Sets the run's wake time: its earliest timer, the arrival of its first open signal that a
/// step waits for or that is a request (`flow.…`), or the completion of a done task.
async fn set_wake(tx: &mut Tx<'_>, run: &str) -> R<()> {
    const SQL: &str = "UPDATE runs SET wake_at = (SELECT min(at) FROM (
            SELECT min(due_ms) AS at FROM timers WHERE run = $1
            UNION ALL
            SELECT min(s.sent_ms) FROM signals s WHERE s.run = $1
                AND s.consumed_seq IS NULL
                AND (left(s.name, 5) = 'flow.'
                    OR EXISTS (SELECT 1 FROM waits w WHERE w.run = $1 AND w.name = s.name))
            UNION ALL
            SELECT min(done_at) FROM tasks WHERE run = $1 AND status = 'done') AS due)
        WHERE id = $1";
    tx.execute("updating the wake time", SQL, &[&run]).await?;
    Ok(())
}

async fn open_signals(tx: &mut Tx<'_>, run: &str, after: u64) -> R<Vec<StoredSignal>> {
    const SQL: &str = "SELECT id, name, payload, mode, sent_ms FROM signals
        WHERE run = $1 AND id > $2 AND consumed_seq IS NULL ORDER BY id";
    let rows = tx.query("reading signals", SQL, &[&run, &i(after)]).await?;
    rows.iter()
        .map(|row| {
            let mode: String = get(row, 3)?;
            Ok(StoredSignal {
                id: u(get(row, 0)?),
                run: run.to_owned(),
                name: get(row, 1)?,
                payload: get(row, 2)?,
                mode: if mode == "transient" {
                    SignalMode::Transient
                } else {
                    SignalMode::Kept
                },
                sent_ms: u(get(row, 4)?),
            })
        })
        .collect()
}

async fn results(tx: &mut Tx<'_>, run: &str) -> R<Vec<TaskResult>> {
    const SQL: &str = "SELECT node, attempt, outcome, type_name, bytes, error, instance FROM tasks
        WHERE run = $1 AND status = 'done' ORDER BY node, instance";
    let rows = tx.query("reading task results", SQL, &[&run]).await?;
    rows.iter()
        .map(|row| {
            let outcome: Option<String> = get(row, 2)?;
            let outcome = match outcome.as_deref() {
                Some("completed") => TaskOutcome::Completed {
                    type_name: get::<Option<String>>(row, 3)?.unwrap_or_default(),
                    bytes: get::<Option<Vec<u8>>>(row, 4)?.unwrap_or_default(),
                },
                _ => TaskOutcome::Failed {
                    error: get::<Option<String>>(row, 5)?.unwrap_or_default(),
                },
            };
            Ok(TaskResult {
                node: u32_of(get(row, 0)?, "node")?,
                instance: get(row, 6)?,
                attempt: u32_of(get(row, 1)?, "attempt")?,
                outcome,
            })
        })
        .collect()
}

async fn outputs(tx: &mut Tx<'_>, run: &str) -> R<Vec<StoredOutput>> {
    const SQL: &str = "SELECT node, instance, type_name, bytes FROM outputs WHERE run = $1
        ORDER BY node, instance";
    let rows = tx.query("reading outputs", SQL, &[&run]).await?;
    outputs_of(&rows)
}

/// The outputs of `run` that a load reads: not the superseded ends (`outputs_live`).
async fn live_outputs(tx: &mut Tx<'_>, run: &str) -> R<Vec<StoredOutput>> {
    const SQL: &str = "SELECT node, instance, type_name, bytes FROM outputs
        WHERE run = $1 AND NOT superseded ORDER BY node, instance";
    let rows = tx.query("reading outputs", SQL, &[&run]).await?;
    outputs_of(&rows)
}

fn outputs_of(rows: &[Row]) -> R<Vec<StoredOutput>> {
    rows.iter()
        .map(|row| {
            Ok(StoredOutput {
                node: u32_of(get(row, 0)?, "node")?,
                instance: get(row, 1)?,
                type_name: get(row, 2)?,
                bytes: get(row, 3)?,
            })
        })
        .collect()
}

pub(crate) async fn create_run(tx: &mut Tx<'_>, run: NewRun) -> R<Created> {
    let mut check = Batch::new(
        &Lease {
            run: run.id.clone(),
            owner: run.owner.clone(),
            version: 1,
            until_ms: 0,
        },
        0,
        run.lease,
    );
    check.events = run.events;
    check.check_numbering()?;
    let next_seq = check.events.len() as u64;
    // The server's clock is read inside the statement that needs it.
    let created = tx
        .query_opt(
            "creating a run",
            "INSERT INTO runs (id, workflow, graph_hash, input, input_hash, options, status, next_seq,
                version, owner, lease_until, created_ms, updated_ms)
             SELECT $1, $2, $3, $4, $5, $6, 'running', $7, 1, $8, now.ms + $9, now.ms, now.ms
             FROM (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms) now
             ON CONFLICT (id) DO NOTHING
             RETURNING created_ms, lease_until",
            &[
                &run.id,
                &run.workflow,
                &i(run.graph_hash),
                &run.input,
                &i(run.input_hash),
                &run.options,
                &i(next_seq),
                &run.owner.as_str(),
                &lease_ms(run.lease),
            ],
        )
        .await?;
    let Some(created) = created else {
        return Ok(Created::Exists(existing(tx, &run.id).await?));
    };
    let now = u(get(&created, 0)?);
    let until: i64 = get(&created, 1)?;
    insert_nodes(tx, &run.id, &run.nodes).await?;
    insert_events(tx, &run.id, &check.events, now).await?;
    apply_timers(tx, &run.id, &run.timers, now).await?;
    if !run.timers.is_empty() {
        set_wake(tx, &run.id).await?;
    }
    Ok(Created::New {
        lease: Lease {
            run: run.id,
            owner: run.owner,
            version: 1,
            until_ms: u(until),
        },
        next_seq,
    })
}

pub(crate) async fn load_run(
    tx: &mut Tx<'_>,
    id: &str,
    owner: &Owner,
    lease: Duration,
) -> R<Loaded> {
    let (run, now) = lock_run(tx, id).await?;
    // A finished run's lease guards nothing: its result is read whoever held it last.
    if let (Some(holder), Some(until)) = (&run.owner, run.lease_until_ms)
        && !run.status.is_finished()
        && holder != owner.as_str()
        && until > now
    {
        return Err(Fail::Store(StoreError::Busy {
            run: id.to_owned(),
            owner: holder.clone(),
            until_ms: until,
        }));
    }
    let until = i(now).saturating_add(ms(lease));
    let row = tx
        .query_opt(
            "taking the lease of a run",
            "UPDATE runs SET version = version + 1, owner = $2, lease_until = $3, updated_ms = $4
             WHERE id = $1 AND version = $5
             RETURNING id, workflow, graph_hash, input_hash, status, next_seq, version, owner,
                lease_until, wake_at, created_ms, updated_ms, input, options, ended, result, error",
            &[&id, &owner.as_str(), &until, &i(now), &i(run.version)],
        )
        .await?;
    let row = row.ok_or_else(|| not_found(id))?;
    let run = summary(&row)?;
    let input: Vec<u8> = get(&row, 12)?;
    let options: Vec<u8> = get(&row, 13)?;
    let ended: bool = get(&row, 14)?;
    let end = ended
        .then(|| -> R<RunEnd> {
            Ok(RunEnd {
                result: get(&row, 15)?,
                error: get(&row, 16)?,
            })
        })
        .transpose()?;
    let nodes = read_nodes(tx, id).await?;
    let timers = tx
        .query(
            "reading the timers of a run",
            "SELECT node, instance, kind, due_ms FROM timers WHERE run = $1 ORDER BY node, instance, kind",
            &[&id],
        )
        .await?
        .iter()
        .map(|row| {
            let kind: String = get(row, 2)?;
            Ok(StoredTimer {
                key: timer_key(get(row, 0)?, get(row, 1)?, &kind)?,
                due_ms: u(get(row, 3)?),
            })
        })
        .collect::<R<Vec<_>>>()?;
    let waits = tx
        .query(
            "reading the waits of a run",
            "SELECT node, instance, name FROM waits WHERE run = $1 ORDER BY node, instance",
            &[&id],
        )
        .await?
        .iter()
        .map(|row| Ok((u32_of(get(row, 0)?, "node")?, get(row, 1)?, get(row, 2)?)))
        .collect::<R<Vec<_>>>()?;
    Ok(Loaded {
        lease: Lease {
            run: id.to_owned(),
            owner: owner.clone(),
            version: run.version,
            until_ms: u(until),
        },
        input,
        options,
        nodes,
        events: own_events(tx, id).await?,
        next_seq: run.next_seq,
        outputs: live_outputs(tx, id).await?,
        timers,
        waits,
        signals: open_signals(tx, id, 0).await?,
        tasks: results(tx, id).await?,
        end,
        now_ms: now,
        run,
    })
}

/// The node rows of `run`, read without its lease; [`StoreError::NotFound`] when it does not
/// exist.
pub(crate) async fn nodes(tx: &mut Tx<'_>, run: &str) -> R<Vec<NodeRow>> {
    existing(tx, run).await?;
    read_nodes(tx, run).await
}

/// The node rows of `run`, in order.
async fn read_nodes(tx: &mut Tx<'_>, id: &str) -> R<Vec<NodeRow>> {
    tx.query(
        "reading the nodes of a run",
        "SELECT node, name, label, fingerprint, preds, compensate, kind, policy FROM nodes WHERE run = $1 ORDER BY node",
        &[&id],
    )
    .await?
    .iter()
    .map(|row| {
        let preds: Vec<i64> = get(row, 4)?;
        Ok(NodeRow {
            node: u32_of(get(row, 0)?, "node")?,
            name: get(row, 1)?,
            label: get(row, 2)?,
            fingerprint: u(get(row, 3)?),
            preds: preds
                .into_iter()
                .map(|p| u32_of(p, "predecessor"))
                .collect::<R<_>>()?,
            compensate: get(row, 5)?,
            kind: get(row, 6)?,
            policy: get(row, 7)?,
        })
    })
    .collect()
}

pub(crate) async fn list_runs(tx: &mut Tx<'_>, filter: &RunFilter) -> R<Vec<RunSummary>> {
    /// The list's statement, oldest first (`>`, ascending) or newest first (`<`, descending).
    macro_rules! list {
        ($after:literal, $order:literal) => {
            concat!(
                "SELECT id, workflow, graph_hash, input_hash, status, next_seq, version, owner,
                lease_until, wake_at, created_ms, updated_ms FROM runs
                WHERE ($1::text IS NULL OR workflow = $1)
                  AND (cardinality($2::text[]) = 0 OR status = ANY($2))
                  AND ($4::text IS NULL OR id = $4)
                  AND ($5::text IS NULL OR strpos(id, $5) > 0)
                  AND ($6::bigint IS NULL OR created_ms >= $6)
                  AND ($7::bigint IS NULL OR created_ms < $7)
                  AND ($8::bigint IS NULL OR (created_ms, id) ",
                $after,
                " ($8, $9::text))
                ORDER BY ",
                $order,
                " LIMIT $3"
            )
        };
    }
    const OLDEST_FIRST: &str = list!(">", "created_ms, id");
    const NEWEST_FIRST: &str = list!("<", "created_ms DESC, id DESC");
    let sql = match filter.newest_first {
        false => OLDEST_FIRST,
        true => NEWEST_FIRST,
    };
    let statuses: Vec<&str> = filter.statuses.iter().map(|s| s.as_str()).collect();
    let limit: Option<i64> = filter.limit.map(i64::from);
    let ms = |at: Option<u64>| at.map(|ms| i64::try_from(ms).unwrap_or(i64::MAX));
    let (from, before) = (ms(filter.created_from_ms), ms(filter.created_before_ms));
    let after_ms = ms(filter.after.as_ref().map(|a| a.created_ms));
    let after_id = filter.after.as_ref().map(|a| a.id.as_str());
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 9] = [
        &filter.workflow,
        &statuses,
        &limit,
        &filter.id,
        &filter.id_contains,
        &from,
        &before,
        &after_ms,
        &after_id,
    ];
    let rows = tx.query("listing runs", sql, &params).await?;
    rows.iter().map(summary).collect()
}

/// `workflows` as the two arrays a statement unnests into `(workflow, graph_hash)` pairs.
fn versions(workflows: &[WorkflowVersion]) -> (Vec<&str>, Vec<i64>) {
    workflows
        .iter()
        .map(|w| (w.workflow.as_str(), i(w.graph_hash)))
        .unzip()
}

pub(crate) async fn due_runs(
    tx: &mut Tx<'_>,
    owner: &Owner,
    workflows: &[WorkflowVersion],
    limit: u32,
) -> R<Vec<RunSummary>> {
    let (names, graphs) = versions(workflows);
    // The runs a worker may decide, each kind from an index of its own (`runs_active`,
    // `runs_wake`, `tasks_done`), so that a backlog of runs waiting for later costs nothing:
    // running and compensating runs, waiting runs whose wake time has come, and runs with a
    // done task; of them, those of the worker's versions that no live owner holds, each
    // looked up by its key (materialized, and `OFFSET 0` so that the planner does not turn
    // the lookups back into a scan of every run).
    const SQL: &str = "WITH now AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms),
        due AS MATERIALIZED (
            SELECT id FROM runs WHERE status IN ('running', 'compensating')
            UNION
            SELECT id FROM runs WHERE status = 'waiting' AND wake_at <= (SELECT ms FROM now)
            UNION
            SELECT run FROM tasks WHERE status = 'done')
        SELECT r.id, r.workflow, r.graph_hash, r.input_hash, r.status, r.next_seq, r.version, r.owner,
            r.lease_until, r.wake_at, r.created_ms, r.updated_ms
        FROM due CROSS JOIN LATERAL (SELECT * FROM runs WHERE runs.id = due.id OFFSET 0) r
        WHERE r.status IN ('running', 'waiting', 'compensating')
          AND (r.workflow, r.graph_hash) IN (SELECT * FROM unnest($1::text[], $4::bigint[]))
          AND (r.owner IS NULL OR r.owner = $3 OR r.lease_until IS NULL
               OR r.lease_until <= (SELECT ms FROM now))
        ORDER BY r.created_ms, r.id LIMIT $2";
    let rows = tx
        .query(
            "listing the due runs",
            SQL,
            &[&names, &i64::from(limit), &owner.as_str(), &graphs],
        )
        .await?;
    rows.iter().map(summary).collect()
}

pub(crate) async fn events(tx: &mut Tx<'_>, run: &str, from: u64) -> R<Vec<StoredEvent>> {
    let summary = existing(tx, run).await?;
    read_events(tx, run, from, summary.next_seq).await
}

pub(crate) async fn run_data(tx: &mut Tx<'_>, run: &str) -> R<RunData> {
    let row = tx
        .query_opt(
            "reading the data of a run",
            "SELECT input, ended, result, error, options FROM runs WHERE id = $1",
            &[&run],
        )
        .await?;
    let row = row.ok_or_else(|| not_found(run))?;
    let ended: bool = get(&row, 1)?;
    let end = ended
        .then(|| -> R<RunEnd> {
            Ok(RunEnd {
                result: get(&row, 2)?,
                error: get(&row, 3)?,
            })
        })
        .transpose()?;
    Ok(RunData {
        input: get(&row, 0)?,
        options: get(&row, 4)?,
        outputs: outputs(tx, run).await?,
        end,
    })
}

pub(crate) async fn commit(tx: &mut Tx<'_>, batch: &Batch, channel: &str) -> R<Committed> {
    let (run, now) = lock_run(tx, &batch.run).await?;
    batch.check_numbering()?;
    let next = run.next_seq;
    if !batch.events.is_empty() && batch.first_seq < next {
        let stored =
            read_events(tx, &batch.run, batch.first_seq, batch.end_seq().min(next)).await?;
        let first = batch.first_seq;
        let at = |seq: u64| stored.get(usize::try_from(seq - first).unwrap_or(usize::MAX));
        if let Some(done) = batch.replayed(next, at)? {
            return Ok(done);
        }
    }
    batch.check_lease(&run)?;
    if run.status.is_finished() {
        return Err(Fail::Store(StoreError::Finished {
            run: batch.run.clone(),
        }));
    }
    if batch.first_seq != next {
        return Err(Fail::Store(batch.gap(next)));
    }
    // The decisive step: the run moves on only from where this batch starts, under its lease.
    // The row lock above makes it succeed; were it to find the run changed, nothing of the
    // batch is written and the run is read again to answer.
    if !batch.renumber.is_empty() {
        // The steps the adopted graph numbers otherwise: each moved node first to
        // `-2 - new` (a run-level timer has -1, no node a negative index), then to `new`, so
        // that no row meets one it would collide with.
        let (olds, news): (Vec<i64>, Vec<i64>) = batch
            .renumber
            .iter()
            .map(|&(old, new)| (i64::from(old), i64::from(new)))
            .unzip();
        for (moving, placing) in RENUMBER {
            tx.execute(
                "renumbering the steps of a run",
                moving,
                &[&batch.run, &olds, &news],
            )
            .await?;
            tx.execute("renumbering the steps of a run", placing, &[&batch.run])
                .await?;
        }
    }
    if let Some((hash, nodes)) = &batch.graph {
        // A compatible change of the run's graph, adopted with this commit.
        // Its tasks are claimed by the workers of the new graph (`claim_tasks` filters by it).
        tx.execute(
            "replacing the graph of a run",
            "WITH adopted AS (UPDATE runs SET graph_hash = $2 WHERE id = $1)
             UPDATE tasks SET graph_hash = $2 WHERE run = $1",
            &[&batch.run, &i(*hash)],
        )
        .await?;
        tx.execute(
            "replacing the graph of a run",
            "DELETE FROM nodes WHERE run = $1",
            &[&batch.run],
        )
        .await?;
        insert_nodes(tx, &batch.run, nodes).await?;
    }
    let status = batch.status.unwrap_or(run.status);
    let end_seq = batch.end_seq();
    let until = i(now).saturating_add(ms(batch.lease));
    let (ended, result, error) = match &batch.end {
        Some(end) => (true, end.result.clone(), end.error.clone()),
        None => (false, None, None),
    };
    let moved = tx
        .execute(
            "updating a run",
            "UPDATE runs SET next_seq = $2, status = $3, lease_until = $4, updated_ms = $5,
                ended = ended OR $6, result = CASE WHEN $6 THEN $7 ELSE result END,
                error = CASE WHEN $6 THEN $8 ELSE error END
             WHERE id = $1 AND next_seq = $9 AND owner = $10 AND version = $11",
            &[
                &batch.run,
                &i(end_seq),
                &status.as_str(),
                &until,
                &i(now),
                &ended,
                &result,
                &error,
                &i(batch.first_seq),
                &batch.owner.as_str(),
                &i(batch.lease_version),
            ],
        )
        .await?;
    if moved == 0 {
        let run = existing(tx, &batch.run).await?;
        batch.check_lease(&run)?;
        return Err(Fail::Store(batch.gap(run.next_seq)));
    }
    let last_seq = end_seq.saturating_sub(1);
    for id in &batch.consumed {
        let taken = tx
            .execute(
                "consuming a signal",
                "UPDATE signals SET consumed_seq = $3 WHERE id = $1 AND run = $2 AND consumed_seq IS NULL",
                &[&i(*id), &batch.run, &i(last_seq)],
            )
            .await?;
        if taken == 0 {
            return Err(Fail::Store(StoreError::SignalTaken {
                run: batch.run.clone(),
                signal: *id,
            }));
        }
    }
    insert_events(tx, &batch.run, &batch.events, now).await?;
    if !batch.outputs.is_empty() {
        // The last output of each node instance holds.
        let mut outputs: Vec<&StoredOutput> = Vec::with_capacity(batch.outputs.len());
        for output in &batch.outputs {
            match outputs
                .iter_mut()
                .find(|o| o.node == output.node && o.instance == output.instance)
            {
                Some(slot) => *slot = output,
                None => outputs.push(output),
            }
        }
        let nodes: Vec<i64> = outputs.iter().map(|o| i64::from(o.node)).collect();
        let instances: Vec<&str> = outputs.iter().map(|o| o.instance.as_str()).collect();
        let types: Vec<&str> = outputs.iter().map(|o| o.type_name.as_str()).collect();
        let bytes: Vec<&[u8]> = outputs.iter().map(|o| o.bytes.as_slice()).collect();
        tx.execute(
            "writing outputs",
            "INSERT INTO outputs (run, node, instance, type_name, bytes)
             SELECT $1, node, instance, type_name, bytes
             FROM unnest($2::bigint[], $3::text[], $4::text[], $5::bytea[]) AS o (node, instance, type_name, bytes)
             ON CONFLICT (run, node, instance)
             DO UPDATE SET type_name = EXCLUDED.type_name, bytes = EXCLUDED.bytes,
               superseded = false",
            &[&batch.run, &nodes, &instances, &types, &bytes],
        )
        .await?;
    }
    if !batch.superseded.is_empty() {
        let nodes: Vec<i64> = batch
            .superseded
            .iter()
            .map(|(n, _)| i64::from(*n))
            .collect();
        let instances: Vec<&str> = batch.superseded.iter().map(|(_, r)| r.as_str()).collect();
        tx.execute(
            "marking superseded outputs",
            "UPDATE outputs SET superseded = true
             FROM unnest($2::bigint[], $3::text[]) AS s (node, instance)
             WHERE outputs.run = $1 AND outputs.node = s.node AND outputs.instance = s.instance",
            &[&batch.run, &nodes, &instances],
        )
        .await?;
    }
    apply_timers(tx, &batch.run, &batch.timers, now).await?;
    for change in &batch.waits {
        match change {
            WaitChange::Open {
                node,
                instance,
                name,
            } => {
                tx.execute(
                    "writing waits",
                    "INSERT INTO waits (run, node, instance, name) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (run, node, instance) DO UPDATE SET name = EXCLUDED.name",
                    &[&batch.run, &i64::from(*node), instance, name],
                )
                .await?;
            }
            WaitChange::Close { node, instance } => {
                tx.execute(
                    "writing waits",
                    "DELETE FROM waits WHERE run = $1 AND node = $2 AND instance = $3",
                    &[&batch.run, &i64::from(*node), instance],
                )
                .await?;
            }
        }
    }
    if !batch.tasks.is_empty() {
        // The last change of each task holds: a retry closes the attempt's task and opens the
        // next attempt's, a withdrawal closes a task opened earlier in the batch.
        let mut last: Vec<(u32, &str, Option<u32>)> = Vec::new();
        let mut at: HashMap<(u32, &str), usize> = HashMap::new();
        for change in &batch.tasks {
            let (node, instance, attempt) = match change {
                TaskChange::Open {
                    node,
                    instance,
                    attempt,
                } => (*node, instance.as_str(), Some(*attempt)),
                TaskChange::Close { node, instance } => (*node, instance.as_str(), None),
            };
            match at.get(&(node, instance)) {
                Some(&slot) => last[slot].2 = attempt,
                None => {
                    at.insert((node, instance), last.len());
                    last.push((node, instance, attempt));
                }
            }
        }
        let (closed, closed_instances): (Vec<i64>, Vec<&str>) = last
            .iter()
            .filter(|(_, _, attempt)| attempt.is_none())
            .map(|(node, instance, _)| (i64::from(*node), *instance))
            .unzip();
        let mut opened = Vec::new();
        let mut opened_instances = Vec::new();
        let mut attempts = Vec::new();
        for (node, instance, attempt) in &last {
            if let Some(attempt) = attempt {
                opened.push(i64::from(*node));
                opened_instances.push(*instance);
                attempts.push(i64::from(*attempt));
            }
        }
        if !closed.is_empty() {
            tx.execute(
                "closing tasks",
                "DELETE FROM tasks t USING unnest($2::bigint[], $3::text[]) AS c (node, instance)
                 WHERE t.run = $1 AND t.node = c.node AND t.instance = c.instance",
                &[&batch.run, &closed, &closed_instances],
            )
            .await?;
        }
        if !opened.is_empty() {
            // A task carries its run's workflow and graph hash: claims find it by them. A task
            // opened again for the attempt it has is kept as it is (claimed, or done). The
            // workers listening are told (on commit) that there is work.
            tx.query(
                "opening tasks",
                "WITH opened AS (
                    INSERT INTO tasks (run, node, instance, attempt, version, opened, status, workflow, graph_hash, ready_ms)
                    SELECT $1, o.node, o.instance, o.attempt, nextval('task_versions'),
                        nextval('task_order'), 'ready', $4, $5,
                        (extract(epoch FROM clock_timestamp()) * 1000)::bigint
                    FROM unnest($2::bigint[], $7::text[], $3::bigint[]) WITH ORDINALITY
                        AS o (node, instance, attempt, n)
                    ORDER BY o.n
                    ON CONFLICT (run, node, instance) DO UPDATE SET attempt = EXCLUDED.attempt,
                        version = EXCLUDED.version, opened = EXCLUDED.opened, status = 'ready',
                        ready_ms = EXCLUDED.ready_ms,
                        owner = NULL, lease_until = NULL, outcome = NULL, type_name = NULL,
                        bytes = NULL, error = NULL, done_at = NULL
                    WHERE tasks.attempt <> EXCLUDED.attempt
                    RETURNING 1)
                 SELECT pg_notify($6, '') FROM (SELECT count(*) FROM opened) AS n",
                &[
                    &batch.run,
                    &opened,
                    &attempts,
                    &run.workflow,
                    // The run's graph from this batch on, when the batch adopts one.
                    &i(batch.graph.as_ref().map_or(run.graph_hash, |(hash, _)| *hash)),
                    &channel,
                    &opened_instances,
                ],
            )
            .await?;
        }
    }
    if ended {
        tx.execute(
            "removing the tasks of an ended run",
            "DELETE FROM tasks WHERE run = $1",
            &[&batch.run],
        )
        .await?;
    }
    set_wake(tx, &batch.run).await?;
    Ok(Committed::Applied { next_seq: end_seq })
}

pub(crate) async fn due_timers(tx: &mut Tx<'_>, horizon: Duration, limit: u32) -> R<Vec<DueTimer>> {
    const SQL: &str = "SELECT t.run, t.node, t.instance, t.kind, t.due_ms FROM timers t JOIN runs r ON r.id = t.run
        WHERE t.due_ms <= (extract(epoch FROM clock_timestamp()) * 1000)::bigint + $1
          AND r.status NOT IN ('succeeded', 'failed', 'cancelled')
        ORDER BY t.due_ms, t.run, t.node, t.instance, t.kind LIMIT $2";
    let rows = tx
        .query(
            "reading the due timers",
            SQL,
            &[&lease_ms(horizon), &i64::from(limit)],
        )
        .await?;
    rows.iter()
        .map(|row| {
            let kind: String = get(row, 3)?;
            Ok(DueTimer {
                run: get(row, 0)?,
                key: timer_key(get(row, 1)?, get(row, 2)?, &kind)?,
                due_ms: u(get(row, 4)?),
            })
        })
        .collect()
}

pub(crate) async fn send_signal(
    tx: &mut Tx<'_>,
    signal: &NewSignal,
    channel: &str,
) -> R<SignalSent> {
    let (run, now) = lock_run(tx, &signal.run).await?;
    // Due for any worker, unless a live worker holds the run (then it is told alone).
    let held_by_none = run.owner.is_none() || run.lease_until_ms.is_none_or(|until| until <= now);
    if run.status.is_finished() {
        return Err(Fail::Store(StoreError::Finished {
            run: signal.run.clone(),
        }));
    }
    if signal.mode == SignalMode::Transient {
        let waited = tx
            .query_opt(
                "reading the waits of a run",
                "SELECT 1 FROM waits WHERE run = $1 AND name = $2 LIMIT 1",
                &[&signal.run, &signal.name],
            )
            .await?;
        if waited.is_none() {
            return Ok(SignalSent::Dropped);
        }
    }
    let row = tx
        .query_opt(
            "storing a signal",
            "WITH sent AS (
                INSERT INTO signals (run, name, payload, mode, sent_ms) VALUES ($1, $2, $3, $4, $5)
                RETURNING id)
             SELECT id, pg_notify($6, CASE WHEN $7 THEN 'due:' ELSE 'run:' END || $1)::text
             FROM sent",
            &[
                &signal.run,
                &signal.name,
                &signal.payload,
                &signal.mode.as_str(),
                &i(now),
                &channel,
                &held_by_none,
            ],
        )
        .await?;
    let id = match row {
        Some(row) => u(get(&row, 0)?),
        None => return Err(corrupt("a signal stored without an id".to_owned())),
    };
    set_wake(tx, &signal.run).await?;
    Ok(SignalSent::Stored { id })
}

pub(crate) async fn signals(tx: &mut Tx<'_>, run: &str, after: u64) -> R<Vec<StoredSignal>> {
    existing(tx, run).await?;
    open_signals(tx, run, after).await
}

/// `items` in the order of their runs: transactions that lock several runs' rows lock them in
/// one order, so two of them never wait for each other.
fn in_run_order<T>(items: &[T], run: impl Fn(&T) -> &String) -> Vec<&T> {
    let mut sorted: Vec<&T> = items.iter().collect();
    sorted.sort_by(|a, b| run(a).cmp(run(b)));
    sorted
}

pub(crate) async fn heartbeat(
    tx: &mut Tx<'_>,
    owner: &Owner,
    held: &[Lease],
    lease: Duration,
) -> R<Vec<Lease>> {
    if held.is_empty() {
        return Ok(Vec::new());
    }
    let sorted = in_run_order(held, |each| &each.run);
    let runs: Vec<&str> = sorted.iter().map(|l| l.run.as_str()).collect();
    let versions: Vec<i64> = sorted.iter().map(|l| i(l.version)).collect();
    // Every lease in one statement; those it did not extend are lost.
    let rows = tx
        .query(
            "extending leases",
            "UPDATE runs r SET lease_until = (extract(epoch FROM clock_timestamp()) * 1000)::bigint + $3
             FROM unnest($1::text[], $4::bigint[]) AS h (id, version)
             WHERE r.id = h.id AND r.owner = $2 AND r.version = h.version
             RETURNING r.id, r.version",
            &[&runs, &owner.as_str(), &lease_ms(lease), &versions],
        )
        .await?;
    let kept = rows
        .iter()
        .map(|row| Ok((get::<String>(row, 0)?, get::<i64>(row, 1)?)))
        .collect::<R<Vec<_>>>()?;
    Ok(held
        .iter()
        .filter(|l| {
            !kept
                .iter()
                .any(|(run, v)| *run == l.run && *v == i(l.version))
        })
        .cloned()
        .collect())
}

pub(crate) async fn release(tx: &mut Tx<'_>, owner: &Owner, held: &[Lease]) -> R<()> {
    if held.is_empty() {
        return Ok(());
    }
    let sorted = in_run_order(held, |each| &each.run);
    let runs: Vec<&str> = sorted.iter().map(|l| l.run.as_str()).collect();
    let versions: Vec<i64> = sorted.iter().map(|l| i(l.version)).collect();
    tx.execute(
        "releasing leases",
        "UPDATE runs r SET owner = NULL, lease_until = NULL
         FROM unnest($1::text[], $3::bigint[]) AS h (id, version)
         WHERE r.id = h.id AND r.owner = $2 AND r.version = h.version",
        &[&runs, &owner.as_str(), &versions],
    )
    .await?;
    Ok(())
}

pub(crate) async fn claim_tasks(
    tx: &mut Tx<'_>,
    owner: &Owner,
    workflows: &[WorkflowVersion],
    limit: u32,
    lease: Duration,
) -> R<Vec<TaskClaim>> {
    let (names, graphs) = versions(workflows);
    // For each version the worker has, the oldest ready tasks (index `tasks_ready`) and the
    // claims whose lease lapsed (index `tasks_claimed`), skipping those another claimer has
    // locked this instant; of those, the oldest `limit`, each taken by a compare-and-set on
    // its version. One statement, the server's clock read inside it; its cost does not grow
    // with the backlog (docs/scale-out.md has the plan).
    const SQL: &str = "WITH now AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms),
        v AS (SELECT * FROM unnest($2::text[], $5::bigint[]) AS v (workflow, graph_hash)),
        free AS (
            SELECT c.* FROM v CROSS JOIN LATERAL (
                SELECT t.run, t.node, t.instance, t.version, t.status AS was, t.opened,
                    t.ready_ms AS ready FROM tasks t
                WHERE t.workflow = v.workflow AND t.graph_hash = v.graph_hash AND t.status = 'ready'
                ORDER BY t.opened LIMIT $4 FOR UPDATE SKIP LOCKED) c
            UNION ALL
            SELECT c.* FROM v CROSS JOIN LATERAL (
                SELECT t.run, t.node, t.instance, t.version, t.status AS was, t.opened,
                    t.lease_until AS ready FROM tasks t
                WHERE t.workflow = v.workflow AND t.graph_hash = v.graph_hash
                  AND t.status = 'running' AND t.lease_until <= (SELECT ms FROM now)
                ORDER BY t.lease_until LIMIT $4 FOR UPDATE SKIP LOCKED) c),
        picked AS (SELECT * FROM free ORDER BY opened LIMIT $4)
        UPDATE tasks t SET status = 'running', version = nextval('task_versions'), owner = $1,
            lease_until = (SELECT ms FROM now) + $3
        FROM picked
        WHERE t.run = picked.run AND t.node = picked.node AND t.instance = picked.instance
          AND t.version = picked.version
        RETURNING t.run, t.workflow, t.node, t.attempt, t.version, picked.was, t.opened, t.lease_until,
            t.instance, picked.ready";
    let rows = tx
        .query(
            "claiming tasks",
            SQL,
            &[
                &owner.as_str(),
                &names,
                &lease_ms(lease),
                &i64::from(limit),
                &graphs,
            ],
        )
        .await?;
    let mut claims = rows
        .iter()
        .map(|row| {
            let was: String = get(row, 5)?;
            let opened: i64 = get(row, 6)?;
            Ok((
                opened,
                TaskClaim {
                    run: get(row, 0)?,
                    workflow: get(row, 1)?,
                    node: u32_of(get(row, 2)?, "node")?,
                    instance: get(row, 8)?,
                    attempt: u32_of(get(row, 3)?, "attempt")?,
                    owner: owner.clone(),
                    version: u(get(row, 4)?),
                    until_ms: u(get(row, 7)?),
                    lapsed: was == "running",
                    inputs: None,
                    ready_ms: get::<Option<i64>>(row, 9)?.map(u),
                },
            ))
        })
        .collect::<R<Vec<_>>>()?;
    claims.sort_by_key(|(opened, _)| *opened);
    let mut claims: Vec<TaskClaim> = claims.into_iter().map(|(_, claim)| claim).collect();
    claim_inputs(tx, &mut claims).await?;
    Ok(claims)
}

/// Reads, in the claim's transaction, what executing each claimed task needs: its run's
/// parameters and graph hash, and the outputs of its node's predecessors (every node a step
/// reads is one: a read is an edge); for a `Loop` iteration's task, the stored end of the
/// iteration before it too ([`previous_instance`]). One statement for every claim.
async fn claim_inputs(tx: &mut Tx<'_>, claims: &mut [TaskClaim]) -> R<()> {
    if claims.is_empty() {
        return Ok(());
    }
    let runs: Vec<&str> = claims.iter().map(|c| c.run.as_str()).collect();
    let nodes: Vec<i64> = claims.iter().map(|c| i64::from(c.node)).collect();
    // No instance is named by the empty text: a task without one reads none.
    let previous: Vec<String> = claims
        .iter()
        .map(|c| previous_instance(&c.instance).unwrap_or_default())
        .collect();
    // Each claim's outputs by the primary key: its predecessors' (`node = ANY (preds)`), and
    // its previous iteration's end. (One join with an `OR` of both made the planner scan the
    // whole `outputs` table for every claim.)
    const SQL: &str = "SELECT c.i, r.input, r.graph_hash, o.node, o.type_name, o.bytes, o.instance
        FROM unnest($1::text[], $2::bigint[], $3::text[]) WITH ORDINALITY AS c (run, node, prev, i)
        JOIN runs r ON r.id = c.run
        LEFT JOIN LATERAL (
            SELECT o.node, o.type_name, o.bytes, o.instance
            FROM nodes n JOIN outputs o
              ON o.run = n.run AND o.node = ANY (n.preds) AND o.instance = ''
            WHERE n.run = c.run AND n.node = c.node
            UNION ALL
            SELECT o.node, o.type_name, o.bytes, o.instance FROM outputs o
            WHERE c.prev <> '' AND o.run = c.run AND o.node = c.node AND o.instance = c.prev
        ) o ON true
        ORDER BY c.i, o.node, o.instance";
    let rows = tx
        .query(
            "reading the inputs of claimed tasks",
            SQL,
            &[&runs, &nodes, &previous],
        )
        .await?;
    for row in &rows {
        let i: i64 = get(row, 0)?;
        let Some(claim) = usize::try_from(i - 1).ok().and_then(|i| claims.get_mut(i)) else {
            continue;
        };
        let inputs = match &mut claim.inputs {
            Some(inputs) => inputs,
            None => claim.inputs.insert(TaskInputs {
                graph_hash: u(get(row, 2)?),
                input: get(row, 1)?,
                outputs: Vec::new(),
            }),
        };
        if let Some(node) = get::<Option<i64>>(row, 3)? {
            inputs.outputs.push(StoredOutput {
                node: u32_of(node, "node")?,
                instance: get(row, 6)?,
                type_name: get(row, 4)?,
                bytes: get(row, 5)?,
            });
        }
    }
    Ok(())
}

pub(crate) async fn heartbeat_tasks(
    tx: &mut Tx<'_>,
    held: &[TaskClaim],
    lease: Duration,
) -> R<Vec<TaskClaim>> {
    if held.is_empty() {
        return Ok(Vec::new());
    }
    let sorted = in_run_order(held, |claim| &claim.run);
    let runs: Vec<&str> = sorted.iter().map(|c| c.run.as_str()).collect();
    let nodes: Vec<i64> = sorted.iter().map(|c| i64::from(c.node)).collect();
    let instances: Vec<&str> = sorted.iter().map(|c| c.instance.as_str()).collect();
    let versions: Vec<i64> = sorted.iter().map(|c| i(c.version)).collect();
    let owners: Vec<&str> = sorted.iter().map(|c| c.owner.as_str()).collect();
    // Every claim in one statement; those it did not extend are lost.
    let rows = tx
        .query(
            "extending task claims",
            "UPDATE tasks t SET lease_until = (extract(epoch FROM clock_timestamp()) * 1000)::bigint + $5
             FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], $6::text[])
                 AS h (run, node, version, owner, instance)
             WHERE t.run = h.run AND t.node = h.node AND t.instance = h.instance
               AND t.version = h.version AND t.owner = h.owner AND t.status = 'running'
             RETURNING t.run, t.node, t.version",
            &[&runs, &nodes, &versions, &owners, &lease_ms(lease), &instances],
        )
        .await?;
    let kept = rows
        .iter()
        .map(|row| {
            Ok((
                get::<String>(row, 0)?,
                get::<i64>(row, 1)?,
                get::<i64>(row, 2)?,
            ))
        })
        .collect::<R<Vec<_>>>()?;
    Ok(held
        .iter()
        .filter(|c| {
            !kept.iter().any(|(run, node, version)| {
                *run == c.run && *node == i64::from(c.node) && *version == i(c.version)
            })
        })
        .cloned()
        .collect())
}

pub(crate) async fn complete_task(
    tx: &mut Tx<'_>,
    claim: &TaskClaim,
    outcome: &TaskOutcome,
    channel: &str,
) -> R<TaskCommitted> {
    // The task's row alone: completions of one run's tasks do not wait for each other nor for
    // the run's decider. The run is due from now on (`due_runs` sees its done task); the output
    // becomes the node's when the decider journals the outcome.
    let (kind, type_name, bytes, error) = match outcome {
        TaskOutcome::Completed { type_name, bytes } => (
            "completed",
            Some(type_name.as_str()),
            Some(bytes.as_slice()),
            None,
        ),
        TaskOutcome::Failed { error } => ("failed", None, None, Some(error.as_str())),
    };
    // The run's holder is told on commit; every worker, if no live worker holds the run (it
    // is due).
    let done = tx
        .query(
            "completing a task",
            "WITH done AS (
                UPDATE tasks SET status = 'done', version = nextval('task_versions'), outcome = $5,
                    type_name = $6, bytes = $7, error = $8, lease_until = NULL,
                    done_at = (extract(epoch FROM clock_timestamp()) * 1000)::bigint
                WHERE run = $1 AND node = $2 AND instance = $10 AND version = $3 AND owner = $4
                    AND status = 'running'
                RETURNING run)
             SELECT pg_notify($9, CASE WHEN r.owner IS NULL OR r.lease_until IS NULL
                    OR r.lease_until <= (extract(epoch FROM clock_timestamp()) * 1000)::bigint
                    THEN 'due:' ELSE 'run:' END || done.run)::text
             FROM done JOIN runs r ON r.id = done.run",
            &[
                &claim.run,
                &i64::from(claim.node),
                &i(claim.version),
                &claim.owner.as_str(),
                &kind,
                &type_name,
                &bytes,
                &error,
                &channel,
                &claim.instance,
            ],
        )
        .await?
        .len();
    Ok(match done {
        0 => TaskCommitted::Stale,
        _ => TaskCommitted::Applied,
    })
}

pub(crate) async fn task_results(tx: &mut Tx<'_>, run: &str) -> R<Vec<TaskResult>> {
    existing(tx, run).await?;
    results(tx, run).await
}

pub(crate) async fn task_inputs(tx: &mut Tx<'_>, run: &str) -> R<TaskInputs> {
    let row = tx
        .query_opt(
            "reading the input of a run",
            "SELECT input, graph_hash FROM runs WHERE id = $1",
            &[&run],
        )
        .await?;
    let (input, graph_hash): (Vec<u8>, i64) = match row {
        Some(row) => (get(&row, 0)?, get(&row, 1)?),
        None => return Err(not_found(run)),
    };
    Ok(TaskInputs {
        graph_hash: u(graph_hash),
        input,
        outputs: outputs(tx, run).await?,
    })
}

pub(crate) async fn reopen(
    tx: &mut Tx<'_>,
    run: &str,
    marker: &StoredEvent,
    channel: &str,
) -> R<RunSummary> {
    let (summary, now) = lock_run(tx, run).await?;
    if !matches!(
        summary.status,
        RunStatus::Failed | RunStatus::Cancelled | RunStatus::Succeeded
    ) {
        return Err(Fail::Store(StoreError::WrongStatus {
            run: run.to_owned(),
            status: summary.status,
            needs: flowdag_store::REOPENS,
        }));
    }
    if marker.seq != summary.next_seq {
        return Err(Fail::Store(StoreError::Conflict {
            run: run.to_owned(),
            expected: summary.next_seq,
            found: marker.seq,
            why: "the journal changed since it was read".to_owned(),
        }));
    }
    insert_events(tx, run, std::slice::from_ref(marker), now).await?;
    // Requests left from before (never carried out) would stop the redriven run at once.
    tx.execute(
        "reopening a run",
        "UPDATE signals SET consumed_seq = $2 WHERE run = $1 AND consumed_seq IS NULL
            AND left(name, 5) = 'flow.'",
        &[&run, &i(marker.seq)],
    )
    .await?;
    tx.execute(
        "reopening a run",
        "WITH reopened AS (
            UPDATE runs SET status = 'running', next_seq = $2, owner = NULL, lease_until = NULL,
                ended = false, result = NULL, error = NULL, updated_ms = $3 WHERE id = $1
            RETURNING id)
         SELECT pg_notify($4, 'due:' || id) FROM reopened",
        &[&run, &i(marker.seq + 1), &i(now), &channel],
    )
    .await?;
    set_wake(tx, run).await?;
    existing(tx, run).await
}

/// Ends a run's generation and starts the next under its id: [`Store::continue_run`].
///
/// [`Store::continue_run`]: flowdag_store::Store::continue_run
pub(crate) async fn continue_run(tx: &mut Tx<'_>, lease: &Lease, next: ContinueRun) -> R<Lease> {
    let run = lease.run.as_str();
    let (summary, now) = lock_run(tx, run).await?;
    let check = Batch::new(lease, next.next_seq, next.lease);
    check.check_lease(&summary).map_err(Fail::Store)?;
    if summary.status.is_finished() {
        return Err(Fail::Store(StoreError::Finished {
            run: run.to_owned(),
        }));
    }
    if next.next_seq != summary.next_seq {
        return Err(Fail::Store(check.gap(summary.next_seq)));
    }
    const KEEP: [&str; 3] = [
        "UPDATE events SET run = $2 WHERE run = $1",
        "UPDATE outputs SET run = $2 WHERE run = $1",
        "UPDATE signals SET run = $2 WHERE run = $1 AND consumed_seq IS NOT NULL",
    ];
    const DROP: [&str; 3] = [
        "DELETE FROM events WHERE run = $1",
        "DELETE FROM outputs WHERE run = $1",
        "DELETE FROM signals WHERE run = $1 AND consumed_seq IS NOT NULL",
    ];
    match &next.archive {
        Some(archive) => {
            if read_run(tx, archive).await?.is_some() {
                return Err(Fail::Store(StoreError::Invalid {
                    why: format!(
                        "run `{run}` cannot keep its ended generation as `{archive}`: a run of that id exists"
                    ),
                }));
            }
            tx.execute(
                "keeping the ended generation of a run",
                "INSERT INTO runs (id, workflow, graph_hash, input, input_hash, options, status,
                    next_seq, version, owner, lease_until, wake_at, ended, result, error,
                    created_ms, updated_ms)
                 SELECT $2, workflow, graph_hash, input, input_hash, options, 'continued',
                    next_seq, version, NULL, NULL, NULL, true, $3, $4, created_ms, $5
                 FROM runs WHERE id = $1",
                &[&run, archive, &next.end.result, &next.end.error, &i(now)],
            )
            .await?;
            tx.execute(
                "keeping the ended generation of a run",
                "INSERT INTO nodes (run, node, name, label, fingerprint, preds, compensate, kind, policy)
                 SELECT $2, node, name, label, fingerprint, preds, compensate, kind, policy
                 FROM nodes WHERE run = $1",
                &[&run, archive],
            )
            .await?;
            for sql in KEEP {
                tx.execute(
                    "keeping the ended generation of a run",
                    sql,
                    &[&run, archive],
                )
                .await?;
            }
        }
        None => {
            for sql in DROP {
                tx.execute("dropping the ended generation of a run", sql, &[&run])
                    .await?;
            }
        }
    }
    for sql in [
        "DELETE FROM timers WHERE run = $1",
        "DELETE FROM waits WHERE run = $1",
        "DELETE FROM tasks WHERE run = $1",
    ] {
        tx.execute("starting the next generation of a run", sql, &[&run])
            .await?;
    }
    let version = summary.version + 1;
    let until = u(i(now).saturating_add(lease_ms(next.lease)));
    tx.execute(
        "starting the next generation of a run",
        "UPDATE runs SET input = $2, options = $3, status = 'running', next_seq = 0,
            version = $4, owner = $5, lease_until = $6, wake_at = NULL, ended = false,
            result = NULL, error = NULL, updated_ms = $7 WHERE id = $1",
        &[
            &run,
            &next.input,
            &next.options,
            &i(version),
            &lease.owner.as_str(),
            &i(until),
            &i(now),
        ],
    )
    .await?;
    apply_timers(tx, run, &next.timers, now).await?;
    set_wake(tx, run).await?;
    Ok(Lease {
        run: run.to_owned(),
        owner: lease.owner.clone(),
        version,
        until_ms: until,
    })
}

pub(crate) async fn delete_run(tx: &mut Tx<'_>, run: &str) -> R<()> {
    let (summary, _) = lock_run(tx, run).await?;
    if !summary.status.is_finished() {
        return Err(Fail::Store(StoreError::WrongStatus {
            run: run.to_owned(),
            status: summary.status,
            needs: "only a finished run can be deleted",
        }));
    }
    // Its other rows go with it (`ON DELETE CASCADE`).
    tx.execute("deleting a run", "DELETE FROM runs WHERE id = $1", &[&run])
        .await?;
    Ok(())
}

/// Writes a run's node rows in one statement; a node's predecessors travel as text (`{1,2}`),
/// since an array of arrays cannot be unnested row by row.
async fn insert_nodes(tx: &mut Tx<'_>, run: &str, rows: &[NodeRow]) -> R<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let nodes: Vec<i64> = rows.iter().map(|n| i64::from(n.node)).collect();
    let names: Vec<&str> = rows.iter().map(|n| n.name.as_str()).collect();
    let labels: Vec<&str> = rows.iter().map(|n| n.label.as_str()).collect();
    let prints: Vec<i64> = rows.iter().map(|n| i(n.fingerprint)).collect();
    let preds: Vec<String> = rows
        .iter()
        .map(|n| {
            let list: Vec<String> = n.preds.iter().map(u32::to_string).collect();
            format!("{{{}}}", list.join(","))
        })
        .collect();
    let compensate: Vec<&str> = rows.iter().map(|n| n.compensate.as_str()).collect();
    let kinds: Vec<&str> = rows.iter().map(|n| n.kind.as_str()).collect();
    let policies: Vec<&str> = rows.iter().map(|n| n.policy.as_str()).collect();
    tx.execute(
        "writing the nodes of a run",
        "INSERT INTO nodes (run, node, name, label, fingerprint, preds, compensate, kind, policy)
         SELECT $1, node, name, label, fingerprint, preds::bigint[], compensate, kind, policy
         FROM unnest($2::bigint[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::text[],
                     $8::text[], $9::text[])
            AS n (node, name, label, fingerprint, preds, compensate, kind, policy)",
        &[
            &run,
            &nodes,
            &names,
            &labels,
            &prints,
            &preds,
            &compensate,
            &kinds,
            &policies,
        ],
    )
    .await?;
    Ok(())
}
