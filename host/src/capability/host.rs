//! The host side of the `host` import: logging, time and the per-provider cache.
//!
//! `sleep` needs no state (the bindings call `tokio::time::sleep`, which suspends the guest's fiber
//! without blocking a thread); what needs state lives here.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Longest log message kept; longer ones are cut (a provider cannot flood the host's logs with
/// one line).
pub const MAX_LOG_MESSAGE: usize = 8 * 1024;

/// A log level, as in the `host` import.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    /// Trace.
    Trace,
    /// Debug.
    Debug,
    /// Info.
    Info,
    /// Warn.
    Warn,
    /// Error.
    Error,
}

/// Writes a provider's log line as a `tracing` event with the field `provider`.
pub fn log(provider: &str, level: LogLevel, message: &str) {
    let message = truncate(message, MAX_LOG_MESSAGE);
    match level {
        LogLevel::Trace => tracing::trace!(target: "capstan::provider", provider, "{message}"),
        LogLevel::Debug => tracing::debug!(target: "capstan::provider", provider, "{message}"),
        LogLevel::Info => tracing::info!(target: "capstan::provider", provider, "{message}"),
        LogLevel::Warn => tracing::warn!(target: "capstan::provider", provider, "{message}"),
        LogLevel::Error => tracing::error!(target: "capstan::provider", provider, "{message}"),
    }
}

/// `text` cut to at most `max` bytes at a character boundary.
pub fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Wall-clock time in milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Failure of a cache operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    /// The value alone is larger than the cache allows.
    #[error("value of {size} bytes exceeds the per-value limit of {limit} bytes")]
    ValueTooLarge {
        /// The value's size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The key is longer than allowed.
    #[error("key of {size} bytes exceeds the limit of {limit} bytes")]
    KeyTooLarge {
        /// The key's size.
        size: usize,
        /// The limit.
        limit: usize,
    },
}

/// Bounds of a [`ProviderCache`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheLimits {
    /// Most entries.
    pub max_entries: usize,
    /// Most bytes (keys and values).
    pub max_bytes: usize,
    /// Largest single value.
    pub max_value: usize,
    /// Longest key.
    pub max_key: usize,
    /// Longest TTL; longer ones are shortened to it.
    pub max_ttl: Duration,
}

impl Default for CacheLimits {
    fn default() -> Self {
        Self {
            max_entries: 1024,
            max_bytes: 16 << 20,
            max_value: 4 << 20,
            max_key: 1024,
            max_ttl: Duration::from_secs(24 * 3600),
        }
    }
}

struct Entry {
    value: Vec<u8>,
    expires: Instant,
}

impl Entry {
    fn size(&self, key: &str) -> usize {
        key.len() + self.value.len()
    }
}

#[derive(Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    bytes: usize,
}

/// A provider's cache: shared by all its calls (each runs in a fresh instance) and kept across
/// reloads of the same provider. Entries expire after their TTL; when full, the entries closest to
/// expiry are evicted first.
pub struct ProviderCache {
    limits: CacheLimits,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for ProviderCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        f.debug_struct("ProviderCache")
            .field("entries", &inner.entries.len())
            .field("bytes", &inner.bytes)
            .field("limits", &self.limits)
            .finish()
    }
}

impl Default for ProviderCache {
    fn default() -> Self {
        Self::new(CacheLimits::default())
    }
}

