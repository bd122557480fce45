//! A standby's HTTP API: every call but `/healthz` and `/metrics` goes on to
//! the owner's HTTP listener (at the `http-address` it registered), the
//! caller's token with it, and the owner's answer comes back as it is. A call
//! already forwarded once is not forwarded again.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::StatusCode;

use super::standby::{FORWARDED, OwnerView};

/// How long a forwarded call may wait for the owner to accept a connection.
const CONNECT_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a forwarded call may wait for the next bytes of the owner's
/// answer.
const READ_WITHIN: std::time::Duration = std::time::Duration::from_secs(60);

/// Headers that belong to one connection, not to the call.
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// What a standby forwards HTTP calls with.
#[derive(Clone)]
pub struct HttpForward {
    owner: OwnerView,
    capture_id: String,
    client: reqwest::Client,
    scheme: &'static str,
}

impl HttpForward {
    /// Forwards to whoever `owner` says is the owner, plainly or over TLS
    /// verified by `peers`' CA.
    pub fn new(
        owner: OwnerView,
        capture_id: String,
        peers: &sluice_ship::Peers,
    ) -> anyhow::Result<Self> {
        let mut client = reqwest::Client::builder()
            .connect_timeout(CONNECT_WITHIN)
            .read_timeout(READ_WITHIN)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy();
        let scheme = match peers.ca_pem() {
            Some(pem) => {
                client = client.tls_built_in_root_certs(false);
                for cert in reqwest::Certificate::from_pem_bundle(pem)? {
                    client = client.add_root_certificate(cert);
                }
                "https"
            }
            None => "http",
        };
        Ok(Self {
            owner,
            capture_id,
            client: client.build()?,
            scheme,
        })
    }
}

/// An answer of this standby itself (the call did not reach the owner).
fn unavailable(message: String) -> Response {
    let body = serde_json::json!({"code": "unavailable", "message": message});
    let mut response = (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
    response.headers_mut().insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from_static("1"),
    );
    response
}

/// Sends `request` on to the owner and answers with what it answered.
pub async fn forward(State(f): State<HttpForward>, request: Request) -> Response {
    let me = &f.capture_id;
    if let Some(by) = request.headers().get(FORWARDED) {
        return unavailable(format!(
            "capture {me} is not the owner either (forwarded by {}); retry",
            by.to_str().unwrap_or("?")
        ));
    }
    let Some(owner) = f.owner.owner() else {
        return unavailable(format!(
            "capture {me} is a standby and no owner is elected yet; retry"
        ));
    };
    if owner.id == *me {
        return unavailable(format!("capture {me} is taking over as the owner; retry"));
    }
    if owner.http_address.is_empty() {
        return unavailable(format!(
            "capture {me} is a standby; the owner, capture {} (gRPC at {}), runs a version that \
             does not say where its HTTP listener is: ask it there, or use the gRPC API here",
            owner.id, owner.address
        ));
    }
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let url = format!("{}://{}{path}", f.scheme, owner.http_address);
    let (parts, body) = request.into_parts();
    let mut out = f.client.request(parts.method, &url);
    for (name, value) in &parts.headers {
        if name != http::header::HOST && !HOP_BY_HOP.contains(&name.as_str()) {
            out = out.header(name, value);
        }
    }
    let out = out
        .header(FORWARDED, me.as_str())
        .body(reqwest::Body::wrap_stream(body.into_data_stream()));
    let answer = match out.send().await {
        Ok(answer) => answer,
        Err(e) => {
            return unavailable(format!(
                "capture {me} could not reach the owner {} at {}: {e}; retry",
                owner.id, owner.http_address
            ));
        }
    };
    let mut response = Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            response = response.header(name, value);
        }
    }
    response
        .body(Body::from_stream(answer.bytes_stream()))
        .unwrap_or_else(|e| unavailable(format!("the owner's answer could not be passed on: {e}")))
}
