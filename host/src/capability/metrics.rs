//! Counters of what a provider did through its imports, for the future `/metrics` endpoint.

use std::sync::atomic::{AtomicU64, Ordering};

/// Per-provider counters. All methods are lock-free.
#[derive(Debug, Default)]
pub struct CapabilityMetrics {
    kube_calls: AtomicU64,
    kube_denied: AtomicU64,
    kube_not_owned: AtomicU64,
    kube_failed: AtomicU64,
    log_lines: AtomicU64,
    cache_hits: AtomicU64,
    cache_misses: AtomicU64,
    http_requests: AtomicU64,
    http_denied: AtomicU64,
    http_failed: AtomicU64,
}

/// A copy of the counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MetricsSnapshot {
    /// `kube` calls made (allowed or not).
    pub kube_calls: u64,
    /// `kube` calls refused by the grants.
    pub kube_denied: u64,
    /// Of those, the calls refused because the object is not the provider's (an `owned` grant)
    /// or because the call would write its ownership mark.
    pub kube_not_owned: u64,
    /// Allowed `kube` calls that failed (any error from the API server or the connection).
    pub kube_failed: u64,
    /// `host.log` lines.
    pub log_lines: u64,
    /// `host.cache-get` hits.
    pub cache_hits: u64,
    /// `host.cache-get` misses.
    pub cache_misses: u64,
    /// Outbound HTTP requests (`wasi:http`, allowed or not).
    pub http_requests: u64,
    /// Outbound HTTP requests refused by the egress grants.
    pub http_denied: u64,
    /// Allowed outbound HTTP requests that failed (connect, TLS, timeout, size cap...).
    pub http_failed: u64,
}

impl CapabilityMetrics {
    /// Counts a `kube` call.
    pub fn kube_call(&self) {
        self.kube_calls.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a denied `kube` call.
    pub fn kube_denied(&self) {
        self.kube_denied.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a `kube` call refused for ownership (counted as denied too).
    pub fn kube_not_owned(&self) {
        self.kube_not_owned.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a failed `kube` call.
    pub fn kube_failed(&self) {
        self.kube_failed.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a log line.
    pub fn log_line(&self) {
        self.log_lines.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a cache lookup.
    pub fn cache_lookup(&self, hit: bool) {
        let counter = if hit {
            &self.cache_hits
        } else {
            &self.cache_misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an outbound HTTP request.
    pub fn http_request(&self) {
        self.http_requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a denied outbound HTTP request.
    pub fn http_denied(&self) {
        self.http_denied.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a failed outbound HTTP request.
    pub fn http_failed(&self) {
        self.http_failed.fetch_add(1, Ordering::Relaxed);
    }

    /// The current values.
    pub fn snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            kube_calls: self.kube_calls.load(Ordering::Relaxed),
            kube_denied: self.kube_denied.load(Ordering::Relaxed),
            kube_not_owned: self.kube_not_owned.load(Ordering::Relaxed),
            kube_failed: self.kube_failed.load(Ordering::Relaxed),
            log_lines: self.log_lines.load(Ordering::Relaxed),
            cache_hits: self.cache_hits.load(Ordering::Relaxed),
            cache_misses: self.cache_misses.load(Ordering::Relaxed),
            http_requests: self.http_requests.load(Ordering::Relaxed),
            http_denied: self.http_denied.load(Ordering::Relaxed),
            http_failed: self.http_failed.load(Ordering::Relaxed),
        }
    }
}
