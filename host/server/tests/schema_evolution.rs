//! The random schema-evolution test: a seeded generator keeps a model of an
//! upstream MariaDB schema (tables with every column type the binlog source
//! decodes, collations of every kind, generated columns, composite and
//! unique keys, foreign keys, partitions, views and sequences) and emits
//! random DML in random transactions interleaved with random DDL of every
//! class the issue names; `sluice server` replicates it through sink-mysql
//! into a second MariaDB (and, in the second test, through sink-postgres
//! into PostgreSQL, with the part of the generator PostgreSQL supports).
//! After every batch of steps the test waits until the changefeed has
//! applied everything and checks that the downstream equals the upstream.
//! It is this test, not a list of cases, that shows that a schema nobody
//! thought of replicates.
//!
//! - `SLUICE_SCHEMA_SEED` (default [`DEFAULT_SEED`]) and `SLUICE_SCHEMA_STEPS`
//!   (default [`DEFAULT_STEPS`]) choose the run; `seed=... steps=...` is
//!   printed first, and a failure prints the seed, the steps of the failing
//!   batch, the statements last run and what the changefeed reported.
//! - Every step run goes to `target/schema-evolution/<test>-seed-<seed>.sql`
//!   (`<test>-replay-<file>.sql` for a replay), steps that failed upstream
//!   commented out with their error; on a failure the servers' logs are kept
//!   beside it. `SLUICE_SCHEMA_REPLAY=<file>` runs such a file (or a
//!   hand-written reproduction, steps headed by `-- #n`) through the same
//!   checks instead of the generator.
//! - `cargo xtask schema-evolution [--steps N] [--seed S]` is the longer run.
//! - `SLUICE_SCHEMA_GENERAL_LOG=1` logs every statement the downstream
//!   MariaDB runs; a failure keeps that log beside the journal.
//! - [`SKIP`] leaves out classes that are known to fail, each with the
//!   failure it stands for (none today); [`POSTGRES_KINDS`] is what the
//!   PostgreSQL test generates.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sluice_tests::mariadb::PrivateMariaDb;
use sluice_tests::postgres::{PrivatePostgres, ROOT_PASSWORD};

mod common;
use common::server::Server;

/// The upstream database the generator works in.
const DB: &str = "evo";
/// Steps between two checks of the downstream.
const BATCH: usize = 50;
/// Steps of a default run (about two and a half minutes for both tests on a
/// 2-core machine).
const DEFAULT_STEPS: usize = 400;
/// The seed of a default run.
const DEFAULT_SEED: u64 = 20_261_201;
/// How long the downstream may take to catch up after a batch.
const CATCH_UP: Duration = Duration::from_secs(60);
/// The changefeed's name.
const FEED: &str = "evolve";
/// Upstream failures tolerated, in percent of the steps run: the generator's
/// model must stay close enough to the upstream for its statements to be
/// mostly valid.
const MAX_SKIPPED_PERCENT: usize = 15;
/// At most this many tables live at once (more are dropped).
const MAX_TABLES: usize = 14;
/// At most this many rows per table (more are deleted).
const MAX_ROWS: usize = 250;
/// New foreign keys only while fewer tables than this have one (a table
/// linked by a foreign key takes no DDL while [`Class::ForeignKeyDdl`] is
/// skipped; without a bound every table ends up linked).
const MAX_LINKED_TABLES: usize = 6;

// ---------------------------------------------------------------------------
// Classes and step kinds
// ---------------------------------------------------------------------------

/// What a step exercises: the classes of the issue. Each can be left out
/// with [`SKIP`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Class {
    /// Inserts, updates and deletes of rows of every type (always on).
    Rows,
    /// Composite and unique keys: key-changing updates, unique swaps,
    /// `REPLACE`, `INSERT ... ON DUPLICATE KEY UPDATE`.
    Keys,
    /// Tables without a primary key.
    Keyless,
    /// `FLOAT` columns in tables without a primary key (rows are matched
    /// on every column there).
    KeylessFloats,
    /// `POINT` columns.
    Spatial,
    /// `YEAR` columns.
    Year,
    /// Generated columns, `VIRTUAL` and `STORED`, also in unique keys.
    Generated,
    /// Foreign keys with `CASCADE`, `SET NULL` and `RESTRICT` actions, parents
    /// and children written in one transaction, cascades.
    ForeignKeys,
    /// Parent rows deleted or re-keyed (so that `ON DELETE`/`ON UPDATE`
    /// actions act) while writes of their children may be in flight.
    ForeignKeyCascades,
    /// Rows written with `foreign_key_checks = 0` (orphans).
    ForeignKeyChecksOff,
    /// DDL on a table a foreign key links to another one (as parent or
    /// child) while rows of both are in flight.
    ForeignKeyDdl,
    /// Partitioned tables (`RANGE`, `LIST`, `HASH`, `KEY`) and their
    /// `ADD`/`DROP`/`REORGANIZE`/`TRUNCATE`/`COALESCE`/`EXCHANGE PARTITION`.
    Partitions,
    /// DML and DDL under `sql_mode = ''` (narrowing `MODIFY` with longer
    /// values present, overlong and out-of-range values).
    NonStrict,
    /// Columns and tables of every character set and collation kind
    /// (`utf8mb4_uca1400_ai_ci`, binary, accent/case sensitive, multi-byte).
    Collations,
    /// `CREATE`/`ALTER`/`DROP VIEW`.
    Views,
    /// `CREATE`/`ALTER`/`DROP SEQUENCE`, `NEXTVAL`, `SETVAL`, columns with
    /// `DEFAULT NEXT VALUE FOR`.
    Sequences,
    /// DDL naming several tables: `RENAME TABLE a TO b, c TO d`, swaps,
    /// `DROP TABLE a, b`.
    MultiTableDdl,
    /// Transactions writing several tables.
    MultiTableTxn,
    /// `CREATE TABLE ... LIKE`.
    CreateLike,
    /// `CREATE TABLE ... SELECT`.
    CreateSelect,
    /// `ADD`/`DROP`/`RENAME`/`MODIFY COLUMN`, `CONVERT TO CHARACTER SET`.
    Columns,
    /// Columns added to a table that holds rows, with values the rows
    /// already there take from the `ALTER` itself (no row events): a default
    /// (literal, or the implicit one of a `NOT NULL` column).
    AddedDefaults,
    /// Generated columns added to a table that holds rows (their values
    /// for the rows already there come from the `ALTER` itself).
    AddedGenerated,
    /// Adding and dropping indexes.
    Indexes,
    /// `TRUNCATE TABLE`.
    Truncate,
    /// `CREATE TABLE`, `DROP TABLE`, `RENAME TABLE` of one table.
    Tables,
    /// `ALTER TABLE ... RENAME TO`.
    AlterRename,
}

/// Classes the generator leaves out until the product handles them: each
/// entry names the failure it stands for (see the test's report). Empty
/// means every class runs.
const SKIP: &[Class] = &[];

macro_rules! kinds {
    ($($kind:ident: $class:ident, $weight:literal;)*) => {
        /// One kind of step the generator makes.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
        enum Kind {
            $($kind,)*
            /// A step read from a replay file.
            Replay,
        }

        /// Every kind with its class and its weight (how often it is tried).
        const KINDS: &[(Kind, Class, u32)] = &[$((Kind::$kind, Class::$class, $weight),)*];
    };
}

kinds! {
    Insert: Rows, 110;
    Update: Rows, 80;
    Delete: Rows, 35;
    RangeUpdate: Rows, 12;
    RangeDelete: Rows, 8;
    BulkInsert: Rows, 6;
    Upsert: Keys, 18;
    Replace: Keys, 8;
    KeyUpdate: Keys, 18;
    UniqueSwap: Keys, 10;
    MultiTableTxn: MultiTableTxn, 55;
    ParentAndChildren: ForeignKeys, 35;
    CascadeDelete: ForeignKeyCascades, 16;
    CascadeUpdate: ForeignKeyCascades, 16;
    ChecksOff: ForeignKeyChecksOff, 5;
    NonStrictWrite: NonStrict, 12;
    NextValue: Sequences, 16;
    SetValue: Sequences, 5;
    CreateTable: Tables, 28;
    CreateLike: CreateLike, 6;
    CreateSelect: CreateSelect, 6;
    DropTable: Tables, 4;
    DropTables: MultiTableDdl, 3;
    RenameTable: Tables, 3;
    AlterRename: AlterRename, 2;
    RenameTables: MultiTableDdl, 4;
    SwapTables: MultiTableDdl, 3;
    AddColumns: Columns, 14;
    AddGenerated: Generated, 8;
    DropColumn: Columns, 8;
    RenameColumn: Columns, 6;
    ModifyColumn: Columns, 8;
    NonStrictModify: NonStrict, 6;
    ConvertCharset: Collations, 3;
    AddIndex: Indexes, 6;
    CreateIndex: Indexes, 3;
    DropIndex: Indexes, 5;
    AddUnique: Indexes, 4;
    AddForeignKey: ForeignKeys, 6;
    DropForeignKey: ForeignKeys, 3;
    Truncate: Truncate, 4;
    PartitionTable: Partitions, 4;
    RemovePartitioning: Partitions, 2;
    AddPartition: Partitions, 4;
    DropPartition: Partitions, 3;
    ReorganizePartition: Partitions, 4;
    TruncatePartition: Partitions, 3;
    CoalescePartition: Partitions, 2;
    ExchangePartition: MultiTableDdl, 4;
    CreateView: Views, 6;
    ReplaceView: Views, 3;
    DropView: Views, 3;
    CreateSequence: Sequences, 4;
    AlterSequence: Sequences, 3;
    DropSequence: Sequences, 2;
    RenameSequence: Sequences, 1;
}

impl Kind {
    /// Whether it writes rows only (no DDL).
    fn is_dml(self) -> bool {
        matches!(
            self,
            Kind::Insert
                | Kind::Update
                | Kind::Delete
                | Kind::RangeUpdate
                | Kind::RangeDelete
                | Kind::BulkInsert
                | Kind::Upsert
                | Kind::Replace
                | Kind::KeyUpdate
                | Kind::UniqueSwap
                | Kind::MultiTableTxn
                | Kind::ParentAndChildren
                | Kind::CascadeDelete
                | Kind::CascadeUpdate
                | Kind::ChecksOff
                | Kind::NonStrictWrite
                | Kind::NextValue
                | Kind::SetValue
        )
    }

    /// The class a kind belongs to.
    fn class(self) -> Class {
        KINDS
            .iter()
            .find(|(k, _, _)| *k == self)
            .map_or(Class::Rows, |(_, c, _)| *c)
    }
}

/// What the PostgreSQL test generates: the kinds whose effect sink-postgres
/// replays (its README: rows, tables created from their rows, `ADD`/`DROP`/
/// `RENAME`/`MODIFY COLUMN`, `DROP`/`RENAME`/`TRUNCATE TABLE`, foreign keys
/// with their actions, partition operations that keep every row; indexes
/// and views are not replayed and change no row). Left out by design:
/// partition operations that drop or move rows (refused, documented), a
/// narrowing `MODIFY` under a non-strict `sql_mode` (PostgreSQL refuses
/// an out-of-range cast where MySQL clamps), sequences (PostgreSQL's are
/// compared by the per-class test), tables without a primary key (`sluice
/// diff` compares by it).
const POSTGRES_KINDS: &[Kind] = &[
    Kind::Insert,
    Kind::Update,
    Kind::Delete,
    Kind::RangeUpdate,
    Kind::RangeDelete,
    Kind::BulkInsert,
    Kind::Upsert,
    Kind::Replace,
    Kind::KeyUpdate,
    Kind::UniqueSwap,
    Kind::MultiTableTxn,
    Kind::NonStrictWrite,
    Kind::CreateTable,
    Kind::CreateLike,
    Kind::CreateSelect,
    Kind::DropTable,
    Kind::DropTables,
    Kind::RenameTable,
    Kind::AlterRename,
    Kind::RenameTables,
    Kind::SwapTables,
    Kind::AddColumns,
    Kind::AddGenerated,
    Kind::DropColumn,
    Kind::AddIndex,
    Kind::CreateIndex,
    Kind::DropIndex,
    Kind::AddUnique,
    Kind::Truncate,
    Kind::CreateView,
    Kind::DropView,
    Kind::RenameColumn,
    Kind::ModifyColumn,
    Kind::ConvertCharset,
    Kind::PartitionTable,
    Kind::AddPartition,
    Kind::ReorganizePartition,
    Kind::CoalescePartition,
    Kind::RemovePartitioning,
    Kind::ParentAndChildren,
    Kind::CascadeDelete,
    Kind::CascadeUpdate,
    Kind::AddForeignKey,
    Kind::DropForeignKey,
];

/// Classes the PostgreSQL test leaves out until sink-postgres handles them
/// (besides [`SKIP`]), each with the failure it stands for.
const POSTGRES_SKIP: &[Class] = &[
    // A generated column added to a table with rows: PostgreSQL computes
    // the rows already there only for integer arithmetic over columns
    // (sink-postgres README); `ALTER TABLE h ADD COLUMN g VARCHAR(40) AS
    // (CONCAT('g', id))` leaves g NULL there until each row changes.
    Class::AddedGenerated,
];

/// What a generator may make: every kind whose class is not skipped, and
/// (for PostgreSQL) only the kinds listed.
#[derive(Clone)]
struct Profile {
    kinds: Option<&'static [Kind]>,
    skip: Vec<Class>,
}

impl Profile {
    fn allows_kind(&self, kind: Kind) -> bool {
        self.kinds.is_none_or(|k| k.contains(&kind)) && self.allows(kind.class())
    }

    /// Whether features of `class` may appear (in tables as well as in
    /// steps). The PostgreSQL profile has no keyless tables, sequences or
    /// rows written with foreign key checks off.
    fn allows(&self, class: Class) -> bool {
        if self.skip.contains(&class) {
            return false;
        }
        match self.kinds {
            None => true,
            Some(_) => !matches!(
                class,
                Class::ForeignKeyChecksOff | Class::Keyless | Class::Sequences
            ),
        }
    }
}

// ---------------------------------------------------------------------------
// A small deterministic generator (splitmix64)
// ---------------------------------------------------------------------------

/// splitmix64: small, fast and the same on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }

    /// A number in `lo..=hi`.
    fn between(&mut self, lo: i128, hi: i128) -> i128 {
        let span = (hi - lo + 1) as u128;
        let wide = ((self.next() as u128) << 64) | self.next() as u128;
        lo + (wide % span) as i128
    }

    /// True with a chance of `percent` in 100.
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.index(items.len())]
    }
}

// ---------------------------------------------------------------------------
// Column types and values
// ---------------------------------------------------------------------------

/// A character set and collation, with text it can hold.
struct Collation {
    charset: &'static str,
    name: &'static str,
    samples: &'static [&'static str],
}

const ASCII: &[&str] = &[
    "plain",
    "Mixed Case",
    "quote's",
    "back\\slash",
    "tab\tin",
    "",
    "x",
];
const LATIN1: &[&str] = &["café", "naïve", "Straße", "€uro", "plain", "quote's"];
const LATIN2: &[&str] = &["łódź", "Žluťoučký kůň", "plain"];
const CYRILLIC: &[&str] = &["привет", "Ёлка", "plain"];
const GREEK: &[&str] = &["γειά σου", "plain"];
const HEBREW: &[&str] = &["שלום", "plain"];
const TURKISH: &[&str] = &["İstanbul", "ğüşö", "plain"];
const BALTIC: &[&str] = &["ąčęėįšųūž", "plain"];
const ARABIC: &[&str] = &["مرحبا", "plain"];
const CHINESE_SIMPLE: &[&str] = &["中文", "汉字", "plain"];
const CHINESE_TRADITIONAL: &[&str] = &["中文", "漢字", "plain"];
const JAPANESE: &[&str] = &["日本語", "カタカナ", "plain"];
const KOREAN: &[&str] = &["한국어", "plain"];
const BMP: &[&str] = &["ünïcödé ✓", "中文", "привет", "café", "plain", "quote's"];
const FULL: &[&str] = &[
    "emoji 🦀",
    "𝄞 clef",
    "ünïcödé ✓",
    "中文",
    "plain",
    "back\\slash",
];

/// Collations columns may have. Index 0 is the database default; the
/// others are only used with [`Class::Collations`]. `utf32` is left out:
/// the source does not decode it (docs/sources/mysql.md, "Supported
/// charsets").
const COLLATIONS: &[Collation] = &[
    coll("utf8mb4", "utf8mb4_general_ci", FULL),
    coll("utf8mb4", "utf8mb4_bin", FULL),
    coll("utf8mb4", "utf8mb4_unicode_520_ci", FULL),
    coll("utf8mb4", "utf8mb4_uca1400_ai_ci", FULL),
    coll("utf8mb4", "utf8mb4_uca1400_as_cs", FULL),
    coll("utf8mb4", "utf8mb4_nopad_bin", FULL),
    coll("utf8mb3", "utf8mb3_general_ci", BMP),
    coll("utf8mb3", "utf8mb3_uca1400_ai_ci", BMP),
    coll("latin1", "latin1_swedish_ci", LATIN1),
    coll("latin1", "latin1_bin", LATIN1),
    coll("latin1", "latin1_german2_ci", LATIN1),
    coll("latin2", "latin2_general_ci", LATIN2),
    coll("cp1250", "cp1250_general_ci", LATIN2),
    coll("ascii", "ascii_general_ci", ASCII),
    coll("ascii", "ascii_bin", ASCII),
    coll("cp1251", "cp1251_general_ci", CYRILLIC),
    coll("koi8r", "koi8r_general_ci", CYRILLIC),
    coll("greek", "greek_general_ci", GREEK),
    coll("hebrew", "hebrew_general_ci", HEBREW),
    coll("latin5", "latin5_turkish_ci", TURKISH),
    coll("latin7", "latin7_general_ci", BALTIC),
    coll("cp1257", "cp1257_general_ci", BALTIC),
    coll("cp1256", "cp1256_general_ci", ARABIC),
    coll("gbk", "gbk_chinese_ci", CHINESE_SIMPLE),
    coll("gb2312", "gb2312_chinese_ci", CHINESE_SIMPLE),
    coll("big5", "big5_chinese_ci", CHINESE_TRADITIONAL),
    coll("sjis", "sjis_japanese_ci", JAPANESE),
    coll("cp932", "cp932_japanese_ci", JAPANESE),
    coll("ujis", "ujis_japanese_ci", JAPANESE),
    coll("eucjpms", "eucjpms_japanese_ci", JAPANESE),
    coll("euckr", "euckr_korean_ci", KOREAN),
    coll("ucs2", "ucs2_general_ci", BMP),
    coll("ucs2", "ucs2_uca1400_ai_ci", BMP),
    coll("utf16", "utf16_general_ci", FULL),
    coll("utf16", "utf16_uca1400_ai_ci", FULL),
    coll("utf16le", "utf16le_general_ci", FULL),
];

