//! The host's HTTP endpoints (plain HTTP/1.1 on hyper): `/metrics` in the OpenMetrics text format
//! (the controllers' [`metrics`](crate::metrics) plus each live provider's capability counters),
//! and the probes `/healthz` (200 while the process serves) and `/readyz` (200 when the shared
//! [`Readiness`] says so).

pub mod readiness;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::capability::metrics::MetricsSnapshot;
use crate::metrics::{Metrics, MetricsError};
use crate::provider::Registry;

pub use self::readiness::Readiness;

/// Why an endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address does not parse.
    #[error("invalid bind address {0:?}: expected HOST:PORT, or 0 to turn the endpoint off")]
    Address(String),
    /// Listening failed.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// What went wrong.
        source: std::io::Error,
    },
}

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Parses a bind address; `0` (or empty) means off.
pub fn parse_bind_address(text: &str) -> Result<Option<SocketAddr>, ServeError> {
    match text.trim() {
        "" | "0" => Ok(None),
        other => other
            .parse()
            .map(Some)
            .map_err(|_| ServeError::Address(text.to_owned())),
    }
}

/// What one listener serves.
#[derive(Debug, Clone, Default)]
pub struct Endpoints {
    /// `/metrics`, with the providers whose capability counters to add.
    pub metrics: Option<Arc<Registry>>,
    /// `/healthz` and `/readyz`.
    pub probes: Option<Readiness>,
}

/// The `/metrics` text: the controllers' metrics, then every live provider's capability
/// counters (`capstan_provider_kube_calls_total{provider=...}` and so on).
pub fn metrics_text(providers: &Registry) -> Result<String, MetricsError> {
    let global = crate::metrics::render()?;
    let mut text = global.strip_suffix("# EOF\n").unwrap_or(&global).to_owned();
    let snapshots: Vec<(String, MetricsSnapshot)> = providers
        .all()
        .into_iter()
        .map(|(name, provider)| (name, provider.capabilities().metrics().snapshot()))
        .collect();
    encode_capabilities(&mut text, &snapshots)?;
    Ok(text)
}

/// Reads one counter of a snapshot.
type Counted = fn(&MetricsSnapshot) -> u64;

/// The prefix of the capability counters.
const CAPABILITY_PREFIX: &str = "capstan_provider";

/// The capability counters: name (under [`CAPABILITY_PREFIX`]), help, value.
const CAPABILITY_COUNTERS: [(&str, &str, Counted); 10] = [
    (
        "kube_calls",
        "kube import calls made by a provider (allowed or not)",
        |s| s.kube_calls,
    ),
    (
        "kube_denied",
        "kube import calls refused by the provider's grants",
        |s| s.kube_denied,
    ),
    (
        "kube_not_owned",
        "kube import calls refused because the object is not the provider's or the call would write its ownership mark (counted in kube_denied too)",
        |s| s.kube_not_owned,
    ),
    (
        "kube_failed",
        "allowed kube import calls that failed",
        |s| s.kube_failed,
    ),
    ("log_lines", "host.log lines written by a provider", |s| {
        s.log_lines
    }),
    ("cache_hits", "host cache lookups that hit", |s| {
        s.cache_hits
    }),
    ("cache_misses", "host cache lookups that missed", |s| {
        s.cache_misses
    }),
    (
        "http_requests",
        "outbound wasi:http requests made by a provider (allowed or not)",
        |s| s.http_requests,
    ),
    (
        "http_denied",
        "outbound wasi:http requests refused by the provider's egress grants",
        |s| s.http_denied,
    ),
    (
        "http_failed",
        "allowed outbound wasi:http requests that failed",
        |s| s.http_failed,
    ),
];

/// The name of every metric `/metrics` can carry (the controllers' and the capability
/// counters), series or not.
pub fn exported_names(metrics: &Metrics) -> Vec<String> {
    let mut names = metrics.names().to_vec();
    names.extend(
        CAPABILITY_COUNTERS
            .iter()
            .map(|(name, _, _)| format!("{CAPABILITY_PREFIX}_{name}_total")),
    );
    names
}

