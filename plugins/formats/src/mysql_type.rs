//! A column's MySQL type, read from the schema's SQL type (or derived from the
//! column type when the schema has none), and what each format makes of it:
//! canal-json's `mysqlType` and `sqlType`, the Debezium field schema, the number
//! of fractional second digits written for datetimes.

use sluice_sdk::{Column, ColumnType, Value};

/// The MySQL type family of a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Base {
    Tinyint,
    Smallint,
    Mediumint,
    Int,
    Bigint,
    Float,
    Double,
    Decimal,
    Char,
    Varchar,
    Binary,
    Varbinary,
    /// `tinytext`, `text`, `mediumtext`, `longtext`.
    Text,
    /// `tinyblob`, `blob`, `mediumblob`, `longblob`.
    Blob,
    Date,
    Datetime,
    Timestamp,
    Time,
    Year,
    Enum,
    Set,
    Bit,
    Json,
    /// A type this table does not know; written as given.
    Other,
}

/// A column's MySQL type without its parameters, as TiCDC's `mysqlType` gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MySqlType {
    /// The lowercase type name, e.g. `int`, `varchar`, `mediumtext`.
    pub name: String,
    pub base: Base,
    pub unsigned: bool,
    pub zerofill: bool,
    /// The first type parameter (display width, length, precision or fsp).
    pub param: Option<u32>,
}

impl MySqlType {
    /// Read `column.sql_type` (e.g. `decimal(6,2) unsigned`); when it is empty,
    /// derive the type from the column type.
    pub fn of(column: &Column) -> Self {
        let sql = column.sql_type.trim();
        if sql.is_empty() {
            Self::from_column_type(column.ty)
        } else {
            Self::parse(sql)
        }
    }

    /// The type a column of `ty` stands for when the schema gives no SQL type.
    pub fn from_column_type(ty: ColumnType) -> Self {
        let (name, base, unsigned, param) = match ty {
            ColumnType::Int => ("bigint", Base::Bigint, false, None),
            ColumnType::Uint => ("bigint", Base::Bigint, true, None),
            ColumnType::Float => ("double", Base::Double, false, None),
            ColumnType::Decimal => ("decimal", Base::Decimal, false, None),
            ColumnType::Text => ("text", Base::Text, false, None),
            ColumnType::Blob => ("blob", Base::Blob, false, None),
            // The fsp is unknown: keep every digit the value has.
            ColumnType::Datetime => ("datetime", Base::Datetime, false, Some(6)),
            ColumnType::Date => ("date", Base::Date, false, None),
            ColumnType::Json => ("json", Base::Json, false, None),
            // MySQL's BOOLEAN is TINYINT(1).
            ColumnType::Boolean => ("tinyint", Base::Tinyint, false, Some(1)),
        };
        Self {
            name: name.to_string(),
            base,
            unsigned,
            zerofill: false,
            param,
        }
    }

