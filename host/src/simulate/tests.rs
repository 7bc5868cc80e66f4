//! The simulation over small dumped clusters, with a catalog from a fake source: the claims it
//! would launch, the consolidation decision, what is not a candidate and why, the totals, and the
//! table.

use serde_json::json;

use super::dump::Dump;
use super::*;
use crate::scheduling::{Offering, Requirement, Requirements, Resources};

const GIB: i64 = 1 << 30;

fn catalog() -> Vec<InstanceType> {
    [("small", 2, 0.10), ("large", 8, 0.30)]
        .into_iter()
        .map(|(name, cpu, price)| InstanceType {
            name: name.to_owned(),
            requirements: Requirements::new()
                .with(Requirement::in_(INSTANCE_TYPE, [name]))
                .with(Requirement::in_("kubernetes.io/arch", ["amd64"])),
            offerings: vec![Offering::new("zone-a", "on-demand", price)],
            capacity: Resources::new(cpu * 1000, cpu * 4 * GIB, 110),
            overhead: Resources::default(),
            volume_limits: Default::default(),
            devices: Vec::new(),
        })
        .collect()
}

/// The source of the tests: two types, `small` (2 cpu, $0.10/h) and `large` (8 cpu, $0.30/h),
/// on-demand in zone-a, for a pool whose NodeClass is there.
fn fake(
    pool: &NodePool,
    classes: &HashMap<String, Arc<NodeClass>>,
) -> Result<Arc<[InstanceType]>, ProvisionError> {
    let name = &pool.spec.template.spec.node_class_ref.name;
    if !classes.contains_key(name) {
        return Err(ProvisionError::Pool(format!("NodeClass {name} not found")));
    }
    Ok(catalog().into())
}

fn pool(name: &str, class: &str, consolidate_after: &str) -> serde_json::Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
        "spec": {
            "template": {"spec": {
                "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": class},
                "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
            }},
            "disruption": {"consolidateAfter": consolidate_after,
                           "consolidationPolicy": "WhenEmptyOrUnderutilized",
                           "budgets": [{"nodes": "100%"}]},
        },
    })
}

fn class() -> serde_json::Value {
    json!({"apiVersion": "capstan.dev/v1alpha1", "kind": "NodeClass", "metadata": {"name": "c"},
           "spec": {"provider": "fake"}})
}

/// A launched, registered, initialized machine of `pool` on type `small`: its claim and node.
fn machine(name: &str, pool: &str) -> [serde_json::Value; 2] {
    let id = format!("fake://{name}");
    let condition = |type_: &str| {
        json!({"type": type_, "status": "True", "reason": type_, "message": "",
               "lastTransitionTime": "2026-11-26T10:00:00Z"})
    };
    let claim = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": format!("{name}-claim"), "uid": format!("{name}-uid"),
                     "labels": {NODEPOOL: pool},
                     "creationTimestamp": "2026-11-26T09:59:00Z"},
        "spec": {"nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "c"},
                 "requirements": []},
        "status": {"providerID": id, "nodeName": name,
                   "allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"},
                   "conditions": [condition("Launched"), condition("Registered"), condition("Initialized")]},
    });
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            NODEPOOL: pool, "karpenter.sh/initialized": "true", "karpenter.sh/registered": "true",
            INSTANCE_TYPE: "small", ZONE: "zone-a", CAPACITY_TYPE: "on-demand",
            "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": name}},
        "spec": {"providerID": id},
        "status": {"allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"},
                   "capacity": {"cpu": "2", "memory": "8Gi", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    });
    [claim, node]
}

fn pod(name: &str, cpu: &str, node: Option<&str>) -> serde_json::Value {
    let status = match node {
        Some(_) => json!({"phase": "Running"}),
        None => json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}),
    };
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "app", "uid": name,
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                          "name": "rs", "uid": "rs"}]},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i",
                 "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]},
        "status": status,
    })
}

fn view(items: Vec<serde_json::Value>) -> View {
    let mut dump = Dump::new();
    dump.add_text(
        "test.json",
        &json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string(),
    )
    .unwrap();
    dump.view(&Selector::default())
}

fn settings() -> Settings {
    Settings {
        now: "2026-11-26T12:00:00Z".parse().unwrap(),
        ..Settings::default()
    }
}

