//! The receiving capture's side: a [`ShippedSource`] is a `Source` over the
//! stream of the capture that reads the changefeed's source, yielding the
//! events of the tables this capture runs.

use std::collections::VecDeque;
use std::time::Duration;

use sluice_core::{Checkpoint, ResumeError, Source, SourceEvent, TransactionRun};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use crate::error::ShipError;
use crate::frame::{Decoder, Received};
use crate::outbox::{MAX_WINDOW, MIN_WINDOW, ShipKey};
use crate::proto::table_shipping_client::TableShippingClient;
use crate::proto::{Open, Pull, Shipment, pull};

/// What a receiver asks the reading capture for.
#[derive(Debug, Clone)]
pub struct ShipRequest {
    /// Which shipment.
    pub key: ShipKey,
    /// Its secret (from the receiver's assignment).
    pub token: String,
    /// Bytes in flight at most (the sender may pass it by one shipment).
    pub window: u64,
    /// How long to keep asking while the reading capture has not opened the
    /// shipment yet.
    pub patience: Duration,
}

/// The events the reading capture ships to this one, as a source.
pub struct ShippedSource {
    inbound: tonic::Streaming<Shipment>,
    pulls: mpsc::Sender<Pull>,
    decoder: Decoder,
    pending: VecDeque<Received>,
    decoded: Vec<Received>,
    window: u64,
    taken: u64,
    reported: u64,
    /// Rows at or below this are downstream already (the resume point).
    after: u64,
    ended: bool,
    /// The last transaction handed out was a part of a large one: its later
    /// parts (the last one too, though it comes as a run) go one by one, as
    /// the source's did.
    in_parts: bool,
    key: ShipKey,
}

impl ShippedSource {
    /// Opens the shipment `request` names on the capture at `channel`,
    /// asking again (every 200 ms) while that capture has not opened it yet.
    pub async fn connect(channel: Channel, request: ShipRequest) -> Result<Self, ShipError> {
        if !(MIN_WINDOW..=MAX_WINDOW).contains(&request.window) {
            return Err(ShipError::Refused(format!(
                "a window of {} bytes; it must be {MIN_WINDOW} to {MAX_WINDOW}",
                request.window
            )));
        }
        let deadline = tokio::time::Instant::now() + request.patience;
        loop {
            match Self::open(channel.clone(), &request).await {
                Err(ShipError::Lost(why)) if tokio::time::Instant::now() < deadline => {
                    tracing::debug!(shipment = %request.key, why, "The shipment is not open yet; asking again.");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                other => return other,
            }
        }
    }

    /// Opens the shipment on the capture whose gRPC listener is at `address`
    /// (`host:port`, reached as `peers` says; a reader that stops answering
    /// fails the stream within seconds).
    pub async fn connect_to(
        peers: &crate::Peers,
        address: &str,
        request: ShipRequest,
    ) -> Result<Self, ShipError> {
        let channel = peers
            .endpoint(address)
            .map_err(|e| ShipError::Refused(format!("the reader: {e}")))?
            .connect_lazy();
        Self::connect(channel, request).await
    }

    async fn open(channel: Channel, request: &ShipRequest) -> Result<Self, ShipError> {
        let (pulls, rx) = mpsc::channel(16);
        let open = Pull {
            kind: Some(pull::Kind::Open(Open {
                tenant: request.key.tenant.clone(),
                changefeed: request.key.changefeed.clone(),
                epoch: request.key.epoch,
                capture: request.key.capture.clone(),
                token: request.token.clone(),
                window: request.window,
            })),
        };
        pulls
            .send(open)
            .await
            .map_err(|_| ShipError::Lost("the stream closed before it opened".into()))?;
        let mut client =
            TableShippingClient::new(channel).max_decoding_message_size(MAX_WINDOW as usize);
        let inbound = client
            .ship(ReceiverStream::new(rx))
            .await
            .map_err(|status| match status.code() {
                tonic::Code::FailedPrecondition => ShipError::Refused(status.message().into()),
                tonic::Code::InvalidArgument => ShipError::Malformed(status.message().into()),
                _ => ShipError::Lost(format!(
                    "the shipment could not be opened: {}",
                    status.message()
                )),
            })?
            .into_inner();
        Ok(Self {
            inbound,
            pulls,
            decoder: Decoder::new(),
            pending: VecDeque::new(),
            decoded: Vec::new(),
            window: request.window,
            taken: 0,
            reported: 0,
            after: 0,
            ended: false,
            in_parts: false,
            key: request.key.clone(),
        })
    }

    /// A handle that tells the reading capture what this capture's sink has
    /// made durable.
    pub fn flush_reporter(&self) -> FlushReporter {
        FlushReporter(self.pulls.clone())
    }

    /// Bytes received so far.
    pub fn bytes_received(&self) -> u64 {
        self.taken
    }

    /// Waits for the next shipment and decodes it into `pending`.
    async fn fill(&mut self) -> Result<(), ShipError> {
        while self.pending.is_empty() {
            if self.ended {
                return Err(ShipError::Lost(format!(
                    "the shipment {} asked for after its end",
                    self.key
                )));
            }
            let shipment = match self.inbound.message().await {
                Ok(Some(shipment)) => shipment,
                Ok(None) => {
                    return Err(ShipError::Lost(format!(
                        "the reading capture ended the shipment {} before the source's end",
                        self.key
                    )));
                }
                Err(status) => {
                    return Err(ShipError::Lost(format!(
                        "the shipment {} broke: {}",
                        self.key,
                        status.message()
                    )));
                }
            };
            self.taken += shipment.frames.len() as u64;
            self.decoder.decode(&shipment.frames, &mut self.decoded)?;
            self.pending.extend(self.decoded.drain(..));
            if self.taken - self.reported >= self.window / 4 {
                self.reported = self.taken;
                let taken = Pull {
                    kind: Some(pull::Kind::Taken(self.taken)),
                };
                self.pulls
                    .send(taken)
                    .await
                    .map_err(|_| ShipError::Lost(format!("the shipment {} is gone", self.key)))?;
            }
        }
        Ok(())
    }

    /// The next item, with what the resume point already has left out.
    async fn next_received(&mut self) -> Result<Received, ShipError> {
        loop {
            self.fill().await?;
            let item = self.pending.pop_front().expect("filled");
            match item {
                Received::Event(SourceEvent::Transaction(t)) if t.commit_ts.get() <= self.after => {
                }
                Received::Run(run)
                    if run
                        .transactions
                        .first()
                        .is_some_and(|t| t.commit_ts.get() <= self.after) =>
                {
                    // Rows downstream already: keep the transactions after the
                    // resume point, one by one.
                    let after = self.after;
                    for t in run
                        .into_transactions()
                        .into_iter()
                        .rev()
                        .filter(|t| t.commit_ts.get() > after)
                    {
                        self.pending
                            .push_front(Received::Event(SourceEvent::Transaction(t)));
                    }
                }
                Received::Event(SourceEvent::End) => {
                    self.ended = true;
                    return Ok(Received::Event(SourceEvent::End));
                }
                item => return Ok(item),
            }
        }
    }
}

impl Source for ShippedSource {
    type Error = ShipError;

