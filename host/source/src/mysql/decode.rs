//! Row images of the binlog's rows events, decoded straight into a
//! transaction's column builders: one [`Decoder`] per column, built once per
//! table map from its types, metadata and the `binlog_row_metadata=FULL`
//! optional fields (names, signedness, charsets, enum and set names, the
//! primary key). No value becomes a heap object of its own.
//!
//! Values travel as the pipeline's column types ([`ColumnType`]); the upstream
//! type stays in [`Column::sql_type`]:
//!
//! | MySQL/MariaDB | carried as |
//! |---|---|
//! | tinyint..bigint | `Int`, or `Uint` when unsigned |
//! | year | `Int` (0 for the zero year) |
//! | bit(n) | `Uint` |
//! | float, double | `Float` (a float as its shortest decimal text reads) |
//! | decimal(p,s) | `Decimal`: exact text |
//! | char, varchar, text | `Text`: UTF-8, converted from the column's charset |
//! | binary, varbinary, blob, geometry | `Blob` |
//! | enum, set | `Text`: the names (a set's joined by `,`) |
//! | date | `Date`: days since 1970-01-01 |
//! | datetime, timestamp | `Datetime`: microseconds since 1970-01-01 00:00:00; a datetime's wall clock read as UTC, a timestamp's instant (UTC) |
//! | time | `Text`: `[-]HH:MM:SS[.ffffff]` |
//! | json (MySQL's binary JSON) | `Json`: its text |
//! | json (MariaDB: a `longtext` alias, so a text column in the table map) | `Text` |
//!
//! MySQL's zero dates (`0000-00-00`, or a zero month or day) have no day count
//! and arrive as NULL.

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::Arc;

use mysql_common::binlog::events::{OptionalMetadataField, TableMapEvent};
use mysql_common::constants::ColumnType as MyType;
use sluice_core::{Column, ColumnType, RowWriter};

