//! Replaying an upstream DDL downstream, as a replica does: in the session's
//! current database, under the session settings it ran under upstream
//! (`sql_mode`, foreign key checks, time zone, server collation), once
//! (the progress table records it; a DDL that ran already is skipped).
//!
//! - On MariaDB the settings go in `SET STATEMENT ... FOR`, so they hold for
//!   the statement only; on MySQL they are set on the session before it and
//!   back after it.
//! - A view, routine or trigger whose `DEFINER` the sink's user may not name
//!   (error 1227) is created again without it (the sink's user is then its
//!   definer), with a warning.
//! - Triggers are not created: their effects are rows of the binlog already,
//!   and a trigger downstream would make them twice. Events are not created:
//!   they would run downstream. Both are logged.
//! - A DDL delivered again without a record (no progress table) whose error
//!   says it ran already (database, table, column, key or partition exists or
//!   is gone) is skipped.

use sluice_sdk::host::{Level, log};
use sluice_sdk::sql::{self, Statement, Value as SqlValue};
use sluice_sdk::{DdlEvent, Error};
use sql_apply::{Applier, Dialect, Mysql};

/// Server errors of a DDL that was applied before: database or table exists,
/// duplicate column or key name, unknown table or key on a drop, duplicate
/// or unknown partition, no partitioning left to remove.
const ALREADY_APPLIED: &[u32] = &[
    1007, 1008, 1050, 1051, 1060, 1061, 1091, 1505, 1507, 1517, 1735, 4090, 4091,
];

/// Access denied, needs SUPER or SET USER (a `DEFINER` the user may not name).
const DEFINER_DENIED: u32 = 1227;

/// Kinds not replayed, and why.
const NOT_REPLAYED: &[(&str, &str)] = &[
    (
        "create trigger",
        "a trigger's effects are rows of the binlog already; a trigger downstream would make them twice",
    ),
    ("drop trigger", "triggers are not created downstream"),
    (
        "create event",
        "an event would run downstream as well as upstream",
    ),
    ("alter event", "events are not created downstream"),
    ("drop event", "events are not created downstream"),
];

/// What the target server is.
#[derive(Debug, Clone, Default)]
pub struct Server {
    /// MariaDB (it has `SET STATEMENT`).
    mariadb: bool,
    /// The sink's sessions' own values of the variables a DDL may take from
    /// upstream: only those that differ are set.
    defaults: Vec<(String, String)>,
}

impl Server {
    /// Reads the server's version and its sessions' settings.
    pub fn read(database: &str) -> Result<Self, Error> {
        const VARIABLES: [&str; 5] = [
            "sql_mode",
            "foreign_key_checks",
            "unique_checks",
            "collation_server",
            "explicit_defaults_for_timestamp",
        ];
        let select = format!(
            "SELECT VERSION(), {}",
            VARIABLES.map(|v| format!("@@SESSION.{v}")).join(", ")
        );
        let rows = sql::query(database, Statement::new(select, Vec::new()), 1)
            .map_err(sql::SqlError::into_error)?;
        let row = rows.into_iter().next().unwrap_or_default();
        let text = |v: Option<&SqlValue>| match v {
            Some(SqlValue::Text(t)) => t.clone(),
            Some(SqlValue::Int(i)) => i.to_string(),
            Some(SqlValue::Uint(u)) => u.to_string(),
            _ => String::new(),
        };
        let version = text(row.first()).to_ascii_lowercase();
        let defaults = VARIABLES
            .iter()
            .enumerate()
            .map(|(i, v)| (v.to_string(), text(row.get(i + 1))))
            .collect();
        Ok(Self {
            mariadb: version.contains("mariadb"),
            defaults,
        })
    }

    /// Whether the sink's sessions have `name` at `value` already.
    fn has(&self, name: &str, value: &str) -> bool {
        self.defaults.iter().any(|(n, v)| {
            n == name
                && if name == "sql_mode" {
                    let set = |s: &str| {
                        let mut m: Vec<String> = s
                            .split(',')
                            .filter(|x| !x.is_empty())
                            .map(str::to_ascii_uppercase)
                            .collect();
                        m.sort();
                        m
                    };
                    set(v) == set(value)
                } else {
                    v.eq_ignore_ascii_case(value)
                }
        })
    }
}

