//! The unavailable-offerings cache (Karpenter's `UnavailableOfferings`): after a provider answers
//! `insufficient-capacity`, the offerings the claim could have used — keyed by (provider,
//! instance type, zone, capacity type) — are avoided for a while (3 min by default).
//!
//! Launch narrows a claim's `In` requirements on those three labels to what is still available
//! before calling `create` ([`UnavailableOfferings::narrow`]), and fails fast when nothing is left;
//! the scheduler can mark the offerings it simulates with ([`UnavailableOfferings::mark`]).
//!
//! Only claims that pin instance types with `In` (as the provisioner's claims do) are recorded: the
//! provider's error does not say which offering failed, so a claim open to every instance type
//! would mark the whole provider out (and another NodeClass of the provider may well have room).
//! A zone or capacity type the claim does not pin is recorded as "any": the provider could have
//! picked any value there.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::api::labels::{CAPACITY_TYPE, INSTANCE_TYPE, ZONE};
use crate::api::{NodeSelectorOperator, Requirement};
use crate::scheduling::cluster::InstanceType;

/// How long an offering stays unavailable by default (Karpenter: 3 min).
pub const DEFAULT_TTL: Duration = Duration::from_secs(180);

/// One cached unavailable offering; `None` in a dimension means "any value".
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    /// The provider (registry name).
    pub provider: String,
    /// `node.kubernetes.io/instance-type`.
    pub instance_type: Option<String>,
    /// `topology.kubernetes.io/zone`.
    pub zone: Option<String>,
    /// `karpenter.sh/capacity-type`.
    pub capacity_type: Option<String>,
}

impl Key {
    fn covers(&self, provider: &str, combo: &Combo<'_>) -> bool {
        fn dim(entry: Option<&String>, value: Option<&str>) -> bool {
            match (entry, value) {
                (None, _) => true,
                (Some(e), Some(v)) => e == v,
                (Some(_), None) => false,
            }
        }
        self.provider == provider
            && dim(self.instance_type.as_ref(), combo[0])
            && dim(self.zone.as_ref(), combo[1])
            && dim(self.capacity_type.as_ref(), combo[2])
    }
}

/// Values of (instance type, zone, capacity type); `None` is "unconstrained".
type Combo<'a> = [Option<&'a str>; 3];

const DIMENSIONS: [&str; 3] = [INSTANCE_TYPE, ZONE, CAPACITY_TYPE];

/// What [`UnavailableOfferings::narrow`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum Narrowed {
    /// Some offerings remain; the claim's requirements with the unavailable values removed
    /// (unchanged if none was cached).
    Available(Vec<Requirement>),
    /// Every offering the claim allows is cached as unavailable.
    Exhausted,
}

/// The cache. Cheap to share: one mutex over a small map; expired entries are dropped lazily.
#[derive(Debug)]
pub struct UnavailableOfferings {
    ttl: Duration,
    entries: Mutex<HashMap<Key, Instant>>,
}

impl Default for UnavailableOfferings {
    fn default() -> Self {
        Self::new(DEFAULT_TTL)
    }
}

impl UnavailableOfferings {
    /// An empty cache whose entries live `ttl`.
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// Marks `key` unavailable from now for the TTL.
    pub fn insert(&self, key: Key) {
        self.insert_at(key, Instant::now());
    }

