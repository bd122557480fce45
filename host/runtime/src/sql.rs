//! The `sql` host interface: statements a sink asks the host to run over the
//! host's own pooled connections to the databases its changefeed grants it.
//!
//! A grant is a name and a DSN (`capabilities.sql`); the plugin only ever
//! names the grant. One pool per grant, shared by every instance of the
//! plugin (a trapped instance's successor finds its connections), at most
//! the plugin's `sql-connections` connections. Every operation runs as a task
//! on the host runtime the pools were made on, so connections never move
//! between runtimes; a guest call that is cancelled (a timeout, a stop)
//! aborts its tasks, and a transaction cut off that way is rolled back by the
//! server when its connection closes.
//!
//! Errors are typed for the sink: duplicate key, deadlock, lock wait timeout,
//! lost or refused connections are retryable; syntax, permission, unknown
//! table or column and bad values are fatal; an ungranted name or a request
//! over a bound is denied. No message carries a DSN.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use mysql_async::prelude::Queryable;
use tokio::runtime::Handle;
use tokio::task::JoinSet;

use crate::bindings::sql as wit;

/// Most groups one `execute` call may carry.
pub const MAX_GROUPS: usize = 1024;
/// Most statements one `execute` call may carry, over all its groups.
pub const MAX_STATEMENTS: usize = 65_536;
/// Most rows one `query` call may return.
pub const MAX_QUERY_ROWS: u32 = 100_000;

/// One granted database.
struct Grant {
    opts: mysql_async::Opts,
    pool: OnceLock<mysql_async::Pool>,
}

/// The pools of one plugin's granted databases.
pub struct SqlPools {
    grants: BTreeMap<String, Grant>,
    connections: usize,
    handle: Handle,
}

impl std::fmt::Debug for SqlPools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the DSNs: they hold credentials.
        f.debug_struct("SqlPools")
            .field("grants", &self.grants.keys().collect::<Vec<_>>())
            .field("connections", &self.connections)
            .finish()
    }
}

/// A DSN that cannot be used, named by its grant (the DSN itself is never
/// repeated: it holds credentials).
#[derive(Debug, thiserror::Error)]
#[error("capabilities.sql.{name}: {problem}")]
pub struct GrantError {
    /// The grant's name.
    pub name: String,
    /// What is wrong with its DSN.
    pub problem: String,
}

impl SqlPools {
    /// Pools for `grants` (name, DSN), at most `connections` connections
    /// each, whose operations run on `handle`'s runtime. Connects lazily.
    pub fn new(
        grants: &[(String, String)],
        connections: usize,
        handle: Handle,
    ) -> Result<Self, GrantError> {
        let connections = connections.clamp(1, 64);
        let mut out = BTreeMap::new();
        for (name, dsn) in grants {
            let problem = |problem: String| GrantError {
                name: name.clone(),
                problem,
            };
            if !dsn.starts_with("mysql://") {
                return Err(problem(
                    "only mysql:// DSNs (MySQL, MariaDB, TiDB) are supported".into(),
                ));
            }
            let opts = mysql_async::Opts::from_url(dsn).map_err(|e| {
                problem(format!(
                    "the DSN is not valid ({})",
                    sluice_core::bounded_text(&redact(&e.to_string(), dsn), 200)
                ))
            })?;
            let constraints =
                mysql_async::PoolConstraints::new(0, connections).expect("0 <= connections");
            let opts: mysql_async::Opts = mysql_async::OptsBuilder::from_opts(opts)
                .pool_opts(mysql_async::PoolOpts::default().with_constraints(constraints))
                .into();
            out.insert(
                name.clone(),
                Grant {
                    opts,
                    pool: OnceLock::new(),
                },
            );
        }
        Ok(Self {
            grants: out,
            connections,
            handle,
        })
    }

    fn pool(&self, name: &str) -> Result<mysql_async::Pool, wit::SqlError> {
        let grant = self.grants.get(name).ok_or_else(|| {
            denied(format!(
                "database `{}` is not granted to this plugin (capabilities.sql)",
                sluice_core::bounded_text(name, 64)
            ))
        })?;
        Ok(grant
            .pool
            .get_or_init(|| {
                let _runtime = self.handle.enter();
                mysql_async::Pool::new(grant.opts.clone())
            })
            .clone())
    }

