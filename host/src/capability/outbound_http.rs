//! The host side of `wasi:http/outgoing-handler` (contract 0.2): every request a provider makes
//! is checked against its [`EgressRules`] and sent by the host, bounded by [`HttpLimits`].
//!
//! wasmtime-wasi-http hands the request over with the scheme and authority the guest set (the
//! place to connect to); the check runs on those, before any DNS lookup or connection. A denial
//! is the `HTTP-request-denied` error code to the guest, a counter, a log line and a report to the
//! [`DenialSink`] (an Event on the Provider). The host never follows redirects. `https` is
//! verified against the system's roots plus the Provider's CA bundle, if any.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use super::egress::{EgressRules, Endpoint, Scheme};
use super::kube::{Denial, DenialReason, DenialSink};
use super::metrics::CapabilityMetrics;

/// Bounds of every outbound request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Connecting, including the TLS handshake. Default 10 s.
    pub connect_timeout: Duration,
    /// From sending the request to the response's headers. Default 30 s.
    pub first_byte_timeout: Duration,
    /// Between two chunks of the response body. Default 30 s.
    pub between_bytes_timeout: Duration,
    /// Largest response body, in bytes. Default 16 MiB.
    pub max_response_body: u64,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            first_byte_timeout: Duration::from_secs(30),
            between_bytes_timeout: Duration::from_secs(30),
            max_response_body: 16 << 20,
        }
    }
}

/// Why a CA bundle cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    /// Not PEM certificates.
    #[error("the CA bundle is not PEM certificates: {0}")]
    Pem(String),
    /// PEM, but no certificate rustls accepts.
    #[error("the CA bundle holds no usable certificate")]
    Empty,
}

/// The system's trust roots, loaded once per process (a missing or unreadable store is empty:
/// then only a Provider's own CA bundle is trusted).
fn system_roots() -> &'static [rustls::pki_types::CertificateDer<'static>] {
    static ROOTS: std::sync::OnceLock<Vec<rustls::pki_types::CertificateDer<'static>>> =
        std::sync::OnceLock::new();
    ROOTS.get_or_init(|| {
        let loaded = rustls_native_certs::load_native_certs();
        if !loaded.errors.is_empty() {
            tracing::debug!(
                errors = loaded.errors.len(),
                "some system CA certificates could not be read"
            );
        }
        loaded.certs
    })
}

