//! Outgoing HTTP for a plugin: a small blocking client over `wasi:http`.
//!
//! The host sends a request only to a host the changefeed grants the plugin
//! (`capabilities.http = ["hooks.example:443"]`, a host or `host:port`), and never
//! to the server's own listeners. A request the host refuses fails at
//! [`Request::send`] with [`ErrorKind::Denied`], whatever the body.
//!
//! ```no_run
//! use std::time::Duration;
//! use sluice_sdk::http::Request;
//!
//! # fn post(events: Vec<u8>) -> Result<(), sluice_sdk::Error> {
//! let response = Request::post("https://hooks.example/cdc")
//!     .header("content-type", "application/json")
//!     .bearer("s3cret")
//!     .timeout(Duration::from_secs(10))
//!     .body(events)
//!     .send()
//!     .and_then(|r| r.error_for_status())
//!     .map_err(|e| e.into_error())?;
//! assert!(response.status() < 300);
//! # Ok(())
//! # }
//! ```
//!
//! [`HttpError::into_error`] gives the plugin error the host acts on: a
//! timeout, a failed connection, a 5xx, 408 or 429 status are retryable (the
//! host backs off and replays); other 4xx statuses are fatal; a request the
//! host denies, or one that cannot be made (a bad URL or header), is a
//! configuration error. The message names the method, the URL without its query
//! and what happened, never a header value.
//!
//! Natively (unit tests) there is no host: install a test double with
//! [`testing::mock`] to answer requests; without one every request is denied.

use std::time::Duration;

/// The default [`Request::timeout`].
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The default [`Request::max_response_bytes`] (16 MiB).
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 16 << 20;

/// An HTTP method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// GET
    Get,
    /// HEAD
    Head,
    /// POST
    Post,
    /// PUT
    Put,
    /// PATCH
    Patch,
    /// DELETE
    Delete,
}

impl Method {
    /// The method as written on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
        }
    }
}

