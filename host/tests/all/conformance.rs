//! The conformance kit: kwok passes it against a real control plane; chaos shows what failing
//! looks like.

use std::time::Duration;

use capstan::capability::Capabilities;
use capstan::capability::grants::{Cluster, Grants, parse};
use capstan::capability::kube::ClusterConnection;
use capstan::conformance::{self, Outcome, checks};
use capstan::runtime::Limits;
use capstan_test_support::ControlPlane;

use crate::fixtures::{chaos, claim, class, kwok_compiled, kwok_file, kwok_in, runtime};

/// What kwok needs: its own Nodes, and their status (`scope: owned` is the default, written out);
/// and the DRA KWOK driver's DRAConfigs its instance types' devices come from (any: cluster
/// configuration no provider owns).
pub const KWOK_GRANTS: &str = r#"
- apiGroups: [""]
  resources: [nodes]
  verbs: [get, list, create, patch, delete]
  scope: owned
- apiGroups: [""]
  resources: [nodes/status]
  verbs: [get, patch]
  scope: owned
- apiGroups: [test.karpenter.sh]
  resources: [draconfigs]
  verbs: [list]
  scope: any
"#;

fn kwok_grants() -> Grants {
    parse::from_text(KWOK_GRANTS).unwrap()
}

/// The kit on the kwok provider built in `language`, in process.
async fn kwok_passes_on_a_real_cluster(language: &str) {
    let cp = ControlPlane::shared().await.expect("control plane");
    let caps = Capabilities::builder("kwok")
        .grants(kwok_grants())
        .workload(ClusterConnection::new(
            Cluster::Workload,
            cp.client().expect("client"),
        ))
        .build();
    let provider = runtime()
        .instantiate_pre(kwok_in(language), Limits::default(), caps.clone())
        .unwrap();
    let options = conformance::Options {
        delete_interval: Duration::from_millis(200),
        ..conformance::Options::default()
    };
    let report = conformance::run(&provider, &options).await;
    println!("{language}: {report}");
    assert!(report.passed(), "{language}: {report}");
    assert_eq!(report.skipped(), 0, "{language}: {report}");
    // Both speak 0.4 and reboot in place.
    let reboot = &report.check(checks::REBOOT).unwrap().outcome;
    assert!(
        matches!(reboot, Outcome::Pass(m) if m.starts_with("rebooted")),
        "{language}: {reboot:?}"
    );
    assert_eq!(
        caps.metrics().snapshot().kube_denied,
        0,
        "kwok ({language}) stays inside its grants"
    );
}

#[tokio::test]
async fn kwok_in_rust_passes_on_a_real_cluster() {
    kwok_passes_on_a_real_cluster("rust").await;
}

#[tokio::test]
async fn kwok_in_python_passes_on_a_real_cluster() {
    kwok_passes_on_a_real_cluster("python").await;
}

#[tokio::test]
async fn kwok_without_grants_fails_with_permission_errors_not_traps() {
    let cp = ControlPlane::shared().await.expect("control plane");
    let caps = Capabilities::builder("kwok")
        .workload(ClusterConnection::new(
            Cluster::Workload,
            cp.client().expect("client"),
        ))
        .build();
    let provider = runtime()
        .instantiate_pre(kwok_compiled(), Limits::default(), caps.clone())
        .unwrap();
    let report = conformance::run(&provider, &conformance::Options::default()).await;
    let create = report.check(checks::CREATE).unwrap();
    assert!(matches!(create.outcome, Outcome::Fail(_)), "{report}");
    assert!(caps.metrics().snapshot().kube_denied > 0);
    for check in &report.checks {
        if let Outcome::Fail(message) = &check.outcome {
            assert!(!message.contains("trapped"), "{}: {message}", check.name);
        }
    }
}

#[tokio::test]
async fn chaos_failures_are_reported_per_check() {
    let provider = chaos(Limits::default(), Capabilities::isolated("chaos"));
    let options = conformance::Options {
        skip_cluster_checks: Some("no cluster in this test".into()),
        ..conformance::Options::default()
    };
    let report = conformance::run(&provider, &options).await;
    assert!(
        matches!(report.check(checks::NAME).unwrap().outcome, Outcome::Pass(ref n) if n == "chaos")
    );
    // chaos's catalog puts zones and capacity types on offerings only; whether or not the kit
    // accepts that, the check ran and did not trap.
    match &report.check(checks::INSTANCE_TYPES).unwrap().outcome {
        Outcome::Pass(_) => {}
        Outcome::Fail(message) => assert!(!message.contains("trapped"), "{message}"),
        other => panic!("neither passed nor failed: {other:?}"),
    }
    assert!(
        matches!(
            report.check(checks::VALIDATE_REJECTS).unwrap().outcome,
            Outcome::Fail(_)
        ),
        "{report}"
    );
    assert!(matches!(
        report.check(checks::CREATE).unwrap().outcome,
        Outcome::Skip(_)
    ));
    assert!(!report.passed());

    // A trapping provider fails the instance-type check with the trap, and the kit carries on.
    let trap = conformance::Options {
        node_class: class(serde_json::json!({"mode": "trap"})),
        ..options
    };
    let report = conformance::run(&provider, &trap).await;
    match &report.check(checks::INSTANCE_TYPES).unwrap().outcome {
        Outcome::Fail(message) => assert!(message.contains("trapped"), "{message}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        report.check(checks::NAME).unwrap().outcome,
        Outcome::Pass(_)
    ));
}

