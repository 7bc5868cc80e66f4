//! Event deduplication for steps that retry every second: the same Event (same object, reason and
//! note) is published once per [`Dedupe::TTL`], not once per retry (Karpenter's recorder dedupes
//! the same way, for two minutes).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The Events published lately, by key.
#[derive(Debug, Default)]
pub struct Dedupe {
    seen: Mutex<HashMap<String, Instant>>,
}

impl Dedupe {
    /// How long an Event keeps its repeats quiet.
    pub const TTL: Duration = Duration::from_secs(120);

    /// Whether an Event keyed `key` is due now (and if so, remembers it).
    pub fn first(&self, key: &str) -> bool {
        self.first_at(key, Instant::now())
    }

    fn first_at(&self, key: &str, now: Instant) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.retain(|_, at| now.saturating_duration_since(*at) < Self::TTL);
        if seen.contains_key(key) {
            return false;
        }
        seen.insert(key.to_owned(), now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_per_ttl_and_key() {
        let d = Dedupe::default();
        let t0 = Instant::now();
        assert!(d.first_at("a", t0));
        assert!(!d.first_at("a", t0 + Duration::from_secs(1)));
        assert!(d.first_at("b", t0 + Duration::from_secs(1)), "another key");
        assert!(!d.first_at("a", t0 + Dedupe::TTL - Duration::from_millis(1)));
        assert!(d.first_at("a", t0 + Dedupe::TTL), "due again after the TTL");
        assert!(!d.first_at("a", t0 + Dedupe::TTL + Duration::from_secs(1)));
    }
}