    async fn next_event(&mut self) -> Result<SourceEvent, ShipError> {
        let event = loop {
            match self.next_received().await? {
                Received::Event(event) => break event,
                Received::Run(run) => {
                    let mut transactions = run.into_transactions().into_iter();
                    let first = transactions.next();
                    for t in transactions.rev() {
                        self.pending
                            .push_front(Received::Event(SourceEvent::Transaction(t)));
                    }
                    // A run has a transaction; an empty one is nothing to yield.
                    if let Some(t) = first {
                        break SourceEvent::Transaction(t);
                    }
                }
            }
        };
        self.in_parts = matches!(&event, SourceEvent::Transaction(t) if t.more);
        Ok(event)
    }

    async fn next_run(
        &mut self,
        _max_transactions: usize,
        _max_bytes: usize,
    ) -> Result<Option<TransactionRun>, ShipError> {
        // The last part of a large transaction goes as an event, after the
        // others.
        if self.in_parts {
            return Ok(None);
        }
        // The reader built its runs within its own bounds; they stay whole.
        if self.pending.is_empty() && !self.ended {
            self.fill().await?;
        }
        match self.pending.front() {
            Some(Received::Run(run))
                if run
                    .transactions
                    .first()
                    .is_none_or(|t| t.commit_ts.get() > self.after) =>
            {
                match self.pending.pop_front() {
                    Some(Received::Run(run)) => Ok(Some(run)),
                    _ => unreachable!("the front was a run"),
                }
            }
            _ => Ok(None),
        }
    }

    fn resume(&mut self, from: &Checkpoint) -> Result<(), ResumeError> {
        self.after = from.ts.get();
        Ok(())
    }
}

/// Tells the reading capture what the receiving capture's sink has made
/// durable (the reader's checkpoint never passes it).
#[derive(Clone)]
pub struct FlushReporter(mpsc::Sender<Pull>);

impl FlushReporter {
    /// Every shipped row at or below `ts` is durable downstream; whether the
    /// report went (not when the stream has no room now, or is gone: the run
    /// ends then anyway).
    pub fn report(&self, ts: u64) -> bool {
        self.0
            .try_send(Pull {
                kind: Some(pull::Kind::Flushed(ts)),
            })
            .is_ok()
    }

    /// The receiving capture saved its checkpoint at `ts`; whether the
    /// report went (as [`FlushReporter::report`]).
    pub fn report_saved(&self, ts: u64) -> bool {
        self.0
            .try_send(Pull {
                kind: Some(pull::Kind::Saved(ts)),
            })
            .is_ok()
    }
}
