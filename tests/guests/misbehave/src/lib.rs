//! A sink that misbehaves on request, for the runtime's containment tests.
//!
//! `mode` picks what `write` does (`open`, `validate-config` and `flush` behave,
//! except for the `*-config` and `flush-*` modes). Probing modes report what
//! happened as the error message, so a test can assert on it: `denied: ...`
//! when the host refused, `ALLOWED: ...` when it did not.

use serde::Deserialize;
use sluice_sdk::{BatchView, Error, Sink};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Config {
    mode: String,
    /// A path, address or URL for the probing modes.
    #[serde(default)]
    target: String,
}

pub struct Misbehave {
    config: Config,
    rows: u64,
}

impl Sink for Misbehave {
    type Config = Config;

    fn validate(config: &Config) -> Result<(), Error> {
        match config.mode.as_str() {
            "reject-config" => Err(Error::config("mode reject-config: this config is refused")),
            _ => Ok(()),
        }
    }

    fn open(config: Config) -> Result<Self, Error> {
        Ok(Self { config, rows: 0 })
    }

    fn write(&mut self, batch: BatchView<'_>) -> Result<(), Error> {
        self.rows += batch.row_count() as u64;
        let target = self.config.target.as_str();
        match self.config.mode.as_str() {
            "ok" | "hang-close" | "flush-fatal" => Ok(()),
            "oom" => {
                let mut hog: Vec<Vec<u8>> = Vec::new();
                loop {
                    let mut chunk = vec![0u8; 1 << 20];
                    chunk[hog.len() % (1 << 20)] = 1;
                    hog.push(chunk);
                }
            }
            "try-oom" => {
                // Asks for more than its quota without aborting (as a garbage
                // collector does: a refused growth makes it collect), then
                // goes on with what it has.
                let mut hog: Vec<u8> = Vec::new();
                match hog.try_reserve_exact(1 << 30) {
                    Ok(()) => Err(Error::fatal("ALLOWED: reserved 1 GiB")),
                    Err(_) => {
                        hog.extend_from_slice(&[1u8; 4096]);
                        Ok(())
                    }
                }
            }
            "loop" => {
                let mut x = 0u64;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
            "sleep" => {
                // Waits in a host call (the WASI clock), using no CPU.
                let ms: u64 = target.parse().unwrap_or(1000);
                std::thread::sleep(std::time::Duration::from_millis(ms));
                Ok(())
            }
            "spin-for" => {
                // Busy for `target` ms of wall time: CPU in guest code.
                let ms: u64 = target.parse().unwrap_or(1000);
                let start = std::time::Instant::now();
                let mut x = 0u64;
                while start.elapsed() < std::time::Duration::from_millis(ms) {
                    for _ in 0..1000 {
                        x = std::hint::black_box(x.wrapping_add(1));
                    }
                }
                Ok(())
            }
            "panic" => panic!("misbehave: deliberate panic in write"),
            "noisy" | "noisy-panic" => {
                for i in 0..2000 {
                    eprintln!("misbehave: line {i} of chatter on stderr, long enough to add up");
                }
                if self.config.mode == "noisy-panic" {
                    panic!("misbehave: panic after a lot of output");
                }
                Ok(())
            }
            "error-retryable" => Err(Error::retryable("mode error-retryable")),
            "metrics" => {
                // Counts its writes and sets one good gauge beside values the host
                // must refuse (NaN, infinities, empty names), then fails retryably
                // so that the changefeed restarts with a new processor.
                use sluice_sdk::host::{counter_add, gauge_set};
                counter_add("writes", 1);
                counter_add("", 1);
                gauge_set("depth", 2.5);
                gauge_set("depth", f64::NAN);
                gauge_set("nan", f64::NAN);
                gauge_set("inf", f64::INFINITY);
                gauge_set("neg-inf", f64::NEG_INFINITY);
                gauge_set("", 1.0);
                Err(Error::retryable("mode metrics"))
            }
            "error-fatal" => Err(Error::fatal("mode error-fatal")),
            "error-config" => Err(Error::config("mode error-config")),
            "read-file" => match std::fs::read(target) {
                Ok(bytes) => Err(Error::fatal(format!(
                    "ALLOWED: read {} bytes of {target}",
                    bytes.len()
                ))),
                Err(e) => Err(Error::retryable(format!("denied: read {target}: {e}"))),
            },
            "write-file" => match std::fs::write(target, b"written by misbehave\n") {
                Ok(()) => Err(Error::fatal(format!("ALLOWED: wrote {target}"))),
                Err(e) => Err(Error::retryable(format!("denied: write {target}: {e}"))),
            },
            "connect" => match std::net::TcpStream::connect(target) {
                Ok(_) => Err(Error::fatal(format!("ALLOWED: connected to {target}"))),
                Err(e) => Err(Error::retryable(format!("denied: connect {target}: {e}"))),
            },
            "hang-read" => {
                use std::io::Read;
                let mut stream = std::net::TcpStream::connect(target)
                    .map_err(|e| Error::retryable(format!("denied: connect {target}: {e}")))?;
                let mut buf = [0u8; 16];
                let n = stream
                    .read(&mut buf)
                    .map_err(|e| Error::retryable(format!("read failed: {e}")))?;
                Err(Error::fatal(format!("ALLOWED: read {n} bytes")))
            }
            "http" => http_get(target),
            "hold-files" => {
                // Opens `target` (a file) again and again, keeping every handle.
                let mut held = Vec::new();
                loop {
                    match std::fs::File::open(target) {
                        Ok(f) => held.push(f),
                        Err(e) => {
                            return Err(Error::retryable(format!(
                                "open failed after {} files: {e}",
                                held.len()
                            )));
                        }
                    }
                }
            }
            "hold-fields" => hold_fields(),
            "log-flood" => {
                // 10,000 lines at once, each trying to forge a second host line.
                for i in 0..10_000 {
                    sluice_sdk::host::warn(&format!("line {i}\nERROR sluice: forged host line"));
                }
                Ok(())
            }
            "huge-error" => Err(Error::fatal("E".repeat(2 << 20))),
            other => Err(Error::config(format!("unknown mode `{other}`"))),
        }
    }

    fn flush(&mut self, _ts: u64) -> Result<(), Error> {
        match self.config.mode.as_str() {
            "flush-panic" => panic!("misbehave: deliberate panic in flush"),
            "flush-fatal" => Err(Error::fatal(
                "mode flush-fatal: the target refused the flush",
            )),
            _ => Ok(()),
        }
    }

    fn close(&mut self) -> Result<(), Error> {
        if self.config.mode == "hang-close" {
            // Waits (in a host call) far longer than any deadline.
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
        Ok(())
    }
}

/// Creates wasi:http header fields with 16 KiB values and keeps them across
/// calls: 64 more per call. Host memory, not linear memory.
#[cfg(target_arch = "wasm32")]
fn hold_fields() -> Result<(), Error> {
    use wasip2::http::types::Fields;
    thread_local! {
        static HELD: std::cell::RefCell<Vec<Fields>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let value = vec![b'v'; 16 << 10];
    HELD.with(|held| {
        for _ in 0..64 {
            let fields = Fields::new();
            let _ = fields.append("x-big", &value);
            held.borrow_mut().push(fields);
        }
    });
    Ok(())
}

#[cfg(not(target_arch = "wasm32"))]
fn hold_fields() -> Result<(), Error> {
    Err(Error::fatal("hold-fields runs only as a component"))
}

/// GET `url` (`http://host:port/path`) through wasi:http; report the outcome.
#[cfg(target_arch = "wasm32")]
fn http_get(url: &str) -> Result<(), Error> {
    use wasip2::http::outgoing_handler;
    use wasip2::http::types::{Fields, OutgoingRequest, Scheme};

    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| Error::config("http target must start with http://"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let request = OutgoingRequest::new(Fields::new());
    let _ = request.set_scheme(Some(&Scheme::Http));
    let _ = request.set_authority(Some(authority));
    let _ = request.set_path_with_query(Some(path));
    let response = match outgoing_handler::handle(request, None) {
        Ok(future) => {
            future.subscribe().block();
            match future.get() {
                Some(Ok(Ok(resp))) => Ok(resp.status()),
                Some(Ok(Err(code))) => Err(format!("{code:?}")),
                Some(Err(())) => Err("response already taken".to_string()),
                None => Err("no response".to_string()),
            }
        }
        Err(code) => Err(format!("{code:?}")),
    };
    match response {
        Ok(status) => Err(Error::fatal(format!(
            "ALLOWED: GET {url} answered {status}"
        ))),
        Err(e) => Err(Error::retryable(format!("denied: GET {url}: {e}"))),
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn http_get(_url: &str) -> Result<(), Error> {
    Err(Error::fatal("http mode only runs inside the host"))
}

sluice_sdk::export_sink!(Misbehave);