    /// Runs each group in a transaction of its own, groups concurrently.
    pub(crate) async fn execute(
        &self,
        database: &str,
        groups: Vec<Vec<wit::Statement>>,
    ) -> Result<Vec<u64>, wit::SqlError> {
        let pool = self.pool(database)?;
        if groups.len() > MAX_GROUPS {
            return Err(denied(format!(
                "{} groups in one call; at most {MAX_GROUPS}",
                groups.len()
            )));
        }
        let statements: usize = groups.iter().map(Vec::len).sum();
        if statements > MAX_STATEMENTS {
            return Err(denied(format!(
                "{statements} statements in one call; at most {MAX_STATEMENTS}"
            )));
        }
        let mut tasks = JoinSet::new();
        let n = groups.len();
        for (at, group) in groups.into_iter().enumerate() {
            let pool = pool.clone();
            tasks.spawn_on(
                async move { (at, run_group(&pool, group).await) },
                &self.handle,
            );
        }
        let mut affected = vec![0; n];
        let mut first_error: Option<(usize, wit::SqlError)> = None;
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok((at, Ok(rows))) => affected[at] = rows,
                Ok((at, Err(e))) => {
                    if first_error.as_ref().is_none_or(|(first, _)| at < *first) {
                        first_error = Some((at, e));
                    }
                }
                Err(e) => {
                    first_error.get_or_insert((
                        usize::MAX,
                        retryable(0, format!("a statement group was cut off: {e}")),
                    ));
                }
            }
        }
        match first_error {
            Some((_, e)) => Err(e),
            None => Ok(affected),
        }
    }

    /// Runs one statement and returns at most `max_rows` of its rows.
    pub(crate) async fn query(
        &self,
        database: &str,
        statement: wit::Statement,
        max_rows: u32,
    ) -> Result<Vec<Vec<wit::Value>>, wit::SqlError> {
        let pool = self.pool(database)?;
        let max = max_rows.min(MAX_QUERY_ROWS) as usize;
        let task = self.handle.spawn(async move {
            let mut conn = pool.get_conn().await.map_err(error_of)?;
            let mut result = conn
                .exec_iter(statement.sql.as_str(), params_of(statement.params))
                .await
                .map_err(error_of)?;
            let mut rows = Vec::new();
            while let Some(row) = result.next().await.map_err(error_of)? {
                if rows.len() < max {
                    rows.push(row.unwrap().into_iter().map(value_of).collect());
                }
            }
            Ok(rows)
        });
        // Dropping the handle does not stop the task: abort it with the call.
        let abort = task.abort_handle();
        let _guard = AbortOnDrop(abort);
        match task.await {
            Ok(result) => result,
            Err(e) => Err(retryable(0, format!("the query was cut off: {e}"))),
        }
    }
}

/// Aborts a task when the guest call awaiting it goes away.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Drop for SqlPools {
    /// Pools close their connections on the runtime they were made on.
    fn drop(&mut self) {
        for grant in std::mem::take(&mut self.grants).into_values() {
            if let Some(pool) = grant.pool.into_inner() {
                self.handle.spawn(async move {
                    let _ = pool.disconnect().await;
                });
            }
        }
    }
}

async fn run_group(
    pool: &mysql_async::Pool,
    group: Vec<wit::Statement>,
) -> Result<u64, wit::SqlError> {
    let mut conn = pool.get_conn().await.map_err(error_of)?;
    let mut tx = conn
        .start_transaction(mysql_async::TxOpts::default())
        .await
        .map_err(error_of)?;
    let mut affected = 0;
    for statement in group {
        tx.exec_drop(statement.sql.as_str(), params_of(statement.params))
            .await
            .map_err(error_of)?;
        affected += tx.affected_rows();
    }
    tx.commit().await.map_err(error_of)?;
    Ok(affected)
}

fn params_of(values: Vec<wit::Value>) -> mysql_async::Params {
    if values.is_empty() {
        return mysql_async::Params::Empty;
    }
    mysql_async::Params::Positional(
        values
            .into_iter()
            .map(|v| match v {
                wit::Value::Null => mysql_async::Value::NULL,
                wit::Value::Int(i) => mysql_async::Value::Int(i),
                wit::Value::Uint(u) => mysql_async::Value::UInt(u),
                wit::Value::Float(f) => mysql_async::Value::Double(f),
                wit::Value::Text(t) => mysql_async::Value::Bytes(t.into_bytes()),
                wit::Value::Bytes(b) => mysql_async::Value::Bytes(b),
            })
            .collect(),
    )
}

fn value_of(v: mysql_async::Value) -> wit::Value {
    use mysql_async::Value as V;
    match v {
        V::NULL => wit::Value::Null,
        V::Int(i) => wit::Value::Int(i),
        V::UInt(u) => wit::Value::Uint(u),
        V::Float(f) => wit::Value::Float(f64::from(f)),
        V::Double(f) => wit::Value::Float(f),
        V::Bytes(b) => match String::from_utf8(b) {
            Ok(text) => wit::Value::Text(text),
            Err(e) => wit::Value::Bytes(e.into_bytes()),
        },
        V::Date(y, mo, d, h, mi, s, us) => wit::Value::Text(if (h, mi, s, us) == (0, 0, 0, 0) {
            format!("{y:04}-{mo:02}-{d:02}")
        } else if us == 0 {
            format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}")
        } else {
            format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}.{us:06}")
        }),
        V::Time(neg, days, h, mi, s, us) => {
            let hours = u32::from(h) + days * 24;
            let sign = if neg { "-" } else { "" };
            wit::Value::Text(if us == 0 {
                format!("{sign}{hours:02}:{mi:02}:{s:02}")
            } else {
                format!("{sign}{hours:02}:{mi:02}:{s:02}.{us:06}")
            })
        }
    }
}

