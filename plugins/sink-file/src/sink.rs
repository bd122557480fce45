use sluice_sdk::{BatchView, DdlEvent, Error, Sink, host};

use crate::Config;
use crate::encode::Encoder;
use crate::files::{RotatingFiles, data_root};

/// Writes each row change as one line into rotating files; `flush` syncs them.
#[derive(Debug)]
pub struct SinkFile {
    encoder: Encoder,
    files: RotatingFiles,
    /// Scratch space for one line.
    line: Vec<u8>,
    /// Rows and bytes written, and how many of them were reported to the host.
    rows: u64,
    bytes: u64,
    reported: (u64, u64),
}

impl SinkFile {
    fn write_line(&mut self) -> Result<(), Error> {
        self.files.write_line(&self.line)?;
        self.bytes += self.line.len() as u64;
        Ok(())
    }
}

impl Sink for SinkFile {
    type Config = Config;

    fn validate(config: &Config) -> Result<(), Error> {
        config.validate()
    }

    fn open(config: Config) -> Result<Self, Error> {
        let files = RotatingFiles::open(
            data_root().join(&config.dir),
            &config.prefix,
            config.format.extension(),
            config.max_file_bytes,
        )?;
        Ok(Self {
            encoder: Encoder::new(config.format),
            files,
            line: Vec::new(),
            rows: 0,
            bytes: 0,
            reported: (0, 0),
        })
    }

    fn write(&mut self, batch: BatchView<'_>) -> Result<(), Error> {
        for table in batch.tables() {
            let header = self.encoder.table(table.schema());
            for row in table.rows() {
                self.line.clear();
                self.encoder.row(&header, &row, &mut self.line);
                self.write_line()?;
                self.rows += 1;
            }
        }
        Ok(())
    }

    fn flush(&mut self, _ts: u64) -> Result<(), Error> {
        // Everything written so far is at or below `ts`: the host only asks to
        // flush a ts once every row up to it was written.
        self.files.sync()?;
        host::counter_add("rows", self.rows - self.reported.0);
        host::counter_add("bytes", self.bytes - self.reported.1);
        self.reported = (self.rows, self.bytes);
        Ok(())
    }

    fn apply_ddl(&mut self, ddl: &DdlEvent) -> Result<(), Error> {
        self.line.clear();
        if self.encoder.ddl(ddl, &mut self.line) {
            self.write_line()?;
            // Nothing else acknowledges a DDL line: make it durable before returning.
            self.files.sync()?;
        }
        Ok(())
    }

