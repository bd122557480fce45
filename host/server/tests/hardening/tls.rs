//! TLS on both listeners: the CLI with `--ca`, `/api/v1` through curl, a
//! client that does not trust the certificate refused, a renewed certificate
//! taken on SIGHUP, and a damaged one refused while the one in use stays.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::server::Server;

/// A new CA and a certificate it signed for `localhost` and `127.0.0.1`:
/// (ca.pem, cert.pem, key.pem) under `dir`, named after `name`.
fn ca_and_cert(dir: &Path, name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("{name} test CA"));
    let ca =
        rcgen::CertifiedIssuer::self_signed(params, rcgen::KeyPair::generate().unwrap()).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
        .unwrap()
        .signed_by(&key, &*ca)
        .unwrap();
    let paths = (
        dir.join(format!("{name}-ca.pem")),
        dir.join(format!("{name}-cert.pem")),
        dir.join(format!("{name}-key.pem")),
    );
    std::fs::write(&paths.0, ca.pem()).unwrap();
    std::fs::write(&paths.1, cert.pem()).unwrap();
    std::fs::write(&paths.2, key.serialize_pem()).unwrap();
    paths
}

/// `sluice cli` against `url` with `ca` (if any): (ok, stdout, stderr).
fn cli(server: &Server, url: &str, ca: Option<&Path>, args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.args(["cli", "--server", url])
        .env("SLUICE_TOKEN", server.admin_token())
        .env_remove("SLUICE_CA");
    if let Some(ca) = ca {
        cmd.arg("--ca").arg(ca);
    }
    let out = cmd.args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `GET path` over TLS with curl, trusting `ca`: (HTTP code, body).
fn curl(server: &Server, path: &str, ca: &Path) -> Option<(u16, String)> {
    let url = format!("{}{path}", server.http.replacen("http://", "https://", 1));
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "10",
            "-w",
            "\n%{http_code}",
            "--cacert",
        ])
        .arg(ca)
        .args([
            "-H",
            &format!("Authorization: Bearer {}", server.admin_token()),
        ])
        .arg(&url)
        .output()
        .expect("curl (installed by cargo xtask test)");
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap();
    Some((code.parse().unwrap(), body.to_string()))
}

#[test]
fn both_listeners_speak_tls_and_a_renewed_certificate_is_taken_on_sighup() {
    let dir = tempfile::tempdir().unwrap();
    let (ca_a, cert_a, key_a) = ca_and_cert(dir.path(), "a");
    let (cert, key) = (dir.path().join("server.pem"), dir.path().join("server.key"));
    std::fs::copy(&cert_a, &cert).unwrap();
    std::fs::copy(&key_a, &key).unwrap();
    let server = Server::start(
        &dir.path().join("data"),
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    let https = server.grpc.replacen("http://", "https://", 1);
    let whoami = |url: &str, ca: Option<&Path>| {
        cli(&server, url, ca, &["--output", "json", "token", "whoami"])
    };
    let (ok, out, err) = whoami(&https, Some(&ca_a));
    assert!(ok, "{err}");
    assert!(out.contains("\"role\": \"admin\""), "{out}");
    // `--ca` with the http:// URL talks TLS too.
    assert!(whoami(&server.grpc, Some(&ca_a)).0);
    // Without the CA: told what to give; in plain text: no answer.
    let (ok, _, err) = whoami(&https, None);
    assert!(!ok);
    assert!(err.contains("speaks TLS: give the CA certificate"), "{err}");
    let (ok, _, _) = whoami(&server.grpc, None);
    assert!(!ok, "plain text reached a TLS listener");
    // HTTP over TLS.
    let (code, body) = curl(&server, "/api/v1/status", &ca_a).expect("curl over TLS");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"healthy\":true"), "{body}");
    let plain = {
        use std::io::{Read, Write};
        let host = server.http.trim_start_matches("http://");
        let mut s = std::net::TcpStream::connect(host).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = write!(
            s,
            "GET /healthz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        );
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        answer
    };
    assert!(
        !plain.starts_with(b"HTTP/1.1 200"),
        "plain HTTP reached a TLS listener"
    );

    // A renewed certificate from another CA, taken on SIGHUP.
    let (ca_b, cert_b, key_b) = ca_and_cert(dir.path(), "b");
    std::fs::copy(&cert_b, &cert).unwrap();
    std::fs::copy(&key_b, &key).unwrap();
    let hup = |pid: u32| {
        assert!(
            Command::new("kill")
                .args(["-HUP", &pid.to_string()])
                .status()
                .unwrap()
                .success()
        );
    };
    hup(server.child.id());
    server.wait_for("the renewed certificate", Duration::from_secs(10), || {
        whoami(&https, Some(&ca_b)).0
    });
    assert!(
        !whoami(&https, Some(&ca_a)).0,
        "the old certificate is still served"
    );
    assert!(curl(&server, "/api/v1/status", &ca_a).is_none());
    assert_eq!(
        curl(&server, "/api/v1/status", &ca_b).map(|r| r.0),
        Some(200)
    );
    // A damaged file: refused, the certificate in use stays.
    std::fs::write(&cert, "not a certificate").unwrap();
    hup(server.child.id());
    server.wait_for("the refusal in the log", Duration::from_secs(10), || {
        server
            .stderr
            .lock()
            .unwrap()
            .contains("The TLS certificate could not be read again")
    });
    assert!(whoami(&https, Some(&ca_b)).0);
    server.stop();
}