/// A charset: how its text becomes UTF-8.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Text {
    /// The binary "charset": bytes, not text.
    Binary,
    /// UTF-8 already (utf8mb4, utf8mb3, ascii).
    Utf8,
    /// Converted to UTF-8.
    Other(&'static encoding_rs::Encoding),
    /// UTF-32 (big-endian code points).
    Utf32,
    /// A single-byte charset with no converter here: each byte as the server
    /// itself converts it (read at connect).
    Table(&'static [char; 256]),
}

/// One collation of the server.
#[derive(Debug, Clone)]
pub(crate) struct Collation {
    /// Its name (`utf8mb4_uca1400_ai_ci`).
    pub name: String,
    /// Its character set (`utf8mb4`).
    pub charset: String,
    /// Bytes per character at most.
    pub maxlen: u8,
}

/// What the server calls its collations, by id, and the conversion tables
/// of its single-byte charsets that have no converter here.
#[derive(Debug, Clone, Default)]
pub(crate) struct Collations(
    pub HashMap<u16, Collation>,
    pub HashMap<String, &'static [char; 256]>,
);

impl Collations {
    fn text(&self, id: u16) -> Result<(Text, u8), String> {
        if id == 63 {
            return Ok((Text::Binary, 1));
        }
        let Some(c) = self.0.get(&id) else {
            return Err(format!(
                "unknown collation id {id} (the server's information_schema lists no such collation)"
            ));
        };
        match charset(&c.charset) {
            Ok(text) => Ok((text, c.maxlen)),
            Err(e) => match self.1.get(&c.charset) {
                Some(table) => Ok((Text::Table(table), c.maxlen)),
                None => Err(e),
            },
        }
    }

    /// The collation with `id`, if the server has it.
    pub(crate) fn get(&self, id: u16) -> Option<&Collation> {
        self.0.get(&id)
    }
}

/// The converter of a MySQL charset name.
pub(crate) fn charset(name: &str) -> Result<Text, String> {
    use encoding_rs as e;
    Ok(match name {
        "binary" => Text::Binary,
        "utf8mb4" | "utf8mb3" | "utf8" | "ascii" => Text::Utf8,
        // MySQL's latin1 is Windows-1252 (with its five holes mapped through).
        "latin1" => Text::Other(e::WINDOWS_1252),
        "latin2" => Text::Other(e::ISO_8859_2),
        "latin5" => Text::Other(e::WINDOWS_1254),
        "latin7" => Text::Other(e::ISO_8859_13),
        "cp1250" => Text::Other(e::WINDOWS_1250),
        "cp1251" => Text::Other(e::WINDOWS_1251),
        "cp1256" => Text::Other(e::WINDOWS_1256),
        "cp1257" => Text::Other(e::WINDOWS_1257),
        "greek" => Text::Other(e::ISO_8859_7),
        "hebrew" => Text::Other(e::ISO_8859_8),
        "koi8r" => Text::Other(e::KOI8_R),
        "koi8u" => Text::Other(e::KOI8_U),
        "gbk" | "gb2312" => Text::Other(e::GBK),
        "gb18030" => Text::Other(e::GB18030),
        "big5" => Text::Other(e::BIG5),
        "sjis" | "cp932" => Text::Other(e::SHIFT_JIS),
        "ujis" | "eucjpms" => Text::Other(e::EUC_JP),
        "euckr" => Text::Other(e::EUC_KR),
        "ucs2" | "utf16" => Text::Other(e::UTF_16BE),
        "utf16le" => Text::Other(e::UTF_16LE),
        "utf32" => Text::Utf32,
        "cp866" => Text::Other(e::IBM866),
        "tis620" => Text::Other(e::WINDOWS_874),
        "macroman" => Text::Other(e::MACINTOSH),
        other => return Err(format!("charset `{other}` is not supported")),
    })
}

/// How one column's values are laid out in a row image.
#[derive(Debug, Clone)]
pub(crate) enum Decoder {
    /// An integer of `width` bytes (1, 2, 3, 4 or 8), little-endian.
    Int { width: u8, unsigned: bool },
    /// One byte: 0, or the year minus 1900.
    Year,
    /// Four bytes.
    Float,
    /// Eight bytes.
    Double,
    /// MySQL's binary decimal.
    Decimal { precision: u8, scale: u8 },
    /// A length (1 or 2 bytes) and the bytes: char, varchar, binary, varbinary.
    /// `pad`: a binary(n) column's length, whose trailing zero bytes the binlog
    /// leaves out.
    Str { len_bytes: u8, text: Text, pad: u16 },
    /// A length (1 to 4 bytes) and the bytes: text, blob, geometry, MariaDB json.
    Blob { len_bytes: u8, text: Text },
    /// MySQL's binary JSON, behind a length of `len_bytes`.
    Json { len_bytes: u8 },
    /// An enum's 1-based index (0: the empty error value), `width` bytes.
    Enum { width: u8, names: Arc<[Box<str>]> },
    /// A set's bitmask, `width` bytes.
    Set { width: u8, names: Arc<[Box<str>]> },
    /// Big-endian bits, `bytes` long.
    Bit { bytes: u8 },
    /// Three bytes: day, month, year packed.
    Date,
    /// MySQL 5.6's time with `fsp` fractional digits.
    Time2 { fsp: u8 },
    /// MySQL 5.6's datetime.
    DateTime2 { fsp: u8 },
    /// MySQL 5.6's timestamp: seconds since the epoch (UTC).
    Timestamp2 { fsp: u8 },
    /// The old time: HHMMSS as a 3-byte integer.
    Time,
    /// The old datetime: YYYYMMDDHHMMSS as an 8-byte integer.
    DateTime,
    /// The old timestamp: 4 bytes of seconds.
    Timestamp,
    /// Always NULL.
    Null,
}

/// A table map read into columns and decoders.
#[derive(Debug, Clone)]
pub(crate) struct TableLayout {
    /// The columns, as the schema has them.
    pub columns: Vec<Column>,
    /// How each column's values are laid out.
    pub decoders: Vec<Decoder>,
}

/// Which server wrote the binlog: a few table-map details differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// MariaDB.
    MariaDb,
    /// MySQL.
    MySql,
}

fn meta<'a>(tme: &'a TableMapEvent<'_>, i: usize) -> &'a [u8] {
    tme.get_column_metadata(i).unwrap_or(&[])
}

