//! What the source asks of a server, checked on every connect (and so at create
//! time): binary logging in ROW format with full images and full metadata,
//! no binlog compression, and a user allowed to read it. Each failure says which
//! setting or grant to change.

use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use super::MysqlError;
use super::decode::{Collation, Collations, Flavor};

/// What a connect learned about the server.
#[derive(Debug, Clone)]
pub(crate) struct ServerInfo {
    pub flavor: Flavor,
    pub version: String,
    pub collations: Collations,
    /// Global settings a DDL runs under unless its session changed them.
    pub session_defaults: Vec<(String, String)>,
}

fn setting(e: impl Into<String>) -> MysqlError {
    MysqlError::Setup(e.into())
}

/// Checks the server's settings and the user's grants; `Err` says what to change.
pub(crate) async fn check(conn: &mut Conn) -> Result<ServerInfo, MysqlError> {
    let version: String = conn
        .query_first("SELECT VERSION()")
        .await
        .map_err(MysqlError::query)?
        .unwrap_or_default();
    let flavor = if version.to_ascii_lowercase().contains("mariadb") {
        Flavor::MariaDb
    } else {
        Flavor::MySql
    };
    let vars: Vec<(String, String)> = conn
        .query(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'binlog_format', \
             'binlog_row_image', 'binlog_row_metadata', 'log_bin_compress')",
        )
        .await
        .map_err(MysqlError::query)?;
    let var = |name: &str| {
        vars.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.to_ascii_uppercase())
    };
    if var("log_bin").as_deref() != Some("ON") {
        return Err(setting(
            "binary logging is off on the server: start it with log_bin (e.g. --log-bin=mysql-bin) and a server_id",
        ));
    }
    match var("binlog_format").as_deref() {
        Some("ROW") => {}
        other => {
            return Err(setting(format!(
                "binlog_format is {}; set binlog_format=ROW (SET GLOBAL binlog_format=ROW, and in the server's config)",
                other.unwrap_or("unknown")
            )));
        }
    }
    match var("binlog_row_image").as_deref() {
        Some("FULL") => {}
        other => {
            return Err(setting(format!(
                "binlog_row_image is {}; set binlog_row_image=FULL so that every row carries every column",
                other.unwrap_or("unknown")
            )));
        }
    }
    match var("binlog_row_metadata").as_deref() {
        Some("FULL") => {}
        None => {
            return Err(setting(format!(
                "the server ({version}) has no binlog_row_metadata: Sluice needs MariaDB 10.5+ or MySQL 8.0+ with binlog_row_metadata=FULL"
            )));
        }
        Some(other) => {
            return Err(setting(format!(
                "binlog_row_metadata is {other}; set binlog_row_metadata=FULL (without it the binlog has no column names and unsigned columns read as signed)"
            )));
        }
    }
    if var("log_bin_compress").as_deref() == Some("ON") {
        return Err(setting(
            "log_bin_compress is ON; set log_bin_compress=OFF (compressed row events cannot be read)",
        ));
    }
    check_grants(conn, flavor).await?;
    let collations = collations(conn).await?;
    let session_defaults = session_defaults(conn).await?;
    Ok(ServerInfo {
        flavor,
        version,
        collations,
        session_defaults,
    })
}

