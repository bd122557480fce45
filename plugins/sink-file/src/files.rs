//! The numbered files in the sink's directory: naming, numbering, rotation, sync.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use sluice_sdk::Error;

use crate::Format;

/// Size of the write buffer in front of each file.
const BUFFER_BYTES: usize = 64 * 1024;

/// The directory the host grants the plugin: `/data` inside the host. Natively
/// (tests) it is what [`set_native_data_root`] set on this thread, or the current
/// directory.
pub fn data_root() -> PathBuf {
    #[cfg(target_arch = "wasm32")]
    {
        PathBuf::from("/data")
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        NATIVE_ROOT.with(|r| r.borrow().clone())
    }
}

#[cfg(not(target_arch = "wasm32"))]
thread_local! {
    static NATIVE_ROOT: std::cell::RefCell<PathBuf> = std::cell::RefCell::new(PathBuf::from("."));
}

/// Natively, make `root` stand in for `/data` for sinks opened on this thread.
#[cfg(not(target_arch = "wasm32"))]
pub fn set_native_data_root(root: impl Into<PathBuf>) {
    NATIVE_ROOT.with(|r| *r.borrow_mut() = root.into());
}

/// Writes lines into `{prefix}-{seq:06}.{extension}` files in one directory,
/// starting a new file before one would grow past `max_bytes`. Never appends to or
/// overwrites a file that existed before.
#[derive(Debug)]
pub struct RotatingFiles {
    dir: PathBuf,
    prefix: String,
    extension: &'static str,
    max_bytes: u64,
    next_seq: u64,
    current: Option<OpenFile>,
    /// Directories whose entries changed since they were last synced.
    unsynced_dirs: Vec<PathBuf>,
}

#[derive(Debug)]
struct OpenFile {
    path: PathBuf,
    writer: BufWriter<File>,
    /// Bytes written to this file so far, buffered or not.
    bytes: u64,
    /// The header line last written to this file (empty: none yet).
    header: Vec<u8>,
}

impl RotatingFiles {
    /// Create `dir` if missing and continue the numbering after the highest
    /// existing file of `prefix` (in any of the sink's formats). No file is created
    /// until the first line. `csv_quote` is the quote inside which a newline does
    /// not end a CSV record (`None`: CSV records are not quoted).
    pub fn open(
        dir: PathBuf,
        prefix: &str,
        extension: &'static str,
        max_bytes: u64,
        csv_quote: Option<u8>,
    ) -> Result<Self, Error> {
        // A new directory's entry lives in its parent: remember the parents of every
        // directory created here, up to the first that existed, to sync them.
        let unsynced_dirs = dir
            .ancestors()
            .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
            .map(|created| match created.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
                _ => PathBuf::from("."),
            })
            .collect();
        fs::create_dir_all(&dir).map_err(|e| io_error("cannot create directory", &dir, e))?;

        let mut highest = 0;
        let mut last_file = None;
        let entries = fs::read_dir(&dir).map_err(|e| io_error("cannot list directory", &dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io_error("cannot list directory", &dir, e))?;
            if let Some(seq) = entry
                .file_name()
                .to_str()
                .and_then(|name| parse_seq(name, prefix))
                && seq > highest
            {
                highest = seq;
                last_file = Some(entry.path());
            }
        }
        if let Some(path) = last_file {
            cut_torn_tail(&path, csv_quote)?;
        }
        Ok(Self {
            dir,
            prefix: prefix.to_string(),
            extension,
            max_bytes,
            next_seq: highest + 1,
            current: None,
            unsynced_dirs,
        })
    }

    /// The path of file number `seq`.
    pub fn path_of(&self, seq: u64) -> PathBuf {
        self.dir
            .join(format!("{}-{seq:06}.{}", self.prefix, self.extension))
    }

    /// Append one whole line (with its newline), rotating first if it would not
    /// fit. A non-empty `header` line goes first whenever the file does not hold
    /// it as its latest header (a new file, or another table). Returns the bytes
    /// written.
    pub fn write_line(&mut self, header: &[u8], line: &[u8]) -> Result<u64, Error> {
        let needs_header = |f: &OpenFile| !header.is_empty() && f.header.as_slice() != header;
        if self.current.as_ref().is_some_and(|f| {
            let len = line.len() + if needs_header(f) { header.len() } else { 0 };
            f.bytes > 0 && f.bytes + len as u64 > self.max_bytes
        }) {
            self.finish_current()?;
        }
        if self.current.is_none() {
            self.current = Some(self.create_next()?);
        }
        let file = self.current.as_mut().expect("a file was opened above");
        let mut written = 0;
        if needs_header(file) {
            file.writer
                .write_all(header)
                .map_err(|e| io_error("cannot write", &file.path, e))?;
            file.header.clear();
            file.header.extend_from_slice(header);
            written += header.len() as u64;
        }
        file.writer
            .write_all(line)
            .map_err(|e| io_error("cannot write", &file.path, e))?;
        written += line.len() as u64;
        file.bytes += written;
        Ok(written)
    }

    /// Make every line written so far durable: flush the buffer, sync the current
    /// file's data, and sync directories that gained entries.
    pub fn sync(&mut self) -> Result<(), Error> {
        if let Some(file) = &mut self.current {
            file.writer
                .flush()
                .map_err(|e| io_error("cannot write", &file.path, e))?;
            file.writer
                .get_ref()
                .sync_data()
                .map_err(|e| io_error("cannot sync", &file.path, e))?;
        }
        self.sync_dirs()
    }

    fn create_next(&mut self) -> Result<OpenFile, Error> {
        let path = self.path_of(self.next_seq);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| io_error("cannot create", &path, e))?;
        self.next_seq += 1;
        if !self.unsynced_dirs.contains(&self.dir) {
            self.unsynced_dirs.push(self.dir.clone());
        }
        Ok(OpenFile {
            path,
            writer: BufWriter::with_capacity(BUFFER_BYTES, file),
            bytes: 0,
            header: Vec::new(),
        })
    }

    /// Flush, sync and close the current file: its lines must be durable by the
    /// next `sync`, and it will not be open then.
    fn finish_current(&mut self) -> Result<(), Error> {
        let Some(file) = self.current.take() else {
            return Ok(());
        };
        let path = file.path;
        let inner = file
            .writer
            .into_inner()
            .map_err(|e| io_error("cannot write", &path, e.into_error()))?;
        inner
            .sync_data()
            .map_err(|e| io_error("cannot sync", &path, e))
    }

    fn sync_dirs(&mut self) -> Result<(), Error> {
        while let Some(dir) = self.unsynced_dirs.last() {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| io_error("cannot sync directory", dir, e))?;
            self.unsynced_dirs.pop();
        }
        Ok(())
    }
}