/// Reads a table map (with `binlog_row_metadata=FULL`) into columns and decoders.
pub(crate) fn layout(
    tme: &TableMapEvent<'_>,
    flavor: Flavor,
    collations: &Collations,
) -> Result<TableLayout, String> {
    let n = tme.columns_count() as usize;
    let mut types = Vec::with_capacity(n);
    for i in 0..n {
        let ty = tme
            .get_column_type(i)
            .map_err(|e| format!("column {}: {e}", i + 1))?
            .ok_or_else(|| format!("column {}: unknown column type", i + 1))?;
        types.push(ty);
    }
    // Both count YEAR among the numeric columns for signedness (MariaDB's
    // YEAR is an unsigned tiny integer there).
    let numeric = |t: MyType| t.is_numeric_type();
    // MariaDB gives geometry columns a character set (binary) in the
    // table map's charset list; MySQL does not.
    let character_type = |t: MyType| {
        t.is_character_type() || (flavor == Flavor::MariaDb && t == MyType::MYSQL_TYPE_GEOMETRY)
    };
    let mut names: Vec<Option<String>> = vec![None; n];
    let mut unsigned = vec![false; n];
    let mut charsets: Vec<Option<u16>> = vec![None; n];
    let mut enum_set_charsets: Vec<Option<u16>> = vec![None; n];
    let mut enum_names: Vec<Vec<Box<str>>> = Vec::new();
    let mut set_names: Vec<Vec<Box<str>>> = Vec::new();
    let mut key = vec![false; n];
    let character: Vec<usize> = (0..n).filter(|&i| character_type(types[i])).collect();
    let enum_or_set: Vec<usize> = (0..n).filter(|&i| types[i].is_enum_or_set_type()).collect();
    for field in tme.iter_optional_meta() {
        let field = field.map_err(|e| format!("optional metadata: {e}"))?;
        match field {
            OptionalMetadataField::Signedness(bits) => {
                let mut k = 0;
                for (i, t) in types.iter().enumerate() {
                    if numeric(*t) {
                        unsigned[i] = bits.get(k).is_some_and(|b| *b);
                        k += 1;
                    }
                }
            }
            OptionalMetadataField::DefaultCharset(d) => {
                for &i in &character {
                    charsets[i] = Some(d.default_charset());
                }
                for nd in d.iter_non_default() {
                    let nd = nd.map_err(|e| format!("charsets: {e}"))?;
                    if let Some(&i) = character.get(nd.column_index() as usize) {
                        charsets[i] = Some(nd.charset());
                    }
                }
            }
            OptionalMetadataField::ColumnCharset(c) => {
                for (k, cs) in c.iter_charsets().enumerate() {
                    let cs = cs.map_err(|e| format!("charsets: {e}"))?;
                    if let Some(&i) = character.get(k) {
                        charsets[i] = Some(cs);
                    }
                }
            }
            OptionalMetadataField::EnumAndSetDefaultCharset(d) => {
                for &i in &enum_or_set {
                    enum_set_charsets[i] = Some(d.default_charset());
                }
                for nd in d.iter_non_default() {
                    let nd = nd.map_err(|e| format!("charsets: {e}"))?;
                    if let Some(&i) = enum_or_set.get(nd.column_index() as usize) {
                        enum_set_charsets[i] = Some(nd.charset());
                    }
                }
            }
            OptionalMetadataField::EnumAndSetColumnCharset(c) => {
                for (k, cs) in c.iter_charsets().enumerate() {
                    let cs = cs.map_err(|e| format!("charsets: {e}"))?;
                    if let Some(&i) = enum_or_set.get(k) {
                        enum_set_charsets[i] = Some(cs);
                    }
                }
            }
            OptionalMetadataField::ColumnName(c) => {
                for (i, name) in c.iter_names().enumerate() {
                    let name = name.map_err(|e| format!("column names: {e}"))?;
                    if i < n {
                        names[i] = Some(name.name().into_owned());
                    }
                }
            }
            OptionalMetadataField::EnumStrValue(v) => {
                for values in v.iter_values() {
                    let values = values.map_err(|e| format!("enum names: {e}"))?;
                    enum_names.push(values.values().iter().map(|s| s.value().into()).collect());
                }
            }
            OptionalMetadataField::SetStrValue(v) => {
                for values in v.iter_values() {
                    let values = values.map_err(|e| format!("set names: {e}"))?;
                    set_names.push(values.values().iter().map(|s| s.value().into()).collect());
                }
            }
            OptionalMetadataField::SimplePrimaryKey(pk) => {
                for i in pk.iter_indexes() {
                    let i = i.map_err(|e| format!("primary key: {e}"))? as usize;
                    if i < n {
                        key[i] = true;
                    }
                }
            }
            OptionalMetadataField::PrimaryKeyWithPrefix(pk) => {
                for k in pk.iter_keys() {
                    let k = k.map_err(|e| format!("primary key: {e}"))?;
                    let i = k.column_index() as usize;
                    if i < n {
                        key[i] = true;
                    }
                }
            }
            _ => {}
        }
    }
    let (mut enums, mut sets) = (enum_names.into_iter(), set_names.into_iter());
    let nullable = tme.null_bitmask();
    let mut columns = Vec::with_capacity(n);
    let mut decoders = Vec::with_capacity(n);
    for i in 0..n {
        let Some(name) = names[i].take() else {
            return Err(
                "the table map has no column names: set binlog_row_metadata=FULL on the server"
                    .into(),
            );
        };
        let m = meta(tme, i);
        let text_of = |cs: Option<u16>| -> Result<(Text, u8), String> {
            match cs {
                Some(id) => collations
                    .text(id)
                    .map_err(|e| format!("column `{name}`: {e}")),
                None => Ok((Text::Utf8, 4)),
            }
        };
        let u = unsigned[i];
        let uns = if u { " unsigned" } else { "" };
        let (decoder, ty, sql_type) = match types[i] {
            MyType::MYSQL_TYPE_TINY => (
                Decoder::Int {
                    width: 1,
                    unsigned: u,
                },
                int_ty(u),
                format!("tinyint{uns}"),
            ),
            MyType::MYSQL_TYPE_SHORT => (
                Decoder::Int {
                    width: 2,
                    unsigned: u,
                },
                int_ty(u),
                format!("smallint{uns}"),
            ),
            MyType::MYSQL_TYPE_INT24 => (
                Decoder::Int {
                    width: 3,
                    unsigned: u,
                },
                int_ty(u),
                format!("mediumint{uns}"),
            ),
            MyType::MYSQL_TYPE_LONG => (
                Decoder::Int {
                    width: 4,
                    unsigned: u,
                },
                int_ty(u),
                format!("int{uns}"),
            ),
            MyType::MYSQL_TYPE_LONGLONG => (
                Decoder::Int {
                    width: 8,
                    unsigned: u,
                },
                int_ty(u),
                format!("bigint{uns}"),
            ),
            MyType::MYSQL_TYPE_YEAR => (Decoder::Year, ColumnType::Int, "year".into()),
            MyType::MYSQL_TYPE_FLOAT => (Decoder::Float, ColumnType::Float, format!("float{uns}")),
            MyType::MYSQL_TYPE_DOUBLE => {
                (Decoder::Double, ColumnType::Float, format!("double{uns}"))
            }
            MyType::MYSQL_TYPE_NEWDECIMAL => {
                let (p, s) = (byte(m, 0), byte(m, 1));
                (
                    Decoder::Decimal {
                        precision: p,
                        scale: s,
                    },
                    ColumnType::Decimal,
                    format!("decimal({p},{s}){uns}"),
                )
            }
            MyType::MYSQL_TYPE_VARCHAR | MyType::MYSQL_TYPE_VAR_STRING => {
                let max = u16::from_le_bytes([byte(m, 0), byte(m, 1)]);
                let (text, maxlen) = text_of(charsets[i])?;
                let len_bytes = if max < 256 { 1 } else { 2 };
                let (ty, sql) = match text {
                    Text::Binary => (ColumnType::Blob, format!("varbinary({max})")),
                    _ => (
                        ColumnType::Text,
                        format!("varchar({})", max / u16::from(maxlen.max(1))),
                    ),
                };
                (
                    Decoder::Str {
                        len_bytes,
                        text,
                        pad: 0,
                    },
                    ty,
                    sql,
                )
            }
            MyType::MYSQL_TYPE_STRING => {
                let (b0, b1) = (usize::from(byte(m, 0)), usize::from(byte(m, 1)));
                let max = if (b0 & 0x30) != 0x30 {
                    b1 | (((b0 & 0x30) ^ 0x30) << 4)
                } else {
                    b1
                };
                let (text, maxlen) = text_of(charsets[i])?;
                let len_bytes = if max < 256 { 1 } else { 2 };
                let (ty, sql, pad) = match text {
                    Text::Binary => (ColumnType::Blob, format!("binary({max})"), max as u16),
                    _ => (
                        ColumnType::Text,
                        format!("char({})", max / usize::from(maxlen.max(1))),
                        0,
                    ),
                };
                (
                    Decoder::Str {
                        len_bytes,
                        text,
                        pad,
                    },
                    ty,
                    sql,
                )
            }
            MyType::MYSQL_TYPE_BLOB
            | MyType::MYSQL_TYPE_TINY_BLOB
            | MyType::MYSQL_TYPE_MEDIUM_BLOB
            | MyType::MYSQL_TYPE_LONG_BLOB => {
                let len_bytes = byte(m, 0);
                let (text, _) = text_of(charsets[i])?;
                let size = match len_bytes {
                    1 => "tiny",
                    2 => "",
                    3 => "medium",
                    _ => "long",
                };
                let (ty, sql) = match text {
                    Text::Binary => (ColumnType::Blob, format!("{size}blob")),
                    _ => (ColumnType::Text, format!("{size}text")),
                };
                (Decoder::Blob { len_bytes, text }, ty, sql)
            }
            MyType::MYSQL_TYPE_GEOMETRY => (
                Decoder::Blob {
                    len_bytes: byte(m, 0),
                    text: Text::Binary,
                },
                ColumnType::Blob,
                "geometry".into(),
            ),
            MyType::MYSQL_TYPE_JSON => match flavor {
                Flavor::MySql => (
                    Decoder::Json {
                        len_bytes: byte(m, 0),
                    },
                    ColumnType::Json,
                    "json".into(),
                ),
                // Not seen from MariaDB (its JSON is a longtext), kept for safety.
                Flavor::MariaDb => (
                    Decoder::Blob {
                        len_bytes: byte(m, 0),
                        text: Text::Utf8,
                    },
                    ColumnType::Json,
                    "json".into(),
                ),
            },
            MyType::MYSQL_TYPE_ENUM | MyType::MYSQL_TYPE_SET => {
                let is_enum = types[i] == MyType::MYSQL_TYPE_ENUM;
                let names: Arc<[Box<str>]> = if is_enum { enums.next() } else { sets.next() }
                    .ok_or_else(|| {
                        format!("column `{name}`: the table map has no names for its values")
                    })?
                    .into();
                let width = byte(m, 1).max(1);
                let list = names
                    .iter()
                    .map(|v| format!("'{}'", v.replace('\'', "''")))
                    .collect::<Vec<_>>()
                    .join(",");
                // Names are read as UTF-8 (lossily); a non-UTF-8 enum charset
                // (enum_set_charsets[i]) is not converted yet.
                let _ = enum_set_charsets[i];
                if is_enum {
                    (
                        Decoder::Enum { width, names },
                        ColumnType::Text,
                        format!("enum({list})"),
                    )
                } else {
                    (
                        Decoder::Set { width, names },
                        ColumnType::Text,
                        format!("set({list})"),
                    )
                }
            }
            MyType::MYSQL_TYPE_BIT => {
                let bits = usize::from(byte(m, 1)) * 8 + usize::from(byte(m, 0));
                let bytes = byte(m, 1) + u8::from(byte(m, 0) > 0);
                (
                    Decoder::Bit { bytes },
                    ColumnType::Uint,
                    format!("bit({bits})"),
                )
            }
            MyType::MYSQL_TYPE_DATE | MyType::MYSQL_TYPE_NEWDATE => {
                (Decoder::Date, ColumnType::Date, "date".into())
            }
            MyType::MYSQL_TYPE_TIME2 => {
                let fsp = byte(m, 0).min(6);
                (
                    Decoder::Time2 { fsp },
                    ColumnType::Text,
                    with_fsp("time", fsp),
                )
            }
            MyType::MYSQL_TYPE_DATETIME2 => {
                let fsp = byte(m, 0).min(6);
                (
                    Decoder::DateTime2 { fsp },
                    ColumnType::Datetime,
                    with_fsp("datetime", fsp),
                )
            }
            MyType::MYSQL_TYPE_TIMESTAMP2 => {
                let fsp = byte(m, 0).min(6);
                (
                    Decoder::Timestamp2 { fsp },
                    ColumnType::Datetime,
                    with_fsp("timestamp", fsp),
                )
            }
            MyType::MYSQL_TYPE_TIME => (Decoder::Time, ColumnType::Text, "time".into()),
            MyType::MYSQL_TYPE_DATETIME => {
                (Decoder::DateTime, ColumnType::Datetime, "datetime".into())
            }
            MyType::MYSQL_TYPE_TIMESTAMP => {
                (Decoder::Timestamp, ColumnType::Datetime, "timestamp".into())
            }
            MyType::MYSQL_TYPE_NULL => (Decoder::Null, ColumnType::Text, "null".into()),
            other => return Err(format!("column `{name}`: type {other:?} is not supported")),
        };
        columns.push(Column {
            name,
            ty,
            sql_type,
            nullable: nullable.get(i).is_some_and(|b| *b),
            key: key[i],
        });
        decoders.push(decoder);
    }
    Ok(TableLayout { columns, decoders })
}