#[tokio::test]
async fn pending_pods_become_claims_and_a_pool_without_its_class_is_left_out() {
    let items = vec![
        class(),
        pool("default", "c", "Never"),
        pool("orphan", "missing", "Never"),
        pod("a", "1", None),
        pod("b", "1", None),
        pod("c", "1", None),
        pod("huge", "64", None),
    ];
    let report = run(view(items), &fake, &settings()).await;
    let p = &report.provisioning;
    assert_eq!(p.pending_pods, 4);
    assert_eq!(p.node_claims.len(), 1, "{p:#?}");
    let claim = &p.node_claims[0];
    assert_eq!(claim.node_pool, "default");
    assert_eq!(claim.pods, ["app/a", "app/b", "app/c"]);
    // 3 cpu do not fit on small: large is the only option.
    assert_eq!(claim.instance_types, ["large"]);
    assert_eq!(claim.cheapest.instance_type, "large");
    assert_eq!(claim.price_per_hour, 0.30);
    assert_eq!(
        p.unschedulable
            .iter()
            .map(|u| u.pod.as_str())
            .collect::<Vec<_>>(),
        ["app/huge"]
    );
    assert_eq!(p.skipped_node_pools.len(), 1);
    assert_eq!(p.skipped_node_pools[0].node_pool, "orphan");
    assert!(p.skipped_node_pools[0].reason.contains("missing"), "{p:?}");
    assert_eq!(report.totals.now, Total::default());
    assert_eq!(report.totals.after_provisioning.nodes, 1);
    assert_eq!(report.totals.after_provisioning.price_per_hour, 0.30);
    assert_eq!(
        report.totals.after_consolidation,
        report.totals.after_provisioning
    );
    assert!(report.consolidation.decision.is_none());
    // The floor counts the three pods the plan places (not the one nothing holds): 3 CPUs at
    // large's 0.0375 per CPU.
    let floor = report.totals.floor.expect("a cost floor");
    assert_eq!((floor.pods, floor.left_out_pods), (3, 0));
    assert!((floor.price_per_hour - 0.1125).abs() < 1e-9, "{floor:?}");
}

#[tokio::test]
async fn an_empty_node_is_deleted_and_never_pools_are_left_alone() {
    let mut items = vec![
        class(),
        pool("default", "c", "30s"),
        pool("kept", "c", "Never"),
    ];
    items.extend(machine("n1", "default"));
    items.extend(machine("n2", "default"));
    items.extend(machine("n3", "kept"));
    items.push(pod("busy", "1500m", Some("n2")));
    let report = run(view(items.clone()), &fake, &settings()).await;
    let c = &report.consolidation;
    assert_eq!(c.candidates, 2);
    let d = c.decision.as_ref().expect("a decision");
    assert_eq!((d.reason.as_str(), d.action.as_str()), ("Empty", "delete"));
    assert_eq!(d.nodes.len(), 1);
    assert_eq!(d.nodes[0].node, "n1");
    assert_eq!(d.nodes[0].node_claim, "n1-claim");
    assert_eq!(d.price_before, 0.10);
    assert_eq!(d.savings, 0.10);
    assert!(d.replacement.is_none());
    let not: Vec<(&str, &str, &str)> = c
        .not_candidates
        .iter()
        .map(|n| (n.node.as_str(), n.verdict.as_str(), n.reason.as_str()))
        .collect();
    assert_eq!(
        not,
        [(
            "n3",
            "ConsolidateAfterNever",
            "its NodePool's consolidateAfter is Never"
        )]
    );
    assert_eq!(c.verdicts, None, "verdicts only with explain");
    assert_eq!(
        c.allowances["default"],
        PoolAllowance {
            empty: 2,
            underutilized: 2
        }
    );
    let t = &report.totals;
    assert_eq!(
        (
            t.now.nodes,
            t.after_provisioning.nodes,
            t.after_consolidation.nodes
        ),
        (3, 3, 2)
    );
    assert!((t.now.price_per_hour - 0.30).abs() < 1e-9);
    assert!((t.after_consolidation.price_per_hour - 0.20).abs() < 1e-9);

    // Reading the dump's conditions instead: no claim is Consolidatable, nothing goes.
    let as_dumped = Settings {
        assume_consolidatable: false,
        ..settings()
    };
    let report = run(view(items), &fake, &as_dumped).await;
    assert!(report.consolidation.decision.is_none());
    assert_eq!(report.consolidation.candidates, 0);
    assert!(
        report
            .consolidation
            .not_candidates
            .iter()
            .any(|n| n.node == "n1" && n.verdict == "ConsolidateAfter"),
        "{:?}",
        report.consolidation.not_candidates
    );
}