/// Appends the capability counters of `snapshots` (provider name, counters) and `# EOF`.
fn encode_capabilities(
    text: &mut String,
    snapshots: &[(String, MetricsSnapshot)],
) -> Result<(), MetricsError> {
    type Labels = Vec<(String, String)>;
    let mut registry = prometheus_client::registry::Registry::with_prefix(CAPABILITY_PREFIX);
    for (name, help, value) in CAPABILITY_COUNTERS {
        let family = Family::<Labels, Counter>::default();
        for (provider, snapshot) in snapshots {
            family
                .get_or_create(&vec![("provider".to_owned(), provider.clone())])
                .inc_by(value(snapshot));
        }
        registry.register(name, help, family);
    }
    encode(text, &registry)?;
    Ok(())
}

fn plain(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = header::HeaderValue::from_str(content_type) {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    response
}

/// The answer to one request.
pub fn respond(endpoints: &Endpoints, method: &Method, path: &str) -> Response<Full<Bytes>> {
    const TEXT: &str = "text/plain; charset=utf-8";
    if method != Method::GET && method != Method::HEAD {
        return plain(
            StatusCode::METHOD_NOT_ALLOWED,
            TEXT,
            "method not allowed\n".into(),
        );
    }
    match (path, &endpoints.metrics, &endpoints.probes) {
        ("/metrics", Some(providers), _) => match metrics_text(providers) {
            Ok(text) => plain(StatusCode::OK, OPENMETRICS, text),
            Err(err) => plain(StatusCode::INTERNAL_SERVER_ERROR, TEXT, format!("{err}\n")),
        },
        ("/healthz" | "/livez", _, Some(_)) => plain(StatusCode::OK, TEXT, "ok\n".into()),
        ("/readyz", _, Some(readiness)) => {
            let status = if readiness.is_ready() {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            plain(status, TEXT, readiness.report())
        }
        _ => plain(StatusCode::NOT_FOUND, TEXT, "not found\n".into()),
    }
}

/// Listens on `address` and serves `endpoints` on a background task until the process exits.
/// Returns the address actually bound (port 0 picks a free port).
pub async fn listen(address: SocketAddr, endpoints: Endpoints) -> Result<SocketAddr, ServeError> {
    let bind_err = |source| ServeError::Bind { address, source };
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(bind_err)?;
    let bound = listener.local_addr().map_err(bind_err)?;
    let endpoints = Arc::new(endpoints);
    tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _peer)) => stream,
                Err(err) => {
                    tracing::warn!(error = %err, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let endpoints = Arc::clone(&endpoints);
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |request: http::Request<Incoming>| {
                        let response = respond(&endpoints, request.method(), request.uri().path());
                        async move { Ok::<_, Infallible>(response) }
                    });
                let served = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(Duration::from_secs(10))
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
                if let Err(err) = served {
                    tracing::debug!(error = %err, "HTTP connection ended with an error");
                }
            });
        }
    });
    Ok(bound)
}

