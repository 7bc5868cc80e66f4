//! Well-known label, annotation, taint and finalizer keys, as Karpenter spells them.

pub const NODEPOOL: &str = "karpenter.sh/nodepool";
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
pub const REGISTERED: &str = "karpenter.sh/registered";
pub const INITIALIZED: &str = "karpenter.sh/initialized";
pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
pub const NODECLAIM_TERMINATION_TIMESTAMP: &str = "karpenter.sh/nodeclaim-termination-timestamp";
pub const NODEPOOL_HASH: &str = "karpenter.sh/nodepool-hash";
pub const NODEPOOL_HASH_VERSION: &str = "karpenter.sh/nodepool-hash-version";

pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const REGION: &str = "topology.kubernetes.io/region";
pub const ARCH: &str = "kubernetes.io/arch";
pub const OS: &str = "kubernetes.io/os";
pub const HOSTNAME: &str = "kubernetes.io/hostname";

pub const CAPACITY_TYPE_SPOT: &str = "spot";
pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";
pub const CAPACITY_TYPE_RESERVED: &str = "reserved";

/// Taint every new node carries until the host has registered it.
pub const UNREGISTERED_TAINT_KEY: &str = "karpenter.sh/unregistered";
/// Taint set while a node is being disrupted.
pub const DISRUPTED_TAINT_KEY: &str = "karpenter.sh/disrupted";

/// Finalizer on NodeClaims and Nodes: the instance is deleted before the object goes.
pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";

/// API group of Capstan's own resources.
pub const CAPSTAN_GROUP: &str = "capstan.dev";
/// Annotation on a launched NodeClaim: the provider that launched it (termination still finds it
/// when the NodeClass is gone).
pub const PROVIDER_ANNOTATION: &str = "capstan.dev/provider";
/// Labels Karpenter reserves: users may not set them in a NodePool template.
pub const RESTRICTED_LABEL_DOMAINS: &[&str] = &["karpenter.sh", "kubernetes.io", "k8s.io"];

/// The well-known requirement keys every instance type must describe.
pub const WELL_KNOWN_REQUIREMENTS: &[&str] = &[INSTANCE_TYPE, ARCH, OS, ZONE, CAPACITY_TYPE];
