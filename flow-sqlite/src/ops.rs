//! What each request of the [`Store`](flowdag_store::Store) trait does to the file. Every
//! function runs on the writer thread, inside the group's transaction and its own savepoint, so
//! an error leaves nothing of it behind.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flowdag_store::{
    Batch, Committed, ContinueRun, Created, DueTimer, Lease, Loaded, NewRun, NewSignal, NodeRow,
    Owner, RunData, RunEnd, RunFilter, RunStatus, RunSummary, SignalMode, SignalSent, StoreError,
    StoredEvent, StoredOutput, StoredPath, StoredSignal, StoredTimer, TimerChange, TimerKey,
    TimerKind, WaitChange,
};
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::error::sql_error;

/// Milliseconds since the Unix epoch by this process's clock: the store's clock (one process
/// owns the file at a time, so no two clocks meet in it).
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `now + after` in ms, saturating.
fn due_after(now_ms: u64, after: Duration) -> u64 {
    now_ms.saturating_add(u64::try_from(after.as_millis()).unwrap_or(u64::MAX))
}

/// The connection and the file's path, for errors.
pub(crate) struct Db<'a> {
    pub(crate) conn: &'a Connection,
    pub(crate) path: &'a Path,
}

/// `u64` to SQLite's `i64`, bit for bit (hashes use all 64 bits).
fn i(value: u64) -> i64 {
    value as i64
}

/// Back from SQLite's `i64`, bit for bit.
fn u(value: i64) -> u64 {
    value as u64
}

const SUMMARY: &str =
    "SELECT id, workflow, graph_hash, input_hash, status, next_seq, version, owner,
    lease_until, wake_at, created_ms, updated_ms FROM runs";

fn summary_row(row: &Row<'_>) -> rusqlite::Result<(RunSummary, String)> {
    let status: String = row.get(4)?;
    Ok((
        RunSummary {
            id: row.get(0)?,
            workflow: row.get(1)?,
            graph_hash: u(row.get(2)?),
            input_hash: u(row.get(3)?),
            status: RunStatus::Running,
            next_seq: u(row.get(5)?),
            version: u(row.get(6)?),
            owner: row.get(7)?,
            lease_until_ms: row.get::<_, Option<i64>>(8)?.map(u),
            wake_at_ms: row.get::<_, Option<i64>>(9)?.map(u),
            created_ms: u(row.get(10)?),
            updated_ms: u(row.get(11)?),
        },
        status,
    ))
}