async fn check_grants(conn: &mut Conn, flavor: Flavor) -> Result<(), MysqlError> {
    let grants: Vec<String> = conn.query("SHOW GRANTS").await.map_err(MysqlError::query)?;
    let global: Vec<String> = grants
        .iter()
        .map(|g| g.to_ascii_uppercase())
        .filter(|g| g.contains(" ON *.* "))
        .collect();
    let has = |what: &str| {
        global
            .iter()
            .any(|g| g.contains("ALL PRIVILEGES") || g.contains(what))
    };
    let mut missing = Vec::new();
    if !has("REPLICATION SLAVE") && !has("REPLICATION REPLICA") {
        missing.push("REPLICATION SLAVE");
    }
    let client = match flavor {
        Flavor::MariaDb => has("BINLOG MONITOR") || has("REPLICATION CLIENT") || has("SUPER"),
        Flavor::MySql => has("REPLICATION CLIENT") || has("SUPER"),
    };
    if !client {
        missing.push(match flavor {
            Flavor::MariaDb => "BINLOG MONITOR (REPLICATION CLIENT)",
            Flavor::MySql => "REPLICATION CLIENT",
        });
    }
    if !global.iter().any(|g| {
        g.contains("ALL PRIVILEGES")
            || g.strip_prefix("GRANT ")
                .and_then(|g| g.split(" ON ").next())
                .is_some_and(|privs| privs.split(',').any(|p| p.trim() == "SELECT"))
    }) {
        missing.push("SELECT");
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(MysqlError::Setup(format!(
        "the replication user lacks {}: GRANT {} ON *.* TO the user",
        missing.join(", "),
        missing
            .iter()
            .map(|m| m.split(" (").next().unwrap_or(m))
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

/// Every collation the server has, by id: `information_schema.COLLATIONS`,
/// and on MariaDB 10.10+ `COLLATION_CHARACTER_SET_APPLICABILITY`, which alone
/// has the ids of the collations that apply to several character sets (the
/// UCA-14.0 ones, `utf8mb4_uca1400_ai_ci` and its kin).
async fn collations(conn: &mut Conn) -> Result<Collations, MysqlError> {
    let rows: Vec<(u64, String, String, u64)> = conn
        .query(
            "SELECT c.ID, c.COLLATION_NAME, c.CHARACTER_SET_NAME, s.MAXLEN \
             FROM information_schema.COLLATIONS c \
             JOIN information_schema.CHARACTER_SETS s ON c.CHARACTER_SET_NAME = s.CHARACTER_SET_NAME \
             WHERE c.ID IS NOT NULL",
        )
        .await
        .map_err(MysqlError::query)?;
    let mut map = Collations::default();
    let mut add = |id: u64, name: String, charset: String, maxlen: u64| {
        if let (Ok(id), Ok(maxlen)) = (u16::try_from(id), u8::try_from(maxlen)) {
            map.0.insert(
                id,
                Collation {
                    name,
                    charset,
                    maxlen,
                },
            );
        }
    };
    for (id, name, charset, maxlen) in rows {
        add(id, name, charset, maxlen);
    }
    // MariaDB 10.10+: ids by character set and full collation name. Servers
    // without the ID column (MySQL, older MariaDB) answer with error 1054.
    let applicable: Result<Vec<(u64, String, String, u64)>, _> = conn
        .query(
            "SELECT a.ID, a.FULL_COLLATION_NAME, a.CHARACTER_SET_NAME, s.MAXLEN \
             FROM information_schema.COLLATION_CHARACTER_SET_APPLICABILITY a \
             JOIN information_schema.CHARACTER_SETS s ON a.CHARACTER_SET_NAME = s.CHARACTER_SET_NAME \
             WHERE a.ID IS NOT NULL",
        )
        .await;
    match applicable {
        Ok(rows) => {
            for (id, name, charset, maxlen) in rows {
                add(id, name, charset, maxlen);
            }
        }
        Err(mysql_async::Error::Server(e)) if e.code == 1054 || e.code == 1109 => {}
        Err(e) => return Err(MysqlError::query(e)),
    }
    // Single-byte charsets this source has no converter for (dec8, swe7, hp8,
    // armscii8, keybcs2, cp850, cp852, macce, geostd8, ...): each byte as the
    // server converts it.
    let mut missing: Vec<String> = map
        .0
        .values()
        .filter(|c| c.maxlen == 1 && super::decode::charset(&c.charset).is_err())
        .map(|c| c.charset.clone())
        .collect();
    missing.sort();
    missing.dedup();
    for name in missing {
        if let Some(table) = charset_table(conn, &name).await? {
            map.1.insert(name, table);
        }
    }
    Ok(map)
}

/// Every byte of single-byte charset `name` as the server converts it to
/// UTF-8; kept once per process.
async fn charset_table(
    conn: &mut Conn,
    name: &str,
) -> Result<Option<&'static [char; 256]>, MysqlError> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static TABLES: OnceLock<Mutex<HashMap<String, &'static [char; 256]>>> = OnceLock::new();
    let tables = TABLES.get_or_init(Mutex::default);
    if let Some(t) = tables.lock().ok().and_then(|t| t.get(name).copied()) {
        return Ok(Some(t));
    }
    // A charset name is a plain word (it came from information_schema).
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Ok(None);
    }
    let all: String = (0..=0xFFu32).map(|b| format!("{b:02X}")).collect();
    let text: Option<String> = conn
        .query_first(format!(
            "SELECT CONVERT(CONVERT(UNHEX('{all}') USING {name}) USING utf8mb4)"
        ))
        .await
        .map_err(MysqlError::query)?;
    let chars: Vec<char> = text.unwrap_or_default().chars().collect();
    let Ok(table) = <[char; 256]>::try_from(chars) else {
        return Ok(None);
    };
    let table: &'static [char; 256] = Box::leak(Box::new(table));
    if let Ok(mut t) = tables.lock() {
        t.insert(name.to_string(), table);
    }
    Ok(Some(table))
}

/// Server settings a replayed DDL needs that the binlog does not carry: the
/// global values, which a session that did not change them ran under.
async fn session_defaults(conn: &mut Conn) -> Result<Vec<(String, String)>, MysqlError> {
    let mut out = Vec::new();
    // MariaDB's query events do not carry it (MySQL's do); it decides whether a
    // TIMESTAMP column without a default gets CURRENT_TIMESTAMP.
    let explicit: Result<Option<String>, _> = conn
        .query_first("SELECT @@GLOBAL.explicit_defaults_for_timestamp")
        .await;
    match explicit {
        Ok(Some(v)) => out.push((
            "explicit_defaults_for_timestamp".to_string(),
            if v == "1" || v.eq_ignore_ascii_case("ON") {
                "1".to_string()
            } else {
                "0".to_string()
            },
        )),
        Ok(None) => {}
        // Unknown variable: an old server.
        Err(mysql_async::Error::Server(e)) if e.code == 1193 => {}
        Err(e) => return Err(MysqlError::query(e)),
    }
    Ok(out)
}
