//! The session a statement ran under upstream, read from its query event's
//! status variables: `sql_mode`, `foreign_key_checks`, `unique_checks`,
//! character sets and collations, `time_zone`, auto-increment steps. A sink
//! replays a DDL under the same settings, as a replica does (an `ALTER TABLE
//! ... MODIFY` that narrows a column under a non-strict `sql_mode` upstream
//! truncates values; under the sink's strict mode it would fail).

use mysql_common::binlog::events::{QueryEvent, StatusVarVal};

use super::decode::{Collations, Flavor};

/// `OPTION_NO_FOREIGN_KEY_CHECKS` in a query event's flags2.
const NO_FOREIGN_KEY_CHECKS: u32 = 0x0400_0000;
/// `OPTION_RELAXED_UNIQUE_CHECKS` in a query event's flags2.
const RELAXED_UNIQUE_CHECKS: u32 = 0x0800_0000;

/// `sql_mode` bits both servers give the same name, from bit 0 up; `None`
/// for bits whose name depends on the server.
const MODES: [Option<&str>; 32] = [
    Some("REAL_AS_FLOAT"),
    Some("PIPES_AS_CONCAT"),
    Some("ANSI_QUOTES"),
    Some("IGNORE_SPACE"),
    None, // MariaDB IGNORE_BAD_TABLE_OPTIONS; unused in MySQL
    Some("ONLY_FULL_GROUP_BY"),
    Some("NO_UNSIGNED_SUBTRACTION"),
    Some("NO_DIR_IN_CREATE"),
    Some("POSTGRESQL"),
    Some("ORACLE"),
    Some("MSSQL"),
    Some("DB2"),
    Some("MAXDB"),
    Some("NO_KEY_OPTIONS"),
    Some("NO_TABLE_OPTIONS"),
    Some("NO_FIELD_OPTIONS"),
    Some("MYSQL323"),
    Some("MYSQL40"),
    Some("ANSI"),
    Some("NO_AUTO_VALUE_ON_ZERO"),
    Some("NO_BACKSLASH_ESCAPES"),
    Some("STRICT_TRANS_TABLES"),
    Some("STRICT_ALL_TABLES"),
    Some("NO_ZERO_IN_DATE"),
    Some("NO_ZERO_DATE"),
    Some("ALLOW_INVALID_DATES"),
    Some("ERROR_FOR_DIVISION_BY_ZERO"),
    Some("TRADITIONAL"),
    Some("NO_AUTO_CREATE_USER"),
    Some("HIGH_NOT_PRECEDENCE"),
    Some("NO_ENGINE_SUBSTITUTION"),
    Some("PAD_CHAR_TO_FULL_LENGTH"),
];

/// `sql_mode` bits as the server's `@@sql_mode` spells them, comma-separated.
pub(crate) fn sql_mode_names(bits: u64, flavor: Flavor) -> String {
    let mut names: Vec<&str> = Vec::new();
    for (i, name) in MODES.iter().enumerate() {
        if bits & (1 << i) == 0 {
            continue;
        }
        match (name, flavor, i) {
            (Some(n), _, _) => names.push(n),
            (None, Flavor::MariaDb, 4) => names.push("IGNORE_BAD_TABLE_OPTIONS"),
            _ => {}
        }
    }
    let high: &[(u32, &str)] = match flavor {
        Flavor::MariaDb => &[
            (32, "EMPTY_STRING_IS_NULL"),
            (33, "SIMULTANEOUS_ASSIGNMENT"),
            (34, "TIME_ROUND_FRACTIONAL"),
        ],
        Flavor::MySql => &[(32, "TIME_TRUNCATE_FRACTIONAL")],
    };
    for &(bit, name) in high {
        if bits & (1 << bit) != 0 {
            names.push(name);
        }
    }
    names.join(",")
}

