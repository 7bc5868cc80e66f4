//! The host's per-provider cache, with values stored as JSON.
//!
//! Each call runs in a fresh instance, so anything worth keeping between calls goes here. The host
//! bounds the cache and may evict early: a value read back is a hint, never a guarantee.
//!
//! ```ignore
//! let types = cache::get_or_insert_with("catalog", Duration::from_secs(60), || fetch_catalog())?;
//! ```

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::bindings::capstan::provider::host;

/// The raw bytes under `key`, if present.
pub fn get_raw(key: &str) -> Option<Vec<u8>> {
    host::cache_get(key)
}

/// Stores raw bytes under `key` for `ttl`.
pub fn set_raw(key: &str, value: &[u8], ttl: Duration) {
    host::cache_set(key, value, ttl_millis(ttl));
}

/// The value under `key`, if present and decodable as `T` (an undecodable entry is dropped).
pub fn get<T: DeserializeOwned>(key: &str) -> Option<T> {
    let bytes = host::cache_get(key)?;
    match serde_json::from_slice(&bytes) {
        Ok(value) => Some(value),
        Err(_) => {
            host::cache_delete(key);
            None
        }
    }
}

/// Stores `value` as JSON under `key` for `ttl`.
pub fn set<T: Serialize + ?Sized>(
    key: &str,
    value: &T,
    ttl: Duration,
) -> Result<(), serde_json::Error> {
    let bytes = serde_json::to_vec(value)?;
    host::cache_set(key, &bytes, ttl_millis(ttl));
    Ok(())
}

/// Removes `key`.
pub fn delete(key: &str) {
    host::cache_delete(key);
}

/// The cached value under `key`, or computes it with `f`, caches it for `ttl` and returns it.
/// Errors from `f` are returned and not cached.
pub fn get_or_insert_with<T, E>(
    key: &str,
    ttl: Duration,
    f: impl FnOnce() -> Result<T, E>,
) -> Result<T, E>
where
    T: Serialize + DeserializeOwned,
{
    if let Some(value) = get(key) {
        return Ok(value);
    }
    let value = f()?;
    // A value that cannot be encoded is still returned, just not cached.
    let _ = set(key, &value, ttl);
    Ok(value)
}

fn ttl_millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}
