//! A private etcd server for tests: its own data dir and ports, killed on drop.
//! Needs the `etcd` binary (Debian: `etcd-server`); `cargo xtask test` installs it.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::free_port;

/// A private etcd server, killed when dropped.
pub struct PrivateEtcd {
    child: Child,
    _dir: tempfile::TempDir,
    /// `127.0.0.1:<client port>`.
    pub endpoint: String,
}

impl Drop for PrivateEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl PrivateEtcd {
    /// Starts etcd and waits until it listens. Ports are picked free but can
    /// be taken by another process (a test started beside this one) before
    /// etcd binds them: an etcd that exits, or that never listens, is started
    /// again on other ports (five attempts).
    pub fn start() -> Self {
        let mut why = String::new();
        for _ in 0..5 {
            let mut etcd = Self::spawn();
            match etcd.come_up(Duration::from_secs(30)) {
                Ok(()) => return etcd,
                // Dropped: killed, and started again on other ports.
                Err(e) => why = e,
            }
        }
        panic!("etcd did not start in five attempts: {why}");
    }

    fn spawn() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (client, peer) = (free_port(), free_port());
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let child = Command::new("etcd")
            .args(["--name", "sluice-test", "--data-dir"])
            .arg(dir.path().join("etcd"))
            .args([
                "--listen-client-urls",
                &client_url,
                "--advertise-client-urls",
                &client_url,
            ])
            .args([
                "--listen-peer-urls",
                &peer_url,
                "--initial-advertise-peer-urls",
                &peer_url,
            ])
            .args(["--initial-cluster", &format!("sluice-test={peer_url}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd is not installed: apt-get install etcd-server (cargo xtask test does)");
        Self {
            child,
            _dir: dir,
            endpoint: format!("127.0.0.1:{client}"),
        }
    }

    /// Waits until this etcd (not another process on its port) listens.
    fn come_up(&mut self, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
                return Err(format!(
                    "etcd on {} exited ({status}): a port it was given was taken",
                    self.endpoint
                ));
            }
            if std::net::TcpStream::connect(&self.endpoint).is_ok() {
                // Its own listener, unless it is about to exit for a taken
                // peer port: look once more.
                std::thread::sleep(Duration::from_millis(100));
                if self.child.try_wait().map_err(|e| e.to_string())?.is_none() {
                    return Ok(());
                }
                continue;
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "etcd on {} did not listen within {within:?}",
                    self.endpoint
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open and nothing
    /// answers, as when a network partition cuts a client off.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Thaws a paused server (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal} etcd");
    }

    /// Waits until the client port accepts connections (at most 20 s).
    pub fn wait_listening(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(&self.endpoint).is_err() {
            assert!(
                Instant::now() < deadline,
                "etcd at {} did not start within 20 s",
                self.endpoint
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