const fn coll(
    charset: &'static str,
    name: &'static str,
    samples: &'static [&'static str],
) -> Collation {
    Collation {
        charset,
        name,
        samples,
    }
}

/// A column type, as far as the generator needs to know it.
#[derive(Clone, Debug, PartialEq)]
enum Ty {
    Int {
        bytes: u8,
        unsigned: bool,
    },
    Year,
    Bit(u8),
    Float,
    Double,
    Decimal(u8, u8),
    Char(u16),
    Varchar(u16),
    /// 0 tiny, 1 plain, 2 medium, 3 long.
    Text(u8),
    Binary(u16),
    Varbinary(u16),
    /// 0 tiny, 1 plain, 2 medium, 3 long.
    Blob(u8),
    Enum,
    Set,
    Date,
    Time(u8),
    Datetime(u8),
    Timestamp(u8),
    Json,
    Point,
}

/// `FLOAT` values: most exact in binary, some not (3.14).
const FLOATS: &[&str] = &[
    "0", "0.5", "-1.25", "3.14", "1e10", "-2.5e-5", "123.456", "65504",
];
const JSONS: &[&str] = &[
    "{\"n\": N, \"s\": \"text\"}",
    "[1, 2, N]",
    "{\"a\": {\"b\": [true, null, N]}, \"s\": \"ü\"}",
    "\"just a string\"",
    "N",
];

impl Ty {
    /// A random type of those `profile` allows.
    fn random(r: &mut Rng, profile: &Profile) -> Ty {
        let spatial = profile.allows(Class::Spatial);
        let year = profile.allows(Class::Year);
        let signed = |r: &mut Rng| r.chance(60);
        loop {
            return match r.below(25) {
                0 => Ty::Int {
                    bytes: 1,
                    unsigned: !signed(r),
                },
                1 => Ty::Int {
                    bytes: 2,
                    unsigned: !signed(r),
                },
                2 => Ty::Int {
                    bytes: 3,
                    unsigned: !signed(r),
                },
                3 => Ty::Int {
                    bytes: 4,
                    unsigned: !signed(r),
                },
                4 => Ty::Int {
                    bytes: 8,
                    unsigned: !signed(r),
                },
                5 if year => Ty::Year,
                5 => continue,
                6 => Ty::Bit(*r.pick(&[1, 8, 17, 64])),
                7 => Ty::Float,
                8 => Ty::Double,
                9 => {
                    let p = *r.pick(&[5u8, 12, 20, 30, 40]);
                    Ty::Decimal(p, r.below(u64::from(p / 2).min(10) + 1) as u8)
                }
                10 => Ty::Char(1 + r.below(40) as u16),
                11 | 12 => Ty::Varchar(*r.pick(&[8, 16, 40, 100, 300])),
                13 => Ty::Text(r.below(4) as u8),
                14 => Ty::Binary(1 + r.below(16) as u16),
                15 => Ty::Varbinary(*r.pick(&[8, 32, 64])),
                16 => Ty::Blob(r.below(4) as u8),
                17 => Ty::Enum,
                18 => Ty::Set,
                19 => Ty::Date,
                20 => Ty::Time(r.below(7) as u8),
                21 => Ty::Datetime(r.below(7) as u8),
                22 => Ty::Timestamp(r.below(7) as u8),
                23 => Ty::Json,
                _ if spatial => Ty::Point,
                _ => continue,
            };
        }
    }

    fn sql(&self) -> String {
        const SIZES: [&str; 4] = ["TINY", "", "MEDIUM", "LONG"];
        match self {
            Ty::Int { bytes, unsigned } => format!(
                "{}{}",
                match bytes {
                    1 => "TINYINT",
                    2 => "SMALLINT",
                    3 => "MEDIUMINT",
                    4 => "INT",
                    _ => "BIGINT",
                },
                if *unsigned { " UNSIGNED" } else { "" }
            ),
            Ty::Year => "YEAR".into(),
            Ty::Bit(n) => format!("BIT({n})"),
            Ty::Float => "FLOAT".into(),
            Ty::Double => "DOUBLE".into(),
            Ty::Decimal(p, s) => format!("DECIMAL({p},{s})"),
            Ty::Char(n) => format!("CHAR({n})"),
            Ty::Varchar(n) => format!("VARCHAR({n})"),
            Ty::Text(s) => format!("{}TEXT", SIZES[usize::from(*s)]),
            Ty::Binary(n) => format!("BINARY({n})"),
            Ty::Varbinary(n) => format!("VARBINARY({n})"),
            Ty::Blob(s) => format!("{}BLOB", SIZES[usize::from(*s)]),
            Ty::Enum => "ENUM('red','green','blue','x y')".into(),
            Ty::Set => "SET('a','b','c','d')".into(),
            Ty::Date => "DATE".into(),
            Ty::Time(f) => format!("TIME({f})"),
            Ty::Datetime(f) => format!("DATETIME({f})"),
            Ty::Timestamp(f) => format!("TIMESTAMP({f})"),
            Ty::Json => "JSON".into(),
            Ty::Point => "POINT".into(),
        }
    }

    /// Text types take a character set and collation.
    fn is_text(&self) -> bool {
        matches!(self, Ty::Char(_) | Ty::Varchar(_) | Ty::Text(_))
    }

    fn is_int(&self) -> bool {
        matches!(self, Ty::Int { .. })
    }

    /// Indexing it needs a prefix length.
    fn needs_prefix(&self) -> bool {
        matches!(self, Ty::Text(_) | Ty::Blob(_) | Ty::Json)
    }

    /// It can be indexed at all (not spatial here).
    fn indexable(&self) -> bool {
        !matches!(self, Ty::Point)
    }

    /// It can be the second column of a composite primary key.
    fn key_capable(&self) -> bool {
        match self {
            Ty::Int { .. } | Ty::Date => true,
            Ty::Char(n) | Ty::Varchar(n) => *n >= 4 && *n <= 100,
            _ => false,
        }
    }

    /// The range of an integer type.
    fn int_range(&self) -> Option<(i128, i128)> {
        let Ty::Int { bytes, unsigned } = self else {
            return None;
        };
        let bits = u32::from(*bytes) * 8;
        Some(if *unsigned {
            (0, (1i128 << bits) - 1)
        } else {
            (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
        })
    }

    /// A literal of this type (never NULL); text in a way collation `coll`
    /// can hold.
    fn literal(&self, r: &mut Rng, coll: usize) -> String {
        match self {
            Ty::Int { .. } => {
                let (lo, hi) = self.int_range().expect("an integer type");
                let v = match r.below(10) {
                    0 => lo,
                    1 => hi,
                    _ => r.between(lo.max(-100_000), hi.min(100_000)),
                };
                v.to_string()
            }
            Ty::Year => (1901 + r.below(255)).to_string(),
            Ty::Bit(n) => {
                let v = if *n >= 64 {
                    r.next()
                } else {
                    r.next() & ((1u64 << n) - 1)
                };
                format!("b'{v:b}'")
            }
            Ty::Float => r.pick(FLOATS).to_string(),
            Ty::Double => {
                let v = r.between(-10_000_000, 10_000_000) as f64 / 1024.0;
                if r.chance(20) {
                    format!("{v}e{}", r.between(-30, 30))
                } else {
                    format!("{v}")
                }
            }
            Ty::Decimal(p, s) => {
                let digits = u32::from(p - s).min(18);
                let int = r.below(10u64.pow(digits));
                let frac = if *s > 0 {
                    format!(
                        ".{:0width$}",
                        r.below(10u64.pow(u32::from(*s).min(18))),
                        width = usize::from(*s).min(18)
                    )
                } else {
                    String::new()
                };
                format!("{}{int}{frac}", if r.chance(30) { "-" } else { "" })
            }
            Ty::Char(n) | Ty::Varchar(n) => quote(&text_value(r, coll, usize::from(*n))),
            Ty::Text(size) => {
                let max = [60, 2000, 5000, 9000][usize::from(*size)];
                quote(&text_value(r, coll, max))
            }
            Ty::Binary(n) => {
                let len = 1 + r.below(u64::from(*n)) as usize;
                hex(r, len)
            }
            Ty::Varbinary(n) => {
                let len = r.below(u64::from(*n) + 1) as usize;
                hex(r, len)
            }
            Ty::Blob(size) => {
                let len = if *size > 0 && r.chance(10) {
                    3000
                } else {
                    r.below(200) as usize
                };
                hex(r, len)
            }
            Ty::Enum => format!("'{}'", r.pick(&["red", "green", "blue", "x y"])),
            Ty::Set => format!("'{}'", r.pick(&["", "a", "b,c", "a,b,c,d", "d"])),
            Ty::Date => format!(
                "'{:04}-{:02}-{:02}'",
                1000 + r.below(9000),
                1 + r.below(12),
                1 + r.below(28)
            ),
            Ty::Time(f) => format!(
                "'{}{}:{:02}:{:02}{}'",
                if r.chance(20) { "-" } else { "" },
                r.below(838),
                r.below(60),
                r.below(60),
                fraction(r, *f)
            ),
            Ty::Datetime(f) => format!(
                "'{:04}-{:02}-{:02} {:02}:{:02}:{:02}{}'",
                1000 + r.below(9000),
                1 + r.below(12),
                1 + r.below(28),
                r.below(24),
                r.below(60),
                r.below(60),
                fraction(r, *f)
            ),
            Ty::Timestamp(f) => format!(
                "'{:04}-{:02}-{:02} {:02}:{:02}:{:02}{}'",
                1971 + r.below(66),
                1 + r.below(12),
                1 + r.below(28),
                r.below(24),
                r.below(60),
                r.below(60),
                fraction(r, *f)
            ),
            Ty::Json => quote(&r.pick(JSONS).replace('N', &r.below(1000).to_string())),
            Ty::Point => format!(
                "PointFromText('POINT({} {})')",
                r.between(-1000, 1000) as f64 / 4.0,
                r.between(-1000, 1000) as f64 / 4.0
            ),
        }
    }

    /// A literal that does not fit (too long, out of range): what
    /// `sql_mode = ''` truncates or clamps with a warning.
    fn overflow_literal(&self, r: &mut Rng, coll: usize) -> Option<String> {
        Some(match self {
            Ty::Int { .. } => {
                let (lo, hi) = self.int_range()?;
                if r.chance(50) {
                    (hi * 4 + 7).to_string()
                } else {
                    (lo * 4 - 7).to_string()
                }
            }
            Ty::Decimal(p, _) => format!("1{}", "9".repeat(usize::from(*p) + 2)),
            Ty::Char(n) | Ty::Varchar(n) => {
                let long = text_value(r, coll, 20).repeat(usize::from(*n) / 4 + 2);
                quote(&format!("{long}{}", "z".repeat(usize::from(*n) + 3)))
            }
            Ty::Text(0) => quote(&"overlong ".repeat(40)),
            Ty::Year => "3000".into(),
            _ => return None,
        })
    }

    /// A value unique to `n` (for columns that carry unique keys).
    fn unique_literal(&self, n: u64) -> String {
        match self {
            Ty::Char(_) | Ty::Varchar(_) => format!("'u{n}'"),
            _ => (n + 1000).to_string(),
        }
    }

    /// The value of a composite key's second column for row `id`: the
    /// primary key stays unique by `id` alone.
    fn key_literal(&self, id: i64) -> String {
        let k = id.rem_euclid(7);
        match self {
            Ty::Date => format!("'2001-01-{:02}'", k + 1),
            Ty::Char(_) | Ty::Varchar(_) => format!("'k{k}'"),
            _ => k.to_string(),
        }
    }

    /// A narrower version (for a `MODIFY` under `sql_mode = ''` with longer
    /// values present).
    fn narrower(&self) -> Option<Ty> {
        Some(match self {
            Ty::Varchar(n) if *n > 4 => Ty::Varchar(n / 3),
            Ty::Char(n) if *n > 2 => Ty::Char(n / 2),
            Ty::Text(s) if *s > 0 => Ty::Text(0),
            Ty::Int { bytes, unsigned } if *bytes > 1 => Ty::Int {
                bytes: 1,
                unsigned: *unsigned,
            },
            Ty::Decimal(p, s) if *p > 6 => Ty::Decimal(p - 4, (*s).min(p - 5)),
            Ty::Double => Ty::Float,
            Ty::Datetime(f) if *f > 0 => Ty::Datetime(0),
            _ => return None,
        })
    }

    /// A wider version (a `MODIFY` that keeps every value).
    fn wider(&self) -> Option<Ty> {
        Some(match self {
            Ty::Varchar(n) => Ty::Varchar(n + 20),
            Ty::Char(n) if *n < 200 => Ty::Char(n + 10),
            Ty::Text(s) if *s < 3 => Ty::Text(s + 1),
            Ty::Int { bytes, unsigned } if *bytes < 8 => Ty::Int {
                bytes: match bytes {
                    1 => 2,
                    2 => 4,
                    _ => 8,
                },
                unsigned: *unsigned,
            },
            Ty::Decimal(p, s) if *p < 60 => Ty::Decimal(p + 2, *s),
            Ty::Float => Ty::Double,
            Ty::Varbinary(n) => Ty::Varbinary(n + 16),
            Ty::Blob(s) if *s < 3 => Ty::Blob(s + 1),
            Ty::Time(f) if *f < 6 => Ty::Time(f + 1),
            Ty::Datetime(f) if *f < 6 => Ty::Datetime(f + 1),
            _ => return None,
        })
    }
}

/// A fractional-seconds suffix with at most `digits` digits.
fn fraction(r: &mut Rng, digits: u8) -> String {
    if digits == 0 || r.chance(30) {
        return String::new();
    }
    let n = 1 + r.below(u64::from(digits)) as usize;
    let v = r.below(10u64.pow(n as u32));
    format!(".{v:0n$}")
}

/// Text collation `coll` can hold, at most `max` characters.
fn text_value(r: &mut Rng, coll: usize, max: usize) -> String {
    let samples = COLLATIONS[coll].samples;
    let mut s = r.pick(samples).to_string();
    match r.below(4) {
        0 => {
            let _ = write!(s, " #{}", r.below(100_000));
        }
        1 if max > 200 => s = s.repeat(1 + r.below(20) as usize),
        _ => {}
    }
    s.chars().take(max).collect()
}

/// A SQL string literal (the default `sql_mode` reads backslashes as escapes).
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''"))
}

/// `len` random bytes as a hex literal.
fn hex(r: &mut Rng, len: usize) -> String {
    let mut s = String::from("X'");
    for _ in 0..len {
        let _ = write!(s, "{:02X}", r.below(256));
    }
    s.push('\'');
    s
}

// ---------------------------------------------------------------------------
// The model of the upstream schema
// ---------------------------------------------------------------------------

/// A generated column: its expression, and the columns it reads.
#[derive(Clone, Debug)]
struct Generated {
    expr: String,
    stored: bool,
    base: Vec<String>,
}

/// A column of a table in the model.
#[derive(Clone, Debug)]
struct Column {
    name: String,
    ty: Ty,
    /// Index into [`COLLATIONS`] (text types only).
    coll: usize,
    nullable: bool,
    /// A literal `DEFAULT`.
    default: Option<String>,
    generated: Option<Generated>,
    /// `DEFAULT NEXT VALUE FOR` this sequence.
    sequence: Option<String>,
    /// Values come from the model's unique counter (so unique keys hold).
    unique_values: bool,
    auto_increment: bool,
}

impl Column {
    fn plain(name: String, ty: Ty) -> Column {
        Column {
            name,
            ty,
            coll: 0,
            nullable: true,
            default: None,
            generated: None,
            sequence: None,
            unique_values: false,
            auto_increment: false,
        }
    }

    /// Whether inserts give it a value (not generated, not filled by a
    /// sequence).
    fn insertable(&self) -> bool {
        self.generated.is_none() && self.sequence.is_none()
    }
}

/// An index: its columns with an optional prefix length.
#[derive(Clone, Debug)]
struct Index {
    name: String,
    columns: Vec<(String, Option<u16>)>,
    unique: bool,
    /// The index a foreign key needs (InnoDB refuses to drop it).
    for_foreign_key: bool,
}

/// A foreign key's referential action (what its children undergo).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rule {
    Cascade,
    SetNull,
    Restrict,
    NoAction,
}

impl Rule {
    fn sql(self) -> &'static str {
        match self {
            Rule::Cascade => "CASCADE",
            Rule::SetNull => "SET NULL",
            Rule::Restrict => "RESTRICT",
            Rule::NoAction => "NO ACTION",
        }
    }

    /// Whether it lets the parent row go (or change) while children point
    /// at it.
    fn follows(self) -> bool {
        matches!(self, Rule::Cascade | Rule::SetNull)
    }
}

/// A foreign key from one column to its parent's `id`.
#[derive(Clone, Debug)]
struct ForeignKey {
    name: String,
    column: String,
    parent: String,
    on_delete: Rule,
    on_update: Rule,
}

/// How a table is partitioned, always by `id`.
#[derive(Clone, Debug)]
enum Partitioning {
    /// (name, `VALUES LESS THAN` bound; `None` is `MAXVALUE`).
    Range(Vec<(String, Option<i64>)>),
    /// `LIST (id MOD modulus)`: (name, remainders).
    List {
        modulus: i64,
        parts: Vec<(String, Vec<i64>)>,
    },
    Hash {
        linear: bool,
        count: u32,
    },
    Key {
        count: u32,
    },
}