#[tokio::test]
async fn an_underutilized_node_is_deleted_when_its_pods_fit_elsewhere() {
    let mut items = vec![class(), pool("default", "c", "0s")];
    items.extend(machine("n1", "default"));
    items.extend(machine("n2", "default"));
    items.push(pod("x", "500m", Some("n1")));
    items.push(pod("y", "500m", Some("n2")));
    let report = run(view(items), &fake, &settings()).await;
    let d = report.consolidation.decision.expect("a decision");
    assert_eq!(
        (d.reason.as_str(), d.action.as_str()),
        ("Underutilized", "delete")
    );
    assert_eq!(d.nodes.len(), 1);
    assert_eq!(d.nodes[0].pods.len(), 1);
    assert!((d.savings - 0.10).abs() < 1e-9);
    assert_eq!(report.totals.after_consolidation.nodes, 1);
    // The running pods count towards the floor: 1 CPU at large's 0.0375 per CPU.
    let floor = report.totals.floor.expect("a cost floor");
    assert_eq!(floor.pods, 2);
    assert!((floor.price_per_hour - 0.0375).abs() < 1e-9, "{floor:?}");
}

#[tokio::test]
async fn a_node_held_by_do_not_disrupt_says_why() {
    let mut items = vec![class(), pool("default", "c", "0s")];
    let [claim, mut node] = machine("n1", "default");
    node["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"});
    items.extend([claim, node]);
    let report = run(view(items), &fake, &settings()).await;
    assert!(report.consolidation.decision.is_none());
    let notes = &report.consolidation.not_candidates;
    assert_eq!(notes.len(), 1);
    assert!(notes[0].reason.contains("do-not-disrupt"), "{notes:?}");
    assert_eq!(notes[0].verdict, "DoNotDisruptNode");
}

/// `--explain`: every managed node's verdict as the host would write it after the pass — the
/// decision's nodes wait for validation, the others say what keeps them.
#[tokio::test]
async fn explain_gives_every_node_the_hosts_verdict() {
    let mut items = vec![class(), pool("default", "c", "0s")];
    items.extend(machine("n1", "default"));
    let [claim, mut node] = machine("n2", "default");
    node["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"});
    items.extend([claim, node]);
    let explain = Settings {
        explain: true,
        ..settings()
    };
    let report = run(view(items), &fake, &explain).await;
    let verdicts: Vec<(String, String)> = report
        .consolidation
        .verdicts
        .expect("verdicts with explain")
        .into_iter()
        .map(|n| (n.node, n.verdict))
        .collect();
    assert_eq!(
        verdicts,
        [
            ("n1".to_owned(), "PendingValidation".to_owned()),
            ("n2".to_owned(), "DoNotDisruptNode".to_owned())
        ]
    );
}

/// Consolidation runs once the provisioner's claims exist: the pending pods are on the planned
/// claim (in flight, sized for them), so a replacement carries only the moving pods.
#[tokio::test]
async fn consolidation_sees_the_planned_claims_in_flight() {
    let mut items = vec![class(), pool("default", "c", "0s")];
    let [claim, mut node] = machine("n1", "default");
    node["metadata"]["labels"][INSTANCE_TYPE] = json!("large");
    items.extend([claim, node]);
    items.push(pod("x", "500m", Some("n1")));
    for p in ["a", "b", "c"] {
        items.push(pod(p, "2", None));
    }
    let report = run(view(items), &fake, &settings()).await;
    assert_eq!(report.provisioning.node_claims.len(), 1);
    assert_eq!(report.provisioning.node_claims[0].pods.len(), 3);
    let d = report.consolidation.decision.expect("a decision");
    assert_eq!(
        (d.reason.as_str(), d.action.as_str()),
        ("Underutilized", "replace")
    );
    assert_eq!(d.nodes[0].node, "n1");
    let replacement = d.replacement.expect("a replacement");
    assert_eq!(replacement.pods, ["app/x"]);
    assert_eq!(replacement.cheapest.instance_type, "small");
    let t = &report.totals;
    assert_eq!(
        (
            t.now.nodes,
            t.after_provisioning.nodes,
            t.after_consolidation.nodes
        ),
        (1, 2, 2)
    );
    assert!(
        (t.after_consolidation.price_per_hour - 0.40).abs() < 1e-9,
        "{t:?}"
    );
}

