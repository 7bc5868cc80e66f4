//! What a NodePool's limits leave for a provisioning run.
//!
//! `status.resources` lags: the NodePool status controller only sees a claim's capacity once it
//! has launched, and a claim created by the previous batch may not be counted at all yet. As
//! Karpenter does, every NodeClaim of the pool in the snapshot is counted against the limits
//! here: its `status.capacity` once launched, otherwise the largest capacity it could still launch
//! with (the biggest of the pool's instance types its `node.kubernetes.io/instance-type` `In`
//! requirement allows, or its requests when none of those is known). `nodes` counts one per
//! claim. Whatever `status` reports is kept when it is larger, so neither source can make the
//! remaining limits grow. The solver lists on a claim of a pool with limits only the types no
//! larger (in the limited resources) than the smallest its pods fit on, so that largest is what
//! the claim needs, not what happened to fit under the limit.
//!
//! A spend limit is the limit [`PRICE`] (`capstan.dev/price-per-hour`): a pool that has it gets
//! its instance types with their dearest available offering's price as that resource's capacity
//! ([`with_price_capacity`]), so the solver bounds claims by price as by cpu. A launched claim
//! counts at the price of the offering it launched with (its instance type, zone and capacity
//! type labels), one still launching at the dearest offering its types allow.
//!
//! A Provider's `spendLimitPerHour` bounds the spend of all its pools together: each of them
//! gets the limit [`PROVIDER_PRICE`] ([`join_spend_group`]), and what it leaves is worked out
//! over the claims of every pool of the provider ([`share_spend_groups`]). The solver keeps that
//! room shared: what one pool of the group opens, the others no longer have.
//!
//! When a limit leaves pods without a node, the pool gets a `LimitReached` Event, at most once
//! per [`LIMIT_EVENT_INTERVAL`] for each limit ([`LimitEvents`]), so a pod pending for an hour does
//! not add an Event per batch.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use std::sync::Arc;

use crate::api::labels::{CAPACITY_TYPE, INSTANCE_TYPE, NODEPOOL, PRICE_ANNOTATION, ZONE};
use crate::api::{NodeClaim, NodePool, NodeSelectorOperator, ResourceList};
use crate::scheduling::resources::{NODES, PRICE, PROVIDER_PRICE, ResourceLimits, price_millis};
use crate::scheduling::{InstanceType, NodePoolView, Resources};

/// What the claims of one pool count against its limits.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClaimUsage {
    /// Summed capacity (launched) or largest possible capacity (launching).
    pub resources: Resources,
    /// Number of claims.
    pub nodes: i64,
}

/// Parses a resource list, leaving out entries that do not parse.
fn parse_list(list: &ResourceList) -> Resources {
    let mut out = Resources::default();
    for (name, value) in list {
        if let Ok(r) = Resources::parse([(name.as_str(), value.as_str())]) {
            out.add(&r);
        }
    }
    out
}

/// `types` with [`PRICE`] in their capacity when `limits` bound it (unchanged otherwise): each
/// type's dearest available offering, the most a claim that may launch it can cost.
pub fn with_price_capacity(
    limits: Option<&ResourceLimits>,
    types: Arc<[InstanceType]>,
) -> Arc<[InstanceType]> {
    if !limits.is_some_and(|l| l.0.contains_key(PRICE) || l.0.contains_key(PROVIDER_PRICE)) {
        return types;
    }
    types
        .iter()
        .map(|t| {
            let dearest = t
                .offerings
                .iter()
                .filter(|o| o.available)
                .map(|o| price_millis(o.price))
                .max()
                .unwrap_or(0);
            let mut priced = t.clone();
            priced.capacity.set(PRICE, dearest);
            priced
        })
        .collect()
}

