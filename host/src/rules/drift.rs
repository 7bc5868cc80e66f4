//! Drift: whether a launched claim still matches its NodePool and NodeClass, as Karpenter's
//! `Drifted` condition and reasons.
//!
//! | reason | when |
//! | --- | --- |
//! | `NodePoolDrifted` | the claim's `karpenter.sh/nodepool-hash` is not the pool's template hash (same hash version) |
//! | `RequirementsDrifted` | a label of the claim no longer satisfies a pool requirement |
//! | `InstanceTypeNotFound` | the provider no longer offers the claim's instance type to the pool |
//! | the provider's reason | `is-drifted` said so (a NodeClass or image change) |
//!
//! A claim stamped with another hash version (Karpenter's, or an older Capstan's) is re-stamped
//! with the current hash, not called drifted: moving a cluster to Capstan, or upgrading it, does
//! not replace every node. A provider error is reported, never taken for drift.

use kube::ResourceExt;

use crate::api::labels::{INSTANCE_TYPE, NODEPOOL_HASH, NODEPOOL_HASH_VERSION};
use crate::api::template_hash::{HASH_VERSION, template_hash};
use crate::api::{NodeClaim, NodePool};
use crate::scheduling::InstanceType;
use crate::scheduling::convert;

/// Karpenter's drift reasons the host finds itself.
pub const NODEPOOL_DRIFTED: &str = "NodePoolDrifted";
pub const REQUIREMENTS_DRIFTED: &str = "RequirementsDrifted";
pub const INSTANCE_TYPE_NOT_FOUND: &str = "InstanceTypeNotFound";

/// What the pool's template hash says about a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stamp {
    /// Same version, same hash.
    Current,
    /// Same version, another hash: the template changed since the claim was made.
    Drifted,
    /// No hash, or one of another version: write this hash (and [`HASH_VERSION`]).
    Restamp(String),
}

/// The claim's hash against the pool's. Only the claim's own version counts, as in Karpenter's
/// hash controller: a pool whose annotations were overwritten (a client updating it from a stale
/// copy) must not turn its drifted claims into re-stamped ones.
pub fn stamp(pool: &NodePool, claim: &NodeClaim) -> Stamp {
    let hash = template_hash(pool);
    let annotations = claim.annotations();
    match (
        annotations.get(NODEPOOL_HASH_VERSION).map(String::as_str),
        annotations.get(NODEPOOL_HASH),
    ) {
        (Some(HASH_VERSION), Some(have)) if *have == hash => Stamp::Current,
        (Some(HASH_VERSION), Some(_)) => Stamp::Drifted,
        _ => Stamp::Restamp(hash),
    }
}

/// Whether a label of the claim no longer satisfies the pool's requirements. A key the claim has
/// no label for is not drift: the pool may constrain what a node is launched with (a family, a
/// generation) without every node carrying it as a label.
pub fn requirements_drifted(pool: &NodePool, claim: &NodeClaim) -> bool {
    let Ok(requirements) = convert::requirements("nodepool", &pool.spec.template.spec.requirements)
    else {
        return false;
    };
    let labels = claim.labels();
    requirements.iter().any(|r| match labels.get(r.key()) {
        Some(value) => !r.set().contains(value),
        None => false,
    })
}

/// Whether the claim's instance type is gone from what the provider offers the pool.
pub fn instance_type_not_found(types: &[InstanceType], claim: &NodeClaim) -> bool {
    match claim.labels().get(INSTANCE_TYPE) {
        Some(name) => !types.iter().any(|t| &t.name == name),
        None => false,
    }
}

/// The first drift reason the host finds without a provider call, if any.
pub fn static_reason(pool: &NodePool, claim: &NodeClaim) -> Option<&'static str> {
    if stamp(pool, claim) == Stamp::Drifted {
        return Some(NODEPOOL_DRIFTED);
    }
    if requirements_drifted(pool, claim) {
        return Some(REQUIREMENTS_DRIFTED);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool(label: &str, arch: &[&str]) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "p"},
            "spec": {"template": {
                "metadata": {"labels": {"team": label}},
                "spec": {
                    "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "c"},
                    "requirements": [
                        {"key": "kubernetes.io/arch", "operator": "In", "values": arch},
                        {"key": "example.com/family", "operator": "In", "values": ["c", "m"]}
                    ]
                }
            }}
        }))
        .unwrap()
    }

    fn claim(annotations: serde_json::Value, labels: serde_json::Value) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c1", "annotations": annotations, "labels": labels},
            "spec": {
                "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "c"},
                "requirements": []
            }
        }))
        .unwrap()
    }

    #[test]
    fn hashes_drift_only_within_one_version() {
        let p = pool("a", &["amd64"]);
        let hash = template_hash(&p);
        let table = [
            (
                json!({NODEPOOL_HASH: hash, NODEPOOL_HASH_VERSION: HASH_VERSION}),
                Stamp::Current,
            ),
            (
                json!({NODEPOOL_HASH: "1", NODEPOOL_HASH_VERSION: HASH_VERSION}),
                Stamp::Drifted,
            ),
            // Karpenter's own stamp of this template, before a migration: the same hash.
            (
                json!({NODEPOOL_HASH: hash, NODEPOOL_HASH_VERSION: "v3"}),
                Stamp::Current,
            ),
            // An older Capstan's stamp: re-stamped, not drifted.
            (
                json!({NODEPOOL_HASH: "1", NODEPOOL_HASH_VERSION: "capstan-v1"}),
                Stamp::Restamp(hash.clone()),
            ),
            (json!({}), Stamp::Restamp(hash.clone())),
        ];
        for (annotations, want) in table {
            let c = claim(annotations.clone(), json!({}));
            assert_eq!(stamp(&p, &c), want, "{annotations}");
        }
        // A pool whose own stamp was overwritten (the suite updates pools from stale copies): a
        // claim of this version with another hash is still drifted, not re-stamped.
        let mut unstamped = p.clone();
        unstamped.metadata.annotations = None;
        let c = claim(
            json!({NODEPOOL_HASH: "1", NODEPOOL_HASH_VERSION: HASH_VERSION}),
            json!({}),
        );
        assert_eq!(stamp(&unstamped, &c), Stamp::Drifted);
        let changed = pool("b", &["amd64"]);
        let c = claim(
            json!({NODEPOOL_HASH: hash, NODEPOOL_HASH_VERSION: HASH_VERSION}),
            json!({}),
        );
        assert_eq!(static_reason(&changed, &c), Some(NODEPOOL_DRIFTED));
        assert_eq!(static_reason(&p, &c), None);
    }

    #[test]
    fn labels_that_no_longer_satisfy_the_pool_drift() {
        let c = claim(
            json!({}),
            json!({"kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "c-4x"}),
        );
        assert!(!requirements_drifted(&pool("a", &["amd64", "arm64"]), &c));
        assert!(requirements_drifted(&pool("a", &["arm64"]), &c));
        // The family requirement: the claim has no such label, which is not drift.
        assert!(!requirements_drifted(&pool("a", &["amd64"]), &c));
        assert_eq!(
            static_reason(&pool("a", &["arm64"]), &c),
            Some(REQUIREMENTS_DRIFTED)
        );
    }
}