/// A crash can leave the last file ending in half a line (rows above the
/// checkpoint, which the host replays). Cut the file back to its last complete line
/// so that every file holds whole lines only. In a `.csv` file quoted with
/// `csv_quote`, a newline inside quotes does not end a record.
fn cut_torn_tail(path: &Path, csv_quote: Option<u8>) -> Result<(), Error> {
    use std::io::{Read, Seek, SeekFrom};
    let err = |e| io_error("cannot repair", path, e);
    let mut file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(err)?;
    let len = file.metadata().map_err(err)?.len();
    let csv = path.extension().is_some_and(|e| e == "csv");
    if let Some(quote) = csv_quote.filter(|_| csv) {
        // CSV values may hold raw newlines inside quotes: find the last newline
        // outside quotes, reading forward (a doubled quote toggles twice).
        let mut in_quotes = false;
        let (mut end, mut pos) = (0u64, 0u64);
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let n = file.read(&mut chunk).map_err(err)?;
            if n == 0 {
                break;
            }
            for &b in &chunk[..n] {
                pos += 1;
                if b == quote {
                    in_quotes = !in_quotes;
                } else if b == b'\n' && !in_quotes {
                    end = pos;
                }
            }
        }
        if end < len {
            file.set_len(end).map_err(err)?;
            file.sync_all().map_err(err)?;
        }
        return Ok(());
    }
    let mut end = len;
    let mut chunk = vec![0u8; 64 * 1024];
    while end > 0 {
        let start = end.saturating_sub(chunk.len() as u64);
        let buf = &mut chunk[..(end - start) as usize];
        file.seek(SeekFrom::Start(start)).map_err(err)?;
        file.read_exact(buf).map_err(err)?;
        if let Some(i) = buf.iter().rposition(|&b| b == b'\n') {
            end = start + i as u64 + 1;
            break;
        }
        end = start;
    }
    if end < len {
        file.set_len(end).map_err(err)?;
        file.sync_all().map_err(err)?;
    }
    Ok(())
}

/// The sequence number in `{prefix}-{digits}.{ext}` for one of the sink's extensions.
fn parse_seq(name: &str, prefix: &str) -> Option<u64> {
    let rest = name.strip_prefix(prefix)?.strip_prefix('-')?;
    let (digits, ext) = rest.split_once('.')?;
    let known = Format::ALL.iter().any(|f| f.extension() == ext);
    if !known || digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn io_error(what: &str, path: &Path, err: std::io::Error) -> Error {
    Error::retryable(format!("{what} {}: {err}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::parse_seq;

    #[test]
    fn parses_only_its_own_file_names() {
        assert_eq!(parse_seq("changes-000001.jsonl", "changes"), Some(1));
        assert_eq!(parse_seq("changes-000042.csv", "changes"), Some(42));
        assert_eq!(
            parse_seq("changes-1234567.jsonl", "changes"),
            Some(1_234_567)
        );
        assert_eq!(parse_seq("changes-000001.txt", "changes"), None);
        assert_eq!(parse_seq("changes-x-000001.jsonl", "changes"), None);
        assert_eq!(parse_seq("changes-.jsonl", "changes"), None);
        assert_eq!(parse_seq("changes-+1.jsonl", "changes"), None);
        assert_eq!(parse_seq("other-000009.jsonl", "changes"), None);
        assert_eq!(parse_seq("changes000009.jsonl", "changes"), None);
    }
}