fn int_ty(unsigned: bool) -> ColumnType {
    if unsigned {
        ColumnType::Uint
    } else {
        ColumnType::Int
    }
}

fn byte(m: &[u8], i: usize) -> u8 {
    m.get(i).copied().unwrap_or(0)
}

fn with_fsp(name: &str, fsp: u8) -> String {
    if fsp == 0 {
        name.into()
    } else {
        format!("{name}({fsp})")
    }
}

/// A row image could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct DecodeError(pub String);

fn truncated() -> DecodeError {
    DecodeError(
        "a row image ends early (the event is truncated or the table map does not match it)".into(),
    )
}

/// A cursor over a rows event's row data.
pub(crate) struct Cursor<'a> {
    pub data: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.data.len() < n {
            return Err(truncated());
        }
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        Ok(head)
    }

    fn le(&mut self, n: usize) -> Result<u64, DecodeError> {
        let b = self.take(n)?;
        Ok(b.iter()
            .rev()
            .fold(0u64, |acc, &x| (acc << 8) | u64::from(x)))
    }

    fn be(&mut self, n: usize) -> Result<u64, DecodeError> {
        let b = self.take(n)?;
        Ok(b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x)))
    }

    /// Whether any bytes are left.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

/// Reads one row image (its NULL bitmap, then the values of the columns it
/// has) into `w`. `present` says which columns the image has: all of them with
/// `binlog_row_image=FULL`, which the source requires.
pub(crate) fn read_image(
    cur: &mut Cursor<'_>,
    decoders: &[Decoder],
    w: &mut RowWriter<'_>,
) -> Result<(), DecodeError> {
    let n = decoders.len();
    let nulls = cur.take(n.div_ceil(8))?;
    for (i, d) in decoders.iter().enumerate() {
        if nulls[i / 8] & (1 << (i % 8)) != 0 {
            w.null();
            continue;
        }
        read_value(cur, d, w)?;
    }
    Ok(())
}

