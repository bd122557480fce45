use sluice_sdk::{host, BatchView, Error, Image, Sink, Value};

use crate::Config;

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
}

fn image_bytes(image: &Image<'_>, nulls: &mut u64) -> u64 {
    let mut bytes = 0u64;
    for i in 0..image.len() {
        bytes += match image.value(i) {
            Value::Null => {
                *nulls += 1;
                0
            }
            Value::Int(_) | Value::UInt(_) | Value::Float(_) | Value::DateTime(_) | Value::Date(_) => 8,
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
            return Err(Error::config("reject = true: this sink was told to refuse its config"));
        }
        Ok(())
    }

    fn open(_config: Config) -> Result<Self, Error> {
        Ok(Self::default())
    }

    fn write(&mut self, batch: BatchView<'_>) -> Result<(), Error> {
        for table in batch.tables() {
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
    use sluice_sdk::testing::{schema, SinkHarness};
    use sluice_sdk::{ColumnType, TableBatchBuilder, Value};

    use super::Blackhole;

    #[test]
    fn counts_rows_bytes_and_nulls() {
        let t = schema(1, "db", "t", &[("id", ColumnType::Int, true), ("name", ColumnType::Text, false)]);
        let mut b = TableBatchBuilder::new(&t);
        b.insert(10, &[Value::Int(1), Value::Text("abc")]);
        b.update(11, &[Value::Int(1), Value::Text("abc")], &[Value::Int(1), Value::Null]);
        b.delete(12, &[Value::Int(1), Value::Null]);
        let mut sink = SinkHarness::<Blackhole>::open("{}").unwrap();
        sink.write(&[&t], vec![b.finish()]).unwrap();
        sink.flush(12).unwrap();
        let s = sink.sink();
        assert_eq!((s.rows, s.bytes, s.nulls, s.flushed), (3, 8 + 3 + 8 + 3 + 8 + 8, 2, 12));
    }

    #[test]
    fn rejects_its_config_when_told() {
        let err = SinkHarness::<Blackhole>::open(r#"{"reject": true}"#).err().unwrap();
        assert!(matches!(err, sluice_sdk::Error::Config(_)), "{err}");
        let err = SinkHarness::<Blackhole>::open(r#"{"nope": 1}"#).err().unwrap();
        assert!(err.message().contains("unknown field `nope`"), "{err}");
    }
}