    fn insert_at(&self, key: Key, at: Instant) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.insert(key, at + self.ttl);
    }

    /// The live entries of `provider` (expired ones are dropped).
    pub fn entries(&self, provider: &str) -> Vec<Key> {
        self.live_at(Instant::now())
            .into_iter()
            .filter(|k| k.provider == provider)
            .collect()
    }

    fn live_at(&self, now: Instant) -> Vec<Key> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.retain(|_, until| *until > now);
        entries.keys().cloned().collect()
    }

    /// Forgets the entries covering the offering `restored` names: its provider's catalog, which
    /// had it unavailable, says it is available again. Returns how many went. (Karpenter keeps an
    /// entry its whole TTL; a provider that knows its capacity, such as a Cluster API
    /// MachineDeployment below its maximum again, need not wait that out.)
    pub fn forget_restored(&self, restored: &crate::catalog::Restored) -> usize {
        let combo = [
            Some(restored.instance_type.as_str()),
            Some(restored.zone.as_str()),
            Some(restored.capacity_type.as_str()),
        ];
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let before = entries.len();
        entries.retain(|key, _| !key.covers(&restored.provider, &combo));
        before - entries.len()
    }

    /// How many offerings are cached now, of every provider: consolidation searches again when
    /// it changes (an offering available again may be where a node's pods can go).
    pub fn live(&self) -> usize {
        self.live_at(Instant::now()).len()
    }

    /// Whether offering (`instance_type`, `zone`, `capacity_type`) of `provider` is cached.
    pub fn is_unavailable(
        &self,
        provider: &str,
        instance_type: &str,
        zone: &str,
        capacity_type: &str,
    ) -> bool {
        let combo = [Some(instance_type), Some(zone), Some(capacity_type)];
        self.live_at(Instant::now())
            .iter()
            .any(|k| k.covers(provider, &combo))
    }

    /// Records that `provider` had no capacity for a claim with `requirements`: every
    /// combination of its `In` values on the three dimensions (any zone or capacity type, where
    /// not pinned); nothing if it does not pin instance types. Returns how many entries were added.
    pub fn record_insufficient_capacity(
        &self,
        provider: &str,
        requirements: &[Requirement],
    ) -> usize {
        let domains = domains(requirements);
        if domains[0].is_none() {
            return 0;
        }
        let now = Instant::now();
        let mut added = 0;
        for combo in combos(&domains) {
            self.insert_at(
                Key {
                    provider: provider.to_owned(),
                    instance_type: combo[0].map(str::to_owned),
                    zone: combo[1].map(str::to_owned),
                    capacity_type: combo[2].map(str::to_owned),
                },
                now,
            );
            added += 1;
        }
        added
    }

    /// Records that `provider` could not give `claim` a node (it timed out launching, or kept
    /// failing): the offering it launched with when its labels name one, else what its
    /// requirements allow, as
    /// [`Self::record_insufficient_capacity`]. Returns how many entries were added.
    pub fn record_failed_claim(&self, provider: &str, claim: &crate::api::NodeClaim) -> usize {
        let labels = claim.metadata.labels.as_ref();
        let launched: Option<Vec<Requirement>> = DIMENSIONS
            .iter()
            .map(|key| {
                let value = labels?.get(*key)?;
                Some(Requirement {
                    key: (*key).to_owned(),
                    operator: NodeSelectorOperator::In,
                    values: vec![value.clone()],
                    min_values: None,
                })
            })
            .collect();
        match launched {
            Some(offering) => self.record_insufficient_capacity(provider, &offering),
            None => self.record_insufficient_capacity(provider, &claim.spec.requirements),
        }
    }

    /// The claim's requirements without the values whose every offering is cached for
    /// `provider`, or [`Narrowed::Exhausted`] if nothing the claim allows is left.
    pub fn narrow(&self, provider: &str, requirements: &[Requirement]) -> Narrowed {
        let live: Vec<Key> = self
            .live_at(Instant::now())
            .into_iter()
            .filter(|k| k.provider == provider)
            .collect();
        if live.is_empty() {
            return Narrowed::Available(requirements.to_vec());
        }
        let domains = domains(requirements);
        let covered = |combo: &Combo<'_>| live.iter().any(|k| k.covers(provider, combo));
        if combos(&domains).iter().all(covered) {
            return Narrowed::Exhausted;
        }
        let mut narrowed = requirements.to_vec();
        for (dim, key) in DIMENSIONS.iter().enumerate() {
            let Some(values) = &domains[dim] else {
                continue;
            };
            let gone: Vec<&str> = values
                .iter()
                .copied()
                .filter(|v| {
                    let mut fixed = domains.clone();
                    fixed[dim] = Some(vec![v]);
                    combos(&fixed).iter().all(covered)
                })
                .collect();
            if gone.is_empty() {
                continue;
            }
            for r in narrowed.iter_mut().filter(|r| is_in(r, key)) {
                r.values.retain(|v| !gone.contains(&v.as_str()));
            }
        }
        Narrowed::Available(narrowed)
    }

    /// Marks the cached offerings of `provider` among `types` `available: false` (for the
    /// scheduler); returns how many it marked.
    pub fn mark(&self, provider: &str, types: &mut [InstanceType]) -> usize {
        let live: Vec<Key> = self
            .live_at(Instant::now())
            .into_iter()
            .filter(|k| k.provider == provider)
            .collect();
        let mut marked = 0;
        for it in types.iter_mut() {
            let name = it.name.clone();
            for offering in it.offerings.iter_mut().filter(|o| o.available) {
                let combo = [
                    Some(name.as_str()),
                    Some(offering.zone.as_str()),
                    Some(offering.capacity_type.as_str()),
                ];
                if live.iter().any(|k| k.covers(provider, &combo)) {
                    offering.available = false;
                    marked += 1;
                }
            }
        }
        marked
    }
}

fn is_in(r: &Requirement, key: &str) -> bool {
    r.key == key && r.operator == NodeSelectorOperator::In
}

