//! The record format of a redo log file.
//!
//! A file starts with a header: the magic `SLUICERD`, the format version
//! (u16, little-endian), the log kind (0 rows, 1 DDL) and the compression (0
//! none, 1 an LZ4 frame, 2 a Zstandard frame of everything after the header,
//! each with its content checksum). Records follow back to back (after
//! decompression), each framed as
//!
//! ```text
//! length: u32 LE   bytes of the payload
//! crc:    u32 LE   CRC32C of the payload
//! payload          a Record, postcard-encoded (the encoding of this format version)
//! ```
//!
//! Version 2 (written now) encodes a rows record's arrays as little-endian
//! bytes (see the `rows` module); version 1 encoded every number as a varint. This
//! build reads both.
//!
//! A reader checks every frame: a record whose frame runs past the end of the
//! file is torn (a write that did not finish), one whose CRC does not match
//! or whose payload does not decode is damaged; reading stops there and says
//! at which offset and why. Nothing past a damaged record is trusted.

use serde::{Deserialize, Serialize};
use sluice_core::{ColumnData, DdlEvent, TableSchema};

pub(crate) mod rows;

/// The first bytes of every redo log file.
pub const MAGIC: &[u8; 8] = b"SLUICERD";
/// The version of the encoding this build writes.
pub const FORMAT_VERSION: u16 = 2;
/// The oldest version of the encoding this build reads.
pub const OLDEST_READ_VERSION: u16 = 1;
/// Bytes of the file header.
pub const HEADER_LEN: usize = 12;
/// Bytes of a record's frame besides its payload.
pub const FRAME_LEN: usize = 8;
/// The largest payload a record may have; a length above it is damage.
pub const MAX_RECORD_BYTES: usize = 2 << 30;

/// Which log a file belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LogKind {
    /// Row changes (and the schemas they refer to).
    Rows,
    /// Schema changes.
    Ddl,
}

impl LogKind {
    fn code(self) -> u8 {
        match self {
            LogKind::Rows => 0,
            LogKind::Ddl => 1,
        }
    }

    /// How file names of this log start.
    pub fn prefix(self) -> &'static str {
        match self {
            LogKind::Rows => "rows",
            LogKind::Ddl => "ddl",
        }
    }
}

/// The rows of one table in a [`Record::Rows`], column-oriented as
/// `sluice_core::TableBatch` holds them; the commit ts and transaction id of
/// each row are its transaction's (`txn` indexes the record's transactions).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableRows {
    /// The table's id ([`TableSchema::table_id`]).
    pub table_id: u32,
    /// Its schema version; a [`Record::Schema`] earlier in the same file has it.
    pub schema_version: u32,
    /// Per row: its op code.
    #[serde(with = "serde_bytes")]
    pub ops: Vec<u8>,
    /// Per row: the index of its transaction in the record.
    pub txn: Vec<u32>,
    /// Per row: its place among its transaction's row changes.
    pub seq: Vec<u32>,
    /// Per row: the source's flag bits (empty: none set).
    #[serde(with = "serde_bytes")]
    pub flags: Vec<u8>,
    /// One column per schema column: a value for every update and delete row.
    pub before: Vec<ColumnData>,
    /// One column per schema column: a value for every insert and update row.
    pub after: Vec<ColumnData>,
}

/// One transaction of a [`Record::Rows`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnMark {
    /// Its commit ts.
    pub commit_ts: u64,
    /// The source's id of it.
    pub id: u64,
    /// More parts of it follow (a transaction too large to hold whole).
    pub more: bool,
}

/// What a redo log holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Record {
    /// A table's schema at one version: rows of it later in the same file
    /// refer to it (each file carries the schemas its rows need).
    Schema(TableSchema),
    /// Row changes of consecutive transactions, in commit-ts order.
    Rows {
        /// The transactions, in commit-ts order.
        txns: Vec<TxnMark>,
        /// Their rows, per table.
        tables: Vec<TableRows>,
    },
    /// A schema change (in the DDL log).
    Ddl(DdlEvent),
    /// The writer was opened again on a log whose meta said `resolved_ts`
    /// (first in each log's first file after that): records before this one
    /// above that ts are discarded by a reader (the writer may have crashed
    /// before their flush was made durable in the meta; they are appended
    /// again after this record as the source reads them again).
    Resumed {
        /// The meta's resolved ts when the writer opened.
        resolved_ts: u64,
    },
}

