//! Proof tests for the control-plane harness: a real API server, controller manager, scheduler
//! and kwok, driven through kube-rs.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use capstan_test_support::upstream::{
    self, CLUSTER_API_CRDS, DEFAULT_KWOK_NODECLASS, KARPENTER_CRDS, NODEPOOL_EXAMPLES,
};
use capstan_test_support::{ControlPlane, Options, parse_yaml, unique_name, wait_until};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{
    Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::{Client, ResourceExt};

fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "capstan_test_support=info".into()),
        )
        .with_test_writer()
        .try_init();
}

async fn shared() -> Result<(&'static ControlPlane, Client)> {
    init_tracing();
    let cp = ControlPlane::shared().await?;
    let client = cp.client()?;
    Ok((cp, client))
}

#[tokio::test]
async fn configmap_create_get_watch() -> Result<()> {
    let (cp, client) = shared().await?;
    let ns = cp.create_namespace_unique("cm").await?;
    let cms: Api<ConfigMap> = Api::namespaced(client, &ns);

    // Start watching before the create, from the current resource version.
    let rv = cms
        .list_metadata(&ListParams::default())
        .await?
        .metadata
        .resource_version
        .context("list has a resourceVersion")?;
    // Only our object: the controller manager adds kube-root-ca.crt to new namespaces too.
    let mut events = cms
        .watch(
            &WatchParams::default()
                .fields("metadata.name=proof")
                .timeout(60),
            &rv,
        )
        .await?
        .boxed();

    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "proof" },
        "data": { "greeting": "hello" },
    }))?;
    cms.create(&PostParams::default(), &cm).await?;
    let got = cms.get("proof").await?;
    assert_eq!(
        got.data
            .as_ref()
            .and_then(|d| d.get("greeting"))
            .map(String::as_str),
        Some("hello")
    );

    cms.patch(
        "proof",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "data": { "greeting": "bye" } })),
    )
    .await?;
    cms.delete("proof", &DeleteParams::default()).await?;

    let mut seen = Vec::new();
    let collect = async {
        while let Some(ev) = events.try_next().await? {
            match ev {
                WatchEvent::Added(c) => seen.push(("added", c.name_any(), c.data)),
                WatchEvent::Modified(c) => seen.push(("modified", c.name_any(), c.data)),
                WatchEvent::Deleted(c) => {
                    seen.push(("deleted", c.name_any(), c.data));
                    break;
                }
                WatchEvent::Bookmark(_) => {}
                WatchEvent::Error(e) => bail!("watch error: {e:?}"),
            }
        }
        Ok(())
    };
    tokio::time::timeout(Duration::from_secs(30), collect)
        .await
        .context("watch events in time")??;
    let kinds: Vec<_> = seen.iter().map(|(k, n, _)| (*k, n.as_str())).collect();
    assert_eq!(
        kinds,
        [
            ("added", "proof"),
            ("modified", "proof"),
            ("deleted", "proof")
        ]
    );
    assert_eq!(
        seen[1]
            .2
            .as_ref()
            .and_then(|d| d.get("greeting"))
            .map(String::as_str),
        Some("bye")
    );
    Ok(())
}

fn field<'a>(v: &'a serde_json::Value, path: &[&str]) -> Option<&'a serde_json::Value> {
    path.iter().try_fold(v, |v, k| v.get(k))
}

