//! Statements the host runs for a sink over its own pooled connections (the
//! `sluice:plugin/sql` interface).
//!
//! Statements use the granted database's placeholders: `?` for MySQL,
//! MariaDB and TiDB, `$1`, `$2`, ... for PostgreSQL. PostgreSQL receives every
//! parameter as text (bytes as bytea) and reads it by the type it infers, so
//! `Value::Text("2026-12-01 10:00:00")` fills a `timestamp` and
//! `Value::Text("12.50")` a `numeric`; result columns of other types than
//! bool, integers, floats, text, json and bytea must be cast to text in the
//! statement.
//!
//! A changefeed grants a sink databases by name (`capabilities.sql`: a name
//! and a DSN); the plugin names the database, never sees the DSN or its
//! credentials, and needs no SQL client of its own. [`execute`] runs groups of
//! statements, each group in one transaction, different groups concurrently
//! on different connections; [`query`] reads rows. Errors come typed:
//! [`ErrorKind::Retryable`] (duplicate key, deadlock, lock wait, lost
//! connection), [`ErrorKind::Fatal`] (syntax, permission, unknown table),
//! [`ErrorKind::Denied`] (not granted, over a bound). [`SqlError::into_error`]
//! turns one into the plugin [`Error`](crate::Error) the host acts on.
//!
//! Natively (unit tests) there is no host: every call fails with
//! [`ErrorKind::Denied`].

/// A parameter or a result value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// A signed integer.
    Int(i64),
    /// An unsigned integer.
    Uint(u64),
    /// A floating-point number.
    Float(f64),
    /// Text (UTF-8).
    Text(String),
    /// Bytes (blobs; text that is not UTF-8).
    Bytes(Vec<u8>),
}

/// One statement with its parameters (`?` placeholders, bound in order).
#[derive(Debug, Clone, PartialEq)]
pub struct Statement {
    /// The SQL text.
    pub sql: String,
    /// The parameters.
    pub params: Vec<Value>,
}

impl Statement {
    /// A statement with `params`.
    pub fn new(sql: impl Into<String>, params: Vec<Value>) -> Self {
        Self {
            sql: sql.into(),
            params,
        }
    }
}

/// What a failure means for the sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Back off and retry (the host replays, flagged).
    Retryable,
    /// Retrying will not help.
    Fatal,
    /// Not granted, or over a bound.
    Denied,
}

/// A failed `execute` or `query`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlError {
    /// What it means for the sink.
    pub kind: ErrorKind,
    /// The server's error number (MySQL, MariaDB, TiDB; 0 when the failure
    /// was not the server's, and always 0 for PostgreSQL).
    pub code: u32,
    /// The server's five-character SQLSTATE (`23505`, `40P01`, ...; empty
    /// when the failure was not the server's).
    pub sqlstate: String,
    /// What went wrong (never with credentials).
    pub message: String,
}

impl SqlError {
    /// The plugin error the host acts on: retryable stays retryable; fatal
    /// and denied fail the changefeed.
    pub fn into_error(self) -> crate::Error {
        let text = match (self.code, self.sqlstate.is_empty()) {
            (0, true) => self.message,
            (0, false) => format!("{} (SQLSTATE {})", self.message, self.sqlstate),
            (code, _) => format!("{} (code {code})", self.message),
        };
        match self.kind {
            ErrorKind::Retryable => crate::Error::retryable(text),
            ErrorKind::Fatal | ErrorKind::Denied => crate::Error::fatal(text),
        }
    }
}

impl std::fmt::Display for SqlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({:?}, code {})", self.message, self.kind, self.code)
    }
}

impl std::error::Error for SqlError {}

#[cfg(target_arch = "wasm32")]
mod imports {
    pub use crate::bindings::sink_world::sluice::plugin::sql::*;
}

#[cfg(target_arch = "wasm32")]
fn to_wit(v: Value) -> imports::Value {
    match v {
        Value::Null => imports::Value::Null,
        Value::Int(i) => imports::Value::Int(i),
        Value::Uint(u) => imports::Value::Uint(u),
        Value::Float(f) => imports::Value::Float(f),
        Value::Text(t) => imports::Value::Text(t),
        Value::Bytes(b) => imports::Value::Bytes(b),
    }
}

#[cfg(target_arch = "wasm32")]
fn from_wit(v: imports::Value) -> Value {
    match v {
        imports::Value::Null => Value::Null,
        imports::Value::Int(i) => Value::Int(i),
        imports::Value::Uint(u) => Value::Uint(u),
        imports::Value::Float(f) => Value::Float(f),
        imports::Value::Text(t) => Value::Text(t),
        imports::Value::Bytes(b) => Value::Bytes(b),
    }
}

#[cfg(target_arch = "wasm32")]
fn statement(s: Statement) -> imports::Statement {
    imports::Statement {
        sql: s.sql,
        params: s.params.into_iter().map(to_wit).collect(),
    }
}

#[cfg(target_arch = "wasm32")]
fn error(e: imports::SqlError) -> SqlError {
    SqlError {
        kind: match e.kind {
            imports::ErrorKind::Retryable => ErrorKind::Retryable,
            imports::ErrorKind::Fatal => ErrorKind::Fatal,
            imports::ErrorKind::Denied => ErrorKind::Denied,
        },
        code: e.code,
        sqlstate: e.sqlstate,
        message: e.message,
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn no_host() -> SqlError {
    SqlError {
        kind: ErrorKind::Denied,
        code: 0,
        sqlstate: String::new(),
        message: "no host: the sql interface exists only inside the Sluice host".into(),
    }
}

/// Runs `groups` on the granted database `database`: each group in one
/// transaction, groups concurrently on different connections. Returns the
/// rows each group affected. On failure, the groups that failed were rolled
/// back and those that committed stay committed.
pub fn execute(database: &str, groups: Vec<Vec<Statement>>) -> Result<Vec<u64>, SqlError> {
    #[cfg(target_arch = "wasm32")]
    {
        let groups: Vec<Vec<imports::Statement>> = groups
            .into_iter()
            .map(|g| g.into_iter().map(statement).collect())
            .collect();
        imports::execute(database, &groups).map_err(error)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = (database, groups);
        Err(no_host())
    }
}

/// Runs one statement and returns at most `max_rows` of its rows.
pub fn query(
    database: &str,
    statement_: Statement,
    max_rows: u32,
) -> Result<Vec<Vec<Value>>, SqlError> {
    #[cfg(target_arch = "wasm32")]
    {
        imports::query(database, &statement(statement_), max_rows)
            .map(|rows| {
                rows.into_iter()
                    .map(|r| r.into_iter().map(from_wit).collect())
                    .collect()
            })
            .map_err(error)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = (database, statement_, max_rows);
        Err(no_host())
    }
}
