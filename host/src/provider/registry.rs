//! The registry of live providers: name → provider, swappable at run time. In-flight calls keep
//! the `Arc` they took, so replacing a provider never disturbs them. Every change bumps a
//! generation that controllers can [`Registry::subscribe`] to (e.g. to re-validate NodeClasses).
//! Beside each provider the registry keeps its Provider's spend limit
//! ([`Registry::spend_limit`]), which the provisioner applies over the provider's NodePools.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use crate::runtime::ProviderPre;

/// Live providers by name.
#[derive(Debug)]
pub struct Registry {
    providers: RwLock<HashMap<String, Arc<ProviderPre>>>,
    changes: tokio::sync::watch::Sender<u64>,
    /// `spec.spendLimitPerHour` by Provider name, in thousandths of the price unit.
    spend_limits: RwLock<HashMap<String, i64>>,
}

impl Default for Registry {
    fn default() -> Self {
        Self {
            providers: RwLock::default(),
            changes: tokio::sync::watch::Sender::new(0),
            spend_limits: RwLock::default(),
        }
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// A receiver that sees a new generation after every insert and remove.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn changed(&self) {
        self.changes.send_modify(|generation| *generation += 1);
    }

    /// Adds or replaces provider `name`; returns the one it replaced.
    pub fn insert(
        &self,
        name: impl Into<String>,
        provider: impl Into<Arc<ProviderPre>>,
    ) -> Option<Arc<ProviderPre>> {
        let replaced = self
            .providers
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.into(), provider.into());
        self.changed();
        replaced
    }

    /// The provider called `name`, if loaded.
    pub fn get(&self, name: &str) -> Option<Arc<ProviderPre>> {
        self.providers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    /// Sets (or, with `None`, clears) provider `name`'s spend limit per hour, in thousandths.
    pub fn set_spend_limit(&self, name: &str, millis: Option<i64>) {
        let mut limits = self
            .spend_limits
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        match millis {
            Some(millis) => limits.insert(name.to_owned(), millis),
            None => limits.remove(name),
        };
    }

    /// Provider `name`'s spend limit per hour over all its NodePools, in thousandths.
    pub fn spend_limit(&self, name: &str) -> Option<i64> {
        self.spend_limits
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .copied()
    }

    /// Removes provider `name` (and its spend limit); returns it.
    pub fn remove(&self, name: &str) -> Option<Arc<ProviderPre>> {
        self.set_spend_limit(name, None);
        let removed = self
            .providers
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
        if removed.is_some() {
            self.changed();
        }
        removed
    }

    /// The names of the loaded providers, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .providers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect();
        names.sort();
        names
    }

    /// Every loaded provider with its name.
    pub fn all(&self) -> Vec<(String, Arc<ProviderPre>)> {
        let mut all: Vec<_> = self
            .providers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(name, provider)| (name.clone(), Arc::clone(provider)))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }
}
