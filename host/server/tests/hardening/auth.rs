//! Tenancy against an adversarial caller: every route of every gRPC service
//! (enumerated from the service definitions, so a route added later without
//! a case fails here) and every HTTP route, called with no token, a malformed,
//! a forged, a revoked and an expired token, another tenant's token and a
//! viewer's; each gets its exact refusal. Tokens never show anywhere but in
//! the one answer that made them.

use std::time::Duration;

use prost::Message;
use sluice_api::v1 as pb;

use super::{RawCodec, runtime};
use crate::common::server::Server;

/// What a route needs of its caller, acting on tenant `acme`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Needs {
    /// Any valid token (cluster-wide facts, the caller's own token).
    AnyToken,
    /// A token that may read tenant `acme`.
    Read,
    /// A token that may change tenant `acme`.
    Write,
    /// A token that may manage `acme`'s tokens.
    Tokens,
    /// The admin role.
    Admin,
}

/// Every `rpc` of every `service` in the proto file: `(service, method)`.
fn routes_of_the_service_definitions() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../proto/sluice/v1/admin.proto"
    ))
    .unwrap();
    let mut service = None;
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("service ") {
            service = Some(rest.trim_end_matches('{').trim().to_string());
        } else if let Some(rest) = line.strip_prefix("rpc ") {
            let method = rest.split('(').next().unwrap().trim().to_string();
            out.push((service.clone().expect("an rpc inside a service"), method));
        } else if line == "}" {
            service = None;
        }
    }
    assert!(out.len() >= 30, "{out:?}");
    out
}

fn feed(name: &str) -> Option<pb::ChangefeedRef> {
    Some(pb::ChangefeedRef {
        tenant: "acme".into(),
        name: name.into(),
    })
}

/// A request of `method` naming tenant `acme` (the token `acme_token` for
/// revoke), and what it needs.
fn case(method: &str, acme_token: &str) -> Option<(Vec<u8>, Needs)> {
    use Needs::*;
    let plugin = || pb::PluginRef {
        tenant: "acme".into(),
        name: "sink-blackhole".into(),
        version: "0.1.0".into(),
    };
    Some(match method {
        "CreateChangefeed" => (
            pb::CreateChangefeedRequest {
                id: feed("f"),
                config_toml: String::new(),
                start_ts: 0,
                target_ts: 0,
            }
            .encode_to_vec(),
            Write,
        ),
        "GetChangefeed" | "GetStatus" | "GetSyncedStatus" | "GetShadow" => {
            (feed("f").unwrap().encode_to_vec(), Read)
        }
        "PauseChangefeed" | "RemoveChangefeed" | "StopShadow" => {
            (feed("f").unwrap().encode_to_vec(), Write)
        }
        "ListChangefeeds" => (
            pb::ListChangefeedsRequest {
                tenant: "acme".into(),
            }
            .encode_to_vec(),
            Read,
        ),
        "UpdateChangefeed" => (
            pb::UpdateChangefeedRequest {
                id: feed("f"),
                ..Default::default()
            }
            .encode_to_vec(),
            Write,
        ),
        "ResumeChangefeed" => (
            pb::ResumeChangefeedRequest {
                id: feed("f"),
                overwrite_checkpoint_ts: None,
            }
            .encode_to_vec(),
            Write,
        ),
        "SwapSink" => (
            pb::SwapSinkRequest {
                id: feed("f"),
                plugin: "sink-blackhole@0.2.0".into(),
                ..Default::default()
            }
            .encode_to_vec(),
            Write,
        ),
        "StartShadow" => (
            pb::StartShadowRequest {
                id: feed("f"),
                plugin: "sink-blackhole@0.2.0".into(),
                ..Default::default()
            }
            .encode_to_vec(),
            Write,
        ),
        "PromoteShadow" => (
            pb::PromoteShadowRequest {
                id: feed("f"),
                ..Default::default()
            }
            .encode_to_vec(),
            Write,
        ),
        "ListCaptures" => (pb::ListCapturesRequest {}.encode_to_vec(), AnyToken),
        "GetOwner" => (pb::GetOwnerRequest {}.encode_to_vec(), AnyToken),
        "DrainCapture" => (
            pb::DrainCaptureRequest {
                capture_id: "nobody".into(),
                cancel: false,
            }
            .encode_to_vec(),
            Admin,
        ),
        "MoveChangefeed" => (
            pb::MoveChangefeedRequest {
                id: feed("f"),
                capture_id: "nobody".into(),
            }
            .encode_to_vec(),
            Admin,
        ),
        "RebalanceChangefeeds" => (
            pb::RebalanceChangefeedsRequest::default().encode_to_vec(),
            Admin,
        ),
        "RebalanceTables" => (
            pb::RebalanceTablesRequest {
                id: feed("f"),
                by: "tables".into(),
            }
            .encode_to_vec(),
            Admin,
        ),
        "MoveTable" => (
            pb::MoveTableRequest {
                id: feed("f"),
                table: "shop.orders".into(),
                capture_id: "nobody".into(),
            }
            .encode_to_vec(),
            Admin,
        ),
        "Health" => (pb::HealthRequest {}.encode_to_vec(), AnyToken),
        "ListProcessors" => (
            pb::ListProcessorsRequest {
                tenant: "acme".into(),
                ..Default::default()
            }
            .encode_to_vec(),
            Read,
        ),
        "UploadPlugin" => (
            pb::UploadPluginRequest {
                part: Some(pb::upload_plugin_request::Part::Header(pb::PluginHeader {
                    id: Some(plugin()),
                    world: pb::PluginWorld::Sink.into(),
                    sha256: String::new(),
                })),
            }
            .encode_to_vec(),
            Write,
        ),
        "ListPlugins" => (
            pb::ListPluginsRequest {
                tenant: "acme".into(),
            }
            .encode_to_vec(),
            Read,
        ),
        "GetPlugin" => (plugin().encode_to_vec(), Read),
        "DeletePlugin" => (plugin().encode_to_vec(), Write),
        "RolloutPlugin" => (
            pb::RolloutRequest {
                tenant: "acme".into(),
                from: "sink-blackhole@0.1.0".into(),
                to: "sink-blackhole@0.2.0".into(),
                ..Default::default()
            }
            .encode_to_vec(),
            Write,
        ),
        "SetTenantQuota" => (
            pb::SetTenantQuotaRequest {
                name: "acme".into(),
                quota: None,
            }
            .encode_to_vec(),
            Admin,
        ),
        "CreateTenant" | "RemoveTenant" => (
            pb::TenantRef {
                name: "acme".into(),
            }
            .encode_to_vec(),
            Admin,
        ),
        "GetTenant" => (
            pb::TenantRef {
                name: "acme".into(),
            }
            .encode_to_vec(),
            Read,
        ),
        "ListTenants" => (pb::ListTenantsRequest {}.encode_to_vec(), AnyToken),
        "CreateToken" => (
            pb::CreateTokenRequest {
                tenant: "acme".into(),
                role: "viewer".into(),
                ..Default::default()
            }
            .encode_to_vec(),
            Tokens,
        ),
        "ListTokens" => (
            pb::ListTokensRequest {
                tenant: "acme".into(),
            }
            .encode_to_vec(),
            Tokens,
        ),
        "RevokeToken" => (
            pb::TokenRef {
                id: acme_token.into(),
            }
            .encode_to_vec(),
            Tokens,
        ),
        "WhoAmI" => (pb::WhoAmIRequest {}.encode_to_vec(), AnyToken),
        "ListAudit" => (
            pb::ListAuditRequest {
                tenant: "acme".into(),
                ..Default::default()
            }
            .encode_to_vec(),
            Tokens,
        ),
        _ => return None,
    })
}

