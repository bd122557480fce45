//! A private PostgreSQL server for tests: its own data dir, socket dir and
//! port, stopped on drop. TCP connections (127.0.0.1) need a password
//! (scram-sha-256; the superuser `postgres` has [`ROOT_PASSWORD`]); the
//! test's own `psql` comes in over the server's private socket. Needs
//! `initdb`, `postgres` and `psql` (Debian: `postgresql`); `cargo xtask test`
//! installs them. PostgreSQL refuses to run as root: as root the server runs
//! as the `postgres` user.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::free_port;

/// The password of the superuser `postgres`.
pub const ROOT_PASSWORD: &str = "Root-Pw0";

/// A private PostgreSQL server, stopped when dropped.
pub struct PrivatePostgres {
    child: Option<Child>,
    dir: tempfile::TempDir,
    /// (uid, gid) the server runs as, when started by root.
    user: Option<(u32, u32)>,
    /// Its TCP port on 127.0.0.1.
    pub port: u16,
}

/// The directory of the newest installed server's binaries.
fn bin_dir() -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.flatten().map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    versions.retain(|p| p.join("initdb").exists());
    versions.sort_by_key(|p| {
        p.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    versions.pop().unwrap_or_else(|| {
        panic!("PostgreSQL is not installed: apt-get install postgresql (cargo xtask test does)")
    })
}

/// The uid and gid of the `postgres` user, when running as root.
fn server_user() -> Option<(u32, u32)> {
    let uid = |flag: &str| -> Option<u32> {
        let out = Command::new("id").arg(flag).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    if uid("-u")? != 0 {
        return None;
    }
    let of = |flag: &str| -> u32 {
        let out = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .expect("id runs");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("as root, the postgres user must exist (apt-get install postgresql)")
    };
    Some((of("-u"), of("-g")))
}

impl PrivatePostgres {
    /// Initializes a cluster in a temporary directory, starts it and waits
    /// until it takes connections.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let user = server_user();
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
        }
        let mut initdb = Command::new(bin_dir().join("initdb"));
        initdb
            .arg("-D")
            .arg(dir.path().join("data"))
            .args(["-U", "postgres", "-E", "UTF8", "--no-sync"])
            .args(["--auth-local=trust", "--auth-host=scram-sha-256"])
            .arg("--locale=C");
        if let Some((uid, gid)) = user {
            initdb.uid(uid).gid(gid);
        }
        let out = initdb.output().expect("initdb runs");
        assert!(
            out.status.success(),
            "initdb failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut db = Self {
            child: None,
            dir,
            user,
            port: free_port(),
        };
        db.run();
        db.exec(&format!("ALTER USER postgres PASSWORD '{ROOT_PASSWORD}'"));
        db
    }

    fn run(&mut self) {
        let log = std::fs::File::create(self.dir.path().join("server.log")).unwrap();
        if let Some((uid, gid)) = self.user {
            std::os::unix::fs::chown(self.dir.path().join("server.log"), Some(uid), Some(gid))
                .unwrap();
        }
        let mut server = Command::new(bin_dir().join("postgres"));
        server
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-k")
            .arg(self.dir.path())
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "max_connections=200",
                "-c",
                "shared_buffers=128MB",
            ])
            .stdout(Stdio::null())
            .stderr(log);
        if let Some((uid, gid)) = self.user {
            server.uid(uid).gid(gid);
        }
        self.child = Some(server.spawn().expect("postgres starts"));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if self.try_exec("SELECT 1").is_ok() {
                break;
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!("postgres exited ({status}): {}", self.server_log());
            }
            assert!(
                Instant::now() < deadline,
                "postgres did not start within 60 s: {}",
                self.server_log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Turns TLS on (a reload, no restart) with a server certificate for
    /// `localhost` and 127.0.0.1 signed by a throwaway CA made with the
    /// `openssl` command; returns the CA certificate's path (for
    /// `sslrootcert`).
    pub fn enable_tls(&self) -> PathBuf {
        let dir = self.dir.path().join("tls");
        std::fs::create_dir_all(&dir).unwrap();
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(&dir)
                .output()
                .expect("openssl runs (apt-get install openssl)");
            assert!(
                out.status.success(),
                "openssl {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let mut ca = vec!["req", "-x509", "-days", "2", "-subj", "/CN=sluice test CA"];
        ca.extend(ec);
        ca.extend(["-keyout", "ca.key", "-out", "ca.pem"]);
        openssl(&ca);
        let mut request = vec!["req", "-subj", "/CN=localhost"];
        request.extend(ec);
        request.extend(["-keyout", "server.key", "-out", "server.csr"]);
        openssl(&request);
        std::fs::write(
            dir.join("san.ext"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
        )
        .unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            "server.crt",
        ]);
        // The server reads its key only if no one else may.
        use std::os::unix::fs::PermissionsExt;
        let key = dir.join("server.key");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        if let Some((uid, gid)) = self.user {
            for file in ["server.key", "server.crt"] {
                std::os::unix::fs::chown(dir.join(file), Some(uid), Some(gid)).unwrap();
            }
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).unwrap();
        }
        self.exec(&format!(
            "ALTER SYSTEM SET ssl_cert_file = '{}'; ALTER SYSTEM SET ssl_key_file = '{}'; \
             ALTER SYSTEM SET ssl = on; SELECT pg_reload_conf();",
            dir.join("server.crt").display(),
            key.display()
        ));
        // The reload is asynchronous: wait until the setting shows.
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.exec("SHOW ssl").trim() != "on" {
            assert!(
                Instant::now() < deadline,
                "TLS did not come on: {}",
                self.server_log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        dir.join("ca.pem")
    }

    /// The server's log.
    pub fn server_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// `postgres://user[:password]@127.0.0.1:port/database`.
    pub fn url(&self, user: &str, password: Option<&str>, database: &str) -> String {
        let auth = match password {
            Some(p) => format!("{user}:{p}"),
            None => user.to_string(),
        };
        format!("postgres://{auth}@127.0.0.1:{}/{database}", self.port)
    }

    /// The superuser's URL to the `postgres` database.
    pub fn root_url(&self) -> String {
        self.url("postgres", Some(ROOT_PASSWORD), "postgres")
    }

    /// Runs SQL as the superuser in the `postgres` database; panics with the
    /// server's message on an error.
    pub fn exec(&self, sql: &str) -> String {
        self.try_exec(sql)
            .unwrap_or_else(|e| panic!("SQL failed: {}\n{e}", &sql[..sql.len().min(2000)]))
    }

    /// Runs SQL (fed on stdin; stops at the first error) and returns its
    /// unaligned, tuples-only output, or the error text.
    pub fn try_exec(&self, sql: &str) -> Result<String, String> {
        use std::io::Write;
        let psql = bin_dir().join("psql");
        let mut child = Command::new(psql)
            .arg("-h")
            .arg(self.dir.path())
            .args(["-U", "postgres", "-d", "postgres"])
            .args(["-p", &self.port.to_string()])
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-f", "-"])
            .env("PGCONNECT_TIMEOUT", "5")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("psql runs");
        let mut stdin = child.stdin.take().expect("piped");
        let text = sql.to_string();
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(text.as_bytes());
        });
        let out = child.wait_with_output().expect("psql ends");
        let _ = writer.join();
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // A fast shutdown (SIGINT) lets the server release its shared
            // memory; SIGKILL if it does not end in 10 s.
            let _ = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if matches!(child.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
