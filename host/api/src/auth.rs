//! Every request is authenticated before a handler runs: the gRPC services
//! through [`AuthLayer`], the HTTP routes through [`require_token`]. Both put
//! the [`Caller`] in the request's extensions; handlers take it with
//! [`caller`] and ask it which tenant they may act on.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::Request as HttpRequest;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sluice_auth::{AuditEntry, AuditLog, AuthError, Authenticator, Caller};
use sluice_owner::{Clock, SystemClock};
use tonic::Status;

use crate::error::{auth_http_status, auth_status};

/// gRPC paths served without a token: the standard health service, for
/// load balancers and orchestrators.
const OPEN_GRPC_PREFIX: &str = "/grpc.health.v1.Health/";

/// The caller a request was authenticated as.
pub fn caller<T>(request: &tonic::Request<T>) -> Result<Caller, Status> {
    request
        .extensions()
        .get::<Caller>()
        .cloned()
        .ok_or_else(|| Status::unauthenticated("the request was not authenticated"))
}

/// Authenticates every gRPC call but the health service's, and records
/// every call that changes something (and its outcome) in the audit log.
#[derive(Clone)]
pub struct AuthLayer {
    auth: Arc<Authenticator>,
    audit: AuditLog,
}

impl AuthLayer {
    /// Checks tokens with `auth`; records changes in `audit`.
    pub fn new(auth: Arc<Authenticator>, audit: AuditLog) -> Self {
        Self { auth, audit }
    }
}

/// Whether a gRPC method changes something (and so is audited): by its
/// verb, so a method added later is audited when it changes something.
fn is_audited(method: &str) -> bool {
    const VERBS: [&str; 14] = [
        "Create", "Update", "Pause", "Resume", "Remove", "Swap", "Start", "Stop", "Promote",
        "Upload", "Delete", "Rollout", "Set", "Revoke",
    ];
    VERBS.iter().any(|v| method.starts_with(v))
}

impl<S> tower::Layer<S> for AuthLayer {
    type Service = Authenticated<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Authenticated {
            inner,
            auth: self.auth.clone(),
            audit: self.audit.clone(),
        }
    }
}

/// A gRPC service behind [`AuthLayer`].
#[derive(Clone)]
pub struct Authenticated<S> {
    inner: S,
    auth: Arc<Authenticator>,
    audit: AuditLog,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

impl<S, B> tower::Service<http::Request<B>> for Authenticated<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        // The clone that was made ready serves this call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let (auth, audit) = (self.auth.clone(), self.audit.clone());
        Box::pin(async move {
            let path = request.uri().path().to_string();
            // Health is open; a shipment between captures carries its own
            // secret, checked by the shipping service.
            if path.starts_with(OPEN_GRPC_PREFIX) || path.starts_with(sluice_ship::GRPC_PREFIX) {
                return inner.call(request).await;
            }
            let action = path.trim_start_matches("/sluice.v1.").to_string();
            let audited = is_audited(action.rsplit('/').next().unwrap_or(""));
            use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
            let extensions = request.extensions();
            let address = extensions
                .get::<TcpConnectInfo>()
                .or_else(|| {
                    extensions
                        .get::<TlsConnectInfo<TcpConnectInfo>>()
                        .map(TlsConnectInfo::get_ref)
                })
                .and_then(TcpConnectInfo::remote_addr)
                .map(|a| a.to_string())
                .unwrap_or_default();
            let header = request
                .headers()
                .get(http::header::AUTHORIZATION)
                .map(|v| v.to_str().unwrap_or("?"));
            let caller = match auth.authenticate(header, SystemClock.now_ms()).await {
                Ok(caller) => caller,
                Err(e) => {
                    let status = auth_status(e);
                    if audited {
                        audit.record(entry(None, &address, &action, Some(&status)));
                    }
                    return Ok(status.into_http());
                }
            };
            request.extensions_mut().insert(caller.clone());
            let response = inner.call(request).await?;
            if audited {
                // Refusals come in the headers ("trailers only"); an answer
                // with a message is a success.
                let status = tonic::Status::from_header_map(response.headers())
                    .filter(|s| s.code() != tonic::Code::Ok);
                audit.record(entry(Some(&caller), &address, &action, status.as_ref()));
            }
            Ok(response)
        })
    }
}

/// The audit entry of `action` by `caller` (none: no valid token) from
/// `address`, refused with `status` or done.
fn entry(
    caller: Option<&Caller>,
    address: &str,
    action: &str,
    status: Option<&tonic::Status>,
) -> AuditEntry {
    AuditEntry {
        version: 1,
        at_ms: SystemClock.now_ms(),
        token: caller.map(|c| c.token_id.clone()).unwrap_or_default(),
        caller_tenant: caller.map(|c| c.tenant.clone()).unwrap_or_default(),
        role: caller.map(|c| c.role.to_string()).unwrap_or_default(),
        address: address.to_string(),
        action: action.to_string(),
        tenant: caller.and_then(Caller::acted_on).unwrap_or_default(),
        outcome: status
            .map_or("ok", |s| crate::client::code_name(s.code()))
            .to_string(),
        message: status.map(|s| s.message().to_string()).unwrap_or_default(),
    }
}

/// The HTTP middleware: a request without a valid token gets 401 with
/// `{code, message}`; one with gets its [`Caller`].
pub async fn require_token(
    axum::extract::State(auth): axum::extract::State<Arc<Authenticator>>,
    mut request: HttpRequest,
    next: Next,
) -> Response {
    let header = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or("?"));
    match auth.authenticate(header, SystemClock.now_ms()).await {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(e) => auth_error_response(&e),
    }
}

/// An authentication or authorization refusal as an HTTP answer.
pub fn auth_error_response(e: &AuthError) -> Response {
    let code = auth_http_status(e);
    let mut response = (
        code,
        axum::Json(serde_json::json!({
            "code": code.as_u16(),
            "error": e.to_string(),
        })),
    )
        .into_response();
    if code == http::StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            http::header::WWW_AUTHENTICATE,
            http::HeaderValue::from_static("Bearer"),
        );
    }
    response
}