impl ProviderCache {
    /// An empty cache with these bounds.
    pub fn new(limits: CacheLimits) -> Self {
        Self {
            limits,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the map inconsistent in a way that matters
        // for a cache; keep serving.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The value for `key`, unless absent or expired.
    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        let now = Instant::now();
        let mut inner = self.lock();
        let expired = match inner.entries.get(key) {
            Some(entry) if entry.expires > now => return Some(entry.value.clone()),
            Some(_) => true,
            None => false,
        };
        if expired {
            remove(&mut inner, key);
        }
        None
    }

    /// Stores `value` under `key` for `ttl` (capped at the limit). A zero TTL deletes the key.
    pub fn set(&self, key: &str, value: Vec<u8>, ttl: Duration) -> Result<(), CacheError> {
        if key.len() > self.limits.max_key {
            return Err(CacheError::KeyTooLarge {
                size: key.len(),
                limit: self.limits.max_key,
            });
        }
        if value.len() > self.limits.max_value {
            return Err(CacheError::ValueTooLarge {
                size: value.len(),
                limit: self.limits.max_value,
            });
        }
        let now = Instant::now();
        let mut inner = self.lock();
        remove(&mut inner, key);
        if ttl.is_zero() {
            return Ok(());
        }
        let entry = Entry {
            value,
            expires: now + ttl.min(self.limits.max_ttl),
        };
        let size = entry.size(key);
        inner.entries.retain(|_, e| e.expires > now);
        inner.bytes = inner.entries.iter().map(|(k, e)| e.size(k)).sum();
        while !inner.entries.is_empty()
            && (inner.entries.len() >= self.limits.max_entries
                || inner.bytes + size > self.limits.max_bytes)
        {
            let soonest = inner
                .entries
                .iter()
                .min_by_key(|(_, e)| e.expires)
                .map(|(k, _)| k.clone());
            match soonest {
                Some(k) => remove(&mut inner, &k),
                None => break,
            }
        }
        inner.bytes += size;
        inner.entries.insert(key.to_owned(), entry);
        Ok(())
    }

    /// Removes `key`.
    pub fn delete(&self, key: &str) {
        remove(&mut self.lock(), key);
    }

    /// Number of entries (expired ones included until touched).
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held (keys and values).
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }
}

fn remove(inner: &mut Inner, key: &str) {
    if let Some(entry) = inner.entries.remove(key) {
        inner.bytes = inner.bytes.saturating_sub(entry.size(key));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_get_delete() {
        let cache = ProviderCache::default();
        assert_eq!(cache.get("k"), None);
        cache
            .set("k", b"v".to_vec(), Duration::from_secs(60))
            .unwrap();
        assert_eq!(cache.get("k"), Some(b"v".to_vec()));
        assert_eq!(cache.bytes(), 2);
        cache.delete("k");
        assert_eq!(cache.get("k"), None);
        assert_eq!(cache.bytes(), 0);
    }

    #[test]
    fn expiry() {
        let cache = ProviderCache::default();
        cache
            .set("k", b"v".to_vec(), Duration::from_millis(20))
            .unwrap();
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(cache.get("k"), None);
        assert!(cache.is_empty());
        cache.set("z", b"v".to_vec(), Duration::ZERO).unwrap();
        assert_eq!(cache.get("z"), None);
    }

    #[test]
    fn bounded_entries_and_bytes() {
        let cache = ProviderCache::new(CacheLimits {
            max_entries: 3,
            max_bytes: 100,
            max_value: 50,
            ..CacheLimits::default()
        });
        for i in 0..10u64 {
            cache
                .set(&format!("k{i}"), vec![0; 10], Duration::from_secs(100 + i))
                .unwrap();
            assert!(cache.len() <= 3);
        }
        // The entries expiring last survive.
        assert!(cache.get("k9").is_some());
        assert!(cache.get("k0").is_none());
        for i in 0..3u64 {
            cache
                .set(
                    &format!("big{i}"),
                    vec![0; 45],
                    Duration::from_secs(1000 + i),
                )
                .unwrap();
            assert!(cache.bytes() <= 100, "{}", cache.bytes());
        }
        assert_eq!(
            cache.set("huge", vec![0; 51], Duration::from_secs(1)),
            Err(CacheError::ValueTooLarge {
                size: 51,
                limit: 50
            })
        );
    }

    #[test]
    fn truncates_at_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "h");
        assert_eq!(truncate("héllo", 3), "hé");
        assert_eq!(truncate("abc", 10), "abc");
    }
}
