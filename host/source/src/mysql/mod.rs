//! The MySQL/MariaDB binlog source: it registers as a replica, reads row events
//! (ROW format, full images, full metadata), and yields each committed
//! transaction in binlog order with a strictly increasing commit ts and the
//! position after it (a MariaDB GTID position, or a binlog file and offset).
//!
//! - Transactions: a GTID event opens a group; XID (or a `COMMIT` query) ends
//!   it. A standalone group is one statement: a DDL becomes a [`DdlEvent`],
//!   followed by an empty transaction at the same commit ts that carries the
//!   position after it (so a checkpoint past a DDL never reads it again).
//! - Commit ts: the group's binlog timestamp (seconds) in milliseconds, composed
//!   TSO-style; strictly above the previous one (and above the checkpoint it
//!   resumed from) even when the upstream clock steps back. When the server
//!   sends a heartbeat and no group is open, the resolved ts moves up to now.
//! - Large transactions go on in parts of about `txn-part-bytes`, so no
//!   transaction is ever held whole.
//! - Every event's CRC32 is checked; a mismatch fails the changefeed.
//! - A lost connection reconnects from the last transaction boundary (a few
//!   times, with backoff); a binlog purged past that position fails with
//!   "position lost".

mod check;
pub mod ddl;
mod decode;
pub mod gtid;
mod session;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest, Conn, Opts};
use mysql_common::binlog::consts::BinlogChecksumAlg;
use mysql_common::binlog::events::{Event, EventData, RowsEventData};
use serde::{Deserialize, Serialize};
use sluice_config::{MysqlConfig, StartPosition};
use sluice_core::{
    ChangesPool, Checkpoint, CommitTs, DdlEvent, Op, ResolvedTs, ResumeError, SourceEvent,
    SourcePosition, SourceStats, TableSchema, Transaction,
};

use self::check::ServerInfo;
use self::decode::{Cursor, Flavor, TableLayout};
use self::gtid::{GtidPos, MysqlGtidSet, parse_gtid_event, parse_gtid_list, uuid_text};
use crate::filter::TableFilter;

pub use self::ddl::{Ddl, DdlKind, Statement, classify, classify_statement};

/// Why the binlog source stopped.
#[derive(Debug, thiserror::Error)]
pub enum MysqlError {
    /// The server is not set up for change capture, or the user lacks a grant;
    /// the message says what to change.
    #[error("the upstream server is not ready for change capture: {0}")]
    Setup(String),
    /// The binlog no longer holds the position to resume from.
    #[error("position lost: {0}")]
    PositionLost(String),
    /// The server could not be reached, or the connection broke.
    #[error("upstream connection failed: {0}")]
    Connection(String),
    /// A query the source needs failed.
    #[error("upstream query failed: {0}")]
    Query(String),
    /// The binlog holds something this source cannot read.
    #[error("binlog cannot be read: {0}")]
    Decode(String),
}

impl MysqlError {
    fn query(e: mysql_async::Error) -> Self {
        match e {
            mysql_async::Error::Server(s) if s.code == 1227 || s.code == 1142 || s.code == 1045 => {
                MysqlError::Setup(format!("{} (error {})", s.message, s.code))
            }
            e if e.is_fatal() => MysqlError::Connection(e.to_string()),
            e => MysqlError::Query(e.to_string()),
        }
    }

    /// Whether restarting the changefeed cannot help: the server or the
    /// position must be fixed first.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            MysqlError::Setup(_) | MysqlError::PositionLost(_) | MysqlError::Decode(_)
        )
    }
}

/// Layout version of [`Position`] in a [`SourcePosition`].
pub const POSITION_VERSION: u32 = 1;

/// Where the source is after a transaction.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    /// The MariaDB GTID position (when resuming by GTID).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gtid: Option<String>,
    /// The binlog file.
    pub file: String,
    /// The offset after the transaction in `file`.
    pub pos: u64,
}

impl Position {
    /// As a source position.
    pub fn encode(&self) -> SourcePosition {
        SourcePosition {
            version: POSITION_VERSION,
            bytes: serde_json::to_vec(self).expect("a position serializes"),
        }
    }

    /// From a saved source position.
    pub fn decode(p: &SourcePosition) -> Result<Self, ResumeError> {
        if p.version != POSITION_VERSION {
            return Err(ResumeError(format!(
                "the saved position has layout version {}; this binlog source reads version {POSITION_VERSION}",
                p.version
            )));
        }
        serde_json::from_slice(&p.bytes)
            .map_err(|e| ResumeError(format!("the saved binlog position does not decode: {e}")))
    }
}

/// A table as the source has mapped it.
struct Mapped {
    /// `None`: the filter leaves the table out (its rows are skipped unread).
    schema: Option<Arc<TableSchema>>,
    layout: TableLayout,
    /// The raw table-map body it was built from (to spot a changed map).
    raw: Vec<u8>,
}

/// What the source knows of a table by name: its stable id and current version.
struct Known {
    id: u32,
    version: u32,
    schema: Arc<TableSchema>,
}

/// An event group being read.
struct Open {
    commit_ts: CommitTs,
    gtid: Option<gtid::Gtid>,
    /// A MySQL group's server uuid and transaction number.
    mysql_gtid: Option<(String, u64)>,
    standalone: bool,
    /// `filter.ignore-txn-start-ts` names it: its rows are skipped unread.
    ignored: bool,
    txn: Transaction,
    /// Parts of it were handed on already.
    parts: bool,
    /// Row changes so far: the next row's place in the transaction.
    rows: u32,
    /// It holds a DDL (MySQL writes a DDL as a group without a commit: the
    /// next group, a heartbeat or a commit ends it).
    ddl: bool,
}

