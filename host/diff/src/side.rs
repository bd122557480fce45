//! One side of a comparison: a MySQL-compatible database (mysql_async) or a
//! PostgreSQL database (tokio-postgres), and the few queries diff needs,
//! spelled for each.

use mysql_async::prelude::Queryable;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

use crate::DiffError;

/// Which kind of database a side is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// MySQL, MariaDB, TiDB.
    Mysql,
    /// PostgreSQL.
    Postgres,
}

/// How a column's values are read and compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Whole numbers (keys are bound as numbers).
    Integer,
    /// Floating point: compared with a relative tolerance across engines.
    Float,
    /// Bytes: read as lower-case hex.
    Binary,
    /// MySQL BIT: read as a number.
    Bit,
    /// PostgreSQL boolean: read as 0 / 1.
    Bool,
    /// Anything else: read as text.
    Text,
}

/// A column: its name and kind on one side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub kind: Kind,
}

/// A key value carried from the side that cut the chunks to both sides.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyValue {
    Int(i64),
    UInt(u64),
    Text(String),
    Bytes(Vec<u8>),
}

/// Rows above `lower` (exclusive) and up to `upper` (inclusive) along the
/// key; none means unbounded.
#[derive(Debug, Clone, Default)]
pub struct Chunk {
    pub lower: Option<Vec<KeyValue>>,
    pub upper: Option<Vec<KeyValue>>,
}

enum Conn {
    Mysql(mysql_async::Conn),
    Postgres(tokio_postgres::Client),
}

/// A connected side.
pub struct Side {
    /// `source` or `target`.
    pub name: &'static str,
    conn: Conn,
}

fn mysql_error(side: &'static str, e: mysql_async::Error) -> DiffError {
    DiffError::Database {
        side,
        message: match e {
            mysql_async::Error::Url(_) => "the URL is not valid".into(),
            other => other.to_string(),
        },
    }
}

fn pg_error(side: &'static str, e: tokio_postgres::Error) -> DiffError {
    let message = match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => sluice_pgconn::error_text(&e),
    };
    DiffError::Database { side, message }
}

/// A text-format parameter of any type (bytes: binary), typed by the server.
#[derive(Debug)]
struct PgParam<'a>(&'a KeyValue);

impl ToSql for PgParam<'_> {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        use bytes::BufMut;
        match self.0 {
            KeyValue::Int(i) => out.put_slice(i.to_string().as_bytes()),
            KeyValue::UInt(u) => out.put_slice(u.to_string().as_bytes()),
            KeyValue::Text(t) => out.put_slice(t.as_bytes()),
            KeyValue::Bytes(b) => out.put_slice(b),
        }
        Ok(IsNull::No)
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    fn encode_format(&self, _ty: &Type) -> tokio_postgres::types::Format {
        match self.0 {
            KeyValue::Bytes(_) => tokio_postgres::types::Format::Binary,
            _ => tokio_postgres::types::Format::Text,
        }
    }

    to_sql_checked!();
}

/// Parameters with no declared type: the server infers them.
fn unspecified() -> Type {
    Type::new(
        "unspecified".into(),
        0,
        tokio_postgres::types::Kind::Simple,
        String::new(),
    )
}

