//! The Provider's configuration and credentials over `wasi:config/store` (contract 0.2, the
//! `v0_2` feature): the values an admin names in `Provider.spec.config`, literal or from a Secret
//! key. The host resolves them per call, so a rotated Secret is what the next call reads.
//!
//! ```ignore
//! let api_key = capstan_provider_sdk::config::require("api-key")?;
//! ```
//!
//! Treat values as secrets: never log them or put them in errors.

use crate::ProviderError;
use crate::bindings::wasi::config::store;

/// Why the host could not answer.
pub use store::Error;

/// The value of `key`, or none if the Provider does not define it.
pub fn get(key: &str) -> Result<Option<String>, Error> {
    store::get(key)
}

/// Every key and value.
pub fn all() -> Result<Vec<(String, String)>, Error> {
    store::get_all()
}

/// The value of `key`; a missing one is `node-class-not-ready` naming the key (the admin must add
/// it to the Provider), a host failure `retryable`.
pub fn require(key: &str) -> Result<String, ProviderError> {
    match store::get(key) {
        Ok(Some(value)) => Ok(value),
        Ok(None) => Err(ProviderError::NodeClassNotReady(format!(
            "the Provider does not define configuration key {key:?} (spec.config)"
        ))),
        Err(Error::Upstream(message) | Error::Io(message)) => Err(ProviderError::Retryable(
            format!("reading configuration key {key:?}: {message}"),
        )),
    }
}
