//! A private S3-compatible server for tests (`s3s-fs`, which keeps its objects
//! in a directory, so that it can be restarted with what it had).
//!
//! `s3s-fs` comes from `cargo install s3s-fs@0.14.1 --features binary`
//! (`cargo xtask test` installs it); `SLUICE_S3S_FS` may name the binary.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The access key the server takes.
pub const ACCESS_KEY: &str = "sluice-test";
/// Its secret, which no message may show.
pub const SECRET_KEY: &str = "s3cr3t-never-printed";

/// The `s3s-fs` binary: `SLUICE_S3S_FS`, else cargo's bin dir, else the PATH.
pub fn s3s_fs() -> PathBuf {
    if let Some(p) = std::env::var_os("SLUICE_S3S_FS") {
        return p.into();
    }
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .expect("HOME or CARGO_HOME");
    let installed = home.join("bin").join("s3s-fs");
    if installed.exists() {
        return installed;
    }
    PathBuf::from("s3s-fs")
}

/// A private S3-compatible server on its own port and directory.
pub struct S3Server {
    root: PathBuf,
    /// Its port on 127.0.0.1.
    pub port: u16,
    child: Option<Child>,
}

impl S3Server {
    /// Starts one keeping its objects under `root`, with `bucket` made.
    pub fn start(root: &Path, bucket: &str) -> Self {
        std::fs::create_dir_all(root.join(bucket)).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut s = Self {
            root: root.to_path_buf(),
            port,
            child: None,
        };
        s.spawn();
        s
    }

    /// Starts it (again) on its port and directory.
    pub fn spawn(&mut self) {
        let child = Command::new(s3s_fs())
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
            .arg(&self.root)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {} ({e}); install it with `cargo install s3s-fs@0.14.1 \
                     --features binary --locked` (cargo xtask test does)",
                    s3s_fs().display()
                )
            });
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "s3s-fs did not start listening");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The `s3://` URI of `prefix` in `bucket`, with the credentials.
    pub fn uri(&self, bucket: &str, prefix: &str) -> String {
        format!(
            "s3://{bucket}/{prefix}?endpoint=http://127.0.0.1:{}&region=us-east-1&access-key={ACCESS_KEY}&secret-access-key={SECRET_KEY}",
            self.port
        )
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.kill();
    }
}
