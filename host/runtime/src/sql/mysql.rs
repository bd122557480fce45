//! MySQL, MariaDB and TiDB grants, over mysql_async pools.

use mysql_async::prelude::Queryable;

use super::{GrantError, retryable, wit};

/// Server error numbers a retry can get past (MySQL and MariaDB).
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

/// The pool options of a `mysql://` DSN, at most `connections` connections.
pub(super) fn opts(
    name: &str,
    dsn: &str,
    connections: usize,
) -> Result<mysql_async::Opts, GrantError> {
    let opts = mysql_async::Opts::from_url(dsn).map_err(|e| GrantError {
        name: name.to_string(),
        problem: format!(
            "the DSN is not valid ({})",
            sluice_core::bounded_text(&super::redact(&e.to_string(), dsn), 200)
        ),
    })?;
    let constraints = mysql_async::PoolConstraints::new(0, connections).expect("0 <= connections");
    Ok(mysql_async::OptsBuilder::from_opts(opts)
        .pool_opts(mysql_async::PoolOpts::default().with_constraints(constraints))
        // Instants (TIMESTAMP) are UTC on every session.
        .init(vec!["SET time_zone = '+00:00'"])
        .into())
}

/// Runs `group` in one transaction; the rows it affected.
pub(super) async fn run_group(
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

/// Runs one statement; at most `max` of its rows.
pub(super) async fn query(
    pool: mysql_async::Pool,
    statement: wit::Statement,
    max: usize,
) -> Result<Vec<Vec<wit::Value>>, wit::SqlError> {
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

/// What a driver error means for the sink; the message never holds a DSN
/// (the driver's messages name hosts and codes, not URLs).
pub(super) fn error_of(e: mysql_async::Error) -> wit::SqlError {
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
                sqlstate: s.state.chars().take(5).collect(),
                message,
            }
        }
        mysql_async::Error::Io(e) => retryable(format!("connection: {e}")),
        mysql_async::Error::Driver(e) => retryable(format!("driver: {e}")),
        mysql_async::Error::Other(e) => retryable(format!("{e}")),
        mysql_async::Error::Url(_) => super::fatal("the granted DSN is not valid".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_errors_are_typed_for_the_sink() {
        let server = |code| {
            error_of(mysql_async::Error::Server(mysql_async::ServerError {
                code,
                message: "m".into(),
                state: "HY000".into(),
            }))
        };
        for code in [1062, 1213, 1205, 1040] {
            assert_eq!(server(code).kind, wit::ErrorKind::Retryable, "{code}");
        }
        for code in [1064, 1142, 1146, 1054, 1406] {
            assert_eq!(server(code).kind, wit::ErrorKind::Fatal, "{code}");
        }
        assert_eq!(server(1064).sqlstate, "HY000");
    }
}
