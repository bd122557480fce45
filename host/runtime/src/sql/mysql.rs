//! MySQL, MariaDB and TiDB grants, over mysql_async pools.

use mysql_async::prelude::Queryable;

use super::{GrantError, fenced, retryable, wit};

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

/// The pool options of a `mysql://` DSN, at most `connections` connections;
/// with `idle`, a transaction idle for longer is rolled back by the server
/// (MariaDB's `idle_transaction_timeout`; MySQL and TiDB have no such
/// setting and skip it).
pub(super) fn opts(
    name: &str,
    dsn: &str,
    connections: usize,
    idle: Option<std::time::Duration>,
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
        // Instants (TIMESTAMP) are UTC on every session. READ COMMITTED:
        // statements take no gap locks, so concurrent groups writing
        // different keys of one table (deleting keys that are not there,
        // inserting next to them) do not deadlock.
        .init(vec![
            session_settings(idle),
            "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED".into(),
        ])
        .into())
}

/// The session's time zone and, with `idle`, its idle transaction timeout.
/// The timeout is in a comment only MariaDB (10.3 and later) executes, so
/// that the statement means the same elsewhere.
fn session_settings(idle: Option<std::time::Duration>) -> String {
    let mut set = "SET time_zone = '+00:00'".to_string();
    if let Some(idle) = idle {
        set.push_str(&format!(
            " /*M!100300 , idle_transaction_timeout = {} */",
            super::whole_seconds(idle)
        ));
    }
    set
}

/// Runs `group` in one transaction; the rows it affected. Statements whose
/// parameters can be written in as literals ([`inline`]) are sent several
/// to a round trip (up to [`MAX_TEXT_BYTES`] of text); the rest are
/// prepared and bound, one at a time, in their place.
pub(super) async fn run_group(
    pool: &mysql_async::Pool,
    group: Vec<wit::Statement>,
    fence: &sluice_core::WriteFence,
) -> Result<u64, wit::SqlError> {
    let mut conn = pool.get_conn().await.map_err(error_of)?;
    let mut tx = conn
        .start_transaction(mysql_async::TxOpts::default())
        .await
        .map_err(error_of)?;
    let mut affected = 0;
    let mut text = String::new();
    for statement in group {
        match inline(&statement) {
            Some(sql) => {
                if !text.is_empty() && text.len() + sql.len() > MAX_TEXT_BYTES {
                    affected += run_text(&mut tx, &std::mem::take(&mut text)).await?;
                }
                if !text.is_empty() {
                    text.push_str(";\n");
                }
                text.push_str(&sql);
            }
            None => {
                if !text.is_empty() {
                    affected += run_text(&mut tx, &std::mem::take(&mut text)).await?;
                }
                tx.exec_drop(statement.sql.as_str(), params_of(statement.params))
                    .await
                    .map_err(error_of)?;
                affected += tx.affected_rows();
            }
        }
    }
    if !text.is_empty() {
        affected += run_text(&mut tx, &text).await?;
    }
    // Dropped unfinished, the transaction is rolled back.
    fenced(fence)?;
    tx.commit().await.map_err(error_of)?;
    Ok(affected)
}

/// Runs `;`-separated statements in one round trip; the rows they
/// affected. The server stops at the first failing one, whose error this
/// returns.
async fn run_text(tx: &mut mysql_async::Transaction<'_>, text: &str) -> Result<u64, wit::SqlError> {
    let mut result = tx.query_iter(text).await.map_err(error_of)?;
    let mut affected = result.affected_rows();
    // Each further statement's outcome is the next result set.
    while !result.is_empty() {
        result.next().await.map_err(error_of)?;
        affected += result.affected_rows();
    }
    result.drop_result().await.map_err(error_of)?;
    Ok(affected)
}

/// Most SQL text sent in one round trip: statements that fit are sent
/// together (well under the servers' default `max_allowed_packet`, 16 MiB).
const MAX_TEXT_BYTES: usize = 4 << 20;

/// `statement` with its parameters written in as literals, if that is
/// certain to mean the same as binding them: the text has `?` placeholders
/// outside backquoted names only (no string literals, other quotes or
/// comments, whose reading depends on the session's `sql_mode`), as many
/// as there are parameters, and every parameter has an exact literal.
fn inline(statement: &wit::Statement) -> Option<String> {
    let sql = statement.sql.as_str();
    // Text or bytes take twice their length in hex: past a round trip's
    // worth the statement is bound, so it is not written out first.
    let size: usize = statement
        .params
        .iter()
        .map(|p| match p {
            wit::Value::Text(t) => 2 * t.len() + 12,
            wit::Value::Bytes(b) => 2 * b.len() + 12,
            _ => 24,
        })
        .sum();
    if sql.len() + size > MAX_TEXT_BYTES {
        return None;
    }
    let mut out = String::with_capacity(sql.len() + statement.params.len() * 16);
    let mut params = statement.params.iter();
    let mut quoted = false;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if quoted {
            out.push(c);
            if c == '`' {
                quoted = false;
            }
            continue;
        }
        match c {
            '`' => {
                quoted = true;
                out.push(c);
            }
            // Spaces keep the literal one token, as a placeholder is (`1?`
            // stays an error, not `11`).
            '?' => {
                out.push(' ');
                literal(params.next()?, &mut out)?;
                out.push(' ');
            }
            '\'' | '"' | '#' | '\\' | ';' => return None,
            '-' if chars.peek() == Some(&'-') => return None,
            '/' if chars.peek() == Some(&'*') => return None,
            _ => out.push(c),
        }
    }
    (!quoted && params.next().is_none()).then_some(out)
}

