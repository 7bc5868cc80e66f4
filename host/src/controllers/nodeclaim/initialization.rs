//! Initialization: the claim's Node is Ready, its startup taints and the well-known ephemeral
//! taints are gone, and every extended resource the claim requested is in its allocatable →
//! `karpenter.sh/initialized=true` on the Node and `Initialized=True`.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::registration::has_taint;
use super::{Step, nodes_of, persist_status, set};
use crate::api::labels::{INITIALIZED as INITIALIZED_LABEL, UNREGISTERED_TAINT_KEY};
use crate::api::nodeclaim::conditions::{INITIALIZED, REGISTERED};
use crate::api::{ConditionStatus, NodeClaim};
use crate::controllers::{Context, ControllerError};
use crate::rules::claims::{is_true, nodepool};
use crate::scheduling::quantity::parse_millis;

/// Taints that go away by themselves once a node is up.
const EPHEMERAL_TAINTS: &[&str] = &[
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.cloudprovider.kubernetes.io/uninitialized",
    UNREGISTERED_TAINT_KEY,
];

/// Resources every node has; the others are extended resources a device plugin registers.
const WELL_KNOWN_RESOURCES: &[&str] = &["cpu", "memory", "pods", "ephemeral-storage"];

/// Why a Node is not initialized, as a condition reason and message.
pub fn not_initialized(claim: &NodeClaim, node: &Node) -> Option<(&'static str, String)> {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    if !ready {
        return Some(("NodeNotReady", "Node status is NotReady".to_owned()));
    }
    let startup: Vec<&str> = claim
        .spec
        .startup_taints
        .iter()
        .filter(|t| has_taint(node, t))
        .map(|t| t.key.as_str())
        .collect();
    if !startup.is_empty() {
        return Some((
            "StartupTaintsExist",
            format!("StartupTaints {} still exist", startup.join(", ")),
        ));
    }
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_ref());
    if let Some(t) = taints.and_then(|ts| {
        ts.iter()
            .find(|t| EPHEMERAL_TAINTS.contains(&t.key.as_str()))
    }) {
        return Some((
            "KnownEphemeralTaintsExist",
            format!("KnownEphemeralTaint {}:{} still exists", t.key, t.effect),
        ));
    }
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    let missing: Vec<&str> = claim
        .spec
        .resources
        .iter()
        .flat_map(|r| r.requests.keys())
        .filter(|name| !WELL_KNOWN_RESOURCES.contains(&name.as_str()))
        .filter(|name| {
            !allocatable
                .and_then(|a| a.get(name.as_str()))
                .is_some_and(|q| parse_millis(&q.0).is_ok_and(|m| m > 0))
        })
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        return Some((
            "ResourceNotRegistered",
            format!(
                "Resource {} was requested but not registered",
                missing.join(", ")
            ),
        ));
    }
    None
}

/// Marks the claim initialized once its Node is.
pub async fn reconcile(claim: &mut NodeClaim, ctx: &Context) -> Result<Step, ControllerError> {
    if is_true(claim, INITIALIZED) {
        return Ok(Step::Continue);
    }
    if !is_true(claim, REGISTERED) {
        return Ok(Step::Stop(Action::await_change()));
    }
    let Some(node) = nodes_of(ctx, claim).into_iter().next() else {
        if set(
            claim,
            INITIALIZED,
            ConditionStatus::Unknown,
            "NodeNotFound",
            "Node not registered with cluster",
        ) {
            persist_status(ctx, claim).await?;
        }
        return Ok(Step::Stop(Action::requeue(Duration::from_secs(5))));
    };
    if let Some((reason, message)) = not_initialized(claim, &node) {
        if set(
            claim,
            INITIALIZED,
            ConditionStatus::Unknown,
            reason,
            &message,
        ) {
            persist_status(ctx, claim).await?;
        }
        // The Node's changes trigger a reconcile; look again anyway now and then.
        return Ok(Step::Stop(Action::requeue(Duration::from_secs(30))));
    }
    if node.labels().get(INITIALIZED_LABEL).map(String::as_str) != Some("true") {
        let api: Api<Node> = Api::all(ctx.client.clone());
        let patch = json!({"metadata": {"labels": {INITIALIZED_LABEL: "true"}}});
        api.patch(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    }
    set(claim, INITIALIZED, ConditionStatus::True, "Initialized", "");
    persist_status(ctx, claim).await?;
    ctx.metrics.lifecycle.initialized(&nodepool(claim));
    ctx.events
        .normal(
            claim,
            "Initialized",
            format!("Node {} initialized", node.name_any()),
        )
        .await;
    Ok(Step::Continue)
}
