//! Outgoing TCP for a sink with its own protocol: a blocking stream that reads
//! and writes with [`std::io::Read`] and [`std::io::Write`].
//!
//! The host connects only to the addresses the changefeed grants the plugin
//! (`capabilities.tcp = ["10.0.0.5:6379"]`, `ip:port` pairs: the host grants
//! addresses, so a plugin connects by address, not by name). A connection the
//! host refuses fails at [`TcpStream::connect`] with [`ErrorKind::Denied`].
//!
//! ```no_run
//! use std::io::{Read, Write};
//! use std::time::Duration;
//! use sluice_sdk::tcp::{self, TcpStream};
//!
//! # fn ping() -> Result<(), sluice_sdk::Error> {
//! let mut conn = TcpStream::connect("10.0.0.5:6379", Duration::from_secs(5))
//!     .map_err(|e| e.into_error())?;
//! conn.write_all(b"PING\r\n").map_err(tcp::io_error)?;
//! let mut reply = [0u8; 7];
//! conn.read_exact(&mut reply).map_err(tcp::io_error)?;
//! # Ok(())
//! # }
//! ```
//!
//! Natively (unit tests) there is no host: install a test double with
//! [`testing::mock`]; without one every connection is denied.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

/// What went wrong with a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The host refused the address: it is not granted (`capabilities.tcp`),
    /// or it is one of the server's own listeners.
    Denied,
    /// Connecting, or a read or write, took longer than its timeout.
    Timeout,
    /// The connection could not be made or was lost (refused, reset, closed).
    Connect,
    /// The address is not an `ip:port` pair.
    Invalid,
}

/// A failed connection or exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpError {
    /// What went wrong.
    pub kind: ErrorKind,
    /// What happened, with the address.
    pub message: String,
}

impl TcpError {
    /// An error of `kind` (test doubles answer with it).
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// The error an I/O failure on a stream means.
    pub fn from_io(err: &io::Error) -> Self {
        let kind = match err.kind() {
            io::ErrorKind::PermissionDenied => ErrorKind::Denied,
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => ErrorKind::Timeout,
            io::ErrorKind::InvalidInput => ErrorKind::Invalid,
            _ => ErrorKind::Connect,
        };
        Self::new(kind, err.to_string())
    }

    /// Whether trying again later may succeed (timeouts and lost connections).
    pub fn is_retryable(&self) -> bool {
        matches!(self.kind, ErrorKind::Timeout | ErrorKind::Connect)
    }

    /// The plugin error the host acts on: retryable ones retry; a denial and
    /// a bad address are configuration errors.
    pub fn into_error(self) -> crate::Error {
        if self.is_retryable() {
            crate::Error::retryable(self.message)
        } else {
            crate::Error::config(self.message)
        }
    }
}

impl std::fmt::Display for TcpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TcpError {}

/// The plugin error an I/O failure on a [`TcpStream`] means (for `map_err`).
pub fn io_error(err: io::Error) -> crate::Error {
    TcpError::from_io(&err).into_error()
}

/// A connected stream.
#[derive(Debug)]
pub struct TcpStream {
    inner: transport::Stream,
    addr: SocketAddr,
}

impl TcpStream {
    /// Connect to `addr` (`ip:port`) within `timeout`. Reads and writes then
    /// time out after `timeout` too (change it with [`TcpStream::set_timeout`]).
    pub fn connect(addr: &str, timeout: Duration) -> Result<Self, TcpError> {
        let parsed: SocketAddr = addr.parse().map_err(|_| {
            TcpError::new(
                ErrorKind::Invalid,
                format!(
                    "connect to `{addr}`: not an ip:port pair (the host grants addresses, \
                     so a plugin connects by address, e.g. 10.0.0.5:6379)"
                ),
            )
        })?;
        let inner = transport::Stream::connect(parsed, timeout).map_err(|e| {
            let mut e = TcpError::from_io(&e);
            e.message = match e.kind {
                ErrorKind::Denied => format!(
                    "connect to {parsed}: denied by the host: grant it to the plugin with \
                     capabilities.tcp = [\"{parsed}\"] (the server's own listeners are never \
                     reachable)"
                ),
                _ => format!("connect to {parsed}: {}", e.message),
            };
            e
        })?;
        let mut stream = Self {
            inner,
            addr: parsed,
        };
        stream
            .set_timeout(timeout)
            .map_err(|e| TcpError::from_io(&e))?;
        Ok(stream)
    }

