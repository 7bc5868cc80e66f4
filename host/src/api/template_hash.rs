//! The NodePool template hash behind static drift (`karpenter.sh/nodepool-hash`).
//!
//! Which fields count is Karpenter's rule: everything under `spec.template` (labels, annotations,
//! taints, startup taints, the node class reference, `expireAfter`, `terminationGracePeriod`)
//! except the requirements, which drift by their own rule (a node whose labels still satisfy new
//! requirements is not replaced). Lists are compared as sets and empty values as absent, so
//! reordering taints or writing `taints: []` does not roll a pool.
//!
//! The number itself is Capstan's (SHA-256 of a canonical JSON form), so the version is too:
//! [`HASH_VERSION`]. A claim stamped with another version (by Karpenter before a migration, or by
//! an older Capstan) is re-stamped with the current hash instead of being called drifted.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::NodePool;

/// The version of [`template_hash`], written to `karpenter.sh/nodepool-hash-version`. Bump it
/// when the hashed fields or their defaults change.
pub const HASH_VERSION: &str = "capstan-v1";

/// The template hash of `pool`, as a decimal number (the form Karpenter writes).
pub fn template_hash(pool: &NodePool) -> String {
    let template = &pool.spec.template;
    let spec = &template.spec;
    let mut value = serde_json::json!({
        "metadata": template.metadata,
        "taints": spec.taints,
        "startupTaints": spec.startup_taints,
        "nodeClassRef": spec.node_class_ref,
        "expireAfter": spec.expire_after,
        "terminationGracePeriod": spec.termination_grace_period,
    });
    canonical(&mut value);
    let digest = Sha256::digest(value.to_string().as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first).to_string()
}

/// Drops empty values and sorts every list (lists are sets here); object keys are already sorted
/// (`serde_json` maps are ordered).
fn canonical(value: &mut Value) -> bool {
    match value {
        Value::Null => false,
        Value::String(s) => !s.is_empty(),
        Value::Array(items) => {
            items.retain_mut(canonical);
            items.sort_by_cached_key(Value::to_string);
            !items.is_empty()
        }
        Value::Object(map) => {
            map.retain(|_, v| canonical(v));
            !map.is_empty()
        }
        Value::Bool(_) | Value::Number(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool(template: Value) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "p"},
            "spec": {"template": template}
        }))
        .unwrap()
    }

    fn base() -> Value {
        json!({
            "metadata": {"labels": {"team": "a"}},
            "spec": {
                "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "c"},
                "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
                "taints": [
                    {"key": "a", "effect": "NoSchedule"},
                    {"key": "b", "value": "1", "effect": "NoExecute"}
                ]
            }
        })
    }

    fn with(mut template: Value, path: &[&str], v: Value) -> Value {
        let mut at = &mut template;
        for key in &path[..path.len() - 1] {
            at = &mut at[*key];
        }
        at[path[path.len() - 1]] = v;
        template
    }

    #[test]
    fn hashed_fields_change_the_hash_and_the_others_do_not() {
        let h = template_hash(&pool(base()));
        assert_eq!(h, template_hash(&pool(base())), "deterministic");
        assert!(h.parse::<u64>().is_ok(), "{h}");
        let same = [
            (
                "requirements",
                with(base(), &["spec", "requirements"], json!([])),
            ),
            (
                "taint order",
                with(
                    base(),
                    &["spec", "taints"],
                    json!([{"key": "b", "value": "1", "effect": "NoExecute"},
                           {"key": "a", "effect": "NoSchedule"}]),
                ),
            ),
            (
                "empty startup taints",
                with(base(), &["spec", "startupTaints"], json!([])),
            ),
            (
                "expireAfter spelled as the default",
                with(base(), &["spec", "expireAfter"], json!("720h")),
            ),
        ];
        for (what, template) in same {
            assert_eq!(
                template_hash(&pool(template)),
                h,
                "{what} must not change the hash"
            );
        }
        let different = [
            (
                "label",
                with(base(), &["metadata", "labels", "team"], json!("b")),
            ),
            (
                "annotation",
                with(base(), &["metadata", "annotations"], json!({"x": "y"})),
            ),
            (
                "taint value",
                with(
                    base(),
                    &["spec", "taints"],
                    json!([{"key": "a", "effect": "NoSchedule"},
                           {"key": "b", "value": "2", "effect": "NoExecute"}]),
                ),
            ),
            (
                "startup taint",
                with(
                    base(),
                    &["spec", "startupTaints"],
                    json!([{"key": "s", "effect": "NoSchedule"}]),
                ),
            ),
            (
                "node class",
                with(base(), &["spec", "nodeClassRef", "name"], json!("d")),
            ),
            (
                "expireAfter",
                with(base(), &["spec", "expireAfter"], json!("24h")),
            ),
            (
                "terminationGracePeriod",
                with(base(), &["spec", "terminationGracePeriod"], json!("1h")),
            ),
        ];
        for (what, template) in different {
            assert_ne!(
                template_hash(&pool(template)),
                h,
                "{what} must change the hash"
            );
        }
    }
}