/// `value` as a MySQL literal: numbers as numbers, text as a hex string
/// with the `utf8mb4` introducer and bytes with `_binary` (hex reads the
/// same under every `sql_mode`; the introducer makes it a string, not a
/// number). `None` for a float that is not finite.
fn literal(value: &wit::Value, out: &mut String) -> Option<()> {
    use std::fmt::Write;
    let hex = |bytes: &[u8], out: &mut String| {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        out.reserve(bytes.len() * 2 + 3);
        out.push_str("X'");
        for &b in bytes {
            out.push(char::from(DIGITS[usize::from(b >> 4)]));
            out.push(char::from(DIGITS[usize::from(b & 15)]));
        }
        out.push('\'');
    };
    match value {
        wit::Value::Null => out.push_str("NULL"),
        // A negative number in parentheses: `-?` must not read `--5`.
        wit::Value::Int(i) if *i < 0 => {
            let _ = write!(out, "({i})");
        }
        wit::Value::Int(i) => {
            let _ = write!(out, "{i}");
        }
        wit::Value::Uint(u) => {
            let _ = write!(out, "{u}");
        }
        wit::Value::Float(f) if f.is_finite() && f.is_sign_negative() => {
            let _ = write!(out, "({f:e})");
        }
        wit::Value::Float(f) if f.is_finite() => {
            let _ = write!(out, "{f:e}");
        }
        wit::Value::Float(_) => return None,
        wit::Value::Text(t) => {
            out.push_str("_utf8mb4 ");
            hex(t.as_bytes(), out);
        }
        wit::Value::Bytes(b) => {
            out.push_str("_binary ");
            hex(b, out);
        }
    }
    Some(())
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
    let mut bytes = 0;
    while let Some(row) = result.next().await.map_err(error_of)? {
        if rows.len() < max {
            let values: Vec<wit::Value> = row.unwrap().into_iter().map(value_of).collect();
            bytes += super::size_of_row(&values);
            super::check_query_bytes(bytes)?;
            rows.push(values);
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

    fn statement(sql: &str, params: Vec<wit::Value>) -> wit::Statement {
        wit::Statement {
            sql: sql.into(),
            params,
        }
    }

    #[test]
    fn parameters_are_written_in_as_literals_that_read_the_same_under_any_sql_mode() {
        let s = statement(
            "INSERT INTO `s`.`a?b` (`x`, `y`) VALUES (?, ?), (?, ?), (?, ?)",
            vec![
                wit::Value::Int(-5),
                wit::Value::Uint(u64::MAX),
                wit::Value::Float(0.1),
                wit::Value::Text("it's \\ é".into()),
                wit::Value::Bytes(vec![0, 0xff]),
                wit::Value::Null,
            ],
        );
        assert_eq!(
            inline(&s).as_deref(),
            Some(
                "INSERT INTO `s`.`a?b` (`x`, `y`) VALUES ( (-5) ,  18446744073709551615 ), \
                 ( 1e-1 ,  _utf8mb4 X'69742773205c20c3a9' ), ( _binary X'00ff' ,  NULL )"
            )
        );
        assert_eq!(
            inline(&statement(
                "SELECT ?",
                vec![wit::Value::Text(String::new())]
            ))
            .as_deref(),
            Some("SELECT  _utf8mb4 X'' ")
        );
        // Token boundaries stay where the placeholders put them.
        assert_eq!(
            inline(&statement("SELECT -?", vec![wit::Value::Int(-5)])).as_deref(),
            Some("SELECT - (-5) ")
        );
        assert_eq!(
            inline(&statement("SELECT 1?", vec![wit::Value::Float(-0.5)])).as_deref(),
            Some("SELECT 1 (-5e-1) ")
        );
    }

    #[test]
    fn statements_whose_reading_could_differ_stay_bound() {
        let one = || vec![wit::Value::Int(1)];
        for sql in [
            "SELECT '?' = ?",
            "SELECT \"a\" = ?",
            "SELECT ? -- ?",
            "SELECT ? /* ? */",
            "SELECT ? # ?",
            "SELECT ?; DROP TABLE t",
            "SELECT ?, ?",
            "SELECT 1",
            "SELECT `unterminated ?",
        ] {
            assert_eq!(inline(&statement(sql, one())), None, "{sql}");
        }
        assert_eq!(
            inline(&statement("SELECT ?", vec![wit::Value::Float(f64::NAN)])),
            None
        );
        // Over a round trip's worth of hex: bound.
        let big = vec![wit::Value::Bytes(vec![7; MAX_TEXT_BYTES / 2])];
        assert_eq!(inline(&statement("SELECT ?", big)), None);
        assert_eq!(
            inline(&statement("SELECT 1", Vec::new())).as_deref(),
            Some("SELECT 1")
        );
    }
}
