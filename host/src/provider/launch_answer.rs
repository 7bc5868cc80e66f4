//! What a provider's `create` answer may say about the node it launched.
//!
//! The claim's own labels and requirements win over the provider's answer, as in Karpenter: the
//! provider only fills in what the claim leaves open (the instance type, zone and capacity type it
//! chose among those allowed, its own labels). A sandboxed provider must not be able to move a
//! claim into another NodePool, label a node as something the claim did not allow, or dress it up
//! in the label domains Kubernetes and Karpenter reserve, so the host refuses such an answer
//! ([`check`]) rather than quietly dropping part of it:
//!
//! | the answer | verdict |
//! | --- | --- |
//! | a label the claim carries, with another value (`karpenter.sh/nodepool` included) | [`Refusal::ChangesLabel`] |
//! | a label outside the claim's requirement on that key (instance type, zone, capacity type, ...) | [`Refusal::OutsideRequirement`] |
//! | a label in `karpenter.sh`, `kubernetes.io` or `k8s.io` (or a subdomain) that is not well known, not asked for by the claim, and not declared by the launched instance type | [`Refusal::ReservedLabel`] |
//! | a `karpenter.sh` label other than the well-known ones, not on the claim | [`Refusal::ReservedLabel`] (a catalog cannot declare these) |
//! | an annotation in `karpenter.sh` or `capstan.dev` the claim carries with another value, or a new `karpenter.sh` one | [`Refusal::ReservedAnnotation`] |
//!
//! `kubernetes.io/hostname` is never taken from an answer (the kubelet names its node; a claim
//! labelled with another node's hostname would pull that node's pods' affinities onto it): it is
//! dropped by [`labels_to_keep`], not refused, since providers commonly echo the Node's labels.

use std::collections::BTreeMap;

use crate::api::labels::{
    ARCH, CAPACITY_TYPE, CAPSTAN_GROUP, HOSTNAME, INSTANCE_TYPE, NODEPOOL, OS, REGION, ZONE,
};
use capstan_model::requirements::Requirements;

/// Labels a provider may always set (their values still within the claim's requirements):
/// Karpenter's well-known labels but the pool, and their deprecated aliases.
const WELL_KNOWN: &[&str] = &[
    INSTANCE_TYPE,
    ZONE,
    REGION,
    ARCH,
    OS,
    CAPACITY_TYPE,
    "node.kubernetes.io/windows-build",
    "beta.kubernetes.io/instance-type",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
];

/// Label domains reserved to Kubernetes and Karpenter (each with its subdomains).
const RESERVED_LABEL_DOMAINS: &[&str] = &["karpenter.sh", "kubernetes.io", "k8s.io"];

/// The domain an instance type's catalog cannot vouch for: Karpenter's own.
const KARPENTER_DOMAIN: &str = "karpenter.sh";

/// Why an answer is refused. Each names the label or annotation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The answer relabels something the claim already says.
    #[error("label {key}={value} would change the claim's {key}={claimed}")]
    ChangesLabel {
        /// The label.
        key: String,
        /// The provider's value.
        value: String,
        /// The claim's value.
        claimed: String,
    },
    /// The answer's value is one the claim's requirements do not allow.
    #[error("label {key}={value} is outside the claim's requirement {key} {wanted}")]
    OutsideRequirement {
        /// The label.
        key: String,
        /// The provider's value.
        value: String,
        /// The requirement, as `In [a b]` and the like.
        wanted: String,
    },
    /// A label in a reserved domain nobody asked for.
    #[error(
        "label {key}={value} is in the reserved domain {domain}: the claim does not ask for it and the launched instance type does not declare it"
    )]
    ReservedLabel {
        /// The label.
        key: String,
        /// The provider's value.
        value: String,
        /// The reserved domain it falls in.
        domain: &'static str,
    },
    /// An annotation in a domain the host's decisions read.
    #[error("annotation {key}={value} is in the reserved domain {domain} and not the claim's")]
    ReservedAnnotation {
        /// The annotation.
        key: String,
        /// The provider's value.
        value: String,
        /// The reserved domain it falls in.
        domain: &'static str,
    },
}

impl Refusal {
    /// The label or annotation refused.
    pub fn key(&self) -> &str {
        match self {
            Refusal::ChangesLabel { key, .. }
            | Refusal::OutsideRequirement { key, .. }
            | Refusal::ReservedLabel { key, .. }
            | Refusal::ReservedAnnotation { key, .. } => key,
        }
    }
}