/// Calls `path` with `body` as its one message and `authorization`, as any
/// client could (every kind of method takes a stream of one message);
/// `Ok` when the call was answered without an error status.
async fn call(
    server: &Server,
    path: &str,
    body: Vec<u8>,
    authorization: Option<&str>,
) -> Result<(), tonic::Status> {
    let channel = tonic::transport::Channel::from_shared(server.grpc.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let mut request = tonic::Request::new(tokio_stream::iter(vec![body]));
    if let Some(value) = authorization {
        request
            .metadata_mut()
            .insert("authorization", value.parse().unwrap());
    }
    let path = http::uri::PathAndQuery::try_from(path.to_string()).unwrap();
    let mut stream = grpc.streaming(request, path, RawCodec).await?.into_inner();
    // A streamed answer may carry its error after the headers.
    let first = tokio::time::timeout(Duration::from_secs(5), stream.message()).await;
    match first {
        Ok(Err(status)) => Err(status),
        _ => Ok(()),
    }
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// `token create` through the CLI with `as_token`: (id, whole token).
fn make_token(server: &Server, as_token: &str, args: &[&str]) -> (String, String) {
    let mut all = vec!["--output", "json", "token", "create"];
    all.extend_from_slice(args);
    let (ok, out, err) = server.cli_with_token(as_token, &all);
    assert!(ok, "token create {args:?}: {err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    (
        v["id"].as_str().unwrap().to_string(),
        v["token"].as_str().unwrap().to_string(),
    )
}

#[test]
fn every_route_gives_each_wrong_caller_its_exact_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let admin = server.admin_token();
    for tenant in ["acme", "globex"] {
        server.json(&["tenant", "create", tenant]);
    }
    let (acme_admin_id, acme_admin) = make_token(
        &server,
        &admin,
        &["--tenant", "acme", "--role", "tenant-admin"],
    );
    let (viewer_id, viewer) =
        make_token(&server, &admin, &["--tenant", "acme", "--role", "viewer"]);
    let (globex_id, globex) = make_token(
        &server,
        &admin,
        &["--tenant", "globex", "--role", "tenant-admin"],
    );
    let (revoked_id, revoked) = make_token(
        &server,
        &admin,
        &["--tenant", "acme", "--role", "tenant-admin"],
    );
    server.json(&["token", "revoke", &revoked_id]);
    let (expired_id, expired) = make_token(
        &server,
        &acme_admin,
        &["--role", "viewer", "--expires-in", "1s"],
    );
    std::thread::sleep(Duration::from_millis(1_200));
    // The same id with a wrong secret.
    let forged = format!("sluice_{acme_admin_id}_{}", "0".repeat(64));

    let routes = routes_of_the_service_definitions();
    let rt = runtime();
    let mut checked = 0;
    for (service, method) in &routes {
        let (body, needs) = case(method, &viewer_id).unwrap_or_else(|| {
            panic!("the route {service}/{method} has no case here: add one (and a check in its handler)")
        });
        let path = format!("/sluice.v1.{service}/{method}");
        let run = |authorization: Option<String>| {
            rt.block_on(call(&server, &path, body.clone(), authorization.as_deref()))
        };
        let refused = |authorization: Option<String>, code: tonic::Code, message: &str| {
            let err = run(authorization.clone()).expect_err(&path);
            assert_eq!(
                (err.code(), err.message()),
                (code, message),
                "{path} with {authorization:?}"
            );
        };
        let unauthenticated = tonic::Code::Unauthenticated;
        refused(
            None,
            unauthenticated,
            "no token: send the header `authorization: Bearer <token>` (sluice cli reads --token-file, SLUICE_TOKEN or <data-dir>/admin-token)",
        );
        refused(
            Some("Basic YWRtaW46YWRtaW4=".into()),
            unauthenticated,
            "the authorization header must be `Bearer <token>`",
        );
        refused(
            Some(bearer("sluice_nope")),
            unauthenticated,
            "the token is malformed: a Sluice token is `sluice_` then 16 and 64 lower-case hex digits joined by `_`",
        );
        refused(
            Some(bearer(&forged)),
            unauthenticated,
            "the token is not valid: no such token, or a wrong secret",
        );
        let err = run(Some(bearer(&revoked))).expect_err(&path);
        assert_eq!(err.code(), unauthenticated, "{path}: {err:?}");
        assert!(
            err.message()
                .starts_with(&format!("token {revoked_id} was revoked at ")),
            "{path}: {err:?}"
        );
        let err = run(Some(bearer(&expired))).expect_err(&path);
        assert_eq!(err.code(), unauthenticated, "{path}: {err:?}");
        assert!(
            err.message()
                .starts_with(&format!("token {expired_id} expired at ")),
            "{path}: {err:?}"
        );

        let denied = tonic::Code::PermissionDenied;
        let other_tenant = format!(
            "token {globex_id} belongs to tenant `globex` and may not act on tenant `acme`"
        );
        let not_admin = |id: &str, role: &str, tenant: &str| {
            format!("this needs the admin role; token {id} is a {role} of tenant `{tenant}`")
        };
        let read_only = format!(
            "token {viewer_id} is a viewer of tenant `acme`: it may read, not change; this needs the tenant-admin or admin role"
        );
        let passes = |authorization: String| {
            if let Err(e) = run(Some(authorization.clone())) {
                assert!(
                    !matches!(
                        e.code(),
                        tonic::Code::Unauthenticated | tonic::Code::PermissionDenied
                    ),
                    "{path} with {authorization}: {e:?}"
                );
            }
        };
        match needs {
            Needs::AnyToken => {
                passes(bearer(&globex));
                passes(bearer(&viewer));
            }
            Needs::Read => {
                refused(Some(bearer(&globex)), denied, &other_tenant);
                passes(bearer(&viewer));
                passes(bearer(&admin));
            }
            Needs::Write => {
                refused(Some(bearer(&globex)), denied, &other_tenant);
                refused(Some(bearer(&viewer)), denied, &read_only);
            }
            Needs::Tokens if method == "RevokeToken" => {
                // Another tenant's token is not even named.
                refused(
                    Some(bearer(&globex)),
                    tonic::Code::NotFound,
                    &format!("no token {viewer_id}"),
                );
                refused(Some(bearer(&viewer)), denied, &read_only);
            }
            Needs::Tokens => {
                refused(Some(bearer(&globex)), denied, &other_tenant);
                refused(Some(bearer(&viewer)), denied, &read_only);
            }
            Needs::Admin => {
                refused(
                    Some(bearer(&acme_admin)),
                    denied,
                    &not_admin(&acme_admin_id, "tenant-admin", "acme"),
                );
                refused(
                    Some(bearer(&viewer)),
                    denied,
                    &not_admin(&viewer_id, "viewer", "acme"),
                );
            }
        }
        checked += 1;
    }
    assert_eq!(checked, routes.len());
    // The viewer's token still works: nothing above changed anything.
    let (ok, _, err) = server.cli_with_token(&viewer, &["token", "whoami"]);
    assert!(ok, "{err}");

    // The HTTP routes.
    let changefeed = "/api/v1/changefeeds/acme/f";
    for path in [
        "/api/v1/status",
        "/api/v1/captures",
        "/api/v1/changefeeds",
        changefeed,
    ] {
        for token in [
            None,
            Some("sluice_nope"),
            Some(forged.as_str()),
            Some(revoked.as_str()),
        ] {
            let (code, body) = server.http_get_with(path, token);
            assert_eq!(code, 401, "{path} {token:?}: {body}");
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(v["code"], 401, "{body}");
        }
        let (code, _) = server.http_get_with(path, Some(&viewer));
        assert!(code == 200 || code == 404, "{path}: {code}");
    }
    let (code, body) = server.http_get_with(changefeed, Some(&globex));
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains(&format!(
            "token {globex_id} belongs to tenant `globex` and may not act on tenant `acme`"
        )),
        "{body}"
    );
    let (code, body) = server.http_get_with("/api/v1/changefeeds?tenant=acme", Some(&globex));
    assert_eq!(code, 403, "{body}");
    // Open by default: Prometheus and load balancers need no token.
    assert_eq!(server.http_get_with("/metrics", None).0, 200);
    assert_eq!(server.http_get_with("/healthz", None).0, 200);
    server.stop();

    // With --metrics-auth they need one too.
    let server = Server::start(&dir.path().join("data"), &["--metrics-auth"]);
    assert_eq!(server.http_get_with("/metrics", None).0, 401);
    assert_eq!(server.http_get_with("/healthz", None).0, 401);
    assert_eq!(server.http_get_with("/metrics", Some(&viewer)).0, 200);
    server.stop();
}