/// The session settings of `q`, as (variable, value); `defaults` are the
/// upstream's global values of settings the event does not carry.
pub(crate) fn session_of(
    q: &QueryEvent<'_>,
    flavor: Flavor,
    collations: &Collations,
    defaults: &[(String, String)],
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut set = |name: &str, value: String| {
        if let Some(slot) = out.iter_mut().find(|(n, _)| n == name) {
            slot.1 = value;
        } else {
            out.push((name.to_string(), value));
        }
    };
    for (name, value) in defaults {
        set(name, value.clone());
    }
    let collation = |id: u16| collations.get(id).map(|c| c.name.clone());
    let flag = |on: bool| if on { "1" } else { "0" }.to_string();
    for var in q.status_vars().iter() {
        let Ok(value) = var.get_value() else {
            continue;
        };
        match value {
            StatusVarVal::Flags2(f) => {
                set("foreign_key_checks", flag(f.0 & NO_FOREIGN_KEY_CHECKS == 0));
                set("unique_checks", flag(f.0 & RELAXED_UNIQUE_CHECKS == 0));
            }
            StatusVarVal::SqlMode(m) => set("sql_mode", sql_mode_names(m.0, flavor)),
            StatusVarVal::AutoIncrement { increment, offset } if (increment, offset) != (1, 1) => {
                set("auto_increment_increment", increment.to_string());
                set("auto_increment_offset", offset.to_string());
            }
            StatusVarVal::Charset {
                charset_client,
                collation_connection,
                collation_server,
            } => {
                // character_set_client is stored as a collation id; the variable
                // takes a character set name.
                if let Some(c) = collations.get(charset_client) {
                    set("character_set_client", c.charset.clone());
                }
                if let Some(name) = collation(collation_connection) {
                    set("collation_connection", name);
                }
                if let Some(name) = collation(collation_server) {
                    set("collation_server", name);
                }
            }
            StatusVarVal::TimeZone(tz) => {
                let tz = String::from_utf8_lossy(tz.as_bytes()).into_owned();
                if !tz.is_empty() {
                    set("time_zone", tz);
                }
            }
            StatusVarVal::ExplicitDefaultsForTimestamp(on) => {
                set("explicit_defaults_for_timestamp", flag(on));
            }
            StatusVarVal::DefaultCollationForUtf8mb4(id) => {
                if let Some(name) = collation(id) {
                    set("default_collation_for_utf8mb4", name);
                }
            }
            _ => {}
        }
    }
    out
}

/// The character set the statement's text is in: the session's
/// `character_set_client`, as a charset name (utf8mb4 when not given).
pub(crate) fn client_charset<'a>(q: &QueryEvent<'_>, collations: &'a Collations) -> &'a str {
    for var in q.status_vars().iter() {
        if let Ok(StatusVarVal::Charset { charset_client, .. }) = var.get_value()
            && let Some(c) = collations.get(charset_client)
        {
            return &c.charset;
        }
    }
    "utf8mb4"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_mode_bits_read_as_each_server_names_them() {
        // MariaDB 10.11's default: STRICT_TRANS_TABLES, ERROR_FOR_DIVISION_BY_ZERO,
        // NO_AUTO_CREATE_USER, NO_ENGINE_SUBSTITUTION.
        let default = (1 << 21) | (1 << 26) | (1 << 28) | (1 << 30);
        assert_eq!(
            sql_mode_names(default, Flavor::MariaDb),
            "STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_AUTO_CREATE_USER,NO_ENGINE_SUBSTITUTION"
        );
        assert_eq!(sql_mode_names(0, Flavor::MariaDb), "");
        assert_eq!(
            sql_mode_names((1 << 4) | (1 << 32), Flavor::MariaDb),
            "IGNORE_BAD_TABLE_OPTIONS,EMPTY_STRING_IS_NULL"
        );
        assert_eq!(
            sql_mode_names((1 << 4) | (1 << 32), Flavor::MySql),
            "TIME_TRUNCATE_FRACTIONAL"
        );
        assert_eq!(
            sql_mode_names((1 << 19) | (1 << 25), Flavor::MySql),
            "NO_AUTO_VALUE_ON_ZERO,ALLOW_INVALID_DATES"
        );
    }
}