    /// The address connected to.
    pub fn peer_addr(&self) -> SocketAddr {
        self.addr
    }

    /// How long a read or a write may wait.
    pub fn set_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        self.inner.set_timeout(timeout)
    }
}

impl io::Read for TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf)
    }
}

impl io::Write for TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(target_arch = "wasm32")]
mod transport {
    use std::io::{self, Read as _, Write as _};
    use std::net::SocketAddr;
    use std::time::Duration;

    #[derive(Debug)]
    pub(super) struct Stream(std::net::TcpStream);

    impl Stream {
        pub(super) fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<Self> {
            match std::net::TcpStream::connect_timeout(&addr, timeout) {
                Err(e) if e.kind() == io::ErrorKind::Unsupported => {
                    std::net::TcpStream::connect(addr).map(Self)
                }
                other => other.map(Self),
            }
        }

        pub(super) fn set_timeout(&mut self, timeout: Duration) -> io::Result<()> {
            let t = Some(timeout).filter(|t| !t.is_zero());
            // A target without socket timeouts still reads and writes.
            let ignore = |r: io::Result<()>| match r {
                Err(e) if e.kind() == io::ErrorKind::Unsupported => Ok(()),
                other => other,
            };
            ignore(self.0.set_read_timeout(t))?;
            ignore(self.0.set_write_timeout(t))
        }

        pub(super) fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.0.read(buf)
        }

        pub(super) fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.write(buf)
        }

        pub(super) fn flush(&mut self) -> io::Result<()> {
            self.0.flush()
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod transport {
    use std::collections::VecDeque;
    use std::io;
    use std::net::SocketAddr;
    use std::time::Duration;

    use super::testing::Peer;

    pub(super) struct Stream {
        peer: Box<dyn Peer>,
        /// What the peer sent and the plugin has not read yet.
        inbox: VecDeque<u8>,
    }

    impl std::fmt::Debug for Stream {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Stream")
                .field("inbox", &self.inbox.len())
                .finish()
        }
    }

    impl Stream {
        pub(super) fn connect(addr: SocketAddr, _timeout: Duration) -> io::Result<Self> {
            let peer = super::testing::connect(addr)?;
            Ok(Self {
                peer,
                inbox: VecDeque::new(),
            })
        }

        pub(super) fn set_timeout(&mut self, _timeout: Duration) -> io::Result<()> {
            Ok(())
        }

        pub(super) fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if buf.is_empty() {
                return Ok(0);
            }
            if self.inbox.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the test peer has nothing more to send",
                ));
            }
            let n = buf.len().min(self.inbox.len());
            for (slot, byte) in buf.iter_mut().zip(self.inbox.drain(..n)) {
                *slot = byte;
            }
            Ok(n)
        }

        pub(super) fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let reply = self.peer.receive(buf)?;
            self.inbox.extend(reply);
            Ok(buf.len())
        }

        pub(super) fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
}

/// A test double for native builds: scripted peers answer the connections a
/// plugin makes, so [`crate::testing::SinkHarness`] tests a sink with its own
/// protocol without a network.
///
/// ```
/// use std::io::{Read, Write};
/// use std::time::Duration;
/// use sluice_sdk::tcp::{testing, TcpStream};
///
/// let _guard = testing::mock(|_addr| {
///     Ok(Box::new(|bytes: &[u8]| Ok(bytes.to_ascii_uppercase())) as Box<dyn testing::Peer>)
/// });
/// let mut conn = TcpStream::connect("127.0.0.1:7000", Duration::from_secs(1)).unwrap();
/// conn.write_all(b"ping").unwrap();
/// let mut reply = [0u8; 4];
/// conn.read_exact(&mut reply).unwrap();
/// assert_eq!(&reply, b"PING");
/// ```
#[cfg(not(target_arch = "wasm32"))]
pub mod testing {
    use std::cell::RefCell;
    use std::io;
    use std::net::SocketAddr;