#[test]
fn a_tenant_sees_and_changes_only_its_own_and_tokens_show_nowhere_else() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, &[]);
    let admin = server.admin_token();
    server.json(&["tenant", "create", "acme"]);
    let (acme_id, acme) = make_token(
        &server,
        &admin,
        &[
            "--tenant",
            "acme",
            "--role",
            "tenant-admin",
            "--description",
            "acme's deploys",
        ],
    );
    let as_acme = |args: &[&str]| {
        let mut all = vec!["--output", "json"];
        all.extend_from_slice(args);
        let (ok, out, err) = server.cli_with_token(&acme, &all);
        assert!(ok, "{args:?}: {err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    // Its own plugins and changefeeds, without naming its tenant.
    let plugin = sluice_tests::plugin_path("sink-blackhole");
    as_acme(&[
        "plugin",
        "upload",
        plugin.to_str().unwrap(),
        "--id",
        "sink-blackhole@0.1.0",
        "--kind",
        "sink",
    ]);
    let file = crate::common::write_file(
        dir.path(),
        "feed",
        "[source]\ntype = \"datagen\"\ntotal-rows = 100\n\n[sink]\nplugin = \"sink-blackhole@0.1.0\"\n",
    );
    let made = as_acme(&[
        "changefeed",
        "create",
        "-c",
        "orders",
        "--config",
        file.to_str().unwrap(),
    ]);
    assert_eq!(made["id"], "acme/orders");
    // The admin's own changefeed in `default`.
    server.upload("sink-blackhole", "sink");
    server.create("mine", &file);
    // acme lists only its own, with or without --all-tenants.
    for args in [
        &["changefeed", "list"][..],
        &["changefeed", "list", "--all-tenants"],
    ] {
        let ids: Vec<String> = as_acme(args)
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(ids, ["acme/orders"], "{args:?}");
    }
    let all: Vec<String> = server
        .json(&["changefeed", "list", "--all-tenants"])
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(all, ["acme/orders", "default/mine"]);
    let (ok, _, err) = server.cli_with_token(&acme, &["changefeed", "query", "-c", "default/mine"]);
    assert!(!ok);
    assert_eq!(
        err.trim(),
        format!(
            "error: permission denied: token {acme_id} belongs to tenant `acme` and may not act on tenant `default`"
        )
    );
    // A tenant that does not exist takes nothing.
    let err = server.error(&[
        "--tenant",
        "nobody",
        "changefeed",
        "create",
        "-c",
        "x",
        "--config",
        file.to_str().unwrap(),
    ]);
    assert_eq!(
        err,
        "error: not found: tenant `nobody` does not exist; an admin creates it with `sluice cli tenant create nobody`"
    );
    // What acme owns; it cannot be removed while it owns it.
    let tenant = server.json(&["tenant", "get", "acme"]);
    assert_eq!(
        (
            tenant["changefeeds"].as_u64(),
            tenant["plugins"].as_u64(),
            tenant["tokens"].as_u64()
        ),
        (Some(1), Some(1), Some(1))
    );
    let err = server.error(&["tenant", "remove", "acme"]);
    assert_eq!(
        err,
        "error: not allowed now: tenant `acme` still owns changefeeds orders; remove them first"
    );
    // Expiries past any clock, or in the past, are refused in one line.
    for far in ["500000000000y", "0s"] {
        let err = server.error(&["token", "create", "--role", "viewer", "--expires-in", far]);
        assert!(err.starts_with("error: invalid argument: "), "{far}: {err}");
    }
    let whoami = as_acme(&["token", "whoami"]);
    assert_eq!(
        (whoami["tenant"].as_str(), whoami["role"].as_str()),
        (Some("acme"), Some("tenant-admin"))
    );
    let listed = server.json(&["token", "list", "--all-tenants"]);
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
    // Revoked: it stops at once.
    server.json(&["token", "revoke", &acme_id]);
    let (ok, _, err) = server.cli_with_token(&acme, &["changefeed", "list"]);
    assert!(!ok);
    assert!(
        err.contains(&format!(
            "not authenticated: token {acme_id} was revoked at"
        )),
        "{err}"
    );
    // Removed with what it owns: its token record goes with it.
    server.json(&["--tenant", "acme", "changefeed", "remove", "-c", "orders"]);
    server.json(&[
        "--tenant",
        "acme",
        "plugin",
        "remove",
        "--id",
        "sink-blackhole@0.1.0",
    ]);
    server.json(&["tenant", "remove", "acme"]);
    let names: Vec<String> = server
        .json(&["tenant", "list"])
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["default"]);

    // The secret showed once, in the answer that made it: never in the
    // server's log, its meta store, status, metrics or lists.
    let secret = acme.rsplit('_').next().unwrap().to_string();
    let (_, status) = server.http_get("/api/v1/status");
    let (_, metrics) = server.http_get("/metrics");
    let log = server.stop();
    for (what, text) in [
        ("log", &log),
        ("status", &status),
        ("metrics", &metrics),
        ("token list", &listed.to_string()),
    ] {
        assert!(!text.contains(&secret), "the secret is in the {what}");
    }
    let mut files = 0;
    let mut stack = vec![data.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            files += 1;
            let bytes = std::fs::read(&path).unwrap();
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "the secret is in {}",
                path.display()
            );
        }
    }
    assert!(files > 2, "{files} files looked at");
}