impl Partitioning {
    fn sql(&self) -> String {
        match self {
            Partitioning::Range(parts) => format!(
                " PARTITION BY RANGE (`id`) ({})",
                parts
                    .iter()
                    .map(range_partition)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Partitioning::List { modulus, parts } => format!(
                " PARTITION BY LIST (`id` MOD {modulus}) ({})",
                parts
                    .iter()
                    .map(list_partition)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Partitioning::Hash { linear, count } => format!(
                " PARTITION BY {}HASH (`id`) PARTITIONS {count}",
                if *linear { "LINEAR " } else { "" }
            ),
            Partitioning::Key { count } => format!(" PARTITION BY KEY (`id`) PARTITIONS {count}"),
        }
    }

    /// The names of its partitions.
    fn names(&self) -> Vec<String> {
        match self {
            Partitioning::Range(parts) => parts.iter().map(|p| p.0.clone()).collect(),
            Partitioning::List { parts, .. } => parts.iter().map(|p| p.0.clone()).collect(),
            Partitioning::Hash { count, .. } | Partitioning::Key { count } => {
                (0..*count).map(|i| format!("p{i}")).collect()
            }
        }
    }

    /// Whether a row with `id` has a partition.
    fn takes(&self, id: i64) -> bool {
        match self {
            Partitioning::List { modulus, parts } => {
                let rem = id.rem_euclid(*modulus);
                parts.iter().any(|(_, values)| values.contains(&rem))
            }
            _ => true,
        }
    }
}

fn range_partition((name, bound): &(String, Option<i64>)) -> String {
    match bound {
        Some(b) => format!("PARTITION `{name}` VALUES LESS THAN ({b})"),
        None => format!("PARTITION `{name}` VALUES LESS THAN MAXVALUE"),
    }
}

fn list_partition((name, values): &(String, Vec<i64>)) -> String {
    let values: Vec<String> = values.iter().map(i64::to_string).collect();
    format!("PARTITION `{name}` VALUES IN ({})", values.join(","))
}

/// A table of the model. Every table has an integer column `id` whose values
/// the generator keeps unique (the primary key, or its first column, unless
/// the table is keyless).
#[derive(Clone, Debug)]
struct Table {
    name: String,
    columns: Vec<Column>,
    primary: Vec<String>,
    indexes: Vec<Index>,
    fks: Vec<ForeignKey>,
    partitioning: Option<Partitioning>,
    /// Index into [`COLLATIONS`] of the table's default collation.
    default_coll: usize,
    /// The next `id` an insert takes.
    next_id: i64,
    /// The ids the upstream holds (as of the last resync, plus what the
    /// generator did since).
    live: Vec<i64>,
}

impl Table {
    fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|c| c.name == name)
    }

    fn id_ty(&self) -> Ty {
        self.column("id").map_or(
            Ty::Int {
                bytes: 4,
                unsigned: false,
            },
            |c| c.ty.clone(),
        )
    }

    /// Whether `column` is read by a generated column or a foreign key, is
    /// part of the primary key, or is `id`: such a column is not dropped,
    /// renamed or retyped.
    fn pinned(&self, column: &str) -> bool {
        column == "id"
            || self.primary.iter().any(|p| p == column)
            || self.fks.iter().any(|f| f.column == column)
            || self.columns.iter().any(|c| {
                c.generated
                    .as_ref()
                    .is_some_and(|g| g.base.iter().any(|b| b == column))
            })
    }

    /// Whether `column` is in a unique index.
    fn in_unique(&self, column: &str) -> bool {
        self.indexes
            .iter()
            .any(|i| i.unique && i.columns.iter().any(|(c, _)| c == column))
    }

    fn in_index(&self, column: &str) -> bool {
        self.indexes
            .iter()
            .any(|i| i.columns.iter().any(|(c, _)| c == column))
    }

    /// Columns an update may set: not keys, not generated, not filled by a
    /// sequence.
    fn settable(&self) -> Vec<Column> {
        self.columns
            .iter()
            .filter(|c| c.insertable() && c.name != "id" && !self.primary.contains(&c.name))
            .cloned()
            .collect()
    }

    /// A column definition as `CREATE TABLE` and `ALTER TABLE` write it.
    fn column_sql(&self, c: &Column) -> String {
        let mut s = format!("`{}` {}", c.name, c.ty.sql());
        if c.ty.is_text() && c.coll != self.default_coll {
            let coll = &COLLATIONS[c.coll];
            let _ = write!(s, " CHARACTER SET {} COLLATE {}", coll.charset, coll.name);
        }
        // The source reads enum and set names as UTF-8 whatever their
        // charset (docs/sources/mysql.md, Limits): in a UCS-2 or UTF-16
        // table they get one it reads right.
        if matches!(c.ty, Ty::Enum | Ty::Set)
            && matches!(
                COLLATIONS[self.default_coll].charset,
                "ucs2" | "utf16" | "utf16le"
            )
        {
            s.push_str(" CHARACTER SET utf8mb4");
        }
        if let Some(g) = &c.generated {
            let _ = write!(
                s,
                " GENERATED ALWAYS AS ({}) {}",
                g.expr,
                if g.stored { "STORED" } else { "VIRTUAL" }
            );
            return s;
        }
        s.push_str(if c.nullable { " NULL" } else { " NOT NULL" });
        if let Some(seq) = &c.sequence {
            let _ = write!(s, " DEFAULT NEXT VALUE FOR `{DB}`.`{seq}`");
        } else if let Some(d) = &c.default {
            let _ = write!(s, " DEFAULT {d}");
        }
        if c.auto_increment {
            s.push_str(" AUTO_INCREMENT");
        }
        s
    }

    fn create_sql(&self, name: &str) -> String {
        let mut parts: Vec<String> = self.columns.iter().map(|c| self.column_sql(c)).collect();
        if !self.primary.is_empty() {
            parts.push(format!("PRIMARY KEY ({})", idents(&self.primary)));
        }
        for ix in &self.indexes {
            parts.push(index_sql(ix));
        }
        for fk in &self.fks {
            parts.push(fk_sql(fk));
        }
        let mut s = format!("CREATE TABLE {name} ({})", parts.join(", "));
        if self.default_coll != 0 {
            let coll = &COLLATIONS[self.default_coll];
            let _ = write!(s, " DEFAULT CHARSET={} COLLATE={}", coll.charset, coll.name);
        }
        if let Some(p) = &self.partitioning {
            s.push_str(&p.sql());
        }
        s
    }

    /// Renames a column everywhere the table names it.
    fn rename_column(&mut self, from: &str, to: &str) {
        for c in &mut self.columns {
            if c.name == from {
                c.name = to.to_string();
            }
        }
        for ix in &mut self.indexes {
            for (c, _) in &mut ix.columns {
                if c == from {
                    *c = to.to_string();
                }
            }
        }
        for fk in &mut self.fks {
            if fk.column == from {
                fk.column = to.to_string();
            }
        }
    }
}

