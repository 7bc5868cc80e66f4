//! Whose instance and Node a provider ID is.
//!
//! A provider answers `create` with a provider ID, and registration adopts the Node carrying it.
//! A sandboxed provider must not be able to take over a machine that is not its claim's — another
//! provider's node, a node no claim manages, another claim's instance — by answering with its
//! provider ID. So the host gives a claim only a provider ID that:
//!
//! - no other NodeClaim holds ([`Taken::OtherClaim`]);
//! - no other launch of this host wrote a moment ago ([`LaunchedIds`]: two launches answered
//!   with one ID at once both pass the caches, which have seen neither write yet);
//! - whose Node, if one exists, is owned by no other NodeClaim ([`Taken::NodeOwned`]), carries
//!   no other provider's ownership mark ([`Taken::OtherProvider`]: a provider's Nodes are stamped
//!   `capstan.dev/provider` by the host) and is not older than the claim ([`Taken::NodeOlder`]):
//!   an instance launched for a claim cannot have registered before the claim existed (both
//!   timestamps are the API server's).
//!
//! Launch refuses such an answer; registration never adopts such a Node, and checks it again on
//! the Node it reads from the API server right before it writes its owner reference, with that
//! read's `resourceVersion` as the write's precondition: of two claims adopting one Node at once,
//! the second's write conflicts, and its second look finds the first's owner reference.
//!
//! And a claim is owned by its NodePool, as Karpenter's are ([`own_by_pool`]), so that deleting
//! the pool deletes its claims through Kubernetes' garbage collector.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use serde_json::json;

use crate::api::labels::{OWNER_LABEL, PROVIDER_ANNOTATION};
use crate::api::{NodeClaim, NodePool};
use crate::controllers::{Context, ControllerError, merge_patch};
use crate::rules::claims::owner_reference;
use crate::rules::claims::{nodepool, provider_id};

/// Why a provider ID or Node is not the claim's to take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Taken {
    /// Another claim holds the provider ID.
    #[error("provider ID {provider_id} belongs to NodeClaim {claim}")]
    OtherClaim {
        /// The provider ID.
        provider_id: String,
        /// The claim holding it.
        claim: String,
    },
    /// The Node carrying the provider ID is another claim's.
    #[error("Node {node} belongs to NodeClaim {owner}")]
    NodeOwned {
        /// The Node.
        node: String,
        /// The claim owning it.
        owner: String,
    },
    /// The Node carrying the provider ID carries another provider's ownership mark.
    #[error("Node {node} is provider {owner}'s, not provider {provider}'s")]
    OtherProvider {
        /// The Node.
        node: String,
        /// The provider whose mark it carries.
        owner: String,
        /// The claim's provider.
        provider: String,
    },
    /// The Node carrying the provider ID was created before the claim.
    #[error(
        "Node {node} was created at {node_created}, before NodeClaim {claim} ({claim_created})"
    )]
    NodeOlder {
        /// The Node.
        node: String,
        /// Its creation time.
        node_created: String,
        /// The claim.
        claim: String,
        /// Its creation time.
        claim_created: String,
    },
}

/// How long a launch's provider ID is held for its claim: far longer than the caches take to see
/// the claim's status write.
const LAUNCH_HOLD: Duration = Duration::from_secs(600);

/// Provider IDs this host's launches wrote lately, each held for one claim (by uid).
#[derive(Debug, Default)]
pub struct LaunchedIds {
    held: Mutex<HashMap<String, Held>>,
}

#[derive(Debug, Clone)]
struct Held {
    uid: String,
    claim: String,
    since: Instant,
}

impl LaunchedIds {
    /// Holds `provider_id` for `claim`, unless another claim's launch holds it. Atomic: of two
    /// launches answered with one ID at once, exactly one holds it.
    pub fn hold(&self, claim: &NodeClaim, provider_id: &str) -> Result<(), Taken> {
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.retain(|_, h| h.since.elapsed() < LAUNCH_HOLD);
        if let Some(other) = held.get(provider_id)
            && other.uid != uid
        {
            return Err(Taken::OtherClaim {
                provider_id: provider_id.to_owned(),
                claim: other.claim.clone(),
            });
        }
        held.insert(
            provider_id.to_owned(),
            Held {
                uid,
                claim: claim.name_any(),
                since: Instant::now(),
            },
        );
        Ok(())
    }
}