/// What a launched `claim` costs per hour in [`PRICE`]'s units: its offering's price among
/// `types` (by its instance type, zone and capacity type labels), else its type's dearest
/// ([`with_price_capacity`]); zero when its type is not in `types`.
fn launched_price(claim: &NodeClaim, types: &[InstanceType]) -> i64 {
    let labels = claim.metadata.labels.as_ref();
    let label = |key: &str| labels.and_then(|l| l.get(key)).map(String::as_str);
    let Some(it) = label(INSTANCE_TYPE).and_then(|name| types.iter().find(|t| t.name == name))
    else {
        return 0;
    };
    it.offerings
        .iter()
        .find(|o| {
            Some(o.zone.as_str()) == label(ZONE)
                && Some(o.capacity_type.as_str()) == label(CAPACITY_TYPE)
        })
        .map_or_else(|| it.capacity.get(PRICE), |o| price_millis(o.price))
}

/// The most `claim` can count against its pool's limits, given the pool's instance types.
pub fn claim_capacity(claim: &NodeClaim, types: &[InstanceType]) -> Resources {
    if let Some(status) = claim.status.as_ref()
        && !status.capacity.is_empty()
    {
        let mut capacity = parse_list(&status.capacity);
        if types.iter().any(|t| t.capacity.get(PRICE) > 0) {
            capacity.set(PRICE, launched_price(claim, types));
        }
        return capacity;
    }
    let allowed: Option<HashSet<&str>> = claim
        .spec
        .requirements
        .iter()
        .find(|r| r.key == INSTANCE_TYPE && r.operator == NodeSelectorOperator::In)
        .map(|r| r.values.iter().map(String::as_str).collect());
    let largest = allowed.and_then(|allowed| {
        InstanceType::largest_capacity(types.iter().filter(|t| allowed.contains(t.name.as_str())))
    });
    largest.unwrap_or_else(|| {
        claim
            .spec
            .resources
            .as_ref()
            .map(|r| parse_list(&r.requests))
            .unwrap_or_default()
    })
}

/// What the claims of `pool` (by their `karpenter.sh/nodepool` label) count against its limits.
/// Claims being deleted are left out, as the NodePool status controller leaves them out.
pub fn claim_usage<C: std::borrow::Borrow<NodeClaim>>(
    pool: &str,
    claims: &[C],
    types: &[InstanceType],
) -> ClaimUsage {
    let mut usage = ClaimUsage::default();
    for claim in claims.iter().map(|c| c.borrow()).filter(|c| {
        c.metadata.deletion_timestamp.is_none()
            && c.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(NODEPOOL))
                .is_some_and(|p| p == pool)
    }) {
        usage.nodes += 1;
        usage.resources.add(&claim_capacity(claim, types));
    }
    usage
}

/// A provider's spend limit over all its pools ([`PROVIDER_PRICE`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpendGroup {
    /// The provider's name.
    pub name: String,
    /// Thousandths of the price unit per hour.
    pub limit: i64,
}

/// Puts `view` under `group`'s limit: [`PROVIDER_PRICE`] among its limits, before its types get
/// their prices ([`with_price_capacity`]) and its `remaining` is worked out.
pub fn join_spend_group(view: &mut NodePoolView, group: &SpendGroup) {
    view.limits
        .get_or_insert_with(ResourceLimits::default)
        .0
        .insert(PROVIDER_PRICE.to_owned(), group.limit);
    view.spend_group = Some(group.name.clone());
}

/// Sets, in the `remaining` of every view of a spend group, what the group's limit leaves once
/// every claim of every pool of the group counts. `groups` names the group of each pool (those
/// left out of `views` too: their claims still spend). A claim counts at its price among its
/// pool's types ([`claim_capacity`]), or, for a pool not in `views`, at its price annotation.
/// Claims being deleted are left out, as in [`claim_usage`].
pub fn share_spend_groups<C: std::borrow::Borrow<NodeClaim>>(
    views: &mut [NodePoolView],
    groups: &HashMap<String, SpendGroup>,
    claims: &[C],
) {
    if groups.is_empty() {
        return;
    }
    let mut spent: HashMap<&str, i64> = HashMap::new();
    for claim in claims.iter().map(|c| c.borrow()) {
        if claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some((pool, group)) = claim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(NODEPOOL))
            .and_then(|pool| Some((pool, groups.get(pool)?)))
        else {
            continue;
        };
        let price = match views.iter().find(|v| &v.name == pool) {
            Some(view) => claim_capacity(claim, &view.instance_types).get(PRICE),
            None => annotated_price(claim),
        };
        *spent.entry(group.name.as_str()).or_default() += price;
    }
    for view in views.iter_mut() {
        let Some(group) = groups.get(&view.name) else {
            continue;
        };
        let left = group.limit - spent.get(group.name.as_str()).copied().unwrap_or(0);
        view.remaining
            .get_or_insert_with(ResourceLimits::default)
            .0
            .insert(PROVIDER_PRICE.to_owned(), left);
    }
}

