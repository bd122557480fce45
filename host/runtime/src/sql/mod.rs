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
//!
//! MySQL, MariaDB and TiDB grants (`mysql://`) use mysql_async pools;
//! PostgreSQL grants (`postgres://`) deadpool-postgres pools of
//! tokio-postgres connections.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use tokio::runtime::Handle;
use tokio::task::JoinSet;

use crate::bindings::sql as wit;

mod mysql;
mod postgres;

/// Most groups one `execute` call may carry.
pub const MAX_GROUPS: usize = 1024;
/// Most statements one `execute` call may carry, over all its groups.
pub const MAX_STATEMENTS: usize = 65_536;
/// Most rows one `query` call may return.
pub const MAX_QUERY_ROWS: u32 = 100_000;
/// Most bytes of values one `query` call may return (text and bytes at
/// their length, other values at 8).
pub const MAX_QUERY_BYTES: usize = 64 << 20;

/// The bytes a result row counts for against [`MAX_QUERY_BYTES`].
fn size_of_row(values: &[wit::Value]) -> usize {
    values
        .iter()
        .map(|v| match v {
            wit::Value::Text(t) => t.len() + 8,
            wit::Value::Bytes(b) => b.len() + 8,
            _ => 8,
        })
        .sum()
}

/// `denied` once a query's rows pass [`MAX_QUERY_BYTES`].
fn check_query_bytes(bytes: usize) -> Result<(), wit::SqlError> {
    if bytes > MAX_QUERY_BYTES {
        return Err(denied(format!(
            "the query's rows hold over {} MiB; select fewer rows or columns",
            MAX_QUERY_BYTES >> 20
        )));
    }
    Ok(())
}

/// One granted database and its pool, made when first used.
enum Grant {
    Mysql {
        opts: mysql_async::Opts,
        pool: OnceLock<mysql_async::Pool>,
    },
    Postgres(deadpool_postgres::Pool),
}

/// A pool ready for one operation.
#[derive(Clone)]
enum Pool {
    Mysql(mysql_async::Pool),
    Postgres(deadpool_postgres::Pool),
}

impl Pool {
    async fn run_group(
        &self,
        group: Vec<wit::Statement>,
        fence: &sluice_core::WriteFence,
    ) -> Result<u64, wit::SqlError> {
        match self {
            Pool::Mysql(pool) => mysql::run_group(pool, group, fence).await,
            Pool::Postgres(pool) => postgres::run_group(pool, group, fence).await,
        }
    }

    async fn query(
        self,
        statement: wit::Statement,
        max: usize,
    ) -> Result<Vec<Vec<wit::Value>>, wit::SqlError> {
        match self {
            Pool::Mysql(pool) => mysql::query(pool, statement, max).await,
            Pool::Postgres(pool) => postgres::query(pool, statement, max).await,
        }
    }
}

/// The pools of one plugin's granted databases.
pub struct SqlPools {
    grants: BTreeMap<String, Grant>,
    connections: usize,
    handle: Handle,
    /// No statement runs once it closes.
    fence: sluice_core::WriteFence,
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
    /// Pools for `grants` (name, DSN: `mysql://` for MySQL, MariaDB and
    /// TiDB, `postgres://` or `postgresql://` for PostgreSQL), at most
    /// `connections` connections each, whose operations run on `handle`'s
    /// runtime. Connects lazily.
    pub fn new(
        grants: &[(String, String)],
        connections: usize,
        handle: Handle,
        fence: sluice_core::WriteFence,
    ) -> Result<Self, GrantError> {
        let connections = connections.clamp(1, 64);
        // A transaction left open by a process paused mid-way (SIGSTOP, a VM
        // pause) holds its row locks until its connection ends; the capture
        // that takes over would wait on them. The server rolls back a
        // transaction idle for longer than the lease's fence window (by then
        // this process writes nothing more anyway).
        let idle = fence.window();
        let mut out = BTreeMap::new();
        for (name, dsn) in grants {
            let grant = if dsn.starts_with("mysql://") {
                Grant::Mysql {
                    opts: mysql::opts(name, dsn, connections, idle)?,
                    pool: OnceLock::new(),
                }
            } else if dsn.starts_with("postgres://") || dsn.starts_with("postgresql://") {
                Grant::Postgres(postgres::pool(name, dsn, connections, idle)?)
            } else {
                return Err(GrantError {
                    name: name.clone(),
                    problem: "the DSN must be mysql:// (MySQL, MariaDB, TiDB) or postgres:// \
                              (PostgreSQL)"
                        .into(),
                });
            };
            out.insert(name.clone(), grant);
        }
        Ok(Self {
            grants: out,
            connections,
            handle,
            fence,
        })
    }