/// A TLS client configuration trusting the system's roots plus the PEM certificates of
/// `ca_bundle`.
pub fn tls_config(ca_bundle: Option<&[u8]>) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(system_roots().iter().cloned());
    if let Some(pem) = ca_bundle {
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| TlsError::Pem(err.to_string()))?;
        let (added, _) = roots.add_parsable_certificates(certs);
        if added == 0 {
            return Err(TlsError::Empty);
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| TlsError::Pem(err.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The TLS configuration trusting the system's roots only, built once.
fn system_tls() -> Result<Arc<rustls::ClientConfig>, TlsError> {
    static CONFIG: std::sync::OnceLock<Result<Arc<rustls::ClientConfig>, TlsError>> =
        std::sync::OnceLock::new();
    CONFIG.get_or_init(|| tls_config(None)).clone()
}

/// What a provider's outbound HTTP runs with: its rules, limits and TLS trust. The default
/// denies everything.
#[derive(Clone, Default)]
pub struct HttpSettings {
    /// The egress rules (none: every request is denied).
    pub rules: EgressRules,
    /// Per-request bounds.
    pub limits: HttpLimits,
    /// TLS trust with the Provider's CA bundle; none trusts the system's roots only.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for HttpSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpSettings")
            .field("rules", &self.rules)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// The `wasi:http` hooks of one call: checks and sends requests.
pub(crate) struct OutboundHttp {
    provider: Arc<str>,
    settings: Arc<HttpSettings>,
    metrics: Arc<CapabilityMetrics>,
    on_denied: Option<DenialSink>,
}

impl OutboundHttp {
    pub(crate) fn new(
        provider: Arc<str>,
        settings: Arc<HttpSettings>,
        metrics: Arc<CapabilityMetrics>,
        on_denied: Option<DenialSink>,
    ) -> Self {
        Self {
            provider,
            settings,
            metrics,
            on_denied,
        }
    }

    /// Checks `request` against the rules: where to connect, or the denial.
    fn check(&self, request: &http::Request<WasiBody>) -> Result<Endpoint, Error> {
        self.metrics.http_request();
        let Some(endpoint) = Endpoint::of_uri(request.uri()) else {
            self.metrics.http_failed();
            return Err(Error::HttpRequestUriInvalid);
        };
        if self.settings.rules.allows(&endpoint) {
            tracing::debug!(provider = %self.provider, method = %request.method(), %endpoint, "outbound request");
            return Ok(endpoint);
        }
        self.metrics.http_denied();
        // The endpoint only: paths and queries may carry signatures or keys.
        let call = format!("{} {endpoint}", request.method());
        tracing::warn!(provider = %self.provider, call = %call, "outbound request denied by the provider's egress grants");
        if let Some(sink) = &self.on_denied {
            sink(Denial {
                provider: self.provider.to_string(),
                call,
                reason: DenialReason::NotGranted,
            });
        }
        Err(Error::HttpRequestDenied)
    }
}

type Worker = Box<dyn Future<Output = Result<(), Error>> + Send>;

impl WasiHttpHooks for OutboundHttp {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _body_sent: Worker,
    ) -> Box<dyn Future<Output = Result<(http::Response<WasiBody>, Worker), Error>> + Send> {
        let checked = self.check(&request);
        let settings = Arc::clone(&self.settings);
        let metrics = Arc::clone(&self.metrics);
        Box::new(async move {
            let endpoint = checked?;
            let result = send(&settings, &metrics, endpoint, request, options).await;
            if result.is_err() {
                metrics.http_failed();
            }
            result
        })
    }
}

/// The smaller of the guest's and the host's timeout.
fn bounded(guest: Option<Duration>, host: Duration) -> Duration {
    guest
        .map_or(host, |guest| guest.min(host))
        .max(Duration::from_millis(1))
}

trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static> Stream for T {}

/// Connects to `endpoint` and sends `request` over HTTP/1.1.
async fn send(
    settings: &HttpSettings,
    metrics: &Arc<CapabilityMetrics>,
    endpoint: Endpoint,
    mut request: http::Request<WasiBody>,
    options: Option<RequestOptions>,
) -> Result<(http::Response<WasiBody>, Worker), Error> {
    let limits = settings.limits;
    let connect_timeout = bounded(
        options.and_then(|o| o.connect_timeout),
        limits.connect_timeout,
    );
    let first_byte = bounded(
        options.and_then(|o| o.first_byte_timeout),
        limits.first_byte_timeout,
    );
    let between_bytes = bounded(
        options.and_then(|o| o.between_bytes_timeout),
        limits.between_bytes_timeout,
    );
    let deadline = Instant::now() + connect_timeout;
    let tcp = tokio::time::timeout_at(
        deadline,
        TcpStream::connect((endpoint.bare_host(), endpoint.port)),
    )
    .await
    .map_err(|_| Error::ConnectionTimeout)?
    .map_err(|err| match err.kind() {
        std::io::ErrorKind::ConnectionRefused => Error::ConnectionRefused,
        _ => Error::Connect(err),
    })?;
    let stream: Box<dyn Stream> = match endpoint.scheme {
        Scheme::Http => Box::new(tcp),
        Scheme::Https => {
            let name = rustls::pki_types::ServerName::try_from(endpoint.bare_host().to_owned())
                .map_err(|_| Error::HttpRequestUriInvalid)?;
            let config = match &settings.tls {
                Some(config) => Arc::clone(config),
                None => system_tls().map_err(|_| Error::TlsCertificateError)?,
            };
            let connector = tokio_rustls::TlsConnector::from(config);
            let tls = tokio::time::timeout_at(deadline, connector.connect(name, tcp))
                .await
                .map_err(|_| Error::ConnectionTimeout)?
                .map_err(Error::Tls)?;
            Box::new(tls)
        }
    };
    let (mut sender, connection) = tokio::time::timeout_at(
        deadline,
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)),
    )
    .await
    .map_err(|_| Error::ConnectionTimeout)??;
    // The request line carries the path and query only (the authority is in `Host`).
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    *request.uri_mut() = http::Uri::try_from(path).map_err(|_| Error::HttpRequestUriInvalid)?;
    // Drive the connection while waiting for the response; a connection that ends first (the
    // server answered and closed) still leaves the response to read.
    let mut connection = Some(Box::pin(connection));
    let exchange = async {
        let mut response = std::pin::pin!(sender.send_request(request));
        let driving = connection.as_mut().ok_or(Error::ConnectionTerminated)?;
        tokio::select! {
            biased;
            response = &mut response => Ok::<_, Error>(response?),
            ended = driving => {
                connection = None;
                ended?;
                Ok(response.await?)
            }
        }
    };
    let response = tokio::time::timeout(first_byte, exchange)
        .await
        .map_err(|_| Error::ConnectionReadTimeout)??;
    let cap = limits.max_response_body;
    if let Some(length) = response
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        && length > cap
    {
        return Err(Error::HttpResponseBodySize(Some(length)));
    }
    let response = response.map(|incoming| {
        BoundedBody {
            incoming,
            between_bytes,
            idle: Box::pin(tokio::time::sleep(between_bytes)),
            received: 0,
            cap,
            metrics: Arc::clone(metrics),
        }
        .boxed_unsync()
    });
    let worker: Worker = Box::new(async move {
        let Some(connection) = connection else {
            return Ok(());
        };
        connection.await.map_err(|err| {
            if err.is_timeout() {
                Error::HttpResponseTimeout
            } else {
                Error::from(err)
            }
        })
    });
    Ok((response, worker))
}

