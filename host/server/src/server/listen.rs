//! The server's listeners, accepted from once and served in turns: a standby
//! capture answers on them (forwarding to the owner) until it is elected, and
//! the full API takes them over then, on the same ports, without closing them.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use sluice_api::tls::{Listener, Tls};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, OwnedMutexGuard, mpsc};

/// Accepted connections not taken yet; a few before a server answers.
const BACKLOG: usize = 64;

/// One accepted connection, plain or TLS.
pub enum Conn {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP, handshake done.
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

/// The connections a listener accepts, for one server at a time.
pub struct Connections {
    rx: Arc<Mutex<mpsc::Receiver<(Conn, SocketAddr)>>>,
    local: SocketAddr,
}

impl Connections {
    /// Accepts on `listener` from now on (with the TLS handshake when `tls`
    /// is set), whether or not a server takes the connections yet.
    pub fn accept(
        listener: TcpListener,
        tls: Option<&Arc<Tls>>,
        which: Listener,
    ) -> io::Result<Self> {
        let local = listener.local_addr()?;
        let (tx, rx) = mpsc::channel(BACKLOG);
        match tls {
            Some(tls) => {
                let mut handshaken = tls.accept(listener, which);
                tokio::spawn(async move {
                    while let Some((stream, peer)) = handshaken.recv().await {
                        if tx.send((Conn::Tls(Box::new(stream)), peer)).await.is_err() {
                            return;
                        }
                    }
                });
            }
            None => {
                tokio::spawn(async move {
                    loop {
                        let (tcp, peer) = match listener.accept().await {
                            Ok(accepted) => accepted,
                            Err(e) => {
                                // Out of descriptors, for one: wait, then go on.
                                tracing::warn!(error = %e, "A connection could not be accepted.");
                                tokio::time::sleep(Duration::from_millis(100)).await;
                                continue;
                            }
                        };
                        // Replies go out as written: without TCP_NODELAY a
                        // reply of several segments waits ~40 ms for the
                        // client's delayed acknowledgement.
                        let _ = tcp.set_nodelay(true);
                        if tx.send((Conn::Plain(tcp), peer)).await.is_err() {
                            return;
                        }
                    }
                });
            }
        }
        Ok(Self {
            rx: Arc::new(Mutex::new(rx)),
            local,
        })
    }

    /// The connections from now until the returned value is dropped (the
    /// next server's turn waits until then).
    pub async fn take(&self) -> Taken {
        Taken {
            rx: self.rx.clone().lock_owned().await,
            local: self.local,
        }
    }
}

/// One server's turn at a listener's connections.
pub struct Taken {
    rx: OwnedMutexGuard<mpsc::Receiver<(Conn, SocketAddr)>>,
    local: SocketAddr,
}

impl tokio_stream::Stream for Taken {
    type Item = io::Result<Conn>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx
            .poll_recv(cx)
            .map(|accepted| accepted.map(|(conn, _)| Ok(conn)))
    }
}

impl axum::serve::Listener for Taken {
    type Io = Conn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(accepted) => accepted,
            // The accepting task ended: nothing more comes.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        match self {
            Conn::Plain(tcp) => tcp.connect_info(),
            Conn::Tls(tls) => tls.get_ref().0.connect_info(),
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain(s) => s.is_write_vectored(),
            Conn::Tls(s) => s.is_write_vectored(),
        }
    }
}
