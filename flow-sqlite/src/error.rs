//! From rusqlite's errors to [`StoreError`]s that say which file and what was being done.

use std::path::Path;

use flowdag_store::StoreError;
use rusqlite::ErrorCode;

/// `error`, met while `doing` something with the store at `path`. A value that does not fit
/// its column's type (a node index of -5, an attempt too large for a `u32`, text that is not
/// UTF-8: a file edited by hand or damaged) makes the store [`StoreError::Corrupt`].
pub(crate) fn sql_error(path: &Path, doing: &str, error: rusqlite::Error) -> StoreError {
    if matches!(
        error,
        rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::IntegralValueOutOfRange(..)
            | rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::Utf8Error(..)
    ) {
        return StoreError::Corrupt {
            path: path.to_owned(),
            why: format!("{doing} it: {error}"),
        };
    }
    // A value flow writes refused by a CHECK or NOT NULL constraint: flow never writes one
    // its schema refuses, so the schema's text was edited or damaged.
    if let rusqlite::Error::SqliteFailure(failure, _) = &error
        && matches!(
            failure.extended_code,
            rusqlite::ffi::SQLITE_CONSTRAINT_CHECK | rusqlite::ffi::SQLITE_CONSTRAINT_NOTNULL
        )
    {
        return StoreError::Corrupt {
            path: path.to_owned(),
            why: format!("{doing} it: {error} (its schema is not as flow made it)"),
        };
    }
    match error.sqlite_error_code() {
        Some(ErrorCode::DiskFull) => StoreError::Full {
            path: path.to_owned(),
        },
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => StoreError::Corrupt {
            path: path.to_owned(),
            why: error.to_string(),
        },
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::Locked {
            path: path.to_owned(),
            holder: None,
        },
        // A file whose header asks for a newer file format than SQLite writes is opened read
        // only: a damaged header (flow never writes one), not a file the system refuses.
        Some(ErrorCode::ReadOnly) if newer_format(path) => StoreError::Corrupt {
            path: path.to_owned(),
            why: format!("{doing} it: {error} (its header asks for a newer file format)"),
        },
        _ => StoreError::io(format!("{doing} `{}`", path.display()), error),
    }
}

/// Whether the file at `path` says, in its header's write or read version (bytes 18 and 19),
/// a file format newer than the legacy (1) and WAL (2) ones SQLite writes.
fn newer_format(path: &Path) -> bool {
    use std::io::Read as _;
    let mut header = [0u8; 20];
    std::fs::File::open(path)
        .and_then(|mut file| file.read_exact(&mut header))
        .is_ok_and(|()| header[18] > 2 || header[19] > 2)
}