/// A request to send. Its `Debug` shows header names, not their values.
#[derive(Clone)]
pub struct Request {
    method: Method,
    url: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    timeout: Duration,
    max_response_bytes: usize,
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("method", &self.method)
            .field("url", &shown_url(&self.url))
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("body_bytes", &self.body.len())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Request {
    /// A request with no headers, an empty body and the default limits.
    pub fn new(method: Method, url: impl Into<String>) -> Self {
        Self {
            method,
            url: url.into(),
            headers: Vec::new(),
            body: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }

    /// A GET request.
    pub fn get(url: impl Into<String>) -> Self {
        Self::new(Method::Get, url)
    }

    /// A POST request.
    pub fn post(url: impl Into<String>) -> Self {
        Self::new(Method::Post, url)
    }

    /// A PUT request.
    pub fn put(url: impl Into<String>) -> Self {
        Self::new(Method::Put, url)
    }

    /// Add a header (names are case-insensitive; a name may repeat).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Add `authorization: Bearer {token}`.
    pub fn bearer(self, token: &str) -> Self {
        self.header("authorization", format!("Bearer {token}"))
    }

    /// Set the body (sent with its `content-length`).
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// How long connecting, the first response byte, any pause between
    /// response bytes, and the whole exchange may each take. Default 30 s.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The largest response body read; a longer one fails the request.
    /// Default 16 MiB (the body is held in the plugin's memory).
    pub fn max_response_bytes(mut self, bytes: usize) -> Self {
        self.max_response_bytes = bytes;
        self
    }

    /// The method.
    pub fn method(&self) -> Method {
        self.method
    }

    /// The URL as given.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The headers, in the order added.
    pub fn headers(&self) -> &[(String, Vec<u8>)] {
        &self.headers
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header_value(&self, name: &str) -> Option<&[u8]> {
        find_header(&self.headers, name)
    }

    /// The body.
    pub fn body_bytes(&self) -> &[u8] {
        &self.body
    }

    /// The body, to change in place (say, before sending the request again).
    pub fn body_mut(&mut self) -> &mut Vec<u8> {
        &mut self.body
    }

    /// The timeout.
    pub fn timeout_value(&self) -> Duration {
        self.timeout
    }

    /// Send the request and read the whole response. Any status is `Ok`; use
    /// [`Response::error_for_status`] to treat statuses of 300 and above as
    /// errors.
    pub fn send(&self) -> Result<Response, HttpError> {
        let url = Url::parse(&self.url).map_err(|m| self.error(ErrorKind::Invalid, None, m))?;
        transport::send(self, &url)
    }

    /// An error about this request.
    fn error(&self, kind: ErrorKind, status: Option<u16>, message: impl Into<String>) -> HttpError {
        HttpError {
            kind,
            status,
            target: format!("{} {}", self.method.as_str(), shown_url(&self.url)),
            message: message.into(),
        }
    }
}

/// A response: its status, headers and whole body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    /// `METHOD url` of the request, for [`Response::error_for_status`].
    target: String,
}

impl Response {
    /// A response with `status`, no headers and an empty body (test doubles
    /// build answers with it).
    pub fn new(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: Vec::new(),
            target: String::new(),
        }
    }

    /// Add a header.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Set the body.
    pub fn with_body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// The status code.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The headers, as received.
    pub fn headers(&self) -> &[(String, Vec<u8>)] {
        &self.headers
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        find_header(&self.headers, name)
    }

    /// The body.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// `Ok(self)` for a status below 300, else an [`ErrorKind::Status`] error
    /// carrying the status and the start of the body.
    pub fn error_for_status(self) -> Result<Self, HttpError> {
        if self.status < 300 {
            return Ok(self);
        }
        let reason = match self.status {
            300..=399 => "a redirect, which the client does not follow",
            408 | 429 => "the receiver asks to retry later",
            400..=499 => "the receiver refused the request",
            _ => "the receiver failed",
        };
        let mut message = format!("answered {} ({reason})", self.status);
        let body = self.text();
        let body = body.trim();
        if !body.is_empty() {
            let cut = body
                .char_indices()
                .nth(MAX_BODY_IN_MESSAGE)
                .map_or(body.len(), |(i, _)| i);
            message.push_str(": ");
            message.push_str(&body[..cut]);
            if cut < body.len() {
                message.push_str("...");
            }
        }
        Err(HttpError {
            kind: ErrorKind::Status,
            status: Some(self.status),
            target: self.target,
            message,
        })
    }
}

/// Characters of a response body an error message quotes.
const MAX_BODY_IN_MESSAGE: usize = 200;

/// What went wrong with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The host refused the request: the host is not granted to the plugin
    /// (`capabilities.http`), or it is one of the server's own listeners.
    Denied,
    /// Connecting, the first response byte, a pause in the response or the
    /// whole exchange took longer than the timeout.
    Timeout,
    /// The connection could not be made or was lost (DNS, refused, reset).
    Connect,
    /// The receiver answered with a status of 300 or above
    /// ([`Response::error_for_status`]).
    Status,
    /// TLS failed (certificate, handshake).
    Tls,
    /// The exchange broke the protocol, or the response was over a bound.
    Protocol,
    /// The request cannot be made as written (URL, header, method).
    Invalid,
}

/// A failed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpError {
    /// What went wrong.
    pub kind: ErrorKind,
    /// The status, for [`ErrorKind::Status`].
    pub status: Option<u16>,
    /// `METHOD url`, the URL without its query or user.
    pub target: String,
    /// What happened, without header values.
    pub message: String,
}

impl HttpError {
    /// An error of `kind` (test doubles answer with it).
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            status: None,
            target: String::new(),
            message: message.into(),
        }
    }

    /// Whether sending again later may succeed: timeouts, lost connections,
    /// protocol breaks, and the statuses 408, 429 and 5xx.
    pub fn is_retryable(&self) -> bool {
        match self.kind {
            ErrorKind::Timeout | ErrorKind::Connect | ErrorKind::Protocol => true,
            ErrorKind::Status => matches!(self.status, Some(408 | 429 | 500..)),
            ErrorKind::Denied | ErrorKind::Tls | ErrorKind::Invalid => false,
        }
    }

    /// The plugin error the host acts on: retryable ones retry; a denial and
    /// a request that cannot be made are configuration errors; the rest fatal.
    pub fn into_error(self) -> crate::Error {
        let text = self.to_string();
        match self.kind {
            _ if self.is_retryable() => crate::Error::retryable(text),
            ErrorKind::Denied | ErrorKind::Invalid => crate::Error::config(text),
            _ => crate::Error::fatal(text),
        }
    }
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.target.is_empty() {
            write!(f, "{}: ", self.target)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for HttpError {}

fn find_header<'a>(headers: &'a [(String, Vec<u8>)], name: &str) -> Option<&'a [u8]> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_slice())
}