/// Reads `fsp` digits of fraction stored in `(fsp + 1) / 2` big-endian bytes, as
/// microseconds.
fn read_frac(cur: &mut Cursor<'_>, fsp: u8) -> Result<u32, DecodeError> {
    Ok(match fsp {
        0 => 0,
        1 | 2 => cur.be(1)? as u32 * 10_000,
        3 | 4 => cur.be(2)? as u32 * 100,
        _ => cur.be(3)? as u32,
    })
}

fn push_frac(buf: &mut Vec<u8>, micros: u32, fsp: u8) {
    if fsp > 0 {
        let digits = format!("{micros:06}");
        buf.push(b'.');
        buf.extend_from_slice(&digits.as_bytes()[..usize::from(fsp)]);
    }
}

fn push_text(buf: &mut Vec<u8>, bytes: &[u8], text: Text) {
    match text {
        Text::Binary | Text::Utf8 => buf.extend_from_slice(bytes),
        Text::Other(enc) => {
            let (s, _) = enc.decode_without_bom_handling(bytes);
            buf.extend_from_slice(s.as_bytes());
        }
        Text::Utf32 => {
            let mut tmp = [0u8; 4];
            for c in bytes.chunks(4) {
                let code = c.iter().fold(0u32, |acc, b| acc << 8 | u32::from(*b));
                let ch = char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER);
                buf.extend_from_slice(ch.encode_utf8(&mut tmp).as_bytes());
            }
        }
        Text::Table(table) => {
            let mut tmp = [0u8; 4];
            for &b in bytes {
                let ch = table[usize::from(b)];
                buf.extend_from_slice(ch.encode_utf8(&mut tmp).as_bytes());
            }
        }
    }
}

