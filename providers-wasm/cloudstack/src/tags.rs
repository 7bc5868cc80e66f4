//! The tags that mark a VM as this provider's: who owns it (cluster, NodeClaim, NodePool,
//! NodeClass) and what it was launched from (for drift). `list` and garbage collection find VMs
//! by the first two. `reboot` records its operation ID in one more ([`REBOOT_OPERATION`]).

use std::collections::BTreeMap;

/// Every VM this provider launches: `capstan`.
pub const MANAGED_BY: &str = "capstan.dev/managed-by";
/// Value of [`MANAGED_BY`].
pub const MANAGED_BY_VALUE: &str = "capstan";
/// The cluster the VM belongs to (the Provider's `cluster-name` config value).
pub const CLUSTER: &str = "capstan.dev/cluster";
/// The NodeClaim.
pub const NODE_CLAIM: &str = "karpenter.sh/nodeclaim";
/// The NodePool.
pub const NODE_POOL: &str = "karpenter.sh/nodepool";
/// The NodeClass.
pub const NODE_CLASS: &str = "capstan.dev/nodeclass";
/// The parameters hash at launch (`Parameters::hash`).
pub const PARAMETERS_HASH: &str = "cloudstack.capstan.dev/parameters-hash";
/// The operation ID of the last reboot asked for (`reboot`), put on the VM before the reboot
/// starts: the same operation again finds it and does not reboot a second time.
pub const REBOOT_OPERATION: &str = "cloudstack.capstan.dev/reboot-operation";

/// Tag keys the NodeClass's `tags` cannot set.
pub const RESERVED_KEYS: [&str; 7] = [
    MANAGED_BY,
    CLUSTER,
    NODE_CLAIM,
    NODE_POOL,
    NODE_CLASS,
    PARAMETERS_HASH,
    REBOOT_OPERATION,
];

/// Who a VM belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ownership<'a> {
    /// Cluster name.
    pub cluster: &'a str,
    /// NodeClaim name.
    pub node_claim: &'a str,
    /// NodePool name, if any.
    pub node_pool: Option<&'a str>,
    /// NodeClass name.
    pub node_class: &'a str,
    /// Parameters hash.
    pub parameters_hash: &'a str,
}

/// The tags to put on a VM: the NodeClass's own, then the ownership tags (which win).
pub fn vm_tags(extra: &BTreeMap<String, String>, owner: &Ownership<'_>) -> Vec<(String, String)> {
    let mut out: BTreeMap<String, String> = extra.clone();
    let mut set = |k: &str, v: &str| {
        out.insert(k.to_string(), v.to_string());
    };
    set(MANAGED_BY, MANAGED_BY_VALUE);
    set(CLUSTER, owner.cluster);
    set(NODE_CLAIM, owner.node_claim);
    if let Some(pool) = owner.node_pool {
        set(NODE_POOL, pool);
    }
    set(NODE_CLASS, owner.node_class);
    set(PARAMETERS_HASH, owner.parameters_hash);
    out.into_iter().collect()
}

/// The tags that select this cluster's VMs in `listVirtualMachines`.
pub fn cluster_selector(cluster: &str) -> Vec<(String, String)> {
    vec![
        (MANAGED_BY.to_string(), MANAGED_BY_VALUE.to_string()),
        (CLUSTER.to_string(), cluster.to_string()),
    ]
}

/// CloudStack's map parameter encoding: `tags[0].key=k&tags[0].value=v...`.
pub fn map_params(name: &str, tags: &[(String, String)]) -> Vec<(String, String)> {
    tags.iter()
        .enumerate()
        .flat_map(|(i, (k, v))| {
            [
                (format!("{name}[{i}].key"), k.clone()),
                (format!("{name}[{i}].value"), v.clone()),
            ]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ownership_wins_over_extra_tags() {
        let extra = BTreeMap::from([
            ("team".to_string(), "a".to_string()),
            (CLUSTER.to_string(), "evil".to_string()),
        ]);
        let tags = vm_tags(
            &extra,
            &Ownership {
                cluster: "prod",
                node_claim: "default-x",
                node_pool: Some("default"),
                node_class: "cs",
                parameters_hash: "h",
            },
        );
        let get = |k: &str| {
            tags.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get(CLUSTER), Some("prod"));
        assert_eq!(get("team"), Some("a"));
        assert_eq!(get(NODE_CLAIM), Some("default-x"));
        assert_eq!(get(NODE_POOL), Some("default"));
        assert_eq!(get(MANAGED_BY), Some("capstan"));
        assert_eq!(tags.len(), 7);
    }

    #[test]
    fn map_parameters() {
        let p = map_params("tags", &cluster_selector("c"));
        assert_eq!(
            p,
            vec![
                ("tags[0].key".to_string(), MANAGED_BY.to_string()),
                ("tags[0].value".to_string(), "capstan".to_string()),
                ("tags[1].key".to_string(), CLUSTER.to_string()),
                ("tags[1].value".to_string(), "c".to_string()),
            ]
        );
    }

    /// The CloudStackNodeClass CRD this component declares refuses every reserved key in
    /// `spec.tags` (in any letter case, as `Parameters::validate` does), so a served object is
    /// refused by the API server rather than left not ready.
    #[test]
    fn the_declared_crd_restricts_every_reserved_key() {
        let crd = include_str!("../node-class-crds.yaml");
        for key in RESERVED_KEYS {
            let rule = format!("self.all(k, k.lowerAscii() != '{key}')");
            assert!(crd.contains(&rule), "node-class-crds.yaml lacks {rule}");
            assert!(
                crd.contains(&format!("message: tag key {key} is restricted")),
                "node-class-crds.yaml does not name {key} in a message"
            );
        }
    }
}