#[tokio::test]
async fn upstream_crds_and_examples() -> Result<()> {
    let (cp, client) = shared().await?;
    let mut installed = cp
        .install_crds_from_files(&upstream::paths(&KARPENTER_CRDS)?)
        .await?;
    installed.extend(
        cp.install_crds_from_files(&upstream::paths(&CLUSTER_API_CRDS)?)
            .await?,
    );
    installed.sort();
    assert_eq!(
        installed,
        [
            "kwoknodeclasses.karpenter.kwok.sh",
            "machinedeployments.cluster.x-k8s.io",
            "machines.cluster.x-k8s.io",
            "machinesets.cluster.x-k8s.io",
            "nodeclaims.karpenter.sh",
            "nodepools.karpenter.sh",
        ]
    );

    let ns = cp.create_namespace_unique("upstream").await?;
    // Every example manifest; cluster-scoped objects get a unique suffix (the examples all call
    // themselves "default"), and NodePools point at the renamed node class.
    let mut examples = NODEPOOL_EXAMPLES.to_vec();
    examples.push(DEFAULT_KWOK_NODECLASS);
    let suffix = unique_name("x");
    let mut applied = BTreeMap::new();
    for (i, file) in examples.iter().enumerate() {
        let text = file.read()?;
        for mut obj in parse_yaml(&file.to_string(), &text)? {
            let kind = obj
                .types
                .as_ref()
                .map(|t| t.kind.clone())
                .unwrap_or_default();
            if kind == "NodePool" {
                obj.metadata.name = Some(format!("{}-{i}-{suffix}", obj.name_any()));
                if let Some(ncr) = obj
                    .data
                    .pointer_mut("/spec/template/spec/nodeClassRef/name")
                {
                    *ncr = serde_json::Value::String(format!("default-{suffix}"));
                }
            } else if kind.ends_with("NodeClass") {
                obj.metadata.name = Some(format!("{}-{suffix}", obj.name_any()));
            }
            let mut probe = obj.clone();
            let (api, name) = cp.dynamic_api(&client, &ns, &mut probe).await?;
            let out = cp.apply_objects(&ns, vec![obj.clone()]).await?;
            ensure!(out.len() == 1);
            let got = api
                .get(&name)
                .await
                .with_context(|| format!("get {kind} {name}"))?;
            applied.insert(format!("{file}: {kind} {name}"), (obj, got));
        }
    }
    // Three NodePools, the kwok README's KWOKNodeClass and the e2e tests' one.
    assert_eq!(applied.len(), 5, "applied: {:#?}", applied.keys());

    for (what, (sent, got)) in &applied {
        let kind = sent
            .types
            .as_ref()
            .map(|t| t.kind.as_str())
            .unwrap_or_default();
        match kind {
            "NodePool" => {
                let path = ["spec", "template", "spec", "nodeClassRef", "kind"];
                assert_eq!(field(&got.data, &path), field(&sent.data, &path), "{what}");
                assert_eq!(
                    field(&got.data, &["spec", "template", "spec", "requirements"]),
                    field(&sent.data, &["spec", "template", "spec", "requirements"]),
                    "{what}"
                );
                // Defaults from the CRD schema are applied by the real API server (the kwok
                // README's pool sets no budgets).
                assert!(
                    field(&got.data, &["spec", "disruption", "budgets"]).is_some(),
                    "{what}: defaulted disruption.budgets missing: {}",
                    got.data
                );
            }
            "KWOKNodeClass" => {}
            other => bail!("unexpected kind {other} in {what}"),
        }
    }

    // The CRD schemas really validate: an invalid NodePool is rejected.
    let bad = parse_yaml(
        "bad",
        &format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: bad-{suffix}\nspec:\n  template:\n    spec:\n      requirements:\n      - key: kubernetes.io/os\n        operator: Sideways\n        values: [linux]\n      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: x}}\n"
        ),
    )?;
    let err = cp.apply_objects(&ns, bad).await;
    ensure!(err.is_err(), "invalid NodePool was accepted");

    // The Cluster API kinds are served (both versions).
    for version in ["v1beta1", "v1beta2"] {
        for kind in ["Machine", "MachineSet", "MachineDeployment"] {
            let gvk = kube::core::GroupVersionKind::gvk("cluster.x-k8s.io", version, kind);
            let (ar, _) = kube::discovery::pinned_kind(&client, &gvk).await?;
            let api: Api<kube::api::DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
            assert!(api.list(&ListParams::default()).await?.items.is_empty());
        }
    }
    Ok(())
}

