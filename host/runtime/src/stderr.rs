//! A plugin's stderr: always writable, keeps only its last bytes (for the stop
//! reason after a panic). A plugin that prints a lot is neither stopped nor able to
//! grow host memory.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};

/// The last `capacity` bytes written.
#[derive(Clone, Debug)]
pub(crate) struct TailPipe {
    capacity: usize,
    buffer: Arc<Mutex<VecDeque<u8>>>,
}

impl TailPipe {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            buffer: Arc::new(Mutex::new(VecDeque::with_capacity(capacity))),
        }
    }

    /// What is kept, oldest first.
    pub(crate) fn contents(&self) -> Vec<u8> {
        self.buffer
            .lock()
            .map(|b| b.iter().copied().collect())
            .unwrap_or_default()
    }

    fn push(&self, bytes: &[u8]) {
        let Ok(mut b) = self.buffer.lock() else {
            return;
        };
        let bytes = &bytes[bytes.len().saturating_sub(self.capacity)..];
        let overflow = (b.len() + bytes.len()).saturating_sub(self.capacity);
        let len = b.len();
        b.drain(..overflow.min(len));
        b.extend(bytes);
    }
}

impl AsyncWrite for TailPipe {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl IsTerminal for TailPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for TailPipe {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::TailPipe;

    #[test]
    fn keeps_only_the_last_bytes() {
        let p = TailPipe::new(8);
        p.push(b"hello ");
        p.push(b"world");
        assert_eq!(p.contents(), b"lo world");
        p.push(b"0123456789abc");
        assert_eq!(p.contents(), b"56789abc");
    }
}
