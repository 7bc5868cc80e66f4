use super::*;
use serde_json::json;

fn k8s_pod(value: serde_json::Value) -> core::Pod {
    serde_json::from_value(value).unwrap()
}

#[test]
fn effective_requests_take_init_containers_sidecars_and_overhead() {
    let p = k8s_pod(json!({
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "250m"}}}
            ],
            "initContainers": [
                {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
                {"name": "migrate", "resources": {"requests": {"cpu": "2", "memory": "512Mi"}}}
            ],
            "overhead": {"cpu": "10m"}
        }
    }));
    let r = pod_requests(&p).unwrap();
    // Running: 750m + 100m sidecar; init peak: 2 + 100m sidecar = 2100m; plus 10m overhead.
    assert_eq!(r.cpu_millis, 2110);
    assert_eq!(r.memory, 1 << 30);
}

#[test]
fn pods_convert_with_their_constraints() {
    let p = k8s_pod(json!({
        "metadata": {
            "name": "web", "namespace": "shop", "labels": {"app": "web", "rev": "7"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "u", "controller": true}]
        },
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
            "nodeSelector": {"kubernetes.io/arch": "arm64"},
            "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
            "topologySpreadConstraints": [{
                "maxSkew": 2, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["rev"]
            }],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "example.com/gen", "operator": "Gt", "values": ["3"]}]}
                    ]},
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 5, "preference": {"matchExpressions": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}}
                    ]
                },
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [{
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]},
                        "namespaceSelector": {"matchLabels": {"team": "a"}}
                    }]
                }
            }
        }
    }));
    let namespaces: NamespaceLabels = BTreeMap::from([
        (
            "shop".to_owned(),
            BTreeMap::from([("team".to_owned(), "a".to_owned())]),
        ),
        (
            "other".to_owned(),
            BTreeMap::from([("team".to_owned(), "b".to_owned())]),
        ),
    ]);
    let p = pod(&p, &namespaces).unwrap();
    assert_eq!(p.key(), "shop/web");
    assert_eq!(p.owner_kind.as_deref(), Some("ReplicaSet"));
    assert_eq!(p.requests.cpu_millis, 1000);
    assert_eq!(p.node_selector["kubernetes.io/arch"], "arm64");
    assert_eq!(
        p.tolerations,
        vec![Toleration::exists("dedicated").with_effect(TaintEffect::NoSchedule)]
    );
    let spread = &p.topology_spread[0];
    assert_eq!(spread.when_unsatisfiable, WhenUnsatisfiable::ScheduleAnyway);
    let selector = spread.label_selector.as_ref().unwrap();
    let mut same_rev = p.labels.clone();
    assert!(selector.matches(&same_rev));
    same_rev.insert("rev".to_owned(), "8".to_owned());
    assert!(!selector.matches(&same_rev), "matchLabelKeys pins rev=7");
    let required = &p.required_node_affinity[0];
    assert!(required.get("example.com/gen").unwrap().set().contains("4"));
    assert!(!required.get("example.com/gen").unwrap().set().contains("3"));
    assert_eq!(p.preferred_node_affinity[0].weight, 5);
    assert_eq!(
        p.pod_anti_affinity[0].namespaces,
        Namespaces::Listed(vec!["shop".to_owned()])
    );
}

#[test]
fn bad_quantities_and_operators_are_errors() {
    let p = k8s_pod(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]}
    }));
    let err = pod(&p, &NamespaceLabels::new()).unwrap_err();
    assert!(
        matches!(&err, ConvertError::Quantity { resource, .. } if resource == "cpu"),
        "{err}"
    );
    // The error names the pod, however deep in it the conversion failed.
    assert!(err.to_string().starts_with("pod default/p: "), "{err}");
    let requests = pod_requests(&p).unwrap_err();
    assert!(
        requests.to_string().starts_with("pod default/p: "),
        "{requests}"
    );
    let p = k8s_pod(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [], "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "Gt", "values": ["x"]}]}]
        }}}}
    }));
    let err = pod(&p, &NamespaceLabels::new()).unwrap_err();
    assert!(matches!(err, ConvertError::Requirement { .. }), "{err}");
    assert!(err.to_string().starts_with("pod default/p: "), "{err}");
}