#[test]
fn the_readme_commands_need_no_token_set_up_on_one_machine() {
    let dir = tempfile::tempdir().unwrap();
    // `sluice server` with its default data dir, run from `dir`.
    let server = Server::start(&dir.path().join(".sluice-server"), &[]);
    let nothing = dir.path().join("empty-config");
    let noted = dir.path().join(".sluice-server.config");
    let whoami = |cwd: &std::path::Path, config: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args([
                "cli",
                "--server",
                &server.grpc,
                "--output",
                "json",
                "token",
                "whoami",
            ])
            .env_remove("SLUICE_TOKEN")
            .env_remove("SLUICE_TOKEN_FILE")
            .env("XDG_CONFIG_HOME", config)
            .current_dir(cwd)
            .output()
            .unwrap()
    };
    // Beside the default data dir, or anywhere on the machine through the
    // note the server left for its address (`--data-dir /tmp/sluice` in the
    // README's five commands).
    for (cwd, config) in [(dir.path(), &nothing), (&std::env::temp_dir(), &noted)] {
        let out = whoami(cwd, config);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            (v["role"].as_str(), v["tenant"].as_str()),
            (Some("admin"), Some("default"))
        );
    }
    let note = std::fs::read_to_string(
        noted
            .join("sluice/servers")
            .join(server.grpc.trim_start_matches("http://").replace(':', "_")),
    )
    .unwrap();
    assert!(
        !note.contains("sluice_"),
        "the note names the file, not the token: {note}"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&server.token_file)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // Elsewhere, without a token: the one-line refusal says where tokens come from.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["cli", "--server", &server.grpc, "changefeed", "list"])
        .env_remove("SLUICE_TOKEN")
        .env_remove("SLUICE_TOKEN_FILE")
        .env("XDG_CONFIG_HOME", &nothing)
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "error: not authenticated: no token: send the header `authorization: Bearer <token>` (sluice cli reads --token-file, SLUICE_TOKEN or <data-dir>/admin-token)"
    );
    server.stop();
}