/// `a`, `b`: quoted column names.
fn idents(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn index_sql(ix: &Index) -> String {
    let cols: Vec<String> = ix
        .columns
        .iter()
        .map(|(c, prefix)| match prefix {
            Some(n) => format!("`{c}`({n})"),
            None => format!("`{c}`"),
        })
        .collect();
    format!(
        "{}KEY `{}` ({})",
        if ix.unique { "UNIQUE " } else { "" },
        ix.name,
        cols.join(", ")
    )
}

fn fk_sql(fk: &ForeignKey) -> String {
    format!(
        "CONSTRAINT `{}` FOREIGN KEY (`{}`) REFERENCES `{DB}`.`{}` (`id`) ON DELETE {} ON UPDATE {}",
        fk.name,
        fk.column,
        fk.parent,
        fk.on_delete.sql(),
        fk.on_update.sql()
    )
}

/// A sequence of the model.
#[derive(Clone, Debug)]
struct Sequence {
    /// `SETVAL` goes above this.
    high: i64,
}

/// The generator's picture of the upstream database.
#[derive(Clone, Debug, Default)]
struct Model {
    tables: BTreeMap<String, Table>,
    /// View name → its column names.
    views: BTreeMap<String, Vec<String>>,
    sequences: BTreeMap<String, Sequence>,
    /// The last number used in a fresh name.
    names: u64,
    /// The last value handed out for unique columns.
    unique: u64,
}

impl Model {
    /// A name never used before: `t17`, `c18`, ...
    fn fresh(&mut self, prefix: &str) -> String {
        self.names += 1;
        format!("{prefix}{}", self.names)
    }

    fn next_unique(&mut self) -> u64 {
        self.unique += 1;
        self.unique
    }

    /// Foreign keys pointing at `parent`: (child table, key).
    fn children(&self, parent: &str) -> Vec<(String, ForeignKey)> {
        self.tables
            .values()
            .flat_map(|t| {
                t.fks
                    .iter()
                    .filter(|f| f.parent == parent)
                    .map(|f| (t.name.clone(), f.clone()))
            })
            .collect()
    }

    /// How many tables a foreign key links (as parent or child).
    fn linked(&self) -> usize {
        self.tables
            .values()
            .filter(|t| !t.fks.is_empty() || self.referenced(&t.name))
            .count()
    }

    /// Whether some foreign key (of another table or its own) points at it.
    fn referenced(&self, table: &str) -> bool {
        !self.children(table).is_empty()
    }

    /// Whether a column default draws from `seq`.
    fn sequence_used(&self, seq: &str) -> bool {
        self.tables
            .values()
            .any(|t| t.columns.iter().any(|c| c.sequence.as_deref() == Some(seq)))
    }

    /// Renames a table (or sequence) everywhere the model names it; views
    /// that read it break, as they do upstream.
    fn rename(&mut self, from: &str, to: &str) {
        if let Some(mut t) = self.tables.remove(from) {
            t.name = to.to_string();
            self.tables.insert(to.to_string(), t);
        }
        if let Some(s) = self.sequences.remove(from) {
            self.sequences.insert(to.to_string(), s);
        }
        for t in self.tables.values_mut() {
            for fk in &mut t.fks {
                if fk.parent == from {
                    fk.parent = to.to_string();
                }
            }
        }
    }

    /// Whether a table can take part in partitioning: no foreign keys in or
    /// out, `id` in every unique key.
    fn partitionable(&self, t: &Table) -> bool {
        t.fks.is_empty()
            && !self.referenced(&t.name)
            && (t.primary.is_empty() || t.primary.iter().any(|p| p == "id"))
            && t.indexes
                .iter()
                .filter(|i| i.unique)
                .all(|i| i.columns.iter().any(|(c, _)| c == "id"))
    }
}

// ---------------------------------------------------------------------------
// The generator
// ---------------------------------------------------------------------------

/// One step: a script run on one upstream session, and the model as it is
/// once the script ran.
struct Step {
    kind: Kind,
    sql: String,
    after: Model,
    /// Read the row ids back from the upstream after it: cascades,
    /// partition operations and copies change rows the model does not
    /// follow.
    resync: bool,
}

/// Makes steps from a model: random, but the same for the same seed and the
/// same upstream answers.
struct Generator {
    rng: Rng,
    profile: Profile,
    /// This step names objects without their database (after `USE`).
    unqualified: bool,
    resync: bool,
    /// Tables this step leaves alone (see [`Class::ForeignKeyDdl`]).
    avoid: BTreeSet<String>,
}

/// Wraps statements in one transaction.
fn txn(statements: &[String]) -> String {
    format!("BEGIN;\n{};\nCOMMIT;", statements.join(";\n"))
}

impl Generator {
    fn new(seed: u64, profile: Profile) -> Generator {
        Generator {
            rng: Rng(seed),
            profile,
            unqualified: false,
            resync: false,
            avoid: BTreeSet::new(),
        }
    }

    /// How a statement names `object`.
    fn name(&self, object: &str) -> String {
        if self.unqualified {
            format!("`{object}`")
        } else {
            format!("`{DB}`.`{object}`")
        }
    }

    /// The next step for the upstream described by `m`.
    fn step(&mut self, m: &Model) -> Step {
        for _ in 0..1000 {
            let kind = self.pick_kind(m);
            let mut after = m.clone();
            self.unqualified = self.rng.chance(15);
            self.resync = false;
            self.avoid.clear();
            if !kind.is_dml() && !self.profile.allows(Class::ForeignKeyDdl) {
                self.avoid = m
                    .tables
                    .values()
                    .filter(|t| !t.fks.is_empty() || m.referenced(&t.name))
                    .map(|t| t.name.clone())
                    .collect();
            }
            if let Some(sql) = self.build(kind, &mut after) {
                let sql = if self.unqualified {
                    format!("USE `{DB}`;\n{sql}")
                } else {
                    sql
                };
                return Step {
                    kind,
                    sql,
                    after,
                    resync: self.resync,
                };
            }
        }
        panic!("the generator found no step to make for this model: {m:#?}");
    }

    fn pick_kind(&mut self, m: &Model) -> Kind {
        if m.tables.len() < 3 {
            return Kind::CreateTable;
        }
        let crowded = m.tables.len() >= MAX_TABLES;
        let weights: Vec<(Kind, u64)> = KINDS
            .iter()
            .filter(|(k, _, _)| self.profile.allows_kind(*k))
            .map(|&(k, _, w)| {
                let w = u64::from(w);
                let w = match k {
                    Kind::CreateTable | Kind::CreateLike | Kind::CreateSelect if crowded => 0,
                    Kind::DropTable | Kind::DropTables if crowded => w * 8,
                    _ => w,
                };
                (k, w)
            })
            .collect();
        let total: u64 = weights.iter().map(|(_, w)| w).sum();
        let mut at = self.rng.below(total);
        for (k, w) in weights {
            if at < w {
                return k;
            }
            at -= w;
        }
        Kind::Insert
    }

    /// The script of a step of `kind`, changing `m` to what the upstream
    /// will be; `None` when the model has nothing this kind applies to.
    fn build(&mut self, kind: Kind, m: &mut Model) -> Option<String> {
        match kind {
            Kind::Insert => {
                let t = self.pick_table(m, |_| true)?;
                let rows = 1 + self.rng.index(4);
                let (sql, _) = self.insert_sql(m, &t, rows, &[])?;
                Some(sql)
            }
            Kind::BulkInsert => {
                let t = self.pick_table(m, |t| t.live.len() < MAX_ROWS)?;
                let rows = 100 + self.rng.index(200);
                let (a, _) = self.insert_sql(m, &t, rows, &[])?;
                let (b, _) = self.insert_sql(m, &t, 50, &[])?;
                Some(txn(&[a, b]))
            }
            Kind::Update => {
                let t = self.pick_table(m, |t| !t.live.is_empty())?;
                self.update_sql(m, &t)
            }
            Kind::Delete => {
                let t = self.pick_table(m, |t| !t.live.is_empty())?;
                let sql = self.delete_sql(m, &t, false)?;
                Some(txn(&[sql]))
            }
            Kind::RangeUpdate => self.range_update(m),
            Kind::RangeDelete => {
                let t = self.pick_table(m, |t| t.live.len() > MAX_ROWS / 2)?;
                let sql = self.delete_sql(m, &t, true)?;
                Some(txn(&[sql]))
            }
            Kind::Upsert => self.upsert(m),
            Kind::Replace => self.replace(m),
            Kind::KeyUpdate => self.key_update(m),
            Kind::UniqueSwap => self.unique_swap(m),
            Kind::MultiTableTxn => self.multi_table_txn(m),
            Kind::ParentAndChildren => self.parent_and_children(m),
            Kind::CascadeDelete => self.cascade(m, true),
            Kind::CascadeUpdate => self.cascade(m, false),
            Kind::ChecksOff => self.checks_off(m),
            Kind::NonStrictWrite => self.non_strict_write(m),
            Kind::NextValue => self.next_value(m),
            Kind::SetValue => {
                let s = self.pick_sequence(m, |_| true)?;
                let seq = m.sequences.get_mut(&s)?;
                seq.high += 1 + self.rng.below(5000) as i64;
                Some(format!("SELECT SETVAL({}, {})", self.name(&s), seq.high))
            }
            Kind::CreateTable => {
                let t = self.new_table(m);
                let sql = t.create_sql(&self.name(&t.name));
                m.tables.insert(t.name.clone(), t);
                Some(sql)
            }
            Kind::CreateLike => self.create_like(m),
            Kind::CreateSelect => self.create_select(m),
            Kind::DropTable => {
                let t = self.pick_table(m, |_| true)?;
                if m.children(&t).iter().any(|(c, _)| *c != t) {
                    return None;
                }
                m.tables.remove(&t);
                let exists = if self.rng.chance(30) {
                    "IF EXISTS "
                } else {
                    ""
                };
                Some(format!("DROP TABLE {exists}{}", self.name(&t)))
            }
            Kind::DropTables => self.drop_tables(m),
            Kind::RenameTable | Kind::AlterRename => {
                let t = self.pick_table(m, |_| true)?;
                let to = m.fresh("t");
                m.rename(&t, &to);
                Some(if kind == Kind::RenameTable {
                    format!("RENAME TABLE {} TO {}", self.name(&t), self.name(&to))
                } else {
                    format!("ALTER TABLE {} RENAME TO {}", self.name(&t), self.name(&to))
                })
            }
            Kind::RenameTables => {
                let a = self.pick_table(m, |_| true)?;
                let b = self.pick_table(m, |t| t.name != a)?;
                let (na, nb) = (m.fresh("t"), m.fresh("t"));
                m.rename(&a, &na);
                m.rename(&b, &nb);
                Some(format!(
                    "RENAME TABLE {} TO {}, {} TO {}",
                    self.name(&a),
                    self.name(&na),
                    self.name(&b),
                    self.name(&nb)
                ))
            }
            Kind::SwapTables => {
                let a = self.pick_table(m, |_| true)?;
                let b = self.pick_table(m, |t| t.name != a)?;
                let tmp = m.fresh("t");
                m.rename(&a, &tmp);
                m.rename(&b, &a);
                m.rename(&tmp, &b);
                Some(format!(
                    "RENAME TABLE {a_} TO {tmp_}, {b_} TO {a_}, {tmp_} TO {b_}",
                    a_ = self.name(&a),
                    b_ = self.name(&b),
                    tmp_ = self.name(&tmp)
                ))
            }
            Kind::AddColumns => self.add_columns(m),
            Kind::AddGenerated => self.add_generated(m),
            Kind::DropColumn => self.drop_column(m),
            Kind::RenameColumn => self.rename_column(m),
            Kind::ModifyColumn => self.modify_column(m),
            Kind::NonStrictModify => self.non_strict_modify(m),
            Kind::ConvertCharset => {
                let t = self.pick_table(m, |_| true)?;
                let utf8mb4: Vec<usize> = (0..COLLATIONS.len())
                    .filter(|&i| COLLATIONS[i].charset == "utf8mb4")
                    .collect();
                let to = *self.rng.pick(&utf8mb4);
                let table = m.tables.get_mut(&t)?;
                table.default_coll = to;
                for c in &mut table.columns {
                    if c.ty.is_text() {
                        c.coll = to;
                    }
                }
                Some(format!(
                    "ALTER TABLE {} CONVERT TO CHARACTER SET utf8mb4 COLLATE {}",
                    self.name(&t),
                    COLLATIONS[to].name
                ))
            }
            Kind::AddIndex | Kind::CreateIndex => self.add_index(m, kind == Kind::CreateIndex),
            Kind::AddUnique => self.add_unique(m),
            Kind::DropIndex => {
                let t = self.pick_table(m, |t| t.indexes.iter().any(|i| !i.for_foreign_key))?;
                let table = m.tables.get_mut(&t)?;
                let droppable: Vec<usize> = (0..table.indexes.len())
                    .filter(|&i| !table.indexes[i].for_foreign_key)
                    .collect();
                let ix = table
                    .indexes
                    .remove(droppable[self.rng.index(droppable.len())]);
                Some(if self.rng.chance(50) {
                    format!("DROP INDEX `{}` ON {}", ix.name, self.name(&t))
                } else {
                    format!("ALTER TABLE {} DROP INDEX `{}`", self.name(&t), ix.name)
                })
            }
            Kind::AddForeignKey => self.add_foreign_key(m),
            Kind::DropForeignKey => {
                let t = self.pick_table(m, |t| !t.fks.is_empty())?;
                let table = m.tables.get_mut(&t)?;
                let fk = table.fks.remove(self.rng.index(table.fks.len()));
                for ix in &mut table.indexes {
                    if ix.name == fk.name {
                        ix.for_foreign_key = false;
                    }
                }
                Some(format!(
                    "ALTER TABLE {} DROP FOREIGN KEY `{}`",
                    self.name(&t),
                    fk.name
                ))
            }
            Kind::Truncate => {
                let t = self.pick_table(m, |_| true)?;
                if m.referenced(&t) {
                    return None;
                }
                m.tables.get_mut(&t)?.live.clear();
                Some(format!(
                    "TRUNCATE {}{}",
                    if self.rng.chance(50) { "TABLE " } else { "" },
                    self.name(&t)
                ))
            }
            Kind::PartitionTable => {
                let t = self.pick_table(m, |t| t.partitioning.is_none())?;
                let table = m.tables.get(&t)?.clone();
                if !m.partitionable(&table) {
                    return None;
                }
                let p = self.random_partitioning(m, &table);
                let sql = format!("ALTER TABLE {}{}", self.name(&t), p.sql());
                m.tables.get_mut(&t)?.partitioning = Some(p);
                Some(sql)
            }
            Kind::RemovePartitioning => {
                let t = self.pick_table(m, |t| t.partitioning.is_some())?;
                m.tables.get_mut(&t)?.partitioning = None;
                Some(format!("ALTER TABLE {} REMOVE PARTITIONING", self.name(&t)))
            }
            Kind::AddPartition => self.add_partition(m),
            Kind::DropPartition => self.drop_partition(m),
            Kind::ReorganizePartition => self.reorganize_partition(m),
            Kind::TruncatePartition => {
                let t = self.pick_table(m, |t| t.partitioning.is_some())?;
                let names = m.tables.get(&t)?.partitioning.as_ref()?.names();
                let p = self.rng.pick(&names).clone();
                self.resync = true;
                Some(format!(
                    "ALTER TABLE {} TRUNCATE PARTITION `{p}`",
                    self.name(&t)
                ))
            }
            Kind::CoalescePartition => {
                let t = self.pick_table(m, |t| {
                    matches!(
                        t.partitioning,
                        Some(
                            Partitioning::Hash { count: 2.., .. }
                                | Partitioning::Key { count: 2.. }
                        )
                    )
                })?;
                let table = m.tables.get_mut(&t)?;
                let Some(Partitioning::Hash { count, .. } | Partitioning::Key { count }) =
                    table.partitioning.as_mut()
                else {
                    return None;
                };
                let by = 1 + self.rng.below(u64::from(*count - 1)) as u32;
                *count -= by;
                Some(format!(
                    "ALTER TABLE {} COALESCE PARTITION {by}",
                    self.name(&t)
                ))
            }
            Kind::ExchangePartition => self.exchange_partition(m),
            Kind::CreateView => {
                let name = m.fresh("v");
                let (select, columns) = self.view_select(m, &name)?;
                m.views.insert(name.clone(), columns);
                Some(self.create_view(&name, &select, false))
            }
            Kind::ReplaceView => {
                let v = self.pick_view(m)?;
                let (select, columns) = self.view_select(m, &v)?;
                m.views.insert(v.clone(), columns);
                Some(if self.rng.chance(50) {
                    format!("ALTER VIEW {} AS {select}", self.name(&v))
                } else {
                    self.create_view(&v, &select, true)
                })
            }
            Kind::DropView => {
                let v = self.pick_view(m)?;
                m.views.remove(&v);
                Some(format!(
                    "DROP VIEW {}{}",
                    if self.rng.chance(30) {
                        "IF EXISTS "
                    } else {
                        ""
                    },
                    self.name(&v)
                ))
            }
            Kind::CreateSequence => {
                let s = m.fresh("s");
                let start = 1 + self.rng.below(1000) as i64;
                let mut sql = format!("CREATE SEQUENCE {}", self.name(&s));
                if self.rng.chance(70) {
                    let _ = write!(sql, " START WITH {start}");
                }
                if self.rng.chance(40) {
                    let _ = write!(sql, " INCREMENT BY {}", 1 + self.rng.below(10));
                }
                if self.rng.chance(30) {
                    sql.push_str(" MINVALUE 1 MAXVALUE 1000000000000");
                }
                match self.rng.below(3) {
                    0 => sql.push_str(" NOCACHE"),
                    1 => {
                        let _ = write!(sql, " CACHE {}", 2 + self.rng.below(50));
                    }
                    _ => {}
                }
                if self.rng.chance(20) {
                    sql.push_str(" CYCLE");
                }
                m.sequences.insert(s, Sequence { high: start });
                Some(sql)
            }
            Kind::AlterSequence => {
                let s = self.pick_sequence(m, |_| true)?;
                let seq = m.sequences.get_mut(&s)?;
                let what = match self.rng.below(3) {
                    0 => {
                        seq.high += 1 + self.rng.below(1000) as i64;
                        format!("RESTART WITH {}", seq.high)
                    }
                    1 => format!("INCREMENT BY {}", 1 + self.rng.below(7)),
                    _ => format!("CACHE {}", 2 + self.rng.below(30)),
                };
                Some(format!("ALTER SEQUENCE {} {what}", self.name(&s)))
            }
            Kind::DropSequence => {
                let s = self.pick_sequence(m, |_| true)?;
                if m.sequence_used(&s) {
                    return None;
                }
                m.sequences.remove(&s);
                Some(format!("DROP SEQUENCE {}", self.name(&s)))
            }
            Kind::RenameSequence => {
                let s = self.pick_sequence(m, |_| true)?;
                if m.sequence_used(&s) {
                    return None;
                }
                let to = m.fresh("s");
                m.rename(&s, &to);
                Some(format!(
                    "RENAME TABLE {} TO {}",
                    self.name(&s),
                    self.name(&to)
                ))
            }
            Kind::Replay => None,
        }
    }

    fn pick_table(&mut self, m: &Model, ok: impl Fn(&Table) -> bool) -> Option<String> {
        let names: Vec<&String> = m
            .tables
            .values()
            .filter(|t| ok(t) && !self.avoid.contains(&t.name))
            .map(|t| &t.name)
            .collect();
        (!names.is_empty()).then(|| names[self.rng.index(names.len())].clone())
    }

    fn pick_view(&mut self, m: &Model) -> Option<String> {
        let names: Vec<&String> = m.views.keys().collect();
        (!names.is_empty()).then(|| names[self.rng.index(names.len())].clone())
    }

    fn pick_sequence(&mut self, m: &Model, ok: impl Fn(&str) -> bool) -> Option<String> {
        let names: Vec<&String> = m.sequences.keys().filter(|s| ok(s)).collect();
        (!names.is_empty()).then(|| names[self.rng.index(names.len())].clone())
    }

    // --- rows ---------------------------------------------------------------

    /// A fresh `id` for a new row of `t` (one its partitions take).
    fn take_id(&mut self, t: &mut Table) -> Option<i64> {
        for _ in 0..64 {
            let id = t.next_id;
            t.next_id += 1 + self.rng.below(4) as i64;
            if t.partitioning.as_ref().is_none_or(|p| p.takes(id)) {
                t.live.push(id);
                return Some(id);
            }
        }
        None
    }

    /// The value column `c` of row `id` of `t` gets in an insert or update.
    fn value(&mut self, m: &mut Model, t: &Table, c: &Column, id: i64) -> String {
        if c.name == "id" {
            return id.to_string();
        }
        if t.primary.contains(&c.name) {
            return c.ty.key_literal(id);
        }
        if let Some(fk) = t.fks.iter().find(|f| f.column == c.name) {
            let parents = m
                .tables
                .get(&fk.parent)
                .map(|p| p.live.clone())
                .unwrap_or_default();
            if parents.is_empty() || self.rng.chance(15) {
                return "NULL".into();
            }
            return self.rng.pick(&parents).to_string();
        }
        if c.unique_values {
            let n = m.next_unique();
            return c.ty.unique_literal(n);
        }
        if c.nullable && self.rng.chance(10) {
            return "NULL".into();
        }
        c.ty.literal(&mut self.rng, c.coll)
    }

    /// `INSERT` of `rows` new rows into `table` (columns in `overrides` get
    /// those values): the statement and the new ids.
    fn insert_sql(
        &mut self,
        m: &mut Model,
        table: &str,
        rows: usize,
        overrides: &[(String, String)],
    ) -> Option<(String, Vec<i64>)> {
        let mut t = m.tables.get(table)?.clone();
        let mut ids = Vec::new();
        for _ in 0..rows {
            ids.push(self.take_id(&mut t)?);
        }
        m.tables.insert(table.to_string(), t);
        let sql = self.insert_rows(m, table, &ids, overrides, "INSERT")?;
        Some((sql, ids))
    }

    /// `verb` (`INSERT`, `REPLACE`) of rows with the given ids.
    fn insert_rows(
        &mut self,
        m: &mut Model,
        table: &str,
        ids: &[i64],
        overrides: &[(String, String)],
        verb: &str,
    ) -> Option<String> {
        let t = m.tables.get(table)?.clone();
        let cols: Vec<Column> = t
            .columns
            .iter()
            .filter(|c| c.insertable())
            .cloned()
            .collect();
        let mut rows = Vec::new();
        for &id in ids {
            let row: Vec<String> = cols
                .iter()
                .map(|c| match overrides.iter().find(|(n, _)| *n == c.name) {
                    Some((_, v)) => v.clone(),
                    None => self.value(m, &t, c, id),
                })
                .collect();
            rows.push(format!("({})", row.join(", ")));
        }
        let names: Vec<String> = cols.iter().map(|c| c.name.clone()).collect();
        Some(format!(
            "{verb} INTO {} ({}) VALUES {}",
            self.name(table),
            idents(&names),
            rows.join(", ")
        ))
    }

    /// An `UPDATE` of 1 to 3 columns of one row.
    fn update_sql(&mut self, m: &mut Model, table: &str) -> Option<String> {
        let t = m.tables.get(table)?.clone();
        let id = *self.pick_id(&t)?;
        let settable = t.settable();
        if settable.is_empty() {
            return None;
        }
        let mut sets = Vec::new();
        let mut seen = BTreeSet::new();
        for _ in 0..1 + self.rng.index(3) {
            let c = self.rng.pick(&settable).clone();
            if seen.insert(c.name.clone()) {
                let v = self.value(m, &t, &c, id);
                sets.push(format!("`{}` = {v}", c.name));
            }
        }
        if !m.children(table).is_empty() {
            self.resync = true;
        }
        Some(format!(
            "UPDATE {} SET {} WHERE `id` = {id}",
            self.name(table),
            sets.join(", ")
        ))
    }

    fn pick_id<'a>(&mut self, t: &'a Table) -> Option<&'a i64> {
        (!t.live.is_empty()).then(|| self.rng.pick(&t.live))
    }

    /// The ids between two live ids (at most 10 apart in the list).
    fn id_range(&mut self, t: &Table) -> Option<(i64, i64)> {
        let mut ids = t.live.clone();
        ids.sort_unstable();
        if ids.is_empty() {
            return None;
        }
        let a = self.rng.index(ids.len());
        let b = (a + self.rng.index(10)).min(ids.len() - 1);
        Some((ids[a], ids[b]))
    }

    /// A `DELETE` of one row (or a range), after deleting the children a
    /// `RESTRICT` key would keep it for.
    fn delete_sql(&mut self, m: &mut Model, table: &str, range: bool) -> Option<String> {
        if m.referenced(table) && !self.profile.allows(Class::ForeignKeyCascades) {
            return None;
        }
        let t = m.tables.get(table)?.clone();
        let (lo, hi) = if range {
            self.id_range(&t)?
        } else {
            let id = *self.pick_id(&t)?;
            (id, id)
        };
        let cond = |col: &str| {
            if lo == hi {
                format!("`{col}` = {lo}")
            } else {
                format!("`{col}` BETWEEN {lo} AND {hi}")
            }
        };
        let mut statements = Vec::new();
        let children = m.children(table);
        for (child, fk) in &children {
            if !fk.on_delete.follows() {
                statements.push(format!(
                    "DELETE FROM {} WHERE {}",
                    self.name(child),
                    cond(&fk.column)
                ));
            }
        }
        statements.push(format!(
            "DELETE FROM {} WHERE {}",
            self.name(table),
            cond("id")
        ));
        if let Some(t) = m.tables.get_mut(table) {
            t.live.retain(|id| *id < lo || *id > hi);
        }
        if !children.is_empty() {
            self.resync = true;
        }
        Some(statements.join(";\n"))
    }

    /// One column of a range of rows set to one value.
    fn range_update(&mut self, m: &mut Model) -> Option<String> {
        let name = self.pick_table(m, |t| t.live.len() > 3)?;
        let t = m.tables.get(&name)?.clone();
        let settable: Vec<Column> = t
            .settable()
            .into_iter()
            .filter(|c| !c.unique_values && !t.in_unique(&c.name))
            .collect();
        if settable.is_empty() {
            return None;
        }
        let c = self.rng.pick(&settable).clone();
        let (lo, hi) = self.id_range(&t)?;
        let v = self.value(m, &t, &c, lo);
        if !m.children(&name).is_empty() {
            self.resync = true;
        }
        Some(format!(
            "UPDATE {} SET `{}` = {v} WHERE `id` BETWEEN {lo} AND {hi}",
            self.name(&name),
            c.name
        ))
    }

    /// `INSERT ... ON DUPLICATE KEY UPDATE` of an existing row.
    fn upsert(&mut self, m: &mut Model) -> Option<String> {
        let name = self.pick_table(m, |t| !t.primary.is_empty() && !t.live.is_empty())?;
        let t = m.tables.get(&name)?.clone();
        let id = *self.pick_id(&t)?;
        let insert = self.insert_rows(m, &name, &[id], &[], "INSERT")?;
        let settable: Vec<Column> = t
            .settable()
            .into_iter()
            .filter(|c| !c.unique_values)
            .collect();
        if settable.is_empty() {
            return None;
        }
        let mut sets: Vec<String> = Vec::new();
        for _ in 0..1 + self.rng.index(2) {
            let c = &self.rng.pick(&settable).name;
            let set = format!("`{c}` = VALUES(`{c}`)");
            if !sets.contains(&set) {
                sets.push(set);
            }
        }
        Some(format!(
            "{insert} ON DUPLICATE KEY UPDATE {}",
            sets.join(", ")
        ))
    }

    /// `REPLACE` of an existing row (upstream: a delete and an insert, so
    /// its children's keys act).
    fn replace(&mut self, m: &mut Model) -> Option<String> {
        let name = self.pick_table(m, |t| !t.primary.is_empty() && !t.live.is_empty())?;
        if m.children(&name)
            .iter()
            .any(|(_, fk)| !fk.on_delete.follows())
            || (m.referenced(&name) && !self.profile.allows(Class::ForeignKeyCascades))
        {
            return None;
        }
        let t = m.tables.get(&name)?.clone();
        let id = *self.pick_id(&t)?;
        self.resync = m.referenced(&name);
        self.insert_rows(m, &name, &[id], &[], "REPLACE")
    }

    /// An update that changes the primary key (of a parent: its children
    /// follow by `ON UPDATE`).
    fn key_update(&mut self, m: &mut Model) -> Option<String> {
        let name = self.pick_table(m, |t| !t.primary.is_empty() && !t.live.is_empty())?;
        if m.children(&name)
            .iter()
            .any(|(_, fk)| !fk.on_update.follows())
            || (m.referenced(&name) && !self.profile.allows(Class::ForeignKeyCascades))
        {
            return None;
        }
        let mut t = m.tables.get(&name)?.clone();
        let old = *self.pick_id(&t)?;
        let sql = if t.primary.len() > 1 && self.rng.chance(40) {
            let k = t
                .column(&t.primary[1])?
                .ty
                .key_literal(self.rng.below(1000) as i64);
            format!(
                "UPDATE {} SET `{}` = {k} WHERE `id` = {old}",
                self.name(&name),
                t.primary[1]
            )
        } else {
            let new = self.take_id(&mut t)?;
            t.live.retain(|id| *id != old);
            format!(
                "UPDATE {} SET `id` = {new} WHERE `id` = {old}",
                self.name(&name)
            )
        };
        self.resync = m.referenced(&name);
        m.tables.insert(name, t);
        Some(sql)
    }

    /// Two rows swap the values of a unique column in one transaction,
    /// through a third value, as the upstream itself must.
    fn unique_swap(&mut self, m: &mut Model) -> Option<String> {
        let name = self.pick_table(m, |t| {
            t.live.len() >= 2
                && t.columns
                    .iter()
                    .any(|c| c.unique_values && t.in_unique(&c.name))
        })?;
        let t = m.tables.get(&name)?.clone();
        let u: Vec<&Column> = t
            .columns
            .iter()
            .filter(|c| c.unique_values && t.in_unique(&c.name))
            .collect();
        let u = self.rng.pick(&u);
        let a = *self.pick_id(&t)?;
        let b = *self.pick_id(&t)?;
        if a == b {
            return None;
        }
        let tmp = u.ty.unique_literal(m.next_unique());
        let (tn, c) = (self.name(&name), &u.name);
        Some(txn(&[
            format!("SELECT `{c}` INTO @a FROM {tn} WHERE `id` = {a}"),
            format!("SELECT `{c}` INTO @b FROM {tn} WHERE `id` = {b}"),
            format!("UPDATE {tn} SET `{c}` = {tmp} WHERE `id` = {a}"),
            format!("UPDATE {tn} SET `{c}` = @a WHERE `id` = {b}"),
            format!("UPDATE {tn} SET `{c}` = @b WHERE `id` = {a}"),
        ]))
    }

    /// Inserts, updates and deletes over at least two tables, one
    /// transaction.
    fn multi_table_txn(&mut self, m: &mut Model) -> Option<String> {
        if m.tables.len() < 2 {
            return None;
        }
        let mut statements = Vec::new();
        let mut tables = BTreeSet::new();
        for _ in 0..8 {
            if statements.len() >= 5
                || (statements.len() >= 2 && tables.len() >= 2 && self.rng.chance(30))
            {
                break;
            }
            let Some(t) = self.pick_table(m, |_| true) else {
                break;
            };
            let sql = match self.rng.below(4) {
                0 | 1 => {
                    let rows = 1 + self.rng.index(3);
                    self.insert_sql(m, &t, rows, &[]).map(|(s, _)| s)
                }
                2 => self.update_sql(m, &t),
                _ => self.delete_sql(m, &t, false),
            };
            if let Some(sql) = sql {
                statements.push(sql);
                tables.insert(t);
            }
        }
        (tables.len() >= 2).then(|| txn(&statements))
    }

    /// A parent row and its children, one transaction.
    fn parent_and_children(&mut self, m: &mut Model) -> Option<String> {
        let child = self.pick_table(m, |t| !t.fks.is_empty())?;
        let fks = m.tables.get(&child)?.fks.clone();
        let fk = self.rng.pick(&fks).clone();
        if !m.tables.contains_key(&fk.parent) {
            return None;
        }
        let (parent_sql, ids) = self.insert_sql(m, &fk.parent, 1, &[])?;
        let overrides = [(fk.column.clone(), ids[0].to_string())];
        let rows = 1 + self.rng.index(3);
        let (child_sql, _) = self.insert_sql(m, &child, rows, &overrides)?;
        Some(txn(&[parent_sql, child_sql]))
    }

    /// A parent that has children is deleted, its key changed, or another
    /// column of it updated: their `ON DELETE`/`ON UPDATE` actions act
    /// upstream (and are not in the binlog).
    fn cascade(&mut self, m: &mut Model, delete: bool) -> Option<String> {
        let child = self.pick_table(m, |t| !t.fks.is_empty())?;
        let fks = m.tables.get(&child)?.fks.clone();
        let fk = self.rng.pick(&fks).clone();
        let parent = fk.parent.clone();
        if !m.tables.contains_key(&parent) {
            return None;
        }
        let agg = if self.rng.chance(50) { "MAX" } else { "MIN" };
        let target = format!(
            "`id` = (SELECT m FROM (SELECT {agg}(`{}`) AS m FROM {}) AS x)",
            fk.column,
            self.name(&child)
        );
        let children = m.children(&parent);
        self.resync = true;
        if delete {
            if children.iter().any(|(_, f)| !f.on_delete.follows()) {
                return None;
            }
            return Some(format!("DELETE FROM {} WHERE {target}", self.name(&parent)));
        }
        let mut p = m.tables.get(&parent)?.clone();
        if self.rng.chance(50)
            && children
                .iter()
                .all(|(c, f)| f.on_update.follows() && *c != parent)
        {
            let new = self.take_id(&mut p)?;
            m.tables.insert(parent.clone(), p);
            return Some(format!(
                "UPDATE {} SET `id` = {new} WHERE {target}",
                self.name(&parent)
            ));
        }
        // A column of the parent other than its key: nothing cascades, and
        // the children must stay.
        let settable = p.settable();
        let c = self.rng.pick_opt(&settable)?.clone();
        let v = self.value(m, &p, &c, 0);
        Some(format!(
            "UPDATE {} SET `{}` = {v} WHERE {target}",
            self.name(&parent),
            c.name
        ))
    }

    /// Rows written with `foreign_key_checks = 0`: an orphan child, or a
    /// parent deleted under its children (no cascade).
    fn checks_off(&mut self, m: &mut Model) -> Option<String> {
        let child = self.pick_table(m, |t| !t.fks.is_empty())?;
        let fks = m.tables.get(&child)?.fks.clone();
        let fk = self.rng.pick(&fks).clone();
        self.resync = true;
        let parent_delete = m.tables.contains_key(&fk.parent)
            && self.profile.allows(Class::ForeignKeyCascades)
            && self.rng.chance(50);
        let body = if !parent_delete {
            let orphan = 2_000_000_000 - self.rng.below(1000) as i64;
            self.insert_sql(m, &child, 1, &[(fk.column.clone(), orphan.to_string())])?
                .0
        } else {
            format!(
                "DELETE FROM {} WHERE `id` = (SELECT m FROM (SELECT MAX(`{}`) AS m FROM {}) AS x)",
                self.name(&fk.parent),
                fk.column,
                self.name(&child)
            )
        };
        Some(format!(
            "SET SESSION foreign_key_checks = 0;\n{}\nSET SESSION foreign_key_checks = 1;",
            txn(&[body])
        ))
    }

    /// Values that do not fit, under `sql_mode = ''` (truncated and clamped
    /// upstream, with warnings).
    fn non_strict_write(&mut self, m: &mut Model) -> Option<String> {
        let name = self.pick_table(m, |_| true)?;
        let t = m.tables.get(&name)?.clone();
        let candidates: Vec<Column> = t
            .settable()
            .into_iter()
            .filter(|c| !c.unique_values && !t.in_unique(&c.name) && !t.pinned(&c.name))
            .collect();
        let mut overrides = Vec::new();
        for _ in 0..2 {
            if let Some(c) = self.rng.pick_opt(&candidates)
                && let Some(v) = c.ty.overflow_literal(&mut self.rng, c.coll)
                && !overrides
                    .iter()
                    .any(|(n, _): &(String, String)| *n == c.name)
            {
                overrides.push((c.name.clone(), v));
            }
        }
        if overrides.is_empty() {
            return None;
        }
        if self.rng.chance(50) && !t.live.is_empty() {
            let id = *self.pick_id(&t)?;
            let sets: Vec<String> = overrides
                .iter()
                .map(|(c, v)| format!("`{c}` = {v}"))
                .collect();
            return Some(format!(
                "SET STATEMENT sql_mode = '' FOR UPDATE {} SET {} WHERE `id` = {id}",
                self.name(&name),
                sets.join(", ")
            ));
        }
        let (insert, _) = self.insert_sql(m, &name, 1, &overrides)?;
        Some(format!("SET SESSION sql_mode = '';\n{insert}"))
    }

    fn next_value(&mut self, m: &mut Model) -> Option<String> {
        let s = self.pick_sequence(m, |_| true)?;
        let n = self.name(&s);
        Some(match self.rng.below(3) {
            0 => format!("SELECT NEXTVAL({n})"),
            1 => format!("SELECT NEXT VALUE FOR {n}; SELECT NEXTVAL({n})"),
            _ => format!(
                "SELECT NEXTVAL({n}) FROM `{DB}`.`seq_1_to_{}`",
                2 + self.rng.below(60)
            ),
        })
    }

    // --- tables -------------------------------------------------------------

    /// A column for a new table, or (`existing`) one added to a table that
    /// may hold rows.
    fn random_column(&mut self, m: &mut Model, t: &Table, existing: bool) -> Column {
        let name = m.fresh("c");
        let mut ty = Ty::random(&mut self.rng, &self.profile);
        while t.primary.is_empty() && ty == Ty::Float && !self.profile.allows(Class::KeylessFloats)
        {
            ty = Ty::random(&mut self.rng, &self.profile);
        }
        let mut c = Column::plain(name, ty);
        if c.ty.is_text() {
            c.coll = if self.profile.allows(Class::Collations) && self.rng.chance(50) {
                self.rng.index(COLLATIONS.len())
            } else {
                t.default_coll
            };
        }
        let temporal = matches!(
            c.ty,
            Ty::Date | Ty::Datetime(_) | Ty::Timestamp(_) | Ty::Time(_) | Ty::Json | Ty::Point
        );
        c.nullable = matches!(c.ty, Ty::Point) || self.rng.chance(70);
        let needs_default = existing && !c.nullable && temporal;
        if !matches!(c.ty, Ty::Point) && (needs_default || self.rng.chance(25)) {
            c.default = Some(if c.ty.is_text() {
                quote(text_value(&mut self.rng, c.coll, 8).trim_end())
            } else if matches!(c.ty, Ty::Blob(_) | Ty::Varbinary(_) | Ty::Binary(_)) {
                // ASCII bytes: MariaDB logs a `CREATE TABLE ... SELECT` as the
                // table's definition with a binary default as text, so other
                // bytes become '?' in the binlog (for any replica).
                let len = match c.ty {
                    Ty::Binary(n) => usize::from(n).min(4),
                    _ => 4,
                };
                let bytes: String = (0..len)
                    .map(|_| format!("{:02X}", 0x41 + self.rng.below(26)))
                    .collect();
                format!("X'{bytes}'")
            } else {
                c.ty.literal(&mut self.rng, c.coll)
            });
        }
        if !c.nullable && c.default.is_none() && temporal {
            c.nullable = true;
        }
        c
    }

    /// A generated column over `t`'s columns, and whether its values are
    /// unique (so it may carry a unique key).
    fn generated_column(&mut self, m: &mut Model, t: &Table) -> Option<(Column, bool)> {
        let name = m.fresh("g");
        let stored = self.rng.chance(50);
        // MariaDB refuses generated columns over an AUTO_INCREMENT column.
        let id_ok = t.column("id").is_some_and(|c| !c.auto_increment);
        let base_of = |pred: &dyn Fn(&Ty) -> bool| -> Vec<String> {
            t.columns
                .iter()
                .filter(|c| c.generated.is_none() && c.name != "id" && pred(&c.ty))
                .map(|c| c.name.clone())
                .collect()
        };
        let (ty, expr, base, unique) = match self.rng.below(7) {
            0..=2 if !id_ok => return None,
            0 => (
                Ty::Int {
                    bytes: 8,
                    unsigned: false,
                },
                "`id` * 3 + 1".to_string(),
                vec![],
                true,
            ),
            1 => (
                Ty::Varchar(40),
                "CONCAT('g', `id`)".to_string(),
                vec![],
                true,
            ),
            2 => {
                // Not CHAR: MariaDB refuses expressions whose result depends on
                // PAD_CHAR_TO_FULL_LENGTH.
                let b = self
                    .rng
                    .pick_opt(&base_of(&|t| matches!(t, Ty::Varchar(_) | Ty::Text(_))))?
                    .clone();
                (
                    Ty::Varchar(80),
                    format!("CONCAT_WS('#', LEFT(`{b}`, 8), `id`)"),
                    vec![b],
                    true,
                )
            }
            3 => {
                let b = self.rng.pick_opt(&base_of(&|t| t.is_int()))?.clone();
                (
                    Ty::Int {
                        bytes: 8,
                        unsigned: false,
                    },
                    format!("`{b}` DIV 3"),
                    vec![b],
                    false,
                )
            }
            4 => {
                let b = self
                    .rng
                    .pick_opt(&base_of(&|t| matches!(t, Ty::Date | Ty::Datetime(_))))?
                    .clone();
                (Ty::Date, format!("DATE(`{b}`)"), vec![b], false)
            }
            5 => {
                let b = self
                    .rng
                    .pick_opt(&base_of(&|t| matches!(t, Ty::Json)))?
                    .clone();
                (
                    Ty::Varchar(64),
                    format!("JSON_VALUE(`{b}`, '$.s')"),
                    vec![b],
                    false,
                )
            }
            _ => {
                let b = self
                    .rng
                    .pick_opt(&base_of(&|t| matches!(t, Ty::Decimal(p, _) if *p < 60)))?
                    .clone();
                let Some(Ty::Decimal(p, s)) = t.column(&b).map(|c| c.ty.clone()) else {
                    return None;
                };
                (Ty::Decimal(p + 1, s), format!("`{b}` + 1"), vec![b], false)
            }
        };
        let mut c = Column::plain(name, ty);
        c.coll = t.default_coll;
        c.generated = Some(Generated { expr, stored, base });
        Some((c, unique))
    }

    /// A unique index on `column` (with `id` when the table is partitioned).
    fn unique_index(&mut self, m: &mut Model, t: &Table, column: &str, partitioned: bool) -> Index {
        let mut columns = vec![(column.to_string(), None)];
        if partitioned && column != "id" {
            columns.push(("id".to_string(), None));
        }
        Index {
            name: m.fresh("uq"),
            columns,
            unique: true,
            for_foreign_key: false,
        }
        .with_prefixes(t)
    }

    fn new_table(&mut self, m: &mut Model) -> Table {
        let p = self.profile.clone();
        let mut t = Table {
            name: m.fresh("t"),
            columns: Vec::new(),
            primary: Vec::new(),
            indexes: Vec::new(),
            fks: Vec::new(),
            partitioning: None,
            default_coll: 0,
            next_id: 1 + self.rng.below(1000) as i64,
            live: Vec::new(),
        };
        if p.allows(Class::Collations) && self.rng.chance(25) {
            t.default_coll = self.rng.index(COLLATIONS.len());
        }
        let keyless = p.allows(Class::Keyless) && self.rng.chance(10);
        let partitioned = p.allows(Class::Partitions) && self.rng.chance(20);
        let mut id = Column::plain(
            "id".into(),
            Ty::Int {
                bytes: if self.rng.chance(50) { 8 } else { 4 },
                unsigned: self.rng.chance(25),
            },
        );
        id.nullable = false;
        id.auto_increment = !keyless && self.rng.chance(20);
        t.columns.push(id);
        if !keyless {
            t.primary.push("id".into());
            if p.allows(Class::Keys) && self.rng.chance(30) {
                let ty = loop {
                    let ty = Ty::random(&mut self.rng, &p);
                    if ty.key_capable() {
                        break ty;
                    }
                };
                let mut k = Column::plain("k".into(), ty);
                k.nullable = false;
                if k.ty.is_text() {
                    k.coll = t.default_coll;
                }
                t.columns.push(k);
                t.primary.push("k".into());
            }
        } else if self.rng.chance(40) {
            let ix = self.unique_index(m, &t, "id", false);
            t.indexes.push(ix);
        }
        for _ in 0..1 + self.rng.index(7) {
            let c = self.random_column(m, &t, false);
            t.columns.push(c);
        }
        if p.allows(Class::Keys) && self.rng.chance(40) {
            let ty = self.rng.pick(&[
                Ty::Int {
                    bytes: 4,
                    unsigned: false,
                },
                Ty::Int {
                    bytes: 8,
                    unsigned: true,
                },
                Ty::Varchar(24),
                Ty::Char(16),
                Ty::Decimal(20, 2),
            ]);
            let mut u = Column::plain(m.fresh("u"), ty.clone());
            u.coll = t.default_coll;
            u.unique_values = true;
            u.nullable = self.rng.chance(30);
            let name = u.name.clone();
            t.columns.push(u);
            let ix = self.unique_index(m, &t, &name, partitioned);
            t.indexes.push(ix);
        }
        if p.allows(Class::Generated) {
            for _ in 0..self.rng.below(3) {
                if let Some((g, unique)) = self.generated_column(m, &t) {
                    let name = g.name.clone();
                    t.columns.push(g);
                    if unique && self.rng.chance(40) {
                        let ix = self.unique_index(m, &t, &name, partitioned);
                        t.indexes.push(ix);
                    }
                }
            }
        }
        if p.allows(Class::Sequences) && self.rng.chance(25) {
            let seqs: Vec<String> = m.sequences.keys().cloned().collect();
            if let Some(s) = self.rng.pick_opt(&seqs) {
                let mut c = Column::plain(
                    m.fresh("n"),
                    Ty::Int {
                        bytes: 8,
                        unsigned: false,
                    },
                );
                c.sequence = Some(s.clone());
                t.columns.push(c);
            }
        }
        if p.allows(Class::ForeignKeys)
            && !partitioned
            && self.rng.chance(35)
            && let Some(fk) = self.foreign_key(m, &t)
        {
            t.columns.push(fk.0);
            t.indexes.push(fk.1);
            t.fks.push(fk.2);
        }
        if p.allows(Class::Indexes)
            && self.rng.chance(30)
            && let Some(ix) = self.random_index(m, &t)
        {
            t.indexes.push(ix);
        }
        if partitioned {
            t.partitioning = Some(self.random_partitioning(m, &t));
        }
        t
    }

    /// A foreign key from a new column of `t` to a parent's `id` (`t`
    /// itself, sometimes): the column, the index it needs and the key.
    fn foreign_key(&mut self, m: &mut Model, t: &Table) -> Option<(Column, Index, ForeignKey)> {
        if m.linked() >= MAX_LINKED_TABLES {
            return None;
        }
        // PostgreSQL refuses a key to columns without a unique constraint
        // (MariaDB takes any indexed prefix, as `id` of a key `(id, k)`):
        // sink-postgres drops it, and its cascades with it (README).
        let unique_only = self.profile.kinds.is_some();
        let parent_ok = |p: &Table| {
            p.primary.first().is_some_and(|c| c == "id") && (!unique_only || p.primary.len() == 1)
        };
        let self_ref = parent_ok(t) && self.rng.chance(10);
        // A new child names its parent in its DDL, but the DDL changes only
        // the child: any parent will do.
        let avoid = std::mem::take(&mut self.avoid);
        let parent = if self_ref {
            Some(t.name.clone())
        } else {
            self.pick_table(m, |p| p.partitioning.is_none() && parent_ok(p))
        };
        self.avoid = avoid;
        let parent = parent?;
        let id_ty = if self_ref {
            t.id_ty()
        } else {
            m.tables.get(&parent)?.id_ty()
        };
        let actions = [Rule::Cascade, Rule::SetNull, Rule::Restrict, Rule::NoAction];
        let (on_delete, on_update) = if self_ref {
            (*self.rng.pick(&actions[..2]), Rule::Restrict)
        } else {
            (*self.rng.pick(&actions), *self.rng.pick(&actions))
        };
        let column = Column::plain(m.fresh("p"), id_ty);
        let name = m.fresh("fk");
        let index = Index {
            name: name.clone(),
            columns: vec![(column.name.clone(), None)],
            unique: false,
            for_foreign_key: true,
        };
        let fk = ForeignKey {
            name,
            column: column.name.clone(),
            parent,
            on_delete,
            on_update,
        };
        Some((column, index, fk))
    }

    /// A plain index over one or two of `t`'s columns.
    fn random_index(&mut self, m: &mut Model, t: &Table) -> Option<Index> {
        let cols: Vec<String> = t
            .columns
            .iter()
            .filter(|c| c.ty.indexable())
            .map(|c| c.name.clone())
            .collect();
        let a = self.rng.pick_opt(&cols)?.clone();
        let mut columns = vec![(a.clone(), None)];
        if self.rng.chance(40) {
            let b = self.rng.pick(&cols).clone();
            if b != a {
                columns.push((b, None));
            }
        }
        Some(
            Index {
                name: m.fresh("ix"),
                columns,
                unique: false,
                for_foreign_key: false,
            }
            .with_prefixes(t),
        )
    }

    fn random_partitioning(&mut self, m: &mut Model, t: &Table) -> Partitioning {
        match self.rng.below(4) {
            0 => {
                let mut bound = t.next_id;
                let mut parts = Vec::new();
                for _ in 0..1 + self.rng.index(3) {
                    bound += 20 + self.rng.below(200) as i64;
                    parts.push((m.fresh("p"), Some(bound)));
                }
                parts.push((m.fresh("p"), None));
                Partitioning::Range(parts)
            }
            1 => {
                let modulus = 3 + self.rng.below(4) as i64;
                let mut parts: Vec<(String, Vec<i64>)> = Vec::new();
                for rem in 0..modulus {
                    if parts.is_empty() || self.rng.chance(50) {
                        parts.push((m.fresh("p"), vec![rem]));
                    } else {
                        parts.last_mut().expect("one part").1.push(rem);
                    }
                }
                Partitioning::List { modulus, parts }
            }
            2 => Partitioning::Hash {
                linear: self.rng.chance(30),
                count: 2 + self.rng.below(4) as u32,
            },
            _ => Partitioning::Key {
                count: 2 + self.rng.below(3) as u32,
            },
        }
    }

    fn create_like(&mut self, m: &mut Model) -> Option<String> {
        let src = self.pick_table(m, |_| true)?;
        let mut t = m.tables.get(&src)?.clone();
        t.name = m.fresh("t");
        t.fks.clear();
        for ix in &mut t.indexes {
            ix.for_foreign_key = false;
        }
        t.live.clear();
        let sql = format!(
            "CREATE TABLE {}{} LIKE {}",
            if self.rng.chance(20) {
                "IF NOT EXISTS "
            } else {
                ""
            },
            self.name(&t.name),
            self.name(&src)
        );
        m.tables.insert(t.name.clone(), t);
        Some(sql)
    }

    /// `CREATE TABLE ... SELECT` of some columns of another table (its rows
    /// come in the same binlog transaction as the statement).
    fn create_select(&mut self, m: &mut Model) -> Option<String> {
        let src = self.pick_table(m, |_| true)?;
        let s = m.tables.get(&src)?.clone();
        let mut columns = vec![s.column("id")?.clone()];
        for c in &s.columns {
            if c.name != "id" && self.rng.chance(60) {
                let mut c = c.clone();
                if c.generated.is_some() {
                    c.nullable = true;
                }
                c.generated = None;
                c.sequence = None;
                c.default = None;
                c.auto_increment = false;
                columns.push(c);
            }
        }
        columns[0].auto_increment = false;
        let keyed = !self.profile.allows(Class::Keyless) || self.rng.chance(80);
        if !keyed && !self.profile.allows(Class::KeylessFloats) {
            columns.retain(|c| c.ty != Ty::Float);
        }
        let name = m.fresh("t");
        let filter = if self.rng.chance(50) {
            " WHERE `id` % 2 = 0"
        } else {
            ""
        };
        let names: Vec<String> = columns.iter().map(|c| c.name.clone()).collect();
        let sql = format!(
            "CREATE TABLE {}{} SELECT {} FROM {}{filter}",
            self.name(&name),
            if keyed { " (PRIMARY KEY (`id`))" } else { "" },
            idents(&names),
            self.name(&src)
        );
        let t = Table {
            name: name.clone(),
            columns,
            primary: if keyed { vec!["id".into()] } else { Vec::new() },
            indexes: Vec::new(),
            fks: Vec::new(),
            partitioning: None,
            default_coll: 0,
            next_id: s.next_id,
            live: Vec::new(),
        };
        m.tables.insert(name, t);
        self.resync = true;
        Some(sql)
    }

    /// `DROP TABLE a, b` (children first).
    fn drop_tables(&mut self, m: &mut Model) -> Option<String> {
        let a = self.pick_table(m, |_| true)?;
        let b = self.pick_table(m, |t| t.name != a)?;
        let set = [a.clone(), b.clone()];
        for t in &set {
            if m.children(t).iter().any(|(c, _)| !set.contains(c)) {
                return None;
            }
        }
        // A parent after its child.
        let (first, second) = if m.children(&a).iter().any(|(c, _)| *c == b) {
            (b, a)
        } else {
            (a, b)
        };
        m.tables.remove(&first);
        m.tables.remove(&second);
        Some(format!(
            "DROP TABLE {}, {}",
            self.name(&first),
            self.name(&second)
        ))
    }

    // --- columns and indexes --------------------------------------------------

    /// Where a new column goes: `FIRST`, `AFTER x` or the end.
    fn position(&mut self, t: &Table) -> (String, usize) {
        match self.rng.below(4) {
            0 => (" FIRST".into(), 0),
            1 => {
                let at = self.rng.index(t.columns.len());
                (format!(" AFTER `{}`", t.columns[at].name), at + 1)
            }
            _ => (String::new(), t.columns.len()),
        }
    }

    fn add_columns(&mut self, m: &mut Model) -> Option<String> {
        let name = self.pick_table(m, |_| true)?;
        let mut t = m.tables.get(&name)?.clone();
        let mut clauses = Vec::new();
        let defaults = t.live.is_empty() || self.profile.allows(Class::AddedDefaults);
        for _ in 0..1 + self.rng.index(3) {
            let mut c = self.random_column(m, &t, true);
            if !defaults {
                c.nullable = true;
                c.default = None;
            }
            // Only on an empty table: on one with rows the ALTER fills them
            // from the sequence, and MariaDB logs the sequence's new
            // position (rows of the sequence table) before the ALTER, so a
            // replica that applies both draws the values twice. MariaDB's
            // own replicas do the same; no sink can undo it.
            if self.profile.allows(Class::Sequences) && t.live.is_empty() && self.rng.chance(15) {
                let seqs: Vec<String> = m.sequences.keys().cloned().collect();
                if let Some(s) = self.rng.pick_opt(&seqs) {
                    c = Column::plain(
                        m.fresh("n"),
                        Ty::Int {
                            bytes: 8,
                            unsigned: false,
                        },
                    );
                    c.sequence = Some(s.clone());
                }
            }
            let (clause, at) = self.position(&t);
            clauses.push(format!("ADD COLUMN {}{clause}", t.column_sql(&c)));
            t.columns.insert(at, c);
        }
        let sql = format!("ALTER TABLE {} {}", self.name(&name), clauses.join(", "));
        m.tables.insert(name, t);
        Some(sql)
    }

    /// A generated column added to a table that may hold rows (a `STORED`
    /// one is computed by the `ALTER` itself, without row events).
    fn add_generated(&mut self, m: &mut Model) -> Option<String> {
        let name = self.pick_table(m, |_| true)?;
        let mut t = m.tables.get(&name)?.clone();
        if !t.live.is_empty() && !self.profile.allows(Class::AddedGenerated) {
            return None;
        }
        let (g, unique) = self.generated_column(m, &t)?;
        let (clause, at) = self.position(&t);
        let mut sql = format!(
            "ALTER TABLE {} ADD COLUMN {}{clause}",
            self.name(&name),
            t.column_sql(&g)
        );
        let column = g.name.clone();
        t.columns.insert(at, g);
        if unique && self.rng.chance(50) {
            let ix = self.unique_index(m, &t, &column, t.partitioning.is_some());
            let _ = write!(sql, ", ADD {}", index_sql(&ix));
            t.indexes.push(ix);
        }
        m.tables.insert(name, t);
        Some(sql)
    }

    /// A column that may be dropped, renamed or retyped.
    fn free_column(&mut self, t: &Table, ok: impl Fn(&Column) -> bool) -> Option<Column> {
        let cols: Vec<Column> = t
            .columns
            .iter()
            .filter(|c| !t.pinned(&c.name) && ok(c))
            .cloned()
            .collect();
        self.rng.pick_opt(&cols).cloned()
    }

    fn drop_column(&mut self, m: &mut Model) -> Option<String> {
        let name = self.pick_table(m, |t| t.columns.len() > 2)?;
        let mut t = m.tables.get(&name)?.clone();
        // MariaDB refuses to drop a column of a multi-column unique key.
        let c = self.free_column(&t, |c| {
            !t.indexes.iter().any(|i| {
                i.unique && i.columns.len() > 1 && i.columns.iter().any(|(x, _)| *x == c.name)
            })
        })?;
        t.columns.retain(|x| x.name != c.name);
        for ix in &mut t.indexes {
            ix.columns.retain(|(x, _)| *x != c.name);
        }
        t.indexes.retain(|ix| !ix.columns.is_empty());
        let sql = format!("ALTER TABLE {} DROP COLUMN `{}`", self.name(&name), c.name);
        m.tables.insert(name, t);
        Some(sql)
    }

    fn rename_column(&mut self, m: &mut Model) -> Option<String> {
        let name = self.pick_table(m, |_| true)?;
        let mut t = m.tables.get(&name)?.clone();
        let c = self.free_column(&t, |_| true)?;
        let to = m.fresh("c");
        let sql = if c.generated.is_none() && self.rng.chance(40) {
            let mut renamed = c.clone();
            renamed.name = to.clone();
            format!(
                "ALTER TABLE {} CHANGE COLUMN `{}` {}",
                self.name(&name),
                c.name,
                t.column_sql(&renamed)
            )
        } else {
            format!(
                "ALTER TABLE {} RENAME COLUMN `{}` TO `{to}`",
                self.name(&name),
                c.name
            )
        };
        t.rename_column(&c.name, &to);
        m.tables.insert(name, t);
        Some(sql)
    }

    /// A `MODIFY` that keeps every value: a wider type, or another
    /// collation of the same character set.
    fn modify_column(&mut self, m: &mut Model) -> Option<String> {
        let name = self.pick_table(m, |_| true)?;
        let mut t = m.tables.get(&name)?.clone();
        let c = self.free_column(&t, |c| c.generated.is_none() && c.sequence.is_none())?;
        let mut changed = c.clone();
        if c.ty.is_text() && self.profile.allows(Class::Collations) && self.rng.chance(40) {
            let same: Vec<usize> = (0..COLLATIONS.len())
                .filter(|&i| COLLATIONS[i].charset == COLLATIONS[c.coll].charset && i != c.coll)
                .collect();
            changed.coll = *self.rng.pick_opt(&same)?;
        } else {
            changed.ty = c.ty.wider()?;
            if matches!(changed.ty, Ty::Varchar(n) if n > 600) {
                return None;
            }
        }
        let sql = self.modify(&name, &mut t, changed);
        m.tables.insert(name, t);
        Some(sql)
    }

    /// `ALTER TABLE ... MODIFY COLUMN` to `changed`, which replaces the
    /// column of its name in `t`.
    fn modify(&self, name: &str, t: &mut Table, changed: Column) -> String {
        let sql = format!(
            "ALTER TABLE {} MODIFY COLUMN {}",
            self.name(name),
            t.column_sql(&changed)
        );
        for x in &mut t.columns {
            if x.name == changed.name {
                *x = changed.clone();
            }
        }
        sql
    }

    /// A `MODIFY` under `sql_mode = ''` that truncates or clamps values
    /// already there, or makes NULLs the type's implicit default.
    fn non_strict_modify(&mut self, m: &mut Model) -> Option<String> {
        let name = self.pick_table(m, |t| !t.live.is_empty())?;
        let mut t = m.tables.get(&name)?.clone();
        let c = self.free_column(&t, |c| {
            c.generated.is_none()
                && c.sequence.is_none()
                && !c.unique_values
                && !t.in_unique(&c.name)
                && !t.in_index(&c.name)
        })?;
        let mut changed = c.clone();
        changed.default = None;
        let simple = matches!(
            c.ty,
            Ty::Int { .. } | Ty::Varchar(_) | Ty::Char(_) | Ty::Decimal(..) | Ty::Text(_)
        );
        if c.nullable && simple && self.rng.chance(30) {
            changed.nullable = false;
        } else {
            changed.ty = c.ty.narrower()?;
            if changed.ty == Ty::Float
                && t.primary.is_empty()
                && !self.profile.allows(Class::KeylessFloats)
            {
                return None;
            }
        }
        let modify = self.modify(&name, &mut t, changed);
        m.tables.insert(name, t);
        Some(if self.rng.chance(50) {
            format!("SET SESSION sql_mode = '';\n{modify}")
        } else {
            format!("SET STATEMENT sql_mode = '' FOR {modify}")
        })
    }

    fn add_index(&mut self, m: &mut Model, create: bool) -> Option<String> {
        let name = self.pick_table(m, |_| true)?;
        let t = m.tables.get(&name)?.clone();
        let ix = self.random_index(m, &t)?;
        let sql = if create {
            let body = index_sql(&ix);
            let cols = body.split_once(" (").map_or("", |(_, c)| c);
            format!("CREATE INDEX `{}` ON {} ({cols}", ix.name, self.name(&name))
        } else {
            format!("ALTER TABLE {} ADD {}", self.name(&name), index_sql(&ix))
        };
        m.tables.get_mut(&name)?.indexes.push(ix);
        Some(sql)
    }

    /// A unique key on a column whose values are unique by construction.
    fn add_unique(&mut self, m: &mut Model) -> Option<String> {
        let name = self.pick_table(m, |_| true)?;
        let t = m.tables.get(&name)?.clone();
        let cols: Vec<String> = t
            .columns
            .iter()
            .filter(|c| {
                c.unique_values
                    || c.name == "id"
                    || c.generated
                        .as_ref()
                        .is_some_and(|g| g.expr.contains("`id`") && !g.expr.contains("DIV"))
            })
            .map(|c| c.name.clone())
            .collect();
        let col = self.rng.pick_opt(&cols)?.clone();
        let ix = self.unique_index(m, &t, &col, t.partitioning.is_some());
        let sql = if self.rng.chance(50) {
            format!("ALTER TABLE {} ADD {}", self.name(&name), index_sql(&ix))
        } else {
            let body = index_sql(&ix);
            let cols = body.split_once(" (").map_or("", |(_, c)| c);
            format!(
                "CREATE UNIQUE INDEX `{}` ON {} ({cols}",
                ix.name,
                self.name(&name)
            )
        };
        m.tables.get_mut(&name)?.indexes.push(ix);
        Some(sql)
    }

    /// A foreign key added with its (NULL) column.
    fn add_foreign_key(&mut self, m: &mut Model) -> Option<String> {
        let name = self.pick_table(m, |t| t.partitioning.is_none())?;
        let mut t = m.tables.get(&name)?.clone();
        let (column, index, fk) = self.foreign_key(m, &t)?;
        let sql = format!(
            "ALTER TABLE {} ADD COLUMN {}, ADD {}",
            self.name(&name),
            t.column_sql(&column),
            fk_sql(&fk)
        );
        t.columns.push(column);
        t.indexes.push(index);
        t.fks.push(fk);
        m.tables.insert(name, t);
        Some(sql)
    }

    // --- partitions -----------------------------------------------------------

    fn add_partition(&mut self, m: &mut Model) -> Option<String> {
        let name = self.pick_table(m, |t| {
            matches!(
                t.partitioning,
                Some(
                    Partitioning::List { .. }
                        | Partitioning::Hash { .. }
                        | Partitioning::Key { .. }
                )
            )
        })?;
        let fresh = m.fresh("p");
        let t = m.tables.get_mut(&name)?;
        let clause = match t.partitioning.as_mut()? {
            Partitioning::List { modulus, parts } => {
                let missing: Vec<i64> = (0..*modulus)
                    .filter(|r| !parts.iter().any(|(_, v)| v.contains(r)))
                    .collect();
                if missing.is_empty() {
                    return None;
                }
                let part = (fresh, missing);
                let clause = format!("ADD PARTITION ({})", list_partition(&part));
                parts.push(part);
                clause
            }
            Partitioning::Hash { count, .. } | Partitioning::Key { count } => {
                let by = 1 + self.rng.below(2) as u32;
                *count += by;
                format!("ADD PARTITION PARTITIONS {by}")
            }
            Partitioning::Range(_) => return None,
        };
        Some(format!("ALTER TABLE {} {clause}", self.name(&name)))
    }

    fn drop_partition(&mut self, m: &mut Model) -> Option<String> {
        let name = self.pick_table(m, |t| match &t.partitioning {
            Some(Partitioning::Range(p)) => p.len() > 2,
            Some(Partitioning::List { parts, .. }) => parts.len() > 1,
            _ => false,
        })?;
        let t = m.tables.get_mut(&name)?;
        let dropped = match t.partitioning.as_mut()? {
            Partitioning::Range(parts) => {
                // Never the MAXVALUE partition: later rows need it.
                let at = self.rng.index(parts.len() - 1);
                parts.remove(at).0
            }
            Partitioning::List { parts, .. } => {
                let at = self.rng.index(parts.len());
                parts.remove(at).0
            }
            _ => return None,
        };
        self.resync = true;
        Some(format!(
            "ALTER TABLE {} DROP PARTITION `{dropped}`",
            self.name(&name)
        ))
    }

    fn reorganize_partition(&mut self, m: &mut Model) -> Option<String> {
        let name = self.pick_table(m, |t| {
            matches!(
                t.partitioning,
                Some(Partitioning::Range(_) | Partitioning::List { .. })
            )
        })?;
        let (a, b) = (m.fresh("p"), m.fresh("p"));
        let t = m.tables.get_mut(&name)?;
        let next_id = t.next_id;
        let clause = match t.partitioning.as_mut()? {
            Partitioning::Range(parts) if parts.len() < 2 || self.rng.chance(60) => {
                // Split the MAXVALUE partition.
                let last = parts.pop()?;
                let low = parts.last().and_then(|p| p.1).unwrap_or(0).max(next_id);
                let bound = low + 20 + self.rng.below(300) as i64;
                let new = vec![(a, Some(bound)), (b, None)];
                let clause = format!(
                    "REORGANIZE PARTITION `{}` INTO ({})",
                    last.0,
                    new.iter()
                        .map(range_partition)
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                parts.extend(new);
                clause
            }
            Partitioning::Range(parts) => {
                // Merge two neighbours.
                let at = self.rng.index(parts.len() - 1);
                let second = parts.remove(at + 1);
                let first = parts.remove(at);
                let merged = (a, second.1);
                let clause = format!(
                    "REORGANIZE PARTITION `{}`, `{}` INTO ({})",
                    first.0,
                    second.0,
                    range_partition(&merged)
                );
                parts.insert(at, merged);
                clause
            }
            Partitioning::List { parts, .. } if parts.len() >= 2 => {
                let second = parts.remove(1 + self.rng.index(parts.len() - 1));
                let first = parts.remove(0);
                let mut values = first.1.clone();
                values.extend(&second.1);
                values.sort_unstable();
                let merged = (a, values);
                let clause = format!(
                    "REORGANIZE PARTITION `{}`, `{}` INTO ({})",
                    first.0,
                    second.0,
                    list_partition(&merged)
                );
                parts.push(merged);
                clause
            }
            _ => return None,
        };
        Some(format!("ALTER TABLE {} {clause}", self.name(&name)))
    }

    /// A partition swapped with a plain table made for it (`CREATE TABLE
    /// ... LIKE`, `REMOVE PARTITIONING`, rows that belong to the partition,
    /// `EXCHANGE PARTITION`): one DDL naming two tables.
    fn exchange_partition(&mut self, m: &mut Model) -> Option<String> {
        let name = self.pick_table(m, |t| t.partitioning.is_some())?;
        let p = m.tables.get(&name)?.clone();
        let partitioning = p.partitioning.clone()?;
        let names = partitioning.names();
        let at = self.rng.index(names.len());
        let part = names[at].clone();
        // Ids below the parent's counter that the partition takes.
        let candidates: Vec<i64> = match &partitioning {
            Partitioning::Range(parts) => {
                let lo = if at == 0 {
                    1
                } else {
                    parts[at - 1].1.unwrap_or(1)
                };
                let hi = parts[at].1.unwrap_or(i64::MAX).min(p.next_id);
                (lo.max(1)..hi).take(2000).collect()
            }
            Partitioning::List { modulus, parts } => (1..p.next_id)
                .filter(|id| parts[at].1.contains(&id.rem_euclid(*modulus)))
                .collect(),
            _ => Vec::new(),
        };
        let x = m.fresh("t");
        let mut swap = p.clone();
        swap.name = x.clone();
        swap.partitioning = None;
        swap.live.clear();
        m.tables.insert(x.clone(), swap);
        let mut statements = vec![
            format!("CREATE TABLE {} LIKE {}", self.name(&x), self.name(&name)),
            format!("ALTER TABLE {} REMOVE PARTITIONING", self.name(&x)),
        ];
        if !candidates.is_empty() && self.rng.chance(70) {
            let mut ids = BTreeSet::new();
            for _ in 0..1 + self.rng.index(3) {
                ids.insert(*self.rng.pick(&candidates));
            }
            let ids: Vec<i64> = ids.into_iter().collect();
            statements.push(self.insert_rows(m, &x, &ids, &[], "INSERT")? + ";");
        }
        statements.push(format!(
            "ALTER TABLE {} EXCHANGE PARTITION `{part}` WITH TABLE {}",
            self.name(&name),
            self.name(&x),
        ));
        self.resync = true;
        Some(statements.join(";\n"))
    }

    // --- views ----------------------------------------------------------------

    fn create_view(&mut self, name: &str, select: &str, replace: bool) -> String {
        let mut s = String::from("CREATE ");
        if replace {
            s.push_str("OR REPLACE ");
        }
        match self.rng.below(4) {
            0 => s.push_str("ALGORITHM=MERGE "),
            1 => s.push_str("ALGORITHM=TEMPTABLE "),
            _ => {}
        }
        if self.rng.chance(30) {
            s.push_str("SQL SECURITY INVOKER ");
        }
        let _ = write!(s, "VIEW {} AS {select}", self.name(name));
        s
    }

    /// A view's query over the model's tables and views, with its column
    /// names.
    fn view_select(&mut self, m: &Model, name: &str) -> Option<(String, Vec<String>)> {
        match self.rng.below(5) {
            0 | 1 => {
                let t = self.pick_table(m, |_| true)?;
                let table = m.tables.get(&t)?;
                let mut cols = vec!["id".to_string()];
                for c in &table.columns {
                    if c.name != "id" && cols.len() < 4 && self.rng.chance(40) {
                        cols.push(c.name.clone());
                    }
                }
                let check = if self.rng.chance(20) {
                    " WITH CHECK OPTION"
                } else {
                    ""
                };
                Some((
                    format!(
                        "SELECT {} FROM {} WHERE `id` % 3 <> 1{check}",
                        idents(&cols),
                        self.name(&t)
                    ),
                    cols,
                ))
            }
            2 => {
                let child = self.pick_table(m, |t| !t.fks.is_empty())?;
                let fk = self.rng.pick(&m.tables.get(&child)?.fks).clone();
                Some((
                    format!(
                        "SELECT c.`id` AS `cid`, p.`id` AS `pid`, c.`{}` AS `link` FROM {} c JOIN {} p ON c.`{}` = p.`id`",
                        fk.column,
                        self.name(&child),
                        self.name(&fk.parent),
                        fk.column
                    ),
                    vec!["cid".into(), "pid".into(), "link".into()],
                ))
            }
            3 => {
                let t = self.pick_table(m, |_| true)?;
                Some((
                    format!(
                        "SELECT COUNT(*) AS `n`, COALESCE(SUM(`id`), 0) AS `s` FROM {}",
                        self.name(&t)
                    ),
                    vec!["n".into(), "s".into()],
                ))
            }
            _ => {
                let views: Vec<(&String, &Vec<String>)> =
                    m.views.iter().filter(|(v, _)| *v != name).collect();
                let (v, cols) = self.rng.pick_opt(&views)?;
                Some((
                    format!("SELECT `{}` FROM {}", cols[0], self.name(v)),
                    vec![cols[0].clone()],
                ))
            }
        }
    }
}