/// Session variables a replayed DDL takes from upstream, per target kind.
fn replayed_variable(name: &str, server: &Server) -> bool {
    matches!(
        name,
        "sql_mode"
            | "foreign_key_checks"
            | "unique_checks"
            | "time_zone"
            | "collation_server"
            | "explicit_defaults_for_timestamp"
    ) || (!server.mariadb && name == "default_collation_for_utf8mb4")
}

/// `sql_mode` names the target does not know, dropped.
fn portable_sql_mode(modes: &str, server: &Server) -> String {
    const MYSQL_LACKS: &[&str] = &[
        "IGNORE_BAD_TABLE_OPTIONS",
        "EMPTY_STRING_IS_NULL",
        "SIMULTANEOUS_ASSIGNMENT",
        "TIME_ROUND_FRACTIONAL",
        "NO_AUTO_CREATE_USER",
        "MYSQL323",
        "MYSQL40",
        "POSTGRESQL",
        "ORACLE",
        "MSSQL",
        "DB2",
        "MAXDB",
        "NO_KEY_OPTIONS",
        "NO_TABLE_OPTIONS",
        "NO_FIELD_OPTIONS",
    ];
    const MARIADB_LACKS: &[&str] = &["TIME_TRUNCATE_FRACTIONAL"];
    let lacks = if server.mariadb {
        MARIADB_LACKS
    } else {
        MYSQL_LACKS
    };
    modes
        .split(',')
        .filter(|m| !m.is_empty() && !lacks.contains(m))
        .collect::<Vec<_>>()
        .join(",")
}

/// `'text'` with its quotes doubled (settings never hold a backslash: see
/// [`settings`]), read the same under every `sql_mode`.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// The upstream session settings of `event` the target takes, as
/// `name = 'value'`.
fn settings(event: &DdlEvent, server: &Server) -> Vec<(String, String)> {
    event
        .session
        .iter()
        .filter(|(name, value)| replayed_variable(name, server) && !value.contains('\\'))
        .map(|(name, value)| {
            let value = if name == "sql_mode" {
                portable_sql_mode(value, server)
            } else {
                value.clone()
            };
            (name.clone(), value)
        })
        .filter(|(name, value)| !server.has(name, value))
        .collect()
}

/// The group that runs `query` for `event`: in its current database, under
/// its session settings.
fn group(
    applier: &Applier<Mysql>,
    server: &Server,
    event: &DdlEvent,
    query: &str,
) -> Vec<Statement> {
    let config = applier.config();
    let mut out = Vec::new();
    if !event.default_schema.is_empty() {
        let (schema, _) = config.target(&event.default_schema, "");
        // A statement about a database itself runs without creating it first:
        // creating the database first would give it the server's default
        // character set and make `CREATE DATABASE ... CHARACTER SET ...` a
        // no-op.
        if !event.kind.ends_with(" database") || schema != event.schema_name {
            out.push(Statement::new(
                format!("CREATE DATABASE IF NOT EXISTS {}", Mysql::ident(&schema)),
                Vec::new(),
            ));
            out.push(Statement::new(
                format!("USE {}", Mysql::ident(&schema)),
                Vec::new(),
            ));
        }
    }
    let settings = settings(event, server);
    if settings.is_empty() {
        out.push(Statement::new(query, Vec::new()));
    } else if server.mariadb {
        let list: Vec<String> = settings
            .iter()
            .map(|(n, v)| format!("{n} = {}", quoted(v)))
            .collect();
        out.push(Statement::new(
            format!("SET STATEMENT {} FOR {query}", list.join(", ")),
            Vec::new(),
        ));
    } else {
        for (n, v) in &settings {
            out.push(Statement::new(
                format!("SET SESSION {n} = {}", quoted(v)),
                Vec::new(),
            ));
        }
        out.push(Statement::new(query, Vec::new()));
        for (n, _) in &settings {
            let back = if n == "time_zone" {
                "'+00:00'".to_string()
            } else {
                "DEFAULT".to_string()
            };
            out.push(Statement::new(
                format!("SET SESSION {n} = {back}"),
                Vec::new(),
            ));
        }
    }
    out
}