fn read_value(cur: &mut Cursor<'_>, d: &Decoder, w: &mut RowWriter<'_>) -> Result<(), DecodeError> {
    match d {
        Decoder::Int { width, unsigned } => {
            let width = usize::from(*width);
            let raw = cur.le(width)?;
            if *unsigned {
                w.uint(raw);
            } else {
                let shift = 64 - 8 * width as u32;
                w.int(((raw << shift) as i64) >> shift);
            }
        }
        Decoder::Year => {
            let y = cur.le(1)?;
            w.int(if y == 0 { 0 } else { 1900 + y as i64 });
        }
        Decoder::Float => {
            let f = f32::from_bits(cur.le(4)? as u32);
            // The shortest text of the float, read as a double: what SELECT shows.
            let v = if f.is_finite() {
                format!("{f}").parse::<f64>().unwrap_or(f64::from(f))
            } else {
                f64::from(f)
            };
            w.float(v);
        }
        Decoder::Double => {
            w.float(f64::from_bits(cur.le(8)?));
        }
        Decoder::Decimal { precision, scale } => {
            let size = mysql_common::binlog::decimal::decimal_bin_size(
                usize::from(*precision),
                usize::from(*scale),
            );
            let bytes = cur.take(size)?;
            let dec = mysql_common::binlog::decimal::Decimal::read_bin(
                bytes,
                usize::from(*precision),
                usize::from(*scale),
                false,
            )
            .map_err(|e| DecodeError(format!("a decimal value does not decode: {e}")))?;
            w.bytes_with(|buf| {
                let _ = write!(buf, "{dec}");
            });
        }
        Decoder::Str {
            len_bytes,
            text,
            pad,
        } => {
            let len = cur.le(usize::from(*len_bytes))? as usize;
            let bytes = cur.take(len)?;
            let pad = usize::from(*pad).saturating_sub(len);
            w.bytes_with(|buf| {
                push_text(buf, bytes, *text);
                buf.resize(buf.len() + pad, 0);
            });
        }
        Decoder::Blob { len_bytes, text } => {
            let len = cur.le(usize::from(*len_bytes))? as usize;
            let bytes = cur.take(len)?;
            w.bytes_with(|buf| push_text(buf, bytes, *text));
        }
        Decoder::Json { len_bytes } => {
            let len = cur.le(usize::from(*len_bytes))? as usize;
            let bytes = cur.take(len)?;
            let text = json_text(bytes)?;
            w.bytes(text.as_bytes());
        }
        Decoder::Enum { width, names } => {
            let i = cur.le(usize::from(*width))? as usize;
            let name = if i == 0 {
                ""
            } else {
                names.get(i - 1).map_or("", |s| s)
            };
            w.bytes(name.as_bytes());
        }
        Decoder::Set { width, names } => {
            let mask = cur.le(usize::from(*width))?;
            w.bytes_with(|buf| {
                let mut first = true;
                for (bit, name) in names.iter().enumerate().take(64) {
                    if mask & (1 << bit) != 0 {
                        if !first {
                            buf.push(b',');
                        }
                        first = false;
                        buf.extend_from_slice(name.as_bytes());
                    }
                }
            });
        }
        Decoder::Bit { bytes } => {
            let v = cur.be(usize::from(*bytes).min(8))?;
            w.uint(v);
        }
        Decoder::Date => {
            let v = cur.le(3)?;
            let (day, month, year) = (v & 31, (v >> 5) & 15, v >> 9);
            match days(year as i64, month as i64, day as i64) {
                Some(d) => w.int(d),
                None => w.null(),
            };
        }
        Decoder::Time2 { fsp } => {
            let packed = read_time2(cur, *fsp)?;
            let neg = packed < 0;
            let p = packed.unsigned_abs();
            let hms = p >> 24;
            let micros = (p % (1 << 24)) as u32;
            let (h, m, s) = ((hms >> 12) & 0x3FF, (hms >> 6) & 63, hms & 63);
            w.bytes_with(|buf| {
                if neg {
                    buf.push(b'-');
                }
                let _ = write!(buf, "{h:02}:{m:02}:{s:02}");
                push_frac(buf, micros, *fsp);
            });
        }
        Decoder::DateTime2 { fsp } => {
            let int = cur.be(5)? as i64 - 0x80_0000_0000;
            let micros = read_frac(cur, *fsp)?;
            let ymd = int >> 17;
            let ym = ymd >> 5;
            let (day, month, year) = (ymd & 31, ym % 13, ym / 13);
            let hms = int & 0x1_FFFF;
            let (h, m, s) = (hms >> 12, (hms >> 6) & 63, hms & 63);
            match days(year, month, day) {
                Some(d) => {
                    w.int(((d * 86_400 + h * 3600 + m * 60 + s) * 1_000_000) + i64::from(micros))
                }
                None => w.null(),
            };
        }
        Decoder::Timestamp2 { fsp } => {
            let secs = cur.be(4)? as i64;
            let micros = read_frac(cur, *fsp)?;
            if secs == 0 && micros == 0 {
                // The zero timestamp.
                w.null();
            } else {
                w.int(secs * 1_000_000 + i64::from(micros));
            }
        }
        Decoder::Time => {
            let raw = cur.le(3)? as i64;
            let v = (raw << 40) >> 40;
            let neg = v < 0;
            let v = v.unsigned_abs();
            let (h, m, s) = (v / 10_000, (v / 100) % 100, v % 100);
            w.text(format_args!(
                "{}{h:02}:{m:02}:{s:02}",
                if neg { "-" } else { "" }
            ));
        }
        Decoder::DateTime => {
            let v = cur.le(8)? as i64;
            let (date, time) = (v / 1_000_000, v % 1_000_000);
            match days(date / 10_000, (date / 100) % 100, date % 100) {
                Some(d) => w.int(
                    (d * 86_400 + (time / 10_000) * 3600 + ((time / 100) % 100) * 60 + time % 100)
                        * 1_000_000,
                ),
                None => w.null(),
            };
        }
        Decoder::Timestamp => {
            let secs = cur.le(4)? as i64;
            if secs == 0 {
                w.null();
            } else {
                w.int(secs * 1_000_000);
            }
        }
        Decoder::Null => {
            w.null();
        }
    }
    Ok(())
}