impl Rng {
    fn pick_opt<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        (!items.is_empty()).then(|| self.pick(items))
    }
}

impl Index {
    /// Prefix lengths where the columns' types need them (and where a long
    /// `VARCHAR` would pass the key length).
    fn with_prefixes(mut self, t: &Table) -> Index {
        for (c, prefix) in &mut self.columns {
            if let Some(col) = t.column(c) {
                if col.ty.needs_prefix() {
                    *prefix = Some(10);
                } else if matches!(col.ty, Ty::Varchar(n) if n > 100) && !self.unique {
                    *prefix = Some(50);
                }
            }
        }
        self
    }
}

// ---------------------------------------------------------------------------
// The run: settings, journal, model resync
// ---------------------------------------------------------------------------

/// What the environment asks for.
struct Settings {
    seed: u64,
    steps: usize,
    /// Run this file's steps instead of the generator's.
    replay: Option<PathBuf>,
}

impl Settings {
    fn from_env() -> Settings {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let seed = var("SLUICE_SCHEMA_SEED").map_or(DEFAULT_SEED, |v| {
            let v = v.trim();
            let parsed = match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => v.parse(),
            };
            parsed.unwrap_or_else(|e| panic!("SLUICE_SCHEMA_SEED={v} is not a number: {e}"))
        });
        let steps = var("SLUICE_SCHEMA_STEPS").map_or(DEFAULT_STEPS, |v| {
            v.trim()
                .parse()
                .unwrap_or_else(|e| panic!("SLUICE_SCHEMA_STEPS={v} is not a number: {e}"))
        });
        Settings {
            seed,
            steps,
            replay: var("SLUICE_SCHEMA_REPLAY").map(PathBuf::from),
        }
    }
}