    fn pool(&self, name: &str) -> Result<Pool, wit::SqlError> {
        let grant = self.grants.get(name).ok_or_else(|| {
            denied(format!(
                "database `{}` is not granted to this plugin (capabilities.sql)",
                sluice_core::bounded_text(name, 64)
            ))
        })?;
        Ok(match grant {
            Grant::Mysql { opts, pool } => Pool::Mysql(
                pool.get_or_init(|| {
                    let _runtime = self.handle.enter();
                    mysql_async::Pool::new(opts.clone())
                })
                .clone(),
            ),
            Grant::Postgres(pool) => Pool::Postgres(pool.clone()),
        })
    }

    /// Runs each group in a transaction of its own, groups concurrently.
    pub(crate) async fn execute(
        &self,
        database: &str,
        groups: Vec<Vec<wit::Statement>>,
    ) -> Result<Vec<u64>, wit::SqlError> {
        let pool = self.pool(database)?;
        if let Err(closed) = self.fence.check() {
            return Err(denied(closed.to_string()));
        }
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
        // Dropping a JoinSet (the guest call was cancelled) aborts its tasks.
        let mut tasks = JoinSet::new();
        let n = groups.len();
        for (at, group) in groups.into_iter().enumerate() {
            let pool = pool.clone();
            let fence = self.fence.clone();
            tasks.spawn_on(
                async move { (at, pool.run_group(group, &fence).await) },
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
                        retryable(format!("a statement group was cut off: {e}")),
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
        let task = self.handle.spawn(pool.query(statement, max));
        // Dropping the handle does not stop the task: abort it with the call.
        let abort = task.abort_handle();
        let _guard = AbortOnDrop(abort);
        match task.await {
            Ok(result) => result,
            Err(e) => Err(retryable(format!("the query was cut off: {e}"))),
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
            match grant {
                Grant::Mysql { pool, .. } => {
                    if let Some(pool) = pool.into_inner() {
                        self.handle.spawn(async move {
                            let _ = pool.disconnect().await;
                        });
                    }
                }
                // Idle connections close as the pool is dropped; their
                // connection tasks end on the host runtime.
                Grant::Postgres(pool) => pool.close(),
            }
        }
    }
}

/// `denied` when the fence has closed: checked before a transaction
/// commits, so that a group this process was running when it was paused is
/// rolled back rather than committed once it wakes.
fn fenced(fence: &sluice_core::WriteFence) -> Result<(), wit::SqlError> {
    fence.check().map_err(|closed| denied(closed.to_string()))
}

/// A lease's fence window in whole seconds, rounded up (at least 1).
fn whole_seconds(window: std::time::Duration) -> u64 {
    window.as_millis().div_ceil(1000).max(1) as u64
}

fn denied(message: String) -> wit::SqlError {
    wit::SqlError {
        kind: wit::ErrorKind::Denied,
        code: 0,
        sqlstate: String::new(),
        message,
    }
}

fn retryable(message: String) -> wit::SqlError {
    wit::SqlError {
        kind: wit::ErrorKind::Retryable,
        code: 0,
        sqlstate: String::new(),
        message,
    }
}

fn fatal(message: String) -> wit::SqlError {
    wit::SqlError {
        kind: wit::ErrorKind::Fatal,
        code: 0,
        sqlstate: String::new(),
        message,
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
    use mysql_async::prelude::Queryable;

    #[test]
    fn query_results_are_bounded_by_bytes() {
        let row = vec![
            wit::Value::Text("abc".into()),
            wit::Value::Bytes(vec![0; 10]),
            wit::Value::Int(1),
        ];
        assert_eq!(size_of_row(&row), 11 + 18 + 8);
        assert!(check_query_bytes(MAX_QUERY_BYTES).is_ok());
        let over = check_query_bytes(MAX_QUERY_BYTES + 1).unwrap_err();
        assert_eq!(over.kind, wit::ErrorKind::Denied);
        assert!(over.message.contains("64 MiB"), "{}", over.message);
    }

    fn select_one() -> Vec<Vec<wit::Statement>> {
        vec![vec![wit::Statement {
            sql: "SELECT 1".into(),
            params: Vec::new(),
        }]]
    }

    #[test]
    fn grants_need_a_known_dsn_and_errors_never_repeat_it() {
        let handle = tokio::runtime::Runtime::new().unwrap();
        let bad = SqlPools::new(
            &[("target".into(), "odbc://u:secret@db/x".into())],
            4,
            handle.handle().clone(),
            sluice_core::WriteFence::open(),
        )
        .unwrap_err();
        assert!(bad.to_string().contains("capabilities.sql.target"), "{bad}");
        assert!(!bad.to_string().contains("secret"), "{bad}");
        let bad = SqlPools::new(
            &[("t".into(), "mysql://u:secret@db:notaport/x".into())],
            4,
            handle.handle().clone(),
            sluice_core::WriteFence::open(),
        )
        .unwrap_err();
        assert!(!bad.to_string().contains("secret"), "{bad}");
        let pools = SqlPools::new(
            &[("t".into(), "mysql://u:secret@127.0.0.1:1/x".into())],
            4,
            handle.handle().clone(),
            sluice_core::WriteFence::open(),
        )
        .unwrap();
        assert!(!format!("{pools:?}").contains("secret"));
        let err = handle
            .block_on(pools.execute("other", Vec::new()))
            .unwrap_err();
        assert_eq!(err.kind, wit::ErrorKind::Denied);
        // Nothing listens on port 1: a connection error, retryable.
        let err = handle
            .block_on(pools.execute("t", select_one()))
            .unwrap_err();
        assert_eq!(err.kind, wit::ErrorKind::Retryable, "{}", err.message);
        assert!(!err.message.contains("secret"), "{}", err.message);
        // A closed fence (the capture's lease may have ended): denied before
        // any connection is tried.
        pools.fence.close();
        let err = handle
            .block_on(pools.execute("t", select_one()))
            .unwrap_err();
        assert_eq!(err.kind, wit::ErrorKind::Denied, "{}", err.message);
        assert!(err.message.contains("lease"), "{}", err.message);
        let pools = SqlPools::new(
            &[("pg".into(), "postgres://u:secret@127.0.0.1:1/x".into())],
            4,
            handle.handle().clone(),
            sluice_core::WriteFence::open(),
        )
        .unwrap();
        let err = handle
            .block_on(pools.query(
                "pg",
                wit::Statement {
                    sql: "SELECT 1".into(),
                    params: Vec::new(),
                },
                1,
            ))
            .unwrap_err();
        assert_eq!(err.kind, wit::ErrorKind::Retryable, "{}", err.message);
        assert!(!err.message.contains("secret"), "{}", err.message);
        drop(pools);
    }

    fn statement(sql: &str) -> wit::Statement {
        wit::Statement {
            sql: sql.into(),
            params: Vec::new(),
        }
    }

    fn one_value(rows: Vec<Vec<wit::Value>>) -> String {
        match &rows[..] {
            [row] => match &row[..] {
                [wit::Value::Int(i)] => i.to_string(),
                [wit::Value::Uint(u)] => u.to_string(),
                [wit::Value::Text(t)] => t.clone(),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }

    /// A capture paused in the middle of a transaction (SIGSTOP, a VM
    /// pause) must neither hold the rows its successor writes nor commit
    /// when it wakes.
    #[test]
    fn a_paused_writer_s_transaction_is_rolled_back_downstream_and_never_commits_after_its_fence() {
        let db = sluice_tests::mariadb::PrivateMariaDb::start();
        db.exec(
            "CREATE DATABASE t; CREATE TABLE t.k (k INT PRIMARY KEY, v INT); \
             INSERT INTO t.k VALUES (1, 0), (2, 0)",
        );
        let rt = tokio::runtime::Runtime::new().unwrap();
        let window = std::time::Duration::from_millis(1500);
        let fence = sluice_core::WriteFence::lease(
            std::time::Instant::now() + std::time::Duration::from_secs(600),
            window,
        );
        let grant = [("t".to_string(), db.root_url())];
        let pools = SqlPools::new(&grant, 2, rt.handle().clone(), fence.clone()).unwrap();
        // The server ends a transaction idle for longer than the fence's
        // window (MariaDB counts whole seconds).
        let idle = rt
            .block_on(pools.query("t", statement("SELECT @@idle_transaction_timeout"), 1))
            .unwrap();
        assert_eq!(one_value(idle), "2");
        // Without a lease (one process), nothing is set.
        let open = SqlPools::new(
            &grant,
            1,
            rt.handle().clone(),
            sluice_core::WriteFence::open(),
        )
        .unwrap();
        let idle = rt
            .block_on(open.query("t", statement("SELECT @@idle_transaction_timeout"), 1))
            .unwrap();
        assert_eq!(one_value(idle), "0");

        // A paused writer: a session of the same settings that updated row 1
        // and then sends nothing more.
        let paused = rt.block_on(async {
            let pool = mysql_async::Pool::new(
                mysql::opts("t", &db.root_url(), 1, fence.window()).unwrap(),
            );
            let mut conn = pool.get_conn().await.unwrap();
            conn.query_drop("BEGIN").await.unwrap();
            conn.query_drop("UPDATE t.k SET v = 1 WHERE k = 1")
                .await
                .unwrap();
            (pool, conn)
        });
        // Its successor writes the same row: it waits until the server
        // rolls the paused one back, not for the lock wait timeout (50 s,
        // after which it would fail).
        rt.block_on(pools.execute(
            "t",
            vec![vec![statement("UPDATE t.k SET v = 2 WHERE k = 1")]],
        ))
        .unwrap();
        // The paused writer wakes: its transaction is gone.
        let (pool, mut conn) = paused;
        let woke = rt.block_on(conn.query_drop("COMMIT"));
        assert!(woke.is_err(), "{woke:?}");
        drop(conn);
        rt.block_on(pool.disconnect()).unwrap();

        // A group running when the fence closes is rolled back, not committed.
        let closer = {
            let fence = fence.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(300));
                fence.close();
            })
        };
        let err = rt
            .block_on(pools.execute(
                "t",
                vec![vec![
                    statement("UPDATE t.k SET v = 3 WHERE k = 2"),
                    statement("DO SLEEP(1)"),
                ]],
            ))
            .unwrap_err();
        closer.join().unwrap();
        assert_eq!(err.kind, wit::ErrorKind::Denied, "{}", err.message);
        assert!(err.message.contains("lease"), "{}", err.message);
        assert_eq!(
            db.exec("SELECT k, v FROM t.k ORDER BY k").trim(),
            "1\t2\n2\t0"
        );
        drop(pools);
        drop(open);
    }

    #[test]
    fn postgres_sessions_end_a_transaction_idle_past_the_fence_window() {
        let db = sluice_tests::postgres::PrivatePostgres::start();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let fence = sluice_core::WriteFence::lease(
            std::time::Instant::now() + std::time::Duration::from_secs(600),
            std::time::Duration::from_millis(1500),
        );
        let pools = SqlPools::new(
            &[("pg".to_string(), db.root_url())],
            1,
            rt.handle().clone(),
            fence,
        )
        .unwrap();
        let idle = rt
            .block_on(pools.query(
                "pg",
                statement("SELECT current_setting('idle_in_transaction_session_timeout')"),
                1,
            ))
            .unwrap();
        assert_eq!(one_value(idle), "1500ms");
        drop(pools);
    }
}
