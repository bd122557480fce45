//! `sink-webhook`: POSTs row changes to an HTTP endpoint as JSON, in batches.
//! Each event is one row change in canal-json or Debezium shape (as TiCDC writes
//! them, through `sluice-formats`) with an idempotency key, so a receiver can drop
//! what it already took when the host delivers rows again. A 2xx answer is the
//! acknowledgement; see README.md for the request body and the settings.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use sluice_formats::{EncodeOptions, Encoder, Format};
use sluice_sdk::http::Request;
use sluice_sdk::{BatchView, DdlEvent, Error, Sink, host};

/// Most rows per request, upper bound of `batch-rows`.
pub const MAX_BATCH_ROWS: u64 = 100_000;
/// Bounds of `batch-bytes`.
pub const BATCH_BYTES: (u64, u64) = (1024, 64 << 20);
/// Bounds of `timeout-ms`.
pub const TIMEOUT_MS: (u64, u64) = (100, 600_000);
/// Most entries in `headers`.
pub const MAX_HEADERS: usize = 64;

/// `sink-webhook` options.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Config {
    /// Where to POST: an `http://` or `https://` URL whose host the changefeed
    /// grants the sink (`capabilities.http`).
    pub url: String,
    /// Each event's `data`: `canal-json` (default) or `debezium`.
    #[serde(default)]
    pub format: Format,
    /// Add Sluice's fields to each event's data (`_sluice`), as sink-file does.
    #[serde(default)]
    pub enable_sluice_extension: bool,
    /// canal-json only: `old` holds only the columns that changed.
    #[serde(default)]
    pub only_output_updated_columns: Option<bool>,
    /// debezium only: leave out each message's `schema` part.
    #[serde(default)]
    pub debezium_disable_schema: Option<bool>,
    /// Send a request once this many rows wait (1 to 100,000; default 500).
    #[serde(default = "default_batch_rows")]
    pub batch_rows: u64,
    /// Send a request before its body would pass this many bytes (1 KiB to 64 MiB;
    /// default 1 MiB). A single longer event goes alone.
    #[serde(default = "default_batch_bytes")]
    pub batch_bytes: u64,
    /// How long a request may take (100 ms to 10 min; default 5 s).
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Times a request that failed in a way worth retrying (a timeout, a lost
    /// connection, 5xx, 408, 429) is sent again before the sink gives up and the
    /// host retries from the checkpoint (0 to 10; default 2). Its events go again
    /// flagged `replay`. Keep `(retries + 1) × timeout-ms` under the sink's
    /// `limits.host-call-timeout-ms` (30 s by default).
    #[serde(default = "default_retries")]
    pub retries: u32,
    /// Extra request headers (at most 64). Their values are never logged.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Sent as `authorization: Bearer {token}`. Never logged or echoed.
    #[serde(default)]
    pub bearer_token: Option<String>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("url", &self.url)
            .field("format", &self.format)
            .field("batch_rows", &self.batch_rows)
            .field("batch_bytes", &self.batch_bytes)
            .field("timeout_ms", &self.timeout_ms)
            .field("retries", &self.retries)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("bearer_token", &self.bearer_token.as_ref().map(|_| "***"))
            .finish_non_exhaustive()
    }
}

fn default_batch_rows() -> u64 {
    500
}

fn default_batch_bytes() -> u64 {
    1 << 20
}

fn default_timeout_ms() -> u64 {
    5_000
}

fn default_retries() -> u32 {
    2
}

/// Most `retries`.
pub const MAX_RETRIES: u32 = 10;

