use sluice_sdk::{
    BatchView, ColumnData, ColumnType, ColumnValues, Error, Image, Sink, TableView, Value, host,
};

use crate::config::{Config, Read};

/// Counts rows and value bytes, then forgets them.
#[derive(Debug, Default)]
pub struct Blackhole {
    /// Rows written.
    pub rows: u64,
    /// Bytes of all values read (8 per number, the length of byte-like values).
    pub bytes: u64,
    /// NULL values seen.
    pub nulls: u64,
    /// Highest ts acknowledged by `flush`.
    pub flushed: u64,
    reported: (u64, u64),
    read: Read,
}

/// Bytes and NULLs of one column, read column-wise: every value's length (or
/// fixed width) is visited, NULLs excluded, exactly as the row-wise reading counts.
fn column_bytes(ty: ColumnType, data: &ColumnData, nulls: &mut u64) -> u64 {
    let n = data.len();
    let null_count = data.null_count() as u64;
    *nulls += null_count;
    match &data.values {
        ColumnValues::Bytes(b) => {
            // NULL values are empty, so the sum of lengths is the last offset.
            b.offsets.windows(2).map(|w| u64::from(w[1] - w[0])).sum()
        }
        _ if ty == ColumnType::Boolean => n as u64 - null_count,
        _ => 8 * (n as u64 - null_count),
    }
}

fn table_bytes(table: &TableView<'_>, nulls: &mut u64) -> u64 {
    let schema = table.schema();
    let raw = table.raw();
    raw.before
        .iter()
        .chain(&raw.after)
        .zip(schema.columns.iter().chain(&schema.columns))
        .map(|(data, column)| column_bytes(column.ty, data, nulls))
        .sum()
}

fn image_bytes(image: &Image<'_>, nulls: &mut u64) -> u64 {
    let mut bytes = 0u64;
    for i in 0..image.len() {
        bytes += match image.value(i) {
            Value::Null => {
                *nulls += 1;
                0
            }
            Value::Int(_)
            | Value::UInt(_)
            | Value::Float(_)
            | Value::DateTime(_)
            | Value::Date(_) => 8,
            Value::Bool(_) => 1,
            Value::Decimal(s) | Value::Text(s) | Value::Json(s) => s.len() as u64,
            Value::Blob(b) => b.len() as u64,
        };
    }
    bytes
}

impl Sink for Blackhole {
    type Config = Config;

    fn validate(config: &Config) -> Result<(), Error> {
        if config.reject {
            return Err(Error::config(
                "reject = true: this sink was told to refuse its config",
            ));
        }
        Ok(())
    }

    fn open(config: Config) -> Result<Self, Error> {
        Ok(Self {
            read: config.read,
            ..Self::default()
        })
    }

    fn write(&mut self, batch: BatchView<'_>) -> Result<(), Error> {
        for table in batch.tables() {
            if self.read == Read::Columns {
                self.rows += table.len() as u64;
                self.bytes += table_bytes(&table, &mut self.nulls);
                continue;
            }
            for row in table.rows() {
                self.rows += 1;
                if let Some(before) = row.before() {
                    self.bytes += image_bytes(&before, &mut self.nulls);
                }
                if let Some(after) = row.after() {
                    self.bytes += image_bytes(&after, &mut self.nulls);
                }
            }
        }
        Ok(())
    }

    fn flush(&mut self, ts: u64) -> Result<(), Error> {
        self.flushed = self.flushed.max(ts);
        host::counter_add("rows", self.rows - self.reported.0);
        host::counter_add("bytes", self.bytes - self.reported.1);
        self.reported = (self.rows, self.bytes);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use sluice_sdk::testing::{SinkHarness, schema};
    use sluice_sdk::{ColumnType, TableBatchBuilder, Value};

    use super::Blackhole;

    #[test]
    fn reading_by_columns_counts_the_same_as_by_rows() {
        let t = schema(
            1,
            "db",
            "t",
            &[
                ("id", ColumnType::Int, true),
                ("name", ColumnType::Text, false),
                ("ok", ColumnType::Boolean, false),
            ],
        );
        let mut b = TableBatchBuilder::new(&t);
        for i in 0..40i64 {
            let name = format!("n{i}");
            let v = [
                Value::Int(i),
                if i % 3 == 0 {
                    Value::Null
                } else {
                    Value::Text(&name)
                },
                Value::Bool(i % 2 == 0),
            ];
            match i % 4 {
                0 | 1 => b.insert(i as u64, &v),
                2 => b.update(i as u64, &v, &v),
                _ => b.delete(i as u64, &v),
            };
        }
        let batch = b.finish();
        let mut counts = Vec::new();
        for read in ["rows", "columns"] {
            let mut sink =
                SinkHarness::<Blackhole>::open(&format!(r#"{{"read": "{read}"}}"#)).unwrap();
            sink.write(&[&t], vec![batch.clone()]).unwrap();
            let s = sink.sink();
            counts.push((s.rows, s.bytes, s.nulls));
        }
        assert_eq!(counts[0], counts[1]);
        assert_eq!(counts[0].0, 40);
    }

    #[test]
    fn counts_rows_bytes_and_nulls() {
        let t = schema(
            1,
            "db",
            "t",
            &[
                ("id", ColumnType::Int, true),
                ("name", ColumnType::Text, false),
            ],
        );
        let mut b = TableBatchBuilder::new(&t);
        b.insert(10, &[Value::Int(1), Value::Text("abc")]);
        b.update(
            11,
            &[Value::Int(1), Value::Text("abc")],
            &[Value::Int(1), Value::Null],
        );
        b.delete(12, &[Value::Int(1), Value::Null]);
        let batch = b.finish();
        for read in ["rows", "columns"] {
            let mut sink =
                SinkHarness::<Blackhole>::open(&format!(r#"{{"read": "{read}"}}"#)).unwrap();
            sink.write(&[&t], vec![batch.clone()]).unwrap();
            sink.flush(12).unwrap();
            let s = sink.sink();
            assert_eq!(
                (s.rows, s.bytes, s.nulls, s.flushed),
                (3, 8 + 3 + 8 + 3 + 8 + 8, 2, 12),
                "{read}"
            );
        }
    }

    #[test]
    fn rejects_its_config_when_told() {
        let err = SinkHarness::<Blackhole>::open(r#"{"reject": true}"#)
            .err()
            .unwrap();
        assert!(matches!(err, sluice_sdk::Error::Config(_)), "{err}");
        let err = SinkHarness::<Blackhole>::open(r#"{"nope": 1}"#)
            .err()
            .unwrap();
        assert!(err.message().contains("unknown field `nope`"), "{err}");
    }
}
