//! A hostile provider against the host's own memory: large bodies through the `kube` import.
//!
//! `capstan provider test --kubeconfig` runs the same runtime and `kube` import as `capstan run`;
//! the chaos fixture's `validate-node-class` sends the body the class asks for (`bodyBytes`, a
//! JSON array of zeros, the costliest shape to parse) `repeat` times. The host's peak RSS
//! (`VmHWM`) must stay bounded, and the guest must get a clear error.

use std::path::Path;
use std::time::Duration;

use capstan_test_support::ControlPlane;

/// The host's peak RSS under the attack must stay below this. The guest alone may hold 64 MiB
/// and the runtime with a compiled component needs about 100 MiB; before the request and
/// response bounds the same attack peaked above 600 MiB.
const PEAK_RSS_BOUND_KIB: u64 = 256 << 10;

/// `VmHWM` of `pid`, in KiB (none once the process is gone).
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Runs the kit on chaos with `parameters`, sampling the process's peak RSS until it exits.
async fn attack(
    dir: &Path,
    kubeconfig: &Path,
    namespace: &str,
    name: &str,
    parameters: serde_json::Value,
) -> (u64, String) {
    let class = dir.join(format!("{name}.json"));
    std::fs::write(&class, parameters.to_string()).unwrap();
    let grants = dir.join("grants.yaml");
    std::fs::write(
        &grants,
        format!(
            "- apiGroups: [\"\"]\n  resources: [configmaps]\n  verbs: [create, patch]\n  namespaces: [{namespace}]\n"
        ),
    )
    .unwrap();
    let chaos = crate::fixtures::providers_dir().join("chaos.wasm");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["provider", "test", "--no-cache"])
        .arg(&chaos)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--grants")
        .arg(&grants)
        .arg("--node-class")
        .arg(&class)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let mut peak = 0;
    let stdout = child.stdout.take().unwrap();
    let reader = tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut text = String::new();
        let mut stdout = stdout;
        stdout.read_to_string(&mut text).await.unwrap();
        text
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    loop {
        if let Some(kib) = peak_rss_kib(pid) {
            peak = peak.max(kib);
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name}: the kit did not finish"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    (peak, reader.await.unwrap())
}

#[tokio::test]
async fn large_kube_bodies_do_not_grow_the_host() {
    let cp = ControlPlane::shared().await.expect("control plane");
    let namespace = cp
        .create_namespace_unique("hostile")
        .await
        .expect("namespace");
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hostile");
    std::fs::create_dir_all(&dir).unwrap();
    let attacks = [
        (
            "patch",
            serde_json::json!({"mode": "kube", "op": "patch", "patchType": "json",
                "kind": "ConfigMap", "namespace": namespace, "name": "target",
                "bodyBytes": 24_000_000, "repeat": 4}),
        ),
        (
            "create",
            serde_json::json!({"mode": "kube", "op": "create", "kind": "ConfigMap",
                "namespace": namespace, "bodyBytes": 24_000_000, "repeat": 4}),
        ),
    ];
    let mut results = Vec::new();
    for (name, parameters) in attacks {
        let (peak, stdout) = attack(&dir, cp.kubeconfig_path(), &namespace, name, parameters).await;
        println!("{name}: host peak RSS {} MiB", peak >> 10);
        results.push((name, peak, stdout));
    }
    for (name, peak, stdout) in results {
        assert!(
            stdout.contains("FAIL  validate-node-class accepts the test class: validate-node-class: invalid: invalid:")
                && stdout.contains("exceeds"),
            "{name}: the guest gets a clear invalid error:\n{stdout}"
        );
        assert!(
            peak < PEAK_RSS_BOUND_KIB,
            "{name}: host peak RSS {} MiB, bound {} MiB",
            peak >> 10,
            PEAK_RSS_BOUND_KIB >> 10
        );
    }
}