#[test]
fn nodes_count_active_pods_and_drop_startup_taints_until_initialized() {
    let node: core::Node = serde_json::from_value(json!({
        "metadata": {"name": "n1", "labels": {"karpenter.sh/nodepool": "default", "kubernetes.io/hostname": "n1"}},
        "spec": {"taints": [
            {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
            {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
        ]},
        "status": {"allocatable": {"cpu": "3920m", "memory": "14Gi", "pods": "58"}}
    }))
    .unwrap();
    let running = k8s_pod(
        json!({"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}),
    );
    let done = k8s_pod(
        json!({"metadata": {"name": "b"}, "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}, "status": {"phase": "Succeeded"}}),
    );
    let n = self::node(&node, &[&running, &done], &NamespaceLabels::new(), None).unwrap();
    assert!(!n.initialized);
    assert_eq!(n.node_pool.as_deref(), Some("default"));
    assert_eq!(
        n.taints,
        vec![Taint::new("dedicated", "gpu", TaintEffect::NoSchedule)]
    );
    assert_eq!(n.allocatable, Resources::new(3920, 14 << 30, 58));
    assert_eq!(n.used, Resources::new(1000, 0, 1));
    assert_eq!(n.pods.len(), 1);
}

fn claim_with_startup_taint() -> api::NodeClaim {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "c1", "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {
            "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "default"},
            "requirements": [],
            "startupTaints": [{"key": "agent-not-ready", "effect": "NoSchedule"}]
        },
        "status": {"allocatable": {"cpu": "7910m", "memory": "30Gi", "pods": "110"}}
    }))
    .unwrap()
}

/// A node rebooting in place is capacity coming back: its reboot fence and the not-ready taint
/// are left out while its claim says `Rebooting=True`, and are real taints otherwise.
#[test]
fn a_rebooting_node_is_simulated_without_its_fence() {
    let node: core::Node = serde_json::from_value(json!({
        "metadata": {"name": "n1", "labels": {"karpenter.sh/nodepool": "default", "karpenter.sh/initialized": "true"}},
        "spec": {"taints": [
            {"key": "karpenter.sh/rebooting", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
            {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
        ]},
        "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "16"}}
    }))
    .unwrap();
    let mut claim = claim_with_startup_taint();
    let ns = NamespaceLabels::new();
    let fenced = self::node(&node, &[], &ns, Some(&claim)).unwrap();
    assert_eq!(fenced.taints.len(), 3, "{:?}", fenced.taints);
    claim.status.as_mut().unwrap().conditions = vec![
        serde_json::from_value(json!({
            "type": "Rebooting", "status": "True", "reason": "RebootIssued", "message": "",
            "lastTransitionTime": "2026-12-03T07:00:00Z"
        }))
        .unwrap(),
    ];
    let rebooting = self::node(&node, &[], &ns, Some(&claim)).unwrap();
    assert_eq!(
        rebooting.taints,
        vec![Taint::new("dedicated", "gpu", TaintEffect::NoSchedule)]
    );
}

/// A starting node is simulated as it will be: without its claim's startup taints, with the
/// claim's allocatable until the kubelet reports one. Once initialized, a taint of the same key
/// is a real taint again.
#[test]
fn starting_nodes_are_simulated_without_their_claims_startup_taints() {
    let node = |initialized: bool, allocatable: serde_json::Value| -> core::Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {
                "karpenter.sh/nodepool": "default",
                "karpenter.sh/initialized": if initialized { "true" } else { "false" }
            }},
            "spec": {"taints": [
                {"key": "agent-not-ready", "effect": "NoSchedule"},
                {"key": "agent-not-ready", "effect": "NoExecute"},
                {"key": "karpenter.sh/unregistered", "effect": "NoExecute"}
            ]},
            "status": {"allocatable": allocatable}
        }))
        .unwrap()
    };
    let claim = claim_with_startup_taint();
    let ns = NamespaceLabels::new();

    let starting = self::node(&node(false, json!({})), &[], &ns, Some(&claim)).unwrap();
    // Same key, other effect: not the startup taint, still in the way.
    assert_eq!(
        starting.taints,
        vec![Taint::new("agent-not-ready", "", TaintEffect::NoExecute)]
    );
    assert_eq!(starting.allocatable, Resources::new(7910, 30 << 30, 110));

    let without_claim = self::node(&node(false, json!({})), &[], &ns, None).unwrap();
    assert_eq!(without_claim.taints.len(), 2, "{:?}", without_claim.taints);
    assert_eq!(without_claim.allocatable, Resources::default());

    let reported = self::node(&node(false, json!({"cpu": "4"})), &[], &ns, Some(&claim)).unwrap();
    assert_eq!(
        reported.allocatable.cpu_millis, 4000,
        "the kubelet's figure wins"
    );

    let initialized = self::node(&node(true, json!({"cpu": "4"})), &[], &ns, Some(&claim)).unwrap();
    assert_eq!(initialized.taints.len(), 3, "{:?}", initialized.taints);
}

