//! `[source]` with `type = "mysql"`: a MySQL or MariaDB server's binlog.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::bytes::ByteSize;
use crate::error::{ConfigError, invalid};

/// `[source]` with `type = "mysql"`.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct MysqlConfig {
    /// `mysql://user:password@host:port`: a user with REPLICATION SLAVE,
    /// REPLICATION CLIENT (MariaDB: BINLOG MONITOR) and SELECT. The password is
    /// never shown: logs, errors and status show [`MysqlConfig::redacted_url`].
    pub url: String,
    /// The replica server id this reader registers with: unique among the
    /// server's replicas. 0 (the default) picks a random one per connection.
    #[serde(default)]
    pub server_id: u32,
    /// Where reading starts when the changefeed has no checkpoint yet: `now`,
    /// `gtid:<domain-server-seq,...>`, `file:<binlog file>:<offset>`, or
    /// `time:<YYYY-MM-DD HH:MM:SS>` (UTC). A server pins `now` and `time:` to a
    /// GTID position when the changefeed is created.
    #[serde(default)]
    pub start_position: StartPosition,
    /// Resume by GTID (the default); `false` resumes by binlog file and offset.
    #[serde(default = "yes")]
    pub use_gtid: bool,
    /// How long connecting may take, in milliseconds.
    #[serde(default = "default_connect_ms")]
    pub connect_timeout_ms: u64,
    /// A transaction larger than this is handed on in parts of about this
    /// size, so that it is never held whole.
    #[serde(default = "default_part_bytes")]
    pub txn_part_bytes: ByteSize,
    /// The heartbeat the server sends when it has nothing to send, in
    /// milliseconds; the resolved ts moves with it.
    #[serde(default = "default_heartbeat_ms")]
    pub heartbeat_ms: u64,
    /// End once the binlog is read up to where it ended when reading began (a
    /// one-off copy, or a benchmark); the changefeed then finishes.
    #[serde(default)]
    pub stop_at_end: bool,
}

fn yes() -> bool {
    true
}
fn default_connect_ms() -> u64 {
    10_000
}
fn default_part_bytes() -> ByteSize {
    ByteSize(4 << 20)
}
fn default_heartbeat_ms() -> u64 {
    1_000
}

/// Longest `url`.
pub const MAX_URL_CHARS: usize = 2048;
/// `connect-timeout-ms`: 100 ..= 600000.
pub const MAX_CONNECT_MS: u64 = 600_000;
/// `txn-part-bytes`: 64 KiB ..= 256 MiB.
pub const MIN_PART_BYTES: u64 = 64 << 10;
/// Largest `txn-part-bytes`.
pub const MAX_PART_BYTES: u64 = 256 << 20;
/// `heartbeat-ms`: 100 ..= 60000.
pub const MAX_HEARTBEAT_MS: u64 = 60_000;

impl fmt::Debug for MysqlConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlConfig")
            .field("url", &self.redacted_url())
            .field("server_id", &self.server_id)
            .field("start_position", &self.start_position)
            .field("use_gtid", &self.use_gtid)
            .finish_non_exhaustive()
    }
}

impl MysqlConfig {
    /// A config reading `url` with every default.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            server_id: 0,
            start_position: StartPosition::Now,
            use_gtid: true,
            connect_timeout_ms: default_connect_ms(),
            txn_part_bytes: default_part_bytes(),
            heartbeat_ms: default_heartbeat_ms(),
            stop_at_end: false,
        }
    }

    /// The url with its password replaced by `***`.
    pub fn redacted_url(&self) -> String {
        redact_url(&self.url)
    }

    /// Every number against its range, the url's shape (no I/O).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.url.chars().count() > MAX_URL_CHARS || self.url.chars().any(char::is_control) {
            return invalid!(
                "source.url must be at most {MAX_URL_CHARS} characters without control characters"
            );
        }
        let Some(rest) = self.url.strip_prefix("mysql://") else {
            return invalid!(
                "source.url must look like mysql://user:password@host:3306 (it is {})",
                self.redacted_url()
            );
        };
        let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
        let host = host.split(['/', '?']).next().unwrap_or("");
        if host.is_empty() {
            return invalid!("source.url names no host: {}", self.redacted_url());
        }
        if !(100..=MAX_CONNECT_MS).contains(&self.connect_timeout_ms) {
            return invalid!(
                "source.connect-timeout-ms is {}; it must be between 100 and {MAX_CONNECT_MS}",
                self.connect_timeout_ms
            );
        }
        if !(MIN_PART_BYTES..=MAX_PART_BYTES).contains(&self.txn_part_bytes.0) {
            return invalid!(
                "source.txn-part-bytes is {} bytes; it must be between 64KiB and 256MiB",
                self.txn_part_bytes.0
            );
        }
        if !(100..=MAX_HEARTBEAT_MS).contains(&self.heartbeat_ms) {
            return invalid!(
                "source.heartbeat-ms is {}; it must be between 100 and {MAX_HEARTBEAT_MS}",
                self.heartbeat_ms
            );
        }
        if let StartPosition::Gtid(_) = &self.start_position
            && !self.use_gtid
        {
            return invalid!(
                "source.start-position is a GTID position but source.use-gtid is false"
            );
        }
        Ok(())
    }
}

