//! Launches waiting on a MachineDeployment, recorded in its annotation
//! `capstan.dev/launch-requests` (`claim@millis,claim@millis`), so that concurrent launches (any
//! call, any host replica) share one scale-up: each launch adds itself, waits a short batch
//! window, and whoever then finds too few Machines raises the replicas for all of them at once.
//!
//! The annotation is written with the MachineDeployment's resourceVersion (compare-and-swap), and
//! the `scale` subresource shares that resourceVersion, so decisions are made on one consistent
//! view. A launch counts as waiting until a Machine carries its claim label; entries older than
//! the launch timeout (a host that died mid-launch) are pruned.

use std::collections::{BTreeMap, BTreeSet};

/// The annotation.
pub const ANNOTATION: &str = "capstan.dev/launch-requests";

/// Waiting launches: claim name → when it asked (ms since the epoch).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ledger(BTreeMap<String, u64>);

impl Ledger {
    /// Reads the annotation; malformed entries are dropped.
    pub fn parse(text: Option<&str>) -> Self {
        Self(
            text.unwrap_or_default()
                .split(',')
                .filter_map(|entry| {
                    let (claim, since) = entry.trim().rsplit_once('@')?;
                    let since = since.parse().ok()?;
                    (!claim.is_empty()).then(|| (claim.to_string(), since))
                })
                .collect(),
        )
    }

    /// The annotation's text; `None` when nothing waits (the annotation is removed).
    pub fn to_text(&self) -> Option<String> {
        (!self.0.is_empty()).then(|| {
            self.0
                .iter()
                .map(|(claim, since)| format!("{claim}@{since}"))
                .collect::<Vec<_>>()
                .join(",")
        })
    }

    /// Adds `claim` (kept with its first time if present).
    pub fn add(&mut self, claim: &str, now: u64) {
        self.0.entry(claim.to_string()).or_insert(now);
    }

    /// Removes `claim`.
    pub fn remove(&mut self, claim: &str) {
        self.0.remove(claim);
    }

    /// Drops entries older than `max_age` ms.
    pub fn prune(&mut self, now: u64, max_age: u64) {
        self.0
            .retain(|_, since| now.saturating_sub(*since) <= max_age);
    }

    /// Whether `claim` waits.
    pub fn contains(&self, claim: &str) -> bool {
        self.0.contains_key(claim)
    }

    /// How many launches still wait for a Machine (those no Machine is claimed for yet).
    pub fn waiting(&self, claimed: &BTreeSet<String>) -> usize {
        self.0.keys().filter(|c| !claimed.contains(*c)).count()
    }
}

/// A MachineDeployment's Machines as capacity for waiting launches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// `spec.replicas`.
    pub replicas: i64,
    /// Machines that exist and are not leaving.
    pub live: usize,
    /// Of those, the ones no launch has claimed.
    pub unclaimed: usize,
    /// Launches waiting for a Machine.
    pub waiting: usize,
}

/// The MachineDeployment may not grow enough.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtMaxSize {
    /// Its maximum size.
    pub max: i64,
}

impl Capacity {
    /// Machines a waiting launch can still get: the replicas not claimed yet (unclaimed Machines,
    /// and ones the replicas ask for that do not exist yet). Machines beyond the replicas — a
    /// rolling update's surge, which Cluster API removes again — are not capacity.
    pub fn available(&self) -> usize {
        let claimed = self.live.saturating_sub(self.unclaimed);
        usize::try_from(self.replicas)
            .unwrap_or(0)
            .saturating_sub(claimed)
    }

    /// The replicas to ask for so that every waiting launch gets a Machine; `None` when there
    /// are enough already. Capped at `max`; nothing left to add under it is [`AtMaxSize`].
    pub fn wanted(&self, max: Option<i64>) -> Result<Option<i64>, AtMaxSize> {
        let short = self.waiting.saturating_sub(self.available());
        if short == 0 {
            return Ok(None);
        }
        let target = self
            .replicas
            .saturating_add(i64::try_from(short).unwrap_or(i64::MAX));
        match max {
            Some(max) if self.replicas >= max => Err(AtMaxSize { max }),
            Some(max) => Ok(Some(target.min(max))),
            None => Ok(Some(target)),
        }
    }

    /// Capacity no launch waits for any more (after launches gave up).
    pub fn excess(&self) -> usize {
        self.available().saturating_sub(self.waiting)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rolling_updates_surge_machine_is_not_capacity() {
        // Two replicas, both claimed, and a third (unclaimed) Machine of the rollout's surge.
        let capacity = Capacity {
            replicas: 2,
            live: 3,
            unclaimed: 1,
            waiting: 1,
        };
        assert_eq!(capacity.available(), 0);
        assert_eq!(capacity.wanted(None), Ok(Some(3)));
        assert_eq!(capacity.excess(), 0);
    }

    #[test]
    fn the_annotation_round_trips_and_drops_garbage() {
        let mut ledger = Ledger::parse(Some("a@10, b@20,broken,@5,c@x"));
        assert_eq!(ledger.to_text().as_deref(), Some("a@10,b@20"));
        ledger.add("a", 99);
        ledger.add("c", 30);
        assert_eq!(ledger.to_text().as_deref(), Some("a@10,b@20,c@30"));
        ledger.remove("b");
        assert!(!ledger.contains("b"));
        ledger.prune(100, 75);
        assert_eq!(ledger.to_text().as_deref(), Some("c@30"));
        ledger.remove("c");
        assert_eq!(ledger.to_text(), None);
        assert_eq!(Ledger::parse(None), Ledger::default());
    }

    #[test]
    fn claimed_launches_no_longer_wait() {
        let ledger = Ledger::parse(Some("a@1,b@1,c@1"));
        let claimed: BTreeSet<String> = ["b".to_string()].into();
        assert_eq!(ledger.waiting(&claimed), 2);
    }

    fn capacity(replicas: i64, live: usize, unclaimed: usize, waiting: usize) -> Capacity {
        Capacity {
            replicas,
            live,
            unclaimed,
            waiting,
        }
    }

    #[test]
    fn one_scale_up_covers_every_waiting_launch() {
        // Five launches wait, nothing exists: ask for five at once.
        assert_eq!(capacity(0, 0, 0, 5).wanted(None), Ok(Some(5)));
        // Two Machines are on their way (replicas 2, none exist yet): three more.
        assert_eq!(capacity(2, 0, 0, 5).wanted(None), Ok(Some(5)));
        // Existing unclaimed Machines count.
        assert_eq!(capacity(3, 3, 2, 2).wanted(None), Ok(None));
        assert_eq!(capacity(3, 3, 2, 4).wanted(None), Ok(Some(5)));
        // Capped at the maximum; at the maximum already is an error.
        assert_eq!(capacity(3, 3, 0, 4).wanted(Some(5)), Ok(Some(5)));
        assert_eq!(
            capacity(5, 5, 0, 1).wanted(Some(5)),
            Err(AtMaxSize { max: 5 })
        );
    }

    #[test]
    fn excess_is_what_nobody_waits_for() {
        assert_eq!(capacity(3, 1, 1, 0).excess(), 3);
        assert_eq!(capacity(3, 3, 1, 1).excess(), 0);
        assert_eq!(
            capacity(2, 3, 0, 0).excess(),
            0,
            "more Machines than replicas: scaling down already"
        );
    }
}
