//! A capture that is not the owner: it waits in line for ownership while its
//! listeners answer. gRPC calls go on to the owner (the caller's token with
//! them; the owner checks it), so any capture answers the API; shipments of
//! the runs it reads for other captures are served here; `/healthz`
//! says which capture is the owner and `/metrics` gives this capture's own
//! series (its runs and their plugins); the rest of the HTTP API goes on to
//! the owner's HTTP listener (`http_forward`).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use sluice_meta::MetaStore;
use sluice_owner::CaptureInfo;
use tokio::sync::watch;

use super::listen::Connections;

/// The header a forwarded call carries: a call that has it is not forwarded
/// again (two captures that each think the other is the owner answer
/// "unavailable" instead of passing a call back and forth).
pub const FORWARDED: &str = "sluice-forwarded-by";

/// Who the owner is, as this capture last read it (every half second).
#[derive(Clone)]
pub struct OwnerView(watch::Receiver<Option<CaptureInfo>>);

impl OwnerView {
    /// Follows the owner in `store` until `stop` changes.
    pub fn follow(store: Arc<dyn MetaStore>, mut stop: watch::Receiver<bool>) -> Self {
        let (tx, rx) = watch::channel(None);
        tokio::spawn(async move {
            loop {
                match sluice_owner::election::current_owner(store.as_ref()).await {
                    Ok(owner) => {
                        let owner = owner.map(|(info, _)| info);
                        tx.send_if_modified(|now| {
                            let changed = *now != owner;
                            *now = owner;
                            changed
                        });
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "The owner could not be read; the last one read stays.")
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                    _ = stop.changed() => return,
                }
            }
        });
        Self(rx)
    }

    /// The owner as last read; none while none is elected.
    pub fn owner(&self) -> Option<CaptureInfo> {
        self.0.borrow().clone()
    }
}

/// Forwards every gRPC call but the health checks to the owner.
#[derive(Clone)]
pub struct ForwardLayer {
    owner: OwnerView,
    capture_id: String,
    peers: sluice_ship::Peers,
    channel: Arc<Mutex<Option<(String, tonic::transport::Channel)>>>,
}

impl ForwardLayer {
    /// Forwards for capture `capture_id` to the owner `owner` names, reached
    /// as `peers` says.
    pub fn new(owner: OwnerView, capture_id: String, peers: sluice_ship::Peers) -> Self {
        Self {
            owner,
            capture_id,
            peers,
            channel: Arc::default(),
        }
    }

    /// A channel to the owner's address (one kept while the owner stays).
    fn channel_to(&self, address: &str) -> Result<tonic::transport::Channel, tonic::Status> {
        let mut kept = self.channel.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, channel)) = kept.as_ref()
            && at == address
        {
            return Ok(channel.clone());
        }
        // An owner that stopped answering (frozen, cut off) fails the calls
        // under way in seconds instead of holding them.
        let channel = self
            .peers
            .endpoint(address)
            .map_err(|e| tonic::Status::unavailable(format!("the owner: {e}")))?
            .connect_lazy();
        *kept = Some((address.to_string(), channel.clone()));
        Ok(channel)
    }
}

impl<S> tower::Layer<S> for ForwardLayer {
    type Service = Forward<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Forward {
            inner,
            layer: self.clone(),
        }
    }
}

/// A gRPC service behind [`ForwardLayer`].
#[derive(Clone)]
pub struct Forward<S> {
    inner: S,
    layer: ForwardLayer,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

impl<S> tower::Service<http::Request<tonic::body::Body>> for Forward<S>
where
    S: tower::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<tonic::body::Body>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let layer = self.layer.clone();
        Box::pin(async move {
            // Health and shipments between captures are this capture's own.
            let path = request.uri().path();
            if path.starts_with("/grpc.health.v1.") || path.starts_with(sluice_ship::GRPC_PREFIX) {
                return inner.call(request).await;
            }
            let unavailable = |message: String| Ok(tonic::Status::unavailable(message).into_http());
            if let Some(by) = request.headers().get(FORWARDED) {
                return unavailable(format!(
                    "capture {} is not the owner either (forwarded by {}); retry",
                    layer.capture_id,
                    by.to_str().unwrap_or("?")
                ));
            }
            let Some(owner) = layer.owner.owner() else {
                return unavailable(format!(
                    "capture {} is a standby and no owner is elected yet; retry",
                    layer.capture_id
                ));
            };
            if owner.id == layer.capture_id {
                return unavailable(format!(
                    "capture {} is taking over as the owner; retry",
                    layer.capture_id
                ));
            }
            let channel = match layer.channel_to(&owner.address) {
                Ok(channel) => channel,
                Err(status) => return Ok(status.into_http()),
            };
            if let Ok(value) = http::HeaderValue::from_str(&layer.capture_id) {
                request.headers_mut().insert(FORWARDED, value);
            }
            match tower::ServiceExt::oneshot(channel, request).await {
                Ok(response) => Ok(response),
                Err(e) => unavailable(format!(
                    "capture {} could not reach the owner {} at {}: {e}; retry",
                    layer.capture_id, owner.id, owner.address
                )),
            }
        })
    }
}

/// What a standby's `/metrics` answers from: the work this capture runs, and
/// the tokens it checks (none when `/metrics` is open, `--metrics-auth` off).
#[derive(Clone)]
pub struct StandbyMetrics {
    /// The work this capture runs.
    pub capture: Arc<sluice_capture::Capture>,
    /// Checks the caller's token, unless `/metrics` is open.
    pub auth: Option<Arc<sluice_auth::Authenticator>>,
}