/// `url` without its query, fragment and user, for messages.
fn shown_url(url: &str) -> String {
    let end = url.find(['?', '#']).unwrap_or(url.len());
    let url = &url[..end];
    match (url.find("://"), url.find('@')) {
        (Some(s), Some(at)) if at > s && !url[s + 3..at].contains('/') => {
            format!("{}{}", &url[..s + 3], &url[at + 1..])
        }
        _ => url.to_string(),
    }
}

/// A URL split the way `wasi:http` takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Url<'a> {
    https: bool,
    /// `host` or `host:port`.
    authority: &'a str,
    /// From the first `/` (or `/` when there is none), query included.
    path_with_query: std::borrow::Cow<'a, str>,
}

impl<'a> Url<'a> {
    fn parse(url: &'a str) -> Result<Self, String> {
        let (https, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err(format!(
                "`{}` is not an http:// or https:// URL",
                shown_url(url)
            ));
        };
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let authority = &rest[..end];
        if authority.contains('@') {
            return Err(
                "the URL carries a user or password; send credentials in a header instead"
                    .to_string(),
            );
        }
        if authority.is_empty() || authority.contains(char::is_whitespace) {
            return Err(format!("`{}` has no valid host", shown_url(url)));
        }
        let tail = &rest[end..];
        let tail = &tail[..tail.find('#').unwrap_or(tail.len())];
        let path_with_query: std::borrow::Cow<'a, str> = if tail.starts_with('/') {
            tail.into()
        } else {
            format!("/{tail}").into()
        };
        if path_with_query.contains(char::is_whitespace) {
            return Err(format!(
                "`{}` contains white space; percent-encode it",
                shown_url(url)
            ));
        }
        Ok(Self {
            https,
            authority,
            path_with_query,
        })
    }
}

#[cfg(target_arch = "wasm32")]
mod transport {
    use wasip2::http::outgoing_handler;
    use wasip2::http::types::{
        ErrorCode, Fields, IncomingBody, Method as WasiMethod, OutgoingBody, OutgoingRequest,
        RequestOptions, Scheme,
    };
    use wasip2::io::streams::StreamError;

    use super::{ErrorKind, HttpError, Method, Request, Response, Url};

    /// Bytes per body write (what `wasi:io` guarantees a write may take).
    const WRITE_CHUNK: usize = 4096;
    /// Bytes asked for per body read.
    const READ_CHUNK: u64 = 64 << 10;