/// Every step run, as a SQL file that can be run again (steps that failed
/// upstream are commented out with their error), and the last steps kept
/// for a failure report.
struct Journal {
    path: PathBuf,
    file: std::io::BufWriter<std::fs::File>,
    recent: VecDeque<String>,
}

impl Journal {
    fn open(test: &str, run: &str) -> Journal {
        let dir = sluice_tests::workspace_root().join("target/schema-evolution");
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let path = dir.join(format!("{test}-{run}.sql"));
        let file = std::fs::File::create(&path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        Journal {
            path,
            file: std::io::BufWriter::new(file),
            recent: VecDeque::new(),
        }
    }

    fn record(&mut self, n: usize, kind: Kind, sql: &str, outcome: &Result<String, String>) {
        let mut entry = format!("-- #{n} {kind:?} ({:?})", kind.class());
        let body = if sql.trim_end().ends_with(';') {
            sql.trim_end().to_string()
        } else {
            format!("{};", sql.trim_end())
        };
        match outcome {
            Ok(_) => {
                entry.push('\n');
                entry.push_str(&body);
            }
            Err(e) => {
                let _ = write!(entry, ": failed upstream, skipped: {}", error_line(e));
                for line in body.lines() {
                    let _ = write!(entry, "\n-- {line}");
                }
            }
        }
        let _ = writeln!(self.file, "{entry}");
        let _ = self.file.flush();
        self.recent.push_back(entry);
        while self.recent.len() > 40 {
            self.recent.pop_front();
        }
    }

    /// The last steps, shortened for a report.
    fn tail(&self) -> String {
        self.recent
            .iter()
            .map(|e| {
                if e.len() > 1500 {
                    let cut = e.char_indices().nth(1500).map_or(e.len(), |(i, _)| i);
                    format!("{} …", &e[..cut])
                } else {
                    e.clone()
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The steps of a replay file: each `-- #n` header starts one, comment
/// lines are left out (so are the steps a journal commented out).
fn replay_steps(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read SLUICE_SCHEMA_REPLAY={}: {e}", path.display()));
    let mut steps = vec![String::new()];
    for line in text.lines() {
        if line.starts_with("-- #") {
            steps.push(String::new());
        } else if !line.trim_start().starts_with("--") {
            let step = steps.last_mut().expect("one step");
            step.push_str(line);
            step.push('\n');
        }
    }
    steps.retain(|s| !s.trim().is_empty());
    steps
}

/// Tab-separated lines of a client's batch output.
/// The `ERROR ...` line of a client's error output.
fn error_line(stderr: &str) -> &str {
    stderr
        .lines()
        .find(|l| l.starts_with("ERROR"))
        .or_else(|| {
            stderr
                .lines()
                .find(|l| !l.trim().is_empty() && !l.starts_with("---"))
        })
        .unwrap_or("")
        .trim()
}

fn rows_of(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect()
}

/// Brings the model in line with the upstream: tables, views and sequences
/// that are gone (or whose columns are not what the model thinks, after a
/// step that failed half way) are forgotten, and each table's row ids are
/// read again.
fn resync(up: &PrivateMariaDb, m: &mut Model) -> Result<(), String> {
    let catalog = up.try_exec(&format!(
        "SET SESSION group_concat_max_len = 1000000;
         SELECT 'o', TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{DB}';
         SELECT 'c', TABLE_NAME, GROUP_CONCAT(COLUMN_NAME ORDER BY ORDINAL_POSITION) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '{DB}' GROUP BY TABLE_NAME;"
    ))?;
    let mut kinds = BTreeMap::new();
    let mut columns = BTreeMap::new();
    for row in rows_of(&catalog) {
        match (row.first().map(String::as_str), row.get(1), row.get(2)) {
            (Some("o"), Some(name), Some(kind)) => {
                kinds.insert(name.clone(), kind.clone());
            }
            (Some("c"), Some(name), Some(cols)) => {
                columns.insert(name.clone(), cols.clone());
            }
            _ => {}
        }
    }
    m.tables.retain(|name, t| {
        let names: Vec<&str> = t.columns.iter().map(|c| c.name.as_str()).collect();
        let same = kinds.get(name).map(String::as_str) == Some("BASE TABLE")
            && columns.get(name).map(String::as_str) == Some(names.join(",").as_str());
        if !same {
            eprintln!("model: {name} is not what the model holds; the generator leaves it alone");
        }
        same
    });
    m.views
        .retain(|name, _| kinds.get(name).map(String::as_str) == Some("VIEW"));
    m.sequences
        .retain(|name, _| kinds.get(name).map(String::as_str) == Some("SEQUENCE"));
    if m.tables.is_empty() {
        return Ok(());
    }
    let ids_of = |tables: Vec<&String>| {
        let query = tables
            .iter()
            .map(|t| format!("SELECT '{t}', `id` FROM `{DB}`.`{t}`"))
            .collect::<Vec<_>>()
            .join(" UNION ALL ");
        up.try_exec(&query)
    };
    let ids = match ids_of(m.tables.keys().collect()) {
        Ok(ids) => ids,
        // A table the upstream cannot open (it happens after some DDL):
        // one at a time, leaving out the ones that fail.
        Err(_) => {
            let mut all = String::new();
            let mut unreadable = Vec::new();
            for t in m.tables.keys() {
                match ids_of(vec![t]) {
                    Ok(ids) => all.push_str(&ids),
                    Err(e) => {
                        eprintln!(
                            "model: the upstream cannot read {t}; the generator leaves it alone: {}",
                            error_line(&e)
                        );
                        unreadable.push(t.clone());
                    }
                }
            }
            for t in unreadable {
                m.tables.remove(&t);
            }
            all
        }
    };
    for t in m.tables.values_mut() {
        t.live.clear();
    }
    for row in rows_of(&ids) {
        if let (Some(t), Some(Ok(id))) = (
            row.first().and_then(|t| m.tables.get_mut(t)),
            row.get(1).map(|v| v.parse::<i64>()),
        ) {
            t.live.push(id);
            t.next_id = t.next_id.max(id + 1);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Comparing the downstream with the upstream
// ---------------------------------------------------------------------------

/// An object of the upstream database as its catalog shows it.
struct Object {
    name: String,
    /// `BASE TABLE`, `VIEW` or `SEQUENCE`.
    kind: String,
    /// Its columns' names and data types.
    columns: Vec<(String, String)>,
    has_primary_key: bool,
}

fn upstream_objects(up: &PrivateMariaDb) -> Result<Vec<Object>, String> {
    // Flat queries only: correlated subqueries over information_schema
    // crash MariaDB 10.11.19 now and then (signal 11 in
    // ha_maria::drop_table, from create_tmp_table_for_schema).
    let text = up.try_exec(&format!(
        "SELECT 't', TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{DB}';
         SELECT 'c', TABLE_NAME, COLUMN_NAME, DATA_TYPE, ORDINAL_POSITION FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '{DB}';
         SELECT 'k', TABLE_NAME FROM information_schema.TABLE_CONSTRAINTS WHERE TABLE_SCHEMA = '{DB}' AND CONSTRAINT_TYPE = 'PRIMARY KEY';"
    ))?;
    let mut objects: BTreeMap<String, Object> = BTreeMap::new();
    let mut columns: BTreeMap<String, Vec<(u32, String, String)>> = BTreeMap::new();
    let mut keyed = BTreeSet::new();
    for row in rows_of(&text) {
        match &row[..] {
            [t, name, kind] if t == "t" => {
                objects.insert(
                    name.clone(),
                    Object {
                        name: name.clone(),
                        kind: kind.clone(),
                        columns: Vec::new(),
                        has_primary_key: false,
                    },
                );
            }
            [c, table, name, ty, at] if c == "c" => {
                columns.entry(table.clone()).or_default().push((
                    at.parse().unwrap_or(0),
                    name.clone(),
                    ty.clone(),
                ));
            }
            [k, table] if k == "k" => {
                keyed.insert(table.clone());
            }
            _ => {}
        }
    }
    for (name, o) in &mut objects {
        let mut cols = columns.remove(name).unwrap_or_default();
        cols.sort();
        o.columns = cols.into_iter().map(|(_, n, t)| (n, t)).collect();
        o.has_primary_key = keyed.contains(name);
    }
    Ok(objects.into_values().collect())
}

/// How the inspection reads a column: bytes and bits as hex, the rest as
/// the client prints it.
fn readable(name: &str, data_type: &str) -> String {
    match data_type {
        "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" | "point"
        | "geometry" | "bit" => format!("HEX(`{name}`)"),
        _ => format!("`{name}`"),
    }
}

/// The script both MariaDB sides run: the set of objects, each one's
/// definition (`SHOW CREATE`, without the `AUTO_INCREMENT` counter), the rows
/// of every table and view in a stable order, and each sequence's state.
/// Tables with a primary key are also compared by `sluice diff`.
fn inspection_script(objects: &[Object]) -> String {
    let mut s = format!(
        "SELECT '## objects';\nSELECT TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{DB}' ORDER BY 1;\n"
    );
    for o in objects {
        let what = if o.kind == "VIEW" { "VIEW" } else { "TABLE" };
        let _ = writeln!(
            s,
            "SELECT '## {} definition';\nSHOW CREATE {what} `{DB}`.`{}`;",
            o.name, o.name
        );
        if o.kind == "SEQUENCE" {
            let _ = writeln!(
                s,
                "SELECT '## {} state';\nSELECT * FROM `{DB}`.`{}`;",
                o.name, o.name
            );
        } else {
            let order: Vec<String> = (1..=o.columns.len().max(1))
                .map(|i| i.to_string())
                .collect();
            let exprs: Vec<String> = o.columns.iter().map(|(n, t)| readable(n, t)).collect();
            let _ = writeln!(
                s,
                "SELECT '## {} rows';\nSELECT {} FROM `{DB}`.`{}` ORDER BY {};",
                o.name,
                if exprs.is_empty() {
                    "*".to_string()
                } else {
                    exprs.join(", ")
                },
                o.name,
                order.join(", ")
            );
        }
    }
    s
}

/// `## name` sections of an inspection's output, the counter in
/// `AUTO_INCREMENT=n` left out (it follows failed inserts upstream).
fn sections(out: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    let mut current = String::from("(start)");
    for line in out.lines() {
        if let Some(name) = line.strip_prefix("## ") {
            current = name.to_string();
            map.entry(current.clone()).or_insert_with(String::new);
            continue;
        }
        let entry = map.entry(current.clone()).or_insert_with(String::new);
        entry.push_str(&without_auto_increment(line));
        entry.push('\n');
    }
    map
}

fn without_auto_increment(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find(" AUTO_INCREMENT=") {
        out.push_str(&rest[..at]);
        rest =
            rest[at + " AUTO_INCREMENT=".len()..].trim_start_matches(|c: char| c.is_ascii_digit());
    }
    out.push_str(rest);
    out
}

/// The first line where two sections differ, with both versions.
fn first_difference(name: &str, x: Option<&String>, y: Option<&String>) -> String {
    let (Some(x), Some(y)) = (x, y) else {
        return format!(
            "{name}: upstream {}, downstream {}",
            if x.is_some() { "has it" } else { "has none" },
            if y.is_some() { "has it" } else { "has none" }
        );
    };
    let (a, b): (Vec<&str>, Vec<&str>) = (x.lines().collect(), y.lines().collect());
    let at = (0..a.len().max(b.len()))
        .find(|&i| a.get(i) != b.get(i))
        .unwrap_or(0);
    format!(
        "{name} (line {} of {} upstream, {} downstream):\n  upstream:   {}\n  downstream: {}",
        at + 1,
        a.len(),
        b.len(),
        shorten(a.get(at).unwrap_or(&"(none)"), 600),
        shorten(b.get(at).unwrap_or(&"(none)"), 600)
    )
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let cut: String = s.chars().take(max).collect();
    format!("{cut} … ({} chars)", s.chars().count())
}

/// `sluice diff` of `tables`: whether they are equal, and what it printed
/// of those that differ. A table `sluice diff` cannot compare (it fails on
/// it, rather than finding a difference) is left out and its error added to
/// `unreadable`; the caller compares its rows another way.
fn sluice_diff(
    source: &str,
    target: &str,
    tables: &[String],
    unreadable: &mut BTreeMap<String, String>,
) -> (bool, String) {
    let run = |tables: &[String]| {
        let names: Vec<String> = tables.iter().map(|t| format!("{DB}.{t}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let out = common::sluice_diff_run(source, target, &names, 1000);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        // It stops at a table it cannot read: no line for it.
        let failed = !out.status.success() && stdout.lines().count() < tables.len();
        (out.status.success(), failed, stdout, stderr)
    };
    if tables.is_empty() {
        return (true, String::new());
    }
    let (ok, failed, stdout, stderr) = run(tables);
    if !failed {
        let differing: Vec<&str> = stdout
            .lines()
            .filter(|l| !l.contains(": equal ("))
            .collect();
        return (ok, format!("{}\n{stderr}", differing.join("\n")));
    }
    // One table at a time, to leave out the ones it cannot read.
    let mut equal = true;
    let mut text = String::new();
    for t in tables {
        let (ok, failed, stdout, stderr) = run(std::slice::from_ref(t));
        if failed {
            unreadable.insert(t.clone(), stderr.trim().to_string());
            continue;
        }
        if !ok {
            equal = false;
            text.push_str(&stdout);
            text.push_str(&stderr);
        }
    }
    (equal, text)
}

/// Whether the MariaDB downstream equals the upstream; what differs if not.
fn compare_mariadb(
    up: &PrivateMariaDb,
    down: &PrivateMariaDb,
    unreadable: &mut BTreeMap<String, String>,
) -> Result<(), String> {
    let objects = upstream_objects(up)?;
    let script = inspection_script(&objects);
    let (up_out, up_err) = up.script(&script);
    let (down_out, down_err) = down.script(&script);
    let mut why = Vec::new();
    let (a, b) = (sections(&up_out), sections(&down_out));
    for name in a.keys().chain(b.keys()).collect::<BTreeSet<_>>() {
        let (x, y) = (a.get(name), b.get(name));
        if x != y && !(name.ends_with(" state") && sequence_behind(x, y)) {
            why.push(first_difference(name, x, y));
        }
    }
    if up_err != down_err {
        why.push(format!(
            "errors reading the objects:\n  upstream:   {}\n  downstream: {}",
            shorten(up_err.trim_end(), 1000),
            shorten(down_err.trim_end(), 1000)
        ));
    }
    let keyed: Vec<String> = objects
        .iter()
        .filter(|o| o.kind == "BASE TABLE" && o.has_primary_key)
        .map(|o| o.name.clone())
        .collect();
    let (equal, text) = sluice_diff(&up.root_url(), &down.root_url(), &keyed, unreadable);
    if !equal {
        why.push(format!("sluice diff:\n{}", shorten(&text, 4000)));
    }
    if why.is_empty() {
        Ok(())
    } else {
        why.truncate(8);
        Err(why.join("\n"))
    }
}

/// Whether a sequence's state downstream (`y`) differs from the upstream's
/// (`x`) only by a `next_not_cached_value` behind it: MariaDB 10.11 does
/// not write every reservation of values to the binlog (a `DEFAULT NEXT
/// VALUE FOR` column filled in a multi-statement transaction that runs past
/// the cache), so a replica is left with the last reservation the binlog
/// holds (docs/sources/mysql.md, sequences).
fn sequence_behind(x: Option<&String>, y: Option<&String>) -> bool {
    let (Some(x), Some(y)) = (x, y) else {
        return false;
    };
    let split = |s: &str| -> Vec<String> { s.trim().split('\t').map(str::to_string).collect() };
    let (x, y) = (split(x), split(y));
    let number = |v: &[String]| v.first().and_then(|n| n.parse::<i128>().ok());
    x.len() == y.len()
        && x[1..] == y[1..]
        && matches!((number(&x), number(&y)), (Some(up), Some(down)) if down <= up)
}

/// Whether PostgreSQL holds what sink-postgres promises: a table for every
/// upstream table that has rows (none for tables upstream no longer has),
/// each equal by `sluice diff` across engines.
fn compare_postgres(
    up: &PrivateMariaDb,
    pg: &PrivatePostgres,
    unreadable: &mut BTreeMap<String, String>,
) -> Result<(), String> {
    let objects = upstream_objects(up)?;
    let tables: Vec<&Object> = objects.iter().filter(|o| o.kind == "BASE TABLE").collect();
    let mut counts = BTreeMap::new();
    if !tables.is_empty() {
        let query = tables
            .iter()
            .map(|t| format!("SELECT '{0}', COUNT(*) FROM `{DB}`.`{0}`", t.name))
            .collect::<Vec<_>>()
            .join(" UNION ALL ");
        for row in rows_of(&up.try_exec(&query)?) {
            if let [name, n] = &row[..] {
                counts.insert(name.clone(), n.parse::<u64>().unwrap_or(0));
            }
        }
    }
    let listed = pg.try_exec(&format!(
        "\\c replica\nSELECT table_name FROM information_schema.tables WHERE table_schema = '{DB}' ORDER BY 1;"
    ))?;
    let in_pg: BTreeSet<String> = listed
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("You are now connected"))
        .map(str::to_string)
        .collect();
    let mut why = Vec::new();
    let extra: Vec<&String> = in_pg.iter().filter(|t| !counts.contains_key(*t)).collect();
    if !extra.is_empty() {
        why.push(format!(
            "PostgreSQL has tables the upstream has not: {extra:?}"
        ));
    }
    let missing: Vec<&String> = counts
        .iter()
        .filter(|(t, n)| **n > 0 && !in_pg.contains(*t))
        .map(|(t, _)| t)
        .collect();
    if !missing.is_empty() {
        why.push(format!(
            "tables with rows upstream missing in PostgreSQL: {missing:?}"
        ));
    }
    let both: Vec<String> = tables
        .iter()
        .filter(|t| in_pg.contains(&t.name) && t.has_primary_key)
        .map(|t| t.name.clone())
        .collect();
    let pg_url = pg.url("postgres", Some(ROOT_PASSWORD), "replica");
    let (equal, text) = sluice_diff(&up.root_url(), &pg_url, &both, unreadable);
    if !equal {
        why.push(format!("sluice diff:\n{}", shorten(&text, 4000)));
    }
    if why.is_empty() {
        Ok(())
    } else {
        Err(why.join("\n"))
    }
}

// ---------------------------------------------------------------------------
// The servers
// ---------------------------------------------------------------------------

/// Where the changefeed writes.
enum Downstream {
    Mariadb(PrivateMariaDb),
    Postgres(PrivatePostgres),
}

/// An upstream MariaDB, a downstream, and `sluice server` running the
/// changefeed [`FEED`] from one to the other.
struct World {
    up: PrivateMariaDb,
    down: Downstream,
    server: Server,
    /// Tables `sluice diff` could not compare, with its error (their rows
    /// are compared by the inspection script; for PostgreSQL not at all).
    unreadable: std::cell::RefCell<BTreeMap<String, String>>,
    /// The server's data, the changefeed file, the servers' tmpdirs.
    dir: tempfile::TempDir,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl World {
    fn start(postgres: bool) -> World {
        let dir = tempfile::tempdir().expect("a temporary directory");
        // Each server gets its own tmpdir: in the shared /tmp, MariaDB's
        // internal temporary tables (information_schema queries, sink-mysql's
        // catalog reads) fail now and then ("Error on delete of
        // '/tmp/#sql-temptable-...MAI'") and 10.11.19 sometimes crashes
        // cleaning up after that (signal 11 in ha_maria::drop_table).
        let server_tmp = |name: &str| {
            let path = dir.path().join(name);
            std::fs::create_dir_all(&path)
                .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
            format!("--tmpdir={}", path.display())
        };
        let up = PrivateMariaDb::start_with(&[&server_tmp("up-tmp")]);
        up.exec("CREATE USER 'repl'@'%' IDENTIFIED BY 'Repl-Pw1'; GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO 'repl'@'%'");
        let (down, plugin, target) = if postgres {
            let pg = PrivatePostgres::start();
            pg.exec("CREATE USER writer PASSWORD 'Pg-Writer-Pw3'; CREATE DATABASE replica OWNER writer;");
            let url = pg.url("writer", Some("Pg-Writer-Pw3"), "replica");
            (Downstream::Postgres(pg), "sink-postgres", url)
        } else {
            // SLUICE_SCHEMA_GENERAL_LOG=1: the statements the sink ran, kept
            // beside the journal when the test fails.
            let general_log = dir.path().join("down-general.log");
            let mut options = vec![server_tmp("down-tmp")];
            if std::env::var_os("SLUICE_SCHEMA_GENERAL_LOG").is_some() {
                options.push("--general-log=1".into());
                options.push(format!("--general-log-file={}", general_log.display()));
            }
            let options: Vec<&str> = options.iter().map(String::as_str).collect();
            let down = PrivateMariaDb::start_with(&options);
            down.exec(
                "CREATE USER 'writer'@'%' IDENTIFIED BY 'Writer-Pw2'; GRANT ALL ON *.* TO 'writer'@'%'",
            );
            let url = down.url("writer", "Writer-Pw2");
            (Downstream::Mariadb(down), "sink-mysql", url)
        };
        let server = Server::start(&dir.path().join("server"), &[]);
        server.upload(plugin, "sink");
        let config = common::write_file(
            dir.path(),
            FEED,
            &common::sql_changefeed(
                plugin,
                &up.url("repl", "Repl-Pw1"),
                &target,
                "max-txn-row = 64",
                "[pipeline]\nflush-interval-ms = 100",
            ),
        );
        server.create(FEED, &config);
        // The changefeed reads from where the binlog is now: wait until it
        // runs before the database is made.
        let checkpoint = || {
            server.state(FEED)["status"]["checkpoint-ts"]
                .as_u64()
                .unwrap_or(0)
        };
        let first = checkpoint();
        server.wait_for("the changefeed to run", Duration::from_secs(60), || {
            checkpoint() > first
        });
        World {
            up,
            down,
            server,
            unreadable: Default::default(),
            dir,
        }
    }

    /// The changefeed's state, error and warnings, as `changefeed query`
    /// shows them.
    fn feed_report(&self) -> String {
        let q = self.server.state(FEED);
        let s = &q["status"];
        format!(
            "state {}, checkpoint {}, failure {}\n  errors: {}\n  warnings: {}",
            q["state"], s["checkpoint-time"], s["failure"], s["errors"], s["warnings"]
        )
    }

    /// Waits until the changefeed has applied everything committed upstream
    /// before `since_ms` and the downstream equals the upstream (bounded by
    /// [`CATCH_UP`]); what differs, or why it did not catch up, if not.
    fn check(&self) -> Result<Duration, String> {
        let since_ms = now_ms();
        let started = Instant::now();
        loop {
            let q = self.server.state(FEED);
            let checkpoint_ms = q["status"]["checkpoint-ts"].as_u64().unwrap_or(0) >> 18;
            if q["state"] == "failed" {
                return Err(format!("the changefeed failed: {}", self.feed_report()));
            }
            if checkpoint_ms >= since_ms {
                break;
            }
            if started.elapsed() > CATCH_UP {
                let diff = self.compare().err().unwrap_or_default();
                return Err(format!(
                    "the changefeed did not catch up within {CATCH_UP:?}: {}\n{diff}",
                    self.feed_report()
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        // Caught up: the downstream must be equal now (a few tries, for a
        // status saved a moment late).
        let mut last = String::new();
        for _ in 0..3 {
            match self.compare() {
                Ok(()) => return Ok(started.elapsed()),
                Err(why) => last = why,
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        Err(last)
    }

    /// The last lines of the servers' logs (a crash shows there).
    fn server_logs(&self) -> String {
        let tail = |log: String| {
            let lines: Vec<&str> = log.lines().collect();
            // A crash report (mariadbd's "got signal"): from its start.
            let from = lines
                .iter()
                .rposition(|l| l.contains("got signal"))
                .unwrap_or(lines.len().saturating_sub(12));
            lines[from..]
                .iter()
                .take(60)
                .copied()
                .collect::<Vec<_>>()
                .join("\n    ")
        };
        let down = match &self.down {
            Downstream::Mariadb(down) => down.error_log(),
            Downstream::Postgres(pg) => pg.server_log(),
        };
        format!(
            "upstream:\n    {}\n  downstream:\n    {}",
            tail(self.up.error_log()),
            tail(down)
        )
    }

    /// Copies both servers' whole logs next to `journal` (the temporary
    /// directories go with the test); the paths.
    fn keep_logs(&self, journal: &Path) -> String {
        let down = match &self.down {
            Downstream::Mariadb(down) => down.error_log(),
            Downstream::Postgres(pg) => pg.server_log(),
        };
        let mut kept = Vec::new();
        let general = std::fs::read_to_string(self.dir.path().join("down-general.log"));
        let mut logs = vec![
            ("upstream", self.up.error_log()),
            ("upstream-binlog", self.up.binlog_text()),
            ("downstream", down),
        ];
        if let Ok(general) = general {
            logs.push(("downstream-statements", general));
        }
        for (side, log) in logs {
            let path = journal.with_extension(format!("{side}.log"));
            if std::fs::write(&path, log).is_ok() {
                kept.push(path.display().to_string());
            }
        }
        kept.join(", ")
    }

    fn compare(&self) -> Result<(), String> {
        let mut unreadable = self.unreadable.borrow_mut();
        match &self.down {
            Downstream::Mariadb(down) => compare_mariadb(&self.up, down, &mut unreadable),
            Downstream::Postgres(pg) => compare_postgres(&self.up, pg, &mut unreadable),
        }
    }
}

// ---------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------

/// Counts of one kind of step.
#[derive(Default)]
struct Counts {
    ok: usize,
    failed: usize,
}

/// Runs the generator (or a replay file) against a fresh world, checking
/// the downstream after every [`BATCH`] steps; panics with a report at the
/// first difference.
fn evolve(test: &str, postgres: bool, profile: Profile) {
    let settings = Settings::from_env();
    println!(
        "{test}: seed={} steps={}{}",
        settings.seed,
        settings.steps,
        settings
            .replay
            .as_ref()
            .map(|p| format!(" replay={}", p.display()))
            .unwrap_or_default()
    );
    let world = World::start(postgres);
    let run = match &settings.replay {
        Some(p) => format!(
            "replay-{}",
            p.file_stem().and_then(|s| s.to_str()).unwrap_or("file")
        ),
        None => format!("seed-{}", settings.seed),
    };
    let mut journal = Journal::open(test, &run);
    let mut generator = Generator::new(settings.seed, profile);
    let mut model = Model::default();
    let replay = settings.replay.as_deref().map(replay_steps);
    let total = replay.as_ref().map_or(settings.steps, Vec::len);
    let create = format!("CREATE DATABASE `{DB}` CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci");
    world.up.exec(&create);
    journal.record(0, Kind::CreateTable, &create, &Ok(String::new()));
    let started = Instant::now();
    let mut counts: BTreeMap<Kind, Counts> = BTreeMap::new();
    let mut n = 0;
    while n < total {
        let first = n + 1;
        while n < total && n + 1 < first + BATCH {
            n += 1;
            let (kind, sql, after, mut again) = match &replay {
                Some(steps) => (Kind::Replay, steps[n - 1].clone(), None, false),
                None => {
                    let s = generator.step(&model);
                    (s.kind, s.sql, Some(s.after), s.resync)
                }
            };
            let outcome = world.up.try_exec(&sql);
            journal.record(n, kind, &sql, &outcome);
            let c = counts.entry(kind).or_default();
            match outcome {
                Ok(_) => {
                    c.ok += 1;
                    if let Some(after) = after {
                        model = after;
                    }
                }
                Err(e) => {
                    c.failed += 1;
                    again = true;
                    eprintln!(
                        "step {n} ({kind:?}) failed upstream, skipped: {}",
                        error_line(&e)
                    );
                    // Names and unique values stay used: a step that failed
                    // half way may have made some.
                    if let Some(after) = &after {
                        model.names = after.names;
                        model.unique = after.unique;
                    }
                }
            }
            if again && replay.is_none() {
                resync(&world.up, &mut model)
                    .unwrap_or_else(|e| panic!("reading the upstream back failed: {e}"));
            }
        }
        if replay.is_none() {
            resync(&world.up, &mut model)
                .unwrap_or_else(|e| panic!("reading the upstream back failed: {e}"));
        }
        match world.check() {
            Ok(took) => println!(
                "{test}: steps {first}..={n} applied and equal downstream {took:.1?} after the batch ({:.0?} in all; {} tables, {} views, {} sequences)",
                started.elapsed(),
                model.tables.len(),
                model.views.len(),
                model.sequences.len()
            ),
            Err(why) => panic!(
                "\n{test}: the downstream does not equal the upstream after steps {first}..={n}\n\
                 seed={seed} steps={steps}; failing batch: steps {first}..={n}\n\
                 run it again: SLUICE_SCHEMA_SEED={seed} SLUICE_SCHEMA_STEPS={n} cargo xtask schema-evolution\n\
                 every statement run: {journal}\n\
                 changefeed: {feed}\n\
                 server logs (last lines; whole in {kept}): {logs}\n\
                 what differs:\n{why}\n\
                 last statements:\n{tail}\n",
                seed = settings.seed,
                steps = settings.steps,
                journal = journal.path.display(),
                feed = world.feed_report(),
                logs = world.server_logs(),
                kept = world.keep_logs(&journal.path),
                tail = journal.tail(),
            ),
        }
    }
    let failed: usize = counts.values().map(|c| c.failed).sum();
    let mut by_class: BTreeMap<Class, (usize, usize)> = BTreeMap::new();
    for (kind, c) in &counts {
        let e = by_class.entry(kind.class()).or_default();
        e.0 += c.ok;
        e.1 += c.failed;
    }
    println!(
        "{test}: {total} steps in {:.0?}, {failed} failed upstream and were skipped; by class (ok/skipped): {}",
        started.elapsed(),
        by_class
            .iter()
            .map(|(c, (ok, f))| format!("{c:?} {ok}/{f}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (table, error) in world.unreadable.borrow().iter() {
        println!("{test}: sluice diff could not compare {DB}.{table}: {error}");
    }
    assert!(
        world.unreadable.borrow().is_empty(),
        "sluice diff could not compare every table (above)"
    );
    if replay.is_none() {
        assert!(
            failed * 100 <= total * MAX_SKIPPED_PERCENT,
            "{failed} of {total} steps failed upstream: the generator's model drifted from the upstream (see {})",
            journal.path.display()
        );
    }
}

/// MariaDB → sink-mysql → MariaDB with every class the generator knows
/// (less [`SKIP`]): after every batch, every table, view and sequence is the
/// same downstream.
#[test]
fn random_schema_evolution_keeps_a_mariadb_replica_equal() {
    evolve(
        "mariadb",
        false,
        Profile {
            kinds: None,
            skip: SKIP.to_vec(),
        },
    );
}

/// MariaDB → sink-postgres → PostgreSQL with the kinds sink-postgres
/// replays ([`POSTGRES_KINDS`]): after every batch, every table with rows is
/// in PostgreSQL and equal by `sluice diff` across engines.
#[test]
fn random_schema_evolution_keeps_a_postgres_copy_equal() {
    evolve(
        "postgres",
        true,
        Profile {
            kinds: Some(POSTGRES_KINDS),
            skip: SKIP.iter().chain(POSTGRES_SKIP).copied().collect(),
        },
    );
}
