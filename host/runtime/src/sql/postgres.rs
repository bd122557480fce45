//! PostgreSQL grants, over deadpool-postgres pools of tokio-postgres
//! connections.
//!
//! Parameters go in text format (bytes in binary) with no declared type, so
//! the server infers each one's type from the statement and reads the value
//! with that type's input function: one statement shape fits any column
//! type. Results are read in binary for the types below; other types must be
//! cast to text in the statement.

use std::time::Duration;

use bytes::{BufMut, BytesMut};
use futures_util::TryStreamExt;
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};

use super::{GrantError, fenced, retryable, wit};

/// How long a new connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A pool for a `postgres://` DSN, at most `connections` connections; with
/// `idle`, a transaction idle for longer is rolled back by the server
/// (`idle_in_transaction_session_timeout`). Needs no runtime until a
/// connection is asked for.
pub(super) fn pool(
    name: &str,
    dsn: &str,
    connections: usize,
    idle: Option<Duration>,
) -> Result<deadpool_postgres::Pool, GrantError> {
    let problem = |problem: String| GrantError {
        name: name.to_string(),
        problem,
    };
    // The DSN's TLS mode (sslmode, sslrootcert) as libpq reads it.
    let (mut config, tls) = sluice_pgconn::settings(dsn)
        .map_err(|e| problem(sluice_core::bounded_text(&super::redact(&e, dsn), 300)))?;
    if config.get_hosts().is_empty() {
        return Err(problem("the DSN names no host".into()));
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    config.application_name("sluice");
    // Instants (timestamptz) are read and written in UTC on every session.
    let mut ours = "-c TimeZone=UTC".to_string();
    if let Some(idle) = idle {
        ours.push_str(&format!(
            " -c idle_in_transaction_session_timeout={}",
            idle.as_millis().max(1)
        ));
    }
    let options = match config.get_options() {
        Some(given) => format!("{given} {ours}"),
        None => ours,
    };
    config.options(&options);
    let manager = deadpool_postgres::Manager::from_config(
        config,
        tls,
        deadpool_postgres::ManagerConfig {
            recycling_method: deadpool_postgres::RecyclingMethod::Fast,
        },
    );
    deadpool_postgres::Pool::builder(manager)
        .max_size(connections)
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .map_err(|e| problem(format!("cannot make its pool: {e}")))
}

/// Parameters with no declared type: the server infers them.
fn unspecified() -> Type {
    Type::new(
        "unspecified".into(),
        0,
        tokio_postgres::types::Kind::Simple,
        String::new(),
    )
}

/// Runs `group` in one transaction; the rows it affected.
pub(super) async fn run_group(
    pool: &deadpool_postgres::Pool,
    group: Vec<wit::Statement>,
    fence: &sluice_core::WriteFence,
) -> Result<u64, wit::SqlError> {
    let mut client = pool.get().await.map_err(pool_error)?;
    // Rolled back when dropped unfinished (an error, a cancelled call).
    let tx = client.transaction().await.map_err(error_of)?;
    let any = unspecified();
    let mut affected = 0;
    for statement in group {
        let params: Vec<Param> = statement.params.into_iter().map(Param).collect();
        let typed: Vec<(&(dyn ToSql + Sync), Type)> = params
            .iter()
            .map(|p| (p as &(dyn ToSql + Sync), any.clone()))
            .collect();
        affected += tx
            .execute_typed(&statement.sql, &typed)
            .await
            .map_err(error_of)?;
    }
    // Dropped unfinished, the transaction is rolled back.
    fenced(fence)?;
    tx.commit().await.map_err(error_of)?;
    Ok(affected)
}

/// Runs one statement; at most `max` of its rows.
pub(super) async fn query(
    pool: deadpool_postgres::Pool,
    statement: wit::Statement,
    max: usize,
) -> Result<Vec<Vec<wit::Value>>, wit::SqlError> {
    let client = pool.get().await.map_err(pool_error)?;
    let any = unspecified();
    let params: Vec<(Param, Type)> = statement
        .params
        .into_iter()
        .map(|v| (Param(v), any.clone()))
        .collect();
    let stream = client
        .query_typed_raw(&statement.sql, params.iter().map(|(p, t)| (p, t.clone())))
        .await
        .map_err(error_of)?;
    let mut stream = std::pin::pin!(stream);
    let mut rows = Vec::new();
    let mut bytes = 0;
    while let Some(row) = stream.try_next().await.map_err(error_of)? {
        if rows.len() < max {
            let mut values = Vec::with_capacity(row.len());
            for i in 0..row.len() {
                let Out(value) = row.try_get(i).map_err(error_of)?;
                values.push(value);
            }
            bytes += super::size_of_row(&values);
            super::check_query_bytes(bytes)?;
            rows.push(values);
        }
    }
    Ok(rows)
}

/// A parameter: text format (bytes: binary), any type.
#[derive(Debug)]
struct Param(wit::Value);

impl ToSql for Param {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        use std::fmt::Write as _;
        match &self.0 {
            wit::Value::Null => return Ok(IsNull::Yes),
            wit::Value::Int(i) => write!(out, "{i}")?,
            wit::Value::Uint(u) => write!(out, "{u}")?,
            wit::Value::Float(f) if f.is_nan() => out.put_slice(b"NaN"),
            wit::Value::Float(f) if f.is_infinite() => {
                out.put_slice(if *f > 0.0 { b"Infinity" } else { b"-Infinity" });
            }
            wit::Value::Float(f) => write!(out, "{f:e}")?,
            wit::Value::Text(t) => out.put_slice(t.as_bytes()),
            wit::Value::Bytes(b) => out.put_slice(b),
        }
        Ok(IsNull::No)
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    fn encode_format(&self, _ty: &Type) -> tokio_postgres::types::Format {
        match self.0 {
            wit::Value::Bytes(_) => tokio_postgres::types::Format::Binary,
            _ => tokio_postgres::types::Format::Text,
        }
    }

    to_sql_checked!();
}

/// A result value of any readable type.
struct Out(wit::Value);

impl<'a> FromSql<'a> for Out {
    fn from_sql(
        ty: &Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        let text = |raw: &[u8]| -> Result<wit::Value, Box<dyn std::error::Error + Sync + Send>> {
            Ok(wit::Value::Text(std::str::from_utf8(raw)?.to_string()))
        };
        Ok(Out(match *ty {
            Type::BOOL => wit::Value::Int(i64::from(bool::from_sql(ty, raw)?)),
            Type::INT2 => wit::Value::Int(i64::from(i16::from_sql(ty, raw)?)),
            Type::INT4 => wit::Value::Int(i64::from(i32::from_sql(ty, raw)?)),
            Type::INT8 => wit::Value::Int(i64::from_sql(ty, raw)?),
            Type::OID => wit::Value::Uint(u64::from(u32::from_sql(ty, raw)?)),
            Type::FLOAT4 => wit::Value::Float(f64::from(f32::from_sql(ty, raw)?)),
            Type::FLOAT8 => wit::Value::Float(f64::from_sql(ty, raw)?),
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN | Type::JSON => {
                text(raw)?
            }
            // jsonb's binary form: a version byte (1), then the text.
            Type::JSONB => match raw.split_first() {
                Some((1, rest)) => text(rest)?,
                _ => return Err("unsupported jsonb version".into()),
            },
            Type::BYTEA => wit::Value::Bytes(raw.to_vec()),
            _ if ty.name() == "citext" => text(raw)?,
            _ => {
                return Err(format!(
                    "a column of type {} cannot be read; cast it to text in the statement (col::text)",
                    ty.name()
                )
                .into());
            }
        }))
    }

    fn from_sql_null(_ty: &Type) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Out(wit::Value::Null))
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }
}