impl Config {
    /// Check the options (no I/O).
    pub fn validate(&self) -> Result<(), Error> {
        let url = self.url.trim();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(Error::config(
                "url must be an http:// or https:// URL, e.g. url = \"https://hooks.example/cdc\"",
            ));
        }
        if url[url.find("://").map_or(0, |i| i + 3)..]
            .split(['/', '?', '#'])
            .next()
            .is_some_and(|authority| authority.contains('@') || authority.is_empty())
        {
            return Err(Error::config(
                "url must name a host and carry no user or password; give a token with bearer-token or headers",
            ));
        }
        if self.format == Format::Csv {
            return Err(Error::config(
                "format = \"csv\" is not a JSON event; use \"canal-json\" or \"debezium\"",
            ));
        }
        if self.only_output_updated_columns.is_some() && self.format != Format::CanalJson {
            return Err(Error::config(
                "only-output-updated-columns applies to format = \"canal-json\" only",
            ));
        }
        if self.debezium_disable_schema.is_some() && self.format != Format::Debezium {
            return Err(Error::config(
                "debezium-disable-schema applies to format = \"debezium\" only",
            ));
        }
        range("batch-rows", self.batch_rows, (1, MAX_BATCH_ROWS))?;
        range("batch-bytes", self.batch_bytes, BATCH_BYTES)?;
        range("timeout-ms", self.timeout_ms, TIMEOUT_MS)?;
        range(
            "retries",
            u64::from(self.retries),
            (0, u64::from(MAX_RETRIES)),
        )?;
        if self.headers.len() > MAX_HEADERS {
            return Err(Error::config(format!(
                "headers has {} entries; at most {MAX_HEADERS} are allowed",
                self.headers.len()
            )));
        }
        for (name, value) in &self.headers {
            let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
            if name.is_empty() || !name.chars().all(token) {
                return Err(Error::config(format!(
                    "headers: `{name}` is not a header name (letters, digits and !#$%&'*+-.^_`|~)"
                )));
            }
            if [
                "content-length",
                "content-type",
                "host",
                "transfer-encoding",
            ]
            .iter()
            .any(|n| name.eq_ignore_ascii_case(n))
            {
                return Err(Error::config(format!(
                    "headers: `{name}` is set by the sink itself; remove it"
                )));
            }
            if value.contains(['\r', '\n', '\0']) {
                return Err(Error::config(format!(
                    "headers: the value of `{name}` contains a line break or NUL"
                )));
            }
        }
        if self
            .bearer_token
            .as_deref()
            .is_some_and(|t| t.is_empty() || t.contains(['\r', '\n', '\0', ' ']))
        {
            return Err(Error::config(
                "bearer-token must be non-empty, without spaces or line breaks",
            ));
        }
        if self.bearer_token.is_some()
            && self
                .headers
                .keys()
                .any(|n| n.eq_ignore_ascii_case("authorization"))
        {
            return Err(Error::config(
                "both bearer-token and headers.authorization are set; keep one",
            ));
        }
        Ok(())
    }

    fn encode_options(&self) -> EncodeOptions {
        EncodeOptions {
            format: self.format,
            sluice_extension: self.enable_sluice_extension,
            only_output_updated_columns: self.only_output_updated_columns.unwrap_or(false),
            csv: Default::default(),
            debezium_schema: !self.debezium_disable_schema.unwrap_or(false),
        }
    }
}

fn range(key: &str, value: u64, (lo, hi): (u64, u64)) -> Result<(), Error> {
    if (lo..=hi).contains(&value) {
        Ok(())
    } else {
        Err(Error::config(format!(
            "{key} = {value} is out of range; set it between {lo} and {hi}"
        )))
    }
}

/// Batches row changes into JSON requests.
#[derive(Debug)]
pub struct SinkWebhook {
    request: Request,
    /// `tenant/name`, the first part of every event id.
    changefeed: String,
    encoder: Encoder,
    batch_rows: usize,
    batch_bytes: usize,
    /// `{"changefeed":"..","events":[`, the start of every body.
    head: Vec<u8>,
    /// The body being filled: `head`, then events separated by commas.
    body: Vec<u8>,
    /// Events in `body`.
    events: usize,
    /// Scratch space for one event's data.
    line: Vec<u8>,
    /// Rows and requests delivered, and how many were reported to the host.
    rows: u64,
    requests: u64,
    reported: (u64, u64),
    /// Rows in `body`.
    pending_rows: u64,
    /// Where each event's `false` of `"replay":false` starts in `body`: a
    /// request sent again says `true ` there (same length, JSON allows the space).
    unflagged: Vec<usize>,
    retries: u32,
}

impl SinkWebhook {
    /// Append one event (`data` is one encoded line, its newline dropped).
    fn push_event(
        &mut self,
        id: &str,
        commit_ts: u64,
        replay: bool,
        ddl: bool,
    ) -> Result<(), Error> {
        if self.line.last() == Some(&b'\n') {
            self.line.pop();
        }
        // `,{"id":..,"commitTs":..,"replay":..,"data":..}` is 64 bytes at most
        // beside id and data; `]}` ends the body.
        let size = self.line.len() + id.len() + 64;
        if self.events > 0 && self.body.len() + size + 2 > self.batch_bytes {
            self.send()?;
        }
        let data = &self.line;
        let body = &mut self.body;
        if self.events > 0 {
            body.push(b',');
        }
        body.extend_from_slice(b"{\"id\":");
        json_str(body, id);
        body.extend_from_slice(format!(",\"commitTs\":{commit_ts},\"replay\":").as_bytes());
        if replay {
            body.extend_from_slice(b"true");
        } else {
            self.unflagged.push(body.len());
            body.extend_from_slice(b"false");
        }
        if ddl {
            body.extend_from_slice(b",\"ddl\":true");
        }
        body.extend_from_slice(b",\"data\":");
        body.extend_from_slice(data);
        body.push(b'}');
        self.events += 1;
        if !ddl {
            self.pending_rows += 1;
        }
        if self.events >= self.batch_rows {
            self.send()?;
        }
        Ok(())
    }