    pub(super) fn send(request: &Request, url: &Url<'_>) -> Result<Response, HttpError> {
        let fail = |kind, message: String| request.error(kind, None, message);
        let mut headers: Vec<(String, Vec<u8>)> = request.headers.clone();
        if !request.body.is_empty() && request.header_value("content-length").is_none() {
            headers.push((
                "content-length".to_string(),
                request.body.len().to_string().into_bytes(),
            ));
        }
        let fields = Fields::from_list(&headers).map_err(|e| {
            fail(
                ErrorKind::Invalid,
                format!("a header cannot be sent ({e:?}); check its name and value"),
            )
        })?;
        let outgoing = OutgoingRequest::new(fields);
        let method = match request.method {
            Method::Get => WasiMethod::Get,
            Method::Head => WasiMethod::Head,
            Method::Post => WasiMethod::Post,
            Method::Put => WasiMethod::Put,
            Method::Patch => WasiMethod::Patch,
            Method::Delete => WasiMethod::Delete,
        };
        let scheme = if url.https {
            Scheme::Https
        } else {
            Scheme::Http
        };
        let set = outgoing.set_method(&method).is_ok()
            && outgoing.set_scheme(Some(&scheme)).is_ok()
            && outgoing.set_authority(Some(url.authority)).is_ok()
            && outgoing
                .set_path_with_query(Some(&url.path_with_query))
                .is_ok();
        if !set {
            return Err(fail(
                ErrorKind::Invalid,
                "the URL's host or path is not valid".to_string(),
            ));
        }
        let nanos = u64::try_from(request.timeout.as_nanos()).unwrap_or(u64::MAX);
        let options = RequestOptions::new();
        // A host may not support a timeout; the deadline below still holds.
        let _ = options.set_connect_timeout(Some(nanos));
        let _ = options.set_first_byte_timeout(Some(nanos));
        let _ = options.set_between_bytes_timeout(Some(nanos));
        let body = outgoing.body().map_err(|()| {
            fail(
                ErrorKind::Protocol,
                "the request body was taken".to_string(),
            )
        })?;
        let future = outgoing_handler::handle(outgoing, Some(options))
            .map_err(|code| from_code(request, &code))?;
        // The host has the request now; a refused one has dropped its body, so
        // a failed write is explained by the response's error below.
        let written = write_body(&body, &request.body);
        if written.is_ok() {
            let _ = OutgoingBody::finish(body, None);
        } else {
            drop(body);
        }
        let deadline = wasip2::clocks::monotonic_clock::subscribe_duration(nanos);
        let ready = future.subscribe();
        if wasip2::io::poll::poll(&[&ready, &deadline]) == [1] {
            return Err(fail(
                ErrorKind::Timeout,
                format!("no response within {:?}", request.timeout),
            ));
        }
        drop(ready);
        let response = match future.get() {
            Some(Ok(Ok(response))) => response,
            Some(Ok(Err(code))) => return Err(from_code(request, &code)),
            Some(Err(())) | None => {
                return Err(fail(
                    ErrorKind::Protocol,
                    "the response was lost".to_string(),
                ));
            }
        };
        if let Err(e) = written {
            return Err(fail(
                ErrorKind::Protocol,
                format!("the body could not be sent ({e}) though the receiver answered"),
            ));
        }
        let status = response.status();
        let headers = response.headers().entries().into_iter().collect::<Vec<_>>();
        let incoming = response.consume().map_err(|()| {
            fail(
                ErrorKind::Protocol,
                "the response body was taken".to_string(),
            )
        })?;
        let body = read_body(request, &incoming)?;
        drop(IncomingBody::finish(incoming));
        Ok(Response {
            status,
            headers,
            body,
            target: request.error(ErrorKind::Status, None, "").target,
        })
    }

    fn write_body(body: &OutgoingBody, bytes: &[u8]) -> Result<(), String> {
        if bytes.is_empty() {
            return Ok(());
        }
        let stream = body
            .write()
            .map_err(|()| "the body stream was taken".to_string())?;
        for chunk in bytes.chunks(WRITE_CHUNK) {
            stream
                .blocking_write_and_flush(chunk)
                .map_err(|e| stream_error(&e))?;
        }
        Ok(())
    }

    fn read_body(request: &Request, body: &IncomingBody) -> Result<Vec<u8>, HttpError> {
        let fail = |kind, message: String| request.error(kind, None, message);
        let stream = body.stream().map_err(|()| {
            fail(
                ErrorKind::Protocol,
                "the response body was taken".to_string(),
            )
        })?;
        let mut out = Vec::new();
        loop {
            match stream.blocking_read(READ_CHUNK) {
                Ok(chunk) => {
                    if out.len() + chunk.len() > request.max_response_bytes {
                        return Err(fail(
                            ErrorKind::Protocol,
                            format!(
                                "the response body is over {} bytes (Request::max_response_bytes)",
                                request.max_response_bytes
                            ),
                        ));
                    }
                    out.extend_from_slice(&chunk);
                }
                Err(StreamError::Closed) => return Ok(out),
                Err(StreamError::LastOperationFailed(e)) => {
                    let kind = match wasip2::http::types::http_error_code(&e) {
                        Some(code) => return Err(from_code(request, &code)),
                        None => ErrorKind::Connect,
                    };
                    return Err(fail(
                        kind,
                        format!("reading the response failed: {}", e.to_debug_string()),
                    ));
                }
            }
        }
    }

    fn stream_error(e: &StreamError) -> String {
        match e {
            StreamError::Closed => "the stream was closed".to_string(),
            StreamError::LastOperationFailed(e) => e.to_debug_string(),
        }
    }

