//! A `sluice server` process for end-to-end tests, driven through `sluice cli`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value as Json;

/// A server process on free ports with its own data dir.
pub struct Server {
    pub child: Child,
    pub grpc: String,
    pub http: String,
    pub stderr: std::sync::Arc<std::sync::Mutex<String>>,
    /// What it printed after its first line.
    pub stdout: std::sync::Arc<std::sync::Mutex<String>>,
    /// The admin token the server wrote into its data dir at its first start.
    pub token_file: std::path::PathBuf,
}

impl Server {
    pub fn start(data_dir: &Path, extra: &[&str]) -> Server {
        Self::spawn(data_dir, extra, "sluice server ready")
    }

    /// A server that joins a cluster whose owner is another one: it stands by
    /// (its first line says so) and takes over when the owner is gone. Its
    /// calls use `owner`'s admin token (a standby makes none).
    pub fn start_standby(data_dir: &Path, extra: &[&str], owner: &Server) -> Server {
        let mut s = Self::spawn(data_dir, extra, "sluice server standby");
        s.token_file = owner.token_file.clone();
        s
    }

    /// Waits until a standby says it is ready (it became the owner), at most
    /// `timeout`; returns how long that took.
    pub fn wait_ready(&self, timeout: Duration) -> Duration {
        let start = Instant::now();
        while !self.stdout.lock().unwrap().contains("sluice server ready") {
            assert!(
                start.elapsed() < timeout,
                "not the owner after {timeout:?}; stderr: {}",
                self.stderr.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        start.elapsed()
    }

    fn spawn(data_dir: &Path, extra: &[&str], first: &str) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["server", "--data-dir"])
            .arg(data_dir)
            .args(["--addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
            .args(extra)
            .env("SLUICE_LOG", "warn,sluice=info")
            // The note for local clients goes beside the data dir, not home.
            .env("XDG_CONFIG_HOME", data_dir.with_extension("config"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sluice server starts");
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let err = child.stderr.take().unwrap();
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        // sluice server ready: grpc ADDR http ADDR capture ID data-dir DIR
        let words: Vec<&str> = line.split_whitespace().collect();
        assert!(
            line.starts_with(first),
            "no line `{first}`: {line:?}; stderr: {}",
            stderr.lock().unwrap()
        );
        let stdout = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let rest = stdout.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while out.read_line(&mut line).unwrap_or(0) > 0 {
                rest.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        Server {
            child,
            grpc: format!("http://{}", words[4]),
            http: format!("http://{}", words[6]),
            stderr,
            stdout,
            token_file: data_dir.join("admin-token"),
        }
    }

    /// A gRPC connection that sends the admin token with every call.
    pub async fn channel(&self) -> sluice_api::client::Authorized {
        let channel = tonic::transport::Channel::from_shared(self.grpc.clone())
            .unwrap()
            .connect()
            .await
            .unwrap();
        let bearer = sluice_api::client::Bearer::new(Some(&self.admin_token())).unwrap();
        sluice_api::client::Authorized::new(channel, bearer)
    }

    /// The server's admin token.
    pub fn admin_token(&self) -> String {
        std::fs::read_to_string(&self.token_file)
            .unwrap()
            .trim()
            .to_string()
    }

    /// `sluice cli --server .. ARGS` with the server's admin token:
    /// (success, stdout, stderr).
    pub fn cli(&self, args: &[&str]) -> (bool, String, String) {
        self.cli_with_token(&self.admin_token(), args)
    }

    /// `sluice cli --server .. ARGS` with `token` (none when empty).
    pub fn cli_with_token(&self, token: &str, args: &[&str]) -> (bool, String, String) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
        cmd.args(["cli", "--server", &self.grpc])
            .args(args)
            .env_remove("SLUICE_TOKEN_FILE")
            .env_remove("SLUICE_TENANT")
            .env("SLUICE_TOKEN", token)
            .env(
                "XDG_CONFIG_HOME",
                self.token_file.with_extension("no-config"),
            );
        let out = cmd.output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// A CLI command that must succeed, with `--output json` parsed.
    pub fn json(&self, args: &[&str]) -> Json {
        let mut all = vec!["--output", "json"];
        all.extend_from_slice(args);
        let (ok, out, err) = self.cli(&all);
        assert!(ok, "sluice cli {args:?} failed: {err}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
    }

    /// Uploads the built plugin `name` (from `target/plugins` or
    /// `target/test-plugins`) as `name@0.1.0` of world `kind`.
    pub fn upload(&self, name: &str, kind: &str) -> Json {
        self.upload_as("default", name, kind)
    }

    /// [`Server::upload`] for `tenant`.
    pub fn upload_as(&self, tenant: &str, name: &str, kind: &str) -> Json {
        self.json(&[
            "--tenant",
            tenant,
            "plugin",
            "upload",
            sluice_tests::plugin_path(name).to_str().unwrap(),
            "--id",
            &format!("{name}@0.1.0"),
            "--kind",
            kind,
        ])
    }

    /// Creates changefeed `name` from the file `config` (which must succeed).
    pub fn create(&self, name: &str, config: &Path) -> Json {
        self.json(&[
            "changefeed",
            "create",
            "-c",
            name,
            "--config",
            config.to_str().unwrap(),
        ])
    }

    /// A CLI command that must fail; its one error line.
    pub fn error(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.cli(args);
        assert!(!ok, "sluice cli {args:?} should fail: {out}");
        let err = err.trim().to_string();
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        err
    }

    /// `GET path` with the admin token.
    pub fn http_get(&self, path: &str) -> (u16, String) {
        self.http_get_with(path, Some(&self.admin_token()))
    }

    /// `GET path` with `token` as the bearer (none for `None`).
    pub fn http_get_with(&self, path: &str, token: Option<&str>) -> (u16, String) {
        let url = format!("{}{path}", self.http);
        let addr = url.trim_start_matches("http://");
        let (host, rest) = addr.split_once('/').unwrap();
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(host).unwrap();
        write!(
            s,
            "GET /{rest} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{}\r\n",
            token
                .map(|t| format!("Authorization: Bearer {t}\r\n"))
                .unwrap_or_default()
        )
        .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let code = text[9..12].parse().unwrap();
        let body = text.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
        (code, body.to_string())
    }

    pub fn wait_for(&self, what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
        let start = Instant::now();
        while !check() {
            assert!(
                start.elapsed() < timeout,
                "timed out waiting for {what}; server log:\n{}",
                self.stderr.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn state(&self, changefeed: &str) -> Json {
        self.json(&["changefeed", "query", "-c", changefeed])
    }

    pub fn stop(mut self) -> String {
        unsafe_sigterm(self.child.id());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{}", self.stderr.lock().unwrap());
        self.stderr.lock().unwrap().clone()
    }

    /// SIGKILL, without waiting for the process to be gone: a new server may
    /// be started on the same data dir at once, as an operator's script
    /// would. Call [`Server::kill`] on the result to reap it and read its log.
    pub fn kill_now(mut self) -> Server {
        self.child.kill().unwrap();
        self
    }

    pub fn kill(mut self) -> String {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        self.stderr.lock().unwrap().clone()
    }

    /// SIGSTOP: the process is frozen (a partition, a VM pause) until
    /// [`Server::resume_until_exit`].
    pub fn freeze(&self) {
        let pid = self.child.id().to_string();
        let ok = Command::new("kill").args(["-STOP", &pid]).status().unwrap();
        assert!(ok.success());
    }

    /// SIGCONT to a frozen server whose lease ended meanwhile: it must exit
    /// by itself, failing, within `within`. Its log.
    pub fn resume_until_exit(mut self, within: Duration, what: &str) -> String {
        let pid = self.child.id().to_string();
        let ok = Command::new("kill").args(["-CONT", &pid]).status().unwrap();
        assert!(ok.success());
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                start.elapsed() < within,
                "{what}: a continued capture whose lease ended must exit by itself: {}",
                self.stderr.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        std::thread::sleep(Duration::from_millis(100));
        let log = self.stderr.lock().unwrap().clone();
        assert!(!status.success(), "{what}: {log}");
        log
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn unsafe_sigterm(pid: u32) {
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}
