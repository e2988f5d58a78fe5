//! The connections: a few, made when first needed, kept while they work, replaced when they
//! break. A semaphore bounds how many are out at once; idle ones wait in a list.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use flowdag_store::StoreError;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Config, NoTls, Statement, Transaction};

use crate::ops::Fail;

/// The pool of one store.
pub(crate) struct Pool {
    config: Config,
    /// Where the store is, for errors: `host:port/dbname`, no password.
    pub(crate) at: String,
    /// What every new connection runs first: `search_path` to the store's schema, and no JIT
    /// (the store's statements are short; compiling them, which the planner's estimates for
    /// a large table can trigger, costs more than running them).
    setup: String,
    permits: Arc<Semaphore>,
    /// How many connections may be out at once.
    size: usize,
    /// How long a request waits for a free connection (the store's request timeout).
    wait: Duration,
    idle: Mutex<Vec<Conn>>,
}

/// One connection, with the statements it prepared.
pub(crate) struct Conn {
    client: Client,
    cache: HashMap<&'static str, Statement>,
}

/// A connection taken from the pool; it goes back when dropped, unless it broke.
pub(crate) struct Pooled {
    conn: Option<Conn>,
    pool: Arc<Pool>,
    /// Set when the connection failed: it is dropped instead of going back.
    pub(crate) broken: bool,
    _permit: OwnedSemaphorePermit,
}

impl Pool {
    /// A pool of at most `size` connections to `config`'s database, made within `timeout`
    /// each, and handed out within `wait` (past it, a request gets `Unreachable`).
    pub(crate) fn new(
        mut config: Config,
        schema: &str,
        size: usize,
        timeout: Duration,
        wait: Duration,
    ) -> Pool {
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(timeout);
        }
        if config.get_application_name().is_none() {
            config.application_name("flow");
        }
        let at = place(&config);
        Pool {
            config,
            at,
            setup: format!("SET search_path TO {}; SET jit = off", quote_ident(schema)),
            permits: Arc::new(Semaphore::new(size.max(1))),
            size: size.max(1),
            wait,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// A connection: an idle one that still works, or a new one. When every connection is
    /// out for longer than the pool's `wait`, the answer is [`StoreError::Unreachable`]
    /// (nothing was sent), not an endless wait: a caller that holds connections while it
    /// asks for another gets an error it can retry.
    pub(crate) async fn get(self: &Arc<Pool>) -> Result<Pooled, StoreError> {
        let acquire = Arc::clone(&self.permits).acquire_owned();
        let permit = match tokio::time::timeout(self.wait, acquire).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) => return Err(StoreError::Closed),
            Err(_) => {
                return Err(StoreError::Unreachable {
                    at: self.at.clone(),
                    why: format!(
                        "none of the pool's {} connections was free within {:?}",
                        self.size, self.wait
                    ),
                });
            }
        };
        let idle = loop {
            let conn = self
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            match conn {
                Some(conn) if conn.client.is_closed() => continue,
                other => break other,
            }
        };
        let conn = match idle {
            Some(conn) => conn,
            None => self.connect().await?,
        };
        Ok(Pooled {
            conn: Some(conn),
            pool: Arc::clone(self),
            broken: false,
            _permit: permit,
        })
    }

    async fn connect(&self) -> Result<Conn, StoreError> {
        let timeout = self
            .config
            .get_connect_timeout()
            .copied()
            .unwrap_or(Duration::from_secs(5));
        match tokio::time::timeout(timeout, self.connect_now()).await {
            Ok(connected) => connected,
            Err(_) => Err(StoreError::Unreachable {
                at: self.at.clone(),
                why: format!("no connection within {timeout:?}"),
            }),
        }
    }

    async fn connect_now(&self) -> Result<Conn, StoreError> {
        let (client, connection) = self
            .config
            .connect(NoTls)
            .await
            .map_err(|e| self.connect_error(e))?;
        // The connection's I/O runs on its own task until the client is dropped or the
        // connection breaks (the client then reports itself closed).
        tokio::spawn(async move {
            let _ = connection.await;
        });
        client
            .batch_execute(&self.setup)
            .await
            .map_err(|e| self.connect_error(e))?;
        Ok(Conn {
            client,
            cache: HashMap::new(),
        })
    }

    /// A failure to connect: the server is unreachable, unless it answered and refused us
    /// (a wrong password, no such database): that needs a person, not a retry.
    fn connect_error(&self, error: tokio_postgres::Error) -> StoreError {
        if error.as_db_error().is_some() && !is_connection_error(&error) {
            // The server's reason (a wrong password, no such database) in the message itself:
            // tokio-postgres shows only "db error" and keeps it in the source.
            StoreError::io(
                format!("connecting to `{}`", self.at),
                std::io::Error::other(describe(&error)),
            )
        } else {
            StoreError::Unreachable {
                at: self.at.clone(),
                why: describe(&error),
            }
        }
    }
}

impl Pooled {
    fn conn(&mut self) -> Result<&mut Conn, Fail> {
        self.conn.as_mut().ok_or(Fail::Store(StoreError::Closed))
    }

    /// Begins a transaction (`READ COMMITTED`, PostgreSQL's default).
    pub(crate) async fn begin(&mut self) -> Result<Tx<'_>, Fail> {
        let Conn { client, cache } = self.conn()?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| Fail::Db("beginning a transaction", e))?;
        Ok(Tx { tx, cache })
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take()
            && !self.broken
            && !conn.client.is_closed()
        {
            self.pool
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(conn);
        }
    }
}