/// Gives `claim` an owner reference to its NodePool (by its `karpenter.sh/nodepool` label) if it
/// lacks one: claims created before Capstan set them, or by hand. Returns whether it patched.
pub async fn own_by_pool(ctx: &Context, claim: &NodeClaim) -> Result<bool, ControllerError> {
    let pool_name = nodepool(claim);
    if pool_name.is_empty() {
        return Ok(false);
    }
    let Some(pool) = ctx
        .state
        .pools
        .store()
        .get(&ObjectRef::<NodePool>::new(&pool_name))
    else {
        return Ok(false);
    };
    let Some(owner) = owner_reference(pool.as_ref()) else {
        return Ok(false);
    };
    if claim.owner_references().iter().any(|o| o.uid == owner.uid) {
        return Ok(false);
    }
    let mut owners = claim.owner_references().to_vec();
    owners.push(owner);
    let patch = json!({
        "metadata": {"resourceVersion": claim.resource_version(), "ownerReferences": owners},
    });
    merge_patch::<NodeClaim>(&ctx.client, &claim.name_any(), &patch).await?;
    tracing::info!(nodeclaim = %claim.name_any(), nodepool = %pool_name, "owner reference to the nodepool added");
    Ok(true)
}

/// Whether `provider_id` is not `claim`'s to take, given the host's caches.
pub fn taken(ctx: &Context, claim: &NodeClaim, provider_id: &str) -> Option<Taken> {
    // Only the claims and Nodes that could answer are taken from the caches: these run for every
    // claim reconcile, and a copy of every claim and Node each time was a seventh of the host's
    // CPU at 2,000 nodes.
    let holders = ctx
        .state
        .claims
        .store()
        .state_filter(|c| crate::rules::claims::provider_id(c) == Some(provider_id));
    if let Some(taken) = held_by_another(claim, provider_id, holders.iter().map(AsRef::as_ref)) {
        return Some(taken);
    }
    super::nodes_carrying(ctx, provider_id)
        .iter()
        .find_map(|n| node_taken(claim, n, claims_on(ctx, n).iter().map(AsRef::as_ref)))
}

/// The claims whose status names `node` as theirs (the ones [`node_taken`] asks about).
pub fn claims_on(ctx: &Context, node: &Node) -> Vec<Arc<NodeClaim>> {
    let Some(name) = node.metadata.name.as_deref() else {
        return Vec::new();
    };
    ctx.state
        .claims
        .store()
        .state_filter(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name))
}

/// The other claim among `claims` holding `provider_id`.
pub fn held_by_another<'a>(
    claim: &NodeClaim,
    id: &str,
    claims: impl IntoIterator<Item = &'a NodeClaim>,
) -> Option<Taken> {
    claims
        .into_iter()
        .find(|other| provider_id(other) == Some(id) && other.metadata.uid != claim.metadata.uid)
        .map(|other| Taken::OtherClaim {
            provider_id: id.to_owned(),
            claim: other.name_any(),
        })
}

