//! The host's Kubernetes clients: kube-rs's client with the rate limit
//! ([`crate::ratelimit::RateLimitLayer`], `--kube-client-qps` and `--kube-client-burst`) and a
//! bound on how long a request waits for the API server to answer ([`RESPONSE_TIMEOUT`]).

use std::time::Duration;

use tower::timeout::TimeoutLayer;

use crate::ratelimit::RateLimitLayer;

/// How long a request may wait for the API server's response to begin. kube-rs gives up on a
/// connection only after its read timeout (295 s, sized for watches); an API server too loaded to
/// answer (its own handlers time out at 60 s) could leave a controller waiting that long on one
/// request, with nothing logged. A watch's response begins at once and is not cut: the bound is on
/// the response's start, not its body. A request cut here fails like any other and its controller
/// retries it.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(70);

/// A client for `config`: at most `qps` requests a second on average (bursts of `burst`), each
/// given up after [`RESPONSE_TIMEOUT`] without an answer.
pub fn client(config: kube::Config, qps: u32, burst: u32) -> Result<kube::Client, kube::Error> {
    client_timing_out(config, qps, burst, RESPONSE_TIMEOUT)
}

fn client_timing_out(
    config: kube::Config,
    qps: u32,
    burst: u32,
    timeout: Duration,
) -> Result<kube::Client, kube::Error> {
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&RateLimitLayer::new(qps, burst))
        .with_layer(&TimeoutLayer::new(timeout))
        .build())
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use k8s_openapi::api::core::v1::ConfigMap;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// A stand-in API server on a local port: each connection gets `answer` after its request.
    async fn server<F, Fut>(answer: F) -> kube::Config
    where
        F: Fn(tokio::net::TcpStream) -> Fut + Send + Copy + 'static,
        Fut: Future<Output = ()> + Send,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut request = [0u8; 4096];
                    let _ = stream.read(&mut request).await;
                    answer(stream).await;
                });
            }
        });
        kube::Config::new(format!("http://{address}").parse().unwrap())
    }

    /// A server that never answers: the request fails after the timeout, not the connection's
    /// read timeout.
    #[tokio::test]
    async fn a_request_the_server_never_answers_fails_after_the_timeout() {
        let config = server(|stream| async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(stream);
        })
        .await;
        let client = client_timing_out(config, 100, 100, Duration::from_millis(200)).unwrap();
        let started = Instant::now();
        let answer = kube::Api::<ConfigMap>::default_namespaced(client)
            .get("any")
            .await;
        let took = started.elapsed();
        assert!(answer.is_err(), "{answer:?}");
        assert!(
            took >= Duration::from_millis(200) && took < Duration::from_secs(5),
            "{took:?}"
        );
    }

    /// A response that begins at once is not cut, however long its body takes (a watch).
    #[tokio::test]
    async fn a_response_that_begins_in_time_may_take_longer() {
        let config = server(|mut stream| async move {
            let body = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"slow"}}"#;
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.flush().await;
            tokio::time::sleep(Duration::from_millis(600)).await;
            let _ = stream.write_all(body).await;
            let _ = stream.flush().await;
        })
        .await;
        let client = client_timing_out(config, 100, 100, Duration::from_millis(200)).unwrap();
        let got = kube::Api::<ConfigMap>::default_namespaced(client)
            .get("slow")
            .await
            .unwrap();
        assert_eq!(got.metadata.name.as_deref(), Some("slow"));
    }
}
