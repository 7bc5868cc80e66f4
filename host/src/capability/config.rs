//! The host side of `wasi:config/store` (contract 0.2): the configuration values and credentials
//! the Provider names for its provider.
//!
//! The values live in a [`ProviderConfig`] shared by every call of the provider; the Provider
//! controller replaces them when a Secret they come from changes, and each call takes a snapshot
//! when it starts (so a rotated Secret reaches the next call, never half of one). Values are
//! secrets: nothing here prints them ([`ConfigValues`]'s `Debug` shows the keys only).

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use wasmtime_wasi_config::WasiConfigVariables;

/// Resolved configuration: key → value.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ConfigValues(BTreeMap<String, String>);

impl ConfigValues {
    /// The values of `pairs`.
    pub fn new(pairs: impl IntoIterator<Item = (String, String)>) -> Self {
        Self(pairs.into_iter().collect())
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// The keys, for messages.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// What one call's `wasi:config/store` serves.
    pub(crate) fn to_wasi(&self) -> WasiConfigVariables {
        self.0
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }
}

impl std::fmt::Debug for ConfigValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|k| (k, "<redacted>")))
            .finish()
    }
}

/// A provider's current configuration, replaceable while calls run.
#[derive(Debug, Default)]
pub struct ProviderConfig {
    values: RwLock<Arc<ConfigValues>>,
}

impl ProviderConfig {
    /// The current values (a snapshot).
    pub fn current(&self) -> Arc<ConfigValues> {
        Arc::clone(&self.values.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Replaces the values; whether they changed.
    pub fn replace(&self, values: ConfigValues) -> bool {
        let mut current = self.values.write().unwrap_or_else(PoisonError::into_inner);
        if **current == values {
            return false;
        }
        *current = Arc::new(values);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_values() {
        let values = ConfigValues::new([("api-key".to_owned(), "s3cr3t-value".to_owned())]);
        let text = format!("{values:?} {:?}", ProviderConfig::default());
        assert!(text.contains("api-key"), "{text}");
        assert!(!text.contains("s3cr3t"), "{text}");
    }

    #[test]
    fn replace_reports_changes_and_snapshots_stay() {
        let config = ProviderConfig::default();
        let before = config.current();
        assert!(config.replace(ConfigValues::new([("k".into(), "v1".into())])));
        assert!(!config.replace(ConfigValues::new([("k".into(), "v1".into())])));
        assert!(before.is_empty());
        assert_eq!(config.current().get("k"), Some("v1"));
    }
}
