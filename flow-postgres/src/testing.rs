//! A PostgreSQL server for tests (feature `test-server`): [`server`] answers `FLOW_PG_URL`, or
//! starts the repository's throwaway cluster (`.ci/postgres start`) once for every test binary
//! of the build, and reuses it. [`store`] makes a store in a fresh schema of its own, so tests
//! running at once never see each other's runs.
//!
//! When no server can be had (no `FLOW_PG_URL`, and `.ci/postgres` cannot install or start
//! PostgreSQL), [`server`] panics with what to do: a test of the store never passes without a
//! server.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::{PostgresOptions, PostgresStore};

/// The URL of a PostgreSQL server for tests: `FLOW_PG_URL` if set, else the cluster of
/// `.ci/postgres start` (started now, under a file lock in `target/`, unless it runs).
///
/// # Panics
///
/// When neither works, with what to do.
pub fn server() -> String {
    static URL: OnceLock<Result<String, String>> = OnceLock::new();
    let url = URL.get_or_init(|| match std::env::var("FLOW_PG_URL") {
        Ok(url) if !url.trim().is_empty() => Ok(url),
        _ => start(&repository()),
    });
    match url {
        Ok(url) => url.clone(),
        Err(why) => panic!(
            "no PostgreSQL server for the tests of flowdag-postgres: {why}\n\
             Set FLOW_PG_URL to a server's URL (postgres://user@host:port/db), or install \
             PostgreSQL (Debian: `apt-get install postgresql`) so that `bash .ci/postgres start` \
             can start a throwaway cluster (it installs the package itself when it runs as root \
             or with sudo)."
        ),
    }
}

/// A store on [`server`] in a new schema of its own, `flow_test_<name>_<pid>_<n>`.
pub fn store(name: &str) -> PostgresStore {
    let options = PostgresOptions {
        schema: fresh_schema(name),
        ..PostgresOptions::default()
    };
    match PostgresStore::connect_with(&server(), options) {
        Ok(store) => store,
        Err(e) => panic!("the test server's URL is refused: {e}"),
    }
}

/// A schema name no other test of this build uses: `flow_test_<name>_<pid>_<n>`.
pub fn fresh_schema(name: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("flow_test_{}_{}_{n}", sanitize(name), std::process::id())
}

/// `name` with every character but ASCII letters and digits made `_`, lowercase.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// A plain connection to [`server`], for tests that look into the database or prepare it.
///
/// # Panics
///
/// When the server cannot be reached.
pub async fn client() -> tokio_postgres::Client {
    let (client, connection) = match tokio_postgres::connect(&server(), tokio_postgres::NoTls).await
    {
        Ok(pair) => pair,
        Err(e) => panic!("connecting to the test server: {e}"),
    };
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// Drops the schemas this process made with [`store`] and [`fresh_schema`] for `name` (call it
/// at the end of a test; a throwaway cluster does not need it, a shared server does).
pub async fn drop_schemas(name: &str) {
    let client = client().await;
    let prefix = format!("flow_test_{}_{}_", sanitize(name), std::process::id());
    let pattern = format!("{}%", prefix.replace('_', "\\_"));
    let rows = match client
        .query(
            "SELECT nspname::text FROM pg_namespace WHERE nspname LIKE $1",
            &[&pattern],
        )
        .await
    {
        Ok(rows) => rows,
        Err(e) => panic!("listing the test schemas: {e}"),
    };
    for row in rows {
        let name: String = row.get(0);
        let sql = format!(
            "DROP SCHEMA IF EXISTS {} CASCADE",
            crate::pool::quote_ident(&name)
        );
        if let Err(e) = client.batch_execute(&sql).await {
            panic!("dropping the test schema `{name}`: {e}");
        }
    }
}

/// The workspace's root (where `.ci/postgres` is).
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_owned)
}

/// Runs `.ci/postgres start` under an exclusive lock on `target/pg.lock`: parallel test
/// binaries start one cluster, and the later ones find it running.
fn start(root: &Path) -> Result<String, String> {
    let script = root.join(".ci").join("postgres");
    if !script.is_file() {
        return Err(format!("`{}` is missing", script.display()));
    }
    let target = root.join("target");
    std::fs::create_dir_all(&target)
        .map_err(|e| format!("creating `{}`: {e}", target.display()))?;
    let lock_path = target.join("pg.lock");
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| format!("opening `{}`: {e}", lock_path.display()))?;
    lock.lock()
        .map_err(|e| format!("locking `{}`: {e}", lock_path.display()))?;
    let output = Command::new("bash")
        .arg(&script)
        .arg("start")
        .current_dir(root)
        .output()
        .map_err(|e| format!("running `bash {}`: {e}", script.display()))?;
    drop(lock);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        return Err(format!(
            "`bash .ci/postgres start` failed ({}):\n{stderr}",
            output.status
        ));
    }
    stdout
        .lines()
        .find_map(|line| line.trim().strip_prefix("export FLOW_PG_URL="))
        .map(|url| url.trim_matches(['"', '\'']).to_owned())
        .ok_or_else(|| {
            format!("`bash .ci/postgres start` printed no `export FLOW_PG_URL=`:\n{stdout}{stderr}")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_script_there_is_no_server_and_the_reason_says_so() {
        let err = start(Path::new("/nonexistent-flow-checkout")).expect_err("no script");
        assert!(
            err.contains(".ci/postgres") && err.contains("missing"),
            "{err}"
        );
    }

    #[test]
    fn schema_names_are_fresh_and_plain() {
        let a = fresh_schema("Contract-1");
        let b = fresh_schema("Contract-1");
        assert_ne!(a, b);
        assert!(a.starts_with("flow_test_contract_1_"), "{a}");
        assert!(
            a.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{a}"
        );
    }
}
