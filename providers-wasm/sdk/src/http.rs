//! Outbound HTTP over `wasi:http/outgoing-handler` (contract 0.2, the `v0_2` feature): one
//! blocking request at a time, the whole response body read into memory.
//!
//! ```ignore
//! use capstan_provider_sdk::http::{self, Request};
//! let response = http::send(&Request::get("https://api.example.com/v1/zones").header("accept", "application/json"))?;
//! let zones: Vec<Zone> = response.json()?;
//! ```
//!
//! The host checks every request against the Provider's egress grants (`spec.egress`): a
//! request outside them fails with [`ErrorCode::HttpRequestDenied`] ([`Error::is_denied`]). It
//! bounds each request with timeouts and a response size cap (`spec.limits`), and never follows
//! redirects: a 3xx comes back as it is, and following it is a new request, checked again.
//! The types are the `wasip2` crate's, so any other client over `wasip2` works as well.

use wasip2::http::outgoing_handler;
pub use wasip2::http::types::ErrorCode;
use wasip2::http::types::{
    Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, RequestOptions, Scheme,
};
use wasip2::io::streams::StreamError;

/// At most this many bytes per write to a `wasi:io` output stream.
const WRITE_CHUNK: usize = 4096;
/// Bytes asked for per read of the response body.
const READ_CHUNK: u64 = 64 * 1024;

/// Why a request failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The URL is not `http(s)://authority/path?query`.
    #[error("invalid URL {url:?}: {reason}")]
    Url {
        /// The URL.
        url: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A header name or value the host refuses.
    #[error("invalid header {0:?}")]
    Header(String),
    /// The host or the network failed the request (denied by the egress grants, a timeout, a
    /// connection or TLS error, a body over the size cap...).
    #[error("HTTP request failed: {0}")]
    Http(ErrorCode),
    /// The response body is larger than the caller's limit ([`Request::max_body`]).
    #[error("the response body is over {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: u64,
    },
    /// The response body is not the JSON expected.
    #[error("decoding the response: {0}")]
    Decode(String),
}

impl Error {
    /// Whether the host refused the request under the Provider's egress grants.
    pub fn is_denied(&self) -> bool {
        matches!(self, Error::Http(ErrorCode::HttpRequestDenied))
    }

    /// Whether waiting longer or retrying may help (timeouts, connection failures).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Http(
                ErrorCode::ConnectionTimeout
                    | ErrorCode::ConnectionReadTimeout
                    | ErrorCode::ConnectionWriteTimeout
                    | ErrorCode::ConnectionRefused
                    | ErrorCode::ConnectionTerminated
                    | ErrorCode::HttpResponseTimeout
                    | ErrorCode::DnsTimeout
                    | ErrorCode::DestinationUnavailable
            )
        )
    }
}

/// An HTTP request.
#[derive(Debug, Clone)]
pub struct Request {
    method: String,
    url: String,
    headers: Vec<(String, String)>,
    body: Option<Vec<u8>>,
    max_body: u64,
    timeout_ms: Option<u64>,
}

impl Request {
    /// A request with `method` (`GET`, `POST`, ...) to `url`.
    pub fn new(method: &str, url: impl Into<String>) -> Self {
        Self {
            method: method.to_owned(),
            url: url.into(),
            headers: Vec::new(),
            body: None,
            max_body: 64 << 20,
            timeout_ms: None,
        }
    }

    /// A `GET` of `url`.
    pub fn get(url: impl Into<String>) -> Self {
        Self::new("GET", url)
    }

    /// A `POST` of `body` to `url`.
    pub fn post(url: impl Into<String>, body: impl Into<Vec<u8>>) -> Self {
        Self::new("POST", url).body(body)
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = Some(body.into());
        self
    }

    /// Fails responses with a body over `bytes` (default 64 MiB; the host has its own cap).
    pub fn max_body(mut self, bytes: u64) -> Self {
        self.max_body = bytes;
        self
    }

    /// Asks for connect, first-byte and between-bytes timeouts of `millis` each (the host keeps
    /// its own limits when they are shorter).
    pub fn timeout_ms(mut self, millis: u64) -> Self {
        self.timeout_ms = Some(millis);
        self
    }
}

/// A response, its body read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The headers, names lower case, in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of header `name` (case-insensitive), as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }

    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body as text (lossy UTF-8).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_slice(&self.body).map_err(|err| Error::Decode(err.to_string()))
    }
}

/// `(scheme, authority, path-and-query)` of `url`.
pub fn split_url(url: &str) -> Result<(&str, &str, String), Error> {
    let fail = |reason| Error::Url {
        url: url.to_owned(),
        reason,
    };
    let (scheme, rest) = url.split_once("://").ok_or_else(|| fail("no scheme"))?;
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err(fail("the scheme must be http or https"));
    }
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    if authority.is_empty() {
        return Err(fail("no host"));
    }
    let path = match path.strip_prefix('?') {
        Some(query) => format!("/?{query}"),
        None if path.is_empty() => "/".to_owned(),
        None => path.to_owned(),
    };
    Ok((scheme, authority, path))
}

