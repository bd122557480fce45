//! The gRPC side of the reading capture: a receiver opens `Ship`, is
//! attached to its outbox, and is sent what the run ships while it reports
//! what it took and what its sink made durable.

use std::pin::Pin;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::error::ShipError;
use crate::outbox::{Frames, ShipKey, Shipping};
use crate::proto::table_shipping_server::{TableShipping, TableShippingServer};
use crate::proto::{Pull, Shipment, pull};

/// How long a receiver has to say which shipment it wants.
const OPEN_WITHIN: Duration = Duration::from_secs(10);

/// Most streams that may be opening at once (not yet named their shipment):
/// callers without a secret cannot hold more than this many handlers.
const MAX_OPENING: usize = 64;

/// The `TableShipping` gRPC service over this capture's outboxes.
#[derive(Clone)]
pub struct ShipService {
    shipping: Shipping,
    opening: std::sync::Arc<tokio::sync::Semaphore>,
}

impl ShipService {
    /// Serves the outboxes of `shipping`.
    pub fn new(shipping: Shipping) -> Self {
        Self {
            shipping,
            opening: std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_OPENING)),
        }
    }

    /// As a tonic service, to add to a server.
    pub fn into_server(self) -> TableShippingServer<Self> {
        TableShippingServer::new(self)
    }
}

type Shipments = Pin<Box<dyn Stream<Item = Result<Shipment, Status>> + Send>>;

#[tonic::async_trait]
impl TableShipping for ShipService {
    type ShipStream = Shipments;

    async fn ship(
        &self,
        request: Request<Streaming<Pull>>,
    ) -> Result<Response<Self::ShipStream>, Status> {
        let opening = self.opening.clone().try_acquire_owned().map_err(|_| {
            Status::resource_exhausted("too many shipment streams are opening; retry")
        })?;
        let mut pulls = request.into_inner();
        let first = tokio::time::timeout(OPEN_WITHIN, pulls.message())
            .await
            .map_err(|_| {
                Status::deadline_exceeded(format!("no shipment was named within {OPEN_WITHIN:?}"))
            })??;
        let Some(Pull {
            kind: Some(pull::Kind::Open(open)),
        }) = first
        else {
            return Err(Status::invalid_argument(
                "a shipment stream starts by naming its shipment (open)",
            ));
        };
        let key = ShipKey {
            tenant: open.tenant,
            changefeed: open.changefeed,
            epoch: open.epoch,
            capture: open.capture,
        };
        let (outbox, rx) = self.shipping.attach(&key, &open.token, open.window)?;
        let logged = outbox.logged();
        drop(opening);
        tracing::debug!(shipment = %key, window = open.window, "A receiver attached to its shipment.");
        tokio::spawn(async move {
            loop {
                let why = match pulls.message().await {
                    Ok(Some(Pull {
                        kind: Some(pull::Kind::Taken(total)),
                    })) => match outbox.took(total) {
                        Ok(()) => continue,
                        Err(e) => e,
                    },
                    Ok(Some(Pull {
                        kind: Some(pull::Kind::Flushed(ts)),
                    })) => {
                        outbox.flushed(ts);
                        continue;
                    }
                    Ok(Some(Pull {
                        kind: Some(pull::Kind::Saved(ts)),
                    })) => {
                        outbox.saved(ts);
                        continue;
                    }
                    Ok(Some(_)) => ShipError::Lost("the receiver named its shipment twice".into()),
                    Ok(None) => ShipError::Lost(format!(
                        "the receiving capture {} closed its stream",
                        outbox.key().capture
                    )),
                    Err(status) => ShipError::Lost(format!(
                        "the stream from capture {} broke: {}",
                        outbox.key().capture,
                        status.message()
                    )),
                };
                outbox.detach(why);
                return;
            }
        });
        let shipments = match logged {
            None => UnboundedReceiverStream::new(rx)
                .map(|f| Ok(Shipment { frames: f.bytes }))
                .boxed(),
            Some(logged) => after_log(rx, logged).boxed(),
        };
        Ok(Response::new(shipments))
    }
}

/// The frames of `rx`, each once `logged` (the redo log's durable resolved
/// ts) reaches the highest ts it carries; once `logged` closes below a
/// frame, an error and the end: what the log may not have never goes.
fn after_log(
    rx: tokio::sync::mpsc::UnboundedReceiver<Frames>,
    logged: tokio::sync::watch::Receiver<u64>,
) -> impl Stream<Item = Result<Shipment, Status>> + Send + 'static {
    futures_util::stream::unfold(Some((rx, logged)), |state| async move {
        let (mut rx, mut logged) = state?;
        let frames = rx.recv().await?;
        let reached = logged.wait_for(|&at| at >= frames.through).await.is_ok();
        if reached {
            Some((
                Ok(Shipment {
                    frames: frames.bytes,
                }),
                Some((rx, logged)),
            ))
        } else {
            let why = "the reading capture's run ended before its redo log had these events";
            Some((Err(Status::aborted(why)), None))
        }
    })
}