/// SQLSTATEs a retry can get past; every class-08 (connection) state too.
const RETRYABLE_STATES: &[&str] = &[
    "23505", // unique violation (a replay in safe mode resolves it)
    "40001", // serialization failure
    "40003", // statement completion unknown
    "40P01", // deadlock detected
    "53000", // insufficient resources
    "53100", // disk full
    "53200", // out of memory
    "53300", // too many connections
    "55P03", // lock not available
    "57014", // query canceled (statement timeout)
    "57P01", // admin shutdown
    "57P02", // crash shutdown
    "57P03", // cannot connect now (starting up)
    "58000", // system error
    "58030", // io error
];

fn pool_error(e: deadpool_postgres::PoolError) -> wit::SqlError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => error_of(e),
        other => retryable(format!("connection pool: {other}")),
    }
}

/// What a driver error means for the sink. tokio-postgres messages name
/// hosts and states, never the DSN.
pub(super) fn error_of(e: tokio_postgres::Error) -> wit::SqlError {
    if let Some(db) = e.as_db_error() {
        let state = db.code().code();
        let mut message = db.message().to_string();
        if let Some(detail) = db.detail() {
            message.push_str(": ");
            message.push_str(detail);
        }
        return wit::SqlError {
            kind: if state.starts_with("08") || RETRYABLE_STATES.contains(&state) {
                wit::ErrorKind::Retryable
            } else {
                wit::ErrorKind::Fatal
            },
            code: 0,
            sqlstate: state.chars().take(5).collect(),
            message: sluice_core::bounded_text(&format!("{message} (SQLSTATE {state})"), 2048),
        };
    }
    let text = sluice_core::bounded_text(&sluice_pgconn::error_text(&e), 2048);
    // A value that does not convert (a result column of an unreadable
    // type) will not convert next time either, nor will a refused
    // certificate be taken next time.
    let conversion = std::error::Error::source(&e).is_some()
        && (text.starts_with("error deserializing") || text.starts_with("error serializing"));
    if conversion {
        super::fatal(text)
    } else if sluice_pgconn::is_certificate_error(&text) {
        super::fatal(format!("connection: {text}"))
    } else {
        retryable(format!("connection: {text}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_text_and_bytes_binary() {
        let text = |v: wit::Value| {
            let mut out = BytesMut::new();
            let null = Param(v.clone()).to_sql(&Type::TEXT, &mut out).unwrap();
            (
                matches!(null, IsNull::Yes),
                String::from_utf8_lossy(&out).into_owned(),
            )
        };
        assert_eq!(text(wit::Value::Int(-5)), (false, "-5".into()));
        assert_eq!(
            text(wit::Value::Uint(u64::MAX)),
            (false, u64::MAX.to_string())
        );
        assert_eq!(text(wit::Value::Float(0.1)), (false, "1e-1".into()));
        assert_eq!(
            text(wit::Value::Float(f64::NEG_INFINITY)),
            (false, "-Infinity".into())
        );
        assert!(text(wit::Value::Null).0);
        assert_eq!(
            Param(wit::Value::Bytes(vec![0])).encode_format(&Type::BYTEA) as i16,
            tokio_postgres::types::Format::Binary as i16
        );
        assert_eq!(
            Param(wit::Value::Text("x".into())).encode_format(&Type::INT4) as i16,
            tokio_postgres::types::Format::Text as i16
        );
    }

    #[test]
    fn dsns_are_checked_without_repeating_them() {
        let e = pool("t", "postgres://u:secret@db/x?sslmode=strict", 4, None).unwrap_err();
        assert!(e.to_string().contains("sslmode `strict`"), "{e}");
        assert!(!e.to_string().contains("secret"), "{e}");
        let e = pool(
            "t",
            "postgres://u:secret@db/x?sslmode=verify-full&sslrootcert=/nonexistent.pem",
            4,
            None,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("sslrootcert /nonexistent.pem"),
            "{e}"
        );
        assert!(pool("t", "postgres://u:secret@db/x?sslmode=require", 4, None).is_ok());
        let e = pool("t", "postgres://u:secret@db:99999/x", 4, None).unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
        assert!(pool("t", "postgresql://u:secret@127.0.0.1:5432/x", 4, None).is_ok());
    }
}
