use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use sluice_sdk::{BatchView, Error, Op, Sink, host};

use crate::Config;

/// Appends one line per row change to a file in the sink's data directory.
pub struct LineSink {
    out: BufWriter<File>,
    /// Scratch space for one line.
    line: String,
    /// Rows written since the last flush.
    unflushed: u64,
}

/// The directory the host grants the plugin: `/data` inside the host, the system
/// temp directory in native tests.
pub fn data_root() -> PathBuf {
    #[cfg(target_arch = "wasm32")]
    {
        PathBuf::from("/data")
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        std::env::temp_dir()
    }
}

impl Sink for LineSink {
    type Config = Config;

    fn validate(config: &Config) -> Result<(), Error> {
        config.validate()
    }

    fn open(config: Config) -> Result<Self, Error> {
        let path = data_root().join(&config.file);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| Error::retryable(format!("cannot open {}: {e}", path.display())))?;
        Ok(Self {
            out: BufWriter::new(file),
            line: String::new(),
            unflushed: 0,
        })
    }

    fn write(&mut self, batch: BatchView<'_>) -> Result<(), Error> {
        for table in batch.tables() {
            let schema = table.schema();
            for row in table.rows() {
                let op = match row.op() {
                    Op::Insert => "I",
                    Op::Update => "U",
                    Op::Delete => "D",
                };
                self.line.clear();
                let _ = write!(
                    self.line,
                    "{op} {}.{} {}",
                    schema.schema_name,
                    schema.table_name,
                    row.commit_ts()
                );
                if row.is_replay() {
                    // Delivered again after a failure: this line may be a duplicate.
                    self.line.push_str(" replay");
                }
                // The row after the change, or as it was when deleted.
                let image = row.image();
                for (column, value) in image.iter() {
                    let _ = write!(self.line, " {}=", column.name);
                    if value.is_null() {
                        self.line.push_str("NULL");
                    } else {
                        value.write_text(&mut self.line);
                    }
                }
                self.line.push('\n');
                self.out.write_all(self.line.as_bytes())?;
                self.unflushed += 1;
            }
        }
        Ok(())
    }

    fn flush(&mut self, _ts: u64) -> Result<(), Error> {
        // Every row written so far has commit ts <= ts: make all of it durable.
        self.out.flush()?;
        self.out.get_ref().sync_data()?;
        host::counter_add("rows", self.unflushed);
        self.unflushed = 0;
        Ok(())
    }

    fn close(&mut self) -> Result<(), Error> {
        self.out.flush()?;
        self.out.get_ref().sync_data()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use sluice_sdk::testing::{SinkHarness, schema};
    use sluice_sdk::{ColumnType, TableBatchBuilder, Value};

    use super::{LineSink, data_root};

    #[test]
    fn writes_one_line_per_row_and_flush_makes_them_readable() {
        let file = format!("sink-lines-test-{}.txt", std::process::id());
        let path = data_root().join(&file);
        let _ = std::fs::remove_file(&path);

        let users = schema(
            1,
            "app",
            "users",
            &[
                ("id", ColumnType::Int, true),
                ("name", ColumnType::Text, false),
            ],
        );
        let mut rows = TableBatchBuilder::new(&users);
        rows.insert(100, &[Value::Int(7), Value::Text("ada")]);
        rows.update(
            101,
            &[Value::Int(7), Value::Text("ada")],
            &[Value::Int(7), Value::Text("ada l.")],
        );
        rows.delete(102, &[Value::Int(7), Value::Null]);

        let mut sink = SinkHarness::<LineSink>::open(&format!(r#"{{"file": "{file}"}}"#)).unwrap();
        sink.write(&[&users], vec![rows.finish()]).unwrap();
        sink.flush(102).unwrap();

        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "I app.users 100 id=7 name=ada\n\
             U app.users 101 id=7 name=ada l.\n\
             D app.users 102 id=7 name=NULL\n"
        );
        assert_eq!(sluice_sdk::host::native_counters().get("rows"), Some(&3));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn rejects_a_path_as_file_name() {
        let err = SinkHarness::<LineSink>::open(r#"{"file": "../etc/passwd"}"#)
            .err()
            .unwrap();
        assert!(matches!(err, sluice_sdk::Error::Config(_)), "{err}");
    }
}
