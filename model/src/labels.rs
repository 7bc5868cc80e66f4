//! Well-known Kubernetes and Karpenter label keys, taint keys and values, as Karpenter spells them.

/// The instance type a node runs as (`node.kubernetes.io/instance-type`).
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
/// The zone a node runs in.
pub const ZONE: &str = "topology.kubernetes.io/zone";
/// The region a node runs in.
pub const REGION: &str = "topology.kubernetes.io/region";
/// CPU architecture (`amd64`, `arm64`).
pub const ARCH: &str = "kubernetes.io/arch";
/// Operating system (`linux`, `windows`).
pub const OS: &str = "kubernetes.io/os";
/// The node's hostname.
pub const HOSTNAME: &str = "kubernetes.io/hostname";
/// The Windows build a Windows node runs (`node.kubernetes.io/windows-build`).
pub const WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";
/// How the capacity was bought: [`CAPACITY_TYPE_SPOT`], [`CAPACITY_TYPE_ON_DEMAND`] or
/// [`CAPACITY_TYPE_RESERVED`].
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
/// The NodePool a node belongs to.
pub const NODE_POOL: &str = "karpenter.sh/nodepool";
/// Set by Karpenter once the node registered.
pub const REGISTERED: &str = "karpenter.sh/registered";
/// Set by Karpenter once the node is initialized (ready, startup taints gone, resources reported).
pub const INITIALIZED: &str = "karpenter.sh/initialized";

/// Taint key Karpenter puts on a node at launch and removes when it registers (effect `NoExecute`).
pub const UNREGISTERED_TAINT: &str = "karpenter.sh/unregistered";
/// Taint key Karpenter puts on a node while it is being disrupted (effect `NoSchedule`).
pub const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";

/// Spot capacity.
pub const CAPACITY_TYPE_SPOT: &str = "spot";
/// On-demand capacity.
pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";
/// Reserved capacity.
pub const CAPACITY_TYPE_RESERVED: &str = "reserved";
/// All capacity types, cheapest kind first.
pub const CAPACITY_TYPES: [&str; 3] = [
    CAPACITY_TYPE_SPOT,
    CAPACITY_TYPE_RESERVED,
    CAPACITY_TYPE_ON_DEMAND,
];

/// `amd64`.
pub const ARCH_AMD64: &str = "amd64";
/// `arm64`.
pub const ARCH_ARM64: &str = "arm64";
/// `linux`.
pub const OS_LINUX: &str = "linux";
/// `windows`.
pub const OS_WINDOWS: &str = "windows";

/// Resource name for CPU.
pub const RESOURCE_CPU: &str = "cpu";
/// Resource name for memory.
pub const RESOURCE_MEMORY: &str = "memory";
/// Resource name for the pod count.
pub const RESOURCE_PODS: &str = "pods";
/// Resource name for local ephemeral storage.
pub const RESOURCE_EPHEMERAL_STORAGE: &str = "ephemeral-storage";

/// Label keys Karpenter treats as well known (its `WellKnownLabels`): every node carries them
/// whether or not a pool constrains them, so a requirement on one of these that an instance type
/// does not define does not make the type incompatible. The hostname is not one of them: it is
/// unique per node, not a property of an instance type.
pub const WELL_KNOWN: [&str; 8] = [
    NODE_POOL,
    ZONE,
    REGION,
    INSTANCE_TYPE,
    ARCH,
    OS,
    CAPACITY_TYPE,
    WINDOWS_BUILD,
];

/// Whether `key` is one of [`WELL_KNOWN`].
pub fn is_well_known(key: &str) -> bool {
    WELL_KNOWN.contains(&key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostname_is_not_well_known() {
        assert!(is_well_known(ZONE) && is_well_known(NODE_POOL) && is_well_known(WINDOWS_BUILD));
        assert!(!is_well_known(HOSTNAME) && !is_well_known("example.com/team"));
    }
}