/// MySQL's packed TIME2 as a signed number: hours, minutes, seconds in the high
/// bits and microseconds in the low 24.
fn read_time2(cur: &mut Cursor<'_>, fsp: u8) -> Result<i64, DecodeError> {
    const INT_OFS: i64 = 0x80_0000;
    Ok(match fsp {
        0 => (cur.be(3)? as i64 - INT_OFS) << 24,
        1 | 2 => {
            let mut int = cur.be(3)? as i64 - INT_OFS;
            let mut frac = cur.be(1)? as i64;
            if int < 0 && frac != 0 {
                int += 1;
                frac -= 0x100;
            }
            (int << 24) + frac * 10_000
        }
        3 | 4 => {
            let mut int = cur.be(3)? as i64 - INT_OFS;
            let mut frac = cur.be(2)? as i64;
            if int < 0 && frac != 0 {
                int += 1;
                frac -= 0x1_0000;
            }
            (int << 24) + frac * 100
        }
        _ => cur.be(6)? as i64 - 0x8000_0000_0000,
    })
}

/// Days since 1970-01-01 of a date; `None` for MySQL's zero dates and dates
/// with a zero month or day, which have no day count.
fn days(y: i64, m: i64, d: i64) -> Option<i64> {
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    // Howard Hinnant's days-from-civil.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some(era * 146_097 + doe - 719_468)
}