/// This capture's series: its runs and their plugins (a tenant's token sees
/// its own changefeeds'; no token, where that is allowed, or an admin's, all).
async fn standby_metrics(
    axum::extract::State((metrics, capture_id)): axum::extract::State<(StandbyMetrics, String)>,
    caller: Option<axum::Extension<sluice_auth::Caller>>,
) -> Response {
    let tenant = match caller {
        Some(axum::Extension(c)) => match c.scope("") {
            Ok(t) => t.unwrap_or_default(),
            Err(e) => return sluice_api::auth::auth_error_response(&e),
        },
        None => String::new(),
    };
    let runs = metrics.capture.runs(&tenant);
    (
        [(
            http::header::CONTENT_TYPE,
            sluice_api::http::METRICS_CONTENT_TYPE,
        )],
        sluice_api::http::render_capture_metrics(&capture_id, false, &runs, true),
    )
        .into_response()
}

/// The HTTP listener of a standby: `/healthz` answers (a standby is healthy),
/// `/metrics` gives this capture's own series (its runs and their plugins),
/// everything else goes on to the owner (`forward`).
pub fn http_router(
    owner: OwnerView,
    capture_id: String,
    metrics: StandbyMetrics,
    forward: super::http_forward::HttpForward,
) -> axum::Router {
    let mut series = axum::Router::new()
        .route("/metrics", axum::routing::get(standby_metrics))
        .with_state((metrics.clone(), capture_id.clone()));
    if let Some(auth) = metrics.auth {
        series = series.route_layer(axum::middleware::from_fn_with_state(
            auth,
            sluice_api::auth::require_token,
        ));
    }
    let health = {
        let (owner, capture_id) = (owner.clone(), capture_id.clone());
        move || async move {
            let line = match owner.owner() {
                Some(o) => format!(
                    "ok: capture {capture_id} is a standby; the owner is capture {} at {}\n",
                    o.id, o.address
                ),
                None => format!("ok: capture {capture_id} is a standby; no owner is elected yet\n"),
            };
            (StatusCode::OK, line).into_response()
        }
    };
    axum::Router::new()
        .route("/healthz", axum::routing::get(health))
        .fallback(super::http_forward::forward)
        .with_state(forward)
        .merge(series)
}

/// A capture waiting in line for ownership, answering on its listeners.
pub struct Standby<'a> {
    /// Its registration (campaigns with it).
    pub registration: &'a sluice_owner::Registration,
    /// The meta store (who the owner is).
    pub store: Arc<dyn MetaStore>,
    /// Its id.
    pub capture_id: String,
    /// The gRPC listener's connections.
    pub grpc: &'a Connections,
    /// The HTTP listener's connections.
    pub http: &'a Connections,
    /// The shipments of the runs this capture reads (served here, never
    /// forwarded).
    pub shipping: sluice_ship::Shipping,
    /// How it reaches the owner (plain, or TLS with --peer-ca).
    pub peers: sluice_ship::Peers,
    /// What its `/metrics` answers from.
    pub metrics: StandbyMetrics,
}

/// How long a standby's open calls may take to finish once it is elected.
const HANDOVER_GRACE: Duration = Duration::from_secs(5);

impl Standby<'_> {
    /// Answers (forwarding to the owner) until this capture is elected
    /// (`Some`), asked to stop (`None`), or must stop (`fatal`: the lease).
    pub async fn serve(
        self,
        fatal: &mut watch::Receiver<Option<String>>,
        term: &mut tokio::signal::unix::Signal,
    ) -> anyhow::Result<Option<sluice_owner::OwnerTerm>> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let owner = OwnerView::follow(self.store.clone(), stop_rx.clone());
        let (_health, health_service) = tonic_health::server::health_reporter();
        let stopped = |mut stop: watch::Receiver<bool>| async move {
            let _ = stop.changed().await;
        };
        let grpc = tokio::spawn(
            tonic::transport::Server::builder()
                .layer(ForwardLayer::new(
                    owner.clone(),
                    self.capture_id.clone(),
                    self.peers.clone(),
                ))
                .add_service(health_service)
                .add_service(sluice_ship::ShipService::new(self.shipping.clone()).into_server())
                .serve_with_incoming_shutdown(self.grpc.take().await, stopped(stop_rx.clone())),
        );
        let forward = super::http_forward::HttpForward::new(
            owner.clone(),
            self.capture_id.clone(),
            &self.peers,
        )?;
        let http = tokio::spawn(
            axum::serve(
                self.http.take().await,
                http_router(
                    owner,
                    self.capture_id.clone(),
                    self.metrics.clone(),
                    forward,
                ),
            )
            .with_graceful_shutdown(stopped(stop_rx))
            .into_future(),
        );
        let outcome = tokio::select! {
            elected = self.registration.campaign() => elected.map(Some).map_err(anyhow::Error::from),
            _ = tokio::signal::ctrl_c() => Ok(None),
            _ = term.recv() => Ok(None),
            reason = async {
                let _ = fatal.wait_for(Option::is_some).await;
                fatal.borrow().clone()
            } => Err(anyhow::anyhow!(
                "sluice server stopped: {}",
                reason.unwrap_or_default()
            )),
        };
        // The full API takes the listeners over once these have let go.
        let _ = stop_tx.send(true);
        for server in [grpc.abort_handle(), http.abort_handle()] {
            let _ = tokio::time::timeout(HANDOVER_GRACE, async {
                while !server.is_finished() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await;
            server.abort();
        }
        let _ = tokio::join!(grpc, http);
        outcome
    }
}
