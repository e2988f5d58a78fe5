//! The writer thread: the one owner of the connection. It takes every request queued, runs them
//! in one transaction (group commit: batches of many runs, one disk flush), each in a savepoint
//! of its own so that a refused request leaves nothing behind (a request alone in its
//! transaction needs none: the transaction is its savepoint), and answers each after `COMMIT`.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};

use flowdag_store::StoreError;
use rusqlite::Connection;

use crate::error::sql_error;
use crate::ops::Db;

/// One request: run on the writer thread inside the group's transaction, or refused without
/// running when the transaction cannot begin.
pub(crate) trait Request: Send {
    /// Does the work; returns whether it succeeded and how to answer once the transaction's
    /// fate is known (`Some(error)`: the commit failed, so a success must not be reported).
    fn run(self: Box<Self>, db: &Db<'_>) -> (bool, Answer);
    /// Answers `error` without doing anything.
    fn refuse(self: Box<Self>, error: StoreError);
}

/// Sends a request's answer, given the group's commit error, if any.
pub(crate) type Answer = Box<dyn FnOnce(Option<&StoreError>) + Send>;

/// A queued request.
pub(crate) type Job = Box<dyn Request>;

/// Counters of the writer, for tests and benches: [`crate::SqliteStore::stats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) transactions: AtomicU64,
    pub(crate) requests: AtomicU64,
}

/// Runs until every sender is gone, then closes the connection. A `read_only` store's
/// transactions are deferred: a read-only connection may not begin an immediate one, and it
/// never writes.
pub(crate) fn run(
    conn: Connection,
    path: PathBuf,
    jobs: Receiver<Job>,
    max_group: usize,
    counters: Arc<Counters>,
    read_only: bool,
) {
    let begin = if read_only {
        "BEGIN DEFERRED"
    } else {
        "BEGIN IMMEDIATE"
    };
    let db = Db {
        conn: &conn,
        path: &path,
    };
    let mut group: Vec<Job> = Vec::with_capacity(max_group);
    let mut answers: Vec<(bool, Answer)> = Vec::with_capacity(max_group);
    while let Ok(first) = jobs.recv() {
        group.push(first);
        while group.len() < max_group {
            match jobs.try_recv() {
                Ok(job) => group.push(job),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        counters.transactions.fetch_add(1, Ordering::Relaxed);
        counters
            .requests
            .fetch_add(group.len() as u64, Ordering::Relaxed);
        let begun = conn
            .execute_batch(begin)
            .map_err(|e| sql_error(&path, "beginning a transaction on", e));
        if let Err(error) = begun {
            for job in group.drain(..) {
                job.refuse(error.clone());
            }
            continue;
        }
        let committed = if group.len() == 1
            && let Some(job) = group.pop()
        {
            // Alone in its transaction, a request needs no savepoint: one that is refused
            // rolls the transaction back, which leaves nothing of it as the savepoint would
            // (and spares two statements per commit of a run committing alone).
            let (ok, answer) = job.run(&db);
            answers.push((ok, answer));
            if ok {
                conn.execute_batch("COMMIT")
            } else {
                conn.execute_batch("ROLLBACK")
            }
        } else {
            for job in group.drain(..) {
                answers.push(in_savepoint(&db, job));
            }
            conn.execute_batch("COMMIT")
        }
        .map_err(|e| sql_error(&path, "committing to", e));
        let failed = committed.err();
        if failed.is_some() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        for (_, answer) in answers.drain(..) {
            answer(failed.as_ref());
        }
    }
}

fn in_savepoint(db: &Db<'_>, job: Job) -> (bool, Answer) {
    if let Err(e) = db.conn.execute_batch("SAVEPOINT request") {
        job.refuse(sql_error(db.path, "opening a savepoint in", e));
        return (false, Box::new(|_| {}));
    }
    let (ok, answer) = job.run(db);
    let end = if ok {
        "RELEASE request"
    } else {
        "ROLLBACK TO request; RELEASE request"
    };
    match db.conn.execute_batch(end) {
        Ok(()) => (ok, answer),
        Err(e) => {
            let error = sql_error(db.path, "closing a savepoint in", e);
            (false, Box::new(move |_| answer(Some(&error))))
        }
    }
}