/// A transaction on a pooled connection; statements are prepared once per connection.
pub(crate) struct Tx<'a> {
    pub(crate) tx: Transaction<'a>,
    cache: &'a mut HashMap<&'static str, Statement>,
}

type Params<'p> = &'p [&'p (dyn tokio_postgres::types::ToSql + Sync)];

impl Tx<'_> {
    async fn statement(
        &mut self,
        doing: &'static str,
        sql: &'static str,
    ) -> Result<Statement, Fail> {
        if let Some(statement) = self.cache.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.tx.prepare(sql).await.map_err(|e| Fail::Db(doing, e))?;
        self.cache.insert(sql, statement.clone());
        Ok(statement)
    }

    /// The rows of `sql`.
    pub(crate) async fn query(
        &mut self,
        doing: &'static str,
        sql: &'static str,
        params: Params<'_>,
    ) -> Result<Vec<tokio_postgres::Row>, Fail> {
        let statement = self.statement(doing, sql).await?;
        self.tx
            .query(&statement, params)
            .await
            .map_err(|e| Fail::Db(doing, e))
    }

    /// The row of `sql`, if any.
    pub(crate) async fn query_opt(
        &mut self,
        doing: &'static str,
        sql: &'static str,
        params: Params<'_>,
    ) -> Result<Option<tokio_postgres::Row>, Fail> {
        Ok(self.query(doing, sql, params).await?.into_iter().next())
    }

    /// The number of rows `sql` changed.
    pub(crate) async fn execute(
        &mut self,
        doing: &'static str,
        sql: &'static str,
        params: Params<'_>,
    ) -> Result<u64, Fail> {
        let statement = self.statement(doing, sql).await?;
        self.tx
            .execute(&statement, params)
            .await
            .map_err(|e| Fail::Db(doing, e))
    }

    /// Commits.
    pub(crate) async fn commit(self) -> Result<(), Fail> {
        self.tx
            .commit()
            .await
            .map_err(|e| Fail::Db("committing the transaction", e))
    }
}

/// `"host:port/dbname"` (every host, comma-separated), without user or password.
fn place(config: &Config) -> String {
    let mut hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|host| match host {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            #[cfg(unix)]
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    if hosts.is_empty() {
        hosts = config
            .get_hostaddrs()
            .iter()
            .map(ToString::to_string)
            .collect();
    }
    if hosts.is_empty() {
        hosts.push("localhost".to_owned());
    }
    let ports = config.get_ports();
    let hosts: Vec<String> = hosts
        .into_iter()
        .enumerate()
        .map(|(i, host)| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            format!("{host}:{port}")
        })
        .collect();
    let db = config
        .get_dbname()
        .or(config.get_user())
        .unwrap_or("postgres");
    format!("{}/{db}", hosts.join(","))
}

/// Whether `error` means the connection is gone or was never made: refused, reset, closed,
/// timed out, the server shutting down or starting up, or out of connection slots.
pub(crate) fn is_connection_error(error: &tokio_postgres::Error) -> bool {
    if error.is_closed() {
        return true;
    }
    if let Some(code) = error.code() {
        let code = code.code();
        return code.starts_with("08")
            || code == SqlState::ADMIN_SHUTDOWN.code()
            || code == SqlState::CRASH_SHUTDOWN.code()
            || code == SqlState::CANNOT_CONNECT_NOW.code()
            || code == SqlState::TOO_MANY_CONNECTIONS.code();
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if cause.is::<std::io::Error>() {
            return true;
        }
        source = cause.source();
    }
    error.to_string().starts_with("timeout")
}

/// Whether `error` asks for the transaction to be run again: a serialization failure or a
/// deadlock, which PostgreSQL resolves by aborting one transaction.
pub(crate) fn is_retry(error: &tokio_postgres::Error) -> bool {
    error.code().is_some_and(|code| {
        *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED
    })
}

/// The error and its causes, as one line.
pub(crate) fn describe(error: &tokio_postgres::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let line = cause.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        source = std::error::Error::source(cause);
    }
    text
}

impl Pool {
    /// The password new connections send, if any.
    #[cfg(test)]
    pub(crate) fn password(&self) -> Option<&[u8]> {
        self.config.get_password()
    }
}

/// `name` as a quoted SQL identifier.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(conninfo: &str) -> String {
        place(&conninfo.parse::<Config>().expect("a connection string"))
    }

    #[test]
    fn the_place_names_hosts_ports_and_database_never_the_password() {
        assert_eq!(
            at("postgres://ann:s3cret@db.internal:6432/orders"),
            "db.internal:6432/orders"
        );
        assert_eq!(
            at("host=10.0.0.5 port=5433 user=ann password=s3cret dbname=orders"),
            "10.0.0.5:5433/orders"
        );
        assert_eq!(at("postgresql://ann@a:1,b:2/orders"), "a:1,b:2/orders");
        // libpq's defaults: port 5432, the database named after the user.
        assert_eq!(at("postgres://ann@db"), "db:5432/ann");
        assert!(!at("postgres://ann:s3cret@db/x").contains("s3cret"));
    }

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote_ident("flow"), "\"flow\"");
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }
}