impl Record {
    /// The highest commit ts the record carries, if any.
    pub fn max_commit_ts(&self) -> Option<u64> {
        match self {
            Record::Schema(_) => None,
            Record::Rows { txns, .. } => txns.iter().map(|t| t.commit_ts).max(),
            Record::Ddl(ddl) => Some(ddl.commit_ts.get()),
            Record::Resumed { .. } => None,
        }
    }
}

/// Why a file, or a record in it, cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Damage {
    /// The header is missing or is not a redo log header of this version.
    #[error("bad header: {0}")]
    Header(String),
    /// The record's frame runs past the end of the file: its write did not
    /// finish.
    #[error("torn record at offset {offset}: {reason}")]
    Torn {
        /// Where the record starts.
        offset: u64,
        /// What is missing.
        reason: String,
    },
    /// The record's payload does not match its CRC32C.
    #[error("record at offset {offset} fails its CRC32C check")]
    Crc {
        /// Where the record starts.
        offset: u64,
    },
    /// The payload matches its CRC but does not decode.
    #[error("record at offset {offset} does not decode: {reason}")]
    Decode {
        /// Where the record starts.
        offset: u64,
        /// Why.
        reason: String,
    },
}

impl Damage {
    /// Where the damage starts.
    pub fn offset(&self) -> u64 {
        match self {
            Damage::Header(_) => 0,
            Damage::Torn { offset, .. }
            | Damage::Crc { offset }
            | Damage::Decode { offset, .. } => *offset,
        }
    }

    /// A record whose write did not finish (rather than one changed after it
    /// was written).
    pub fn is_torn(&self) -> bool {
        matches!(self, Damage::Torn { .. })
    }
}

/// The header of a file of `kind`.
pub fn header(kind: LogKind) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[10] = kind.code();
    h
}

/// A record too large for the format (it would be refused when read).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a redo record of {0} bytes is larger than the {MAX_RECORD_BYTES} a record may have")]
pub struct TooLarge(pub usize);

/// Appends `record`, framed, to `out`; returns the bytes appended.
pub fn encode(record: &Record, out: &mut Vec<u8>) -> Result<usize, TooLarge> {
    frame(record, out)
}

/// Appends `value` (which must encode as a [`Record`] does), framed, to
/// `out`; returns the bytes appended.
pub(crate) fn frame<T: Serialize, O: Out>(value: &T, out: &mut O) -> Result<usize, TooLarge> {
    let start = out.len();
    out.extend_from_slice(&[0u8; FRAME_LEN]);
    let crc = postcard::serialize_with_flavor(
        value,
        Append {
            out: &mut *out,
            crc: 0,
            summed: start + FRAME_LEN,
        },
    )
    .expect("a record always encodes into a buffer");
    let len = out.len() - start - FRAME_LEN;
    if len > MAX_RECORD_BYTES {
        out.truncate(start);
        return Err(TooLarge(len));
    }
    let bytes = out.as_mut_slice();
    bytes[start..start + 4].copy_from_slice(&(len as u32).to_le_bytes());
    bytes[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    Ok(out.len() - start)
}

/// A buffer records are appended to: a `Vec`, or the writer's block-aligned
/// file buffer.
pub(crate) trait Out {
    fn len(&self) -> usize;
    fn extend_from_slice(&mut self, bytes: &[u8]);
    fn push(&mut self, byte: u8);
    fn truncate(&mut self, len: usize);
    fn as_mut_slice(&mut self) -> &mut [u8];
}

impl Out for Vec<u8> {
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        Vec::extend_from_slice(self, bytes);
    }
    fn push(&mut self, byte: u8) {
        Vec::push(self, byte);
    }
    fn truncate(&mut self, len: usize) {
        Vec::truncate(self, len);
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        self
    }
}