/// Applies `event` downstream once.
pub fn apply(applier: &mut Applier<Mysql>, server: &Server, event: &DdlEvent) -> Result<(), Error> {
    if let Some((_, why)) = NOT_REPLAYED.iter().find(|(k, _)| *k == event.kind) {
        log(
            Level::Info,
            &format!(
                "DDL at {} ({}) not replayed: {why}",
                event.commit_ts, event.kind
            ),
        );
        return Ok(());
    }
    if applier.ddl_applied(event)? {
        log(
            Level::Info,
            &format!("DDL at {} applied already; skipped", event.commit_ts),
        );
        return Ok(());
    }
    let database = applier.config().database.clone();
    let mut query = event.query.clone();
    let mut result = sql::execute(&database, vec![group(applier, server, event, &query)]);
    if let Err(e) = &result
        && e.code == DEFINER_DENIED
        && let Some(without) = without_definer(&query)
    {
        log(
            Level::Warn,
            &format!(
                "DDL at {} names a DEFINER the sink's user may not set ({}); created with the sink's user as its definer instead",
                event.commit_ts, e.message
            ),
        );
        query = without;
        result = sql::execute(&database, vec![group(applier, server, event, &query)]);
    }
    match result {
        Ok(_) => applier.ddl_done(event),
        // A DDL delivered again without a record: what it does is done.
        Err(e) if ALREADY_APPLIED.contains(&e.code) => {
            log(
                Level::Info,
                &format!(
                    "DDL at {} already applied ({}); skipped",
                    event.commit_ts, e.message
                ),
            );
            applier.ddl_done(event)
        }
        Err(e) => Err(ddl_error(event, e)),
    }
}

/// A DDL's failure, saying which DDL (its commit ts, to skip it by).
pub fn ddl_error(event: &DdlEvent, e: sql::SqlError) -> Error {
    let message = format!(
        "the DDL at commit ts {} ({}) failed downstream: {}",
        event.commit_ts, event.kind, e.message
    );
    match e.kind {
        sql::ErrorKind::Retryable => Error::retryable(message),
        _ => Error::fatal(message),
    }
}

