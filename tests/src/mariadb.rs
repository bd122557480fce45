//! A private MariaDB server for tests: its own data dir and port, binary logging
//! set up for change capture, killed on drop. Needs `mariadb-install-db` and
//! `mariadbd` (Debian: `mariadb-server`); `cargo xtask test` installs them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::free_port;

/// The settings change capture needs; a test may override any of them.
pub const CDC_SETTINGS: [&str; 5] = [
    "--log-bin=binlog",
    "--binlog-format=ROW",
    "--binlog-row-image=FULL",
    "--binlog-row-metadata=FULL",
    "--server-id=1",
];

/// A private MariaDB server, killed when dropped.
pub struct PrivateMariaDb {
    child: Option<Child>,
    dir: tempfile::TempDir,
    settings: Vec<String>,
    /// Its TCP port on 127.0.0.1.
    pub port: u16,
}

impl Drop for PrivateMariaDb {
    fn drop(&mut self) {
        self.kill();
    }
}

fn binary(names: &[&str]) -> PathBuf {
    for name in names {
        for dir in ["/usr/sbin", "/usr/bin", "/usr/local/bin", "/usr/local/sbin"] {
            let p = Path::new(dir).join(name);
            if p.exists() {
                return p;
            }
        }
    }
    panic!(
        "{} is not installed: apt-get install mariadb-server (cargo xtask test does)",
        names[0]
    );
}

impl PrivateMariaDb {
    /// Starts a server with binary logging for change capture, and waits until
    /// it takes connections.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Like [`PrivateMariaDb::start`], with extra server options (later ones win).
    pub fn start_with(extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        // Concurrent installs in one /tmp trip over each other's temporary
        // tables: one at a time, each with its own tmpdir.
        static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = INSTALL
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let out = Command::new(binary(&["mariadb-install-db", "mysql_install_db"]))
            .env("TMPDIR", dir.path())
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.path().join("data").display()))
            .args([
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--user=root",
            ])
            .output()
            .expect("mariadb-install-db runs");
        assert!(
            out.status.success(),
            "mariadb-install-db failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        drop(_one);
        let mut settings: Vec<String> = CDC_SETTINGS.iter().map(|s| s.to_string()).collect();
        settings.extend(extra.iter().map(|s| s.to_string()));
        let mut db = Self {
            child: None,
            dir,
            settings,
            port: free_port(),
        };
        db.run();
        db
    }

    fn run(&mut self) {
        let data = self.dir.path().join("data");
        let child = Command::new(binary(&["mariadbd", "mysqld"]))
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!(
                "--socket={}",
                self.dir.path().join("sock").display()
            ))
            .arg(format!(
                "--pid-file={}",
                self.dir.path().join("pid").display()
            ))
            .arg(format!(
                "--log-error={}",
                self.dir.path().join("error.log").display()
            ))
            .args([
                "--user=root",
                "--innodb-buffer-pool-size=128M",
                "--innodb-flush-log-at-trx-commit=2",
                "--sync-binlog=0",
                "--max-allowed-packet=256M",
                "--max-binlog-size=1G",
            ])
            .args(&self.settings)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mariadbd starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if self
                .client()
                .arg("-e")
                .arg("SELECT 1")
                .output()
                .is_ok_and(|o| o.status.success())
            {
                break;
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!("mariadbd exited ({status}): {}", self.error_log());
            }
            assert!(
                Instant::now() < deadline,
                "mariadbd did not start within 60 s: {}",
                self.error_log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The server's binary log as `mariadb-binlog -v` prints it (rows as
    /// pseudo-SQL), for a failing test's report.
    pub fn binlog_text(&self) -> String {
        let data = self.dir.path().join("data");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&data)
            .map(|dir| {
                dir.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| {
                        p.file_name()
                            .and_then(|n| n.to_str())
                            .and_then(|n| n.strip_prefix("binlog."))
                            .is_some_and(|e| e.bytes().all(|b| b.is_ascii_digit()))
                    })
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        match Command::new(binary(&["mariadb-binlog", "mysqlbinlog"]))
            .args(["-v", "--base64-output=DECODE-ROWS"])
            .args(&files)
            .output()
        {
            Ok(out) => format!(
                "{}{}",
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            ),
            Err(e) => format!("mariadb-binlog failed: {e}"),
        }
    }

    /// The server's error log.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    fn client(&self) -> Command {
        let mut c = Command::new(binary(&["mariadb", "mysql"]));
        c.args([
            "--no-defaults",
            "-h127.0.0.1",
            "-uroot",
            "--batch",
            "--skip-column-names",
            "--default-character-set=utf8mb4",
        ])
        .arg(format!("-P{}", self.port));
        c
    }

    /// Runs SQL as root; panics with the server's message on an error.
    pub fn exec(&self, sql: &str) -> String {
        self.try_exec(sql)
            .unwrap_or_else(|e| panic!("SQL failed: {}\n{e}", &sql[..sql.len().min(2000)]))
    }

    /// Runs SQL as root (fed on stdin, so scripts may be long); the error text
    /// if it fails.
    pub fn try_exec(&self, sql: &str) -> Result<String, String> {
        // A connection refused or reset before the statement ran (the server
        // busy on a loaded machine: error 2002, 2003, 2013 at the handshake)
        // is tried again a few times; errors of the statement itself are not.
        let mut tries = 0;
        loop {
            match self.try_exec_once(sql) {
                Err(e)
                    if tries < 5
                        && (e.contains("ERROR 2002")
                            || e.contains("ERROR 2003")
                            || (e.contains("ERROR 2013") && e.contains("handshake"))) =>
                {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(200 << tries));
                }
                other => return other,
            }
        }
    }

    fn try_exec_once(&self, sql: &str) -> Result<String, String> {
        let out = self.feed(self.client(), sql);
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// Runs a script as root to its end, going on past statements that fail
    /// (`--force`): what it printed, and the errors.
    pub fn script(&self, sql: &str) -> (String, String) {
        let mut client = self.client();
        client.arg("--force");
        let out = self.feed(client, sql);
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs `client` with `sql` on its stdin.
    fn feed(&self, mut client: Command, sql: &str) -> std::process::Output {
        use std::io::Write;
        let mut child = client
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the mariadb client runs");
        let mut stdin = child.stdin.take().expect("piped");
        let text = sql.to_string();
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(text.as_bytes());
        });
        let out = child.wait_with_output().expect("the mariadb client ends");
        let _ = writer.join();
        out
    }

    /// `mysql://root@127.0.0.1:<port>`.
    pub fn root_url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}", self.port)
    }

    /// A URL for `user` with `password`.
    pub fn url(&self, user: &str, password: &str) -> String {
        format!("mysql://{user}:{password}@127.0.0.1:{}", self.port)
    }

    /// Stops the server cleanly (it can be started again with [`PrivateMariaDb::restart`]).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(60);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open and nothing is
    /// answered until [`PrivateMariaDb::unfreeze`] (a hung downstream).
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Lets a frozen server go on (SIGCONT).
    pub fn unfreeze(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let ok = Command::new("kill")
                .arg(signal)
                .arg(child.id().to_string())
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "kill {signal} of mariadbd failed");
        }
    }

    /// Kills the server at once (SIGKILL).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same data dir and port, with extra options.
    pub fn restart_with(&mut self, extra: &[&str]) {
        self.stop();
        self.settings.extend(extra.iter().map(|s| s.to_string()));
        self.run();
    }

    /// Starts the server again on the same data dir and port.
    pub fn restart(&mut self) {
        self.restart_with(&[]);
    }
}