#[test]
fn kwok_grants_parse() {
    assert_eq!(kwok_grants().0.len(), 3);
}

/// `capstan provider test` on the kwok provider built in `language`.
async fn kwok_passes_through_the_cli(language: &str) {
    let cp = ControlPlane::shared().await.expect("control plane");
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-conformance");
    std::fs::create_dir_all(&dir).unwrap();
    let grants = dir.join(format!("kwok-{language}-grants.yaml"));
    std::fs::write(&grants, KWOK_GRANTS).unwrap();
    let kubeconfig = cp.kubeconfig_path().to_path_buf();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["provider", "test", "--no-cache"])
        .arg(kwok_file(language))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--grants")
        .arg(&grants)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{language}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("PASS  create is idempotent"), "{stdout}");
    assert!(
        stdout.trim_end().ends_with("0 failed, 0 skipped"),
        "{stdout}"
    );
}

#[tokio::test]
async fn kwok_in_rust_passes_through_the_cli() {
    kwok_passes_through_the_cli("rust").await;
}

#[tokio::test]
async fn kwok_in_python_passes_through_the_cli() {
    kwok_passes_through_the_cli("python").await;
}

/// Runs the kit on chaos's `instance` mode with `bad` answers mixed into its parameters.
async fn instance_report(bad: serde_json::Value) -> conformance::Report {
    let mut parameters = serde_json::json!({"mode": "instance"});
    if let (Some(parameters), Some(bad)) = (parameters.as_object_mut(), bad.as_object()) {
        parameters.extend(bad.clone());
    }
    let provider = chaos(Limits::default(), Capabilities::isolated("chaos"));
    let options = conformance::Options {
        node_class: class(parameters),
        delete_interval: Duration::from_millis(10),
        ..conformance::Options::default()
    };
    conformance::run(&provider, &options).await
}

fn failure(report: &conformance::Report, check: &str) -> String {
    match &report.check(check).unwrap().outcome {
        Outcome::Fail(message) => message.clone(),
        other => panic!("{check}: expected a failure, got {other:?}\n{report}"),
    }
}

#[tokio::test]
async fn bad_create_and_get_answers_fail_their_checks() {
    let good = instance_report(serde_json::json!({})).await;
    for check in [
        checks::CREATE,
        checks::CREATE_WITHIN,
        checks::CREATE_IDEMPOTENT,
        checks::GET,
        checks::GET_AGREES,
        checks::LIST,
        checks::DELETE,
        checks::GET_AFTER_DELETE,
    ] {
        assert!(
            matches!(good.check(check).unwrap().outcome, Outcome::Pass(_)),
            "{check}:\n{good}"
        );
    }

    let report = instance_report(
        serde_json::json!({"createLabels": {"node.kubernetes.io/instance-type": "chaos-99x"}}),
    )
    .await;
    let message = failure(&report, checks::CREATE_WITHIN);
    assert!(
        message.contains(
            "instance-type=chaos-99x is outside the claim's requirement node.kubernetes.io/instance-type In"
        ),
        "{message}"
    );
    assert!(message.contains("never offered"), "{message}");

    let report = instance_report(
        serde_json::json!({"createLabels": {"topology.kubernetes.io/zone": "mars-1"}}),
    )
    .await;
    let message = failure(&report, checks::CREATE_WITHIN);
    assert!(
        message.contains("zone=mars-1 is outside the claim's requirement"),
        "{message}"
    );
    assert!(
        message.contains("an offering get-instance-types never listed"),
        "{message}"
    );

    let report = instance_report(
        serde_json::json!({"createLabels": {"karpenter.sh/capacity-type": "reserved"}}),
    )
    .await;
    let message = failure(&report, checks::CREATE_WITHIN);
    assert!(message.contains("capacity-type=reserved"), "{message}");

    // A provider that moves its claims into another pool, or dresses its nodes in labels of
    // reserved domains, fails the kit as the host refuses it at launch.
    let report = instance_report(
        serde_json::json!({"createLabels": {"karpenter.sh/nodepool": "kwok-pool"}}),
    )
    .await;
    let message = failure(&report, checks::CREATE_WITHIN);
    assert!(
        message.contains(
            "label karpenter.sh/nodepool=kwok-pool would change the claim's karpenter.sh/nodepool="
        ),
        "{message}"
    );
    let report = instance_report(
        serde_json::json!({"createLabels": {"node-restriction.kubernetes.io/secure": "true"}}),
    )
    .await;
    let message = failure(&report, checks::CREATE_WITHIN);
    assert!(
        message.contains(
            "node-restriction.kubernetes.io/secure=true is in the reserved domain kubernetes.io"
        ),
        "{message}"
    );

    let report = instance_report(
        serde_json::json!({"getLabels": {"topology.kubernetes.io/zone": "elsewhere"}}),
    )
    .await;
    let message = failure(&report, checks::GET_AGREES);
    assert!(
        message.contains("get labels it elsewhere: describe one instance the same way"),
        "{message}"
    );
    assert!(matches!(
        report.check(checks::CREATE_WITHIN).unwrap().outcome,
        Outcome::Pass(_)
    ));

    let report =
        instance_report(serde_json::json!({"getProviderId": "chaos://someone-else"})).await;
    let message = failure(&report, checks::GET);
    assert!(
        message.contains("answered with provider-id Some(\"chaos://someone-else\")"),
        "{message}"
    );
}

