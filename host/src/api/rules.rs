//! The CEL validation rules (`x-kubernetes-validations`) of the NodePool and NodeClaim CRDs: the
//! messages the API server answers with, and the rules on label keys several fields share. Fields
//! name them in `#[x_kube(validation = ...)]`; tests match refusals against the messages.

use kube::core::Rule;

use super::labels::{CAPACITY_TYPE, HOSTNAME, NODEPOOL};

pub const IN_NEEDS_VALUES: &str = "requirements with operator 'In' must have a value defined";
pub const ONE_INTEGER: &str = "requirements with operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single non-negative integer value";
pub const MIN_VALUES: &str = "requirements with 'minValues' must have at least that many values specified in the 'values' field";
pub const KARPENTER_DOMAIN_RESTRICTED: &str = r#"label domain "karpenter.sh" is restricted"#;
pub const NODEPOOL_RESTRICTED: &str = r#"label "karpenter.sh/nodepool" is restricted"#;
pub const HOSTNAME_RESTRICTED: &str = r#"label "kubernetes.io/hostname" is restricted"#;
pub const SCHEDULE_WITH_DURATION: &str = "'schedule' must be set with 'duration'";
pub const NODE_CLASS_GROUP_IMMUTABLE: &str = "nodeClassRef.group is immutable";
pub const NODE_CLASS_KIND_IMMUTABLE: &str = "nodeClassRef.kind is immutable";
pub const STATIC_TRANSITION: &str = "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes";
pub const STATIC_LIMITS: &str = "only 'limits.nodes' is supported on static NodePools";
pub const STATIC_WEIGHT: &str = "'weight' is not supported on static NodePools";
pub const SPEC_IMMUTABLE: &str = "spec is immutable";
pub const NOT_IN_NEEDS_VALUES: &str =
    "requirements with operator 'NotIn' must have a value defined";
pub const OVERLAY_ONE_INTEGER: &str =
    "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value";
pub const PRICE_OR_ADJUSTMENT: &str = "cannot set both 'price' and 'priceAdjustment'";
pub const RESTRICTED_RESOURCE: &str = "invalid resource restricted";

/// The label key `key` (a CEL expression) is outside the `karpenter.sh` domain and its
/// subdomains, but for the two labels of that domain users may set, `karpenter.sh/capacity-type`
/// and `karpenter.sh/nodepool`.
pub fn outside_karpenter_domain(key: &str) -> Rule {
    Rule::new(format!(
        r"{key} in ['{CAPACITY_TYPE}', '{NODEPOOL}'] || !{key}.matches('^([^/]*\\.)?karpenter\\.sh/')"
    ))
    .message(KARPENTER_DOMAIN_RESTRICTED)
}

/// The label key `key` (a CEL expression) is not `karpenter.sh/nodepool`, which the host sets.
pub fn not_nodepool(key: &str) -> Rule {
    Rule::new(format!("{key} != '{NODEPOOL}'")).message(NODEPOOL_RESTRICTED)
}

/// The label key `key` (a CEL expression) is not `kubernetes.io/hostname`, which the kubelet sets.
pub fn not_hostname(key: &str) -> Rule {
    Rule::new(format!("{key} != '{HOSTNAME}'")).message(HOSTNAME_RESTRICTED)
}

/// `rule` for every element of `self` (a list's items, a map's keys), which `rule` calls `x`.
pub fn for_all(rule: Rule) -> Rule {
    Rule {
        rule: format!("self.all(x, {})", rule.rule),
        ..rule
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_read_as_karpenters() {
        assert_eq!(
            outside_karpenter_domain("self").rule,
            r"self in ['karpenter.sh/capacity-type', 'karpenter.sh/nodepool'] || !self.matches('^([^/]*\\.)?karpenter\\.sh/')"
        );
        assert_eq!(
            not_hostname("self").rule,
            "self != 'kubernetes.io/hostname'"
        );
        let rule = for_all(not_nodepool("x.key"));
        assert_eq!(rule.rule, "self.all(x, x.key != 'karpenter.sh/nodepool')");
        assert_eq!(rule.message, Some(NODEPOOL_RESTRICTED.into()));
    }
}
