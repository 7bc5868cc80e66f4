//! Facts of one Pod, as Karpenter reads them (`pkg/utils/pod`): who owns it, whether
//! kube-scheduler gave up on it, whether a leaving node's replacement must hold it, whether
//! `karpenter.sh/do-not-disrupt` protects it, whether it may stay on a disrupted node.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use crate::api::duration;
use crate::api::labels::DO_NOT_DISRUPT;
use crate::scheduling::convert::{is_terminal, toleration};

/// The pod's owner of `api_version` and `kind`, if any.
fn owner<'p>(pod: &'p Pod, api_version: &str, kind: &str) -> Option<&'p OwnerReference> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.api_version == api_version && o.kind == kind)
}

/// The `apps/v1` DaemonSet owning the pod (Karpenter's `IsOwnedByDaemonSet`: a DaemonSet of
/// another API version is not one).
pub fn daemonset_of(pod: &Pod) -> Option<&OwnerReference> {
    owner(pod, "apps/v1", "DaemonSet")
}

/// Whether an `apps/v1` DaemonSet owns the pod.
pub fn owned_by_daemonset(pod: &Pod) -> bool {
    daemonset_of(pod).is_some()
}

/// A static pod: its kubelet's mirror of a manifest, owned by its Node (Karpenter's
/// `IsOwnedByNode`) or carrying the mirror annotation. It cannot be evicted or deleted for good.
pub fn is_static(pod: &Pod) -> bool {
    owner(pod, "v1", "Node").is_some()
        || pod
            .annotations()
            .contains_key("kubernetes.io/config.mirror")
}

/// A DaemonSet's pod or a static pod: one that runs wherever its node is, so it needs no place
/// elsewhere and no new node is made for it.
pub fn daemon_or_static(pod: &Pod) -> bool {
    owned_by_daemonset(pod) || is_static(pod)
}

/// Whether kube-scheduler gave up on `pod` and Capstan should provision for it: not bound, not
/// terminating or finished, not nominated to a node by preemption (`status.nominatedNodeName`:
/// it runs there once its victims are gone), `PodScheduled=False` with reason `Unschedulable`,
/// and neither a DaemonSet's nor a static pod.
pub fn is_provisionable(pod: &Pod) -> bool {
    if pod.spec.as_ref().is_none_or(|s| s.node_name.is_some())
        || pod.metadata.deletion_timestamp.is_some()
    {
        return false;
    }
    let status = pod.status.as_ref();
    if status
        .and_then(|s| s.nominated_node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
    {
        return false;
    }
    if is_terminal(pod) {
        return false;
    }
    let unschedulable = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        });
    unschedulable && !daemon_or_static(pod)
}

/// Whether the pod asks for devices through Dynamic Resource Allocation (`spec.resourceClaims`).
/// With `--ignore-dra-requests` Capstan does as Karpenter v1.15 does by default
/// (`IGNORE_DRA_REQUESTS=true`): it makes no node for them and says why on the pod.
pub fn asks_for_devices(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref())
        .is_some_and(|c| !c.is_empty())
}

/// Why no node is made for a pod that [`asks_for_devices`].
pub const DEVICES_NOT_PROVISIONED: &str = "the pod asks for devices through Dynamic Resource \
    Allocation (spec.resourceClaims), and the host ignores such requests (IGNORE_DRA_REQUESTS); \
    no node is made for it";

/// Whether a pod bound to a leaving node needs a place elsewhere: active (not finished, not
/// terminating) and neither a DaemonSet's (its DaemonSet runs one on the new node) nor static.
pub fn is_reschedulable(pod: &Pod) -> bool {
    !is_terminal(pod) && !daemon_or_static(pod) && pod.metadata.deletion_timestamp.is_none()
}

/// Whether the pod tolerates `karpenter.sh/disrupted:NoSchedule` (it may stay on a disrupted
/// node, so a drain leaves it).
pub fn tolerates_disruption(pod: &Pod) -> bool {
    let taint = super::nodes::disrupted_taint_model();
    pod.spec
        .iter()
        .flat_map(|s| s.tolerations.iter().flatten())
        .filter_map(|t| toleration("", t).ok())
        .any(|t| t.tolerates(&taint))
}

/// Whether `karpenter.sh/do-not-disrupt` protects the pod now: `"true"`, or a duration not yet
/// elapsed since the pod started (no start time yet: protected). Any other value is ignored.
pub fn do_not_disrupt(pod: &Pod, now: Timestamp) -> bool {
    let Some(value) = pod.annotations().get(DO_NOT_DISRUPT) else {
        return false;
    };
    if value == "true" {
        return true;
    }
    let Ok(span) = duration::parse(value) else {
        return false;
    };
    let Ok(span) = SignedDuration::try_from(span) else {
        return true;
    };
    if span.is_zero() {
        return false;
    }
    match pod.status.as_ref().and_then(|s| s.start_time.as_ref()) {
        Some(started) => started.0.duration_until(now) < span,
        None => true,
    }
}

#[cfg(test)]
mod tests;
