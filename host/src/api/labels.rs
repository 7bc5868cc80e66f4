//! Well-known label, annotation, taint and finalizer keys, as Karpenter spells them. The label and
//! taint keys providers share are the model's (`capstan_model::labels`), re-exported here.

pub use capstan_model::labels::{
    ARCH, CAPACITY_TYPE, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT,
    HOSTNAME, INITIALIZED, INSTANCE_TYPE, OS, REGION, REGISTERED, ZONE,
};

pub const NODEPOOL: &str = capstan_model::labels::NODE_POOL;
pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
/// A NodeClaim annotation a provider sets at launch to hold the node from voluntary disruption,
/// its value saying why (a Capstan extension: the clusterapi provider keeps a node group's
/// minimum size with it). Providers may not set `karpenter.sh/do-not-disrupt` themselves.
pub const HELD_BY_PROVIDER: &str = "capstan.dev/held-by-provider";
/// Annotation on a NodeClaim the provisioner created: the price per hour of the cheapest
/// offering the claim can launch, as the provider reported it.
pub const PRICE_ANNOTATION: &str = "capstan.dev/price-per-hour";
pub const NODECLAIM_TERMINATION_TIMESTAMP: &str = "karpenter.sh/nodeclaim-termination-timestamp";
pub const NODEPOOL_HASH: &str = "karpenter.sh/nodepool-hash";
/// Node annotation (Karpenter v1.15): `"true"` vetoes every repair of the node, reboots and
/// replacements alike.
pub const DO_NOT_REPAIR: &str = "karpenter.sh/do-not-repair";
/// NodeClaim annotation (Karpenter v1.15): the node's boot ID before the reboot under way was
/// issued; a different boot ID on the Node says it rebooted.
pub const REBOOT_PRE_BOOT_ID: &str = "karpenter.sh/reboot-pre-boot-id";
/// NodeClaim annotation (Karpenter v1.15): the drain bound of the reboot under way, as a Go
/// duration (`0s`: no drain); absent, the drain is unbounded.
pub const REBOOT_GRACE_PERIOD: &str = "karpenter.sh/reboot-termination-grace-period";
/// NodeClaim annotation (a Capstan extension): when the node's last reboots were committed, RFC
/// 3339, comma-separated (at most two within a day). Karpenter keeps this in memory, so a restart
/// forgets it and a node that fails the same way keeps rebooting; here it is in the object.
pub const REBOOTS: &str = "capstan.dev/reboots";
/// Taint on a node while it reboots in place: no new pods until it booted again.
pub const REBOOTING_TAINT_KEY: &str = "karpenter.sh/rebooting";
pub const NODEPOOL_HASH_VERSION: &str = "karpenter.sh/nodepool-hash-version";

/// Taint every new node carries until the host has registered it.
pub const UNREGISTERED_TAINT_KEY: &str = capstan_model::labels::UNREGISTERED_TAINT;
/// Taint set while a node is being disrupted.
pub const DISRUPTED_TAINT_KEY: &str = capstan_model::labels::DISRUPTED_TAINT;

/// NodeClaim annotations (Karpenter's): an overlay changed the price, or the capacity, of one of
/// the claim's instance types.
pub const PRICE_OVERLAY_APPLIED: &str = "karpenter.sh/price-overlay-applied";
pub const CAPACITY_OVERLAY_APPLIED: &str = "karpenter.sh/capacity-overlay-applied";

/// Finalizer on NodeClaims and Nodes: the instance is deleted before the object goes.
pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";

/// API group of Capstan's own resources.
pub const CAPSTAN_GROUP: &str = "capstan.dev";
/// Annotation on a launched NodeClaim: the provider that launched it (termination still finds it
/// when the NodeClass is gone).
pub const PROVIDER_ANNOTATION: &str = "capstan.dev/provider";
/// Label: the ownership mark. The host stamps `capstan.dev/provider: <provider>` on every object
/// a provider creates through `kube` and on the Nodes registered for its NodeClaims; a provider
/// can neither set, change nor remove it, and an `owned` grant reaches only objects carrying its
/// own name here (the same key as [`PROVIDER_ANNOTATION`], as a label, so lists filter on it).
pub const OWNER_LABEL: &str = "capstan.dev/provider";
/// NodePool annotation (a Capstan extension): `"true"`, or a duration, keeps a node whose pods
/// include a running Job's pod (a CronJob's too) from voluntary disruption (consolidation and
/// drift) until the pod finishes, or has run for the duration. Expiration, node repair and
/// interruption do not wait.
pub const WAIT_FOR_JOBS: &str = "capstan.dev/wait-for-jobs";
/// Labels Karpenter reserves: users may not set them in a NodePool template.
pub const RESTRICTED_LABEL_DOMAINS: &[&str] = &["karpenter.sh", "kubernetes.io", "k8s.io"];

/// The well-known requirement keys every instance type must describe.
pub const WELL_KNOWN_REQUIREMENTS: &[&str] = &[INSTANCE_TYPE, ARCH, OS, ZONE, CAPACITY_TYPE];
