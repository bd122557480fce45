//! Watch events and the stream that delivers them.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::mpsc;

use crate::error::MetaError;
use crate::store::{KeyValue, Revision};

/// What happened to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatchEventKind {
    /// The key was created or overwritten.
    Put,
    /// The key was deleted (directly, or with its lease).
    Delete,
}

/// One change to one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    /// Put or delete.
    pub kind: WatchEventKind,
    /// The key after a put. After a delete: the key, an empty value,
    /// `create_revision` zero, no lease, and `mod_revision` the delete's revision.
    pub kv: KeyValue,
    /// The revision of the write that made the change.
    pub revision: Revision,
}

/// How many events may wait in a [`WatchStream`] before the producer waits.
pub const WATCH_BUFFER: usize = 256;

/// The events of one watch. Read it with [`WatchStream::next`] or as a
/// [`futures_core::Stream`]. Dropping it cancels the watch.
///
/// It ends (yields `None`) after an `Err` item, or when the store is dropped or
/// its connection is closed for good.
#[derive(Debug)]
pub struct WatchStream {
    rx: mpsc::Receiver<Result<WatchEvent, MetaError>>,
}

impl WatchStream {
    /// A stream fed through a channel. An implementation keeps the sender in the
    /// task that produces events, and stops when [`mpsc::Sender::closed`] resolves.
    pub fn channel() -> (mpsc::Sender<Result<WatchEvent, MetaError>>, Self) {
        let (tx, rx) = mpsc::channel(WATCH_BUFFER);
        (tx, Self { rx })
    }

    /// The next event; `None` when the stream ended.
    pub async fn next(&mut self) -> Option<Result<WatchEvent, MetaError>> {
        self.rx.recv().await
    }
}

impl futures_core::Stream for WatchStream {
    type Item = Result<WatchEvent, MetaError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}