impl Out for crate::buf::FileBuf {
    fn len(&self) -> usize {
        crate::buf::FileBuf::len(self)
    }
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        crate::buf::FileBuf::extend_from_slice(self, bytes);
    }
    fn push(&mut self, byte: u8) {
        crate::buf::FileBuf::push(self, byte);
    }
    fn truncate(&mut self, len: usize) {
        crate::buf::FileBuf::truncate(self, len);
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        crate::buf::FileBuf::as_mut_slice(self)
    }
}

/// A postcard output that appends to a buffer (one `extend_from_slice` per
/// piece: no `io::Write` call per value, no buffer of its own) and sums the
/// CRC of what it appended while that is still in the core's cache: every
/// `CRC_STEP` bytes, not in a pass over the whole payload afterwards (a
/// record of a large run is megabytes, read back from memory).
struct Append<'a, O: Out> {
    out: &'a mut O,
    /// CRC32C of the payload up to `summed`.
    crc: u32,
    /// Where the bytes not summed yet start.
    summed: usize,
}

/// Bytes appended between two steps of the CRC (well inside a core's L2).
const CRC_STEP: usize = 64 << 10;

impl<O: Out> Append<'_, O> {
    fn sum(&mut self) {
        let len = self.out.len();
        self.crc = crc32c::crc32c_append(self.crc, &self.out.as_mut_slice()[self.summed..len]);
        self.summed = len;
    }
}

impl<O: Out> postcard::ser_flavors::Flavor for Append<'_, O> {
    /// The payload's CRC32C.
    type Output = u32;

    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        for piece in data.chunks(CRC_STEP) {
            self.out.extend_from_slice(piece);
            if self.out.len() - self.summed >= CRC_STEP {
                self.sum();
            }
        }
        Ok(())
    }

    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.out.push(data);
        Ok(())
    }

    fn finalize(mut self) -> postcard::Result<u32> {
        self.sum();
        Ok(self.crc)
    }
}

/// Compresses a whole file written with no compression (its header says
/// none) as `compression` says: the header says which, the rest is one frame.
pub fn compress(file: &[u8], compression: sluice_config::RedoCompression) -> Vec<u8> {
    use sluice_config::RedoCompression as C;
    use std::io::Write;
    let code = match compression {
        C::None => return file.to_vec(),
        C::Lz4 => 1,
        C::Zstd => 2,
    };
    let mut out = Vec::with_capacity(file.len() / 2 + HEADER_LEN);
    out.extend_from_slice(&file[..HEADER_LEN]);
    out[11] = code;
    let body = &file[HEADER_LEN..];
    match compression {
        C::None => unreachable!("returned above"),
        C::Lz4 => {
            let mut info = lz4_flex::frame::FrameInfo::new();
            info.content_checksum = true;
            let mut w = lz4_flex::frame::FrameEncoder::with_frame_info(info, out);
            w.write_all(body).expect("writing to a Vec never fails");
            out = w.finish().expect("writing to a Vec never fails");
        }
        C::Zstd => {
            let mut w = zstd::Encoder::new(out, 3).expect("level 3 is valid");
            w.include_checksum(true).expect("a valid parameter");
            w.write_all(body).expect("writing to a Vec never fails");
            out = w.finish().expect("writing to a Vec never fails");
        }
    }
    out
}

/// A whole file as written, decompressed if its header says it is (the
/// header then says none): what [`Records::new`] reads. Offsets in damage
/// found after this are offsets in the decompressed file.
pub fn decompress(bytes: Vec<u8>) -> Result<Vec<u8>, Damage> {
    use std::io::Read;
    if bytes.len() < HEADER_LEN || bytes[..8] != MAGIC[..] || bytes[11] == 0 {
        // Not compressed, or damage `read_header` names.
        return Ok(bytes);
    }
    let what = match bytes[11] {
        1 => "LZ4",
        2 => "Zstandard",
        other => {
            return Err(Damage::Header(format!(
                "unknown compression {other} (0 none, 1 LZ4, 2 Zstandard)"
            )));
        }
    };
    let mut out = bytes[..HEADER_LEN].to_vec();
    out[11] = 0;
    let body = &bytes[HEADER_LEN..];
    // A damaged frame may claim any size: never more than a file can hold
    // (the largest record and its frame, twice over).
    let limit = 2 * (MAX_RECORD_BYTES + FRAME_LEN) as u64;
    let read = match bytes[11] {
        1 => lz4_flex::frame::FrameDecoder::new(body)
            .take(limit)
            .read_to_end(&mut out),
        _ => zstd::Decoder::new(body).and_then(|d| d.take(limit).read_to_end(&mut out)),
    };
    match read {
        Ok(n) if n as u64 >= limit => Err(Damage::Decode {
            offset: HEADER_LEN as u64,
            reason: format!("the {what} frame decompresses to more than {limit} bytes"),
        }),
        Ok(_) => Ok(out),
        Err(e) => Err(Damage::Decode {
            offset: HEADER_LEN as u64,
            reason: format!("the {what} frame does not decompress: {e}"),
        }),
    }
}