/// Starts the metrics and probe endpoints (`0` turns one off; the same address serves both).
/// Logs and returns the bound addresses: (metrics, probes).
pub async fn start(
    metrics_address: &str,
    probe_address: &str,
    providers: Arc<Registry>,
    readiness: Readiness,
) -> Result<(Option<SocketAddr>, Option<SocketAddr>), ServeError> {
    let metrics = parse_bind_address(metrics_address)?;
    let probes = parse_bind_address(probe_address)?;
    // One listener when both name the same fixed port (port 0 means a free port each).
    if metrics.is_some_and(|a| a.port() != 0) && metrics == probes {
        let address = metrics.unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
        let endpoints = Endpoints {
            metrics: Some(providers),
            probes: Some(readiness),
        };
        let bound = listen(address, endpoints).await?;
        tracing::info!(address = %bound, "serving /metrics, /healthz and /readyz");
        return Ok((Some(bound), Some(bound)));
    }
    let mut bound = (None, None);
    if let Some(address) = metrics {
        let endpoints = Endpoints {
            metrics: Some(providers),
            probes: None,
        };
        let address = listen(address, endpoints).await?;
        tracing::info!(%address, "serving /metrics");
        bound.0 = Some(address);
    }
    if let Some(address) = probes {
        let endpoints = Endpoints {
            metrics: None,
            probes: Some(readiness),
        };
        let address = listen(address, endpoints).await?;
        tracing::info!(%address, "serving /healthz and /readyz");
        bound.1 = Some(address);
    }
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    async fn body(response: Response<Full<Bytes>>) -> String {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[test]
    fn bind_addresses_parse_and_zero_is_off() {
        assert_eq!(parse_bind_address("0").unwrap(), None);
        assert_eq!(
            parse_bind_address("0.0.0.0:8080").unwrap(),
            Some(SocketAddr::from(([0, 0, 0, 0], 8080)))
        );
        let err = parse_bind_address(":8080").unwrap_err().to_string();
        assert!(err.contains("\":8080\""), "{err}");
    }

    #[tokio::test]
    async fn probes_follow_readiness() {
        let readiness = Readiness::new();
        let endpoints = Endpoints {
            metrics: None,
            probes: Some(readiness.clone()),
        };
        let healthz = respond(&endpoints, &Method::GET, "/healthz");
        assert_eq!(healthz.status(), StatusCode::OK);
        let readyz = respond(&endpoints, &Method::GET, "/readyz");
        assert_eq!(readyz.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(body(readyz).await.contains("[failed] caches synced"));
        readiness.set_caches_synced(true);
        readiness.set_providers_loaded(true);
        assert_eq!(
            respond(&endpoints, &Method::GET, "/readyz").status(),
            StatusCode::OK
        );
        assert_eq!(
            respond(&endpoints, &Method::GET, "/metrics").status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            respond(&endpoints, &Method::POST, "/healthz").status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
    }

    #[tokio::test]
    async fn metrics_include_the_controllers_and_end_with_eof() {
        crate::metrics::global().lifecycle.launched("serve-test");
        let endpoints = Endpoints {
            metrics: Some(Arc::new(Registry::new())),
            probes: None,
        };
        let response = respond(&endpoints, &Method::GET, "/metrics");
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()[header::CONTENT_TYPE], OPENMETRICS);
        let text = body(response).await;
        assert!(
            text.contains(r#"karpenter_nodeclaims_launched_total{nodepool="serve-test"}"#),
            "{text}"
        );
        assert_eq!(text.matches("# EOF").count(), 1, "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn capability_counters_are_labelled_by_provider() {
        let mut text = String::new();
        let snapshot = MetricsSnapshot {
            kube_calls: 7,
            kube_denied: 2,
            kube_not_owned: 1,
            cache_hits: 1,
            ..MetricsSnapshot::default()
        };
        encode_capabilities(&mut text, &[("kwok".to_owned(), snapshot)]).unwrap();
        for line in [
            "# TYPE capstan_provider_kube_calls counter",
            r#"capstan_provider_kube_calls_total{provider="kwok"} 7"#,
            r#"capstan_provider_kube_denied_total{provider="kwok"} 2"#,
            r#"capstan_provider_kube_not_owned_total{provider="kwok"} 1"#,
            r#"capstan_provider_cache_hits_total{provider="kwok"} 1"#,
            r#"capstan_provider_cache_misses_total{provider="kwok"} 0"#,
        ] {
            assert!(text.contains(line), "missing {line}:\n{text}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[tokio::test]
    async fn listen_serves_http() {
        let readiness = Readiness::new();
        let endpoints = Endpoints {
            metrics: None,
            probes: Some(readiness),
        };
        let address = listen(SocketAddr::from(([127, 0, 0, 1], 0)), endpoints)
            .await
            .unwrap();
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert!(answer.ends_with("ok\n"), "{answer}");
    }
}
