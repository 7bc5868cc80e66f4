//! Label values as Karpenter spells them: CloudProvider method names, error categories,
//! resource types, reasons, consolidation policies and types, termination modes, and the
//! well-known node labels Karpenter turns into metric labels.

use std::collections::BTreeMap;

use crate::api::labels::{ARCH, CAPACITY_TYPE, INSTANCE_TYPE, NODEPOOL, OS, REGION, ZONE};
use crate::api::nodepool::ConsolidationPolicy;
use crate::runtime::CallError;
use crate::runtime::bindings::types::ProviderError;

/// A metric's label set, in the order it renders.
pub type Labels = Vec<(String, String)>;

/// `pairs` as a label set.
pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Karpenter's `method` label for a WIT function (`get-instance-types` is `GetInstanceTypes`).
pub fn method(function: &str) -> &'static str {
    match function {
        "create" => "Create",
        "delete" => "Delete",
        "get" => "Get",
        "list" => "List",
        "get-instance-types" => "GetInstanceTypes",
        "is-drifted" => "IsDrifted",
        "repair-policies" => "RepairPolicies",
        "validate-node-class" => "ValidateNodeClass",
        "name" => "Name",
        _ => "Unknown",
    }
}

/// Karpenter's `error` label of a failed CloudProvider call: its three well-known categories,
/// `unknown` for everything else (traps, limits, other provider errors).
pub fn error(err: &CallError) -> &'static str {
    match err.provider_error() {
        Some(ProviderError::NotFound(_)) => "NodeClaimNotFoundError",
        Some(ProviderError::InsufficientCapacity(_)) => "InsufficientCapacityError",
        Some(ProviderError::NodeClassNotReady(_)) => "NodeClassNotReadyError",
        _ => "unknown",
    }
}

/// Karpenter's `resource_type`: the resource name lower-cased, dashes as underscores
/// (`ephemeral-storage` is `ephemeral_storage`).
pub fn resource_type(name: &str) -> String {
    name.to_lowercase().replace('-', "_")
}

/// A resource amount as Karpenter reports it: CPU in cores, everything else in units.
pub fn resource_value(name: &str, fixed_point: i64) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let value = fixed_point as f64;
    if name == crate::scheduling::resources::CPU {
        value / 1000.0
    } else {
        value
    }
}

/// Karpenter's `reason` label of a disruption reason (`Drifted` is `drifted`).
pub fn reason(reason: &str) -> String {
    reason.to_lowercase()
}

/// Karpenter's `consolidation_policy` label (snake case).
pub fn consolidation_policy(policy: ConsolidationPolicy) -> &'static str {
    match policy {
        ConsolidationPolicy::WhenEmpty => "when_empty",
        ConsolidationPolicy::WhenEmptyOrUnderutilized => "when_empty_or_underutilized",
        ConsolidationPolicy::Balanced => "balanced",
    }
}

/// Karpenter's `consolidation_type` of a decision: `empty`, `single` or `multi` for
/// consolidation, empty for drift and expiration.
pub fn consolidation_type(reason: &str, candidates: usize) -> &'static str {
    match reason.to_lowercase().as_str() {
        "empty" => "empty",
        "underutilized" if candidates > 1 => "multi",
        "underutilized" => "single",
        _ => "",
    }
}

/// Karpenter's `termination_mode` of a claim with this `terminationGracePeriod`: `graceful`
/// without one, `forceful` when it is zero, else `eventual`.
pub fn termination_mode(grace_period: Option<&str>) -> &'static str {
    match grace_period.map(crate::api::duration::parse) {
        None => "graceful",
        Some(Ok(d)) if d.is_zero() => "forceful",
        Some(_) => "eventual",
    }
}

/// The well-known node labels (Karpenter's `WellKnownLabels`) and their metric label names.
pub const NODE_LABELS: [(&str, &str); 8] = [
    (NODEPOOL, "nodepool"),
    (ZONE, "zone"),
    (REGION, "region"),
    (INSTANCE_TYPE, "instance_type"),
    (ARCH, "arch"),
    (OS, "os"),
    (CAPACITY_TYPE, "capacity_type"),
    ("node.kubernetes.io/windows-build", "windows_build"),
];