fn denied(message: String) -> wit::SqlError {
    wit::SqlError {
        kind: wit::ErrorKind::Denied,
        code: 0,
        message,
    }
}

fn retryable(code: u32, message: String) -> wit::SqlError {
    wit::SqlError {
        kind: wit::ErrorKind::Retryable,
        code,
        message,
    }
}

/// Server error codes a retry can get past (MySQL and MariaDB).
const RETRYABLE_CODES: &[u16] = &[
    1020, // record changed since last read
    1040, // too many connections
    1053, // server shutdown in progress
    1062, // duplicate entry (a replay in safe mode resolves it)
    1180, // error during commit
    1181, // error during rollback
    1205, // lock wait timeout
    1213, // deadlock
    1317, // query interrupted
    1614, // transaction branch was rolled back: deadlock
    1927, // connection was killed (MariaDB)
    3024, // query execution interrupted, max_execution_time
    4031, // disconnected by the server because of inactivity
];

/// What a driver error means for the sink; the message never holds a DSN
/// (the driver's messages name hosts and codes, not URLs).
fn error_of(e: mysql_async::Error) -> wit::SqlError {
    match e {
        mysql_async::Error::Server(s) => {
            let message = sluice_core::bounded_text(&format!("{} ({})", s.message, s.code), 2048);
            wit::SqlError {
                kind: if RETRYABLE_CODES.contains(&s.code) {
                    wit::ErrorKind::Retryable
                } else {
                    wit::ErrorKind::Fatal
                },
                code: u32::from(s.code),
                message,
            }
        }
        mysql_async::Error::Io(e) => retryable(0, format!("connection: {e}")),
        mysql_async::Error::Driver(e) => retryable(0, format!("driver: {e}")),
        mysql_async::Error::Other(e) => retryable(0, format!("{e}")),
        mysql_async::Error::Url(_) => wit::SqlError {
            kind: wit::ErrorKind::Fatal,
            code: 0,
            message: "the granted DSN is not valid".into(),
        },
    }
}

/// `message` with `dsn` (and its password) taken out.
fn redact(message: &str, dsn: &str) -> String {
    let mut out = message.replace(dsn, "<dsn>");
    if let Some((_, rest)) = dsn.split_once("://")
        && let Some((auth, _)) = rest.rsplit_once('@')
        && let Some((_, password)) = auth.split_once(':')
        && !password.is_empty()
    {
        out = out.replace(password, "***");
    }
    out
}

/// The pools a plugin instance's state refers to.
pub(crate) type SharedPools = Option<Arc<SqlPools>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_need_a_mysql_dsn_and_errors_never_repeat_it() {
        let handle = tokio::runtime::Runtime::new().unwrap();
        let bad = SqlPools::new(
            &[("target".into(), "postgres://u:secret@db/x".into())],
            4,
            handle.handle().clone(),
        )
        .unwrap_err();
        assert!(bad.to_string().contains("capabilities.sql.target"), "{bad}");
        assert!(!bad.to_string().contains("secret"), "{bad}");
        let bad = SqlPools::new(
            &[("t".into(), "mysql://u:secret@db:notaport/x".into())],
            4,
            handle.handle().clone(),
        )
        .unwrap_err();
        assert!(!bad.to_string().contains("secret"), "{bad}");
        let pools = SqlPools::new(
            &[("t".into(), "mysql://u:secret@127.0.0.1:1/x".into())],
            4,
            handle.handle().clone(),
        )
        .unwrap();
        assert!(!format!("{pools:?}").contains("secret"));
        let err = handle
            .block_on(pools.execute("other", Vec::new()))
            .unwrap_err();
        assert_eq!(err.kind, wit::ErrorKind::Denied);
        // Nothing listens on port 1: a connection error, retryable.
        let err = handle
            .block_on(pools.execute(
                "t",
                vec![vec![wit::Statement {
                    sql: "SELECT 1".into(),
                    params: Vec::new(),
                }]],
            ))
            .unwrap_err();
        assert_eq!(err.kind, wit::ErrorKind::Retryable, "{}", err.message);
        assert!(!err.message.contains("secret"), "{}", err.message);
    }

    #[test]
    fn server_errors_are_typed_for_the_sink() {
        let server = |code| {
            error_of(mysql_async::Error::Server(mysql_async::ServerError {
                code,
                message: "m".into(),
                state: "HY000".into(),
            }))
            .kind
        };
        for code in [1062, 1213, 1205, 1040] {
            assert_eq!(server(code), wit::ErrorKind::Retryable, "{code}");
        }
        for code in [1064, 1142, 1146, 1054, 1406] {
            assert_eq!(server(code), wit::ErrorKind::Fatal, "{code}");
        }
    }
}