fn method(name: &str) -> Method {
    match name.to_ascii_uppercase().as_str() {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "DELETE" => Method::Delete,
        "PATCH" => Method::Patch,
        "OPTIONS" => Method::Options,
        _ => Method::Other(name.to_owned()),
    }
}

/// Sends `request` and reads the whole response. Blocks this call (the host keeps running other
/// calls) until the response is in or a limit fails it.
pub fn send(request: &Request) -> Result<Response, Error> {
    let (scheme, authority, path) = split_url(&request.url)?;
    let headers: Vec<(String, Vec<u8>)> = request
        .headers
        .iter()
        .map(|(n, v)| (n.clone(), v.clone().into_bytes()))
        .collect();
    let fields = Fields::from_list(&headers).map_err(|_| {
        Error::Header(
            request
                .headers
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        )
    })?;
    let outgoing = OutgoingRequest::new(fields);
    let invalid = |reason| Error::Url {
        url: request.url.clone(),
        reason,
    };
    outgoing
        .set_method(&method(&request.method))
        .map_err(|()| invalid("bad method"))?;
    let scheme = if scheme.eq_ignore_ascii_case("https") {
        Scheme::Https
    } else {
        Scheme::Http
    };
    outgoing
        .set_scheme(Some(&scheme))
        .map_err(|()| invalid("bad scheme"))?;
    outgoing
        .set_authority(Some(authority))
        .map_err(|()| invalid("bad authority"))?;
    outgoing
        .set_path_with_query(Some(&path))
        .map_err(|()| invalid("bad path"))?;
    let options = request.timeout_ms.map(|millis| {
        let options = RequestOptions::new();
        let nanos = millis.saturating_mul(1_000_000);
        // The host may refuse a setting; it then keeps its own limit.
        let _ = options.set_connect_timeout(Some(nanos));
        let _ = options.set_first_byte_timeout(Some(nanos));
        let _ = options.set_between_bytes_timeout(Some(nanos));
        options
    });
    let body = outgoing.body().map_err(|()| invalid("body taken"))?;
    let future = outgoing_handler::handle(outgoing, options).map_err(Error::Http)?;
    if let Some(bytes) = &request.body {
        let stream = body.write().map_err(|()| invalid("body stream taken"))?;
        for chunk in bytes.chunks(WRITE_CHUNK) {
            if stream.blocking_write_and_flush(chunk).is_err() {
                break; // the response (or its error) says why
            }
        }
        drop(stream);
    }
    OutgoingBody::finish(body, None).map_err(Error::Http)?;
    let response = loop {
        match future.get() {
            Some(Ok(result)) => break result.map_err(Error::Http)?,
            Some(Err(())) => return Err(Error::Http(ErrorCode::InternalError(None))),
            None => future.subscribe().block(),
        }
    };
    let status = response.status();
    let headers = response.headers().entries();
    let incoming = response
        .consume()
        .map_err(|()| Error::Http(ErrorCode::InternalError(None)))?;
    let body = read_body(&incoming, request.max_body)?;
    drop(response);
    let _ = IncomingBody::finish(incoming);
    Ok(Response {
        status,
        headers,
        body,
    })
}

fn read_body(incoming: &IncomingBody, limit: u64) -> Result<Vec<u8>, Error> {
    let stream = incoming
        .stream()
        .map_err(|()| Error::Http(ErrorCode::InternalError(None)))?;
    let mut body = Vec::new();
    loop {
        match stream.blocking_read(READ_CHUNK) {
            Ok(chunk) => {
                body.extend_from_slice(&chunk);
                if body.len() as u64 > limit {
                    return Err(Error::TooLarge { limit });
                }
            }
            Err(StreamError::Closed) => return Ok(body),
            Err(StreamError::LastOperationFailed(err)) => {
                let code = wasip2::http::types::http_error_code(&err)
                    .unwrap_or_else(|| ErrorCode::InternalError(Some(err.to_debug_string())));
                return Err(Error::Http(code));
            }
        }
    }
}

/// `GET url`, the body as text, non-2xx an error (`Error::Decode` naming the status).
pub fn get_text(url: &str) -> Result<String, Error> {
    let response = send(&Request::get(url))?;
    if !response.is_success() {
        return Err(Error::Decode(format!("{url}: status {}", response.status)));
    }
    Ok(response.text())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_scheme_authority_and_path() {
        assert_eq!(
            split_url("https://api.example.com/v1?x=1").unwrap(),
            ("https", "api.example.com", "/v1?x=1".to_owned())
        );
        assert_eq!(
            split_url("http://127.0.0.1:8080").unwrap(),
            ("http", "127.0.0.1:8080", "/".to_owned())
        );
        assert_eq!(
            split_url("http://h?q").unwrap(),
            ("http", "h", "/?q".to_owned())
        );
        assert!(split_url("ftp://h/").is_err());
        assert!(split_url("https:///x").is_err());
        assert!(split_url("api.example.com").is_err());
    }
}
