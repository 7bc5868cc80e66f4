//! `capstan simulate` on dumps of the real control plane (made with its `kubectl`), checked
//! against what `capstan run` then does on the same cluster: the NodeClaims it creates for
//! pending pods, and the node consolidation removes.
//!
//! As elsewhere, the test's pods carry its run label and select its pool, and both the host and
//! the simulation run with the test's `--selector`, so concurrent tests do not interfere.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use capstan::api::labels::PRICE_ANNOTATION;
use capstan::api::{NodeClaim, NodePool};
use capstan_test_support::{ControlPlane, wait_until};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::fixtures::providers_dir;
use crate::lifecycle::{Host, Names, cluster, condition, node_class, node_pool, node_pool_json};
use crate::provisioner::{claims, namespace, teardown};
use crate::provisioner_e2e::{Pods, wait_running};

const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";

/// A claim as compared: pool, $/h, instance types and pod names, sorted.
type Planned = (String, String, Vec<String>, Vec<String>);

/// Dumps the cluster as the docs say: the List of workload kinds as JSON, and the NodeClasses and
/// namespaces as YAML in a second file. Returns the files.
fn dump(cp: &ControlPlane, names: &Names, tag: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("simulate");
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = Vec::new();
    for (i, (kinds, format, ext)) in [
        (
            "nodes,pods,nodepools,nodeclaims,daemonsets,pdb",
            "json",
            "json",
        ),
        ("nodeclasses,namespaces", "yaml", "yaml"),
    ]
    .into_iter()
    .enumerate()
    {
        let out = cp
            .kubectl()
            .args(["get", kinds, "-A", "-o", format])
            .output()
            .expect("run kubectl");
        assert!(
            out.status.success(),
            "kubectl get {kinds}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = dir.join(format!("{}-{tag}-{i}.{ext}", names.run));
        std::fs::write(&path, &out.stdout).unwrap();
        files.push(path);
    }
    files
}

/// Runs `capstan simulate` with kwok on `files` (JSON output); also checks the table renders.
fn simulate(names: &Names, files: &[PathBuf], extra: &[&str]) -> serde_json::Value {
    let run = |output: &str| {
        let started = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
            .arg("simulate")
            .arg("--provider")
            .arg(format!(
                "kwok={}",
                providers_dir().join("kwok.wasm").display()
            ))
            .arg("--selector")
            .arg(names.selector())
            .arg("--cache-dir")
            .arg(Path::new(env!("CARGO_TARGET_TMPDIR")).join("components"))
            .args(["--output", output])
            .args(extra)
            .args(files)
            .output()
            .expect("run capstan simulate");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "capstan simulate failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        println!("capstan simulate -o {output} took {:?}", started.elapsed());
        stdout
    };
    let table = run("table");
    println!("{table}");
    assert!(table.contains("Provisioning: "), "{table}");
    assert!(table.contains("after consolidation"), "{table}");
    serde_json::from_str(&run("json")).unwrap()
}

/// One test's cluster: a kwok NodeClass with types of at most `max_cpu` vCPUs, a pool on it
/// (`consolidateAfter: Never`) and a namespace.
struct Scene {
    cp: &'static ControlPlane,
    client: kube::Client,
    names: Names,
    pool: String,
    ns: String,
}

async fn scene(prefix: &str, max_cpu: i64) -> Scene {
    let (cp, client) = cluster().await;
    let names = Names::new(prefix);
    let (class, pool) = (names.name("nc"), names.name("pool"));
    node_class(&client, &names, &class, "kwok", json!({"maxCpu": max_cpu})).await;
    node_pool(&client, node_pool_json(&names, &pool, &class)).await;
    let ns = namespace(cp, prefix).await;
    Scene {
        cp,
        client,
        names,
        pool,
        ns,
    }
}

/// The nodes of the report's consolidation decision.
fn decision_nodes(report: &serde_json::Value) -> Vec<String> {
    report["consolidation"]["decision"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["node"].as_str().unwrap().to_owned())
        .collect()
}

fn price(value: &serde_json::Value) -> String {
    format!("{}", value.as_f64().unwrap())
}

/// The claim's instance types (its `In` requirement), sorted.
fn instance_types(claim: &NodeClaim) -> Vec<String> {
    let mut types: Vec<String> = claim
        .spec
        .requirements
        .iter()
        .find(|r| r.key == INSTANCE_TYPE)
        .map(|r| r.values.clone())
        .unwrap_or_default();
    types.sort();
    types
}

/// The documented example (docs/simulate.md), through the binary with a bare `--provider FILE`:
/// no cluster needed, the decision the docs show, and a bad dump named in the error.
#[test]
fn simulate_the_documented_example_without_a_cluster() {
    let examples = capstan_test_support::repo_root().join("docs/examples/simulate");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_capstan"))
            .arg("simulate")
            .arg("--provider")
            .arg(providers_dir().join("kwok.wasm"))
            .arg("--cache-dir")
            .arg(Path::new(env!("CARGO_TARGET_TMPDIR")).join("components"))
            .args(["--now", "2026-11-26T12:00:00Z"])
            .args(args)
            .current_dir(&examples)
            .output()
            .expect("run capstan simulate")
    };
    let example = [
        "cluster.json",
        "classes.yaml",
        "--node-class",
        "default=ec2-default.yaml",
    ];
    let out = run(&[&example[..], &["-o", "json"]].concat());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let claims = report["provisioning"]["nodeClaims"].as_array().unwrap();
    assert_eq!(claims.len(), 1, "{report:#}");
    assert_eq!(claims[0]["nodePool"], "batch");
    assert_eq!(claims[0]["cheapest"]["instanceType"], "m-16x-amd64-linux");
    assert_eq!(claims[0]["pods"].as_array().unwrap().len(), 6);
    assert_eq!(
        report["input"]["standIns"][0]["nodeClass"],
        "stand-in-default"
    );
    let decision = &report["consolidation"]["decision"];
    assert_eq!(decision["reason"], "Underutilized", "{report:#}");
    assert_eq!(decision["action"], "delete");
    let nodes = decision_nodes(&report);
    assert_eq!(nodes, ["general-q9d4m", "general-w2b8n"]);
    assert_eq!(report["totals"]["afterConsolidation"]["nodes"], 2);

    // A NodeOverlay in the dump prices the claim, with the gate on only; one of the same weight
    // on the same offering is left out (the name earlier in the alphabet).
    let overlays = Path::new(env!("CARGO_TARGET_TMPDIR")).join("simulate-overlays.yaml");
    let overlay = |name: &str, price: &str| {
        json!({"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
               "metadata": {"name": name},
               "spec": {"requirements": [
                   {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["batch"]},
                   {"key": "node.kubernetes.io/instance-type", "operator": "In",
                    "values": ["m-16x-amd64-linux"]}],
                "price": price}})
    };
    std::fs::write(
        &overlays,
        json!({"apiVersion": "v1", "kind": "List",
               "items": [overlay("b-cheap", "0.001"), overlay("a-rival", "0.002")]})
        .to_string(),
    )
    .unwrap();
    let with_overlays = [&example[..], &[overlays.to_str().unwrap(), "-o", "json"]].concat();
    for (gate, price) in [
        ("NodeOverlay=false", None),
        ("NodeOverlay=true", Some(0.001)),
    ] {
        let out = run(&[&with_overlays[..], &["--feature-gates", gate]].concat());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let overlaid: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let claim = &overlaid["provisioning"]["nodeClaims"][0];
        assert_eq!(claim["cheapest"]["instanceType"], "m-16x-amd64-linux");
        let want = price.unwrap_or_else(|| claims[0]["pricePerHour"].as_f64().unwrap());
        assert_eq!(
            claim["pricePerHour"].as_f64(),
            Some(want),
            "{gate}: {claim:#}"
        );
        if price.is_some() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("a-rival") && stderr.contains("conflicts with NodeOverlay b-cheap"),
                "{stderr}"
            );
        }
    }

    // The table, as docs/simulate.md shows it.
    let out = run(&example);
    let table = String::from_utf8_lossy(&out.stdout);
    let docs = std::fs::read_to_string(capstan_test_support::repo_root().join("docs/simulate.md"))
        .unwrap();
    for line in table
        .lines()
        .filter(|l| !l.starts_with("Provider kwok:") && !l.trim().is_empty())
    {
        assert!(
            docs.lines().any(|d| d == line),
            "docs/simulate.md lacks the line {line:?} of:\n{table}"
        );
    }

    // Without the stand-in, the Karpenter pool is left out, with why.
    let out = run(&["cluster.json", "classes.yaml", "-o", "json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let skipped = &report["provisioning"]["skippedNodePools"][0];
    assert_eq!(skipped["nodePool"], "batch", "{report:#}");
    assert!(
        skipped["reason"]
            .as_str()
            .unwrap()
            .contains("karpenter.k8s.aws/EC2NodeClass default is neither a capstan.dev NodeClass nor a kind a loaded provider serves"),
        "{report:#}"
    );

    // A dump that does not parse: the file and the object are named.
    let bad = Path::new(env!("CARGO_TARGET_TMPDIR")).join("simulate-bad.json");
    std::fs::write(
        &bad,
        json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}},
            {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "broken"},
             "spec": {"template": {"spec": {"requirements": []}}}},
        ]})
        .to_string(),
    )
    .unwrap();
    let out = run(&[bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "{}: items[1] (NodePool broken): missing field `nodeClassRef`",
            bad.display()
        )),
        "{stderr}"
    );
}

