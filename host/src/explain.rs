//! `capstan explain`: why a node is, or is not, consolidated — read back from a live cluster.
//!
//! The answer is the host's own: each managed NodeClaim's `ConsolidationBlocked` condition,
//! which the disruption pass keeps true to its [`verdict`](crate::rules::verdict)
//! (the same facts it decides on), with the numbers behind it (the node's price, its pods and
//! their disruption cost) and what would unblock it. For a NodePool: each node's verdict and the
//! next action the host takes — the disruptions under way, a decision waiting for validation, or
//! the nodes its next consolidation search may take. For a pod ([`pod`]): the host's latest
//! provisioning decision (the node it nominated, or why it made none, such as no instance type
//! carrying the devices its ResourceClaims ask for) and its claims' devices. [`explain_node`] and
//! [`explain_pool`] work on a [`View`] (the objects as listed); [`table`] renders them.

pub mod pod;
pub mod table;

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde::Serialize;

use crate::api::NodePool;
use crate::api::labels::PRICE_ANNOTATION;
use crate::api::labels::{CAPACITY_TYPE, INSTANCE_TYPE, NODEPOOL, ZONE};
use crate::api::nodeclaim::conditions::CONSOLIDATABLE;
use crate::api::shared::find_condition;
use crate::rules::budgets;
use crate::rules::candidates::{DISRUPTION_ANNOTATION, Machine, machines};
use crate::rules::claims::is_true;
use crate::rules::consolidation::cost;
use crate::rules::consolidation::cost::claim_lifetime_remaining as lifetime_remaining;
use crate::rules::verdict::{self, CONSOLIDATION_BLOCKED, NOT_BLOCKED};
use crate::state::View;

/// The `schema` field of the JSON answers.
pub const SCHEMA: &str = "capstan.dev/explain/v1";

/// What `capstan explain` could not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExplainError {
    #[error("no Node or NodeClaim named {0} has both a NodeClaim and a Node")]
    NoNode(String),
    #[error("no NodePool named {0}")]
    NoPool(String),
}

/// The host's verdict on one node, as its `ConsolidationBlocked` condition says.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// `None` while the host has not written a verdict (it is not running, or the node is new).
    pub blocked: Option<bool>,
    pub reason: String,
    pub message: String,
    /// When the condition last changed status.
    pub since: Option<String>,
    /// What would unblock it.
    pub unblock: String,
}

/// One node: where it runs, what it costs, its pods, and the verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeAnswer {
    pub node: String,
    pub node_claim: String,
    pub node_pool: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    /// $/h of the offering it was launched on (the claim's `capstan.dev/price-per-hour`).
    pub price_per_hour: Option<f64>,
    /// Its pods that would need a new home (namespace/name).
    pub pods: Vec<String>,
    /// Karpenter's ordering cost: the pods' eviction costs times the share of its lifetime left
    /// (candidates are tried cheapest first).
    pub disruption_cost: f64,
    /// Its `Consolidatable` condition.
    pub consolidatable: bool,
    pub verdict: Verdict,
    /// The disruption under way (`reason/replacements`), if any.
    pub disruption: Option<String>,
    pub deleting: bool,
}

/// `capstan explain node`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeReport {
    pub schema: &'static str,
    pub now: String,
    #[serde(flatten)]
    pub answer: NodeAnswer,
}

/// What the host does next in a pool.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Next {
    /// `disrupting` (disruptions under way), `validating` (a decision waits for validation),
    /// `searching` (nodes nothing blocks: the next search may take them, cheapest to disrupt
    /// first) or `none` (every node is blocked).
    pub action: &'static str,
    pub nodes: Vec<String>,
    pub detail: String,
}

/// `capstan explain nodepool`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolReport {
    pub schema: &'static str,
    pub now: String,
    pub node_pool: String,
    pub consolidation_policy: String,
    pub consolidate_after: String,
    /// The pool's budgets, as written.
    pub budgets: Vec<String>,
    pub nodes: Vec<NodeAnswer>,
    /// How many nodes per verdict reason (`NotBlocked` included).
    pub by_reason: BTreeMap<String, usize>,
    pub next: Next,
}