    fn close(&mut self) -> Result<(), Error> {
        self.files.sync()
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::PathBuf;
    use std::sync::OnceLock;

    use sluice_sdk::testing::{SinkHarness, schema};
    use sluice_sdk::{ColumnType, DdlEvent, Error, TableBatchBuilder, TableSchema, Value};

    use super::SinkFile;

    /// The data root for every test in this binary, set once; each test uses its own
    /// `dir` below it.
    fn data_dir(dir: &str) -> PathBuf {
        static ROOT: OnceLock<PathBuf> = OnceLock::new();
        let root = ROOT.get_or_init(|| tempfile::tempdir().unwrap().keep());
        crate::files::set_native_data_root(root);
        root.join(dir)
    }

    /// Open a sink whose `/data` is this binary's test root.
    fn open_sink(config: &str) -> Result<SinkHarness<SinkFile>, Error> {
        data_dir("");
        SinkHarness::<SinkFile>::open(config)
    }

    /// File names in `dir` with their contents, sorted by name.
    fn files_in(dir: &str) -> Vec<(String, String)> {
        let mut files: Vec<(String, String)> = fs::read_dir(data_dir(dir))
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().into_string().unwrap(),
                    fs::read_to_string(e.path()).unwrap(),
                )
            })
            .collect();
        files.sort();
        files
    }

    fn items() -> TableSchema {
        schema(
            3,
            "shop",
            "items",
            &[
                ("id", ColumnType::Int, true),
                ("note", ColumnType::Text, false),
            ],
        )
    }

    /// A note that makes the CSV line of a row with a three-digit id 128 bytes long:
    /// `"I","shop","items",1000000,` (27) + id (3) + `,""` (3) + note + `\n` (1).
    fn padded_note(id: i64) -> String {
        format!("{id}{}", "x".repeat(128 - 27 - 3 - 3 - 1 - 3))
    }

    #[test]
    fn writes_rows_and_ddl_to_the_first_file_and_flush_makes_them_readable() {
        let dir = data_dir("basic");
        let t = items();
        let mut sink = open_sink(r#"{"dir": "basic/nested"}"#).unwrap();
        let mut b = TableBatchBuilder::new(&t);
        b.insert(1 << 18, &[Value::Int(1), Value::Text("a")]);
        b.delete(2 << 18, &[Value::Int(1), Value::Null]);
        sink.write(&[&t], vec![b.finish()]).unwrap();
        sink.apply_ddl(&DdlEvent {
            commit_ts: 3 << 18,
            schema_name: "shop".to_string(),
            table_name: "items".to_string(),
            query: "TRUNCATE TABLE items".to_string(),
        })
        .unwrap();
        sink.flush(3 << 18).unwrap();

        assert_eq!(
            fs::read_dir(&dir).unwrap().count(),
            1,
            "only the nested directory"
        );
        let files = files_in("basic/nested");
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].0, "changes-000001.jsonl");
        let expected = [
            r#"{"id":0,"database":"shop","table":"items","pkNames":["id"],"isDdl":false,"type":"INSERT","es":1,"ts":1,"sql":"","mysqlType":{"id":"int","note":"text"},"data":[{"id":"1","note":"a"}],"old":null,"_sluice":{"commitTs":262144,"replay":false}}"#,
            r#"{"id":0,"database":"shop","table":"items","pkNames":["id"],"isDdl":false,"type":"DELETE","es":2,"ts":2,"sql":"","mysqlType":{"id":"int","note":"text"},"data":[{"id":"1","note":null}],"old":null,"_sluice":{"commitTs":524288,"replay":false}}"#,
            r#"{"id":0,"database":"shop","table":"items","pkNames":null,"isDdl":true,"type":"QUERY","es":3,"ts":3,"sql":"TRUNCATE TABLE items","mysqlType":null,"data":null,"old":null,"_sluice":{"commitTs":786432,"replay":false}}"#,
        ];
        assert_eq!(files[0].1, expected.join("\n") + "\n");
        let counters = sluice_sdk::host::native_counters();
        assert_eq!(counters.get("rows"), Some(&2));
        assert_eq!(counters.get("bytes"), Some(&(files[0].1.len() as u64)));
    }

    #[test]
    fn rotates_before_a_line_would_exceed_max_file_bytes() {
        let t = items();
        let config =
            r#"{"dir": "rotate", "prefix": "orders", "format": "csv", "max-file-bytes": 1024}"#;
        let mut sink = open_sink(config).unwrap();
        let mut expected = Vec::new();
        // 25 lines of 128 bytes: eight fill 1024 bytes exactly, a ninth would not fit.
        for chunk in [100..107i64, 107..125] {
            let mut b = TableBatchBuilder::new(&t);
            for id in chunk {
                let note = padded_note(id);
                b.insert(1_000_000, &[Value::Int(id), Value::Text(&note)]);
                expected.push(format!(
                    "\"I\",\"shop\",\"items\",1000000,{id},\"{note}\"\n"
                ));
            }
            sink.write(&[&t], vec![b.finish()]).unwrap();
            sink.flush(1_000_000).unwrap();
        }
        assert!(
            expected.iter().all(|l| l.len() == 128),
            "{}",
            expected[0].len()
        );
        // A line longer than the limit goes alone into a fresh file.
        let long = "y".repeat(2000);
        let mut b = TableBatchBuilder::new(&t);
        b.insert(1_000_001, &[Value::Int(99), Value::Text(&long)]);
        b.insert(1_000_002, &[Value::Int(100), Value::Null]);
        sink.write(&[&t], vec![b.finish()]).unwrap();
        sink.close().unwrap();
        expected.push(format!("\"I\",\"shop\",\"items\",1000001,99,\"{long}\"\n"));
        expected.push("\"I\",\"shop\",\"items\",1000002,100,\\N\n".to_string());

        let files = files_in("rotate");
        let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "orders-000001.csv",
                "orders-000002.csv",
                "orders-000003.csv",
                "orders-000004.csv",
                "orders-000005.csv",
                "orders-000006.csv"
            ]
        );
        assert_eq!(files[0].1, expected[0..8].concat());
        assert_eq!(files[1].1, expected[8..16].concat());
        assert_eq!(files[2].1, expected[16..24].concat());
        assert_eq!(files[3].1, expected[24]);
        assert_eq!(
            files[4].1, expected[25],
            "the long line goes alone into a fresh file"
        );
        assert_eq!(files[5].1, expected[26]);
        assert_eq!(
            files.iter().map(|(_, c)| c.as_str()).collect::<String>(),
            expected.concat()
        );
    }

    #[test]
    fn restart_continues_numbering_and_never_overwrites_existing_files() {
        let dir = data_dir("restart");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("changes-000007.csv"), "old csv\n").unwrap();
        fs::write(dir.join("other-000050.jsonl"), "other prefix\n").unwrap();
        fs::write(dir.join("changes-000099.txt"), "not ours\n").unwrap();
        let t = items();
        for id in [1, 2] {
            let mut sink = open_sink(r#"{"dir": "./restart"}"#).unwrap();
            let mut b = TableBatchBuilder::new(&t);
            b.insert(5, &[Value::Int(id), Value::Text("r")]);
            sink.write(&[&t], vec![b.finish()]).unwrap();
            sink.close().unwrap();
        }
        // An instance that writes nothing creates no file.
        let mut idle = open_sink(r#"{"dir": "restart"}"#).unwrap();
        idle.flush(9).unwrap();
        idle.close().unwrap();

        let files = files_in("restart");
        let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "changes-000007.csv",
                "changes-000008.jsonl",
                "changes-000009.jsonl",
                "changes-000099.txt",
                "other-000050.jsonl"
            ]
        );
        assert_eq!(files[0].1, "old csv\n");
        assert!(
            files[1].1.contains(r#""data":[{"id":"1","note":"r"}]"#),
            "{}",
            files[1].1
        );
        assert!(
            files[2].1.contains(r#""data":[{"id":"2","note":"r"}]"#),
            "{}",
            files[2].1
        );
        assert_eq!(files[1].1.lines().count() + files[2].1.lines().count(), 2);
    }

    #[test]
    fn a_torn_last_line_left_by_a_crash_is_cut_on_open() {
        let dir = data_dir("torn");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("changes-000001.jsonl"), "{\"a\":1}\n").unwrap();
        // Longer than one 64 KiB read, and no newline at the end.
        let torn = format!("{{\"b\":2}}\n{{\"c\":\"{}", "x".repeat(70_000));
        fs::write(dir.join("changes-000002.jsonl"), &torn).unwrap();
        fs::write(dir.join("changes-000003.jsonl"), "no newline at all").unwrap();
        let mut sink = open_sink(r#"{"dir": "torn"}"#).unwrap();
        sink.close().unwrap();
        let files = files_in("torn");
        assert_eq!(files[0].1, "{\"a\":1}\n", "only the last file is repaired");
        assert_eq!(files[1].1, torn);
        assert_eq!(files[2].1, "");
        fs::write(dir.join("changes-000003.jsonl"), &torn).unwrap();
        let mut sink = open_sink(r#"{"dir": "torn"}"#).unwrap();
        sink.close().unwrap();
        assert_eq!(files_in("torn")[2].1, "{\"b\":2}\n");
    }

    #[test]
    fn a_torn_csv_record_with_a_quoted_newline_is_cut_whole() {
        let dir = data_dir("torn-csv");
        fs::create_dir_all(&dir).unwrap();
        let whole = "\"I\",\"a\",\"t\",1,7,\"say \"\"hi\"\"\nbye\"\n";
        // The crash came after the quoted newline of the second record.
        fs::write(
            dir.join("changes-000001.csv"),
            format!("{whole}\"I\",\"a\",\"t\",2,8,\"two\nlin"),
        )
        .unwrap();
        let mut sink = open_sink(r#"{"dir": "torn-csv", "format": "csv"}"#).unwrap();
        sink.close().unwrap();
        assert_eq!(files_in("torn-csv")[0].1, whole);
    }

    #[test]
    fn rejects_bad_configs_with_config_errors() {
        data_dir("");
        let cases = [
            (r#"{"dir": "/etc"}"#, "is an absolute path"),
            (r#"{"dir": "out/../../x"}"#, "contains \"..\""),
            (r#"{"dir": ".."}"#, "contains \"..\""),
            (r#"{"prefix": "a/b"}"#, "is not a file-name prefix"),
            (r#"{"prefix": ""}"#, "is not a file-name prefix"),
            (r#"{"max-file-bytes": 1023}"#, "set it to at least 1024"),
            (r#"{"directory": "out"}"#, "unknown field `directory`"),
            (
                r#"{"format": "xml"}"#,
                "unknown variant `xml`, expected `canal-json` or `csv`",
            ),
        ];
        for (config, message) in cases {
            let err = open_sink(config).err().unwrap();
            assert!(matches!(err, Error::Config(_)), "{config}: {err}");
            assert!(err.message().contains(message), "{config}: {err}");
        }
        assert!(open_sink(r#"{"dir": "ok", "max-file-bytes": 1024}"#).is_ok());
    }
}