/// The metric labels of a node with these Kubernetes labels (an absent one is empty), in
/// [`NODE_LABELS`] order.
pub fn node_labels(node_labels: &BTreeMap<String, String>) -> Labels {
    NODE_LABELS
        .iter()
        .map(|(key, name)| {
            (
                (*name).to_owned(),
                node_labels.get(*key).cloned().unwrap_or_default(),
            )
        })
        .collect()
}

/// A Kubernetes label of an object, or empty.
pub fn label<'a>(labels: Option<&'a BTreeMap<String, String>>, key: &str) -> &'a str {
    labels.and_then(|l| l.get(key)).map_or("", String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_are_spelled_as_karpenter_does() {
        for (function, method_name) in [
            ("create", "Create"),
            ("delete", "Delete"),
            ("get", "Get"),
            ("list", "List"),
            ("get-instance-types", "GetInstanceTypes"),
            ("is-drifted", "IsDrifted"),
            ("no-such-function", "Unknown"),
        ] {
            assert_eq!(method(function), method_name);
        }
    }

    #[test]
    fn errors_map_to_karpenter_categories() {
        let provider = |error| CallError::Provider {
            function: "create",
            error,
        };
        assert_eq!(
            error(&provider(ProviderError::NotFound("x".into()))),
            "NodeClaimNotFoundError"
        );
        assert_eq!(
            error(&provider(ProviderError::InsufficientCapacity("x".into()))),
            "InsufficientCapacityError"
        );
        assert_eq!(
            error(&provider(ProviderError::NodeClassNotReady("x".into()))),
            "NodeClassNotReadyError"
        );
        assert_eq!(
            error(&provider(ProviderError::Retryable("x".into()))),
            "unknown"
        );
        let timeout = CallError::WallTimeout {
            function: "create",
            limit: std::time::Duration::from_secs(1),
        };
        assert_eq!(error(&timeout), "unknown");
    }

    #[test]
    fn resources_reasons_policies_and_modes() {
        assert_eq!(resource_type("ephemeral-storage"), "ephemeral_storage");
        assert_eq!(resource_type("nvidia.com/gpu"), "nvidia.com/gpu");
        assert!((resource_value("cpu", 1500) - 1.5).abs() < f64::EPSILON);
        assert!((resource_value("memory", 1024) - 1024.0).abs() < f64::EPSILON);
        assert_eq!(reason("Drifted"), "drifted");
        assert_eq!(
            consolidation_policy(ConsolidationPolicy::WhenEmptyOrUnderutilized),
            "when_empty_or_underutilized"
        );
        assert_eq!(
            consolidation_policy(ConsolidationPolicy::WhenEmpty),
            "when_empty"
        );
        assert_eq!(consolidation_type("Empty", 3), "empty");
        assert_eq!(consolidation_type("Underutilized", 1), "single");
        assert_eq!(consolidation_type("Underutilized", 2), "multi");
        assert_eq!(consolidation_type("Drifted", 1), "");
        assert_eq!(termination_mode(None), "graceful");
        assert_eq!(termination_mode(Some("0s")), "forceful");
        assert_eq!(termination_mode(Some("1h")), "eventual");
    }

    #[test]
    fn node_labels_follow_karpenters_well_known_labels() {
        let mut k8s = BTreeMap::new();
        k8s.insert(NODEPOOL.to_owned(), "pool".to_owned());
        k8s.insert(ZONE.to_owned(), "z1".to_owned());
        k8s.insert(CAPACITY_TYPE.to_owned(), "spot".to_owned());
        let got = node_labels(&k8s);
        let names: Vec<&str> = got.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "nodepool",
                "zone",
                "region",
                "instance_type",
                "arch",
                "os",
                "capacity_type",
                "windows_build"
            ]
        );
        assert_eq!(got[0].1, "pool");
        assert_eq!(got[1].1, "z1");
        assert_eq!(got[2].1, "");
        assert_eq!(got[6].1, "spot");
    }
}