    use super::TcpError;

    /// The far end of a test connection: gets each write, returns the bytes it
    /// sends back (read by the plugin's next reads). An error fails the write.
    pub trait Peer {
        /// Take `bytes` the plugin wrote; return the reply.
        fn receive(&mut self, bytes: &[u8]) -> io::Result<Vec<u8>>;
    }

    impl<F: FnMut(&[u8]) -> io::Result<Vec<u8>>> Peer for F {
        fn receive(&mut self, bytes: &[u8]) -> io::Result<Vec<u8>> {
            self(bytes)
        }
    }

    type Accept = Box<dyn FnMut(SocketAddr) -> Result<Box<dyn Peer>, TcpError>>;

    thread_local! {
        static ACCEPT: RefCell<Option<Accept>> = const { RefCell::new(None) };
    }

    /// Removes the double when dropped.
    #[must_use = "the double is removed when the guard is dropped"]
    pub struct MockGuard(());

    impl Drop for MockGuard {
        fn drop(&mut self) {
            ACCEPT.with(|a| a.borrow_mut().take());
        }
    }

    /// Answer every connection made on this thread with `accept`, which
    /// returns the peer for an address or the error connecting fails with.
    pub fn mock(
        accept: impl FnMut(SocketAddr) -> Result<Box<dyn Peer>, TcpError> + 'static,
    ) -> MockGuard {
        ACCEPT.with(|a| *a.borrow_mut() = Some(Box::new(accept)));
        MockGuard(())
    }

    pub(super) fn connect(addr: SocketAddr) -> io::Result<Box<dyn Peer>> {
        let refused = || {
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                "there is no host natively; answer connections in tests with \
                 sluice_sdk::tcp::testing::mock",
            )
        };
        let mut accept = ACCEPT.with(|a| a.borrow_mut().take()).ok_or_else(refused)?;
        let peer = accept(addr);
        ACCEPT.with(|a| {
            let mut slot = a.borrow_mut();
            if slot.is_none() {
                *slot = Some(accept);
            }
        });
        peer.map_err(|e| {
            let kind = match e.kind {
                super::ErrorKind::Denied => io::ErrorKind::PermissionDenied,
                super::ErrorKind::Timeout => io::ErrorKind::TimedOut,
                super::ErrorKind::Connect => io::ErrorKind::ConnectionRefused,
                super::ErrorKind::Invalid => io::ErrorKind::InvalidInput,
            };
            io::Error::new(kind, e.message)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    #[test]
    fn connections_fail_with_the_kind_the_host_acts_on() {
        let t = Duration::from_secs(1);
        let e = TcpStream::connect("db.example:6379", t).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Invalid);
        assert!(matches!(e.into_error(), crate::Error::Config(_)));
        let e = TcpStream::connect("10.0.0.5:6379", t).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Denied);
        assert!(
            e.message.contains("capabilities.tcp = [\"10.0.0.5:6379\"]"),
            "{e}"
        );
        assert!(matches!(e.into_error(), crate::Error::Config(_)));
        let _g = testing::mock(|addr| {
            if addr.port() == 1 {
                Err(TcpError::new(ErrorKind::Connect, "refused"))
            } else {
                Ok(Box::new(|b: &[u8]| Ok(b.to_vec())) as Box<dyn testing::Peer>)
            }
        });
        let e = TcpStream::connect("127.0.0.1:1", t).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Connect);
        assert!(matches!(e.into_error(), crate::Error::Retryable(_)));
        let mut c = TcpStream::connect("127.0.0.1:2", t).unwrap();
        c.write_all(b"abc").unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(c.read(&mut buf).unwrap(), 3);
        let e = c.read(&mut buf).unwrap_err();
        assert!(matches!(io_error(e), crate::Error::Retryable(_)));
    }
}