/// Per dimension, the values the claim allows (intersection of its `In` requirements), or
/// `None` when unconstrained.
fn domains(requirements: &[Requirement]) -> [Option<Vec<&str>>; 3] {
    DIMENSIONS.map(|key| {
        let mut domain: Option<Vec<&str>> = None;
        for r in requirements.iter().filter(|r| is_in(r, key)) {
            let values: Vec<&str> = r.values.iter().map(String::as_str).collect();
            domain = Some(match domain {
                None => values,
                Some(d) => d.into_iter().filter(|v| values.contains(v)).collect(),
            });
        }
        domain
    })
}

/// Every combination of the domains (an unconstrained dimension contributes one `None`).
fn combos<'a>(domains: &[Option<Vec<&'a str>>; 3]) -> Vec<Combo<'a>> {
    let axis = |d: &Option<Vec<&'a str>>| -> Vec<Option<&'a str>> {
        match d {
            Some(values) => values.iter().copied().map(Some).collect(),
            None => vec![None],
        }
    };
    let mut out = Vec::new();
    for it in axis(&domains[0]) {
        for zone in axis(&domains[1]) {
            for ct in axis(&domains[2]) {
                out.push([it, zone, ct]);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::scheduling::cluster::Offering;

    fn req(key: &str, values: &[&str]) -> Requirement {
        serde_json::from_value(serde_json::json!({
            "key": key, "operator": "In", "values": values,
        }))
        .unwrap()
    }

    fn values(reqs: &[Requirement], key: &str) -> Vec<String> {
        reqs.iter()
            .find(|r| r.key == key)
            .map(|r| r.values.clone())
            .unwrap_or_default()
    }

    #[test]
    fn recorded_offerings_are_unavailable_until_the_ttl() {
        let cache = UnavailableOfferings::new(Duration::from_millis(50));
        let claim = [
            req(INSTANCE_TYPE, &["m5.large"]),
            req(ZONE, &["a", "b"]),
            req(CAPACITY_TYPE, &["spot"]),
        ];
        assert_eq!(cache.record_insufficient_capacity("aws", &claim), 2);
        assert!(cache.is_unavailable("aws", "m5.large", "a", "spot"));
        assert!(cache.is_unavailable("aws", "m5.large", "b", "spot"));
        assert!(!cache.is_unavailable("aws", "m5.large", "a", "on-demand"));
        assert!(!cache.is_unavailable("aws", "m5.xlarge", "a", "spot"));
        assert!(!cache.is_unavailable("gcp", "m5.large", "a", "spot"));
        std::thread::sleep(Duration::from_millis(80));
        assert!(!cache.is_unavailable("aws", "m5.large", "a", "spot"));
        assert!(cache.entries("aws").is_empty());
    }

    #[test]
    fn a_failed_claim_marks_its_launched_offering_else_what_it_allows() {
        let cache = UnavailableOfferings::default();
        let mut claim: crate::api::NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c"},
            "spec": {
                "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "default"},
                "requirements": [
                    {"key": INSTANCE_TYPE, "operator": "In", "values": ["small", "large"]},
                    {"key": ZONE, "operator": "In", "values": ["a"]},
                ],
            },
        }))
        .unwrap();
        // Not launched: every offering it allows.
        assert_eq!(cache.record_failed_claim("p", &claim), 2);
        assert!(cache.is_unavailable("p", "large", "a", "spot"));
        let cache = UnavailableOfferings::default();
        // Launched (its labels name the offering), never registered: that offering only.
        claim.metadata.labels = Some(
            [
                (INSTANCE_TYPE, "small"),
                (ZONE, "a"),
                (CAPACITY_TYPE, "spot"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        );
        assert_eq!(cache.record_failed_claim("p", &claim), 1);
        assert!(cache.is_unavailable("p", "small", "a", "spot"));
        assert!(!cache.is_unavailable("p", "small", "a", "on-demand"));
        assert!(!cache.is_unavailable("p", "large", "a", "spot"));
    }

    #[test]
    fn unpinned_dimensions_mean_any() {
        let cache = UnavailableOfferings::default();
        let claim = [
            req(INSTANCE_TYPE, &["m5.large"]),
            req(CAPACITY_TYPE, &["spot"]),
        ];
        assert_eq!(cache.record_insufficient_capacity("kwok", &claim), 1);
        assert!(cache.is_unavailable("kwok", "m5.large", "any-zone", "spot"));
        assert!(!cache.is_unavailable("kwok", "m5.large", "any-zone", "on-demand"));
        assert!(!cache.is_unavailable("kwok", "m5.xlarge", "any-zone", "spot"));
    }

    #[test]
    fn claims_open_to_every_instance_type_are_not_recorded() {
        let cache = UnavailableOfferings::default();
        let claim = [req(CAPACITY_TYPE, &["spot"]), req(ZONE, &["a"])];
        assert_eq!(cache.record_insufficient_capacity("kwok", &claim), 0);
        assert!(!cache.is_unavailable("kwok", "anything", "a", "spot"));
        assert_eq!(
            cache.narrow("kwok", &claim),
            Narrowed::Available(claim.to_vec())
        );
    }

    #[test]
    fn narrow_drops_exhausted_values_and_keeps_the_rest() {
        let cache = UnavailableOfferings::default();
        cache.insert(Key {
            provider: "p".into(),
            instance_type: Some("small".into()),
            zone: None,
            capacity_type: Some("spot".into()),
        });
        let claim = vec![
            req(INSTANCE_TYPE, &["small", "large"]),
            req(CAPACITY_TYPE, &["spot"]),
            req("kubernetes.io/arch", &["amd64"]),
        ];
        let Narrowed::Available(narrowed) = cache.narrow("p", &claim) else {
            panic!("large is still available");
        };
        assert_eq!(values(&narrowed, INSTANCE_TYPE), vec!["large"]);
        assert_eq!(values(&narrowed, CAPACITY_TYPE), vec!["spot"]);
        assert_eq!(values(&narrowed, "kubernetes.io/arch"), vec!["amd64"]);
        // Another provider is not affected.
        assert_eq!(
            cache.narrow("q", &claim),
            Narrowed::Available(claim.clone())
        );
        // With on-demand allowed too, small stays (its on-demand offering is fine).
        let both = vec![
            req(INSTANCE_TYPE, &["small", "large"]),
            req(CAPACITY_TYPE, &["spot", "on-demand"]),
        ];
        assert_eq!(cache.narrow("p", &both), Narrowed::Available(both.clone()));
    }

    #[test]
    fn narrow_reports_exhaustion() {
        let cache = UnavailableOfferings::default();
        let claim = vec![req(INSTANCE_TYPE, &["small"]), req(ZONE, &["a"])];
        cache.record_insufficient_capacity("p", &claim);
        assert_eq!(cache.narrow("p", &claim), Narrowed::Exhausted);
        // An unconstrained zone is not exhausted by one zone's entry...
        let any_zone = vec![req(INSTANCE_TYPE, &["small"])];
        assert_eq!(
            cache.narrow("p", &any_zone),
            Narrowed::Available(any_zone.clone())
        );
        // ...but is by an "any zone" entry.
        cache.record_insufficient_capacity("p", &any_zone);
        assert_eq!(cache.narrow("p", &any_zone), Narrowed::Exhausted);
    }

    #[test]
    fn mark_flags_cached_offerings_for_the_scheduler() {
        let cache = UnavailableOfferings::default();
        cache.record_insufficient_capacity(
            "p",
            &[req(INSTANCE_TYPE, &["small"]), req(ZONE, &["a"])],
        );
        let mut types = vec![InstanceType {
            name: "small".into(),
            requirements: Default::default(),
            offerings: vec![
                Offering::new("a", "spot", 1.0),
                Offering::new("a", "on-demand", 2.0),
                Offering::new("b", "spot", 1.0),
            ],
            capacity: Default::default(),
            overhead: Default::default(),
            volume_limits: Default::default(),
            devices: Vec::new(),
        }];
        assert_eq!(cache.mark("p", &mut types), 2);
        let available: Vec<(&str, &str)> = types[0]
            .offerings
            .iter()
            .filter(|o| o.available)
            .map(|o| (o.zone.as_str(), o.capacity_type.as_str()))
            .collect();
        assert_eq!(available, vec![("b", "spot")]);
        assert_eq!(cache.mark("other", &mut types), 0);
    }

    #[test]
    fn an_offering_the_catalog_restores_is_forgotten_and_no_other() {
        let cache = UnavailableOfferings::default();
        // Any zone and capacity type of `a`, and of `b`; and `a` of another provider.
        cache.record_insufficient_capacity("p", &[req(INSTANCE_TYPE, &["a"])]);
        cache.record_insufficient_capacity("p", &[req(INSTANCE_TYPE, &["b"])]);
        cache.record_insufficient_capacity("q", &[req(INSTANCE_TYPE, &["a"])]);
        let restored = crate::catalog::Restored {
            provider: "p".into(),
            instance_type: "a".into(),
            zone: "z1".into(),
            capacity_type: "on-demand".into(),
        };
        assert_eq!(cache.forget_restored(&restored), 1);
        assert!(!cache.is_unavailable("p", "a", "z1", "on-demand"));
        assert!(cache.is_unavailable("p", "b", "z1", "on-demand"));
        assert!(cache.is_unavailable("q", "a", "z1", "on-demand"));
        assert_eq!(cache.forget_restored(&restored), 0);
    }
}