    /// Parse a MySQL column type such as `int(11) unsigned`, `varchar(64)`,
    /// `enum('a','b')`, `double precision` or `boolean`.
    pub fn parse(sql: &str) -> Self {
        let sql = sql.to_ascii_lowercase();
        let word_end = sql
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(sql.len());
        let mut word = &sql[..word_end];
        let mut rest = sql[word_end..].trim_start();
        if matches!(word, "char" | "character" | "nchar") && rest.starts_with("varying") {
            word = "varchar";
            rest = rest["varying".len()..].trim_start();
        }
        let mut param = None;
        if rest.starts_with('(') {
            let close = closing_paren(rest);
            let inside = &rest[1..close.saturating_sub(1).max(1)];
            param = inside
                .split(',')
                .next()
                .and_then(|p| p.trim().parse::<u32>().ok());
            rest = &rest[close..];
        }
        let words: Vec<&str> = rest.split_whitespace().collect();
        let has = |w: &str| words.contains(&w);
        let (name, base) = match word {
            "tinyint" | "int1" => ("tinyint", Base::Tinyint),
            "bool" | "boolean" => {
                param = Some(1);
                ("tinyint", Base::Tinyint)
            }
            "smallint" | "int2" => ("smallint", Base::Smallint),
            "mediumint" | "int3" | "middleint" => ("mediumint", Base::Mediumint),
            "int" | "integer" | "int4" => ("int", Base::Int),
            "bigint" | "int8" | "serial" => ("bigint", Base::Bigint),
            "float" | "float4" => ("float", Base::Float),
            "double" | "float8" | "real" => ("double", Base::Double),
            "decimal" | "dec" | "numeric" | "fixed" => ("decimal", Base::Decimal),
            "char" | "character" | "nchar" => ("char", Base::Char),
            "varchar" | "nvarchar" | "varcharacter" => ("varchar", Base::Varchar),
            "binary" => ("binary", Base::Binary),
            "varbinary" => ("varbinary", Base::Varbinary),
            "tinytext" => ("tinytext", Base::Text),
            "text" => ("text", Base::Text),
            "mediumtext" => ("mediumtext", Base::Text),
            "longtext" => ("longtext", Base::Text),
            "tinyblob" => ("tinyblob", Base::Blob),
            "blob" => ("blob", Base::Blob),
            "mediumblob" => ("mediumblob", Base::Blob),
            "longblob" => ("longblob", Base::Blob),
            "date" => ("date", Base::Date),
            "datetime" => ("datetime", Base::Datetime),
            "timestamp" => ("timestamp", Base::Timestamp),
            "time" => ("time", Base::Time),
            "year" => ("year", Base::Year),
            "enum" => ("enum", Base::Enum),
            "set" => ("set", Base::Set),
            "bit" => ("bit", Base::Bit),
            "json" => ("json", Base::Json),
            other => (other, Base::Other),
        };
        Self {
            name: name.to_string(),
            base,
            unsigned: has("unsigned") || word == "serial",
            zerofill: has("zerofill"),
            param,
        }
    }

    /// canal-json's `mysqlType`: the name without parameters, then ` unsigned`
    /// and ` zerofill` where they apply, e.g. `decimal`, `int unsigned`.
    pub fn canal_name(&self) -> String {
        let mut name = self.name.clone();
        let numeric_flags = !matches!(self.base, Base::Bit | Base::Year);
        if self.unsigned && numeric_flags {
            name.push_str(" unsigned");
        }
        if self.zerofill && numeric_flags {
            name.push_str(" zerofill");
        }
        name
    }

    /// canal-json's `sqlType`: the `java.sql.Types` code of the type.
    pub fn java_type(&self) -> i32 {
        match self.base {
            Base::Tinyint => -6,
            Base::Smallint => 5,
            Base::Mediumint | Base::Int | Base::Enum => 4,
            Base::Bigint => -5,
            Base::Float => 7,
            Base::Double => 8,
            Base::Decimal => 3,
            Base::Char => 1,
            Base::Varchar | Base::Year | Base::Json | Base::Other => 12,
            Base::Binary | Base::Varbinary | Base::Blob => 2004,
            Base::Text => 2005,
            Base::Date => 91,
            Base::Time => 92,
            Base::Datetime | Base::Timestamp => 93,
            Base::Set | Base::Bit => -7,
        }
    }

    /// For an unsigned integer type: the largest value that keeps
    /// [`MySqlType::java_type`], and the wider code a larger value gets (as Canal
    /// does: `tinyint unsigned` 200 is a SMALLINT).
    pub fn java_promotion(&self) -> Option<(u64, i32)> {
        if !self.unsigned {
            return None;
        }
        match self.base {
            Base::Tinyint => Some((i8::MAX as u64, 5)),
            Base::Smallint => Some((i16::MAX as u64, 4)),
            Base::Int => Some((i32::MAX as u64, -5)),
            Base::Bigint => Some((i64::MAX as u64, 3)),
            _ => None,
        }
    }

    /// The `sqlType` code for one value of the column.
    pub fn java_type_of(&self, value: Value<'_>) -> i32 {
        match (self.java_promotion(), value) {
            (Some((max, wider)), Value::UInt(v)) if v > max => wider,
            (Some((max, wider)), Value::Int(v)) if v > 0 && v as u64 > max => wider,
            _ => self.java_type(),
        }
    }

    /// Fractional second digits of a datetime or timestamp (its fsp, 0 to 6).
    pub fn fsp(&self) -> u8 {
        self.param.unwrap_or(0).min(6) as u8
    }

    /// Whether values are single-precision floats (MySQL `FLOAT`).
    pub fn is_float32(&self) -> bool {
        self.base == Base::Float
    }

