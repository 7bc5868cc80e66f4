//! What the end-to-end benchmarks share (`make bench-e2e`, `make bench-scale`): the two systems
//! and how each starts on a control plane of its own, Karpenter's kwok catalog and its prices, a
//! process's CPU and memory from `/proc`, watches of pods and nodes, and the side-by-side table.

use k8s_openapi::api::apps::v1::Deployment;
use serde_json::{Value, json};

use crate::lifecycle::RUN_LABEL;
use controller::POOL;

pub mod catalog;
pub mod controller;
pub mod evaluations;
pub mod table;
pub mod usage;
pub mod watch;

/// Client rate limits for kube-controller-manager and kube-scheduler: with their defaults (20
/// and 50 QPS) the ReplicaSet controller creates about 18 pods a second here and the harness,
/// not the autoprovisioner, would be the floor.
pub const CONTROL_PLANE_ARGS: [&str; 4] = ["--kube-api-qps", "500", "--kube-api-burst", "1000"];

/// `key` from the environment, or `default` when unset or unparsable.
pub fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The systems named in `var` (comma-separated `capstan`, `karpenter`), by default both.
pub fn systems(var: &str) -> Vec<controller::System> {
    std::env::var(var)
        .unwrap_or_else(|_| "capstan,karpenter".into())
        .split(',')
        .filter_map(|s| match s.trim() {
            "capstan" => Some(controller::System::Capstan),
            "karpenter" => Some(controller::System::Karpenter),
            "" => None,
            other => panic!("{var}: unknown system {other:?}"),
        })
        .collect()
}

/// A Deployment of `replicas` pods requesting `cpu` and `memory`, labelled with the run.
pub fn deployment(run: &str, name: &str, replicas: usize, cpu: &str, memory: &str) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {RUN_LABEL: run}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, RUN_LABEL: run}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "app", "image": "fake",
                                    "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
                },
            },
        },
    }))
    .unwrap()
}

/// The NodePool both systems get; only the node class reference (and Capstan's selector label)
/// differ.
pub fn node_pool(node_class_ref: Value, labels: Value) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": POOL, "labels": labels},
        "spec": {
            "template": {"spec": {
                "nodeClassRef": node_class_ref,
                "requirements": [
                    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In",
                     "values": ["on-demand", "spot"]},
                ],
            }},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized",
                           "consolidateAfter": "0s"},
        },
    })
}

/// Sets each of the Deployments `names` to `replicas`.
pub async fn scale_deployments(
    deployments: &kube::Api<Deployment>,
    names: impl IntoIterator<Item = &str>,
    replicas: usize,
) -> anyhow::Result<()> {
    for name in names {
        deployments
            .patch(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await?;
    }
    Ok(())
}