/// MySQL's binary JSON as JSON text.
fn json_text(bytes: &[u8]) -> Result<String, DecodeError> {
    use mysql_common::binlog::jsonb;
    use mysql_common::io::ParseBuf;
    use mysql_common::proto::MyDeserialize;
    if bytes.is_empty() {
        return Ok("null".into());
    }
    let value = jsonb::Value::deserialize((), &mut ParseBuf(bytes))
        .map_err(|e| DecodeError(format!("a JSON value does not decode: {e}")))?;
    let json = serde_json::Value::try_from(value)
        .map_err(|e| DecodeError(format!("a JSON value does not convert: {e}")))?;
    Ok(json.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn day_counts_follow_the_calendar() {
        assert_eq!(days(1970, 1, 1), Some(0));
        assert_eq!(days(2024, 1, 1), Some(19_723));
        assert_eq!(days(1969, 12, 31), Some(-1));
        assert_eq!(days(2000, 2, 29), Some(11_016));
        assert_eq!(days(0, 0, 0), None);
    }

    #[test]
    fn time2_reads_negative_fractions() {
        // -00:00:01.5 with fsp 1: MySQL writes int part -1 + 1 = 0 ... as packed.
        let packed: i64 = -((1 << 24) + 500_000);
        // Encode as fsp 6 (6 bytes, offset 0x800000000000) and read it back.
        let raw = (packed + 0x8000_0000_0000) as u64;
        let bytes = raw.to_be_bytes();
        let mut cur = Cursor { data: &bytes[2..] };
        assert_eq!(read_time2(&mut cur, 6).unwrap(), packed);
    }
}
