//! The reading capture's side: one [`Outbox`] per run and receiving capture,
//! registered in [`Shipping`] so that the receiver's stream finds it. Credit
//! is by bytes: the sender waits while a window's worth is sent and not yet
//! taken by the receiver, so a slow receiver holds the source back (and with
//! it the event cache's bounds) instead of growing a queue.
//!
//! With a redo log (`[consistent]`), an outbox opened with
//! [`Shipping::open_after_log`] holds each frame until the log is durable
//! through it: a receiver's sink never sees an event the log may lose, as
//! the reading capture's own sink does not (its redo fence).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;

use crate::error::ShipError;

/// Fewest bytes a receiver may ask to hold.
pub const MIN_WINDOW: u64 = 64 << 10;
/// Most bytes a receiver may ask to hold.
pub const MAX_WINDOW: u64 = 1 << 30;

/// Which run's shipment, to which capture.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ShipKey {
    /// The changefeed's tenant.
    pub tenant: String,
    /// The changefeed.
    pub changefeed: String,
    /// The run's changefeed epoch.
    pub epoch: u64,
    /// The receiving capture.
    pub capture: String,
}

impl std::fmt::Display for ShipKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{} epoch {} to capture {}",
            self.tenant, self.changefeed, self.epoch, self.capture
        )
    }
}

/// The outboxes of the runs this capture reads for other captures.
#[derive(Clone)]
pub struct Shipping {
    outboxes: Arc<Mutex<HashMap<ShipKey, Arc<Outbox>>>>,
    patience: Duration,
}

impl Default for Shipping {
    fn default() -> Self {
        Self::new(Duration::from_secs(30))
    }
}