impl Db<'_> {
    fn err(&self, doing: &str) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        let doing = doing.to_owned();
        move |e| sql_error(self.path, &doing, e)
    }

    fn corrupt(&self, why: String) -> StoreError {
        StoreError::Corrupt {
            path: self.path.to_owned(),
            why,
        }
    }

    fn with_status(
        &self,
        (mut run, status): (RunSummary, String),
    ) -> Result<RunSummary, StoreError> {
        run.status = status
            .parse()
            .map_err(|e: StoreError| self.corrupt(format!("run `{}`: {e}", run.id)))?;
        Ok(run)
    }

    fn summary(&self, run: &str) -> Result<Option<RunSummary>, StoreError> {
        let found = self
            .conn
            .prepare_cached(&format!("{SUMMARY} WHERE id = ?1"))
            .and_then(|mut stmt| stmt.query_row([run], summary_row).optional())
            .map_err(self.err("reading a run of"))?;
        found.map(|row| self.with_status(row)).transpose()
    }

    fn existing(&self, run: &str) -> Result<RunSummary, StoreError> {
        self.summary(run)?.ok_or_else(|| StoreError::NotFound {
            run: run.to_owned(),
        })
    }

    fn insert_events(&self, run: &str, events: &[StoredEvent], now: u64) -> Result<(), StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "INSERT INTO events (run, seq, format, node, node_name, path, attempt, kind, data, at_us, wall_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )
            .map_err(self.err("writing events to"))?;
        for event in events {
            stmt.execute(params![
                run,
                i(event.seq),
                event.format,
                event.node,
                event.node_name,
                event.path.as_ref().map(ToString::to_string),
                event.attempt,
                event.kind,
                event.data,
                i(event.at_us),
                i(now),
            ])
            .map_err(self.err("writing events to"))?;
        }
        Ok(())
    }

    fn read_events(&self, run: &str, from: u64, to: u64) -> Result<Vec<StoredEvent>, StoreError> {
        self.select_events(
            run,
            "SELECT seq, format, node, node_name, path, attempt, kind, data, at_us FROM events
             WHERE run = ?1 AND seq >= ?2 AND seq < ?3 ORDER BY seq",
            params![run, i(from), i(to)],
        )
    }

    /// The events of `run` itself, in order: not those of its nest instances.
    fn own_events(&self, run: &str) -> Result<Vec<StoredEvent>, StoreError> {
        self.select_events(
            run,
            "SELECT seq, format, node, node_name, path, attempt, kind, data, at_us FROM events
             INDEXED BY events_own WHERE run = ?1 AND path IS NULL ORDER BY seq",
            params![run],
        )
    }

    fn select_events(
        &self,
        run: &str,
        sql: &str,
        params: impl rusqlite::Params,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let rows = self
            .conn
            .prepare_cached(sql)
            .and_then(|mut stmt| {
                stmt.query_map(params, |row| {
                    Ok((
                        StoredEvent {
                            format: row.get(1)?,
                            seq: u(row.get(0)?),
                            node: row.get(2)?,
                            node_name: row.get(3)?,
                            path: None,
                            attempt: row.get(5)?,
                            kind: row.get(6)?,
                            data: row.get(7)?,
                            at_us: u(row.get(8)?),
                        },
                        row.get::<_, Option<String>>(4)?,
                    ))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(self.err("reading events of"))?;
        rows.into_iter()
            .map(|(mut event, path)| {
                if let Some(path) = path {
                    event.path = Some(path.parse::<StoredPath>().map_err(|e| {
                        self.corrupt(format!("event #{} of run `{run}`: {e}", event.seq))
                    })?);
                }
                Ok(event)
            })
            .collect()
    }

    fn apply_timers(&self, run: &str, changes: &[TimerChange], now: u64) -> Result<(), StoreError> {
        for change in changes {
            match change {
                TimerChange::Set { key, after } => self
                    .conn
                    .prepare_cached(
                        "INSERT OR REPLACE INTO timers (run, node, instance, kind, due_ms)
                         VALUES (?1, ?2, ?3, ?4, ?5)",
                    )
                    .and_then(|mut stmt| {
                        stmt.execute(params![
                            run,
                            timer_node(key),
                            key.instance,
                            key.kind.as_str(),
                            i(due_after(now, *after)),
                        ])
                    }),
                TimerChange::Clear { key } => self
                    .conn
                    .prepare_cached(
                        "DELETE FROM timers WHERE run = ?1 AND node = ?2 AND instance = ?3 AND kind = ?4",
                    )
                    .and_then(|mut stmt| {
                        stmt.execute(params![run, timer_node(key), key.instance, key.kind.as_str()])
                    }),
            }
            .map_err(self.err("writing timers to"))?;
        }
        Ok(())
    }

    /// Recomputes the run's wake time: its earliest timer, or the arrival of its first
    /// unconsumed signal that a step of the run waits for or that is a request (`flow.…`). A request that changes none of
    /// them (timers, signals, waits) leaves it as it is and need not call this (it is most of
    /// the cost of a small commit: SQLite prepares the statement again at each execution).
    fn set_wake(&self, run: &str) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "UPDATE runs SET wake_at = (SELECT min(at) FROM (
                    SELECT min(due_ms) AS at FROM timers WHERE run = ?1
                    UNION ALL
                    SELECT min(s.sent_ms) FROM signals s WHERE s.run = ?1
                        AND s.consumed_seq IS NULL
                        AND (substr(s.name, 1, 5) = 'flow.'
                            OR EXISTS (SELECT 1 FROM waits w WHERE w.run = ?1 AND w.name = s.name))))
                 WHERE id = ?1",
            )
            .and_then(|mut stmt| stmt.execute([run]))
            .map_err(self.err("updating the wake time in"))?;
        Ok(())
    }

    fn open_signals(&self, run: &str, after: u64) -> Result<Vec<StoredSignal>, StoreError> {
        let rows = self
            .conn
            .prepare_cached(
                "SELECT id, name, payload, mode, sent_ms FROM signals
                 WHERE run = ?1 AND id > ?2 AND consumed_seq IS NULL ORDER BY id",
            )
            .and_then(|mut stmt| {
                stmt.query_map(params![run, i(after)], |row| {
                    let mode: String = row.get(3)?;
                    Ok(StoredSignal {
                        id: u(row.get(0)?),
                        run: run.to_owned(),
                        name: row.get(1)?,
                        payload: row.get(2)?,
                        mode: if mode == "transient" {
                            SignalMode::Transient
                        } else {
                            SignalMode::Kept
                        },
                        sent_ms: u(row.get(4)?),
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(self.err("reading signals of"))?;
        Ok(rows)
    }
}

impl Db<'_> {
    /// The outputs of `run`, by node, then instance.
    fn outputs(&self, run: &str) -> Result<Vec<StoredOutput>, StoreError> {
        self.read_outputs(
            run,
            "SELECT node, instance, type_name, bytes FROM outputs WHERE run = ?1 ORDER BY node, instance",
        )
    }

    /// The outputs of `run` that a load reads: not the superseded ends (`Batch::superseded`).
    fn live_outputs(&self, run: &str) -> Result<Vec<StoredOutput>, StoreError> {
        self.read_outputs(
            run,
            "SELECT node, instance, type_name, bytes FROM outputs INDEXED BY outputs_live
             WHERE run = ?1 AND superseded = 0 ORDER BY node, instance",
        )
    }

    fn read_outputs(&self, run: &str, sql: &str) -> Result<Vec<StoredOutput>, StoreError> {
        self.conn
            .prepare_cached(sql)
            .and_then(|mut stmt| {
                stmt.query_map([run], |row| {
                    Ok(StoredOutput {
                        node: row.get(0)?,
                        instance: row.get(1)?,
                        type_name: row.get(2)?,
                        bytes: row.get(3)?,
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(self.err("reading the outputs of a run from"))
    }
}

fn timer_node(key: &TimerKey) -> i64 {
    key.node.map_or(-1, i64::from)
}

pub(crate) fn create_run(db: &Db<'_>, run: NewRun) -> Result<Created, StoreError> {
    if let Some(existing) = db.summary(&run.id)? {
        return Ok(Created::Exists(existing));
    }
    let lease = Lease {
        run: run.id.clone(),
        owner: run.owner.clone(),
        version: 1,
        until_ms: 0,
    };
    let mut check = Batch::new(&lease, 0, run.lease);
    check.events = run.events;
    check.check_numbering()?;
    let now = now_ms();
    let until = due_after(now, run.lease);
    let next_seq = check.events.len() as u64;
    db.conn
        .prepare_cached(
            "INSERT INTO runs (id, workflow, graph_hash, input, input_hash, options, status, next_seq,
                version, owner, lease_until, created_ms, updated_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'running', ?7, 1, ?8, ?9, ?10, ?10)",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                run.id,
                run.workflow,
                i(run.graph_hash),
                run.input,
                i(run.input_hash),
                run.options,
                i(next_seq),
                run.owner.as_str(),
                i(until),
                i(now),
            ])
        })
        .map_err(db.err("creating a run in"))?;
    insert_nodes(db, &run.id, &run.nodes)?;
    db.insert_events(&run.id, &check.events, now)?;
    db.apply_timers(&run.id, &run.timers, now)?;
    // A new run has no signals; without timers its wake time stays unset.
    if !run.timers.is_empty() {
        db.set_wake(&run.id)?;
    }
    Ok(Created::New {
        lease: Lease {
            until_ms: until,
            ..lease
        },
        next_seq,
    })
}

pub(crate) fn load_run(
    db: &Db<'_>,
    id: &str,
    owner: &Owner,
    lease: Duration,
) -> Result<Loaded, StoreError> {
    let now = now_ms();
    let run = db.existing(id)?;
    // A finished run's lease guards nothing: its result is read whoever held it last.
    if let (Some(holder), Some(until)) = (&run.owner, run.lease_until_ms)
        && !run.status.is_finished()
        && holder != owner.as_str()
        && until > now
    {
        return Err(StoreError::Busy {
            run: id.to_owned(),
            owner: holder.clone(),
            until_ms: until,
        });
    }
    let until = due_after(now, lease);
    db.conn
        .prepare_cached(
            "UPDATE runs SET version = version + 1, owner = ?2, lease_until = ?3, updated_ms = ?4
             WHERE id = ?1",
        )
        .and_then(|mut stmt| stmt.execute(params![id, owner.as_str(), i(until), i(now)]))
        .map_err(db.err("taking the lease of a run in"))?;
    let run = db.existing(id)?;
    let (input, options, ended, result, error) = db
        .conn
        .query_row(
            "SELECT input, options, ended, result, error FROM runs WHERE id = ?1",
            [id],
            |row| {
                Ok((
                    row.get::<_, Vec<u8>>(0)?,
                    row.get::<_, Vec<u8>>(1)?,
                    row.get::<_, bool>(2)?,
                    row.get::<_, Option<Vec<u8>>>(3)?,
                    row.get::<_, Option<String>>(4)?,
                ))
            },
        )
        .map_err(db.err("loading a run from"))?;
    let nodes = read_nodes(db, id)?;
    let outputs = db.live_outputs(id)?;
    let timers = db
        .conn
        .prepare_cached(
            "SELECT node, instance, kind, due_ms FROM timers WHERE run = ?1 ORDER BY node, instance, kind",
        )
        .and_then(|mut stmt| {
            stmt.query_map([id], |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, String>(2)?,
                    u(row.get(3)?),
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(db.err("loading the timers of a run from"))?
        .into_iter()
        .map(|(node, instance, kind, due_ms)| {
            Ok(StoredTimer {
                key: timer_key(db, node, instance, &kind)?,
                due_ms,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    let waits = db
        .conn
        .prepare_cached(
            "SELECT node, instance, name FROM waits WHERE run = ?1 ORDER BY node, instance",
        )
        .and_then(|mut stmt| {
            stmt.query_map([id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(db.err("loading the waits of a run from"))?;
    Ok(Loaded {
        lease: Lease {
            run: id.to_owned(),
            owner: owner.clone(),
            version: run.version,
            until_ms: until,
        },
        input,
        options,
        nodes,
        events: db.own_events(id)?,
        next_seq: run.next_seq,
        outputs,
        timers,
        waits,
        signals: db.open_signals(id, 0)?,
        tasks: Vec::new(),
        end: ended.then_some(RunEnd { result, error }),
        now_ms: now,
        run,
    })
}

fn timer_key(db: &Db<'_>, node: i64, instance: String, kind: &str) -> Result<TimerKey, StoreError> {
    Ok(TimerKey {
        node: u32::try_from(node).ok(),
        instance,
        kind: kind
            .parse::<TimerKind>()
            .map_err(|e| db.corrupt(e.to_string()))?,
    })
}

/// The query of [`list_runs`] for `filter` (its parameters: `?1` workflow, `?2` limit, `?3`
/// id, `?4` id text, `?5`/`?6` creation times, `?7`/`?8` the cursor).
fn list_sql(filter: &RunFilter) -> String {
    let mut sql = format!(
        "{SUMMARY} WHERE (?1 IS NULL OR workflow = ?1) {id}
           AND (?4 IS NULL OR instr(id, ?4) > 0)
           AND (?5 IS NULL OR created_ms >= ?5) AND (?6 IS NULL OR created_ms < ?6)
           {after}",
        // One run by its id: the primary key, where `?3 IS NULL OR ..` would scan.
        id = match filter.id {
            Some(_) => "AND id = ?3",
            None => "AND ?3 IS NULL",
        },
        // A row value, and only when there is a cursor: the index `runs_created` is then
        // searched from the cursor on, where `?7 IS NULL OR ..` would scan it from its end.
        after = match (filter.after.is_some(), filter.newest_first) {
            (false, _) => "AND ?7 IS NULL AND ?8 IS NULL",
            (true, false) => "AND (created_ms, id) > (?7, ?8)",
            (true, true) => "AND (created_ms, id) < (?7, ?8)",
        }
    );
    if !filter.statuses.is_empty() {
        let names: Vec<String> = filter
            .statuses
            .iter()
            .map(|s| format!("'{}'", s.as_str()))
            .collect();
        sql.push_str(&format!(" AND status IN ({})", names.join(",")));
    }
    sql.push_str(match filter.newest_first {
        false => " ORDER BY created_ms, id LIMIT ?2",
        true => " ORDER BY created_ms DESC, id DESC LIMIT ?2",
    });
    sql
}

pub(crate) fn list_runs(db: &Db<'_>, filter: &RunFilter) -> Result<Vec<RunSummary>, StoreError> {
    let sql = list_sql(filter);
    let limit = filter.limit.map_or(-1, i64::from);
    let rows = db
        .conn
        .prepare_cached(&sql)
        .and_then(|mut stmt| {
            let ms = |at: Option<u64>| at.map(|ms| i64::try_from(ms).unwrap_or(i64::MAX));
            let after = filter.after.as_ref();
            stmt.query_map(
                params![
                    filter.workflow,
                    limit,
                    filter.id,
                    filter.id_contains,
                    ms(filter.created_from_ms),
                    ms(filter.created_before_ms),
                    ms(after.map(|a| a.created_ms)),
                    after.map(|a| a.id.as_str()),
                ],
                summary_row,
            )?
            .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(db.err("listing the runs of"))?;
    rows.into_iter().map(|row| db.with_status(row)).collect()
}

/// The node rows of `run`, read without its lease; [`StoreError::NotFound`] when it does not
/// exist.
pub(crate) fn nodes(db: &Db<'_>, run: &str) -> Result<Vec<NodeRow>, StoreError> {
    db.existing(run)?;
    read_nodes(db, run)
}

/// The node rows of `run`, in order. A client may read a store of an older schema version,
/// whose rows have no kind and policy (version 1): those are then empty, as the migration
/// makes them.
fn read_nodes(db: &Db<'_>, id: &str) -> Result<Vec<NodeRow>, StoreError> {
    db.conn
        .prepare_cached("SELECT * FROM nodes WHERE run = ?1 ORDER BY node")
        .and_then(|mut stmt| {
            let at = |name: &str| stmt.column_index(name);
            let (node, name, label, fingerprint, preds, compensate) = (
                at("node")?,
                at("name")?,
                at("label")?,
                at("fingerprint")?,
                at("preds")?,
                at("compensate")?,
            );
            let (kind, policy) = (at("kind").ok(), at("policy").ok());
            stmt.query_map([id], |row| {
                let text = |column: Option<usize>| -> rusqlite::Result<String> {
                    column.map_or(Ok(String::new()), |c| row.get(c))
                };
                Ok((
                    NodeRow {
                        node: row.get(node)?,
                        name: row.get(name)?,
                        label: row.get(label)?,
                        fingerprint: u(row.get(fingerprint)?),
                        preds: Vec::new(),
                        compensate: row.get(compensate)?,
                        kind: text(kind)?,
                        policy: text(policy)?,
                    },
                    row.get::<_, String>(preds)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(db.err("loading the nodes of a run from"))?
        .into_iter()
        .map(|(mut node, preds)| {
            node.preds = preds
                .split(',')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    p.parse::<u32>()
                        .map_err(|_| db.corrupt(format!("run `{id}`: predecessors `{preds}`")))
                })
                .collect::<Result<_, _>>()?;
            Ok(node)
        })
        .collect()
}

pub(crate) fn events(db: &Db<'_>, run: &str, from: u64) -> Result<Vec<StoredEvent>, StoreError> {
    let summary = db.existing(run)?;
    db.read_events(run, from, summary.next_seq)
}

pub(crate) fn run_data(db: &Db<'_>, run: &str) -> Result<RunData, StoreError> {
    let found = db
        .conn
        .prepare_cached("SELECT input, ended, result, error, options FROM runs WHERE id = ?1")
        .and_then(|mut stmt| {
            stmt.query_row([run], |row| {
                Ok((
                    row.get::<_, Vec<u8>>(0)?,
                    row.get::<_, bool>(1)?,
                    row.get::<_, Option<Vec<u8>>>(2)?,
                    row.get::<_, Option<String>>(3)?,
                    row.get::<_, Vec<u8>>(4)?,
                ))
            })
            .optional()
        })
        .map_err(db.err("reading the data of a run in"))?;
    let Some((input, ended, result, error, options)) = found else {
        return Err(StoreError::NotFound {
            run: run.to_owned(),
        });
    };
    Ok(RunData {
        input,
        options,
        outputs: db.outputs(run)?,
        end: ended.then_some(RunEnd { result, error }),
    })
}

/// Gives the run's rows that name its own nodes by index the nodes' new indices
/// ([`Batch::renumber`]): each moved node first to `-2 - new` (a run-level timer has -1, no
/// node a negative index), then all of them to `new`, so that no step of the move meets a
/// row it would collide with.
fn renumber(db: &Db<'_>, run: &str, map: &[(u32, u32)]) -> Result<(), StoreError> {
    for (table, own) in [
        ("events", " AND path IS NULL"),
        // Not the ends of instances nested deeper (`ship[3]/pack@2`): their node is the
        // nest body's.
        ("outputs", " AND instance NOT LIKE '%/%'"),
        ("timers", ""),
        ("waits", ""),
    ] {
        for &(old, new) in map {
            db.conn
                .prepare_cached(&format!(
                    "UPDATE {table} SET node = ?3 WHERE run = ?1 AND node = ?2{own}"
                ))
                .and_then(|mut stmt| stmt.execute(params![run, old, -2 - i64::from(new)]))
                .map_err(db.err("renumbering the steps of"))?;
        }
        db.conn
            .prepare_cached(&format!(
                "UPDATE {table} SET node = -2 - node WHERE run = ?1 AND node <= -2"
            ))
            .and_then(|mut stmt| stmt.execute(params![run]))
            .map_err(db.err("renumbering the steps of"))?;
    }
    Ok(())
}

pub(crate) fn commit(db: &Db<'_>, batch: Batch) -> Result<Committed, StoreError> {
    let run = db.existing(&batch.run)?;
    if !batch.tasks.is_empty() {
        // Tasks are for runs shared by worker processes; this store serves one process.
        return Err(StoreError::Unsupported { what: "tasks" });
    }
    batch.check_numbering()?;
    let next = run.next_seq;
    if !batch.events.is_empty() && batch.first_seq < next {
        let stored = db.read_events(&batch.run, batch.first_seq, batch.end_seq().min(next))?;
        let first = batch.first_seq;
        let at = |seq: u64| stored.get(usize::try_from(seq - first).unwrap_or(usize::MAX));
        if let Some(done) = batch.replayed(next, at)? {
            return Ok(done);
        }
    }
    batch.check_lease(&run)?;
    if run.status.is_finished() {
        return Err(StoreError::Finished { run: batch.run });
    }
    if batch.first_seq != next {
        return Err(batch.gap(next));
    }
    let last_seq = batch.end_seq().saturating_sub(1);
    for id in &batch.consumed {
        let taken = db
            .conn
            .prepare_cached(
                "UPDATE signals SET consumed_seq = ?3 WHERE id = ?1 AND run = ?2 AND consumed_seq IS NULL",
            )
            .and_then(|mut stmt| stmt.execute(params![i(*id), batch.run, i(last_seq)]))
            .map_err(db.err("consuming a signal in"))?;
        if taken == 0 {
            return Err(StoreError::SignalTaken {
                run: batch.run,
                signal: *id,
            });
        }
    }
    let now = now_ms();
    if !batch.renumber.is_empty() {
        renumber(db, &batch.run, &batch.renumber)?;
    }
    db.insert_events(&batch.run, &batch.events, now)?;
    for output in &batch.outputs {
        db.conn
            .prepare_cached(
                "INSERT OR REPLACE INTO outputs (run, node, instance, type_name, bytes)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    batch.run,
                    output.node,
                    output.instance,
                    output.type_name,
                    output.bytes
                ])
            })
            .map_err(db.err("writing outputs to"))?;
    }
    for (node, instance) in &batch.superseded {
        db.conn
            .prepare_cached(
                "UPDATE outputs SET superseded = 1 WHERE run = ?1 AND node = ?2 AND instance = ?3",
            )
            .and_then(|mut stmt| stmt.execute(params![batch.run, node, instance]))
            .map_err(db.err("marking superseded outputs in"))?;
    }
    db.apply_timers(&batch.run, &batch.timers, now)?;
    for change in &batch.waits {
        match change {
            WaitChange::Open {
                node,
                instance,
                name,
            } => db
                .conn
                .prepare_cached(
                    "INSERT OR REPLACE INTO waits (run, node, instance, name) VALUES (?1, ?2, ?3, ?4)",
                )
                .and_then(|mut stmt| stmt.execute(params![batch.run, node, instance, name])),
            WaitChange::Close { node, instance } => db
                .conn
                .prepare_cached("DELETE FROM waits WHERE run = ?1 AND node = ?2 AND instance = ?3")
                .and_then(|mut stmt| stmt.execute(params![batch.run, node, instance])),
        }
        .map_err(db.err("writing waits to"))?;
    }
    if let Some((hash, nodes)) = &batch.graph {
        replace_graph(db, &batch.run, *hash, nodes)?;
    }
    let status = batch.status.unwrap_or(run.status);
    let end_seq = batch.end_seq();
    let until = due_after(now, batch.lease);
    match &batch.end {
        None => db
            .conn
            .prepare_cached(
                "UPDATE runs SET status = ?2, next_seq = ?3, lease_until = ?4, updated_ms = ?5 WHERE id = ?1",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![batch.run, status.as_str(), i(end_seq), i(until), i(now)])
            }),
        Some(end) => db
            .conn
            .prepare_cached(
                "UPDATE runs SET status = ?2, next_seq = ?3, lease_until = ?4, updated_ms = ?5,
                    ended = 1, result = ?6, error = ?7 WHERE id = ?1",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    batch.run,
                    status.as_str(),
                    i(end_seq),
                    i(until),
                    i(now),
                    end.result,
                    end.error
                ])
            }),
    }
    .map_err(db.err("updating a run in"))?;
    // The wake time depends on the run's timers, its unconsumed signals and the waits that
    // make a signal count (a wait opened for a signal already stored makes the run due).
    if !batch.timers.is_empty() || !batch.consumed.is_empty() || !batch.waits.is_empty() {
        db.set_wake(&batch.run)?;
    }
    Ok(Committed::Applied { next_seq: end_seq })
}

pub(crate) fn due_timers(
    db: &Db<'_>,
    horizon: Duration,
    limit: u32,
) -> Result<Vec<DueTimer>, StoreError> {
    let until = due_after(now_ms(), horizon);
    let rows = db
        .conn
        .prepare_cached(
            "SELECT t.run, t.node, t.instance, t.kind, t.due_ms FROM timers t JOIN runs r ON r.id = t.run
             WHERE t.due_ms <= ?1 AND r.status NOT IN ('succeeded', 'failed', 'cancelled')
             ORDER BY t.due_ms, t.run, t.node, t.instance, t.kind LIMIT ?2",
        )
        .and_then(|mut stmt| {
            stmt.query_map(params![i(until), limit], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, String>(3)?,
                    u(row.get(4)?),
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(db.err("reading the due timers of"))?;
    rows.into_iter()
        .map(|(run, node, instance, kind, due_ms)| {
            Ok(DueTimer {
                run,
                key: timer_key(db, node, instance, &kind)?,
                due_ms,
            })
        })
        .collect()
}

pub(crate) fn send_signal(db: &Db<'_>, signal: NewSignal) -> Result<SignalSent, StoreError> {
    let run = db.existing(&signal.run)?;
    if run.status.is_finished() {
        return Err(StoreError::Finished { run: signal.run });
    }
    if signal.mode == SignalMode::Transient {
        let waited = db
            .conn
            .prepare_cached("SELECT 1 FROM waits WHERE run = ?1 AND name = ?2 LIMIT 1")
            .and_then(|mut stmt| stmt.exists(params![signal.run, signal.name]))
            .map_err(db.err("reading the waits of"))?;
        if !waited {
            return Ok(SignalSent::Dropped);
        }
    }
    db.conn
        .prepare_cached(
            "INSERT INTO signals (run, name, payload, mode, sent_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                signal.run,
                signal.name,
                signal.payload,
                signal.mode.as_str(),
                i(now_ms())
            ])
        })
        .map_err(db.err("storing a signal in"))?;
    let id = u(db.conn.last_insert_rowid());
    db.set_wake(&signal.run)?;
    Ok(SignalSent::Stored { id })
}

pub(crate) fn signals(db: &Db<'_>, run: &str, after: u64) -> Result<Vec<StoredSignal>, StoreError> {
    db.existing(run)?;
    db.open_signals(run, after)
}

pub(crate) fn heartbeat(
    db: &Db<'_>,
    owner: &Owner,
    held: &[Lease],
    lease: Duration,
) -> Result<Vec<Lease>, StoreError> {
    let until = due_after(now_ms(), lease);
    let mut lost = Vec::new();
    for each in held {
        let kept = db
            .conn
            .prepare_cached(
                "UPDATE runs SET lease_until = ?4 WHERE id = ?1 AND owner = ?2 AND version = ?3",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![each.run, owner.as_str(), i(each.version), i(until)])
            })
            .map_err(db.err("extending leases in"))?;
        if kept == 0 {
            lost.push(each.clone());
        }
    }
    Ok(lost)
}

pub(crate) fn release(db: &Db<'_>, owner: &Owner, held: &[Lease]) -> Result<(), StoreError> {
    for each in held {
        db.conn
            .prepare_cached(
                "UPDATE runs SET owner = NULL, lease_until = NULL
                 WHERE id = ?1 AND owner = ?2 AND version = ?3",
            )
            .and_then(|mut stmt| stmt.execute(params![each.run, owner.as_str(), i(each.version)]))
            .map_err(db.err("releasing leases in"))?;
    }
    Ok(())
}

pub(crate) fn reopen(
    db: &Db<'_>,
    run: &str,
    marker: StoredEvent,
) -> Result<RunSummary, StoreError> {
    let summary = db.existing(run)?;
    if !matches!(
        summary.status,
        RunStatus::Failed | RunStatus::Cancelled | RunStatus::Succeeded
    ) {
        return Err(StoreError::WrongStatus {
            run: run.to_owned(),
            status: summary.status,
            needs: flowdag_store::REOPENS,
        });
    }
    if marker.seq != summary.next_seq {
        return Err(StoreError::Conflict {
            run: run.to_owned(),
            expected: summary.next_seq,
            found: marker.seq,
            why: "the journal changed since it was read".to_owned(),
        });
    }
    let now = now_ms();
    db.insert_events(run, std::slice::from_ref(&marker), now)?;
    // Requests left from before (never carried out) would stop the redriven run at once.
    db.conn
        .prepare_cached(
            "UPDATE signals SET consumed_seq = ?2 WHERE run = ?1 AND consumed_seq IS NULL
                AND substr(name, 1, 5) = 'flow.'",
        )
        .and_then(|mut stmt| stmt.execute(params![run, i(marker.seq)]))
        .map_err(db.err("reopening a run in"))?;
    db.conn
        .prepare_cached(
            "UPDATE runs SET status = 'running', next_seq = ?2, owner = NULL, lease_until = NULL,
                ended = 0, result = NULL, error = NULL, updated_ms = ?3 WHERE id = ?1",
        )
        .and_then(|mut stmt| stmt.execute(params![run, i(marker.seq + 1), i(now)]))
        .map_err(db.err("reopening a run in"))?;
    db.set_wake(run)?;
    db.existing(run)
}

pub(crate) fn delete_run(db: &Db<'_>, run: &str) -> Result<(), StoreError> {
    let summary = db.existing(run)?;
    if !summary.status.is_finished() {
        return Err(StoreError::WrongStatus {
            run: run.to_owned(),
            status: summary.status,
            needs: "only a finished run can be deleted",
        });
    }
    for table in ["events", "nodes", "outputs", "timers", "signals", "waits"] {
        db.conn
            .prepare_cached(&format!("DELETE FROM {table} WHERE run = ?1"))
            .and_then(|mut stmt| stmt.execute([run]))
            .map_err(db.err("deleting a run from"))?;
    }
    db.conn
        .prepare_cached("DELETE FROM runs WHERE id = ?1")
        .and_then(|mut stmt| stmt.execute([run]))
        .map_err(db.err("deleting a run from"))?;
    Ok(())
}

/// Ends a run's generation and starts the next under its id: [`Store::continue_run`].
///
/// [`Store::continue_run`]: flowdag_store::Store::continue_run
pub(crate) fn continue_run(
    db: &Db<'_>,
    lease: &Lease,
    next: ContinueRun,
) -> Result<Lease, StoreError> {
    let run = lease.run.as_str();
    let summary = db.existing(run)?;
    let check = Batch::new(lease, next.next_seq, next.lease);
    check.check_lease(&summary)?;
    if summary.status.is_finished() {
        return Err(StoreError::Finished {
            run: run.to_owned(),
        });
    }
    if next.next_seq != summary.next_seq {
        return Err(check.gap(summary.next_seq));
    }
    let now = now_ms();
    match &next.archive {
        Some(archive) => {
            if db.existing(archive).is_ok() {
                return Err(StoreError::Invalid {
                    why: format!(
                        "run `{run}` cannot keep its ended generation as `{archive}`: a run of that id exists"
                    ),
                });
            }
            db.conn
                .prepare_cached(
                    "INSERT INTO runs (id, workflow, graph_hash, input, input_hash, options, status,
                        next_seq, version, owner, lease_until, wake_at, ended, result, error,
                        created_ms, updated_ms)
                     SELECT ?2, workflow, graph_hash, input, input_hash, options, 'continued',
                        next_seq, version, NULL, NULL, NULL, 1, ?3, ?4, created_ms, ?5
                     FROM runs WHERE id = ?1",
                )
                .and_then(|mut stmt| {
                    stmt.execute(params![
                        run,
                        archive,
                        next.end.result,
                        next.end.error,
                        i(now)
                    ])
                })
                .and_then(|_| {
                    db.conn
                        .prepare_cached(
                            "INSERT INTO nodes (run, node, name, label, fingerprint, preds, compensate, kind, policy)
                             SELECT ?2, node, name, label, fingerprint, preds, compensate, kind, policy
                             FROM nodes WHERE run = ?1",
                        )
                        .and_then(|mut stmt| stmt.execute(params![run, archive]))
                })
                .map_err(db.err("keeping the ended generation of a run in"))?;
            for table in ["events", "outputs"] {
                db.conn
                    .prepare_cached(&format!("UPDATE {table} SET run = ?2 WHERE run = ?1"))
                    .and_then(|mut stmt| stmt.execute(params![run, archive]))
                    .map_err(db.err("keeping the ended generation of a run in"))?;
            }
            db.conn
                .prepare_cached(
                    "UPDATE signals SET run = ?2 WHERE run = ?1 AND consumed_seq IS NOT NULL",
                )
                .and_then(|mut stmt| stmt.execute(params![run, archive]))
                .map_err(db.err("keeping the ended generation of a run in"))?;
        }
        None => {
            for sql in [
                "DELETE FROM events WHERE run = ?1",
                "DELETE FROM outputs WHERE run = ?1",
                "DELETE FROM signals WHERE run = ?1 AND consumed_seq IS NOT NULL",
            ] {
                db.conn
                    .prepare_cached(sql)
                    .and_then(|mut stmt| stmt.execute([run]))
                    .map_err(db.err("dropping the ended generation of a run in"))?;
            }
        }
    }
    for sql in [
        "DELETE FROM timers WHERE run = ?1",
        "DELETE FROM waits WHERE run = ?1",
    ] {
        db.conn
            .prepare_cached(sql)
            .and_then(|mut stmt| stmt.execute([run]))
            .map_err(db.err("starting the next generation of a run in"))?;
    }
    let version = summary.version + 1;
    let until = due_after(now, next.lease);
    db.conn
        .prepare_cached(
            "UPDATE runs SET input = ?2, options = ?3, status = 'running', next_seq = 0,
                version = ?4, owner = ?5, lease_until = ?6, wake_at = NULL, ended = 0,
                result = NULL, error = NULL, updated_ms = ?7 WHERE id = ?1",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                run,
                next.input,
                next.options,
                i(version),
                lease.owner.as_str(),
                i(until),
                i(now)
            ])
        })
        .map_err(db.err("starting the next generation of a run in"))?;
    db.apply_timers(run, &next.timers, now)?;
    db.set_wake(run)?;
    Ok(Lease {
        run: run.to_owned(),
        owner: lease.owner.clone(),
        version,
        until_ms: until,
    })
}

/// Replaces a run's graph hash and node rows (a compatible change adopted by its commit).
fn replace_graph(db: &Db<'_>, run: &str, hash: u64, nodes: &[NodeRow]) -> Result<(), StoreError> {
    db.conn
        .prepare_cached("UPDATE runs SET graph_hash = ?2 WHERE id = ?1")
        .and_then(|mut stmt| stmt.execute(params![run, i(hash)]))
        .and_then(|_| {
            db.conn
                .prepare_cached("DELETE FROM nodes WHERE run = ?1")
                .and_then(|mut stmt| stmt.execute([run]))
        })
        .map_err(db.err("replacing the graph of a run in"))?;
    insert_nodes(db, run, nodes)
}

/// Writes a run's node rows.
fn insert_nodes(db: &Db<'_>, run: &str, nodes: &[NodeRow]) -> Result<(), StoreError> {
    for node in nodes {
        let preds = node
            .preds
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        db.conn
            .prepare_cached(
                "INSERT INTO nodes (run, node, name, label, fingerprint, preds, compensate, kind, policy)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    run,
                    node.node,
                    node.name,
                    node.label,
                    i(node.fingerprint),
                    preds,
                    node.compensate,
                    node.kind,
                    node.policy
                ])
            })
            .map_err(db.err("writing the nodes of a run in"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowdag_store::RunCursor;

    /// Every page of the list, in both orders, with a cursor or without, is read from the
    /// index `runs_created` (searched from the cursor, never scanned from its end): a page
    /// deep in 100,000 runs costs what the first does.
    #[test]
    fn a_page_of_runs_is_read_from_its_cursor_in_the_index() {
        let conn = rusqlite::Connection::open_in_memory().expect("a database");
        conn.execute_batch(crate::schema::SCHEMA)
            .expect("the schema");
        for newest_first in [false, true] {
            for after in [
                None,
                Some(RunCursor {
                    created_ms: 5,
                    id: "r".into(),
                }),
            ] {
                let filter = RunFilter {
                    newest_first,
                    after: after.clone(),
                    limit: Some(50),
                    ..RunFilter::default()
                };
                let sql = format!("EXPLAIN QUERY PLAN {}", list_sql(&filter));
                let plan: Vec<String> = conn
                    .prepare(&sql)
                    .and_then(|mut stmt| {
                        stmt.query_map(
                            rusqlite::params![
                                None::<String>,
                                50,
                                None::<String>,
                                None::<String>,
                                None::<i64>,
                                None::<i64>,
                                after.as_ref().map(|a| a.created_ms as i64),
                                after.as_ref().map(|a| a.id.clone())
                            ],
                            |row| row.get::<_, String>(3),
                        )?
                        .collect()
                    })
                    .expect("a plan");
                let plan = plan.join("; ");
                assert!(plan.contains("runs_created"), "{plan}");
                let one = RunFilter {
                    id: Some("r".into()),
                    ..RunFilter::default()
                };
                let by_id = format!("EXPLAIN QUERY PLAN {}", list_sql(&one));
                let by_id: String = conn
                    .query_row(
                        &by_id,
                        rusqlite::params![
                            None::<String>,
                            -1,
                            "r",
                            None::<String>,
                            None::<i64>,
                            None::<i64>,
                            None::<i64>,
                            None::<String>
                        ],
                        |row| row.get(3),
                    )
                    .expect("a plan");
                assert!(
                    by_id.contains("PRIMARY KEY") || by_id.contains("autoindex"),
                    "one run by its key: {by_id}"
                );
                assert!(!plan.contains("TEMP B-TREE"), "no sort: {plan}");
                if after.is_some() {
                    assert!(plan.starts_with("SEARCH"), "from the cursor: {plan}");
                }
            }
        }
    }
}