/// Reads the header of a file; `Ok` with its kind and format version.
pub fn read_header(bytes: &[u8]) -> Result<(LogKind, u16), Damage> {
    if bytes.len() < HEADER_LEN {
        return Err(Damage::Header(format!(
            "the file has {} bytes, fewer than a header's {HEADER_LEN}",
            bytes.len()
        )));
    }
    if &bytes[..8] != MAGIC {
        return Err(Damage::Header("not a Sluice redo log (wrong magic)".into()));
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    if !(OLDEST_READ_VERSION..=FORMAT_VERSION).contains(&version) {
        return Err(Damage::Header(format!(
            "format version {version}; this build reads versions {OLDEST_READ_VERSION} to {FORMAT_VERSION}"
        )));
    }
    if bytes[11] != 0 {
        return Err(Damage::Header(format!(
            "the compression byte is {}: the file was not decompressed (0 is none)",
            bytes[11]
        )));
    }
    match bytes[10] {
        0 => Ok((LogKind::Rows, version)),
        1 => Ok((LogKind::Ddl, version)),
        other => Err(Damage::Header(format!("unknown log kind {other}"))),
    }
}

/// The records of a file's bytes, in order, each with its offset; the first
/// damage found ends the iteration (with it).
pub struct Records<'a> {
    bytes: &'a [u8],
    version: u16,
    at: usize,
    done: bool,
}

impl<'a> Records<'a> {
    /// The records of a whole file (header included).
    pub fn new(bytes: &'a [u8]) -> Result<(LogKind, Self), Damage> {
        let (kind, version) = read_header(bytes)?;
        Ok((
            kind,
            Self {
                bytes,
                version,
                at: HEADER_LEN,
                done: false,
            },
        ))
    }

    /// Where the next record starts (the end of the last good one).
    pub fn offset(&self) -> u64 {
        self.at as u64
    }
}

impl Iterator for Records<'_> {
    type Item = Result<(u64, Record), Damage>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.at == self.bytes.len() {
            return None;
        }
        let offset = self.at as u64;
        let left = &self.bytes[self.at..];
        let fail = |this: &mut Self, damage| {
            this.done = true;
            Some(Err(damage))
        };
        if left.len() < FRAME_LEN {
            return fail(
                self,
                Damage::Torn {
                    offset,
                    reason: format!("{} bytes left, a frame has {FRAME_LEN}", left.len()),
                },
            );
        }
        let len = u32::from_le_bytes(left[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(left[4..8].try_into().expect("4 bytes"));
        if len > MAX_RECORD_BYTES {
            return fail(
                self,
                Damage::Decode {
                    offset,
                    reason: format!("a length of {len} bytes is past the most a record has"),
                },
            );
        }
        if left.len() - FRAME_LEN < len {
            return fail(
                self,
                Damage::Torn {
                    offset,
                    reason: format!(
                        "the record has {len} bytes, {} are there",
                        left.len() - FRAME_LEN
                    ),
                },
            );
        }
        let payload = &left[FRAME_LEN..FRAME_LEN + len];
        if crc32c::crc32c(payload) != crc {
            return fail(self, Damage::Crc { offset });
        }
        let record = if self.version == 1 {
            postcard::from_bytes::<Record>(payload).map_err(|e| e.to_string())
        } else {
            rows::decode(payload)
        };
        match record {
            Ok(record) => {
                self.at += FRAME_LEN + len;
                Some(Ok((offset, record)))
            }
            Err(reason) => fail(self, Damage::Decode { offset, reason }),
        }
    }
}