#[test]
fn a_server_refuses_to_start_with_a_certificate_that_does_not_load() {
    let dir = tempfile::tempdir().unwrap();
    let (_, cert, _) = ca_and_cert(dir.path(), "a");
    let (_, _, other_key) = ca_and_cert(dir.path(), "b");
    for (cert, key, want) in [
        (
            dir.path().join("missing.pem"),
            other_key.clone(),
            "--tls-cert",
        ),
        (
            cert.clone(),
            other_key.clone(),
            "the certificate and key do not go together",
        ),
        (cert.clone(), cert.clone(), "--tls-key"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["server", "--data-dir"])
            .arg(dir.path().join("data"))
            .args([
                "--addr",
                "127.0.0.1:0",
                "--http-addr",
                "127.0.0.1:0",
                "--tls-cert",
            ])
            .arg(&cert)
            .arg("--tls-key")
            .arg(&key)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(err.contains(want), "want `{want}`: {err}");
    }
}

/// Two servers of a cluster with TLS and `--peer-ca`: calls made through the
/// standby reach the owner over TLS, and a table moved to the standby's
/// capture is shipped to it over TLS (the split run's checkpoint, the
/// minimum over both captures, moves on). Without `--peer-ca` a server of a
/// TLS cluster is refused at start, told what to give.
#[test]
fn a_cluster_with_tls_forwards_calls_and_ships_tables_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = ca_and_cert(dir.path(), "cluster");
    let etcd = sluice_tests::etcd::PrivateEtcd::start();
    etcd.wait_listening();
    let store = format!("file://{}", dir.path().join("plugins").display());
    let (ca_s, cert_s, key_s) = (
        ca.to_str().unwrap(),
        cert.to_str().unwrap(),
        key.to_str().unwrap(),
    );
    let tls = [
        "--etcd",
        etcd.endpoint.as_str(),
        "--plugin-store",
        store.as_str(),
        "--lease-ttl-s",
        "3",
        "--tls-cert",
        cert_s,
        "--tls-key",
        key_s,
    ];
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["server", "--data-dir"])
        .arg(dir.path().join("refused"))
        .args(["--addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
        .args(tls)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("give --peer-ca FILE"), "{err}");

    let mut args = tls.to_vec();
    args.extend(["--peer-ca", ca_s]);
    let a = Server::start(&dir.path().join("a"), &args);
    let b = Server::start_standby(&dir.path().join("b"), &args, &a);
    let run = |s: &Server, args: &[&str]| -> String {
        let https = s.grpc.replacen("http://", "https://", 1);
        let mut all = vec!["--output", "json"];
        all.extend_from_slice(args);
        let (ok, out, err) = cli(s, &https, Some(&ca), &all);
        assert!(ok, "{args:?}: {err}");
        out
    };
    let json = |s: &Server, args: &[&str]| -> serde_json::Value {
        serde_json::from_str(&run(s, args)).unwrap()
    };
    // Through the standby, forwarded to the owner.
    let plugin = sluice_tests::plugin_path("sink-blackhole");
    run(
        &b,
        &[
            "plugin",
            "upload",
            plugin.to_str().unwrap(),
            "--id",
            "sink-blackhole@0.1.0",
            "--kind",
            "sink",
        ],
    );
    let config = dir.path().join("feed.toml");
    std::fs::write(
        &config,
        "[source]\ntype = \"datagen\"\ntotal-rows = 0\nrate = 2000\n\n[sink]\nplugin = \"sink-blackhole@0.1.0\"\n",
    )
    .unwrap();
    run(
        &b,
        &[
            "changefeed",
            "create",
            "-c",
            "over-tls",
            "--config",
            config.to_str().unwrap(),
        ],
    );
    let query = || json(&b, &["changefeed", "query", "-c", "over-tls"]);
    b.wait_for("the changefeed to run", Duration::from_secs(30), || {
        query()["status"]["capture"]
            .as_str()
            .is_some_and(|c| !c.is_empty())
    });
    // The HTTP API through the standby: forwarded to the owner over TLS
    // (verified against --peer-ca), the owner's answer as it gave it.
    let id_of = |name: &str| {
        std::fs::read_to_string(dir.path().join(name).join("capture-id"))
            .unwrap()
            .trim()
            .to_string()
    };
    let owner = id_of("a");
    let (code, body) = curl(&b, "/api/v1/status", &ca).expect("curl through the standby");
    assert_eq!(code, 200, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["capture"], owner.as_str(), "{body}");
    assert_eq!(status["changefeeds"], 1, "{body}");
    let (code, body) = curl(&b, "/api/v1/changefeeds/default/over-tls", &ca).unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("sink-blackhole@0.1.0"), "{body}");
    // Its own metrics, not forwarded: the standby's capture series.
    let (code, body) = curl(&b, "/metrics", &ca).unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains(&format!("sluice_capture_info{{capture=\"{}\"", id_of("b"))),
        "{body}"
    );
    let reader = query()["status"]["capture"].as_str().unwrap().to_string();
    let captures = json(&b, &["capture", "list"]);
    let other = captures
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_string())
        .find(|c| *c != reader)
        .expect("two captures");
    run(
        &b,
        &[
            "changefeed",
            "move-table",
            "-c",
            "over-tls",
            "--table",
            "shop.orders",
            "--capture",
            &other,
        ],
    );
    b.wait_for("the split run", Duration::from_secs(60), || {
        query()["processors"]
            .as_array()
            .is_some_and(|p| p.len() == 2)
    });
    let at = query()["checkpoint-ts"].as_u64().unwrap();
    b.wait_for(
        "the split run's checkpoint to move",
        Duration::from_secs(60),
        || query()["checkpoint-ts"].as_u64().unwrap() > at,
    );
    let logs = [b.stop(), a.stop()].join("\n");
    assert!(
        logs.contains("Receiving this capture's tables from the reading capture."),
        "{logs}"
    );
    assert!(!logs.contains("shipment:"), "{logs}");
}
