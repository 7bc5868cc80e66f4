//! Facts of one NodeClaim, and the owner references Karpenter puts on claims and Nodes.

use kube::ResourceExt;

use crate::api::NodeClaim;
use crate::api::labels::NODEPOOL;
use crate::api::shared::find_condition;

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