/// Reads a MySQL/MariaDB binlog.
pub struct MysqlSource {
    config: MysqlConfig,
    /// Checkpoint to resume from (set by `resume`).
    from: Checkpoint,
    stream: Option<BinlogStream>,
    server: Option<ServerInfo>,
    /// The GTID position after the last whole group.
    gtid: Option<GtidPos>,
    /// The MySQL GTID set after the last whole group (MySQL with gtid_mode=ON).
    mysql_gtid: Option<MysqlGtidSet>,
    /// The binlog file being read, and the offset after the last whole group.
    file: String,
    pos: u64,
    /// Whether the start position has been settled (resume or start-position).
    placed: bool,
    /// The changefeed's start ts: a checkpoint above it without a position is
    /// placed by time.
    start_ts: CommitTs,
    last_ts: CommitTs,
    tables: HashMap<u64, Arc<Mapped>>,
    known: HashMap<(String, String), Known>,
    next_table_id: u32,
    open: Option<Open>,
    pending: VecDeque<SourceEvent>,
    pool: ChangesPool,
    /// Reconnects since the last event read.
    reconnects: u32,
    /// With `stop-at-end`: the binlog's end when reading began.
    end: Option<(String, u64)>,
    /// The source has ended (`stop-at-end`).
    ended: bool,
    /// Events read and the binlog time of the last one.
    stats: Arc<SourceStats>,
    /// `[filter]`: tables and events to leave out.
    filter: TableFilter,
    /// The offset after the last DDL of an open group.
    ddl_end: u64,
}

/// Most reconnects in a row before the source gives up (the changefeed is then
/// restarted by the owner, with its backoff).
const MAX_RECONNECTS: u32 = 5;

impl MysqlSource {
    /// A source for `config` (validated); nothing connects until the first read.
    pub fn new(config: MysqlConfig) -> Self {
        Self {
            config,
            from: Checkpoint::default(),
            stream: None,
            server: None,
            gtid: None,
            mysql_gtid: None,
            file: String::new(),
            pos: 4,
            placed: false,
            start_ts: CommitTs::ZERO,
            last_ts: CommitTs::ZERO,
            tables: HashMap::new(),
            known: HashMap::new(),
            next_table_id: 1,
            open: None,
            pending: VecDeque::new(),
            pool: ChangesPool::new(),
            reconnects: 0,
            end: None,
            ended: false,
            stats: Arc::default(),
            filter: TableFilter::new(&sluice_config::FilterConfig::default()),
            ddl_end: 0,
        }
    }

    /// Leaves out the tables and events `filter` names.
    pub fn with_filter(mut self, filter: TableFilter) -> Self {
        self.filter = filter;
        self
    }

    /// Commit ts start after `ts` (the changefeed's start ts).
    pub fn begin_after(mut self, ts: CommitTs) -> Self {
        self.last_ts = self.last_ts.max(ts);
        self.start_ts = ts;
        self
    }

    fn opts(&self) -> Result<Opts, MysqlError> {
        Opts::from_url(&self.config.url).map_err(|e| {
            MysqlError::Setup(format!(
                "source.url ({}) is not usable: {e}",
                self.config.redacted_url()
            ))
        })
    }

    async fn connect_plain(&self) -> Result<Conn, MysqlError> {
        let opts = self.opts()?;
        let timeout = Duration::from_millis(self.config.connect_timeout_ms);
        match tokio::time::timeout(timeout, Conn::new(opts)).await {
            Err(_) => Err(MysqlError::Connection(format!(
                "{} did not answer within {} ms",
                self.config.redacted_url(),
                self.config.connect_timeout_ms
            ))),
            Ok(Err(mysql_async::Error::Server(s))) if s.code == 1045 || s.code == 1044 => {
                Err(MysqlError::Setup(format!(
                    "{} refused the login: {}",
                    self.config.redacted_url(),
                    s.message
                )))
            }
            Ok(Err(e)) => Err(MysqlError::Connection(format!(
                "{}: {e}",
                self.config.redacted_url()
            ))),
            Ok(Ok(conn)) => Ok(conn),
        }
    }

    /// Starts at `file`:`pos`; resuming by MariaDB GTID, the GTID position there.
    async fn start_at(
        &mut self,
        conn: &mut Conn,
        use_gtid: bool,
        file: String,
        pos: u64,
    ) -> Result<(), MysqlError> {
        self.gtid = if use_gtid {
            Some(binlog_gtid_pos(conn, &file, pos).await?)
        } else {
            None
        };
        (self.file, self.pos) = (file, pos);
        Ok(())
    }

    /// Settles where to start: the saved position, or the configured start.
    async fn place(&mut self, conn: &mut Conn, flavor: Flavor) -> Result<(), MysqlError> {
        if self.placed {
            return Ok(());
        }
        let use_gtid = self.config.use_gtid && flavor == Flavor::MariaDb;
        // MySQL resumes by GTID set when its gtid_mode is ON.
        let mysql_gtid =
            self.config.use_gtid && flavor == Flavor::MySql && mysql_gtid_mode(conn).await?;
        if let Some(p) = &self.from.position {
            let p = Position::decode(p).map_err(|e| MysqlError::PositionLost(e.0))?;
            self.file = p.file;
            self.pos = p.pos;
            if mysql_gtid && let Some(g) = &p.gtid {
                self.mysql_gtid = Some(MysqlGtidSet::parse(g).map_err(MysqlError::PositionLost)?);
            }
            self.gtid = match (use_gtid, p.gtid) {
                (true, Some(g)) => Some(GtidPos::parse(&g).map_err(MysqlError::PositionLost)?),
                (true, None) => Some(binlog_gtid_pos(conn, &self.file, self.pos).await?),
                (false, _) => None,
            };
        } else if self.from.ts.get() > self.start_ts.get() {
            // A checkpoint without a position (an overwritten checkpoint): the
            // first group committed in the second after it.
            let secs = (CommitTs::from(self.from.ts).physical_millis() / 1000) as i64 + 1;
            let (file, pos) = position_at_time(self, secs).await?;
            tracing::warn!(checkpoint = %self.from.ts, %file, pos, "No binlog position was saved with the checkpoint: resuming at the first group committed in the second after it.");
            self.start_at(conn, use_gtid, file, pos).await?;
        } else {
            match self.config.start_position.clone() {
                StartPosition::Now => {
                    if mysql_gtid {
                        let set: Option<String> = conn
                            .query_first("SELECT @@GLOBAL.gtid_executed")
                            .await
                            .map_err(MysqlError::query)?;
                        let set = set.unwrap_or_default().replace(['\n', ' '], "");
                        self.mysql_gtid =
                            Some(MysqlGtidSet::parse(&set).map_err(MysqlError::Decode)?);
                    }
                    let (file, pos) = master_status(conn).await?;
                    self.start_at(conn, use_gtid, file, pos).await?;
                }
                StartPosition::Gtid(g) if flavor == Flavor::MySql => {
                    if !mysql_gtid {
                        return Err(MysqlError::Setup(
                            "source.start-position is a GTID set, but the MySQL server's gtid_mode is not ON (or source.use-gtid is false): start at now, file: or time:".into(),
                        ));
                    }
                    self.mysql_gtid = Some(MysqlGtidSet::parse(&g).map_err(|e| {
                        MysqlError::Setup(format!(
                            "source.start-position: {e} (a MySQL server takes a MySQL GTID set)"
                        ))
                    })?);
                    self.file.clear();
                    self.pos = 4;
                }
                StartPosition::Gtid(g) => {
                    self.gtid = Some(GtidPos::parse(&g).map_err(MysqlError::Setup)?);
                    self.file.clear();
                    self.pos = 4;
                }
                StartPosition::File { name, pos } => {
                    self.start_at(conn, use_gtid, name, pos).await?;
                }
                StartPosition::Time(secs) => {
                    let (file, pos) = position_at_time(self, secs).await?;
                    self.start_at(conn, use_gtid, file, pos).await?;
                }
            }
        }
        self.last_ts = self.last_ts.max(CommitTs::from(self.from.ts));
        if self.config.stop_at_end {
            self.end = Some(master_status(conn).await?);
        }
        self.placed = true;
        Ok(())
    }