impl Side {
    /// Connects to `url` (`mysql://...` or `postgres://...`).
    pub async fn connect(name: &'static str, url: &str) -> Result<Side, DiffError> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let (config, tls) = sluice_pgconn::settings(url).map_err(|e| {
                DiffError::Invalid(format!(
                    "--{name} is not a postgres://user:password@host:port/database URL: {e}"
                ))
            })?;
            let (client, connection) = config.connect(tls).await.map_err(|e| pg_error(name, e))?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!("diff connection ended: {e}");
                }
            });
            // Instants in UTC, as MySQL sides are read.
            client
                .batch_execute("SET TIME ZONE 'UTC'; SET DateStyle = 'ISO'")
                .await
                .map_err(|e| pg_error(name, e))?;
            return Ok(Side {
                name,
                conn: Conn::Postgres(client),
            });
        }
        let opts = mysql_async::Opts::from_url(url).map_err(|_| {
            DiffError::Invalid(format!(
                "--{name} is not a mysql://user:password@host:port/ or postgres://user:password@host:port/database URL"
            ))
        })?;
        let mut conn = mysql_async::Conn::new(opts)
            .await
            .map_err(|e| mysql_error(name, e))?;
        conn.query_drop("SET time_zone = '+00:00'")
            .await
            .map_err(|e| mysql_error(name, e))?;
        Ok(Side {
            name,
            conn: Conn::Mysql(conn),
        })
    }

    /// Which kind of database it is.
    pub fn engine(&self) -> Engine {
        match self.conn {
            Conn::Mysql(_) => Engine::Mysql,
            Conn::Postgres(_) => Engine::Postgres,
        }
    }

    fn ident(&self, name: &str) -> String {
        match self.engine() {
            Engine::Mysql => format!("`{}`", name.replace('`', "``")),
            Engine::Postgres => format!("\"{}\"", name.replace('"', "\"\"")),
        }
    }

    /// `schema.table`, quoted.
    pub fn table(&self, schema: &str, table: &str) -> String {
        format!("{}.{}", self.ident(schema), self.ident(table))
    }

    fn placeholder(&self, n: usize) -> String {
        match self.engine() {
            Engine::Mysql => "?".into(),
            Engine::Postgres => format!("${n}"),
        }
    }

    /// The table's columns (in order) and primary key columns (in key
    /// order); no columns when it does not exist.
    pub async fn layout(
        &mut self,
        schema: &str,
        table: &str,
    ) -> Result<(Vec<Column>, Vec<String>), DiffError> {
        let name = self.name;
        let (columns, key): (Vec<(String, String)>, Vec<String>) = match &mut self.conn {
            Conn::Mysql(conn) => {
                let columns: Vec<(String, String)> = conn
                    .exec(
                        "SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS \
                         WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
                        (schema, table),
                    )
                    .await
                    .map_err(|e| mysql_error(name, e))?;
                let key: Vec<String> = conn
                    .exec(
                        "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE \
                         WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND CONSTRAINT_NAME = 'PRIMARY' \
                         ORDER BY ORDINAL_POSITION",
                        (schema, table),
                    )
                    .await
                    .map_err(|e| mysql_error(name, e))?;
                (columns, key)
            }
            Conn::Postgres(client) => {
                let rows = client
                    .query(
                        "SELECT column_name::text, \
                         CASE WHEN data_type = 'numeric' AND numeric_scale = 0 THEN 'bigint' \
                         ELSE data_type::text END \
                         FROM information_schema.columns \
                         WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position",
                        &[&schema, &table],
                    )
                    .await
                    .map_err(|e| pg_error(name, e))?;
                let columns = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
                let rows = client
                    .query(
                        "SELECT a.attname::text FROM pg_index i \
                         JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) \
                         WHERE i.indrelid = to_regclass($1) AND i.indisprimary \
                         ORDER BY array_position(i.indkey::int2[], a.attnum)",
                        &[&format!(
                            "\"{}\".\"{}\"",
                            schema.replace('"', "\"\""),
                            table.replace('"', "\"\"")
                        )],
                    )
                    .await
                    .map_err(|e| pg_error(name, e))?;
                (columns, rows.iter().map(|r| r.get(0)).collect())
            }
        };
        let columns = columns
            .into_iter()
            .map(|(name, data_type)| Column {
                kind: kind_of(&data_type),
                name,
            })
            .collect();
        Ok((columns, key))
    }

    /// `WHERE` text for `chunk` over `key` and its parameters bound for this
    /// side (`key_kinds`: this side's kinds of the key columns).
    fn condition(
        &self,
        key: &[String],
        key_kinds: &[Kind],
        chunk: &Chunk,
    ) -> (String, Vec<KeyValue>) {
        let tuple = format!(
            "({})",
            key.iter()
                .map(|k| self.ident(k))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let mut parts = Vec::new();
        let mut params = Vec::new();
        for (bound, op) in [(&chunk.lower, ">"), (&chunk.upper, "<=")] {
            if let Some(values) = bound {
                let marks: Vec<String> = (0..values.len())
                    .map(|i| self.placeholder(params.len() + i + 1))
                    .collect();
                parts.push(format!("{tuple} {op} ({})", marks.join(", ")));
                params.extend(
                    values
                        .iter()
                        .zip(key_kinds)
                        .map(|(v, kind)| as_number(v, *kind)),
                );
            }
        }
        if parts.is_empty() {
            ("1 = 1".into(), params)
        } else {
            (parts.join(" AND "), params)
        }
    }

    /// The key of the row `offset` rows into `chunk` (its lower bound only),
    /// in key order; none when the chunk has fewer rows.
    pub async fn boundary(
        &mut self,
        from: &str,
        key: &[String],
        key_kinds: &[Kind],
        lower: &Option<Vec<KeyValue>>,
        offset: u64,
    ) -> Result<Option<Vec<KeyValue>>, DiffError> {
        let chunk = Chunk {
            lower: lower.clone(),
            upper: None,
        };
        let (condition, params) = self.condition(key, key_kinds, &chunk);
        let order = key
            .iter()
            .map(|k| self.ident(k))
            .collect::<Vec<_>>()
            .join(", ");
        // PostgreSQL keys are read as text (bound back as text, typed by the
        // server).
        let texts = key
            .iter()
            .map(|k| format!("{}::text", self.ident(k)))
            .collect::<Vec<_>>()
            .join(", ");
        let name = self.name;
        match &mut self.conn {
            Conn::Mysql(conn) => {
                let sql = format!(
                    "SELECT {order} FROM {from} WHERE {condition} ORDER BY {order} LIMIT 1 OFFSET {offset}"
                );
                let row: Option<mysql_async::Row> = conn
                    .exec_first(sql, mysql_params(&params))
                    .await
                    .map_err(|e| mysql_error(name, e))?;
                Ok(row.map(|r| r.unwrap().into_iter().map(key_of_mysql).collect()))
            }
            Conn::Postgres(client) => {
                let sql = format!(
                    "SELECT {texts} FROM {from} WHERE {condition} ORDER BY {order} LIMIT 1 OFFSET {offset}"
                );
                let rows = pg_query(client, &sql, &params)
                    .await
                    .map_err(|e| pg_error(name, e))?;
                Ok(rows.first().map(|row| {
                    key_kinds
                        .iter()
                        .enumerate()
                        .map(|(i, kind)| key_of_pg_text(row.get::<_, String>(i), *kind))
                        .collect()
                }))
            }
        }
    }

    /// Row count and an order-independent checksum of `chunk`'s rows (only
    /// comparable with a side of the same engine).
    pub async fn checksum(
        &mut self,
        from: &str,
        columns: &[Column],
        key: &[String],
        key_kinds: &[Kind],
        chunk: &Chunk,
    ) -> Result<(u64, u64), DiffError> {
        let (condition, params) = self.condition(key, key_kinds, chunk);
        let mysql = matches!(self.conn, Conn::Mysql(_));
        let list = columns
            .iter()
            .map(|c| {
                let id = self.ident(&c.name);
                // Text of different collations in one CONCAT_WS is an
                // "illegal mix": each as UTF-8 with one binary collation.
                if mysql && c.kind == Kind::Text {
                    format!("CONVERT({id} USING utf8mb4) COLLATE utf8mb4_bin")
                } else {
                    id
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        let name = self.name;
        match &mut self.conn {
            Conn::Mysql(conn) => {
                let nulls = columns
                    .iter()
                    .map(|c| format!("ISNULL(`{}`)", c.name.replace('`', "``")))
                    .collect::<Vec<_>>()
                    .join(", ");
                let sql = format!(
                    "SELECT COUNT(*), COALESCE(BIT_XOR(CRC32(CONCAT_WS(0x1f, {list}, CONCAT({nulls})))), 0) \
                     FROM {from} WHERE {condition}"
                );
                let row: Option<(u64, u64)> = conn
                    .exec_first(sql, mysql_params(&params))
                    .await
                    .map_err(|e| mysql_error(name, e))?;
                Ok(row.unwrap_or_default())
            }
            Conn::Postgres(client) => {
                // ROW(...)::text tells NULL from empty text; md5's first 64
                // bits per row, XORed (bit_xor: PostgreSQL 14 and later).
                let sql = format!(
                    "SELECT count(*)::int8, coalesce(bit_xor(('x' || left(md5(ROW({list})::text), 16))::bit(64)::int8), 0)::int8 \
                     FROM {from} WHERE {condition}"
                );
                let rows = pg_query(client, &sql, &params)
                    .await
                    .map_err(|e| pg_error(name, e))?;
                let row = rows.first().ok_or_else(|| DiffError::Database {
                    side: name,
                    message: "a checksum query returned no row".into(),
                })?;
                Ok((row.get::<_, i64>(0) as u64, row.get::<_, i64>(1) as u64))
            }
        }
    }

    /// How a column is read: as text in a form both engines share.
    fn read(&self, c: &Column) -> String {
        let id = self.ident(&c.name);
        match (self.engine(), c.kind) {
            (Engine::Mysql, Kind::Binary) => format!("LOWER(HEX({id}))"),
            (Engine::Mysql, Kind::Bit) => format!("CAST({id} AS UNSIGNED)"),
            // `+ 0`: a YEAR reads as `0000` (and PostgreSQL's smallint as `0`).
            (Engine::Mysql, Kind::Integer) => format!("CAST({id} + 0 AS CHAR)"),
            (Engine::Mysql, _) => format!("CAST({id} AS CHAR)"),
            (Engine::Postgres, Kind::Binary) => format!("encode({id}, 'hex')"),
            (Engine::Postgres, Kind::Bool) => format!("{id}::int::text"),
            (Engine::Postgres, _) => format!("{id}::text"),
        }
    }

    /// `SELECT` of the key columns, then every column of `columns`, read.
    fn select(&self, key: &[String], key_kinds: &[Kind], columns: &[Column]) -> String {
        let key_columns = key.iter().zip(key_kinds).map(|(k, kind)| Column {
            name: k.clone(),
            kind: *kind,
        });
        let list = key_columns
            .chain(columns.iter().cloned())
            .map(|c| self.read(&c))
            .collect::<Vec<_>>()
            .join(", ");
        format!("SELECT {list}")
    }

    /// The rows of `chunk`: key columns, then every column of `columns`,
    /// each as text in a form both engines share (NULL as `None`).
    pub async fn rows(
        &mut self,
        from: &str,
        columns: &[Column],
        key: &[String],
        key_kinds: &[Kind],
        chunk: &Chunk,
    ) -> Result<Vec<Vec<Option<String>>>, DiffError> {
        let (condition, params) = self.condition(key, key_kinds, chunk);
        let sql = format!(
            "{} FROM {from} WHERE {condition}",
            self.select(key, key_kinds, columns)
        );
        self.text_rows(&sql, &params).await
    }

    /// The rows whose keys are `keys` (each bound to this side's key kinds),
    /// read like [`Side::rows`].
    pub async fn rows_by_keys(
        &mut self,
        from: &str,
        columns: &[Column],
        key: &[String],
        key_kinds: &[Kind],
        keys: &[Vec<KeyValue>],
    ) -> Result<Vec<Vec<Option<String>>>, DiffError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let tuple = key
            .iter()
            .map(|k| self.ident(k))
            .collect::<Vec<_>>()
            .join(", ");
        let mut marks = Vec::new();
        let mut params = Vec::new();
        for k in keys {
            let one: Vec<String> = (0..k.len())
                .map(|i| self.placeholder(params.len() + i + 1))
                .collect();
            marks.push(format!("({})", one.join(", ")));
            params.extend(k.iter().zip(key_kinds).map(|(v, kind)| as_number(v, *kind)));
        }
        let sql = format!(
            "{} FROM {from} WHERE ({tuple}) IN ({})",
            self.select(key, key_kinds, columns),
            marks.join(", ")
        );
        self.text_rows(&sql, &params).await
    }

    async fn text_rows(
        &mut self,
        sql: &str,
        params: &[KeyValue],
    ) -> Result<Vec<Vec<Option<String>>>, DiffError> {
        let name = self.name;
        match &mut self.conn {
            Conn::Mysql(conn) => {
                let rows: Vec<mysql_async::Row> = conn
                    .exec(sql, mysql_params(params))
                    .await
                    .map_err(|e| mysql_error(name, e))?;
                Ok(rows
                    .into_iter()
                    .map(|r| {
                        r.unwrap()
                            .into_iter()
                            .map(|v| match v {
                                mysql_async::Value::NULL => None,
                                mysql_async::Value::Bytes(b) => {
                                    Some(String::from_utf8_lossy(&b).into_owned())
                                }
                                other => Some(other.as_sql(true).trim_matches('\'').to_string()),
                            })
                            .collect()
                    })
                    .collect())
            }
            Conn::Postgres(client) => {
                let rows = pg_query(client, sql, params)
                    .await
                    .map_err(|e| pg_error(name, e))?;
                Ok(rows
                    .iter()
                    .map(|r| {
                        (0..r.len())
                            .map(|i| r.get::<_, Option<String>>(i))
                            .collect()
                    })
                    .collect())
            }
        }
    }
}

async fn pg_query(
    client: &tokio_postgres::Client,
    sql: &str,
    params: &[KeyValue],
) -> Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
    let any = unspecified();
    let params: Vec<(PgParam<'_>, Type)> =
        params.iter().map(|p| (PgParam(p), any.clone())).collect();
    let typed: Vec<(&(dyn ToSql + Sync), Type)> = params
        .iter()
        .map(|(p, t)| (p as &(dyn ToSql + Sync), t.clone()))
        .collect();
    client.query_typed(sql, &typed).await
}

fn mysql_params(params: &[KeyValue]) -> mysql_async::Params {
    if params.is_empty() {
        return mysql_async::Params::Empty;
    }
    mysql_async::Params::Positional(
        params
            .iter()
            .map(|p| match p {
                KeyValue::Int(i) => mysql_async::Value::Int(*i),
                KeyValue::UInt(u) => mysql_async::Value::UInt(*u),
                KeyValue::Text(t) => mysql_async::Value::Bytes(t.clone().into_bytes()),
                KeyValue::Bytes(b) => mysql_async::Value::Bytes(b.clone()),
            })
            .collect(),
    )
}

/// A text key bound to an integer column goes as a number (MySQL would
/// compare a string with it as a double, losing digits past 2^53).
fn as_number(v: &KeyValue, kind: Kind) -> KeyValue {
    match (v, kind) {
        (KeyValue::Text(t), Kind::Integer | Kind::Bit) => {
            if let Ok(i) = t.parse::<i64>() {
                KeyValue::Int(i)
            } else if let Ok(u) = t.parse::<u64>() {
                KeyValue::UInt(u)
            } else {
                v.clone()
            }
        }
        _ => v.clone(),
    }
}

fn key_of_mysql(v: mysql_async::Value) -> KeyValue {
    use mysql_async::Value as V;
    match v {
        V::Int(i) => KeyValue::Int(i),
        V::UInt(u) => KeyValue::UInt(u),
        V::Bytes(b) => match String::from_utf8(b) {
            Ok(t) => KeyValue::Text(t),
            Err(e) => KeyValue::Bytes(e.into_bytes()),
        },
        V::NULL => KeyValue::Text(String::new()),
        V::Float(f) => KeyValue::Text(f.to_string()),
        V::Double(f) => KeyValue::Text(f.to_string()),
        V::Date(y, mo, d, h, mi, s, us) => KeyValue::Text(format!(
            "{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}.{us:06}"
        )),
        V::Time(neg, days, h, mi, s, us) => KeyValue::Text(format!(
            "{}{:02}:{mi:02}:{s:02}.{us:06}",
            if neg { "-" } else { "" },
            u32::from(h) + days * 24
        )),
    }
}

fn key_of_pg_text(text: String, kind: Kind) -> KeyValue {
    match kind {
        Kind::Binary => {
            let hex = text.trim_start_matches("\\x");
            let bytes: Option<Vec<u8>> = (0..hex.len())
                .step_by(2)
                .map(|i| {
                    hex.get(i..i + 2)
                        .and_then(|h| u8::from_str_radix(h, 16).ok())
                })
                .collect();
            bytes.map_or(KeyValue::Text(text), KeyValue::Bytes)
        }
        _ => as_number(&KeyValue::Text(text), kind),
    }
}

/// The kind of a column from its `information_schema` data type.
fn kind_of(data_type: &str) -> Kind {
    match data_type.to_ascii_lowercase().as_str() {
        "tinyint" | "smallint" | "mediumint" | "int" | "integer" | "bigint" | "year" => {
            Kind::Integer
        }
        "float" | "double" | "real" | "double precision" => Kind::Float,
        "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" | "bytea"
        | "geometry" | "point" | "linestring" | "polygon" | "multipoint" | "multilinestring"
        | "multipolygon" | "geometrycollection" => Kind::Binary,
        "bit" => Kind::Bit,
        "boolean" => Kind::Bool,
        _ => Kind::Text,
    }
}
