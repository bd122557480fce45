use sluice_sdk::{BatchView, DdlEvent, Error, Sink, host};

use crate::files::{RotatingFiles, data_root};
use crate::{Config, Format};
use sluice_formats::Encoder;

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
    /// Write the line buffer, after `header` where the file needs it.
    fn write_line(&mut self, header: &[u8]) -> Result<(), Error> {
        self.bytes += self.files.write_line(header, &self.line)?;
        Ok(())
    }
}

impl Sink for SinkFile {
    type Config = Config;

    fn validate(config: &Config) -> Result<(), Error> {
        config.validate()
    }

    fn open(config: Config) -> Result<Self, Error> {
        let options = config.encode_options();
        // A `.csv` file left by an earlier configuration is repaired with the
        // default quote.
        let csv_quote = match config.format {
            Format::Csv => options.csv.quote_byte(),
            Format::CanalJson | Format::Debezium => Some(b'"'),
        };
        let files = RotatingFiles::open(
            data_root().join(&config.dir),
            &config.prefix,
            config.format.extension(),
            config.max_file_bytes,
            csv_quote,
        )?;
        Ok(Self {
            encoder: Encoder::new(options),
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
                self.write_line(header.file_header())?;
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
            self.write_line(&[])?;
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

    /// A note that makes the CSV record of a row with a three-digit id 128 bytes
    /// long: `"I","items","shop",` (19) + id (3) + `,""` (3) + note + `\r\n` (2).
    fn padded_note(id: i64) -> String {
        format!("{id}{}", "x".repeat(128 - 19 - 3 - 3 - 2 - 3))
    }

    /// `text` with the value of every `"ts":` (the wall clock) replaced by `NOW`.
    fn without_wall_clock(text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(at) = rest.find("\"ts\":") {
            let (head, tail) = rest.split_at(at + 5);
            out.push_str(head);
            out.push_str("NOW");
            rest = tail.trim_start_matches(|c: char| c.is_ascii_digit());
        }
        out.push_str(rest);
        out
    }

    #[test]
    fn writes_rows_and_ddl_to_the_first_file_and_flush_makes_them_readable() {
        let dir = data_dir("basic");
        let t = items();
        let mut sink =
            open_sink(r#"{"dir": "basic/nested", "enable-sluice-extension": true}"#).unwrap();
        let mut b = TableBatchBuilder::new(&t);
        b.insert(1 << 18, &[Value::Int(1), Value::Text("a")]);
        b.delete(2 << 18, &[Value::Int(1), Value::Null]);
        sink.write(&[&t], vec![b.finish()]).unwrap();
        sink.apply_ddl(&DdlEvent::new(
            3 << 18,
            "shop",
            "items",
            "TRUNCATE TABLE items",
        ))
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
            r#"{"id":0,"database":"shop","table":"items","pkNames":["id"],"isDdl":false,"type":"INSERT","es":1,"ts":NOW,"sql":"","sqlType":{"id":-5,"note":2005},"mysqlType":{"id":"bigint","note":"text"},"data":[{"id":"1","note":"a"}],"old":null,"_sluice":{"commitTs":262144,"replay":false}}"#,
            r#"{"id":0,"database":"shop","table":"items","pkNames":["id"],"isDdl":false,"type":"DELETE","es":2,"ts":NOW,"sql":"","sqlType":{"id":-5,"note":2005},"mysqlType":{"id":"bigint","note":"text"},"data":[{"id":"1","note":null}],"old":null,"_sluice":{"commitTs":524288,"replay":false}}"#,
            r#"{"id":0,"database":"shop","table":"items","pkNames":null,"isDdl":true,"type":"TRUNCATE","es":3,"ts":NOW,"sql":"TRUNCATE TABLE items","sqlType":null,"mysqlType":null,"data":null,"old":null,"_sluice":{"commitTs":786432,"replay":false}}"#,
        ];
        assert_eq!(without_wall_clock(&files[0].1), expected.join("\n") + "\n");
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
                expected.push(format!("\"I\",\"items\",\"shop\",{id},\"{note}\"\r\n"));
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
        expected.push(format!("\"I\",\"items\",\"shop\",99,\"{long}\"\r\n"));
        expected.push("\"I\",\"items\",\"shop\",100,\\N\r\n".to_string());

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
    fn a_torn_csv_record_is_cut_by_the_configured_quote() {
        let dir = data_dir("torn-quote");
        fs::create_dir_all(&dir).unwrap();
        // With quote = "'", a '"' does not open a quoted field; a "'" does.
        let whole = "'I','t','a',1,'say \"hi\"\nbye'\r\n";
        fs::write(
            dir.join("changes-000001.csv"),
            format!("{whole}'I','t','a',2,'two\nlin"),
        )
        .unwrap();
        let config = r#"{"dir": "torn-quote", "format": "csv", "quote": "'"}"#;
        open_sink(config).unwrap().close().unwrap();
        assert_eq!(files_in("torn-quote")[0].1, whole);
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
                "unknown variant `xml`, expected one of `canal-json`, `csv`, `debezium`",
            ),
            (
                r#"{"delimiter": ";"}"#,
                "delimiter applies to format = \"csv\" only, but format = \"canal-json\"",
            ),
            (
                r#"{"format": "csv", "only-output-updated-columns": true}"#,
                "only-output-updated-columns applies to format = \"canal-json\" only",
            ),
            (
                r#"{"format": "csv", "debezium-disable-schema": true}"#,
                "debezium-disable-schema applies to format = \"debezium\" only",
            ),
            (
                r#"{"format": "csv", "delimiter": ""}"#,
                "must be 1 to 3 characters long",
            ),
            (
                r#"{"format": "csv", "delimiter": "|||;"}"#,
                "must be 1 to 3 characters long",
            ),
            (
                r#"{"format": "csv", "delimiter": "a\nb"}"#,
                "contains a line break",
            ),
            (
                r#"{"format": "csv", "delimiter": "\""}"#,
                "contains the quote \"\\\"\"; the quote and the delimiter must differ",
            ),
            (
                r#"{"format": "csv", "delimiter": "'", "quote": "'"}"#,
                "the quote and the delimiter must differ",
            ),
            (
                r#"{"format": "csv", "quote": "\"\""}"#,
                "is not a quote character",
            ),
            (
                r#"{"format": "csv", "quote": "a"}"#,
                "is not a quote character",
            ),
            (
                r#"{"format": "csv", "quote": "\n"}"#,
                "is not a quote character",
            ),
            (
                r#"{"format": "csv", "quote": "", "delimiter": "\\"}"#,
                "which escapes characters when quote = \"\"",
            ),
            (
                r#"{"format": "csv", "null": "a,b"}"#,
                "null = \"a,b\" cannot mark NULL",
            ),
            (r#"{"format": "csv", "null": "\r"}"#, "cannot mark NULL"),
            (
                r#"{"format": "csv", "terminator": ";"}"#,
                "terminator = \";\" is not supported; use \"\\r\\n\" (the default) or \"\\n\"",
            ),
            (
                r#"{"format": "csv", "binary-encoding-method": "raw"}"#,
                "unknown variant `raw`, expected `base64` or `hex`",
            ),
        ];
        for (config, message) in cases {
            let err = open_sink(config).err().unwrap();
            assert!(matches!(err, Error::Config(_)), "{config}: {err}");
            assert!(err.message().contains(message), "{config}: {err}");
        }
        assert!(open_sink(r#"{"dir": "ok", "max-file-bytes": 1024}"#).is_ok());
        let csv = r#"{"dir": "ok", "format": "csv", "delimiter": "|@|", "quote": "'", "null": "", "terminator": "\n", "include-commit-ts": true, "binary-encoding-method": "hex", "output-old-value": true, "output-field-header": true}"#;
        assert!(open_sink(csv).is_ok());
        assert!(open_sink(r#"{"dir": "ok", "format": "csv", "quote": ""}"#).is_ok());
        assert!(
            open_sink(r#"{"dir": "ok", "format": "debezium", "debezium-disable-schema": true}"#)
                .is_ok()
        );
    }

    #[test]
    fn csv_header_starts_every_file_and_every_change_of_table() {
        let t = items();
        let other = schema(4, "shop", "tags", &[("tag", ColumnType::Text, true)]);
        let config = r#"{"dir": "header", "format": "csv", "output-field-header": true, "terminator": "\n", "max-file-bytes": 1024}"#;
        let mut sink = open_sink(config).unwrap();
        let note = "n".repeat(450);
        let mut b = TableBatchBuilder::new(&t);
        b.insert(5, &[Value::Int(1), Value::Text(&note)]);
        b.insert(5, &[Value::Int(2), Value::Text(&note)]);
        let mut c = TableBatchBuilder::new(&other);
        c.insert(5, &[Value::Text("red")]);
        let mut d = TableBatchBuilder::new(&t);
        d.insert(6, &[Value::Int(3), Value::Text(&note)]);
        sink.write(&[&t, &other], vec![b.finish(), c.finish()])
            .unwrap();
        sink.write(&[&t], vec![d.finish()]).unwrap();
        sink.flush(6).unwrap();

        let items_header = "ticdc-meta$operation,ticdc-meta$table,ticdc-meta$schema,id,note\n";
        let tags_header = "ticdc-meta$operation,ticdc-meta$table,ticdc-meta$schema,tag\n";
        let row = |id: i64| format!("\"I\",\"items\",\"shop\",{id},\"{note}\"\n");
        let files = files_in("header");
        let contents: Vec<&str> = files.iter().map(|(_, c)| c.as_str()).collect();
        assert_eq!(
            contents,
            [
                format!("{items_header}{}{}", row(1), row(2)),
                format!(
                    "{tags_header}\"I\",\"tags\",\"shop\",\"red\"\n{items_header}{}",
                    row(3)
                ),
            ]
        );
        let counters = sluice_sdk::host::native_counters();
        assert_eq!(
            counters.get("bytes"),
            Some(&(contents.iter().map(|c| c.len() as u64).sum::<u64>()))
        );
    }
}