/// `url` with the password (between `user:` and `@`) replaced by `***`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((auth, host)) = rest.rsplit_once('@') else {
        return url.to_string();
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

/// Words that mark a key's value as a secret (`bearer-token`, `password`,
/// `x-api-key`, `authorization`, ...), compared in lower case.
const SECRET_KEY_WORDS: [&str; 7] = [
    "token",
    "password",
    "secret",
    "api-key",
    "apikey",
    "authorization",
    "credential",
];

/// `text` (a changefeed file, a log line) with the password of every
/// `scheme://user:password@host` in it replaced by `***`, and the value of every
/// TOML line `key = value` whose key names a secret (a token, a password, an API
/// key; plugins' options such as sink-webhook's `bearer-token` and `headers`).
pub fn redact_secrets(text: &str) -> String {
    let urls = redact_url_passwords(text);
    let mut out = String::with_capacity(urls.len());
    for line in urls.split_inclusive('\n') {
        match line.split_once('=') {
            Some((key, value))
                if !key.contains(['[', '"', '\'', '{'])
                    && SECRET_KEY_WORDS.iter().any(|w| {
                        // A key that names a secret, or an inline table holding one.
                        key.to_ascii_lowercase().contains(w)
                            || (value.trim_start().starts_with('{')
                                && value.to_ascii_lowercase().contains(w))
                    }) =>
            {
                out.push_str(key);
                out.push_str("= \"***\"");
                if value.ends_with('\n') {
                    out.push('\n');
                }
            }
            _ => out.push_str(line),
        }
    }
    out
}

fn redact_url_passwords(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '/' | '?' | '#'))
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match (authority.rfind('@'), authority.find(':')) {
            (Some(at), Some(colon)) if colon < at => {
                out.push_str(&authority[..colon]);
                out.push_str(":***");
                out.push_str(&authority[at..]);
            }
            _ => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// Where a binlog source starts when there is no checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum StartPosition {
    /// The server's current end.
    #[default]
    Now,
    /// After a MariaDB GTID position (`0-1-100,1-2-7`; empty: from the oldest binlog).
    Gtid(String),
    /// At a binlog file and offset (a transaction boundary).
    File {
        /// The binlog file name.
        name: String,
        /// The offset in it.
        pos: u64,
    },
    /// The first transaction committed at or after this time (`YYYY-MM-DD
    /// HH:MM:SS`, UTC), as seconds since the epoch.
    Time(i64),
}

impl fmt::Display for StartPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartPosition::Now => f.write_str("now"),
            StartPosition::Gtid(g) => write!(f, "gtid:{g}"),
            StartPosition::File { name, pos } => write!(f, "file:{name}:{pos}"),
            StartPosition::Time(secs) => write!(f, "time:{}", time_text(*secs)),
        }
    }
}

impl std::str::FromStr for StartPosition {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s == "now" {
            return Ok(StartPosition::Now);
        }
        if let Some(g) = s.strip_prefix("gtid:") {
            for part in g.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let nums: Vec<&str> = part.split('-').collect();
                let mariadb = nums.len() == 3
                    && nums[0].parse::<u32>().is_ok()
                    && nums[1].parse::<u32>().is_ok()
                    && nums[2].parse::<u64>().is_ok();
                if !mariadb && !is_mysql_gtid_entry(part) {
                    return Err(format!(
                        "`{part}` is neither a MariaDB GTID (domain-server-sequence, as in 0-1-100) nor a MySQL GTID set entry (uuid:1-5)"
                    ));
                }
            }
            return Ok(StartPosition::Gtid(g.trim().to_string()));
        }
        if let Some(f) = s.strip_prefix("file:") {
            let Some((name, pos)) = f.rsplit_once(':') else {
                return Err("write a file position as file:<binlog file>:<offset>".into());
            };
            let pos: u64 = pos
                .parse()
                .map_err(|_| format!("`{pos}` is not a binlog offset"))?;
            // Binlog offsets are 32-bit in the dump request.
            if name.is_empty()
                || name.len() > 512
                || name.contains(['/', '\\'])
                || pos < 4
                || pos > u64::from(u32::MAX)
            {
                return Err(
                    "write a file position as file:<binlog file name>:<offset from 4 to 4294967295>"
                        .into(),
                );
            }
            return Ok(StartPosition::File {
                name: name.to_string(),
                pos,
            });
        }
        if let Some(t) = s.strip_prefix("time:") {
            return parse_time(t.trim()).map(StartPosition::Time);
        }
        Err(format!(
            "`{s}` is not a start position: write now, gtid:0-1-100, file:mysql-bin.000001:4 or time:2026-01-01 00:00:00"
        ))
    }
}