/// A claim's [`PRICE_ANNOTATION`] in thousandths (zero without one).
fn annotated_price(claim: &NodeClaim) -> i64 {
    claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PRICE_ANNOTATION))
        .and_then(|p| p.parse::<f64>().ok())
        .map_or(0, price_millis)
}

/// What `limits` leave after the larger of `usage` and the pool's `status` for each resource.
/// `None` when the pool has no limits.
pub fn remaining(
    limits: Option<&ResourceLimits>,
    pool: &NodePool,
    usage: &ClaimUsage,
) -> Option<ResourceLimits> {
    let limits = limits?;
    let status = pool.status.as_ref();
    let status_used = |name: &str| -> i64 {
        let Some(status) = status else { return 0 };
        let listed = status
            .resources
            .get(name)
            .and_then(|q| ResourceLimits::parse([(name, q.as_str())]).ok())
            .and_then(|l| l.0.get(name).copied())
            .unwrap_or(0);
        if name == NODES {
            listed.max(status.nodes.unwrap_or(0))
        } else {
            listed
        }
    };
    let mut out = limits.clone();
    for (name, value) in out.0.iter_mut() {
        let claimed = match name.as_str() {
            NODES => usage.nodes,
            // The pool's own share; [`share_spend_groups`] counts the whole group's.
            PROVIDER_PRICE => usage.resources.get(PRICE),
            _ => usage.resources.get(name),
        };
        *value = value.saturating_sub(claimed.max(status_used(name)));
    }
    Some(out)
}

/// How often a pool gets a `LimitReached` Event for the same limit while pods stay refused.
pub const LIMIT_EVENT_INTERVAL: Duration = Duration::from_secs(300);

/// When each pool limit was last reported, to rate-limit the Events.
#[derive(Debug, Default)]
pub struct LimitEvents {
    last: HashMap<(String, String), Instant>,
}

impl LimitEvents {
    /// Whether limit `resource` of `pool` is due a report at `now` (and, if so, notes it).
    pub fn due(&mut self, pool: &str, resource: &str, now: Instant) -> bool {
        let key = (pool.to_owned(), resource.to_owned());
        match self.last.get(&key) {
            Some(at) if now.saturating_duration_since(*at) < LIMIT_EVENT_INTERVAL => false,
            _ => {
                self.last.insert(key, now);
                true
            }
        }
    }

    /// Forgets the reports older than the interval, so the map holds only current limits.
    pub fn expire(&mut self, now: Instant) {
        self.last
            .retain(|_, at| now.saturating_duration_since(*at) < LIMIT_EVENT_INTERVAL);
    }
}

/// The note of a `LimitReached` Event: `limit cpu=64 reached: cpu=2 left ...`.
pub fn limit_note(reached: &crate::scheduling::LimitReached) -> String {
    use crate::scheduling::resources::format_resource;
    let whose = if reached.resource == PROVIDER_PRICE {
        "the nodes and launching claims of every NodePool of its provider count"
    } else {
        "its nodes and the claims launching count"
    };
    format!(
        "limit {} reached: {} left once {whose}; {} pending pod(s) need more",
        format_resource(&reached.resource, reached.limit),
        format_resource(&reached.resource, reached.left),
        reached.pods.len()
    )
}

#[cfg(test)]
mod tests;