/// `query` without its `DEFINER = user@host` clause, if it has one before the
/// object it creates.
fn without_definer(query: &str) -> Option<String> {
    let upper = query.to_ascii_uppercase();
    let at = upper.find("DEFINER")?;
    // Only in the statement's head: before AS / BEGIN / the body.
    let head_end = ["VIEW", "TRIGGER", "PROCEDURE", "FUNCTION", "EVENT"]
        .iter()
        .filter_map(|w| upper.find(w))
        .min()?;
    if at > head_end {
        return None;
    }
    let bytes = query.as_bytes();
    let mut i = at + "DEFINER".len();
    let skip_space = |i: &mut usize| {
        while *i < bytes.len() && bytes[*i].is_ascii_whitespace() {
            *i += 1;
        }
    };
    skip_space(&mut i);
    if bytes.get(i) != Some(&b'=') {
        return None;
    }
    i += 1;
    skip_space(&mut i);
    // user[@host], each part quoted with ` ' " or bare; or CURRENT_USER[()].
    let part = |i: &mut usize| match bytes.get(*i) {
        Some(&q) if q == b'`' || q == b'\'' || q == b'"' => {
            *i += 1;
            while *i < bytes.len() {
                if bytes[*i] == q {
                    if bytes.get(*i + 1) == Some(&q) {
                        *i += 2;
                        continue;
                    }
                    *i += 1;
                    break;
                }
                *i += 1;
            }
        }
        _ => {
            while *i < bytes.len()
                && (bytes[*i].is_ascii_alphanumeric() || b"_$.%()-".contains(&bytes[*i]))
            {
                *i += 1;
            }
        }
    };
    part(&mut i);
    if bytes.get(i) == Some(&b'@') {
        i += 1;
        part(&mut i);
    }
    Some(format!("{}{}", &query[..at], query[i..].trim_start()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: &str, session: &[(&str, &str)]) -> DdlEvent {
        let mut e =
            DdlEvent::new(7, "shop", "t", "ALTER TABLE t MODIFY c VARCHAR(2)").with_kind(kind);
        e.session = session
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        e
    }

    fn config() -> sql_apply::Config {
        serde_json::from_str(r#"{"database": "target"}"#).unwrap()
    }

    fn sql(group: &[Statement]) -> Vec<&str> {
        group.iter().map(|s| s.sql.as_str()).collect()
    }

    #[test]
    fn a_ddl_runs_in_its_database_under_its_session_for_that_statement_only() {
        let applier = Applier::<Mysql>::new(config());
        let e = event(
            "alter table",
            &[
                ("sql_mode", "STRICT_TRANS_TABLES,TIME_TRUNCATE_FRACTIONAL"),
                ("foreign_key_checks", "0"),
                ("time_zone", "+05:00"),
                ("character_set_client", "latin1"),
                ("collation_server", "latin1_swedish_ci"),
            ],
        );
        let mariadb = Server {
            mariadb: true,
            defaults: vec![("unique_checks".into(), "1".into())],
        };
        assert_eq!(
            sql(&group(&applier, &mariadb, &e, &e.query)),
            [
                "CREATE DATABASE IF NOT EXISTS `shop`",
                "USE `shop`",
                "SET STATEMENT sql_mode = 'STRICT_TRANS_TABLES', foreign_key_checks = '0', \
                 time_zone = '+05:00', collation_server = 'latin1_swedish_ci' FOR \
                 ALTER TABLE t MODIFY c VARCHAR(2)",
            ]
        );
        let mysql = Server {
            mariadb: false,
            defaults: Vec::new(),
        };
        assert_eq!(
            sql(&group(&applier, &mysql, &e, &e.query)),
            [
                "CREATE DATABASE IF NOT EXISTS `shop`",
                "USE `shop`",
                "SET SESSION sql_mode = 'STRICT_TRANS_TABLES,TIME_TRUNCATE_FRACTIONAL'",
                "SET SESSION foreign_key_checks = '0'",
                "SET SESSION time_zone = '+05:00'",
                "SET SESSION collation_server = 'latin1_swedish_ci'",
                "ALTER TABLE t MODIFY c VARCHAR(2)",
                "SET SESSION sql_mode = DEFAULT",
                "SET SESSION foreign_key_checks = DEFAULT",
                "SET SESSION time_zone = '+00:00'",
                "SET SESSION collation_server = DEFAULT",
            ]
        );
        // A database statement runs alone.
        let mut create = DdlEvent::new(8, "d2", "", "CREATE DATABASE d2 CHARACTER SET latin1")
            .with_kind("create database");
        create.default_schema = "d2".into();
        assert_eq!(
            sql(&group(&applier, &mariadb, &create, &create.query)),
            ["CREATE DATABASE d2 CHARACTER SET latin1"]
        );
    }

    #[test]
    fn a_definer_clause_is_taken_out_whatever_its_quoting() {
        assert_eq!(
            without_definer(
                "CREATE ALGORITHM=UNDEFINED DEFINER=`root`@`localhost` SQL SECURITY DEFINER VIEW `v` AS select 1"
            )
            .as_deref(),
            Some("CREATE ALGORITHM=UNDEFINED SQL SECURITY DEFINER VIEW `v` AS select 1")
        );
        assert_eq!(
            without_definer("CREATE DEFINER = 'a''b'@'%' PROCEDURE p() SELECT 1").as_deref(),
            Some("CREATE PROCEDURE p() SELECT 1")
        );
        assert_eq!(
            without_definer(
                "CREATE DEFINER=CURRENT_USER() TRIGGER t BEFORE INSERT ON x FOR EACH ROW SET @a = 1"
            )
            .as_deref(),
            Some("CREATE TRIGGER t BEFORE INSERT ON x FOR EACH ROW SET @a = 1")
        );
        assert_eq!(without_definer("CREATE VIEW v AS SELECT 'DEFINER'"), None);
        assert_eq!(without_definer("CREATE TABLE t (a int)"), None);
    }

    #[test]
    fn settings_the_sink_has_already_are_not_set() {
        let e = event(
            "alter table",
            &[
                ("sql_mode", "NO_ENGINE_SUBSTITUTION,STRICT_TRANS_TABLES"),
                ("unique_checks", "1"),
                ("time_zone", "x\\y"),
                ("foreign_key_checks", "0"),
            ],
        );
        let server = Server {
            mariadb: true,
            defaults: vec![
                (
                    "sql_mode".into(),
                    "STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION".into(),
                ),
                ("unique_checks".into(), "1".into()),
                ("foreign_key_checks".into(), "1".into()),
            ],
        };
        assert_eq!(
            settings(&e, &server),
            [("foreign_key_checks".to_string(), "0".to_string())]
        );
        assert_eq!(quoted("it's"), "'it''s'");
    }
}