fn fake_node(name: &str, selector_value: &str) -> Result<Node> {
    Ok(serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": name,
            "annotations": { "kwok.x-k8s.io/node": "fake" },
            "labels": {
                "kubernetes.io/hostname": name,
                "capstan.dev/test-node": selector_value,
                "type": "kwok",
            },
        },
        "status": {
            "capacity": { "cpu": "4", "memory": "16Gi", "pods": "110" },
            "allocatable": { "cpu": "4", "memory": "16Gi", "pods": "110" },
        },
    }))?)
}

fn pod_phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn pod_node(p: &Pod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

#[tokio::test]
async fn deployment_runs_on_kwok_node_and_drains() -> Result<()> {
    let (cp, client) = shared().await?;
    let ns = cp.create_namespace_unique("deploy").await?;
    let selector = unique_name("pool");
    let node_name = unique_name("fake-node");

    let deployment = format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 3
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      nodeSelector:
        capstan.dev/test-node: {selector}
      tolerations:
      - key: kwok.x-k8s.io/node
        operator: Exists
      containers:
      - name: web
        image: registry.invalid/web:1
        resources:
          requests: {{cpu: 500m, memory: 256Mi}}
"#
    );
    cp.apply_yaml(&ns, &deployment).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let lp = ListParams::default().labels("app=web");

    // Pods exist but stay Pending and unscheduled: no node matches.
    let pending = wait_until(Duration::from_secs(60), "3 unschedulable pods", || async {
        let list = pods.list(&lp).await?;
        let unschedulable = list
            .items
            .iter()
            .filter(|p| {
                pod_phase(p) == "Pending"
                    && pod_node(p).is_none()
                    && p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter().any(|c| {
                                c.type_ == "PodScheduled"
                                    && c.status == "False"
                                    && c.reason.as_deref() == Some("Unschedulable")
                            })
                        })
            })
            .count();
        Ok::<_, kube::Error>((unschedulable == 3).then_some(list.items))
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for p in pods.list(&lp).await?.items {
        assert_eq!(
            pod_phase(&p),
            "Pending",
            "pod {} before any node",
            p.name_any()
        );
        assert_eq!(pod_node(&p), None);
    }
    drop(pending);

    // A fake node managed by kwok: it turns Ready and the pods run on it.
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(&PostParams::default(), &fake_node(&node_name, &selector)?)
        .await?;
    wait_until(Duration::from_secs(60), "node Ready", || async {
        let n = nodes.get(&node_name).await?;
        let ready = n
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        Ok::<_, kube::Error>(ready.then_some(()))
    })
    .await?;
    let running = wait_until(
        Duration::from_secs(90),
        "3 pods Running on the node",
        || async {
            let list = pods.list(&lp).await?;
            let ok = list
                .items
                .iter()
                .filter(|p| pod_phase(p) == "Running" && pod_node(p) == Some(node_name.as_str()))
                .count();
            Ok::<_, kube::Error>((ok == 3 && list.items.len() == 3).then_some(list.items))
        },
    )
    .await?;
    for p in &running {
        let ready = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        assert!(ready, "pod {} Running but not Ready", p.name_any());
    }
    // kwok keeps the node's lease.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let lease = wait_until(Duration::from_secs(30), "node lease", || async {
        leases.get_opt(&node_name).await
    })
    .await?;
    assert!(
        lease
            .spec
            .as_ref()
            .and_then(|s| s.renew_time.as_ref())
            .is_some(),
        "lease has no renewTime"
    );

    // Drain: cordon, evict every pod, then delete the node.
    nodes
        .patch(
            &node_name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "spec": { "unschedulable": true } })),
        )
        .await?;
    let evicted: Vec<String> = running.iter().map(|p| p.name_any()).collect();
    for name in &evicted {
        pods.evict(name, &EvictParams::default()).await?;
    }
    wait_until(Duration::from_secs(60), "evicted pods gone", || async {
        let list = pods.list(&lp).await?;
        let left: Vec<_> = list
            .items
            .iter()
            .filter(|p| evicted.contains(&p.name_any()))
            .map(|p| p.name_any())
            .collect();
        Ok::<_, kube::Error>(left.is_empty().then_some(()))
    })
    .await?;
    nodes.delete(&node_name, &DeleteParams::default()).await?;
    wait_until(Duration::from_secs(30), "node gone", || async {
        Ok::<_, kube::Error>(nodes.get_opt(&node_name).await?.is_none().then_some(()))
    })
    .await?;

    // Replacements exist (the Deployment wants 3) but nothing is stuck Terminating or bound to the
    // deleted node: they wait, unscheduled, for a new node.
    wait_until(
        Duration::from_secs(30),
        "3 replacement pods Pending",
        || async {
            let list = pods.list(&lp).await?;
            let pending = list
                .items
                .iter()
                .filter(|p| pod_phase(p) == "Pending" && pod_node(p).is_none())
                .count();
            Ok::<_, kube::Error>((pending == 3 && list.items.len() == 3).then_some(()))
        },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for p in pods.list(&ListParams::default()).await?.items {
        assert!(
            p.metadata.deletion_timestamp.is_none(),
            "pod {} stuck Terminating",
            p.name_any()
        );
        assert_ne!(
            pod_node(&p),
            Some(node_name.as_str()),
            "pod {} on deleted node",
            p.name_any()
        );
    }

    // Deleting the Deployment removes its pods (garbage collector) without leftovers.
    Api::<Deployment>::namespaced(client.clone(), &ns)
        .delete("web", &DeleteParams::foreground())
        .await?;
    wait_until(
        Duration::from_secs(60),
        "pods deleted with the Deployment",
        || async { Ok::<_, kube::Error>(pods.list(&lp).await?.items.is_empty().then_some(())) },
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn service_account_tokens_and_rbac() -> Result<()> {
    let (cp, client) = shared().await?;
    let ns = cp.create_namespace_unique("sa").await?;
    cp.apply_yaml(
        &ns,
        r#"apiVersion: v1
kind: ServiceAccount
metadata: {name: reader}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: cm-reader}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader-cm-reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: cm-reader}
subjects:
- kind: ServiceAccount
  name: reader
"#,
    )
    .await?;
    // A token for the ServiceAccount, signed by the API server.
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), &ns);
    let tr: k8s_openapi::api::authentication::v1::TokenRequest =
        serde_json::from_value(serde_json::json!({ "spec": { "audiences": [] } }))?;
    let tr = sas
        .create_token_request("reader", &PostParams::default(), &tr)
        .await?;
    let token = tr.status.context("token status")?.token;

    let mut config = cp.config().clone();
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..Default::default()
    };
    let as_sa = Client::try_from(config)?;
    let cms: Api<ConfigMap> = Api::namespaced(as_sa.clone(), &ns);
    assert!(
        cms.list(&ListParams::default())
            .await?
            .items
            .iter()
            .all(|c| c.name_any() == "kube-root-ca.crt")
    );
    // RBAC is enforced: no access to Secrets or to other namespaces.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(as_sa.clone(), &ns);
    match secrets.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => bail!("expected 403 for secrets, got {other:?}"),
    }
    let other: Api<ConfigMap> = Api::namespaced(as_sa, "default");
    match other.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => bail!("expected 403 in another namespace, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn fresh_control_plane_stops_cleanly_and_detects_a_dead_component() -> Result<()> {
    init_tracing();
    // A second, private control plane (API server only) next to the shared one.
    let cp = ControlPlane::start(Options::api_server_only()).await?;
    let client = cp.client()?;
    let ns = cp.create_namespace_unique("fresh").await?;
    let cms: Api<ConfigMap> = Api::namespaced(client, &ns);
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(serde_json::json!({ "metadata": { "name": "x" } }))?,
    )
    .await?;
    let pids = cp.pids();
    let names: Vec<&str> = pids.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["supervisor", "etcd", "kube-apiserver"]);
    cp.stop()?;
    for (name, pid) in &pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .map(|s| s.contains(") Z"))
                    .unwrap_or(true),
            "{name} (pid {pid}) still running after stop"
        );
    }
    assert!(cp.client().is_err(), "client() after stop must fail");

    // Kill the API server of another fresh one: the supervisor notices, stops the rest and
    // reports the component's log.
    let cp = ControlPlane::start(Options::api_server_only()).await?;
    let apiserver = cp
        .pids()
        .into_iter()
        .find(|(n, _)| n == "kube-apiserver")
        .map(|(_, p)| p)
        .context("apiserver pid")?;
    let status = std::process::Command::new("kill")
        .args(["-KILL", &apiserver.to_string()])
        .status()?;
    ensure!(status.success());
    let report = wait_until(Duration::from_secs(30), "failure detected", || async {
        Ok::<_, String>(cp.health().err())
    })
    .await?;
    let report = report.to_string();
    assert!(report.contains("kube-apiserver exited"), "{report}");
    assert!(report.contains("last lines of"), "{report}");
    cp.stop()?;
    Ok(())
}

