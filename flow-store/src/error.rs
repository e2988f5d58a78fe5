//! `StoreError`: why a store refused or failed a request.

use std::error::Error;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

/// Why a [`Store`](super::Store) refused or failed a request. Every variant names what it is
/// about (the run, the file, the owner); none loses data: a refused request wrote nothing.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum StoreError {
    /// No run of that id.
    NotFound {
        /// The id asked for.
        run: String,
    },
    /// Another owner holds the run's lease and it has not expired.
    Busy {
        /// The run.
        run: String,
        /// Who holds it.
        owner: String,
        /// Until when, in ms since the Unix epoch.
        until_ms: u64,
    },
    /// The caller's lease is gone: the run was taken by `holder` (or released), so this
    /// caller must stop running it.
    LeaseLost {
        /// The run.
        run: String,
        /// Who holds it now, if anyone.
        holder: Option<String>,
        /// The lease version the caller had.
        had: u64,
        /// The run's version now.
        now: u64,
    },
    /// The batch does not follow the run's journal: it starts at `found` where the journal's
    /// next event is `expected`, or repeats stored events with other content.
    Conflict {
        /// The run.
        run: String,
        /// The run's next sequence number.
        expected: u64,
        /// The batch's first.
        found: u64,
        /// What differs.
        why: String,
    },
    /// The run has ended: nothing more is written to it.
    Finished {
        /// The run.
        run: String,
    },
    /// The run's status does not allow what was asked: only a failed or cancelled run is
    /// redriven ([`Store::reopen`](super::Store::reopen)), only a finished run is deleted
    /// ([`Store::delete_run`](super::Store::delete_run)).
    WrongStatus {
        /// The run.
        run: String,
        /// Its status.
        status: super::RunStatus,
        /// What was asked and which statuses allow it (`"only a failed or cancelled run can be
        /// redriven"`).
        needs: &'static str,
    },
    /// A batch consumes a signal that is not open (consumed already, or another run's).
    SignalTaken {
        /// The run.
        run: String,
        /// The signal's id.
        signal: u64,
    },
    /// The request itself is malformed (a gap in a batch's numbering, an unknown status).
    Invalid {
        /// What is wrong.
        why: String,
    },
    /// The store's file is held by another process (or another store of this one).
    Locked {
        /// The file.
        path: PathBuf,
        /// Who holds it, as the holder wrote it (`host:pid:…`), if known.
        holder: Option<String>,
    },
    /// The file is a database of another application, or not a store of flow.
    Foreign {
        /// The file.
        path: PathBuf,
        /// How it was told apart.
        why: String,
    },
    /// The file is damaged or is not a database.
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What the database engine said.
        why: String,
    },
    /// The disk (or the store's size limit) is full: the request wrote nothing.
    Full {
        /// The file.
        path: PathBuf,
    },
    /// The store was written by a newer flow whose schema this one does not know.
    SchemaVersion {
        /// The file.
        path: PathBuf,
        /// The schema version found.
        found: u32,
        /// The newest this flow knows.
        known: u32,
    },
    /// The store is closed (its writer stopped); nothing was written.
    Closed,
    /// The database cannot be reached (refused, reset, timed out); nothing was written, or the
    /// request is idempotent and may be sent again. Workers retry with backoff.
    Unreachable {
        /// Where the store is (`"127.0.0.1:5432/flow"`, no password).
        at: String,
        /// What failed.
        why: String,
    },
    /// The store does not offer what was asked (a store of one process has
    /// no tasks for other processes).
    Unsupported {
        /// What was asked (`"claim_tasks"`).
        what: &'static str,
    },
    /// Any other failure of the storage, with what was being done.
    Io {
        /// What the store was doing (`"committing a batch of run order-42"`).
        context: String,
        /// The underlying error.
        source: Arc<dyn Error + Send + Sync>,
    },
}

impl StoreError {
    /// An [`StoreError::Io`] error.
    pub fn io(context: impl Into<String>, source: impl Error + Send + Sync + 'static) -> Self {
        StoreError::Io {
            context: context.into(),
            source: Arc::new(source),
        }
    }

    /// Whether the same request may succeed later without anyone changing anything (a busy
    /// run, a lock held by another process, a full disk once space is freed).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            StoreError::Busy { .. }
                | StoreError::Locked { .. }
                | StoreError::Full { .. }
                | StoreError::Unreachable { .. }
        )
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::NotFound { run } => write!(f, "no run `{run}` in the store"),
            StoreError::Busy {
                run,
                owner,
                until_ms,
            } => write!(
                f,
                "run `{run}` is held by `{owner}` (its lease runs until {})",
                utc(*until_ms)
            ),
            StoreError::LeaseLost {
                run,
                holder,
                had,
                now,
            } => {
                write!(
                    f,
                    "the lease on run `{run}` was lost (version {had}, now {now}"
                )?;
                match holder {
                    Some(holder) => write!(f, ", held by `{holder}`)"),
                    None => f.write_str(", released)"),
                }
            }
            StoreError::Conflict {
                run,
                expected,
                found,
                why,
            } => write!(
                f,
                "batch for run `{run}` conflicts with its journal: it starts at event #{found}, the journal's next is #{expected}: {why}"
            ),
            StoreError::Finished { run } => write!(f, "run `{run}` has finished"),
            StoreError::WrongStatus { run, status, needs } => {
                write!(f, "run `{run}` is {status}: {needs}")
            }
            StoreError::SignalTaken { run, signal } => {
                write!(f, "signal {signal} is not open for run `{run}`")
            }
            StoreError::Invalid { why } => write!(f, "invalid request: {why}"),
            StoreError::Locked { path, holder } => {
                write!(f, "the store `{}` is locked", path.display())?;
                match holder {
                    Some(holder) => write!(f, " by `{holder}`"),
                    None => f.write_str(" by another process"),
                }
            }
            StoreError::Foreign { path, why } => {
                write!(f, "`{}` is not a store of flow: {why}", path.display())
            }
            StoreError::Corrupt { path, why } => {
                write!(f, "the store `{}` is damaged: {why}", path.display())
            }
            StoreError::Full { path } => write!(
                f,
                "the store `{}` is full (disk or size limit); nothing was written",
                path.display()
            ),
            StoreError::SchemaVersion { path, found, known } => write!(
                f,
                "the store `{}` has schema version {found}; this flow knows up to {known}: upgrade flow",
                path.display()
            ),
            StoreError::Closed => f.write_str("the store is closed"),
            StoreError::Unreachable { at, why } => {
                write!(f, "the store at `{at}` cannot be reached: {why}")
            }
            StoreError::Unsupported { what } => {
                write!(f, "this store does not support `{what}`")
            }
            StoreError::Io { context, source } => write!(f, "{context}: {source}"),
        }
    }
}

