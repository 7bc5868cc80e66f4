//! CapacityBuffers, pure: how many pods a buffer keeps room for, the virtual pods that stand for
//! them, and what a provisioning pass means for a buffer's `Provisioning` condition (Karpenter
//! v1.14's `capacitybuffer` controller, `virtualpods` cache and provisioner, on Capstan's types).
//!
//! A buffer's pods are placeholders: the provisioner adds them to the pending pods, so they must
//! fit on a node or a NodeClaim (producing capacity when they do not), but never binds them.
//! Real pods come first in the solver's order, so they take the room and the buffer pods fill
//! what is left; consolidation counts the buffer pods placed on a node as that node's own, so a
//! node holding only buffer room is not empty.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodSpec, PodStatus, PodTemplateSpec};
use kube::api::ObjectMeta;

use crate::api::ResourceList;
use crate::api::capacitybuffer::{
    BUFFER_EMPTY, BUFFER_NAME_ANNOTATION, BUFFER_NAMESPACE_ANNOTATION, CapacityBuffer,
    FAKE_POD_ANNOTATION, FITS_EXISTING_CAPACITY, NOT_READY_FOR_PROVISIONING,
    READY_FOR_PROVISIONING, REQUIRES_NEW_CAPACITY,
};
use crate::api::shared::{ConditionStatus, find_condition};

use super::quantity::QuantityError;
use super::resources::{ResourceLimits, Resources};

/// The priority Karpenter gives virtual pods: the lowest there is.
pub const VIRTUAL_POD_PRIORITY: i32 = i32::MIN;

/// A buffer, by namespace and name.
pub type BufferKey = (String, String);

/// How many buffer pods `spec` asks for, given one pod's `requests` and, for a `scalableRef`, the
/// workload's replicas: the larger of `replicas` and `percentage` (of `scalable_replicas`), at
/// most what fits in `limits`; with neither set, what fits in `limits`; with nothing, 0.
pub fn desired_replicas(
    replicas: Option<i32>,
    percentage: Option<i32>,
    limits: Option<&ResourceList>,
    requests: &Resources,
    scalable_replicas: Option<i32>,
) -> Result<i32, QuantityError> {
    let from_percentage = match (percentage, scalable_replicas) {
        (Some(pct), Some(scaled)) if scaled > 0 => Some(percentage_replicas(scaled, pct)),
        _ => None,
    };
    let sized = [replicas, from_percentage].into_iter().flatten().max();
    let by_limits = match limits {
        Some(limits) => limit_replicas(limits, requests)?,
        None => None,
    };
    Ok(match (sized, by_limits) {
        (Some(n), Some(cap)) => n.min(cap),
        (Some(n), None) => n,
        (None, Some(cap)) => cap,
        (None, None) => 0,
    })
}

/// `ceil(scalable * percentage / 100)`, at least 1 when both are positive.
pub fn percentage_replicas(scalable: i32, percentage: i32) -> i32 {
    let product = i64::from(scalable) * i64::from(percentage);
    let n = product.div_euclid(100) + i64::from(product.rem_euclid(100) != 0);
    let n = i32::try_from(n).unwrap_or(i32::MAX);
    if n < 1 && scalable > 0 && percentage > 0 {
        1
    } else {
        n
    }
}

/// How many pods of `requests` fit in `limits`: the least `floor(limit / request)` over the
/// resources both name with a non-zero request; `None` when they share none (no bound).
pub fn limit_replicas(
    limits: &ResourceList,
    requests: &Resources,
) -> Result<Option<i32>, QuantityError> {
    let limits = ResourceLimits::parse(limits.iter().map(|(k, v)| (k.as_str(), v.0.as_str())))?;
    Ok(limits
        .0
        .iter()
        .filter_map(|(name, limit)| {
            let request = requests.get(name);
            (request > 0).then(|| (limit.max(&0) / request).min(i64::from(i32::MAX)))
        })
        .min()
        .map(|n| i32::try_from(n).unwrap_or(i32::MAX)))
}

/// Whether `pod` is a buffer's virtual pod.
pub fn is_virtual(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(FAKE_POD_ANNOTATION))
        .is_some_and(|v| v == "true")
}

/// The buffer a virtual pod stands for.
pub fn buffer_of(pod: &Pod) -> Option<BufferKey> {
    if !is_virtual(pod) {
        return None;
    }
    let annotations = pod.metadata.annotations.as_ref()?;
    Some((
        annotations.get(BUFFER_NAMESPACE_ANNOTATION)?.clone(),
        annotations.get(BUFFER_NAME_ANNOTATION)?.clone(),
    ))
}