#[test]
fn planned_claims_join_the_view_as_the_provisioner_would_create_them() {
    let v = view(vec![
        class(),
        pool("default", "c", "Never"),
        pod("a", "1", None),
    ]);
    let snapshot = Snapshot::from_view(&v, &Selector::default());
    let new = NewClaim {
        node_pool: "default".into(),
        requirements: Requirements::new().with(Requirement::in_(INSTANCE_TYPE, ["small"])),
        requests: Resources::new(1000, GIB, 1),
        instance_type_options: vec!["small".into()],
        cheapest_price: 0.1,
        cheapest_offering: scheduling::ChosenOffering {
            instance_type: "small".into(),
            zone: "zone-a".into(),
            capacity_type: "on-demand".into(),
            price: 0.1,
        },
        pods: vec![0],
    };
    let selector = Selector::parse("run=x").unwrap();
    let after = with_planned_claims(&v, &snapshot, &[new], &selector);
    assert_eq!(after.claims.len(), 1);
    let claim = &after.claims[0];
    assert_eq!(claim.name_any(), "default-planned-1");
    assert_eq!(
        claim.labels().get(NODEPOOL).map(String::as_str),
        Some("default")
    );
    assert_eq!(claim.labels().get("run").map(String::as_str), Some("x"));
    assert_eq!(
        claim
            .annotations()
            .get(PRICE_ANNOTATION)
            .map(String::as_str),
        Some("0.1")
    );
    assert!(provider_id(claim).is_none());
}

#[test]
fn assume_consolidatable_follows_consolidate_after() {
    let mut items = vec![
        class(),
        pool("default", "c", "30s"),
        pool("kept", "c", "Never"),
    ];
    items.extend(machine("n1", "default"));
    items.extend(machine("n2", "kept"));
    let mut v = view(items);
    // A dumped Consolidatable on a Never pool is dropped, as the host's pass would.
    let kept = Arc::make_mut(&mut v.claims[1]);
    set_condition(
        kept,
        CONSOLIDATABLE,
        ConditionStatus::True,
        "Consolidatable",
        "",
        &Time(Timestamp::now()),
    );
    assert_eq!(assume_consolidatable(&mut v, Timestamp::now()), 1);
    let consolidatable: Vec<bool> = v
        .claims
        .iter()
        .map(|c| is_true(c, CONSOLIDATABLE))
        .collect();
    assert_eq!(consolidatable, [true, false]);
}

#[tokio::test]
async fn the_table_shows_the_claims_the_decision_and_the_totals() {
    let mut items = vec![class(), pool("default", "c", "30s")];
    items.extend(machine("n1", "default"));
    items.push(pod("a", "4", None));
    let mut report = run(view(items), &fake, &settings()).await;
    report.input.providers.push(ProviderInfo {
        name: "fake".into(),
        file: "fake.wasm".into(),
        sha256: "00".into(),
    });
    let text = table::render(&report);
    for line in [
        "Provider fake: fake.wasm (sha256 00)",
        "Provisioning: 1 pending pod(s) -> 1 new NodeClaim(s), 0 on existing capacity, 0 unschedulable",
        "  NODEPOOL  PODS  $/H     CHEAPEST OFFERING       INSTANCE TYPES",
        "  default   1     0.3000  large zone-a on-demand  large",
        "Consolidation: 1 candidate(s)",
        "  decision: Empty delete 1 node(s), $0.1000/h -> $0.0000/h (saves $0.1000/h)",
        "    n1    n1-claim   default   small  zone-a  on-demand  0.1000  0",
        "  now                  1      0.1000",
        "  after provisioning   2      0.4000",
        "  after consolidation  1      0.3000",
        // A 4-CPU pod fits only large: half of one at least.
        "  cost floor (1 pods)  -      0.1500 (plan +100.0%)",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "no line {line:?} in\n{text}"
        );
    }
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["schema"], SCHEMA);
    assert_eq!(
        json["provisioning"]["nodeClaims"][0]["cheapest"]["instanceType"],
        "large"
    );
    assert_eq!(json["consolidation"]["decision"]["nodes"][0]["node"], "n1");
    assert_eq!(json["totals"]["now"]["pricePerHour"], 0.10);
}

