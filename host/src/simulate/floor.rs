//! The cost floor of a simulation: the least any set of nodes could cost that holds the pods it
//! keeps running on the selector's nodes and the pending pods it places, on the catalogs of the
//! pools it read ([`crate::scheduling::floor`]). The plan's price reads against it.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use serde::Serialize;

use crate::scheduling::convert::{is_terminal, pod_requests};
use crate::scheduling::floor::{Shape, floor};
use crate::scheduling::resources::Resources;
use crate::scheduling::{self, InstanceType, NodePoolView};

/// The cost floor of the simulated cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CostFloor {
    /// $/h no placement of `pods` on the pools' instance types is below.
    pub price_per_hour: f64,
    /// The pods counted: running on the selector's nodes (not DaemonSet pods, which every node
    /// carries) and the pending pods the plan places.
    pub pods: usize,
    /// Pods left out: no instance type of any pool holds them, or their requests do not parse.
    pub left_out_pods: usize,
}

/// The floor of the pods on `nodes` (of `pods`) and of `pending` (the pending pods the plan
/// places; a pod of a leaving node is among them, and counted once), over the instance types of
/// `pools`; `None` when there is no catalog or the solver fails (logged).
pub(super) fn cost_floor(
    nodes: &[&Arc<Node>],
    pods: &[Arc<Pod>],
    pending: &[&scheduling::Pod],
    pools: &[NodePoolView],
) -> Option<CostFloor> {
    let shapes = shapes(pools);
    if shapes.is_empty() {
        return None;
    }
    let on: HashSet<String> = nodes.iter().map(|n| n.name_any()).collect();
    let placed: HashSet<(&str, &str)> = pending
        .iter()
        .map(|p| (p.namespace.as_str(), p.name.as_str()))
        .collect();
    let mut left_out = 0;
    let mut requests: Vec<Resources> = Vec::new();
    for pod in pods {
        let bound = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some_and(|n| on.contains(n));
        let daemon = pod.owner_references().iter().any(|o| o.kind == "DaemonSet");
        let key = (
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default(),
        );
        if !bound || daemon || is_terminal(pod) || placed.contains(&key) {
            continue;
        }
        match pod_requests(pod) {
            Ok(r) => requests.push(r),
            Err(_) => left_out += 1,
        }
    }
    requests.extend(pending.iter().map(|p| p.requests.clone()));
    let fits = |r: &Resources| {
        let mut r = r.clone();
        r.pods = 1;
        shapes.iter().any(|s| r.fits_in(&s.allocatable))
    };
    let before = requests.len();
    requests.retain(fits);
    left_out += before - requests.len();
    match floor(&requests, &shapes) {
        Ok(found) => Some(CostFloor {
            price_per_hour: found.price,
            pods: requests.len(),
            left_out_pods: left_out,
        }),
        Err(err) => {
            tracing::warn!(error = %err, "no cost floor");
            None
        }
    }
}

/// Every instance type of `pools` once, at its cheapest available offering over the pools (a
/// type without one is left out), with what pods may use of it.
fn shapes(pools: &[NodePoolView]) -> Vec<Shape> {
    let mut by_name: BTreeMap<&str, (&InstanceType, f64)> = BTreeMap::new();
    for it in pools.iter().flat_map(|p| p.instance_types.iter()) {
        let Some(price) = it
            .offerings
            .iter()
            .filter(|o| o.available)
            .map(|o| o.price)
            .min_by(f64::total_cmp)
        else {
            continue;
        };
        by_name
            .entry(it.name.as_str())
            .and_modify(|(_, p)| *p = p.min(price))
            .or_insert((it, price));
    }
    by_name
        .into_values()
        .map(|(it, price)| Shape {
            name: it.name.clone(),
            allocatable: it.allocatable(),
            price,
        })
        .collect()
}