fn answer(m: &Machine<'_>, now: Timestamp) -> NodeAnswer {
    let label = |key: &str| m.node.labels().get(key).cloned().unwrap_or_default();
    let condition = m
        .claim
        .status
        .as_ref()
        .and_then(|s| find_condition(&s.conditions, CONSOLIDATION_BLOCKED));
    let verdict = match condition {
        Some(c) => {
            let reason = c.reason.clone().unwrap_or_default();
            Verdict {
                blocked: Some(c.is_true()),
                unblock: verdict::unblock(&reason).to_owned(),
                reason,
                message: c.message.clone().unwrap_or_default(),
                since: Some(c.last_transition_time.0.to_string()),
            }
        }
        None => Verdict {
            blocked: None,
            reason: String::new(),
            message: "no verdict yet: the host has not judged this node (is it running?)"
                .to_owned(),
            since: None,
            unblock: String::new(),
        },
    };
    let lifetime = lifetime_remaining(m.claim, now);
    NodeAnswer {
        node: m.node.name_any(),
        node_claim: m.claim.name_any(),
        node_pool: m.claim.labels().get(NODEPOOL).cloned().unwrap_or_default(),
        instance_type: label(INSTANCE_TYPE),
        zone: label(ZONE),
        capacity_type: label(CAPACITY_TYPE),
        price_per_hour: m
            .claim
            .annotations()
            .get(PRICE_ANNOTATION)
            .and_then(|p| p.parse().ok()),
        pods: m
            .pods
            .iter()
            .map(|p| format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()))
            .collect(),
        disruption_cost: cost::disruption_cost(m.pods.iter().copied(), lifetime),
        consolidatable: is_true(m.claim, CONSOLIDATABLE),
        verdict,
        disruption: m.claim.annotations().get(DISRUPTION_ANNOTATION).cloned(),
        deleting: m.claim.metadata.deletion_timestamp.is_some(),
    }
}

fn pool_named<'a>(view: &'a View, name: &str) -> Option<&'a NodePool> {
    view.pools
        .iter()
        .find(|p| p.name_any() == name)
        .map(AsRef::as_ref)
}

/// The verdict on the node named `name` (a Node's or a NodeClaim's name).
pub fn explain_node(view: &View, name: &str, now: Timestamp) -> Result<NodeReport, ExplainError> {
    let all = machines(&view.claims, &view.nodes, &view.pods);
    let m = all
        .iter()
        .find(|m| m.node.name_any() == name)
        .or_else(|| all.iter().find(|m| m.claim.name_any() == name))
        .ok_or_else(|| ExplainError::NoNode(name.to_owned()))?;
    Ok(NodeReport {
        schema: SCHEMA,
        now: now.to_string(),
        answer: answer(m, now),
    })
}

/// Each node of the pool named `name`, and what the host does next there.
pub fn explain_pool(view: &View, name: &str, now: Timestamp) -> Result<PoolReport, ExplainError> {
    let pool = pool_named(view, name).ok_or_else(|| ExplainError::NoPool(name.to_owned()))?;
    let all = machines(&view.claims, &view.nodes, &view.pods);
    let mut nodes: Vec<NodeAnswer> = all
        .iter()
        .filter(|m| m.claim.labels().get(NODEPOOL).map(String::as_str) == Some(name))
        .map(|m| answer(m, now))
        .collect();
    nodes.sort_by(|a, b| a.node.cmp(&b.node));
    let mut by_reason: BTreeMap<String, usize> = BTreeMap::new();
    for n in &nodes {
        let reason = if n.verdict.reason.is_empty() {
            "Unknown".to_owned()
        } else {
            n.verdict.reason.clone()
        };
        *by_reason.entry(reason).or_default() += 1;
    }
    let next = next(&nodes);
    let disruption = &pool.spec.disruption;
    Ok(PoolReport {
        schema: SCHEMA,
        now: now.to_string(),
        node_pool: name.to_owned(),
        consolidation_policy: format!("{:?}", disruption.consolidation_policy),
        consolidate_after: disruption.consolidate_after.clone(),
        budgets: disruption.budgets.iter().map(budgets::describe).collect(),
        nodes,
        by_reason,
        next,
    })
}

/// What the host does next among `nodes`, in the order its disruption pass acts.
fn next(nodes: &[NodeAnswer]) -> Next {
    let names = |f: &dyn Fn(&NodeAnswer) -> bool| -> Vec<String> {
        nodes
            .iter()
            .filter(|n| f(n))
            .map(|n| n.node.clone())
            .collect()
    };
    let disrupting = names(&|n| n.disruption.is_some() || n.deleting);
    if !disrupting.is_empty() {
        return Next {
            action: "disrupting",
            detail:
                "disruptions under way finish: replacements launch, then these nodes drain and go"
                    .into(),
            nodes: disrupting,
        };
    }
    let validating = names(&|n| n.verdict.reason == "PendingValidation");
    if !validating.is_empty() {
        return Next {
            action: "validating",
            detail:
                "a consolidation decision waits for validation; these nodes go if it still holds"
                    .into(),
            nodes: validating,
        };
    }
    let mut free: Vec<&NodeAnswer> = nodes
        .iter()
        .filter(|n| n.verdict.reason == NOT_BLOCKED)
        .collect();
    free.sort_by(|a, b| a.disruption_cost.total_cmp(&b.disruption_cost));
    if !free.is_empty() {
        return Next {
            action: "searching",
            detail: "nothing blocks these nodes: the next consolidation search takes empty ones, and the others (cheapest to disrupt first) when removing or replacing them saves money".into(),
            nodes: free.iter().map(|n| n.node.clone()).collect(),
        };
    }
    Next {
        action: "none",
        detail: "every node is blocked (see each verdict): consolidation takes none now".into(),
        nodes: Vec::new(),
    }
}

#[cfg(test)]
mod tests;