/// `uuid:1-5:7`: one server's part of a MySQL GTID set.
fn is_mysql_gtid_entry(part: &str) -> bool {
    let mut pieces = part.split(':');
    let uuid = pieces.next().unwrap_or("");
    let hex: Vec<char> = uuid.chars().filter(|c| *c != '-').collect();
    let ranges: Vec<&str> = pieces.collect();
    hex.len() == 32
        && hex.iter().all(char::is_ascii_hexdigit)
        && !ranges.is_empty()
        && ranges.iter().all(|r| {
            let (a, b) = r.split_once('-').unwrap_or((r, r));
            matches!((a.parse::<u64>(), b.parse::<u64>()), (Ok(a), Ok(b)) if a >= 1 && b >= a)
        })
}

impl Serialize for StartPosition {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for StartPosition {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Seconds since the epoch of `YYYY-MM-DD HH:MM:SS` (UTC), before the year 3000.
fn parse_time(t: &str) -> Result<i64, String> {
    let bad = || format!("`{t}` is not a time: write YYYY-MM-DD HH:MM:SS (UTC)");
    let at = humantime::parse_rfc3339_weak(t).map_err(|_| bad())?;
    let secs = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| bad())?
        .as_secs();
    // 3000-01-01T00:00:00Z.
    if secs >= 32_503_680_000 {
        return Err(bad());
    }
    Ok(secs as i64)
}

/// `YYYY-MM-DD HH:MM:SS` of seconds since the epoch (UTC).
fn time_text(secs: i64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs.max(0) as u64);
    humantime::format_rfc3339_seconds(at)
        .to_string()
        .replace('T', " ")
        .trim_end_matches('Z')
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_positions_parse_and_print_back() {
        for s in [
            "now",
            "gtid:0-1-100,1-2-7",
            "gtid:",
            "file:mysql-bin.000003:1234",
            "time:2026-12-01 10:20:30",
        ] {
            let p: StartPosition = s.parse().unwrap();
            assert_eq!(p.to_string(), s);
        }
        assert_eq!(
            "time:1970-01-01 00:00:01".parse::<StartPosition>().unwrap(),
            StartPosition::Time(1)
        );
        for bad in [
            "later",
            "gtid:0-1",
            "gtid:4294967296-1-1",
            "file:x",
            "file:x:2",
            "file:../x:100",
            "file:x.000001:4294967296",
            "time:2026-02-30 00:00:00",
            "time:yesterday",
        ] {
            assert!(bad.parse::<StartPosition>().is_err(), "{bad}");
        }
    }

    #[test]
    fn secrets_in_files_are_redacted() {
        let text = "url = \"mysql://repl:p@ss:w0rd@db:3306\"\nother = \"http://host/x\"\nu = 'mysql://u@h'";
        let red = redact_secrets(text);
        assert!(!red.contains("w0rd"), "{red}");
        assert!(red.contains("mysql://repl:***@db:3306"), "{red}");
        assert!(
            red.contains("http://host/x") && red.contains("mysql://u@h"),
            "{red}"
        );
        let text = "[sink.config]\nurl = \"http://h/\"\nbearer-token = \"HUSH1\"\n[sink.config.headers]\nX-Api-Key = 'HUSH2'\nx-tenant = \"a\"\nh = { Authorization = \"HUSH3\" }\n";
        assert_eq!(
            redact_secrets(text),
            "[sink.config]\nurl = \"http://h/\"\nbearer-token = \"***\"\n[sink.config.headers]\nX-Api-Key = \"***\"\nx-tenant = \"a\"\nh = \"***\"\n"
        );
    }

    #[test]
    fn urls_are_checked_and_passwords_never_shown() {
        let c = MysqlConfig::new("mysql://repl:s3cret@127.0.0.1:3306");
        c.validate().unwrap();
        assert_eq!(c.redacted_url(), "mysql://repl:***@127.0.0.1:3306");
        assert!(!format!("{c:?}").contains("s3cret"));
        assert!(MysqlConfig::new("postgres://x@y").validate().is_err());
        let e = MysqlConfig::new("mysql://u:pw@").validate().unwrap_err();
        assert!(!e.to_string().contains("pw"), "{e}");
        let mut c = MysqlConfig::new("mysql://u@h");
        c.heartbeat_ms = 0;
        assert!(c.validate().is_err());
        c.heartbeat_ms = 1000;
        c.txn_part_bytes = ByteSize(1);
        assert!(c.validate().is_err());
    }
}
