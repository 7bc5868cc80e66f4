//! [`BoundedValues`]: label values from outside the host, capped per scope so no answer of a
//! provider (or a user) grows the set of series.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

/// Distinct values a bounded label takes per metric and scope before new ones count as [`OTHER`].
pub const MAX_LABEL_VALUES: usize = 32;
/// The value that stands for every value past the bound.
pub const OTHER: &str = "other";

/// Distinct values seen of labels whose values come from outside the host, per scope (a metric
/// and a NodePool, say): the first `cap` pass as they are, later new ones become the `other`
/// value ([`OTHER`] for metrics).
#[derive(Debug)]
pub struct BoundedValues {
    cap: usize,
    other: &'static str,
    seen: Mutex<HashMap<String, HashSet<String>>>,
}

impl BoundedValues {
    /// At most `cap` distinct values per scope, then [`OTHER`].
    pub fn new(cap: usize) -> Self {
        Self::with_other(cap, OTHER)
    }

    /// At most `cap` distinct values per scope, then `other`.
    pub fn with_other(cap: usize, other: &'static str) -> Self {
        Self {
            cap,
            other,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// `value` if it was seen in `scope` before or there is room for it, else the `other` value.
    pub fn admit<'a>(&self, scope: &str, value: &'a str) -> &'a str {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let values = seen.entry(scope.to_owned()).or_default();
        if values.contains(value) {
            return value;
        }
        if values.len() < self.cap {
            values.insert(value.to_owned());
            return value;
        }
        self.other
    }

    /// Forgets the values of `scope` (its series are gone).
    pub fn forget(&self, scope: &str) {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(scope);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_values_keep_what_they_admitted() {
        let bounded = BoundedValues::new(2);
        assert_eq!(bounded.admit("s", "a"), "a");
        assert_eq!(bounded.admit("s", "b"), "b");
        assert_eq!(bounded.admit("s", "c"), OTHER);
        assert_eq!(bounded.admit("s", "a"), "a");
        assert_eq!(bounded.admit("t", "c"), "c");
        bounded.forget("s");
        assert_eq!(bounded.admit("s", "c"), "c");
    }
}