impl Shipping {
    /// No outbox yet; a receiver that has not come for its shipment
    /// `patience` after the run started sending fails the run.
    pub fn new(patience: Duration) -> Self {
        Self {
            outboxes: Arc::default(),
            patience,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<ShipKey, Arc<Outbox>>> {
        self.outboxes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new outbox for `key`, whose receiver must present `token`.
    pub fn open(&self, key: ShipKey, token: String) -> Result<OutboxHandle, ShipError> {
        self.open_with(key, token, None)
    }

    /// A new outbox for `key`, whose receiver must present `token`; each
    /// frame goes to the receiver only once `logged` (the redo log's durable
    /// resolved ts) reaches the ts the frame was sent with. Frames held count
    /// in the window, so the bound holds while they wait. Once `logged`
    /// closes, frames above its last value are never sent: the stream ends
    /// with an error.
    pub fn open_after_log(
        &self,
        key: ShipKey,
        token: String,
        logged: watch::Receiver<u64>,
    ) -> Result<OutboxHandle, ShipError> {
        self.open_with(key, token, Some(logged))
    }

    fn open_with(
        &self,
        key: ShipKey,
        token: String,
        logged: Option<watch::Receiver<u64>>,
    ) -> Result<OutboxHandle, ShipError> {
        if token.len() < 16 {
            return Err(ShipError::Refused(format!(
                "the shipment {key} needs a secret of at least 16 characters"
            )));
        }
        let mut outboxes = self.lock();
        if outboxes.contains_key(&key) {
            return Err(ShipError::Refused(format!(
                "the shipment {key} is open already"
            )));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let outbox = Arc::new(Outbox {
            key: key.clone(),
            token,
            state: Mutex::new(State::default()),
            changed: Notify::new(),
            durable: Mutex::new(Some(watch::channel((0, 0)).0)),
            tx: Mutex::new(Some(tx)),
            rx: Mutex::new(Some(rx)),
            logged,
        });
        outboxes.insert(key, outbox.clone());
        Ok(OutboxHandle {
            outbox,
            shipping: self.clone(),
        })
    }

    /// Open outboxes.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no outbox is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Attaches the receiver `key` presenting `token` with `window` to its
    /// outbox: what it is sent comes out of the returned channel.
    pub(crate) fn attach(
        &self,
        key: &ShipKey,
        token: &str,
        window: u64,
    ) -> Result<(Arc<Outbox>, mpsc::UnboundedReceiver<Frames>), ShipError> {
        if !(MIN_WINDOW..=MAX_WINDOW).contains(&window) {
            return Err(ShipError::Refused(format!(
                "a window of {window} bytes; it must be {MIN_WINDOW} to {MAX_WINDOW}"
            )));
        }
        // An unknown shipment and a wrong secret get the same answer, so that
        // a caller without the secret learns nothing of which runs exist;
        // the run may not have started sending yet, so a receiver asks again.
        let outbox = self.lock().get(key).cloned();
        let Some(outbox) = outbox.filter(|o| same_secret(o.token.as_bytes(), token.as_bytes()))
        else {
            return Err(ShipError::Lost(
                "no shipment with that name and secret is open (yet)".into(),
            ));
        };
        let rx = outbox
            .rx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| {
                ShipError::Refused(format!("the shipment {key} has its receiver already"))
            })?;
        {
            let mut state = outbox.state();
            state.attached = true;
            state.window = window;
        }
        outbox.changed.notify_waiters();
        Ok((outbox, rx))
    }
}

/// Compares secrets in time that does not depend on where they differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[derive(Debug, Default)]
struct State {
    sent: u64,
    taken: u64,
    window: u64,
    attached: bool,
    closed: Option<ShipError>,
}

/// One run's shipment to one capture.
pub(crate) struct Outbox {
    key: ShipKey,
    token: String,
    state: Mutex<State>,
    changed: Notify,
    /// What the receiver reported: (flushed, saved) ts.
    /// Dropped once the receiver is gone (its watchers see that).
    durable: Mutex<Option<watch::Sender<(u64, u64)>>>,
    tx: Mutex<Option<mpsc::UnboundedSender<Frames>>>,
    rx: Mutex<Option<mpsc::UnboundedReceiver<Frames>>>,
    /// The redo log's durable resolved ts, when frames wait for it.
    logged: Option<watch::Receiver<u64>>,
}

/// Frames sent together, and the highest ts they carry.
pub(crate) struct Frames {
    pub(crate) through: u64,
    pub(crate) bytes: Bytes,
}

impl Outbox {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The receiver has taken `total` bytes so far.
    pub(crate) fn took(&self, total: u64) -> Result<(), ShipError> {
        let mut state = self.state();
        if total < state.taken || total > state.sent {
            let e = ShipError::Lost(format!(
                "the receiver says it took {total} bytes; {} were sent and {} taken before",
                state.sent, state.taken
            ));
            state.closed = Some(e.clone());
            drop(state);
            self.changed.notify_waiters();
            return Err(e);
        }
        state.taken = total;
        drop(state);
        self.changed.notify_waiters();
        Ok(())
    }

    /// The receiver's sink has every shipped row at or below `ts`.
    pub(crate) fn flushed(&self, ts: u64) {
        if let Some(d) = &*self.durable.lock().unwrap_or_else(|e| e.into_inner()) {
            d.send_if_modified(|(now, _)| {
                let newer = ts > *now;
                *now = (*now).max(ts);
                newer
            });
        }
    }

    /// The receiver saved its checkpoint at `ts`.
    pub(crate) fn saved(&self, ts: u64) {
        if let Some(d) = &*self.durable.lock().unwrap_or_else(|e| e.into_inner()) {
            d.send_if_modified(|(_, now)| {
                let newer = ts > *now;
                *now = (*now).max(ts);
                newer
            });
        }
    }

    /// The receiver is gone: the run cannot go on.
    pub(crate) fn detach(&self, why: ShipError) {
        let mut state = self.state();
        if state.closed.is_none() {
            state.closed = Some(why);
        }
        drop(state);
        self.changed.notify_waiters();
        // A DDL waiting for what it reports fails now, not at its timeout.
        self.durable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }

    /// Which shipment this is.
    pub fn key(&self) -> &ShipKey {
        &self.key
    }

    /// What frames wait for before they go, if anything (see
    /// [`Shipping::open_after_log`]).
    pub(crate) fn logged(&self) -> Option<watch::Receiver<u64>> {
        self.logged.clone()
    }
}

/// The sending side of one run's outbox to one capture; the outbox closes (its receiver sees
/// the stream end) and leaves the registry when this is dropped.
pub struct OutboxHandle {
    outbox: Arc<Outbox>,
    shipping: Shipping,
}

impl OutboxHandle {
    /// Which shipment this is.
    pub fn key(&self) -> &ShipKey {
        &self.outbox.key
    }

    /// Sends `frames`, whose events are at or below `through`, once fewer
    /// than a window of bytes are in flight (an outbox opened after a log
    /// holds them until the log has `through`). Fails when the receiver went
    /// away, or did not come within the registry's patience.
    pub async fn send(&self, frames: Vec<u8>, through: u64) -> Result<(), ShipError> {
        let len = frames.len() as u64;
        let deadline = Instant::now() + self.shipping.patience;
        let mut frames = Some(frames);
        loop {
            let changed = self.outbox.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let attached = {
                let mut state = self.outbox.state();
                if let Some(e) = &state.closed {
                    return Err(e.clone());
                }
                if state.attached && state.sent - state.taken < state.window {
                    state.sent += len;
                    let tx = self.outbox.tx.lock().unwrap_or_else(|e| e.into_inner());
                    let sent = tx.as_ref().is_some_and(|tx| {
                        tx.send(Frames {
                            through,
                            bytes: Bytes::from(frames.take().unwrap_or_default()),
                        })
                        .is_ok()
                    });
                    if !sent {
                        let e = ShipError::Lost(format!(
                            "the stream of the shipment {} is gone",
                            self.outbox.key
                        ));
                        state.closed = Some(e.clone());
                        return Err(e);
                    }
                    return Ok(());
                }
                state.attached
            };
            if attached {
                changed.await;
            } else if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Err(ShipError::Lost(format!(
                    "capture {} did not come for its shipment of {}/{} within {:?}",
                    self.outbox.key.capture,
                    self.outbox.key.tenant,
                    self.outbox.key.changefeed,
                    self.shipping.patience
                )));
            }
        }
    }

    /// Bytes sent and bytes the receiver has taken.
    pub fn in_flight(&self) -> (u64, u64) {
        let state = self.outbox.state();
        (state.sent, state.taken)
    }

    /// What the receiver reported: (flushed, saved) ts. Every row shipped
    /// at or below the first is downstream; it saved its checkpoint at the
    /// second.
    /// Once the receiver is gone, the watch is closed.
    pub fn durable(&self) -> watch::Receiver<(u64, u64)> {
        match &*self
            .outbox
            .durable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
        {
            Some(d) => d.subscribe(),
            None => watch::channel((0, 0)).1,
        }
    }
}

impl Drop for OutboxHandle {
    fn drop(&mut self) {
        self.outbox
            .tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        self.outbox.detach(ShipError::Lost("the run ended".into()));
        let mut outboxes = self.shipping.lock();
        if outboxes
            .get(&self.outbox.key)
            .is_some_and(|o| Arc::ptr_eq(o, &self.outbox))
        {
            outboxes.remove(&self.outbox.key);
        }
    }
}