/// With `capstan.dev/wait-for-jobs` on the pool, a node running a Job's pod is held: the
/// decision takes the other node instead, and the held node's verdict names the Job.
#[tokio::test]
async fn a_pool_that_waits_for_jobs_keeps_the_node_of_a_running_job() {
    let items = |wait: bool| {
        let mut pool = pool("default", "c", "0s");
        if wait {
            pool["metadata"]["annotations"] = json!({"capstan.dev/wait-for-jobs": "true"});
        }
        let mut items = vec![class(), pool];
        items.extend(machine("n1", "default"));
        items.extend(machine("n2", "default"));
        let mut job_pod = pod("batch-x", "500m", Some("n1"));
        job_pod["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "batch/v1", "kind": "Job", "name": "batch", "uid": "j"}]);
        items.push(job_pod);
        items.push(pod("web", "500m", Some("n2")));
        items
    };
    let explain = Settings {
        explain: true,
        ..settings()
    };
    let taken = |report: &Report| -> Vec<String> {
        let d = report.consolidation.decision.as_ref().expect("a decision");
        d.nodes.iter().map(|n| n.node.clone()).collect()
    };
    // Without the annotation the Job's node is as good to take as any (it comes first by name).
    let report = run(view(items(false)), &fake, &explain).await;
    assert_eq!(taken(&report), ["n1"]);
    let report = run(view(items(true)), &fake, &explain).await;
    assert_eq!(taken(&report), ["n2"]);
    let verdicts = report.consolidation.verdicts.expect("verdicts");
    let n1 = verdicts.iter().find(|n| n.node == "n1").expect("n1");
    assert_eq!(n1.verdict, "JobRunning");
    assert!(n1.reason.contains("Job app/batch"), "{}", n1.reason);
}

/// The source with a third type, `gpu` (8 cpu, 2 GPUs of `gpu.example.com`, $1/h).
fn fake_with_gpus(
    pool: &NodePool,
    classes: &HashMap<String, Arc<NodeClass>>,
) -> Result<Arc<[InstanceType]>, ProvisionError> {
    let mut types: Vec<InstanceType> = fake(pool, classes)?.to_vec();
    let mut gpu = types[1].clone();
    gpu.name = "gpu".to_owned();
    gpu.requirements = Requirements::new()
        .with(Requirement::in_(INSTANCE_TYPE, ["gpu"]))
        .with(Requirement::in_("kubernetes.io/arch", ["amd64"]));
    gpu.offerings = vec![Offering::new("zone-a", "on-demand", 1.0)];
    gpu.devices = vec![Arc::new(capstan_dra::ResourceSliceTemplate {
        driver: "gpu.example.com".to_owned(),
        pool: "gpus".to_owned(),
        devices: (0..2)
            .map(|i| capstan_dra::Device {
                name: format!("gpu-{i}"),
                attributes: BTreeMap::new(),
                capacity: BTreeMap::new(),
                allow_multiple_allocations: false,
                consumes_counters: Vec::new(),
            })
            .collect(),
        shared_counters: Vec::new(),
    })];
    types.push(gpu);
    Ok(types.into())
}

#[tokio::test]
async fn a_dump_with_dra_objects_places_pods_asking_for_gpus_on_types_carrying_them() {
    let mut trainer = pod("trainer", "1", None);
    trainer["spec"]["resourceClaims"] =
        json!([{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]);
    let dra = vec![
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
               "metadata": {"name": "gpu"},
               "spec": {"selectors": [{"cel": {"expression": "device.driver == \"gpu.example.com\""}}]}}),
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
               "metadata": {"name": "two-gpus", "namespace": "app"},
               "spec": {"spec": {"devices": {"requests": [
                   {"name": "gpus", "exactly": {"deviceClassName": "gpu", "count": 2}}]}}}}),
    ];
    let base = vec![class(), pool("default", "c", "Never"), trainer];
    let mut items = base.clone();
    items.extend(dra);
    let report = run(view(items), &fake_with_gpus, &settings()).await;
    let p = &report.provisioning;
    assert_eq!(p.node_claims.len(), 1, "{p:#?}");
    assert_eq!(p.node_claims[0].pods, ["app/trainer"]);
    // Cheaper types have the cpu but not the GPUs.
    assert_eq!(p.node_claims[0].instance_types, ["gpu"], "{p:#?}");

    // Without DRA's objects in the dump the pod is left out, as with --ignore-dra-requests.
    let report = run(view(base), &fake_with_gpus, &settings()).await;
    assert!(
        report
            .provisioning
            .node_claims
            .iter()
            .all(|c| !c.pods.iter().any(|p| p == "app/trainer")),
        "{:#?}",
        report.provisioning
    );
}