    /// POST what is buffered; a 2xx answer acknowledges it. A failure worth
    /// retrying is sent again up to `retries` times, its events flagged replay.
    fn send(&mut self) -> Result<(), Error> {
        if self.events == 0 {
            return Ok(());
        }
        self.body.extend_from_slice(b"]}");
        let body = std::mem::replace(&mut self.body, self.head.clone());
        let mut unflagged = std::mem::take(&mut self.unflagged);
        self.events = 0;
        let pending = std::mem::take(&mut self.pending_rows);
        let mut request = self.request.clone().body(body);
        let mut attempt = 0;
        loop {
            match request.send().and_then(|r| r.error_for_status()) {
                Ok(_) => break,
                Err(e) if e.is_retryable() && attempt < self.retries => {
                    attempt += 1;
                    host::warn(&format!(
                        "{e}; sending again ({attempt} of {})",
                        self.retries
                    ));
                    host::counter_add("retries", 1);
                    // The receiver may have taken the events: they go again
                    // flagged, as a replay from the host would be.
                    let body = request.body_mut();
                    for at in unflagged.drain(..) {
                        body[at..at + 5].copy_from_slice(b"true ");
                    }
                    std::thread::sleep(Duration::from_millis(100 << attempt.min(5)));
                }
                Err(e) => return Err(e.into_error()),
            }
        }
        self.rows += pending;
        self.requests += 1;
        Ok(())
    }
}

impl Sink for SinkWebhook {
    type Config = Config;

    fn validate(config: &Config) -> Result<(), Error> {
        config.validate()
    }

    fn open(config: Config) -> Result<Self, Error> {
        config.validate()?;
        let mut request = Request::post(config.url.trim())
            .header("content-type", "application/json")
            .header(
                "user-agent",
                concat!("sluice-sink-webhook/", env!("CARGO_PKG_VERSION")),
            )
            .timeout(Duration::from_millis(config.timeout_ms))
            .max_response_bytes(64 << 10);
        for (name, value) in &config.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        if let Some(token) = &config.bearer_token {
            request = request.bearer(token);
        }
        let changefeed = host::changefeed();
        let mut head = b"{\"changefeed\":".to_vec();
        json_str(&mut head, &changefeed);
        head.extend_from_slice(b",\"events\":[");
        Ok(Self {
            request,
            changefeed,
            encoder: Encoder::new(config.encode_options()),
            batch_rows: usize::try_from(config.batch_rows).unwrap_or(usize::MAX),
            batch_bytes: usize::try_from(config.batch_bytes).unwrap_or(usize::MAX),
            body: head.clone(),
            head,
            events: 0,
            line: Vec::new(),
            rows: 0,
            requests: 0,
            reported: (0, 0),
            pending_rows: 0,
            unflagged: Vec::new(),
            retries: config.retries,
        })
    }

    fn write(&mut self, batch: BatchView<'_>) -> Result<(), Error> {
        let mut id = String::new();
        for table in batch.tables() {
            let schema = table.schema();
            let header = self.encoder.table(schema);
            for row in table.rows() {
                self.line.clear();
                self.encoder.row(&header, &row, &mut self.line);
                id.clear();
                use std::fmt::Write as _;
                let _ = write!(
                    id,
                    "{}/{}.{}/{}/{}",
                    self.changefeed,
                    schema.schema_name,
                    schema.table_name,
                    row.txn_id(),
                    row.seq()
                );
                self.push_event(&id, row.commit_ts(), row.is_replay(), false)?;
            }
        }
        Ok(())
    }

    fn flush(&mut self, _ts: u64) -> Result<(), Error> {
        // Every row written so far is at or below `ts` (the host flushes a ts only
        // after writing every row up to it).
        self.send()?;
        host::counter_add("rows", self.rows - self.reported.0);
        host::counter_add("requests", self.requests - self.reported.1);
        self.reported = (self.rows, self.requests);
        Ok(())
    }

    fn apply_ddl(&mut self, ddl: &DdlEvent) -> Result<(), Error> {
        self.line.clear();
        if self.encoder.ddl(ddl, &mut self.line) {
            let id = format!("{}/ddl/{}", self.changefeed, ddl.txn_id);
            // Sent at once: nothing else acknowledges a DDL event.
            self.push_event(&id, ddl.commit_ts, false, true)?;
            self.send()?;
        }
        Ok(())
    }

    fn close(&mut self) -> Result<(), Error> {
        self.send()
    }
}

/// Append `s` as a JSON string.
fn json_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            c if (c as u32) < 0x20 => {
                out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes());
            }
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
}

sluice_sdk::export_sink!(SinkWebhook);

#[cfg(test)]
mod tests;