#[tokio::test]
async fn responses_over_the_limit_are_refused() {
    use capstan::capability::grants::{Verb, VerbRule};
    use capstan::capability::kube::MAX_RESPONSE_BYTES;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::Api;
    use kube::api::PostParams;

    let cp = ControlPlane::shared().await.expect("control plane");
    let namespace = cp
        .create_namespace_unique("bigresp")
        .await
        .expect("namespace");
    let api = Api::<ConfigMap>::namespaced(cp.client().expect("client"), &namespace);
    let chunk = "x".repeat(900_000);
    for i in 0..=MAX_RESPONSE_BYTES / chunk.len() {
        let cm: ConfigMap = serde_json::from_value(
            serde_json::json!({"metadata": {"name": format!("big-{i}")}, "data": {"pad": chunk}}),
        )
        .unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    let s = crate::grants::setup(
        vec![crate::grants::grant(
            &[""],
            &["configmaps"],
            &[VerbRule::One(Verb::Get), VerbRule::One(Verb::List)],
            &[&namespace],
        )],
        false,
    )
    .await;
    let list = serde_json::json!({"op": "list", "kind": "ConfigMap", "namespace": namespace});
    let result = crate::grants::kube_call(&s.provider, list).await;
    let message = result.expect_err("a list over the limit fails");
    assert!(
        message.starts_with("other: ") && message.contains("exceeds the limit"),
        "{message}"
    );
    // One of them alone is fine.
    let get = serde_json::json!({"op": "get", "kind": "ConfigMap", "namespace": namespace, "name": "big-0"});
    assert_eq!(crate::grants::kube_call(&s.provider, get).await, Ok(()));
}

/// The `type` condition of a status's `conditions`, as `(status, reason, message)`.
fn condition_of(
    conditions: &[capstan::api::Condition],
    type_: &str,
) -> Option<(String, String, String)> {
    conditions.iter().find(|c| c.type_ == type_).map(|c| {
        (
            format!("{:?}", c.status),
            c.reason.clone().unwrap_or_default(),
            c.message.clone().unwrap_or_default(),
        )
    })
}

/// Waits until NodeClass `class` says `InstanceTypesReady` is `status` with `reason`, and its
/// pool's `NodeClassReady` agrees; returns the class's message.
async fn wait_catalog(
    client: &kube::Client,
    host: &crate::lifecycle::Host,
    class: &str,
    pool: &str,
    status: &str,
    reason: &str,
) -> String {
    use capstan::api::{NodeClass, NodePool};
    let classes = kube::Api::<NodeClass>::all(client.clone());
    let pools = kube::Api::<NodePool>::all(client.clone());
    capstan_test_support::wait_until(
        Duration::from_secs(90),
        &format!("InstanceTypesReady={status} ({reason}) on {class} and its pool"),
        || async {
            let nc = classes.get(class).await?;
            let conditions = nc.status.map(|s| s.conditions).unwrap_or_default();
            let types = condition_of(&conditions, "InstanceTypesReady");
            let ready = condition_of(&conditions, "Ready");
            let np = pools.get(pool).await?;
            let pool_conditions = np.status.map(|s| s.conditions).unwrap_or_default();
            let pool_class = condition_of(&pool_conditions, "NodeClassReady");
            Ok::<_, kube::Error>(match (types, ready, pool_class) {
                (Some(t), Some(r), Some(p))
                    if t.0 == status && t.1 == reason && r.0 == status && p.0 == status =>
                {
                    Some(t.2)
                }
                _ => None,
            })
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()))
}

#[tokio::test]
async fn a_broken_catalog_is_a_nodeclass_condition_until_the_provider_recovers() {
    use crate::lifecycle::{
        Host, Names, cluster, node_class, node_pool, node_pool_json, wait_event,
    };
    use capstan::api::NodeClass;
    use kube::api::{Patch, PatchParams};

    let (cp, client) = cluster().await;
    let names = Names::new("catalog");
    let host = Host::start(cp, &names, &[]);
    let (class, pool) = (names.name("nc"), names.name("pool"));
    node_class(
        &client,
        &names,
        &class,
        "chaos",
        serde_json::json!({"mode": "nan-price"}),
    )
    .await;
    node_pool(&client, node_pool_json(&names, &pool, &class)).await;

    let message = wait_catalog(&client, &host, &class, &pool, "False", "InvalidCatalog").await;
    assert!(message.contains(&format!("NodePool {pool}")), "{message}");
    assert!(message.contains("price"), "{message}");
    wait_event(&client, "default", &class, "InvalidCatalog").await;

    let classes = kube::Api::<NodeClass>::all(client.clone());
    let set_mode = |mode: &'static str| {
        let classes = classes.clone();
        let class = class.clone();
        async move {
            let patch = serde_json::json!({"spec": {"parameters": {"mode": mode}}});
            classes
                .patch(&class, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        }
    };
    set_mode("trap").await;
    let message = wait_catalog(
        &client,
        &host,
        &class,
        &pool,
        "False",
        "GetInstanceTypesFailed",
    )
    .await;
    assert!(message.contains("trapped"), "{message}");

    set_mode("echo").await;
    let message = wait_catalog(&client, &host, &class, &pool, "True", "InstanceTypesReady").await;
    assert!(message.is_empty(), "{message}");
    host.check_alive();
    crate::lifecycle::cleanup(&client, &names).await;
}