#[tokio::test]
async fn stale_control_plane_in_the_same_dir_is_replaced() -> Result<()> {
    init_tracing();
    let bin = capstan_test_support::bin_dir()?;
    let dir = std::env::temp_dir().join(unique_name("capstan-stale"));
    // A detached control plane, as an earlier crashed run would leave it.
    let out = std::process::Command::new(bin.join("capstan-cp"))
        .args([
            "up",
            "--no-controller-manager",
            "--no-scheduler",
            "--no-kwok",
            "--dir",
        ])
        .arg(&dir)
        .output()?;
    ensure!(
        out.status.success(),
        "cp up: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let old: Vec<u32> = std::fs::read_to_string(dir.join("pids"))?
        .lines()
        .filter_map(|l| l.split_once(' ')?.1.trim().parse().ok())
        .collect();
    ensure!(old.len() == 3, "old pids {old:?}");

    let cp = ControlPlane::start(Options {
        dir: Some(dir.clone()),
        ..Options::api_server_only()
    })
    .await?;
    for pid in &old {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(
            stat.is_empty() || stat.contains(") Z"),
            "stale pid {pid} still running: {stat}"
        );
    }
    let client = cp.client()?;
    Api::<ConfigMap>::namespaced(client, "default")
        .list(&ListParams::default())
        .await?;
    cp.stop()?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[tokio::test]
async fn busy_port_is_retried() -> Result<()> {
    init_tracing();
    let cp = ControlPlane::start(Options {
        extra_args: vec!["--simulate-busy-port".into()],
        ..Options::api_server_only()
    })
    .await?;
    let client = cp.client()?;
    Api::<ConfigMap>::namespaced(client, "default")
        .list(&ListParams::default())
        .await?;
    let log = std::fs::read_to_string(cp.dir().join("supervisor.log"))?;
    assert!(log.contains("retrying with new ports"), "{log}");
    assert!(
        std::fs::read_to_string(cp.dir().join("logs/kube-apiserver.log"))?
            .contains("address already in use"),
        "first attempt should have failed on the busy port"
    );
    cp.stop()?;
    Ok(())
}

#[tokio::test]
async fn killed_supervisor_takes_its_components_with_it() -> Result<()> {
    init_tracing();
    let cp = ControlPlane::start(Options {
        scheduler: false,
        controller_manager: false,
        ..Options::default()
    })
    .await?;
    let pids = cp.pids();
    let names: Vec<&str> = pids.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["supervisor", "etcd", "kube-apiserver", "kwok"]);
    let supervisor = pids[0].1;
    let status = std::process::Command::new("kill")
        .args(["-KILL", &supervisor.to_string()])
        .status()?;
    ensure!(status.success());
    let gone = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| s.contains(") Z"))
            .unwrap_or(true)
    };
    wait_until(Duration::from_secs(10), "components gone", || async {
        let left: Vec<_> = pids.iter().filter(|(_, p)| !gone(*p)).collect();
        Ok::<_, String>(left.is_empty().then_some(()))
    })
    .await?;
    // The harness notices the death on its own (under load the supervisor's exit may be observed a
    // moment after its components are gone).
    wait_until(
        Duration::from_secs(10),
        "health to report the dead supervisor",
        || async { Ok::<_, String>(cp.health().is_err().then_some(())) },
    )
    .await?;
    cp.stop()?;
    Ok(())
}