/// What the claim says, as the provider was asked.
#[derive(Debug, Clone, Copy)]
pub struct Claimed<'a> {
    /// The claim's labels (its pool's template labels, `karpenter.sh/nodepool`, the node class
    /// label, ...).
    pub labels: &'a BTreeMap<String, String>,
    /// The claim's annotations.
    pub annotations: &'a BTreeMap<String, String>,
    /// Its requirements, as sent to `create`.
    pub requirements: &'a Requirements,
}

/// The provider's answer, as labels and annotations.
#[derive(Debug, Clone, Copy)]
pub struct Answer<'a> {
    /// Labels of the launched instance.
    pub labels: &'a BTreeMap<String, String>,
    /// Annotations.
    pub annotations: &'a BTreeMap<String, String>,
}

/// The answer's labels the host keeps: all but `kubernetes.io/hostname`.
pub fn labels_to_keep(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    labels
        .iter()
        .filter(|(k, _)| k.as_str() != HOSTNAME)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The claim's annotations with the answer's added where the claim has none, and the keys of
/// the answer's that would have changed one of the claim's (dropped: the claim's own values win,
/// as its labels do). Reserved-domain collisions never get here: [`check`] refuses them.
pub fn annotations_to_keep(
    claimed: &BTreeMap<String, String>,
    answered: &BTreeMap<String, String>,
) -> (BTreeMap<String, String>, Vec<String>) {
    let mut kept = claimed.clone();
    let mut dropped = Vec::new();
    for (key, value) in answered {
        match claimed.get(key) {
            Some(own) if own != value => dropped.push(key.clone()),
            Some(_) => {}
            None => {
                kept.insert(key.clone(), value.clone());
            }
        }
    }
    (kept, dropped)
}

/// The reserved domain `key` falls in, if any (`kubernetes.io`, `node.kubernetes.io`, ...).
fn reserved_domain(key: &str, domains: &[&'static str]) -> Option<&'static str> {
    let (domain, _) = key.split_once('/')?;
    domains
        .iter()
        .copied()
        .find(|d| domain == *d || domain.strip_suffix(d).is_some_and(|p| p.ends_with('.')))
}

/// `In [a b]`, `NotIn [c]`, `Exists`, `Gt 3` for messages.
fn describe(requirements: &Requirements, key: &str) -> String {
    let Some(set) = requirements.set_of(key) else {
        return String::new();
    };
    let values = set.values();
    let mut parts = vec![if values.is_empty() {
        set.operator().as_str().to_owned()
    } else {
        format!("{} [{}]", set.operator().as_str(), values.join(" "))
    }];
    if let Some(gt) = set.greater_than_bound() {
        parts.push(format!("Gt {gt}"));
    }
    if let Some(lt) = set.less_than_bound() {
        parts.push(format!("Lt {lt}"));
    }
    parts.join(" and ")
}

/// Every reason to refuse `answer` to `claimed`. `declared` is what the launched instance type's
/// catalog entry says about its nodes (its requirements), if the caller has it: a reserved label it
/// declares with the answer's value is allowed (Cluster API's `node-role.kubernetes.io/*` labels,
/// say), except in Karpenter's own domain.
pub fn check(
    claimed: Claimed<'_>,
    answer: Answer<'_>,
    declared: Option<&Requirements>,
) -> Vec<Refusal> {
    let mut refusals = Vec::new();
    for (key, value) in labels_to_keep(answer.labels) {
        if let Some(claimed_value) = claimed.labels.get(&key) {
            if *claimed_value != value {
                refusals.push(Refusal::ChangesLabel {
                    claimed: claimed_value.clone(),
                    key,
                    value,
                });
            }
            continue;
        }
        if let Some(set) = claimed.requirements.set_of(&key) {
            if !set.contains(&value) {
                refusals.push(Refusal::OutsideRequirement {
                    wanted: describe(claimed.requirements, &key),
                    key,
                    value,
                });
            }
            continue;
        }
        if key == NODEPOOL {
            // A claim without a pool does not get one from its provider.
            refusals.push(Refusal::ReservedLabel {
                key,
                value,
                domain: KARPENTER_DOMAIN,
            });
            continue;
        }
        if WELL_KNOWN.contains(&key.as_str()) {
            continue;
        }
        let Some(domain) = reserved_domain(&key, RESERVED_LABEL_DOMAINS) else {
            continue;
        };
        let vouched = domain != KARPENTER_DOMAIN
            && declared
                .and_then(|d| d.set_of(&key))
                .is_some_and(|set| set.contains(&value));
        if !vouched {
            refusals.push(Refusal::ReservedLabel { key, value, domain });
        }
    }
    for (key, value) in answer.annotations {
        let Some(domain) = reserved_domain(key, &[KARPENTER_DOMAIN, CAPSTAN_GROUP]) else {
            continue;
        };
        let refused = match claimed.annotations.get(key) {
            Some(claimed_value) => claimed_value != value,
            // Capstan's own annotations a provider may add (its machine's template hash, say);
            // the ones the host reads are on the claim already, or set by the host after this.
            None => domain == KARPENTER_DOMAIN,
        };
        if refused {
            refusals.push(Refusal::ReservedAnnotation {
                key: key.clone(),
                value: value.clone(),
                domain,
            });
        }
    }
    refusals
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_model::requirements::Requirement;

    #[test]
    fn the_claims_annotations_win() {
        let claimed = map(&[("team", "a"), ("example.com/owner", "ops")]);
        let answered = map(&[
            ("team", "b"),
            ("example.com/owner", "ops"),
            ("example.com/rack", "r7"),
        ]);
        let (kept, dropped) = annotations_to_keep(&claimed, &answered);
        assert_eq!(
            kept,
            map(&[
                ("team", "a"),
                ("example.com/owner", "ops"),
                ("example.com/rack", "r7")
            ])
        );
        assert_eq!(dropped, vec!["team".to_owned()]);
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn claim_labels() -> BTreeMap<String, String> {
        map(&[
            (NODEPOOL, "team-a"),
            ("capstan.dev/nodeclass", "default"),
            ("workload", "web"),
        ])
    }

    fn requirements() -> Requirements {
        Requirements::new()
            .with(Requirement::in_(INSTANCE_TYPE, ["m.large", "m.xlarge"]))
            .with(Requirement::in_(ZONE, ["zone-a", "zone-b"]))
            .with(Requirement::in_(CAPACITY_TYPE, ["on-demand"]))
            .with(Requirement::gt("example.com/generation", 3))
    }

    /// The refusals of an answer with `labels` and `annotations` to the test claim.
    fn check_answer(
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
        declared: Option<&Requirements>,
    ) -> Vec<Refusal> {
        let claimed_labels = claim_labels();
        let claimed_annotations = map(&[("karpenter.sh/nodepool-hash", "123")]);
        let reqs = requirements();
        let (labels, annotations) = (map(labels), map(annotations));
        check(
            Claimed {
                labels: &claimed_labels,
                annotations: &claimed_annotations,
                requirements: &reqs,
            },
            Answer {
                labels: &labels,
                annotations: &annotations,
            },
            declared,
        )
    }

    fn check_labels(answer: &[(&str, &str)], declared: Option<&Requirements>) -> Vec<Refusal> {
        check_answer(answer, &[], declared)
    }

    fn check_annotations(answer: &[(&str, &str)]) -> Vec<Refusal> {
        check_answer(&[], answer, None)
    }

    #[test]
    fn an_honest_answer_passes() {
        let refusals = check_labels(
            &[
                (NODEPOOL, "team-a"),
                ("workload", "web"),
                (INSTANCE_TYPE, "m.large"),
                (ZONE, "zone-b"),
                (CAPACITY_TYPE, "on-demand"),
                (ARCH, "amd64"),
                (OS, "linux"),
                (REGION, "region-1"),
                ("example.com/generation", "5"),
                (HOSTNAME, "whatever"),
                ("capstan.dev/provider", "kwok"),
                ("karpenter.kwok.sh/instance-size", "16"),
                ("kwok.capstan.dev/anything", "x"),
            ],
            None,
        );
        assert_eq!(refusals, vec![]);
    }

    #[test]
    fn moving_the_claim_to_another_pool_is_refused() {
        let refusals = check_labels(&[(NODEPOOL, "kwok-pool")], None);
        assert_eq!(
            refusals,
            vec![Refusal::ChangesLabel {
                key: NODEPOOL.into(),
                value: "kwok-pool".into(),
                claimed: "team-a".into()
            }]
        );
        assert!(
            refusals[0]
                .to_string()
                .contains("karpenter.sh/nodepool=kwok-pool")
        );
    }

    #[test]
    fn a_pool_for_a_claim_without_one_is_refused() {
        let labels = map(&[]);
        let reqs = Requirements::new();
        let answer = map(&[(NODEPOOL, "kwok-pool")]);
        let none = BTreeMap::new();
        let refusals = check(
            Claimed {
                labels: &labels,
                annotations: &none,
                requirements: &reqs,
            },
            Answer {
                labels: &answer,
                annotations: &none,
            },
            None,
        );
        assert_eq!(refusals.len(), 1);
        assert_eq!(refusals[0].key(), NODEPOOL);
    }

    #[test]
    fn values_outside_the_requirements_are_refused() {
        let refusals = check_labels(
            &[
                (INSTANCE_TYPE, "gpu.huge"),
                (ZONE, "zone-d"),
                (CAPACITY_TYPE, "spot"),
                ("example.com/generation", "2"),
                ("workload", "batch"),
            ],
            None,
        );
        let keys: Vec<&str> = refusals.iter().map(Refusal::key).collect();
        assert_eq!(
            keys,
            vec![
                "example.com/generation",
                CAPACITY_TYPE,
                INSTANCE_TYPE,
                ZONE,
                "workload"
            ]
        );
        assert!(
            refusals[2]
                .to_string()
                .contains("outside the claim's requirement node.kubernetes.io/instance-type In [m.large m.xlarge]"),
            "{}",
            refusals[2]
        );
    }

    #[test]
    fn reserved_labels_nobody_asked_for_are_refused() {
        let refusals = check_labels(
            &[
                ("node-restriction.kubernetes.io/secure", "true"),
                ("node-role.kubernetes.io/control-plane", ""),
                ("karpenter.sh/do-not-sync-taints", "true"),
                ("karpenter.sh/initialized", "true"),
                ("storage.k8s.io/x", "y"),
            ],
            None,
        );
        let domains: Vec<(&str, &str)> = refusals
            .iter()
            .map(|r| match r {
                Refusal::ReservedLabel { key, domain, .. } => (key.as_str(), *domain),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            domains,
            vec![
                ("karpenter.sh/do-not-sync-taints", "karpenter.sh"),
                ("karpenter.sh/initialized", "karpenter.sh"),
                ("node-restriction.kubernetes.io/secure", "kubernetes.io"),
                ("node-role.kubernetes.io/control-plane", "kubernetes.io"),
                ("storage.k8s.io/x", "k8s.io"),
            ]
        );
    }

    #[test]
    fn a_catalog_vouches_for_kubernetes_labels_but_not_karpenters() {
        let declared = Requirements::new()
            .with(Requirement::in_("node-role.kubernetes.io/worker", [""]))
            .with(Requirement::in_("karpenter.sh/initialized", ["true"]));
        let refusals = check_labels(
            &[
                ("node-role.kubernetes.io/worker", ""),
                ("karpenter.sh/initialized", "true"),
            ],
            Some(&declared),
        );
        assert_eq!(refusals.len(), 1);
        assert_eq!(refusals[0].key(), "karpenter.sh/initialized");
        // Declared with another value is no vouching.
        let refusals = check_labels(&[("node-role.kubernetes.io/worker", "x")], Some(&declared));
        assert_eq!(refusals.len(), 1);
    }

    #[test]
    fn reserved_annotations_are_the_claims() {
        assert_eq!(
            check_annotations(&[
                ("karpenter.sh/nodepool-hash", "123"),
                ("capstan.dev/machine-template-hash", "abc"),
                ("kwok.capstan.dev/image-id", "img"),
                ("example.com/x", "y"),
            ]),
            vec![]
        );
        let keys: Vec<String> = check_annotations(&[
            ("karpenter.sh/nodepool-hash", "999"),
            ("karpenter.sh/do-not-disrupt", "true"),
        ])
        .iter()
        .map(|r| r.key().to_owned())
        .collect();
        assert_eq!(
            keys,
            vec!["karpenter.sh/do-not-disrupt", "karpenter.sh/nodepool-hash"]
        );
    }

    #[test]
    fn hostname_is_dropped_not_kept() {
        let kept = labels_to_keep(&map(&[(HOSTNAME, "other-node"), (ZONE, "zone-a")]));
        assert_eq!(kept, map(&[(ZONE, "zone-a")]));
    }

    #[test]
    fn reserved_domains_match_whole_labels() {
        let d = RESERVED_LABEL_DOMAINS;
        assert_eq!(
            reserved_domain("kubernetes.io/arch", d),
            Some("kubernetes.io")
        );
        assert_eq!(
            reserved_domain("node.kubernetes.io/x", d),
            Some("kubernetes.io")
        );
        assert_eq!(reserved_domain("notkubernetes.io/x", d), None);
        assert_eq!(reserved_domain("karpenter.kwok.sh/x", d), None);
        assert_eq!(reserved_domain("plain", d), None);
    }
}