/// Pending pods of two sizes, simulated with the host stopped; the host then creates the same
/// NodeClaims: as many, of the same pool, with the same instance types and price.
#[tokio::test]
async fn simulate_predicts_the_claims_the_host_creates() {
    let Scene {
        cp,
        client,
        names,
        pool,
        ns,
    } = scene("simprov", 8).await;
    let selector = json!({"karpenter.sh/nodepool": pool});
    Pods::new(&client, &names, &ns, "small")
        .count(5)
        .cpu("1")
        .memory("512Mi")
        .node_selector(selector.clone())
        .create()
        .await;
    Pods::new(&client, &names, &ns, "big")
        .count(3)
        .cpu("3")
        .memory("2Gi")
        .node_selector(selector)
        .create()
        .await;
    // kube-scheduler marks them unschedulable: no node of the pool exists.
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    wait_until(Duration::from_secs(60), "8 pods unschedulable", || async {
        let list = pods.list(&ListParams::default()).await?;
        let n = list
            .items
            .iter()
            .filter(|p| capstan::rules::pods::is_provisionable(p))
            .count();
        Ok::<_, kube::Error>((n == 8).then_some(()))
    })
    .await
    .unwrap();

    let files = dump(cp, &names, "prov");
    let report = simulate(&names, &files, &[]);
    assert_eq!(report["schema"], "capstan.dev/simulate/v1");
    assert_eq!(report["provisioning"]["pendingPods"], 8, "{report:#}");
    let planned = report["provisioning"]["nodeClaims"].as_array().unwrap();
    assert!(!planned.is_empty(), "{report:#}");
    let pods_planned: u64 = planned
        .iter()
        .map(|c| c["pods"].as_array().unwrap().len() as u64)
        .sum();
    assert_eq!(pods_planned, 8, "{report:#}");
    // (pool, $/h, instance types, pods) of each claim, sorted.
    let mut predicted: Vec<Planned> = planned
        .iter()
        .map(|c| {
            let strings = |v: &serde_json::Value, strip: bool| {
                let mut out: Vec<String> = v
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| {
                        let t = t.as_str().unwrap();
                        let t = if strip {
                            t.rsplit('/').next().unwrap()
                        } else {
                            t
                        };
                        t.to_owned()
                    })
                    .collect();
                out.sort();
                out
            };
            (
                c["nodePool"].as_str().unwrap().to_owned(),
                price(&c["pricePerHour"]),
                strings(&c["instanceTypes"], false),
                strings(&c["pods"], true),
            )
        })
        .collect();
    predicted.sort();
    // Nothing was written: no claim exists yet.
    assert!(claims(&client, &names).await.is_empty());

    // The host's first batch: the claims its pods were first nominated to. (kube-scheduler then
    // binds the pods its own way, which may leave a pod for a later batch: that is not "now".)
    let host = Host::start(cp, &names, &["--batch-idle-duration", "1s"]);
    let first_nominations = wait_until(
        Duration::from_secs(120),
        "every pod nominated to a claim",
        || async {
            host.check_alive();
            let mut first: BTreeMap<String, (Option<Timestamp>, String)> = BTreeMap::new();
            for e in Api::<Event>::namespaced(client.clone(), &ns)
                .list(&ListParams::default())
                .await?
                .items
            {
                let (Some(pod), Some(claim)) = (
                    e.regarding.as_ref().and_then(|r| r.name.clone()),
                    e.note
                        .as_deref()
                        .and_then(|n| n.strip_prefix("Pod should schedule on: nodeclaim/")),
                ) else {
                    continue;
                };
                let at = e
                    .event_time
                    .map(|t| t.0)
                    .or(e.metadata.creation_timestamp.map(|t| t.0));
                let entry = first.entry(pod).or_insert((at, claim.to_owned()));
                if at < entry.0 {
                    *entry = (at, claim.to_owned());
                }
            }
            Ok::<_, kube::Error>((first.len() == 8).then_some(first))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    let mut pods_of: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (pod, (_, claim)) in first_nominations {
        pods_of.entry(claim).or_default().push(pod);
    }
    let all = claims(&client, &names).await;
    let mut created: Vec<Planned> = pods_of
        .into_iter()
        .map(|(name, pods)| {
            let c = all
                .iter()
                .find(|c| c.name_any() == name)
                .unwrap_or_else(|| panic!("no claim {name}"));
            (
                c.labels()
                    .get("karpenter.sh/nodepool")
                    .cloned()
                    .unwrap_or_default(),
                c.annotations()
                    .get(PRICE_ANNOTATION)
                    .cloned()
                    .unwrap_or_default(),
                instance_types(c),
                pods,
            )
        })
        .collect();
    created.sort();
    assert_eq!(
        created,
        predicted,
        "the host created other claims than simulate predicted\n{}",
        host.log_tail()
    );
    let running = wait_running(&client, &host, &ns, 8, Duration::from_secs(180)).await;
    println!(
        "{} pods running on {} claims (simulate predicted {} for the first batch)",
        running.len(),
        claims(&client, &names).await.len(),
        predicted.len()
    );
    // And the simulation now sees nothing to provision.
    let report = simulate(&names, &dump(cp, &names, "after"), &[]);
    assert_eq!(report["provisioning"]["pendingPods"], 0, "{report:#}");
    assert_eq!(
        report["totals"]["now"]["nodes"].as_u64().unwrap() as usize,
        claims(&client, &names).await.len(),
        "{report:#}"
    );
    host.kill();
    teardown(&client, &names, &ns).await;
}

/// Two nodes the host marked Consolidatable, one left empty while the host is stopped: simulate
/// decides to delete that one (Empty, before any underutilized move), and the host, started
/// again, deletes that node and keeps the other.
#[tokio::test]
async fn simulate_predicts_the_node_consolidation_removes() {
    // 2-cpu types at most: each 1500m pod needs a node of its own.
    let Scene {
        cp,
        client,
        names,
        pool,
        ns,
    } = scene("simcons", 2).await;
    let disruption = |policy: &str| {
        json!({"spec": {"disruption": {
            "consolidateAfter": "10s", "consolidationPolicy": policy,
            "budgets": [{"nodes": "100%"}]}}})
    };
    let pools = Api::<NodePool>::all(client.clone());
    let patch = PatchParams::default();
    // While the pods come up, only an empty node could go (none is, once they run); the host marks
    // both claims Consolidatable 10 s after their last pod event.
    pools
        .patch(&pool, &patch, &Patch::Merge(disruption("WhenEmpty")))
        .await
        .unwrap();
    let host = Host::start(cp, &names, &["--batch-idle-duration", "500ms"]);
    for group in ["keep", "leave"] {
        Pods::new(&client, &names, &ns, group)
            .cpu("1500m")
            .node_selector(json!({"karpenter.sh/nodepool": pool}))
            .create()
            .await;
    }
    let running = wait_running(&client, &host, &ns, 2, Duration::from_secs(180)).await;
    let node_of: BTreeMap<String, String> = running
        .iter()
        .map(|p| {
            (
                p.name_any(),
                p.spec.as_ref().unwrap().node_name.clone().unwrap(),
            )
        })
        .collect();
    let (kept, emptied) = (node_of["keep-0"].clone(), node_of["leave-0"].clone());
    assert_ne!(kept, emptied);
    wait_until(
        Duration::from_secs(90),
        "both claims Consolidatable",
        || async {
            host.check_alive();
            let all = claims(&client, &names).await;
            let marked = all
                .iter()
                .filter(|c| condition(c, "Consolidatable").is_some_and(|(s, _)| s == "True"))
                .count();
            Ok::<_, kube::Error>((marked == 2).then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    host.kill();

    // With the host stopped: the pool may consolidate underutilized nodes too, and one node loses
    // its pod.
    pools
        .patch(
            &pool,
            &patch,
            &Patch::Merge(disruption("WhenEmptyOrUnderutilized")),
        )
        .await
        .unwrap();
    Api::<Pod>::namespaced(client.clone(), &ns)
        .delete("leave-0", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    wait_until(Duration::from_secs(60), "the pod gone", || async {
        let gone = Api::<Pod>::namespaced(client.clone(), &ns)
            .get_opt("leave-0")
            .await?
            .is_none();
        Ok::<_, kube::Error>(gone.then_some(()))
    })
    .await
    .unwrap();

    let files = dump(cp, &names, "cons");
    // The dumped conditions (the host marked both claims) and the assumed ones agree here.
    let from_dump = simulate(&names, &files, &["--consolidatable-from-dump"]);
    assert_eq!(
        decision_nodes(&from_dump),
        std::slice::from_ref(&emptied),
        "{from_dump:#}"
    );
    let report = simulate(&names, &files, &[]);
    let decision = &report["consolidation"]["decision"];
    assert_eq!(decision["reason"], "Empty", "{report:#}");
    assert_eq!(decision["action"], "delete", "{report:#}");
    let nodes = decision_nodes(&report);
    assert_eq!(nodes, std::slice::from_ref(&emptied), "{report:#}");
    let all = claims(&client, &names).await;
    let claim_of = |node: &str| {
        all.iter()
            .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
            .unwrap()
            .clone()
    };
    let emptied_claim = claim_of(&emptied);
    assert_eq!(
        decision["nodes"][0]["nodeClaim"].as_str(),
        Some(emptied_claim.name_any().as_str())
    );
    assert_eq!(
        price(&decision["priceBefore"]),
        emptied_claim.annotations()[PRICE_ANNOTATION],
        "{report:#}"
    );
    assert_eq!(report["totals"]["now"]["nodes"], 2, "{report:#}");
    assert_eq!(
        report["totals"]["afterConsolidation"]["nodes"], 1,
        "{report:#}"
    );
    // Nothing was written: both claims are still there.
    assert_eq!(claims(&client, &names).await.len(), 2);

    let host = Host::start(cp, &names, &["--consolidation-validation-delay", "1s"]);
    let kept_claim = claim_of(&kept).name_any();
    wait_until(
        Duration::from_secs(120),
        "the emptied node's claim gone",
        || async {
            host.check_alive();
            let left: Vec<String> = claims(&client, &names)
                .await
                .iter()
                .filter(|c| c.metadata.deletion_timestamp.is_none())
                .map(|c| c.name_any())
                .collect();
            Ok::<_, kube::Error>((!left.contains(&emptied_claim.name_any())).then_some(left))
        },
    )
    .await
    .map(|left| assert_eq!(left, [kept_claim], "{}", host.log_tail()))
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    // The pod that stayed still runs on its node.
    wait_running(&client, &host, &ns, 1, Duration::from_secs(30)).await;
    host.kill();
    teardown(&client, &names, &ns).await;
}