    /// The Debezium (Kafka Connect) schema of the column: type and logical name.
    pub fn debezium_type(&self) -> (&'static str, Option<&'static str>) {
        match self.base {
            Base::Tinyint => ("int16", None),
            Base::Smallint if self.unsigned => ("int32", None),
            Base::Smallint => ("int16", None),
            Base::Mediumint => ("int32", None),
            Base::Int if self.unsigned => ("int64", None),
            Base::Int => ("int32", None),
            Base::Bigint => ("int64", None),
            Base::Year => ("int32", Some("io.debezium.time.Year")),
            Base::Bit if self.param.unwrap_or(1) == 1 => ("boolean", None),
            Base::Bit => ("int64", None),
            Base::Float => ("float", None),
            Base::Double | Base::Decimal => ("double", None),
            Base::Binary | Base::Varbinary | Base::Blob => ("bytes", None),
            Base::Date => ("int32", Some("io.debezium.time.Date")),
            Base::Datetime if self.fsp() <= 3 => ("int64", Some("io.debezium.time.Timestamp")),
            Base::Datetime => ("int64", Some("io.debezium.time.MicroTimestamp")),
            Base::Timestamp => ("string", Some("io.debezium.time.ZonedTimestamp")),
            Base::Json => ("string", Some("io.debezium.data.Json")),
            Base::Char
            | Base::Varchar
            | Base::Text
            | Base::Time
            | Base::Enum
            | Base::Set
            | Base::Other => ("string", None),
        }
    }
}

/// The index just past the `)` closing the `(` at the start of `s` (quotes in
/// `enum('a)','b')` respected), or `s.len()` when it is not closed.
fn closing_paren(s: &str) -> usize {
    let mut quote = None;
    for (i, c) in s.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, ')') => return i + 1,
            _ => {}
        }
    }
    s.len()
}

#[cfg(test)]
mod tests {
    use super::{Base, MySqlType};

    #[test]
    fn parses_names_parameters_and_flags() {
        let t = MySqlType::parse("DECIMAL(6,2) UNSIGNED ZEROFILL");
        assert_eq!(
            (t.base, t.param, t.unsigned, t.zerofill),
            (Base::Decimal, Some(6), true, true)
        );
        assert_eq!(t.canal_name(), "decimal unsigned zerofill");
        assert_eq!(MySqlType::parse("int(11)").canal_name(), "int");
        assert_eq!(MySqlType::parse("varchar(64)").canal_name(), "varchar");
        assert_eq!(MySqlType::parse("boolean").canal_name(), "tinyint");
        assert_eq!(MySqlType::parse("tinyint(1)").param, Some(1));
        assert_eq!(MySqlType::parse("double precision").canal_name(), "double");
        assert_eq!(
            MySqlType::parse("character varying(9)").canal_name(),
            "varchar"
        );
        assert_eq!(MySqlType::parse("serial").canal_name(), "bigint unsigned");
        assert_eq!(MySqlType::parse("year(4) unsigned").canal_name(), "year");
        let e = MySqlType::parse("enum('a)','b') character set utf8mb4");
        assert_eq!((e.base, e.canal_name().as_str()), (Base::Enum, "enum"));
        assert_eq!(MySqlType::parse("datetime(3)").fsp(), 3);
        assert_eq!(MySqlType::parse("datetime").fsp(), 0);
        assert_eq!(MySqlType::parse("geometry").canal_name(), "geometry");
        assert_eq!(MySqlType::parse("geometry").java_type(), 12);
    }

    #[test]
    fn unsigned_integers_widen_their_java_type_above_the_signed_range() {
        use sluice_sdk::Value;
        let tiny = MySqlType::parse("tinyint unsigned");
        assert_eq!(tiny.java_type_of(Value::UInt(127)), -6);
        assert_eq!(tiny.java_type_of(Value::UInt(128)), 5);
        let big = MySqlType::parse("bigint unsigned");
        assert_eq!(big.java_type_of(Value::UInt(i64::MAX as u64)), -5);
        assert_eq!(big.java_type_of(Value::UInt(u64::MAX)), 3);
        assert_eq!(big.java_type_of(Value::Null), -5);
        let int = MySqlType::parse("int unsigned");
        assert_eq!(int.java_type_of(Value::UInt(1 << 31)), -5);
        assert_eq!(
            MySqlType::parse("int").java_type_of(Value::Int(i64::MAX)),
            4
        );
    }
}