    fn from_code(request: &Request, code: &ErrorCode) -> HttpError {
        use ErrorCode as C;
        let (kind, message) = match code {
            C::HttpRequestDenied | C::DestinationIpProhibited => (
                ErrorKind::Denied,
                "denied by the host: grant this host to the plugin with capabilities.http \
                 (a host or host:port; the server's own listeners are never reachable)"
                    .to_string(),
            ),
            C::DnsTimeout
            | C::ConnectionTimeout
            | C::ConnectionReadTimeout
            | C::ConnectionWriteTimeout
            | C::HttpResponseTimeout => (
                ErrorKind::Timeout,
                format!("timed out ({code:?}, timeout {:?})", request.timeout),
            ),
            C::DnsError(_)
            | C::DestinationNotFound
            | C::DestinationUnavailable
            | C::DestinationIpUnroutable
            | C::ConnectionRefused
            | C::ConnectionTerminated
            | C::ConnectionLimitReached => {
                (ErrorKind::Connect, format!("could not connect ({code:?})"))
            }
            C::TlsProtocolError | C::TlsCertificateError | C::TlsAlertReceived(_) => {
                (ErrorKind::Tls, format!("TLS failed ({code:?})"))
            }
            C::HttpRequestMethodInvalid
            | C::HttpRequestUriInvalid
            | C::HttpRequestUriTooLong
            | C::HttpRequestHeaderSectionSize(_)
            | C::HttpRequestHeaderSize(_)
            | C::HttpRequestLengthRequired
            | C::HttpRequestBodySize(_)
            | C::HttpRequestTrailerSectionSize(_)
            | C::HttpRequestTrailerSize(_)
            | C::ConfigurationError => (
                ErrorKind::Invalid,
                format!("the request cannot be sent as written ({code:?})"),
            ),
            _ => (
                ErrorKind::Protocol,
                format!("the exchange failed ({code:?})"),
            ),
        };
        request.error(kind, None, message)
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod transport {
    use super::{ErrorKind, HttpError, Request, Response, Url};

    pub(super) fn send(request: &Request, _url: &Url<'_>) -> Result<Response, HttpError> {
        let answer = super::testing::answer(request).unwrap_or_else(|| {
            Err(HttpError::new(
                ErrorKind::Denied,
                "denied: there is no host natively; answer requests in tests with \
                 sluice_sdk::http::testing::mock",
            ))
        });
        let target = request.error(ErrorKind::Status, None, "").target;
        match answer {
            Ok(mut response) => {
                if response.body.len() > request.max_response_bytes {
                    return Err(request.error(
                        ErrorKind::Protocol,
                        None,
                        format!(
                            "the response body is over {} bytes (Request::max_response_bytes)",
                            request.max_response_bytes
                        ),
                    ));
                }
                response.target = target;
                Ok(response)
            }
            Err(mut e) => {
                e.target = target;
                Err(e)
            }
        }
    }
}

/// A test double for native builds: answer the requests a plugin sends with a
/// closure, so [`crate::testing::SinkHarness`] tests a network sink without a
/// network.
///
/// ```
/// use sluice_sdk::http::{testing, ErrorKind, HttpError, Request, Response};
///
/// let _guard = testing::mock(|request: &Request| {
///     if request.body_bytes().is_empty() {
///         Err(HttpError::new(ErrorKind::Timeout, "stalled"))
///     } else {
///         Ok(Response::new(204))
///     }
/// });
/// assert_eq!(Request::post("http://hook.test/x").body("{}").send().unwrap().status(), 204);
/// assert!(Request::post("http://hook.test/x").send().unwrap_err().is_retryable());
/// ```
#[cfg(not(target_arch = "wasm32"))]
pub mod testing {
    use std::cell::RefCell;

    use super::{HttpError, Request, Response};

    type Handler = Box<dyn FnMut(&Request) -> Result<Response, HttpError>>;

    thread_local! {
        static HANDLER: RefCell<Option<Handler>> = const { RefCell::new(None) };
    }

    /// Removes the double when dropped.
    #[must_use = "the double is removed when the guard is dropped"]
    pub struct MockGuard(());

    impl Drop for MockGuard {
        fn drop(&mut self) {
            HANDLER.with(|h| h.borrow_mut().take());
        }
    }

    /// Answer every request sent on this thread with `handler` until the guard
    /// drops (a later `mock` replaces it). A handler returning an
    /// [`HttpError`] stands for a failed exchange (denied, timed out, ...).
    pub fn mock(
        handler: impl FnMut(&Request) -> Result<Response, HttpError> + 'static,
    ) -> MockGuard {
        HANDLER.with(|h| *h.borrow_mut() = Some(Box::new(handler)));
        MockGuard(())
    }

    pub(super) fn answer(request: &Request) -> Option<Result<Response, HttpError>> {
        // Taken out while it runs, so a handler that itself sends does not
        // borrow twice; put back unless it was replaced meanwhile.
        let mut handler = HANDLER.with(|h| h.borrow_mut().take())?;
        let answer = handler(request);
        HANDLER.with(|h| {
            let mut slot = h.borrow_mut();
            if slot.is_none() {
                *slot = Some(handler);
            }
        });
        Some(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_as_wasi_http_takes_them() {
        let u = Url::parse("https://hooks.example:8443/a/b?x=1#frag").unwrap();
        assert!(u.https);
        assert_eq!(u.authority, "hooks.example:8443");
        assert_eq!(u.path_with_query, "/a/b?x=1");
        let u = Url::parse("http://h").unwrap();
        assert_eq!(
            (u.https, u.authority, &*u.path_with_query),
            (false, "h", "/")
        );
        let u = Url::parse("http://h?q=1").unwrap();
        assert_eq!(u.path_with_query, "/?q=1");
        for bad in [
            "ftp://h/",
            "h/x",
            "http:///x",
            "http://u:p@h/",
            "http://h/a b",
        ] {
            assert!(Url::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn messages_never_show_a_query_or_a_password() {
        assert_eq!(
            shown_url("https://u:secret@h:1/p?token=x#f"),
            "https://h:1/p"
        );
        let e = Request::post("https://u:secret@h/p?token=x")
            .send()
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Invalid);
        assert!(
            !e.to_string().contains("secret") && !e.to_string().contains("token"),
            "{e}"
        );
        let r = Request::get("http://h/?token=x")
            .bearer("HUSH")
            .header("x-key", "HUSH");
        let shown = format!("{r:?}");
        assert!(
            !shown.contains("HUSH") && !shown.contains("token"),
            "{shown}"
        );
    }

    #[test]
    fn statuses_and_failures_map_to_the_contracts_error_kinds() {
        let status = |s: u16| {
            let _g = testing::mock(move |_| Ok(Response::new(s).with_body("nope")));
            Request::post("http://h/")
                .send()
                .unwrap()
                .error_for_status()
        };
        assert!(status(204).is_ok());
        for (s, want) in [
            (500, "retryable"),
            (503, "retryable"),
            (429, "retryable"),
            (408, "retryable"),
            (400, "fatal"),
            (401, "fatal"),
            (404, "fatal"),
            (301, "fatal"),
        ] {
            let e = status(s).unwrap_err();
            assert_eq!(e.status, Some(s));
            let got = match e.clone().into_error() {
                crate::Error::Retryable(_) => "retryable",
                crate::Error::Fatal(_) => "fatal",
                crate::Error::Config(_) => "config",
            };
            assert_eq!(got, want, "{s}: {e}");
            assert!(e.to_string().starts_with("POST http://h/: answered"), "{e}");
            assert!(e.to_string().ends_with(": nope"), "{e}");
        }
        for (kind, want) in [
            (ErrorKind::Denied, "config"),
            (ErrorKind::Invalid, "config"),
            (ErrorKind::Timeout, "retryable"),
            (ErrorKind::Connect, "retryable"),
            (ErrorKind::Protocol, "retryable"),
            (ErrorKind::Tls, "fatal"),
        ] {
            let _g = testing::mock(move |_| Err(HttpError::new(kind, "x")));
            let e = Request::get("http://h/").send().unwrap_err();
            assert_eq!(e.target, "GET http://h/");
            let got = match e.into_error() {
                crate::Error::Retryable(_) => "retryable",
                crate::Error::Fatal(_) => "fatal",
                crate::Error::Config(_) => "config",
            };
            assert_eq!(got, want, "{kind:?}");
        }
    }

    #[test]
    fn without_a_double_a_request_is_denied_and_a_long_body_is_refused() {
        let e = Request::get("http://h/").send().unwrap_err();
        assert_eq!(e.kind, ErrorKind::Denied);
        let _g =
            testing::mock(|r| Ok(Response::new(200).with_body(vec![b'x'; r.body_bytes().len()])));
        let e = Request::post("http://h/")
            .body(vec![0; 11])
            .max_response_bytes(10)
            .send()
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Protocol);
        let ok = Request::post("http://h/")
            .body(vec![0; 10])
            .max_response_bytes(10)
            .send();
        assert_eq!(ok.unwrap().body().len(), 10);
    }
}