/// Whether the buffer is resolved with at least one pod (Karpenter's
/// `isBufferReadyForProvisioning`).
pub fn ready(buffer: &CapacityBuffer) -> bool {
    let status = buffer.status.as_ref();
    let resolved = status
        .and_then(|s| find_condition(&s.conditions, READY_FOR_PROVISIONING))
        .is_some_and(|c| c.is_true());
    let replicas = status.and_then(|s| s.replicas).unwrap_or(0);
    resolved
        && replicas > 0
        && (buffer.spec.pod_template_ref.is_some() || buffer.spec.scalable_ref.is_some())
}

/// The `replicas` virtual pods of the buffer `namespace/name` (uid `uid`) made from `template`:
/// named `capacity-buffer-<name>-<i>`, the template's labels, Karpenter's annotations, the
/// template's spec without a node name and without persistent or ephemeral volumes (and their
/// mounts), the lowest priority, and `PodScheduled=False` (`Unschedulable`).
pub fn virtual_pods(
    namespace: &str,
    name: &str,
    uid: &str,
    replicas: i32,
    template: &PodTemplateSpec,
) -> Vec<Pod> {
    let spec = sanitized(template.spec.clone().unwrap_or_default());
    let labels = template.metadata.as_ref().and_then(|m| m.labels.clone());
    let annotations: BTreeMap<String, String> = [
        (FAKE_POD_ANNOTATION, "true"),
        (BUFFER_NAME_ANNOTATION, name),
        (BUFFER_NAMESPACE_ANNOTATION, namespace),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    (1..=replicas.max(0))
        .map(|i| Pod {
            metadata: ObjectMeta {
                name: Some(format!("capacity-buffer-{name}-{i}")),
                namespace: Some(namespace.to_owned()),
                uid: Some(format!("{uid}-{i}")),
                labels: labels.clone(),
                annotations: Some(annotations.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(spec.clone()),
            status: Some(PodStatus {
                phase: Some("Pending".to_owned()),
                conditions: Some(vec![PodCondition {
                    type_: "PodScheduled".to_owned(),
                    status: "False".to_owned(),
                    reason: Some("Unschedulable".to_owned()),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
        })
        .collect()
}

fn sanitized(mut spec: PodSpec) -> PodSpec {
    spec.node_name = None;
    spec.priority = Some(VIRTUAL_POD_PRIORITY);
    spec.priority_class_name = None;
    let mut dropped = Vec::new();
    if let Some(volumes) = spec.volumes.as_mut() {
        volumes.retain(|v| {
            let claimed = v.persistent_volume_claim.is_some() || v.ephemeral.is_some();
            if claimed {
                dropped.push(v.name.clone());
            }
            !claimed
        });
    }
    if !dropped.is_empty() {
        let containers = spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten());
        for c in containers {
            if let Some(mounts) = c.volume_mounts.as_mut() {
                mounts.retain(|m| !dropped.contains(&m.name));
            }
        }
    }
    spec
}

/// Where a provisioning pass put one buffer's virtual pods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Placed {
    /// On a node or a NodeClaim that exists.
    pub existing: usize,
    /// On a NodeClaim the pass creates.
    pub new: usize,
    /// Nowhere.
    pub failed: usize,
}

/// The `Provisioning` condition a buffer gets after a pass (status, reason, message), as
/// Karpenter's provisioner writes it; `None` leaves it as it is (the pass did not see all its
/// pods, or saw none).
pub fn provisioning_condition(
    buffer: &CapacityBuffer,
    placed: Option<&Placed>,
) -> Option<(ConditionStatus, &'static str, String)> {
    let status = buffer.status.as_ref();
    let resolved = status
        .and_then(|s| find_condition(&s.conditions, READY_FOR_PROVISIONING))
        .is_some_and(|c| c.is_true());
    if !resolved {
        return Some((
            ConditionStatus::False,
            NOT_READY_FOR_PROVISIONING,
            "Buffer is not ReadyForProvisioning".to_owned(),
        ));
    }
    let desired = status.and_then(|s| s.replicas).unwrap_or(0);
    if desired <= 0 {
        return Some((
            ConditionStatus::False,
            BUFFER_EMPTY,
            "Buffer has zero desired replicas".to_owned(),
        ));
    }
    let placed = placed?;
    let desired = usize::try_from(desired).unwrap_or(0);
    if placed.new > 0 || placed.failed > 0 {
        return Some((
            ConditionStatus::False,
            REQUIRES_NEW_CAPACITY,
            format!(
                "{}/{desired} virtual pods required new capacity, {} failed",
                placed.new, placed.failed
            ),
        ));
    }
    (placed.existing == desired).then(|| {
        (
            ConditionStatus::True,
            FITS_EXISTING_CAPACITY,
            format!("All {desired} virtual pods fit on existing capacity"),
        )
    })
}

#[cfg(test)]
mod tests;
