//! What the server benchmarks share: a server process, a gRPC connection,
//! uploads.
#![allow(dead_code, reason = "each benchmark uses a different part")]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sluice_api::client::{Authorized, Bearer};
use sluice_api::v1 as pb;
use sluice_api::v1::plugin_service_client::PluginServiceClient;
use tonic::transport::Channel;

pub struct Server {
    pub child: Child,
    pub url: String,
    /// `http://host:port` of the HTTP listener.
    pub http: String,
    /// The admin token the server keeps in its data dir.
    pub token_file: PathBuf,
    /// When it said it serves as the owner (a standby says so later).
    pub ready: std::sync::Arc<std::sync::Mutex<Option<Instant>>>,
}

impl Server {
    /// Starts a server on free ports with `extra` arguments (the owner, or a
    /// standby of a cluster: see [`Server::ready`]).
    pub fn start(data: &Path, extra: &[&str]) -> (Server, Instant) {
        let started = Instant::now();
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["server", "--data-dir"])
            .arg(data)
            .args(["--addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
            .args(extra)
            .env("SLUICE_LOG", "error")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("sluice server starts");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        let addr = words.get(4).expect("ready line").to_string();
        let http = words.get(6).expect("ready line").to_string();
        let ready = std::sync::Arc::new(std::sync::Mutex::new(
            line.starts_with("sluice server ready").then(Instant::now),
        ));
        let seen = ready.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while out.read_line(&mut line).unwrap_or(0) > 0 {
                if line.starts_with("sluice server ready") {
                    *seen.lock().unwrap() = Some(Instant::now());
                }
                line.clear();
            }
        });
        (
            Server {
                child,
                url: format!("http://{addr}"),
                http: format!("http://{http}"),
                token_file: data.join("admin-token"),
                ready,
            },
            started,
        )
    }

    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn plugin(name: &str) -> PathBuf {
    // `cargo xtask build-plugins` puts them here, whatever CARGO_TARGET_DIR is.
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target");
    let shipped = target.join("plugins").join(format!("{name}.wasm"));
    if shipped.exists() {
        shipped
    } else {
        target.join("test-plugins").join(format!("{name}.wasm"))
    }
}

pub fn id(name: &str) -> pb::ChangefeedRef {
    pb::ChangefeedRef {
        tenant: "default".into(),
        name: name.into(),
    }
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A connection to `server` that sends its admin token with every call.
pub async fn connect(server: &Server) -> Authorized {
    let url = &server.url;
    let token = std::fs::read_to_string(&server.token_file).expect("the admin token");
    let bearer = Bearer::new(Some(&token)).unwrap();
    for _ in 0..100 {
        if let Ok(c) = Channel::from_shared(url.to_string())
            .unwrap()
            .connect()
            .await
        {
            return Authorized::new(c, bearer);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("cannot connect to {url}");
}

/// Uploads the built plugin `name` as `name@0.1.0` of tenant `default`.
pub async fn upload(channel: Authorized, name: &str, world: pb::PluginWorld) {
    let bytes = std::fs::read(plugin(name)).expect("run cargo xtask build-plugins");
    upload_bytes(channel, "default", name, "0.1.0", world, bytes).await;
}

/// The bytes of the built plugin `name`.
pub fn plugin_bytes(name: &str) -> Vec<u8> {
    std::fs::read(plugin(name)).expect("run cargo xtask build-plugins")
}

/// Uploads `bytes` as `tenant`'s `name@version` of world `world`.
pub async fn upload_bytes(
    channel: Authorized,
    tenant: &str,
    name: &str,
    version: &str,
    world: pb::PluginWorld,
    bytes: Vec<u8>,
) {
    let messages = vec![
        pb::UploadPluginRequest {
            part: Some(pb::upload_plugin_request::Part::Header(pb::PluginHeader {
                id: Some(pb::PluginRef {
                    tenant: tenant.into(),
                    name: name.into(),
                    version: version.into(),
                }),
                world: world.into(),
                sha256: String::new(),
            })),
        },
        pb::UploadPluginRequest {
            part: Some(pb::upload_plugin_request::Part::Chunk(bytes)),
        },
    ];
    PluginServiceClient::new(channel)
        .upload_plugin(tokio_stream::iter(messages))
        .await
        .unwrap_or_else(|e| panic!("upload {tenant}/{name}@{version}: {e}"));
}
