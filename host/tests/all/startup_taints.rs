//! Pools with `startupTaints` on the real control plane (kube-scheduler, kwok, `capstan run`).
//!
//! A node that registered but still carries its startup taints (an agent such as a CNI removes
//! them once it is ready) must count as the capacity it will be: the pods waiting for it must not
//! get another claim in every batch. Each scenario runs twice, in a pool with a startup taint and
//! in one without, and the first must launch exactly what the second does, for three minutes,
//! while nobody removes the taint. Then the test plays the agent: it removes the taints, and the
//! claims are Initialized within 2 s and every pod runs.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use capstan::api::NodeClaim;
use k8s_openapi::api::core::v1::Node;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::lifecycle::{Host, Names, cluster, condition, node_class, node_pool};
use crate::provisioner::{claims, namespace, teardown};
use crate::provisioner_e2e::{Pods, pool_json, wait_running};

/// The startup taint an agent removes once the node is ready.
const AGENT_TAINT: &str = "e2e.capstan.dev/agent-not-ready";
/// A label the test's pools put on their nodes, for pods to select.
const GROUP: &str = "e2e.capstan.dev/group";
/// How long the claim counts are watched while the startup taints stay.
const WATCH: Duration = Duration::from_secs(180);

/// One scenario: pods `count` × `cpu` with extra pod spec `extra` (affinity or spread).
struct Scenario {
    name: &'static str,
    count: usize,
    extra: serde_json::Value,
    /// The claims it must get (`None`: whatever the pool without startup taints gets).
    expected_claims: Option<usize>,
}