#[test]
fn node_pools_carry_requirements_taints_and_remaining_limits() {
    let pool: api::NodePool = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "weight": 10,
            "limits": {"cpu": "100", "memory": "1000Gi", "nodes": 5},
            "template": {
                "metadata": {"labels": {"team": "a"}},
                "spec": {
                    "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "default"},
                    "requirements": [
                        {"key": "node.kubernetes.io/instance-type", "operator": "Exists", "minValues": 3},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}
                    ],
                    "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
                    "startupTaints": [{"key": "agent", "effect": "NoExecute"}]
                }
            }
        },
        "status": {"resources": {"cpu": "40", "memory": "100Gi"}, "nodes": 2}
    }))
    .unwrap();
    let view = node_pool(&pool, Arc::from(Vec::new())).unwrap();
    assert_eq!(view.weight, 10);
    assert_eq!(view.labels["team"], "a");
    assert_eq!(
        view.requirements
            .get("node.kubernetes.io/instance-type")
            .unwrap()
            .min_values(),
        Some(3)
    );
    assert_eq!(
        view.taints,
        vec![Taint::new("dedicated", "gpu", TaintEffect::NoSchedule)]
    );
    assert_eq!(
        view.startup_taints,
        vec![Taint::new("agent", "", TaintEffect::NoExecute)]
    );
    let remaining = view.remaining.unwrap();
    assert_eq!(remaining.0["cpu"], 60_000);
    assert_eq!(remaining.0["memory"], 900 << 30);
    assert_eq!(remaining.0["nodes"], 3);
}

#[test]
fn nodes_counted_in_status_resources_are_not_subtracted_twice() {
    let pool: api::NodePool = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "limits": {"nodes": 5},
            "template": {"spec": {
                "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "default"},
                "requirements": []
            }}
        },
        "status": {"resources": {"nodes": "2"}, "nodes": 2}
    }))
    .unwrap();
    let view = node_pool(&pool, Arc::from(Vec::new())).unwrap();
    assert_eq!(view.remaining.unwrap().0["nodes"], 3);
}

#[test]
fn inflight_claims_fold_labels_into_requirements() {
    let claim: api::NodeClaim = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "default-abc", "labels": {"karpenter.sh/nodepool": "default", "topology.kubernetes.io/zone": "zone-1"}},
        "spec": {
            "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "default"},
            "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c4", "c8"]}]
        },
        "status": {"allocatable": {"cpu": "3900m", "memory": "7Gi", "pods": "40"}}
    }))
    .unwrap();
    let c = inflight_claim(&claim, &[], &NamespaceLabels::new()).unwrap();
    assert_eq!(c.node_pool.as_deref(), Some("default"));
    assert_eq!(c.allocatable, Resources::new(3900, 7 << 30, 40));
    assert_eq!(
        c.requirements
            .set_of("topology.kubernetes.io/zone")
            .and_then(|s| s.single_value()),
        Some("zone-1")
    );
    assert_eq!(
        c.requirements
            .set_of("node.kubernetes.io/instance-type")
            .map(|s| s.values().len()),
        Some(2)
    );
}
