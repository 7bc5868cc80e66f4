//! The Kubernetes client's rate limit (`--kube-client-qps`, `--kube-client-burst`): a token bucket
//! as a tower layer under kube-rs's client, which has none of its own. Like client-go's limiter,
//! a request waits for a token (it is never refused): the bucket holds at most `burst` tokens and
//! refills at `qps` per second.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// A token bucket shared by every clone of the service it limits.
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<BucketState>,
}

#[derive(Debug)]
struct BucketState {
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens refilling at `qps` per second (both at least 1).
    pub fn new(qps: u32, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            qps: f64::from(qps.max(1)),
            burst,
            state: Mutex::new(BucketState {
                tokens: burst,
                at: Instant::now(),
            }),
        }
    }

    /// Takes one token and says how long to wait before using it (zero when one was there): the
    /// token is reserved at once, so callers queue in the order they asked.
    pub fn reserve(&self) -> Duration {
        self.reserve_at(Instant::now())
    }

    fn reserve_at(&self, now: Instant) -> Duration {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let elapsed = now.saturating_duration_since(state.at).as_secs_f64();
        state.tokens = (state.tokens + elapsed * self.qps).min(self.burst);
        state.at = now;
        state.tokens -= 1.0;
        if state.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-state.tokens / self.qps)
        }
    }
}

/// The layer: every request through the wrapped service takes a token of one shared bucket.
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    bucket: Arc<TokenBucket>,
}

impl RateLimitLayer {
    /// At most `qps` requests per second on average, `burst` at once.
    pub fn new(qps: u32, burst: u32) -> Self {
        Self {
            bucket: Arc::new(TokenBucket::new(qps, burst)),
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            bucket: Arc::clone(&self.bucket),
            wait: None,
            ready: false,
        }
    }
}

/// The rate-limited service: `poll_ready` is pending until this call's token is due.
#[derive(Debug)]
pub struct RateLimit<S> {
    inner: S,
    bucket: Arc<TokenBucket>,
    wait: Option<Pin<Box<Sleep>>>,
    /// A token is held for the next `call`.
    ready: bool,
}

impl<S: Clone> Clone for RateLimit<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            bucket: Arc::clone(&self.bucket),
            wait: None,
            ready: false,
        }
    }
}

impl<S, R> Service<R> for RateLimit<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if !self.ready {
            if self.wait.is_none() {
                let delay = self.bucket.reserve();
                if delay.is_zero() {
                    self.ready = true;
                } else {
                    self.wait = Some(Box::pin(tokio::time::sleep(delay)));
                }
            }
            if let Some(wait) = self.wait.as_mut() {
                if wait.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.wait = None;
                self.ready = true;
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        self.ready = false;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use super::*;

    #[test]
    fn a_full_bucket_serves_the_burst_then_one_token_per_interval() {
        let bucket = TokenBucket::new(10, 3);
        let start = Instant::now();
        for _ in 0..3 {
            assert_eq!(bucket.reserve_at(start), Duration::ZERO);
        }
        // The 4th and 5th wait 100 ms and 200 ms at 10 per second.
        let fourth = bucket.reserve_at(start);
        let fifth = bucket.reserve_at(start);
        assert!((fourth.as_secs_f64() - 0.1).abs() < 1e-9, "{fourth:?}");
        assert!((fifth.as_secs_f64() - 0.2).abs() < 1e-9, "{fifth:?}");
        // After a long pause the bucket is full again, never fuller than the burst.
        let later = start + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(bucket.reserve_at(later), Duration::ZERO);
        }
        assert!(bucket.reserve_at(later) > Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn the_layer_holds_requests_to_the_rate() {
        use tower::ServiceExt as _;
        let service = tower::service_fn(|n: u32| async move { Ok::<_, Infallible>(n) });
        let mut limited = RateLimitLayer::new(5, 2).layer(service);
        let start = Instant::now();
        for n in 0..7 {
            let out = limited.ready().await.unwrap().call(n).await.unwrap();
            assert_eq!(out, n);
        }
        // 2 at once, then 5 more at 5 per second: 1 s (virtual time).
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(999) && took < Duration::from_millis(1100),
            "{took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_kube_client_built_with_the_layer_waits_for_its_tokens() {
        // A kube Client over a stand-in API server, the way `capstan run` builds its client.
        let server = tower::service_fn(|_: http::Request<kube::client::Body>| async {
            Ok::<_, Infallible>(http::Response::new(kube::client::Body::from(
                b"ok".to_vec(),
            )))
        });
        let client = kube::Client::new(RateLimitLayer::new(4, 2).layer(server), "default");
        let start = Instant::now();
        for _ in 0..10 {
            let request = http::Request::get("/version").body(Vec::new()).unwrap();
            assert_eq!(client.request_text(request).await.unwrap(), "ok");
        }
        // 2 at once, then 8 at 4 per second: 2 s (virtual time).
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(1999) && took < Duration::from_millis(2100),
            "{took:?}"
        );
    }
}