/// A plugin that declares the memory it needs (a `sluice:limits` section, as
/// sdk/js's build writes) gets that quota in a changefeed that sets none, and
/// the tenant is charged it; a quota in the config wins.
#[test]
fn a_declared_memory_is_the_quota_a_changefeed_gets_and_is_charged() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    server.json(&["tenant", "create", "acme"]);
    let bytes = std::fs::read(sluice_tests::plugin_path("sink-blackhole")).unwrap();
    let declared = dir.path().join("needy.wasm");
    std::fs::write(
        &declared,
        sluice_runtime::with_declared_memory(&bytes, 96 << 20),
    )
    .unwrap();
    let (ok, _, err) = server.cli(&[
        "--tenant",
        "acme",
        "plugin",
        "upload",
        declared.to_str().unwrap(),
        "--id",
        "needy@1.0.0",
        "--kind",
        "sink",
    ]);
    assert!(ok, "{err}");
    let feed = |name: &str, limits: &str| {
        let file = crate::common::write_file(
            dir.path(),
            name,
            &format!(
                "[source]\ntype = \"datagen\"\ntotal-rows = 0\nrate = 10\n\n[sink]\nplugin = \"needy@1.0.0\"\n{limits}"
            ),
        );
        server.json(&[
            "--tenant",
            "acme",
            "changefeed",
            "create",
            "-c",
            name,
            "--config",
            file.to_str().unwrap(),
        ]);
    };
    feed("unset", "");
    let held = server.json(&["tenant", "get", "acme"]);
    assert_eq!(held["plugin-memory"].as_u64(), Some(96 << 20), "{held}");
    feed("given", "[sink.limits]\nmemory = \"32MiB\"\n");
    let held = server.json(&["tenant", "get", "acme"]);
    assert_eq!(held["plugin-memory"].as_u64(), Some(128 << 20), "{held}");
    server.stop();
}

