//! Facts of one NodeClaim, its conditions as Karpenter keeps them, and the owner references Karpenter puts on claims and Nodes.

use kube::ResourceExt;

use crate::api::NodeClaim;
use crate::api::labels::NODEPOOL;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::nodeclaim::conditions::{INITIALIZED, LAUNCHED, READY, REGISTERED};
use crate::api::shared::{ConditionStatus, find_condition, set_condition as set_one};

/// The provider ID the claim's launch returned, if any (an empty one is none).
pub fn provider_id(claim: &NodeClaim) -> Option<&str> {
    claim
        .status
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .filter(|id| !id.is_empty())
}

/// The claim's NodePool (label), or `""`.
pub fn nodepool(claim: &NodeClaim) -> String {
    claim.labels().get(NODEPOOL).cloned().unwrap_or_default()
}

/// Whether condition `type_` of the claim is `True`.
pub fn is_true(claim: &NodeClaim, type_: &str) -> bool {
    claim
        .status
        .as_ref()
        .and_then(|s| find_condition(&s.conditions, type_))
        .is_some_and(|c| c.is_true())
}

/// The reason on a dependent condition no step has set yet (Karpenter's word).
const AWAITING_RECONCILIATION: &str = "AwaitingReconciliation";

/// Sets a condition (reason and message are always present: upstream Karpenter CRDs require
/// them) and recomputes the root `Ready`, at `now`. Returns whether anything changed.
pub fn set_condition(
    claim: &mut NodeClaim,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    now: &Time,
) -> bool {
    let generation = claim.metadata.generation;
    let conditions = &mut claim.status.get_or_insert_with(Default::default).conditions;
    // As Karpenter's status conditions: every dependent of `Ready` is present from the first
    // write, `Unknown` until its step has run, so a claim never shows `Launched` without
    // `Registered`.
    let mut changed = false;
    for dependent in [LAUNCHED, REGISTERED, INITIALIZED] {
        if dependent != type_ && find_condition(conditions, dependent).is_none() {
            changed |= set_one(
                conditions,
                dependent,
                ConditionStatus::Unknown,
                Some(AWAITING_RECONCILIATION),
                Some("object is awaiting reconciliation"),
                generation,
                now.clone(),
            );
        }
    }
    changed |= set_one(
        conditions,
        type_,
        status,
        Some(reason),
        Some(message),
        generation,
        now.clone(),
    );
    let pending: Vec<String> = [LAUNCHED, REGISTERED, INITIALIZED]
        .iter()
        .filter(|t| !find_condition(conditions, t).is_some_and(|c| c.is_true()))
        .map(|t| {
            let status = find_condition(conditions, t).map_or("Unknown", |c| match c.status {
                ConditionStatus::True => "True",
                ConditionStatus::False => "False",
                ConditionStatus::Unknown => "Unknown",
            });
            format!("{t}={status}")
        })
        .collect();
    changed |= if pending.is_empty() {
        set_one(
            conditions,
            READY,
            ConditionStatus::True,
            Some("Ready"),
            Some(""),
            generation,
            now.clone(),
        )
    } else {
        set_one(
            conditions,
            READY,
            ConditionStatus::Unknown,
            Some("UnhealthyDependents"),
            Some(&pending.join(", ")),
            generation,
            now.clone(),
        )
    };
    changed
}

/// An owner reference to `object` (a claim, for its Node; a pool, for its claims), blocking
/// the owner's foreground deletion as Karpenter's do; none for an object without a UID.
pub fn owner_reference<K: kube::Resource<DynamicType = ()>>(
    object: &K,
) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> {
    let mut owner = object.controller_owner_ref(&())?;
    owner.controller = None;
    owner.block_owner_deletion = Some(true);
    Some(owner)
}

#[cfg(test)]
mod tests;
