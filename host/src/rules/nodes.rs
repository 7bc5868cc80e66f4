//! Facts of one Node, and the `karpenter.sh/disrupted` taint: what a disruption or a
//! termination puts on a node before it drains it, built and recognized here only.

use k8s_openapi::api::core::v1::{Node, Taint as NodeTaint};

use crate::api::labels::DISRUPTED_TAINT_KEY;
use crate::scheduling::taints::{Taint, TaintEffect};

/// Whether the Node's `Ready` condition is `True` (its kubelet is alive).
pub fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

/// `karpenter.sh/disrupted:NoSchedule`, as written on a Node.
pub fn disrupted_taint() -> NodeTaint {
    NodeTaint {
        key: DISRUPTED_TAINT_KEY.to_owned(),
        value: None,
        effect: "NoSchedule".to_owned(),
        time_added: None,
    }
}

/// The disrupted taint as the scheduling model sees it (what a pod must tolerate to stay).
pub fn disrupted_taint_model() -> Taint {
    Taint::new(DISRUPTED_TAINT_KEY, "", TaintEffect::NoSchedule)
}

/// Whether `taint` is exactly [`disrupted_taint`] (key and effect).
pub fn is_disrupted_taint(taint: &NodeTaint) -> bool {
    taint.key == DISRUPTED_TAINT_KEY && taint.effect == "NoSchedule"
}

/// Whether the node carries `karpenter.sh/disrupted` with any effect (a disruption or a
/// termination is under way).
pub fn tainted_disrupted(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == DISRUPTED_TAINT_KEY))
}

/// `taints` with the disrupted taint added (once, replacing one of another effect).
pub fn with_disrupted_taint(mut taints: Vec<NodeTaint>) -> Vec<NodeTaint> {
    if !taints.iter().any(is_disrupted_taint) {
        taints.retain(|t| t.key != DISRUPTED_TAINT_KEY);
        taints.push(disrupted_taint());
    }
    taints
}

/// `taints` without the disrupted taint.
pub fn without_disrupted_taint(taints: Vec<NodeTaint>) -> Vec<NodeTaint> {
    taints
        .into_iter()
        .filter(|t| t.key != DISRUPTED_TAINT_KEY)
        .collect()
}

#[cfg(test)]
mod tests;