fn scenarios() -> Vec<Scenario> {
    let zone_term = |app: &str| {
        json!({"topologyKey": "topology.kubernetes.io/zone",
               "labelSelector": {"matchLabels": {"app": app}}})
    };
    vec![
        Scenario {
            name: "plain",
            count: 4,
            extra: json!({}),
            expected_claims: None,
        },
        Scenario {
            name: "anti",
            count: 4,
            extra: json!({"affinity": {"podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [zone_term("APP")]}}}),
            expected_claims: Some(4),
        },
        Scenario {
            name: "spread",
            count: 4,
            extra: json!({"topologySpreadConstraints": [{
                "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "APP"}}}]}),
            expected_claims: Some(4),
        },
    ]
}

/// Claims per pool (by the pool label).
fn per_pool(claims: &[NodeClaim]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for c in claims {
        let pool = c
            .labels()
            .get("karpenter.sh/nodepool")
            .cloned()
            .unwrap_or_default();
        *out.entry(pool).or_default() += 1;
    }
    out
}

async fn remove_agent_taint(client: &Client, node: &Node) {
    let taints: Vec<_> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.key != AGENT_TAINT)
        .collect();
    Api::<Node>::all(client.clone())
        .patch(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": taints}})),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn startup_taints_launch_what_a_pool_without_them_launches() {
    let (cp, client) = cluster().await;
    let names = Names::new("startup");
    let host = Host::start(cp, &names, &["--batch-idle-duration", "500ms"]);
    let class = names.name("nc");
    node_class(
        &client,
        &names,
        &class,
        "kwok",
        json!({"maxCpu": 4, "capacityTypes": ["on-demand"]}),
    )
    .await;
    let ns = namespace(cp, "startup").await;
    // pool name → (scenario, has startup taints)
    let mut pools: BTreeMap<String, (usize, bool)> = BTreeMap::new();
    for (i, scenario) in scenarios().iter().enumerate() {
        for tainted in [true, false] {
            let pool = names.name(&format!(
                "{}-{}",
                scenario.name,
                if tainted { "t" } else { "r" }
            ));
            let mut json = pool_json(
                &names,
                &pool,
                &class,
                json!([{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]),
                json!({GROUP: pool}),
                json!([]),
                None,
            );
            if tainted {
                json["spec"]["template"]["spec"]["startupTaints"] =
                    json!([{"key": AGENT_TAINT, "effect": "NoSchedule"}]);
            }
            node_pool(&client, json).await;
            let mut extra = serde_json::to_string(&scenario.extra).unwrap();
            extra = extra.replace("APP", &pool);
            Pods::new(&client, &names, &ns, &pool)
                .count(scenario.count)
                .cpu("1")
                .node_selector(json!({GROUP: pool}))
                .spec(serde_json::from_str(&extra).unwrap())
                .create()
                .await;
            pools.insert(pool, (i, tainted));
        }
    }
    let scenarios = scenarios();

    // The reference pools run all their pods.
    let reference_pods: usize = pools
        .values()
        .filter(|(_, tainted)| !tainted)
        .map(|(i, _)| scenarios[*i].count)
        .sum();
    let started = Instant::now();
    let api_pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), &ns);
    capstan_test_support::wait_until(
        Duration::from_secs(120),
        "reference pods Running",
        || async {
            host.check_alive();
            let running = api_pods
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count();
            Ok::<_, kube::Error>((running == reference_pods).then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));

    // For three minutes, with nobody removing the startup taints, every tainted pool has exactly
    // the claims its reference pool has (and what the scenario expects).
    let mut samples = 0;
    while started.elapsed() < WATCH {
        host.check_alive();
        let counts = per_pool(&claims(&client, &names).await);
        for (pool, (i, tainted)) in &pools {
            if !tainted {
                continue;
            }
            let reference = pool.trim_end_matches("-t").to_owned() + "-r";
            let have = counts.get(pool).copied().unwrap_or(0);
            let want = counts.get(&reference).copied().unwrap_or(0);
            assert!(
                have <= want,
                "{pool}: {have} claims, its reference pool has {want} (after {:?}, sample {samples})\n{}",
                started.elapsed(),
                host.log_tail()
            );
            if let Some(expected) = scenarios[*i].expected_claims {
                assert_eq!(want, expected, "{reference}: {counts:?}");
                assert!(have <= expected, "{pool}: {counts:?}");
            }
        }
        samples += 1;
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let counts = per_pool(&claims(&client, &names).await);
    for (pool, (_, tainted)) in &pools {
        if *tainted {
            let reference = pool.trim_end_matches("-t").to_owned() + "-r";
            assert_eq!(counts.get(pool), counts.get(&reference), "{counts:?}");
        }
    }
    println!("{samples} samples over {WATCH:?}: claims per pool {counts:?}");

    // The agent removes the taints: each claim is Initialized within 2 s, and every pod runs.
    let all = claims(&client, &names).await;
    let tainted: Vec<&NodeClaim> = all
        .iter()
        .filter(|c| {
            pools
                .get(&c.labels()["karpenter.sh/nodepool"])
                .is_some_and(|p| p.1)
        })
        .collect();
    let nodes = Api::<Node>::all(client.clone());
    let claim_api = Api::<NodeClaim>::all(client.clone());
    let mut slowest = Duration::ZERO;
    for claim in tainted {
        let (status, reason) = condition(claim, "Initialized").unwrap_or_default();
        assert_ne!(
            status,
            "True",
            "{} initialized with its startup taint",
            claim.name_any()
        );
        assert_eq!(reason, "StartupTaintsExist", "{}", claim.name_any());
        let node_name = claim
            .status
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap();
        let node = nodes.get(&node_name).await.unwrap();
        let removed = Instant::now();
        remove_agent_taint(&client, &node).await;
        let took = capstan_test_support::wait_until(
            Duration::from_secs(10),
            "claim Initialized after its startup taint is gone",
            || async {
                let c = claim_api.get(&claim.name_any()).await?;
                Ok::<_, kube::Error>(
                    (condition(&c, "Initialized").is_some_and(|(s, _)| s == "True"))
                        .then(|| removed.elapsed()),
                )
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
        slowest = slowest.max(took);
        assert!(
            took <= Duration::from_secs(2),
            "{} Initialized {took:?} after its taint went",
            claim.name_any()
        );
    }
    let total: usize = pools.values().map(|(i, _)| scenarios[*i].count).sum();
    wait_running(&client, &host, &ns, total, Duration::from_secs(60)).await;
    println!("slowest Initialized after the taint's removal: {slowest:?}");
    let after = per_pool(&claims(&client, &names).await);
    assert_eq!(after, counts, "no claim was added once the taints went");
    teardown(&client, &names, &ns).await;
}