    /// Connects, checks the server and opens the binlog stream at the current
    /// position.
    async fn connect(&mut self) -> Result<(), MysqlError> {
        let mut conn = self.connect_plain().await?;
        let info = check::check(&mut conn).await?;
        self.place(&mut conn, info.flavor).await?;
        if info.flavor == Flavor::MariaDb {
            conn.query_drop("SET @mariadb_slave_capability=4")
                .await
                .map_err(MysqlError::query)?;
            if let Some(g) = &self.gtid {
                conn.query_drop(format!("SET @slave_connect_state='{g}'"))
                    .await
                    .map_err(MysqlError::query)?;
                conn.query_drop("SET @slave_gtid_strict_mode=0")
                    .await
                    .map_err(MysqlError::query)?;
                conn.query_drop("SET @slave_gtid_ignore_duplicates=0")
                    .await
                    .map_err(MysqlError::query)?;
            }
        }
        let heartbeat_ns = self.config.heartbeat_ms * 1_000_000;
        conn.query_drop(format!("SET @master_heartbeat_period={heartbeat_ns}"))
            .await
            .map_err(MysqlError::query)?;
        let server_id = match self.config.server_id {
            0 => rand_server_id(),
            id => id,
        };
        let by_gtid = self.gtid.is_some() || self.mysql_gtid.is_some();
        let file = if by_gtid {
            Vec::new()
        } else {
            self.file.clone().into_bytes()
        };
        let mut request = BinlogStreamRequest::new(server_id)
            .with_filename(&file)
            .with_pos(if by_gtid { 4 } else { self.pos });
        if let Some(set) = &self.mysql_gtid {
            // MySQL: COM_BINLOG_DUMP_GTID from the set.
            request = request
                .with_gtid()
                .with_gtid_set(set.sids().map_err(MysqlError::PositionLost)?);
        }
        let stream = conn.get_binlog_stream(request).await.map_err(|e| match e {
            mysql_async::Error::Server(s) if s.code == 1236 => MysqlError::PositionLost(s.message),
            e => MysqlError::query(e),
        })?;
        tracing::info!(
            url = %self.config.redacted_url(),
            server = %info.version,
            gtid = %self.gtid.as_ref().map(ToString::to_string).unwrap_or_default(),
            file = %self.file,
            pos = self.pos,
            "Reading the binlog."
        );
        self.server = Some(info);
        self.stream = Some(stream);
        // A new stream sends its table maps again.
        self.tables.clear();
        Ok(())
    }

    fn next_ts(&mut self, binlog_secs: u32) -> CommitTs {
        let ts = CommitTs::compose(u64::from(binlog_secs) * 1000, 0)
            .max(CommitTs::new(self.last_ts.get() + 1));
        self.last_ts = ts;
        ts
    }

    fn position(&self) -> Position {
        Position {
            gtid: self
                .gtid
                .as_ref()
                .map(ToString::to_string)
                .or_else(|| self.mysql_gtid.as_ref().map(ToString::to_string)),
            file: self.file.clone(),
            pos: self.pos,
        }
    }