impl Error for StoreError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            StoreError::Io { source, .. } => Some(&**source),
            _ => None,
        }
    }
}

/// Equal variants with equal fields; two `Io` errors are equal when their context and their
/// sources' messages are.
impl PartialEq for StoreError {
    fn eq(&self, other: &Self) -> bool {
        use StoreError::*;
        match (self, other) {
            (NotFound { run: a }, NotFound { run: b }) => a == b,
            (
                Busy {
                    run: a,
                    owner: b,
                    until_ms: c,
                },
                Busy {
                    run: x,
                    owner: y,
                    until_ms: z,
                },
            ) => (a, b, c) == (x, y, z),
            (
                LeaseLost {
                    run: a,
                    holder: b,
                    had: c,
                    now: d,
                },
                LeaseLost {
                    run: w,
                    holder: x,
                    had: y,
                    now: z,
                },
            ) => (a, b, c, d) == (w, x, y, z),
            (
                Conflict {
                    run: a,
                    expected: b,
                    found: c,
                    why: d,
                },
                Conflict {
                    run: w,
                    expected: x,
                    found: y,
                    why: z,
                },
            ) => (a, b, c, d) == (w, x, y, z),
            (Finished { run: a }, Finished { run: b }) => a == b,
            (
                WrongStatus {
                    run: a,
                    status: b,
                    needs: c,
                },
                WrongStatus {
                    run: x,
                    status: y,
                    needs: z,
                },
            ) => (a, b, c) == (x, y, z),
            (SignalTaken { run: a, signal: b }, SignalTaken { run: x, signal: y }) => {
                (a, b) == (x, y)
            }
            (Invalid { why: a }, Invalid { why: b }) => a == b,
            (Locked { path: a, holder: b }, Locked { path: x, holder: y }) => (a, b) == (x, y),
            (Foreign { path: a, why: b }, Foreign { path: x, why: y }) => (a, b) == (x, y),
            (Corrupt { path: a, why: b }, Corrupt { path: x, why: y }) => (a, b) == (x, y),
            (Full { path: a }, Full { path: b }) => a == b,
            (
                SchemaVersion {
                    path: a,
                    found: b,
                    known: c,
                },
                SchemaVersion {
                    path: x,
                    found: y,
                    known: z,
                },
            ) => (a, b, c) == (x, y, z),
            (Closed, Closed) => true,
            (Unreachable { at: a, why: b }, Unreachable { at: x, why: y }) => (a, b) == (x, y),
            (Unsupported { what: a }, Unsupported { what: b }) => a == b,
            (
                Io {
                    context: a,
                    source: b,
                },
                Io {
                    context: x,
                    source: y,
                },
            ) => a == x && b.to_string() == y.to_string(),
            _ => false,
        }
    }
}

/// `ms` since the Unix epoch as a UTC time: `2026-11-24 00:59:27Z`.
pub fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX);
    let rem = secs % 86_400;
    let (year, month, day) = civil(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The civil date of a day number (days since 1970-01-01): Howard Hinnant's `civil_from_days`.
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_what_they_are_about() {
        let busy = StoreError::Busy {
            run: "order-42".into(),
            owner: "host:7:ab".into(),
            until_ms: 5,
        };
        assert_eq!(
            busy.to_string(),
            "run `order-42` is held by `host:7:ab` (its lease runs until 1970-01-01 00:00:00Z)"
        );
        assert!(busy.is_retryable());
        let io = StoreError::io(
            "committing a batch of run `r`",
            std::io::Error::other("broken pipe"),
        );
        assert_eq!(io.to_string(), "committing a batch of run `r`: broken pipe");
        assert!(io.source().is_some());
        assert_eq!(io.clone(), io);
        assert_ne!(io, StoreError::Closed);
        let locked = StoreError::Locked {
            path: "a.db".into(),
            holder: Some("h:1".into()),
        };
        assert_eq!(locked.to_string(), "the store `a.db` is locked by `h:1`");
    }

    #[test]
    fn times_are_utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00Z");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00Z");
        assert_eq!(utc(1_795_481_761_936), "2026-11-24 00:56:01Z");
        assert_eq!(utc(u64::MAX), "584556019-04-03 14:25:51Z");
    }

    #[test]
    fn store_errors_are_send_sync_and_static() {
        fn assert<T: Send + Sync + 'static + Error>() {}
        assert::<StoreError>();
    }
}