#[test]
fn each_tenant_quota_refuses_what_passes_it_and_use_returns_to_zero() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    server.json(&["tenant", "create", "acme"]);
    let blackhole = sluice_tests::plugin_path("sink-blackhole");
    let size = std::fs::metadata(&blackhole).unwrap().len();
    let upload = |version: &str| {
        server.cli(&[
            "--tenant",
            "acme",
            "plugin",
            "upload",
            blackhole.to_str().unwrap(),
            "--id",
            &format!("sink-blackhole@{version}"),
            "--kind",
            "sink",
        ])
    };
    let quota = |args: &[&str]| {
        let mut all = vec!["tenant", "quota", "set", "acme"];
        all.extend_from_slice(args);
        server.json(&all)
    };
    // Versions: two, and the third is refused naming the quota.
    let set = quota(&["--max-plugin-versions", "2", "--max-changefeeds", "1"]);
    assert_eq!(set["quota"]["max-plugin-versions"], 2, "{set}");
    assert!(upload("0.1.0").0 && upload("0.2.0").0);
    // The same bytes again add nothing: not refused.
    assert!(upload("0.2.0").0);
    let (ok, _, err) = upload("0.3.0");
    assert!(!ok);
    assert_eq!(
        err.trim(),
        "error: too large: tenant `acme` is over its quota: plugin-versions would be 3 (it holds 2, this request adds 1); the quota is 2. Remove something, or an admin raises it with `sluice cli tenant quota set acme --max-plugin-versions N`"
    );
    // Bytes: room for the two there are, not for a third.
    quota(&[
        "--max-plugin-versions",
        "none",
        "--max-plugin-bytes",
        &(2 * size + size / 2).to_string(),
    ]);
    let (ok, _, err) = upload("0.3.0");
    assert!(!ok);
    assert!(err.contains("plugin-bytes would be"), "{err}");
    // Changefeeds: one.
    let file = |name: &str, memory: &str| {
        crate::common::write_file(
            dir.path(),
            name,
            &format!(
                "[source]\ntype = \"datagen\"\ntotal-rows = 0\nrate = 10\n\n[sink]\nplugin = \"sink-blackhole@0.1.0\"\n[sink.limits]\nmemory = \"{memory}\"\n"
            ),
        )
    };
    let small = file("small", "32MiB");
    server.json(&[
        "--tenant",
        "acme",
        "changefeed",
        "create",
        "-c",
        "one",
        "--config",
        small.to_str().unwrap(),
    ]);
    let err = server.error(&[
        "--tenant",
        "acme",
        "changefeed",
        "create",
        "-c",
        "two",
        "--config",
        small.to_str().unwrap(),
    ]);
    assert!(err.starts_with("error: too large: tenant `acme` is over its quota: changefeeds would be 2 (it holds 1, this request adds 1); the quota is 1."), "{err}");
    // Plugin memory: the one running holds 32 MiB; 48 MiB allows 16 more.
    quota(&["--max-changefeeds", "none", "--max-plugin-memory", "48MiB"]);
    let big = file("big", "32MiB");
    let err = server.error(&[
        "--tenant",
        "acme",
        "changefeed",
        "create",
        "-c",
        "two",
        "--config",
        big.to_str().unwrap(),
    ]);
    assert!(err.contains("plugin-memory would be 67108864 bytes (it holds 33554432 bytes, this request adds 33554432 bytes); the quota is 50331648 bytes"), "{err}");
    let fits = file("fits", "16MiB");
    server.json(&[
        "--tenant",
        "acme",
        "changefeed",
        "create",
        "-c",
        "two",
        "--config",
        fits.to_str().unwrap(),
    ]);
    // A swap to a larger sink table is refused the same way.
    let table = dir.path().join("table.toml");
    std::fs::write(
        &table,
        "plugin = \"sink-blackhole@0.2.0\"\n[limits]\nmemory = \"64MiB\"\n",
    )
    .unwrap();
    let err = server.error(&[
        "--tenant",
        "acme",
        "changefeed",
        "swap",
        "-c",
        "two",
        "--sink",
        "sink-blackhole@0.2.0",
        "--sink-config",
        table.to_str().unwrap(),
    ]);
    assert!(err.contains("plugin-memory would be"), "{err}");
    // Another tenant is untouched by acme's quotas.
    server.upload("sink-blackhole", "sink");
    server.create("other", &big);
    // What acme holds, and after removing everything: nothing.
    let held = server.json(&["tenant", "get", "acme"]);
    assert_eq!(
        (
            held["changefeeds"].as_u64(),
            held["plugins"].as_u64(),
            held["plugin-bytes"].as_u64(),
            held["plugin-memory"].as_u64()
        ),
        (Some(2), Some(2), Some(2 * size), Some(48 << 20)),
        "{held}"
    );
    let (_, metrics) = server.http_get("/metrics");
    let line = |name: &str, labels: &[&str]| {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("{name}{{")) && labels.iter().all(|x| l.contains(x)))
            .map(|l| l.rsplit(' ').next().unwrap().to_string())
    };
    assert_eq!(
        line("sluice_tenant_changefeeds", &[r#"tenant="acme""#]).as_deref(),
        Some("2"),
        "{metrics}"
    );
    assert_eq!(
        line(
            "sluice_tenant_quota",
            &[r#"tenant="acme""#, r#"quota="plugin-memory""#]
        )
        .as_deref(),
        Some("50331648"),
        "{metrics}"
    );
    assert_eq!(
        line("sluice_tenant_changefeeds", &[r#"tenant="default""#]).as_deref(),
        Some("1"),
        "{metrics}"
    );
    for name in ["one", "two"] {
        server.json(&["--tenant", "acme", "changefeed", "remove", "-c", name]);
    }
    for version in ["0.1.0", "0.2.0"] {
        server.json(&[
            "--tenant",
            "acme",
            "plugin",
            "remove",
            "--id",
            &format!("sink-blackhole@{version}"),
        ]);
    }
    let held = server.json(&["tenant", "get", "acme"]);
    assert_eq!(
        (
            held["changefeeds"].as_u64(),
            held["plugins"].as_u64(),
            held["plugin-bytes"].as_u64(),
            held["plugin-memory"].as_u64()
        ),
        (Some(0), Some(0), Some(0), Some(0)),
        "{held}"
    );
    // Bad quotas are refused before anything changes.
    let err = server.error(&[
        "tenant",
        "quota",
        "set",
        "acme",
        "--max-plugin-memory",
        "2TiB",
    ]);
    assert!(err.contains("--max-plugin-memory `2TiB`"), "{err}");
    let err = server.error(&[
        "tenant",
        "quota",
        "set",
        "acme",
        "--max-changefeeds",
        "99999999",
    ]);
    assert_eq!(
        err,
        "error: invalid argument: --max-changefeeds is 99999999; it must be at most 1000000"
    );
    server.stop();
}

#[test]
fn buffer_connection_and_egress_quotas_refuse_what_passes_them() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    server.json(&["tenant", "create", "acme"]);
    server.upload_as("acme", "sink-blackhole", "sink");
    let set = server.json(&[
        "tenant",
        "quota",
        "set",
        "acme",
        "--max-buffer-bytes",
        "100MiB",
        "--max-sql-connections",
        "4",
        "--egress",
        "*.example.com, 10.0.0.0/8:5432",
    ]);
    assert_eq!(
        set["quota"]["egress"],
        serde_json::json!(["*.example.com", "10.0.0.0/8:5432"]),
        "{set}"
    );
    // A feed: its event cache, and its sink's grants and connections.
    let file = |name: &str, cache: &str, sink: &str| {
        crate::common::write_file(
            dir.path(),
            name,
            &format!(
                "[source]\ntype = \"datagen\"\ntotal-rows = 0\nrate = 10\n\n[sink]\nplugin = \"sink-blackhole@0.1.0\"\n{sink}\n[pipeline]\nevent-cache-bytes = \"{cache}\"\n"
            ),
        )
    };
    let create = |name: &str, config: &std::path::Path| {
        server.cli(&[
            "--tenant",
            "acme",
            "--output",
            "json",
            "changefeed",
            "create",
            "-c",
            name,
            "--config",
            config.to_str().unwrap(),
        ])
    };
    let pg = "[sink.capabilities.sql]\nwarehouse = \"postgres://u:secret@10.1.2.3:5432/w\"\n[sink.limits]\nsql-connections = ";
    let one = file("one", "64MiB", &format!("{pg}3"));
    assert!(create("one", &one).0);
    // Buffers: 64 MiB held, 64 more would pass 100 MiB.
    let (ok, _, err) = create("two", &file("big", "64MiB", ""));
    assert!(!ok);
    assert!(err.trim().starts_with("error: too large: tenant `acme` is over its quota: buffer-bytes would be 134217728 bytes (it holds 67108864 bytes, this request adds 67108864 bytes); the quota is 104857600 bytes."), "{err}");
    // Connections: 3 held, 2 more would pass 4.
    let (ok, _, err) = create("two", &file("conns", "16MiB", &format!("{pg}2")));
    assert!(!ok);
    assert!(err.contains("sql-connections would be 5 (it holds 3, this request adds 2); the quota is 4. Remove something, or an admin raises it with `sluice cli tenant quota set acme --max-sql-connections N`"), "{err}");
    // Egress: a host outside the list, a port outside a network's rule, and
    // an HTTP host without a port (every port) under a rule with one.
    for (grant, says) in [
        (
            "[sink.capabilities]\nhttp = [\"hooks.evil.test\"]",
            "sink.capabilities.http[0]: `hooks.evil.test` is outside tenant `acme`'s egress allowlist [*.example.com, 10.0.0.0/8:5432]",
        ),
        (
            "[sink.capabilities]\ntcp = [\"10.9.9.9:6379\"]",
            "sink.capabilities.tcp[0]: `10.9.9.9:6379` is outside tenant `acme`'s egress allowlist",
        ),
        (
            "[sink.capabilities]\nhttp = [\"10.1.1.1\"]",
            "only a rule without a port covers it",
        ),
    ] {
        let (ok, _, err) = create("two", &file("egress", "16MiB", grant));
        assert!(!ok, "{grant}");
        assert!(
            err.trim().starts_with("error: permission denied: ") && err.contains(says),
            "{grant}: {err}"
        );
    }
    // Inside the list: a name under the wildcard and a TCP peer in the network.
    let inside = file(
        "inside",
        "16MiB",
        "[sink.capabilities]\nhttp = [\"api.example.com:443\"]\ntcp = [\"10.9.9.9:5432\"]",
    );
    assert!(create("two", &inside).0);
    let held = server.json(&["tenant", "get", "acme"]);
    assert_eq!(
        (
            held["buffer-bytes"].as_u64(),
            held["sql-connections"].as_u64()
        ),
        (Some(80 << 20), Some(3)),
        "{held}"
    );
    let (_, metrics) = server.http_get("/metrics");
    assert!(
        metrics.contains(&format!(
            "sluice_tenant_buffer_bytes{{tenant=\"acme\"}} {}",
            80 << 20
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains("sluice_tenant_sql_connections{tenant=\"acme\"} 3"),
        "{metrics}"
    );
    // `none` lifts the list; removing the feeds frees what they held.
    let set = server.json(&["tenant", "quota", "set", "acme", "--egress", "none"]);
    assert!(set["quota"]["egress"].is_null(), "{set}");
    for name in ["one", "two"] {
        server.json(&["--tenant", "acme", "changefeed", "remove", "-c", name]);
    }
    let held = server.json(&["tenant", "get", "acme"]);
    assert_eq!(
        (
            held["buffer-bytes"].as_u64(),
            held["sql-connections"].as_u64()
        ),
        (Some(0), Some(0)),
        "{held}"
    );
    // Bad rules and ranges are refused naming them.
    let err = server.error(&["tenant", "quota", "set", "acme", "--egress", "10.0.0.0/40"]);
    assert!(
        err.contains("--egress rule `10.0.0.0/40`: `10.0.0.0/40` is not a network"),
        "{err}"
    );
    let err = server.error(&["tenant", "quota", "set", "acme", "--cpu-weight", "0"]);
    assert_eq!(
        err,
        "error: invalid argument: --cpu-weight is 0; it must be between 1 and 10000"
    );
    server.stop();
}

#[test]
fn every_change_and_every_refused_attempt_is_audited_and_the_log_stays_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &["--audit-retention", "100"]);
    let admin = server.admin_token();
    let admin_id = server.json(&["token", "whoami"])["id"]
        .as_str()
        .unwrap()
        .to_string();
    server.json(&["tenant", "create", "acme"]);
    let (acme_id, acme) = make_token(
        &server,
        &admin,
        &["--tenant", "acme", "--role", "tenant-admin"],
    );
    let (viewer_id, viewer) =
        make_token(&server, &admin, &["--tenant", "acme", "--role", "viewer"]);
    let (ok, _, _) = server.cli_with_token(&viewer, &["tenant", "create", "evil"]);
    assert!(!ok);
    let (ok, _, err) = server.cli_with_token(&acme, &["token", "revoke", &viewer_id]);
    assert!(ok, "{err}");
    // Reads are not audited.
    let (ok, _, err) = server.cli_with_token(&acme, &["changefeed", "list"]);
    assert!(ok, "{err}");
    // A change without a token is refused, and recorded.
    let (ok, _, _) = server.cli_with_token("", &["tenant", "create", "anon"]);
    assert!(!ok);
    let expected = vec![
        (
            "TenantService/CreateTenant",
            "ok",
            admin_id.as_str(),
            "acme",
        ),
        ("TenantService/CreateToken", "ok", admin_id.as_str(), "acme"),
        ("TenantService/CreateToken", "ok", admin_id.as_str(), "acme"),
        (
            "TenantService/CreateTenant",
            "permission denied",
            viewer_id.as_str(),
            "evil",
        ),
        ("TenantService/RevokeToken", "ok", acme_id.as_str(), "acme"),
        ("TenantService/CreateTenant", "not authenticated", "", ""),
    ];
    let read = |token: &str| -> Vec<serde_json::Value> {
        let (ok, out, err) = server.cli_with_token(token, &["--output", "json", "audit"]);
        assert!(ok, "{err}");
        serde_json::from_str::<serde_json::Value>(&out)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    };
    let mut all = Vec::new();
    server.wait_for("the audit entries", Duration::from_secs(10), || {
        all = read(&admin);
        all.len() >= expected.len()
    });
    let got: Vec<(&str, &str, &str, &str)> = all
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap(),
                e["outcome"].as_str().unwrap(),
                e["token"].as_str().unwrap(),
                e["tenant"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, expected);
    for e in &all {
        assert!(
            e["address"].as_str().unwrap().starts_with("127.0.0.1:"),
            "{e}"
        );
        assert!(e["at-ms"].as_u64().unwrap() > 0, "{e}");
    }
    assert!(
        all[3]["message"]
            .as_str()
            .unwrap()
            .starts_with("this needs the admin role"),
        "{}",
        all[3]
    );
    // Secrets are not in it.
    let text = serde_json::to_string(&all).unwrap();
    for secret in [&admin, &acme, &viewer] {
        assert!(!text.contains(secret.rsplit('_').next().unwrap()));
    }
    // acme reads its own tenant's entries only.
    let mine: Vec<String> = read(&acme)
        .iter()
        .map(|e| e["action"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(mine.len(), 5, "{mine:?}");
    // Bounded: 150 more changes, and the newest 100 (to 110) are kept.
    let rt = runtime();
    rt.block_on(async {
        let mut tenants =
            pb::tenant_service_client::TenantServiceClient::new(server.channel().await);
        for n in 0..150u64 {
            tenants
                .set_tenant_quota(pb::SetTenantQuotaRequest {
                    name: "acme".into(),
                    quota: Some(pb::TenantQuota {
                        max_changefeeds: Some(n),
                        ..Default::default()
                    }),
                })
                .await
                .unwrap();
        }
    });
    server.wait_for(
        "the last quota change in the audit",
        Duration::from_secs(10),
        || {
            all = read(&admin);
            all.last()
                .is_some_and(|e| e["action"] == "TenantService/SetTenantQuota")
                && all
                    .iter()
                    .filter(|e| e["action"] == "TenantService/SetTenantQuota")
                    .count()
                    >= 100
        },
    );
    assert!((100..=110).contains(&all.len()), "{}", all.len());
    assert!(
        all.iter()
            .all(|e| e["action"] == "TenantService/SetTenantQuota")
    );
    server.stop();
}