/// Whether `node` is not `claim`'s to adopt: another claim owns it (by owner reference, or by
/// `status.nodeName` among `claims`), another provider's mark is on it, or it is older than the
/// claim.
pub fn node_taken<'a>(
    claim: &NodeClaim,
    node: &Node,
    claims: impl IntoIterator<Item = &'a NodeClaim>,
) -> Option<Taken> {
    let name = node.name_any();
    // Called for every claim reconcile over every claim: compared in place, nothing cloned.
    let uid = claim.metadata.uid.as_deref();
    let owner = node
        .owner_references()
        .iter()
        .find(|o| {
            o.kind == "NodeClaim"
                && o.api_version.starts_with("karpenter.sh/")
                && uid != Some(o.uid.as_str())
        })
        .map(|o| o.name.clone())
        .or_else(|| {
            claims
                .into_iter()
                .find(|other| {
                    other.status.as_ref().and_then(|s| s.node_name.as_deref())
                        == Some(name.as_str())
                        && other.metadata.uid.as_deref() != uid
                })
                .map(|other| other.name_any())
        });
    if let Some(owner) = owner {
        return Some(Taken::NodeOwned { node: name, owner });
    }
    if let (Some(mark), Some(provider)) = (
        node.labels().get(OWNER_LABEL),
        claim.annotations().get(PROVIDER_ANNOTATION),
    ) && mark != provider
    {
        return Some(Taken::OtherProvider {
            node: name,
            owner: mark.clone(),
            provider: provider.clone(),
        });
    }
    let (Some(node_created), Some(claim_created)) = (
        node.metadata.creation_timestamp.as_ref(),
        claim.metadata.creation_timestamp.as_ref(),
    ) else {
        return None;
    };
    (node_created.0 < claim_created.0).then(|| Taken::NodeOlder {
        node: name,
        node_created: node_created.0.to_string(),
        claim: claim.name_any(),
        claim_created: claim_created.0.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NodeClaim;
    use serde_json::json;

    fn claim(name: &str, uid: &str, created: &str, status: serde_json::Value) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": name, "uid": uid, "creationTimestamp": created},
            "spec": {"nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "default"},
                     "requirements": []},
            "status": status,
        }))
        .unwrap_or_else(|err| panic!("claim: {err}"))
    }

    fn node(name: &str, created: &str, owners: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "creationTimestamp": created, "ownerReferences": owners},
            "spec": {"providerID": format!("kwok://{name}")},
        }))
        .unwrap_or_else(|err| panic!("node: {err}"))
    }

    const T0: &str = "2026-11-27T10:00:00Z";
    const T1: &str = "2026-11-27T10:00:05Z";

    #[test]
    fn a_provider_id_another_claim_holds_is_taken() {
        let mine = claim("hostile-abc", "u1", T0, json!({}));
        let victim = claim("kwok-xyz", "u2", T0, json!({"providerID": "kwok://victim"}));
        assert_eq!(
            held_by_another(&mine, "kwok://victim", [&mine, &victim]),
            Some(Taken::OtherClaim {
                provider_id: "kwok://victim".into(),
                claim: "kwok-xyz".into()
            })
        );
        // The claim's own provider ID (a create answered again) is its own.
        let launched = claim(
            "hostile-abc",
            "u1",
            T0,
            json!({"providerID": "kwok://mine"}),
        );
        assert_eq!(held_by_another(&launched, "kwok://mine", [&launched]), None);
    }

    #[test]
    fn a_node_another_claim_owns_is_taken() {
        let mine = claim("hostile-abc", "u1", T0, json!({}));
        let owned = node(
            "victim",
            T1,
            json!([{"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": "kwok-xyz", "uid": "u2"}]),
        );
        assert_eq!(
            node_taken(&mine, &owned, []),
            Some(Taken::NodeOwned {
                node: "victim".into(),
                owner: "kwok-xyz".into()
            })
        );
        // Named by another claim's status, without an owner reference yet.
        let bare = node("victim", T1, json!([]));
        let other = claim("kwok-xyz", "u2", T0, json!({"nodeName": "victim"}));
        assert!(matches!(
            node_taken(&mine, &bare, [&other]),
            Some(Taken::NodeOwned { .. })
        ));
        // Its own owner reference is no obstacle.
        let own = node(
            "mine",
            T1,
            json!([{"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": "hostile-abc", "uid": "u1"}]),
        );
        assert_eq!(node_taken(&mine, &own, [&mine]), None);
    }

    #[test]
    fn a_node_another_provider_marked_is_taken() {
        let mut mine = claim("hostile-abc", "u1", T0, json!({}));
        mine.annotations_mut()
            .insert(PROVIDER_ANNOTATION.into(), "hostile".into());
        let mut theirs = node("victim", T1, json!([]));
        theirs
            .labels_mut()
            .insert(OWNER_LABEL.into(), "kwok".into());
        assert_eq!(
            node_taken(&mine, &theirs, []),
            Some(Taken::OtherProvider {
                node: "victim".into(),
                owner: "kwok".into(),
                provider: "hostile".into()
            })
        );
        // Its own provider's mark, or none (a kubelet registered it), is no obstacle.
        theirs
            .labels_mut()
            .insert(OWNER_LABEL.into(), "hostile".into());
        assert_eq!(node_taken(&mine, &theirs, []), None);
        assert_eq!(node_taken(&mine, &node("bare", T1, json!([])), []), None);
    }

    #[test]
    fn one_provider_id_is_held_for_one_claim_at_a_time() {
        let ids = LaunchedIds::default();
        let first = claim("first", "u1", T0, json!({}));
        let second = claim("second", "u2", T0, json!({}));
        assert_eq!(ids.hold(&first, "chaos://shared"), Ok(()));
        assert_eq!(
            ids.hold(&second, "chaos://shared"),
            Err(Taken::OtherClaim {
                provider_id: "chaos://shared".into(),
                claim: "first".into()
            })
        );
        // The same claim again (a retried write), and other IDs, are fine.
        assert_eq!(ids.hold(&first, "chaos://shared"), Ok(()));
        assert_eq!(ids.hold(&second, "chaos://other"), Ok(()));
    }

    #[test]
    fn a_node_older_than_the_claim_is_taken() {
        let mine = claim("hostile-abc", "u1", T1, json!({}));
        let older = node("control-plane", T0, json!([]));
        let taken = node_taken(&mine, &older, []);
        assert!(matches!(taken, Some(Taken::NodeOlder { .. })), "{taken:?}");
        let newer = node("fresh", T1, json!([]));
        assert_eq!(node_taken(&mine, &newer, []), None);
    }
}