    /// Reads events until one is ready to hand on.
    async fn read(&mut self) -> Result<(), MysqlError> {
        loop {
            if !self.pending.is_empty() {
                return Ok(());
            }
            if self.ended {
                self.pending.push_back(SourceEvent::End);
                return Ok(());
            }
            if self.stream.is_none() {
                match self.connect().await {
                    Ok(()) => {}
                    Err(MysqlError::Connection(e))
                        if self.reconnects < MAX_RECONNECTS && self.placed =>
                    {
                        self.reconnects += 1;
                        let wait = Duration::from_millis(250 << self.reconnects.min(5));
                        tracing::warn!(error = %e, ?wait, "Upstream connection failed; retrying.");
                        tokio::time::sleep(wait).await;
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            }
            let wait = Duration::from_millis(self.config.heartbeat_ms * 3 + 5_000);
            let stream = self.stream.as_mut().expect("connected");
            let item: Option<Result<(), String>> =
                match tokio::time::timeout(wait, stream.next()).await {
                    Err(_) => Some(Err(format!(
                        "no event or heartbeat for {} ms",
                        wait.as_millis()
                    ))),
                    Ok(None) => Some(Err("the server ended the binlog stream".to_string())),
                    Ok(Some(Err(mysql_async::Error::Server(s)))) if s.code == 1236 => {
                        return Err(MysqlError::PositionLost(s.message));
                    }
                    Ok(Some(Err(e))) => Some(Err(e.to_string())),
                    Ok(Some(Ok(event))) => {
                        self.reconnects = 0;
                        self.on_event(event)?;
                        None
                    }
                };
            if let Some(Err(e)) = item {
                self.lost(e)?;
            }
        }
    }

    /// The connection broke: start again from the last whole group, unless
    /// parts of the open one went on already.
    fn lost(&mut self, why: String) -> Result<(), MysqlError> {
        self.stream = None;
        self.reconnects += 1;
        if let Some(open) = self.open.take()
            && open.parts
        {
            return Err(MysqlError::Connection(format!(
                "{why}, in the middle of a transaction already partly handed on"
            )));
        }
        if self.reconnects > MAX_RECONNECTS {
            return Err(MysqlError::Connection(format!(
                "{why} ({MAX_RECONNECTS} reconnects without a whole transaction read)"
            )));
        }
        tracing::warn!(error = %why, "Binlog stream lost; reconnecting from the last transaction boundary.");
        Ok(())
    }

    fn on_event(&mut self, event: Event) -> Result<(), MysqlError> {
        use std::sync::atomic::Ordering::Relaxed;
        let header = event.header();
        let ty = header.event_type_raw();
        self.stats.events.fetch_add(1, Relaxed);
        if header.timestamp() > 0 {
            self.stats
                .upstream_millis
                .store(u64::from(header.timestamp()) * 1000, Relaxed);
        }
        let fake = header.log_pos() == 0;
        if !fake
            && let Some(crc) = event.checksum()
            && event.footer().get_checksum_alg().ok().flatten()
                == Some(BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32)
        {
            let want = u32::from_le_bytes(crc);
            let got = event.calc_checksum(BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32);
            if want != got {
                return Err(MysqlError::Decode(format!(
                    "event at {}:{} fails its checksum (want {want:08x}, got {got:08x})",
                    self.file,
                    header.log_pos()
                )));
            }
        }
        match ty {
            // ROTATE: the next file (the first, fake one may carry 4 checksum bytes).
            4 => {
                let data = event.data();
                if data.len() >= 8 {
                    let pos = u64::from_le_bytes(data[0..8].try_into().expect("8 bytes"));
                    let mut name = &data[8..];
                    if fake
                        && name.len() > 4
                        && !ends_like_binlog(name)
                        && ends_like_binlog(&name[..name.len() - 4])
                    {
                        name = &name[..name.len() - 4];
                    }
                    self.file = String::from_utf8_lossy(name).into_owned();
                    if self.open.is_none() {
                        self.pos = pos;
                    }
                }
            }
            // MariaDB GTID: a group begins.
            162 => {
                let g = parse_gtid_event(event.data(), header.server_id())
                    .map_err(MysqlError::Decode)?;
                self.end_ddl_group();
                let commit_ts = self.next_ts(header.timestamp());
                let mut txn = Transaction::new(commit_ts);
                txn.id = txn_id(&[
                    b"mariadb-gtid",
                    &g.gtid.domain.to_le_bytes(),
                    &g.gtid.server.to_le_bytes(),
                    &g.gtid.seq.to_le_bytes(),
                ]);
                self.open = Some(Open {
                    commit_ts,
                    gtid: Some(g.gtid),
                    mysql_gtid: None,
                    standalone: g.standalone,
                    ignored: self.filter.ignores_txn(commit_ts),
                    txn,
                    parts: false,
                    rows: 0,
                    ddl: false,
                });
            }
            // MariaDB GTID_LIST: the state when a file begins.
            163 => {
                let list = parse_gtid_list(event.data()).map_err(MysqlError::Decode)?;
                if let Some(g) = &mut self.gtid
                    && g.is_empty()
                {
                    *g = list;
                }
            }
            // MySQL GTID / anonymous GTID: a group begins.
            33 | 34 => {
                let mysql_gtid = match event.read_data() {
                    Ok(Some(EventData::GtidEvent(g))) => Some((uuid_text(g.sid()), g.gno())),
                    _ => None,
                };
                self.end_ddl_group();
                let commit_ts = self.next_ts(header.timestamp());
                let mut txn = Transaction::new(commit_ts);
                txn.id = match &mysql_gtid {
                    Some((uuid, gno)) => {
                        txn_id(&[b"mysql-gtid", uuid.as_bytes(), &gno.to_le_bytes()])
                    }
                    // An anonymous group: where it starts.
                    None => txn_id(&[b"at", self.file.as_bytes(), &self.pos.to_le_bytes()]),
                };
                self.open = Some(Open {
                    commit_ts,
                    gtid: None,
                    mysql_gtid,
                    standalone: false,
                    ignored: self.filter.ignores_txn(commit_ts),
                    txn,
                    parts: false,
                    rows: 0,
                    ddl: false,
                });
            }
            // MariaDB's compressed query and rows events.
            165..=171 => {
                return Err(MysqlError::Setup(
                    "the binlog holds compressed events: set log_bin_compress=OFF on the server"
                        .into(),
                ));
            }
            // QUERY
            2 => {
                let Ok(Some(EventData::QueryEvent(q))) = event.read_data() else {
                    return Err(MysqlError::Decode("a query event does not decode".into()));
                };
                self.on_query(&q, header.timestamp(), header.log_pos())?;
            }
            // TABLE_MAP
            19 => self.on_table_map(&event)?,
            // Rows events (v1 and v2).
            23..=25 | 30..=32 => self.on_rows(&event)?,
            // XID: a transaction commits.
            16 => self.commit(u64::from(header.log_pos())),
            // HEARTBEAT: a DDL group of MySQL's is over; nothing to send; time
            // moves on.
            27 if self
                .open
                .as_ref()
                .is_some_and(|o| o.ddl && o.txn.tables.is_empty()) =>
            {
                self.end_ddl_group();
            }
            27 if self.open.is_none() && self.pending.is_empty() => {
                // A heartbeat names the file and offset the server has sent up to.
                let here = (
                    binlog_index(&String::from_utf8_lossy(event.data())),
                    u64::from(header.log_pos()),
                );
                if let Some((file, pos)) = &self.end
                    && here >= (binlog_index(file), *pos)
                {
                    self.ended = true;
                }
                let ts = CommitTs::compose(now_millis(), 0);
                if ts > self.last_ts {
                    self.last_ts = ts;
                    self.pending
                        .push_back(SourceEvent::Resolved(ResolvedTs::from(ts)));
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn on_query(
        &mut self,
        q: &mysql_common::binlog::events::QueryEvent<'_>,
        secs: u32,
        log_pos: u32,
    ) -> Result<(), MysqlError> {
        let raw = q.query_raw();
        let trimmed_raw = raw.trim_ascii();
        if trimmed_raw.eq_ignore_ascii_case(b"BEGIN") {
            return Ok(());
        }
        if trimmed_raw.eq_ignore_ascii_case(b"COMMIT") {
            self.commit(u64::from(log_pos));
            return Ok(());
        }
        if trimmed_raw.eq_ignore_ascii_case(b"ROLLBACK") {
            // A group of non-transactional changes rolled back: nothing applies,
            // but the position moves past it.
            self.commit(u64::from(log_pos));
            return Ok(());
        }
        let server = self.server.as_ref().expect("connected");
        // The statement's text in the session's client character set, as UTF-8.
        let query = match decode::charset(session::client_charset(q, &server.collations)) {
            Ok(decode::Text::Other(encoding)) => {
                encoding.decode_without_bom_handling(raw).0.into_owned()
            }
            _ => String::from_utf8_lossy(raw).into_owned(),
        };
        let trimmed = query.trim();
        let schema = q.schema().into_owned();
        // A DDL in a group that is not over (MySQL's group without a commit,
        // after which another statement came) ends it first.
        if self
            .open
            .as_ref()
            .is_some_and(|o| o.ddl && o.txn.tables.is_empty())
        {
            self.end_ddl_group();
        }
        let commit_ts = match &self.open {
            Some(o) => o.commit_ts,
            None => self.next_ts(secs),
        };
        let statement = classify_statement(trimmed, &schema);
        let is_ddl = matches!(statement, Statement::Ddl(_));
        match statement {
            Statement::Ddl(ddl) => {
                // Delivered unless the filter leaves out every table it names (or
                // its database), or skips its kind.
                let names: Vec<(&str, &str)> = if ddl.tables.is_empty() {
                    vec![(ddl.schema.as_str(), "")]
                } else {
                    ddl.tables
                        .iter()
                        .map(|(d, t)| (d.as_str(), t.as_str()))
                        .collect()
                };
                let wanted = names.iter().any(|(d, t)| {
                    self.filter.allows_table(d, t)
                        && !self.filter.ignores_ddl(d, t, ddl.kind.name())
                });
                let ignored = self.open.as_ref().is_some_and(|o| o.ignored);
                if wanted && !ignored {
                    let server = self.server.as_ref().expect("connected");
                    let session = session::session_of(
                        q,
                        server.flavor,
                        &server.collations,
                        &server.session_defaults,
                    );
                    let table_name = if ddl.tables.len() == 1 {
                        ddl.tables[0].1.clone()
                    } else {
                        String::new()
                    };
                    let txn_id = match &self.open {
                        Some(o) => o.txn.id,
                        None => txn_id(&[b"at", self.file.as_bytes(), &log_pos.to_le_bytes()]),
                    };
                    self.pending.push_back(SourceEvent::Ddl(DdlEvent {
                        commit_ts,
                        txn_id,
                        kind: ddl.kind.name().to_string(),
                        schema_name: ddl.schema.clone(),
                        table_name,
                        tables: ddl.tables.clone(),
                        default_schema: schema.clone(),
                        session,
                        query: query.clone(),
                    }));
                }
                // The tables it names get a new version at their next table map.
                for (db, t) in &ddl.tables {
                    if let Some(k) = self.known.get_mut(&(db.clone(), t.clone())) {
                        k.version += 1;
                    }
                }
            }
            Statement::Other => {
                tracing::debug!(
                    kind = trimmed.split_whitespace().next().unwrap_or(""),
                    "A statement that changes no replicated schema or row; left out."
                );
            }
            Statement::Unknown => {
                // Nothing is lost silently: counted, shown in the status and
                // logged (the statement's start only: it may hold secrets).
                use std::sync::atomic::Ordering::Relaxed;
                self.stats.skipped_statements.fetch_add(1, Relaxed);
                let head = sluice_core::bounded_text(trimmed, 120);
                tracing::warn!(
                    file = %self.file,
                    pos = log_pos,
                    statement = %head,
                    "A statement in the binlog that Sluice does not recognise was not replicated."
                );
                self.stats
                    .set_last_skipped(format!("{}:{} {head}", self.file, log_pos));
            }
        }
        let Some(open) = self.open.as_mut() else {
            // Outside a group: one statement.
            self.commit(u64::from(log_pos));
            return Ok(());
        };
        if open.standalone {
            self.commit(u64::from(log_pos));
            return Ok(());
        }
        if is_ddl && open.txn.tables.is_empty() && !open.parts {
            // MariaDB: a DDL in a group that is not flagged standalone is
            // `CREATE TABLE ... SELECT` (its rows follow, then a commit); MySQL
            // writes a DDL as a group of its own without a commit, or (8.0.21+)
            // a `CREATE TABLE ... SELECT` as `... START TRANSACTION`, rows and a
            // commit. Rows after the DDL in its group come after it: they get a
            // commit ts above the DDL's, so the barrier holds them.
            open.ddl = true;
            self.ddl_end = u64::from(log_pos);
            let ts = self.next_ts(secs);
            let open = self.open.as_mut().expect("checked");
            open.commit_ts = ts;
            open.txn.commit_ts = ts;
            let flavor = self.server.as_ref().map(|s| s.flavor);
            let continues = flavor == Some(Flavor::MariaDb)
                || trimmed.to_ascii_uppercase().ends_with("START TRANSACTION");
            if !continues {
                self.end_ddl_group();
            }
        }
        Ok(())
    }

    /// Ends a group that holds only a DDL (see `on_query`), at the position
    /// after the DDL.
    fn end_ddl_group(&mut self) {
        if self
            .open
            .as_ref()
            .is_some_and(|o| o.ddl && o.txn.tables.is_empty() && !o.parts)
        {
            let at = self.ddl_end;
            self.commit(at);
        }
    }

    fn on_table_map(&mut self, event: &Event) -> Result<(), MysqlError> {
        let Ok(Some(EventData::TableMapEvent(tme))) = event.read_data() else {
            return Err(MysqlError::Decode(
                "a table map event does not decode".into(),
            ));
        };
        let id = tme.table_id();
        if self.tables.get(&id).is_some_and(|m| m.raw == event.data()) {
            return Ok(());
        }
        let db = tme.database_name().into_owned();
        let name = tme.table_name().into_owned();
        if !self.filter.allows_table(&db, &name) {
            // Left out: its rows will be skipped without being read.
            self.tables.insert(
                id,
                Arc::new(Mapped {
                    schema: None,
                    layout: TableLayout {
                        columns: Vec::new(),
                        decoders: Vec::new(),
                    },
                    raw: event.data().to_vec(),
                }),
            );
            return Ok(());
        }
        let server = self.server.as_ref().expect("connected");
        let layout = decode::layout(&tme, server.flavor, &server.collations)
            .map_err(|e| MysqlError::Decode(format!("table {db}.{name}: {e}")))?;
        let key = (db.clone(), name.clone());
        let schema = match self.known.get_mut(&key) {
            Some(k) if k.schema.columns == layout.columns && k.schema.version == k.version => {
                k.schema.clone()
            }
            Some(k) => {
                if k.schema.version == k.version {
                    k.version += 1;
                }
                k.schema = Arc::new(TableSchema {
                    table_id: k.id,
                    version: k.version,
                    schema_name: db.clone(),
                    table_name: name.clone(),
                    columns: layout.columns.clone(),
                });
                k.schema.clone()
            }
            None => {
                let id = self.next_table_id;
                self.next_table_id += 1;
                let schema = Arc::new(TableSchema {
                    table_id: id,
                    version: 1,
                    schema_name: db.clone(),
                    table_name: name.clone(),
                    columns: layout.columns.clone(),
                });
                self.known.insert(
                    key,
                    Known {
                        id,
                        version: 1,
                        schema: schema.clone(),
                    },
                );
                schema
            }
        };
        self.tables.insert(
            id,
            Arc::new(Mapped {
                schema: Some(schema),
                layout,
                raw: event.data().to_vec(),
            }),
        );
        Ok(())
    }

    fn on_rows(&mut self, event: &Event) -> Result<(), MysqlError> {
        let Ok(Some(EventData::RowsEvent(rows))) = event.read_data() else {
            return Err(MysqlError::Decode("a rows event does not decode".into()));
        };
        let Some(mapped) = self.tables.get(&rows.table_id()).cloned() else {
            return Err(MysqlError::Decode(format!(
                "a rows event for table id {} has no table map",
                rows.table_id()
            )));
        };
        let Some(schema) = &mapped.schema else {
            // A table the filter leaves out.
            return Ok(());
        };
        let Some(open) = self.open.as_mut() else {
            return Err(MysqlError::Decode(
                "a rows event outside a transaction".into(),
            ));
        };
        if open.ignored {
            return Ok(());
        }
        let (before, after, op) = match &rows {
            RowsEventData::WriteRowsEventV1(_) | RowsEventData::WriteRowsEvent(_) => {
                (false, true, Op::Insert)
            }
            RowsEventData::UpdateRowsEventV1(_) | RowsEventData::UpdateRowsEvent(_) => {
                (true, true, Op::Update)
            }
            RowsEventData::DeleteRowsEventV1(_) | RowsEventData::DeleteRowsEvent(_) => {
                (true, false, Op::Delete)
            }
            RowsEventData::PartialUpdateRowsEvent(_) => {
                return Err(MysqlError::Setup(
                    "the binlog holds partial JSON updates: set binlog_row_value_options='' on the server".into(),
                ));
            }
        };
        if self
            .filter
            .ignores_dml(&schema.schema_name, &schema.table_name, op)
        {
            return Ok(());
        }
        let n = mapped.layout.decoders.len();
        let full = |ones: Option<usize>| ones.is_none_or(|c| c == n);
        if !full(rows.columns_before_image().map(|b| b.count_ones()))
            || !full(rows.columns_after_image().map(|b| b.count_ones()))
        {
            return Err(MysqlError::Setup(format!(
                "a row of {} lacks columns: set binlog_row_image=FULL",
                schema.qualified_name()
            )));
        }
        let mut cur = Cursor {
            data: rows.rows_data(),
        };
        let decoders = &mapped.layout.decoders;
        let changes = open.txn.table_from(schema, &self.pool);
        let first = changes.len();
        let err = |e: decode::DecodeError| {
            MysqlError::Decode(format!("{}: {e}", schema.qualified_name()))
        };
        while !cur.is_empty() {
            let seq = open.rows;
            open.rows = open.rows.saturating_add(1);
            let mut w = match op {
                Op::Insert => changes.insert_at(seq),
                Op::Update => changes.update_at(seq),
                Op::Delete => changes.delete_at(seq),
            };
            if before {
                decode::read_image(&mut cur, decoders, &mut w).map_err(err)?;
            }
            if after {
                decode::read_image(&mut cur, decoders, &mut w).map_err(err)?;
            }
        }
        // The statement ran with foreign_key_checks = 0 upstream.
        if rows
            .flags()
            .contains(mysql_common::binlog::consts::RowsEventFlags::NO_FOREIGN_KEY_CHECKS)
        {
            changes.flag_rows_from(first, sluice_core::FLAG_NO_FK_CHECKS);
        }
        if open.txn.wire_bytes() as u64 >= self.config.txn_part_bytes.0 {
            let commit_ts = open.commit_ts;
            let mut next = Transaction::new(commit_ts);
            next.id = open.txn.id;
            let mut part = std::mem::replace(&mut open.txn, next);
            part.more = true;
            open.parts = true;
            self.pending.push_back(SourceEvent::Transaction(part));
        }
        Ok(())
    }

    /// The open group ends at `log_pos` of the current file.
    fn commit(&mut self, log_pos: u64) {
        let open = self.open.take();
        if log_pos > 0 {
            self.pos = log_pos;
        }
        let (commit_ts, mut txn, gtid, mysql_gtid) = match open {
            Some(o) => (o.commit_ts, o.txn, o.gtid, o.mysql_gtid),
            None => {
                let ts = self.last_ts;
                let mut txn = Transaction::new(ts);
                txn.id = txn_id(&[b"at", self.file.as_bytes(), &self.pos.to_le_bytes()]);
                (ts, txn, None, None)
            }
        };
        if let (Some(pos), Some(g)) = (&mut self.gtid, gtid) {
            pos.apply(g);
        }
        if let (Some(set), Some((uuid, gno))) = (&mut self.mysql_gtid, mysql_gtid) {
            set.add(&uuid, gno);
        }
        txn.commit_ts = commit_ts;
        txn.more = false;
        txn.position = Some(self.position().encode());
        self.pending.push_back(SourceEvent::Transaction(txn));
        // A whole group came through: the connection works.
        self.reconnects = 0;
        if let Some((file, pos)) = &self.end
            && (binlog_index(&self.file), self.pos) >= (binlog_index(file), *pos)
        {
            self.ended = true;
        }
    }
}

/// A transaction's id from what identifies it in the binlog (its GTID, or
/// where it is): FNV-1a over the parts, the same in every build.
fn txn_id(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in part.iter().chain(&[0xff]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The number of a binlog file (`base.000012` → 12), for ordering positions.
fn binlog_index(name: &str) -> u64 {
    name.rsplit('.')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn ends_like_binlog(name: &[u8]) -> bool {
    // `<base>.<digits>`.
    match name.iter().rposition(|&b| b == b'.') {
        Some(dot) => dot + 1 < name.len() && name[dot + 1..].iter().all(u8::is_ascii_digit),
        None => false,
    }
}

fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn rand_server_id() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(now_millis());
    (1 << 30) | (h.finish() as u32 & 0x3FFF_FFFF)
}

/// The current end of the binlog: (file, offset).
async fn master_status(conn: &mut Conn) -> Result<(String, u64), MysqlError> {
    // MySQL 8.4 renamed it SHOW BINARY LOG STATUS.
    let row: Option<mysql_async::Row> = match conn.query_first("SHOW MASTER STATUS").await {
        Err(mysql_async::Error::Server(s)) if s.code == 1064 => conn
            .query_first("SHOW BINARY LOG STATUS")
            .await
            .map_err(MysqlError::query)?,
        other => other.map_err(MysqlError::query)?,
    };
    let row = row.ok_or_else(|| {
        MysqlError::Setup("SHOW MASTER STATUS shows nothing: binary logging is off".into())
    })?;
    let file: String = row
        .get(0)
        .ok_or_else(|| MysqlError::Query("SHOW MASTER STATUS has no file".into()))?;
    let pos: u64 = row
        .get(1)
        .ok_or_else(|| MysqlError::Query("SHOW MASTER STATUS has no position".into()))?;
    Ok((file, pos))
}

/// Whether a MySQL server writes GTIDs (`gtid_mode` ON).
async fn mysql_gtid_mode(conn: &mut Conn) -> Result<bool, MysqlError> {
    let mode: Option<String> = conn
        .query_first("SELECT @@GLOBAL.gtid_mode")
        .await
        .map_err(MysqlError::query)?;
    Ok(mode.is_some_and(|m| m.eq_ignore_ascii_case("ON")))
}

/// MariaDB's GTID position at a binlog file and offset.
async fn binlog_gtid_pos(conn: &mut Conn, file: &str, pos: u64) -> Result<GtidPos, MysqlError> {
    let g: Option<Option<String>> = conn
        .exec_first("SELECT BINLOG_GTID_POS(?, ?)", (file, pos))
        .await
        .map_err(MysqlError::query)?;
    match g.flatten() {
        Some(g) => GtidPos::parse(&g).map_err(MysqlError::Decode),
        None => Err(MysqlError::PositionLost(format!(
            "the server has no binlog position {file}:{pos} (purged, or not a transaction boundary)"
        ))),
    }
}

/// The position of the first group committed at or after `secs`: the server's
/// binlog files are scanned (newest first, by their first group's time).
async fn position_at_time(source: &MysqlSource, secs: i64) -> Result<(String, u64), MysqlError> {
    let mut conn = source.connect_plain().await?;
    let logs: Vec<mysql_async::Row> = conn
        .query("SHOW BINARY LOGS")
        .await
        .map_err(MysqlError::query)?;
    let files: Vec<String> = logs.iter().filter_map(|r| r.get::<String, _>(0)).collect();
    drop(conn);
    // The newest file whose first group is at or before `secs`: the group is
    // in it, or it is the first group of the next file.
    let mut found = None;
    let mut newer: Option<&String> = None;
    for file in files.iter().rev() {
        match scan_file(source, file, None).await? {
            Some((ts, _)) if i64::from(ts) <= secs => {
                found = Some(file);
                break;
            }
            _ => newer = Some(file),
        }
    }
    let Some(file) = found.or(newer) else {
        return Err(MysqlError::PositionLost(
            "the server has no binlog files".into(),
        ));
    };
    if let Some((_, pos)) = scan_file(source, file, Some(secs)).await? {
        return Ok((file.clone(), pos));
    }
    // Nothing at or after `secs` in it: the next file's first group, or the end.
    let next = files
        .iter()
        .position(|f| f == file)
        .and_then(|i| files.get(i + 1));
    if let Some(next) = next
        && let Some((_, pos)) = scan_file(source, next, None).await?
    {
        return Ok((next.clone(), pos));
    }
    let mut conn = source.connect_plain().await?;
    master_status(&mut conn).await
}

/// The first group of `file` (at or after `at_or_after`, if given): its time
/// and the offset where it starts. Reads with a non-blocking dump.
async fn scan_file(
    source: &MysqlSource,
    file: &str,
    at_or_after: Option<i64>,
) -> Result<Option<(u32, u64)>, MysqlError> {
    let mut conn = source.connect_plain().await?;
    conn.query_drop("SET @mariadb_slave_capability=4")
        .await
        .map_err(MysqlError::query)?;
    let name = file.as_bytes().to_vec();
    let request = BinlogStreamRequest::new(rand_server_id())
        .with_filename(&name)
        .with_pos(4)
        .with_non_blocking();
    let mut stream = conn.get_binlog_stream(request).await.map_err(|e| match e {
        mysql_async::Error::Server(s) if s.code == 1236 => MysqlError::PositionLost(s.message),
        e => MysqlError::query(e),
    })?;
    let mut last_end = 4u64;
    let mut result = None;
    while let Some(event) = stream.next().await {
        let event = event.map_err(|e| MysqlError::Query(e.to_string()))?;
        let h = event.header();
        let start = last_end;
        if h.log_pos() > 0 {
            last_end = u64::from(h.log_pos());
        }
        if matches!(h.event_type_raw(), 162 | 33 | 34)
            && at_or_after.is_none_or(|t| i64::from(h.timestamp()) >= t)
        {
            result = Some((h.timestamp(), start));
            break;
        }
    }
    let _ = stream.close().await;
    Ok(result)
}

impl sluice_core::Source for MysqlSource {
    type Error = MysqlError;

    async fn next_event(&mut self) -> Result<SourceEvent, MysqlError> {
        self.read().await?;
        Ok(self.pending.pop_front().expect("read leaves an event"))
    }

    fn stats(&self) -> Option<Arc<SourceStats>> {
        Some(self.stats.clone())
    }

    fn resume(&mut self, from: &Checkpoint) -> Result<(), ResumeError> {
        if let Some(p) = &from.position {
            Position::decode(p)?;
        }
        self.from = from.clone();
        self.placed = false;
        self.last_ts = self.last_ts.max(CommitTs::from(from.ts));
        Ok(())
    }
}

/// Checks a server for `config` the way a create does: connects, checks the
/// settings and grants, and pins a `now` or `time:` start to the GTID position
/// (or file and offset) it stands for, so that a restart before the first
/// checkpoint starts from the same place. Returns the config to store.
pub async fn prepare(config: &MysqlConfig) -> Result<MysqlConfig, MysqlError> {
    let mut source = MysqlSource::new(config.clone());
    let mut conn = source.connect_plain().await?;
    let info = check::check(&mut conn).await?;
    let mut out = config.clone();
    match &config.start_position {
        StartPosition::Now | StartPosition::Time(_) => {
            source.place(&mut conn, info.flavor).await?;
            out.start_position = match (&source.gtid, &source.mysql_gtid) {
                (Some(g), _) => StartPosition::Gtid(g.to_string()),
                (None, Some(set)) => StartPosition::Gtid(set.to_string()),
                (None, None) => StartPosition::File {
                    name: source.file.clone(),
                    pos: source.pos,
                },
            };
        }
        StartPosition::Gtid(_) if info.flavor == Flavor::MySql => {
            // Checks that the server takes a GTID set.
            source.place(&mut conn, info.flavor).await?;
        }
        // An explicit position is used as given: the first read checks that it
        // still exists (an update of a changefeed that has a checkpoint must not
        // be refused because its original start was purged since).
        StartPosition::Gtid(_) | StartPosition::File { .. } => {}
    }
    let _ = conn.disconnect().await;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mysql_common::binlog::consts::BinlogVersion;
    use mysql_common::binlog::events::{BinlogEventFooter, FormatDescriptionEvent};

    /// An event of `kind` with `body`, its header and its CRC32, as a server
    /// sends it; `corrupt` flips a bit of the body after the checksum was taken.
    fn raw_event(kind: u8, body: &[u8], corrupt: bool) -> Event {
        let size = (19 + body.len() + 4) as u32;
        let mut raw = Vec::new();
        raw.extend_from_slice(&1_700_000_000u32.to_le_bytes()); // timestamp
        raw.push(kind);
        raw.extend_from_slice(&1u32.to_le_bytes()); // server id
        raw.extend_from_slice(&size.to_le_bytes());
        raw.extend_from_slice(&1_000u32.to_le_bytes()); // log pos
        raw.extend_from_slice(&0u16.to_le_bytes()); // flags
        raw.extend_from_slice(body);
        let crc = crc32(&raw);
        raw.extend_from_slice(&crc.to_le_bytes());
        if corrupt {
            raw[20] ^= 1;
        }
        let fde = FormatDescriptionEvent::new(BinlogVersion::Version4).with_footer(
            BinlogEventFooter::new(BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32),
        );
        Event::read(&fde, &raw[..]).expect("an event")
    }

    /// An XID event: a commit.
    fn xid_event(corrupt: bool) -> Event {
        raw_event(16, &77u64.to_le_bytes(), corrupt)
    }

    fn crc32(bytes: &[u8]) -> u32 {
        // Bitwise CRC-32 (IEEE), as the server computes it.
        let mut crc = !0u32;
        for &b in bytes {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xEDB8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    #[test]
    fn an_event_that_fails_its_checksum_stops_the_reader_with_where() {
        let mut source = MysqlSource::new(MysqlConfig::new("mysql://u@h"));
        source.file = "binlog.000007".into();
        // A sound commit is taken.
        source.on_event(xid_event(false)).unwrap();
        assert!(matches!(
            source.pending.pop_front(),
            Some(SourceEvent::Transaction(_))
        ));
        // A corrupt one is refused, naming the file and offset; nothing is handed on.
        let err = source.on_event(xid_event(true)).unwrap_err();
        assert!(matches!(err, MysqlError::Decode(_)), "{err}");
        assert!(err.is_fatal());
        assert!(
            err.to_string().contains("binlog.000007:1000") && err.to_string().contains("checksum"),
            "{err}"
        );
        assert!(source.pending.is_empty());
    }

    #[test]
    fn a_mysql_gtid_event_and_its_commit_extend_the_saved_gtid_set() {
        use mysql_common::binlog::events::GtidEvent;
        use mysql_common::proto::MySerialize;
        let uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let sid = [
            0x3e, 0x11, 0xfa, 0x47, 0x71, 0xca, 0x11, 0xe1, 0x9e, 0x33, 0xc8, 0x0a, 0xa9, 0x42,
            0x95, 0x62,
        ];
        let mut body = Vec::new();
        GtidEvent::new(sid, 42).serialize(&mut body);
        let mut source = MysqlSource::new(MysqlConfig::new("mysql://u@h"));
        source.mysql_gtid = Some(MysqlGtidSet::parse(&format!("{uuid}:1-41")).unwrap());
        source.file = "binlog.000003".into();
        source.on_event(raw_event(33, &body, false)).unwrap();
        source.on_event(xid_event(false)).unwrap();
        let Some(SourceEvent::Transaction(txn)) = source.pending.pop_front() else {
            panic!("a transaction");
        };
        let position = Position::decode(&txn.position.unwrap()).unwrap();
        assert_eq!(position.gtid.as_deref(), Some(&*format!("{uuid}:1-42")));
        assert_eq!(
            (position.file.as_str(), position.pos),
            ("binlog.000003", 1000)
        );
        // The commit ts comes from the group's binlog time.
        assert_eq!(txn.commit_ts.physical_millis(), 1_700_000_000_000);
    }
}