/// A response body with a between-bytes timeout and a size cap.
struct BoundedBody {
    incoming: Incoming,
    between_bytes: Duration,
    idle: Pin<Box<Sleep>>,
    received: u64,
    cap: u64,
    /// Counts a body that fails.
    metrics: Arc<CapabilityMetrics>,
}

impl Body for BoundedBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = &mut *self;
        let polled = this.poll_bounded(cx);
        if let Poll::Ready(Some(Err(_))) = &polled {
            this.metrics.http_failed();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming.size_hint()
    }
}

impl BoundedBody {
    fn poll_bounded(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = self;
        match Pin::new(&mut this.incoming).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.received = this.received.saturating_add(data.len() as u64);
                    if this.received > this.cap {
                        return Poll::Ready(Some(Err(Error::HttpResponseBodySize(Some(
                            this.received,
                        )))));
                    }
                }
                let next = Instant::now() + this.between_bytes;
                this.idle.as_mut().reset(next);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(err))) => Poll::Ready(Some(Err(Error::from(err)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                ready!(this.idle.as_mut().poll(cx));
                Poll::Ready(Some(Err(Error::ConnectionReadTimeout)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_take_the_smaller_bound() {
        let host = Duration::from_secs(30);
        assert_eq!(bounded(None, host), host);
        assert_eq!(
            bounded(Some(Duration::from_secs(5)), host),
            Duration::from_secs(5)
        );
        assert_eq!(bounded(Some(Duration::from_secs(60)), host), host);
        assert_eq!(
            bounded(Some(Duration::ZERO), host),
            Duration::from_millis(1)
        );
    }

    #[test]
    fn ca_bundles_must_hold_certificates() {
        assert!(tls_config(None).is_ok());
        assert_eq!(tls_config(Some(b"")).unwrap_err(), TlsError::Empty);
        assert!(
            tls_config(Some(
                b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n"
            ))
            .is_err()
        );
    }
}