/// A reboot as kwok plays one, on a real cluster: the Node gets the operation's boot ID and goes
/// NotReady, kwok's kubelet stand-in brings it back Ready with that boot, and the same operation
/// asked again changes nothing. A provider of an older contract is not even asked.
#[tokio::test]
async fn kwok_reboots_its_node_in_place_once_per_operation() {
    use capstan::runtime::lifecycle::RebootError;
    use k8s_openapi::api::core::v1::Node;

    let cp = ControlPlane::shared().await.expect("control plane");
    let client = cp.client().expect("client");
    let caps = Capabilities::builder("kwok")
        .grants(kwok_grants())
        .workload(ClusterConnection::new(Cluster::Workload, client.clone()))
        .build();
    let provider = runtime()
        .instantiate_pre(kwok_compiled(), Limits::default(), caps)
        .unwrap();
    let name = format!(
        "reboot-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    );
    let claim = claim(&name);
    let class = class(serde_json::json!({}));
    let created = provider.create(&claim, &class).await.unwrap();
    let nodes: kube::Api<Node> = kube::Api::all(client.clone());
    let ready = |node: &Node| {
        node.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status.clone())
    };
    let boot = |node: &Node| {
        node.status
            .as_ref()
            .and_then(|s| s.node_info.as_ref())
            .map(|i| i.boot_id.clone())
    };
    // kwok marks the new Node Ready first.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let node = nodes.get(&name).await.unwrap();
        if ready(&node).as_deref() == Some("True") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never Ready: {node:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    provider.reboot(&created, "op-1").await.unwrap().unwrap();
    let node = nodes.get(&name).await.unwrap();
    assert_eq!(boot(&node).as_deref(), Some("kwok-op-1"));
    // Back Ready, with the new boot (kwok's node-initialize stage keeps the boot ID).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let rebooted = loop {
        let node = nodes.get(&name).await.unwrap();
        if ready(&node).as_deref() == Some("True") {
            break node;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not Ready again: {node:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(boot(&rebooted).as_deref(), Some("kwok-op-1"));
    // The same operation again: nothing written.
    provider.reboot(&created, "op-1").await.unwrap().unwrap();
    let again = nodes.get(&name).await.unwrap();
    // Not the resourceVersion: kwok writes the Node's heartbeats meanwhile. A second reboot would
    // have turned it NotReady, moving its Ready condition's transition time.
    let ready_since = |node: &Node| {
        node.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .map(|c| (c.status.clone(), c.last_transition_time.clone()))
    };
    assert_eq!(
        (ready_since(&again), boot(&again)),
        (ready_since(&rebooted), boot(&rebooted)),
        "the same operation rebooted again"
    );
    // A claim whose instance is gone: not-found.
    let mut gone = created.clone();
    gone.provider_id = Some("kwok://no-such-node".into());
    assert!(matches!(
        provider.reboot(&gone, "op-2").await.unwrap(),
        Err(RebootError::NotFound(_))
    ));
    // A provider of contract 0.1 cannot reboot: the host answers for it, without a call.
    let old = chaos(Limits::default(), Capabilities::isolated("chaos"));
    let calls = old.stats().calls;
    assert_eq!(
        old.reboot(&created, "op-1").await.unwrap(),
        Err(RebootError::NotImplemented)
    );
    assert_eq!(old.stats().calls, calls);
    while provider.delete(&created).await.is_ok() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
