//! The Helm chart (`charts/capstan`): `helm lint --strict`, rendering, the values schema, and,
//! installed into the real API server from the package `make chart` writes (the built image's
//! reference and digest in its values) with the kwok provider (ConfigMap plus Provider), a real
//! host running with nothing but the chart's ServiceAccount and RBAC loads that provider and
//! provisions and terminates nodes for pending pods. (`image.rs` runs the image itself.) (The unit test `capstan::api::crds` keeps the chart's
//! `crds/` equal to the generated CRDs.)

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use capstan::api::NodeClaim;
use capstan_test_support::{ControlPlane, bin_dir, parse_yaml, repo_root, unique_name, wait_until};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, DynamicObject, ListParams};
use kube::config::Kubeconfig;
use kube::{Api, Client, ResourceExt};

use crate::cli::with_print_settings;
use crate::fixtures::providers_dir;
use crate::leader_election::{Replica, http_get, kwok_pool, nodepool_pods, wait_running};
use crate::lifecycle::{Names, RUN_LABEL, cluster};
use crate::provisioner::{claims, namespace, teardown};

fn chart() -> PathBuf {
    repo_root().join("charts/capstan")
}

/// `helm` with its state in the test's temporary directory.
fn helm(kubeconfig: Option<&Path>) -> Command {
    let state = Path::new(env!("CARGO_TARGET_TMPDIR")).join("helm");
    let mut cmd = Command::new(bin_dir().expect("control plane binaries").join("helm"));
    cmd.env("HELM_CACHE_HOME", state.join("cache"))
        .env("HELM_CONFIG_HOME", state.join("config"))
        .env("HELM_DATA_HOME", state.join("data"));
    match kubeconfig {
        Some(path) => cmd.env("KUBECONFIG", path),
        None => cmd.env("KUBECONFIG", state.join("no-kubeconfig")),
    };
    cmd
}

fn run(mut cmd: Command) -> (bool, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("run helm");
    (
        status.success(),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// A rendered container's `args`.
fn container_args(container: &serde_json::Value) -> Vec<&str> {
    container["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str())
        .collect()
}

/// `helm template` with `args`; the rendered objects.
fn template(args: &[&str]) -> Vec<DynamicObject> {
    let mut cmd = helm(None);
    cmd.args(["template", "rel", "--namespace", "capstan-system"])
        .arg(chart())
        .args(args);
    let (ok, out, err) = run(cmd);
    assert!(ok, "helm template {args:?} failed:\n{err}");
    parse_yaml("helm template", &out).unwrap()
}

fn find<'a>(objects: &'a [DynamicObject], kind: &str, name: &str) -> &'a DynamicObject {
    objects
        .iter()
        .find(|o| {
            o.types.as_ref().is_some_and(|t| t.kind == kind)
                && o.metadata.name.as_deref() == Some(name)
        })
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

#[test]
fn helm_lint_strict_is_clean() {
    for extra in [
        &[][..],
        &[
            "--set",
            "provider.enabled=true",
            "--set",
            "provider.wasmBase64=AGFzbQ==",
            "--set",
            "dashboards.enabled=true",
        ][..],
    ] {
        let mut cmd = helm(None);
        cmd.args(["lint", "--strict"]).arg(chart()).args(extra);
        let (ok, out, err) = run(cmd);
        assert!(ok, "helm lint --strict {extra:?}:\n{out}\n{err}");
        assert!(
            out.contains("1 chart(s) linted, 0 chart(s) failed"),
            "{out}"
        );
        assert!(
            !out.contains("[WARNING]") && !out.contains("[ERROR]"),
            "{out}"
        );
    }
}

#[test]
fn helm_template_renders_a_locked_down_deployment_and_least_privilege_rbac() {
    let objects = template(&[]);
    let mut kinds: Vec<String> = objects
        .iter()
        .filter_map(|o| o.types.as_ref().map(|t| t.kind.clone()))
        .collect();
    kinds.sort();
    kinds.dedup();
    for kind in [
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "PodDisruptionBudget",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
    ] {
        assert!(
            kinds.contains(&kind.to_owned()),
            "{kind} missing: {kinds:?}"
        );
    }
    assert!(!kinds.contains(&"ServiceMonitor".to_owned()));
    assert!(!kinds.contains(&"Provider".to_owned()));

    let deployment = &find(&objects, "Deployment", "rel-capstan").data;
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let container = &pod["containers"][0];
    let security = &container["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"][0], "ALL");
    assert_eq!(container["image"], "capstan:0.1.0", "appVersion as the tag");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert!(container["resources"]["requests"]["cpu"].is_string());
    let args = container_args(container);
    for want in ["run", "--cache-dir=/var/cache/capstan"] {
        assert!(args.contains(&want), "{want} not in {args:?}");
    }
    // Karpenter's settings are environment variables, under Karpenter's names and defaults.
    let env = plain_env(container);
    assert_env(
        &env,
        &[
            ("LOG_LEVEL", "info"),
            ("LEADER_ELECTION_NAME", "rel-capstan"),
            ("DISABLE_LEADER_ELECTION", "false"),
            ("METRICS_PORT", "8080"),
            ("HEALTH_PROBE_PORT", "8081"),
            ("BATCH_MAX_DURATION", "10s"),
            ("BATCH_IDLE_DURATION", "1s"),
            (
                "FEATURE_GATES",
                "CapacityBuffer=false,NodeOverlay=false,NodeRepair=false,SpotToSpotConsolidation=false,TerminateFirstDrift=false",
            ),
        ],
    );
    let mounts = container["volumeMounts"].as_array().unwrap();
    assert!(
        mounts
            .iter()
            .any(|m| m["mountPath"] == "/var/cache/capstan"),
        "{mounts:?}"
    );

    // The Role is namespaced to the release and holds only ConfigMaps, Secrets (of Providers'
    // spec.config) and Leases.
    let role = &find(&objects, "Role", "rel-capstan");
    assert_eq!(role.metadata.namespace.as_deref(), Some("capstan-system"));
    let resources: Vec<&str> = role.data["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            r["resources"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|x| x.as_str())
        })
        .collect();
    assert_eq!(resources, ["configmaps", "secrets", "leases"]);
    // No wildcard anywhere in the host's ClusterRole; secrets never.
    let host_role =
        serde_json::to_string(&find(&objects, "ClusterRole", "rel-capstan").data).unwrap();
    assert!(
        !host_role.contains('*') && !host_role.contains("secrets"),
        "{host_role}"
    );
    // NodeOverlays (feature gate NodeOverlay) are read and their status written.
    assert!(
        host_role.contains("\"nodeoverlays\"") && host_role.contains("nodeoverlays/status"),
        "{host_role}"
    );
    // CapacityBuffers (feature gate CapacityBuffer): read, their status written, and the
    // PodTemplates and workloads they take their pod shape from read.
    // Default topology spread (--scheduler-config): the objects selectors are deduced from.
    for resource in [
        "\"services\"",
        "\"replicationcontrollers\"",
        "\"replicasets\"",
        "\"statefulsets\"",
    ] {
        assert!(host_role.contains(resource), "{resource}: {host_role}");
    }
    for resource in [
        "\"capacitybuffers\"",
        "capacitybuffers/status",
        "\"podtemplates\"",
        "\"deployments\"",
    ] {
        assert!(host_role.contains(resource), "{resource}: {host_role}");
    }
    // Dynamic Resource Allocation (on unless settings.ignoreDRARequests): pods' claims, their
    // templates, device classes and the nodes' slices, read only.
    for resource in [
        "\"resourceclaims\"",
        "\"resourceclaimtemplates\"",
        "\"deviceclasses\"",
        "\"resourceslices\"",
    ] {
        assert!(host_role.contains(resource), "{resource}: {host_role}");
    }
    let ignoring = template(&["--set", "settings.ignoreDRARequests=true"]);
    let ignoring_role =
        serde_json::to_string(&find(&ignoring, "ClusterRole", "rel-capstan").data).unwrap();
    assert!(
        !ignoring_role.contains("resource.k8s.io"),
        "{ignoring_role}"
    );
    let providers =
        serde_json::to_string(&find(&objects, "ClusterRole", "rel-capstan-providers").data)
            .unwrap();
    assert!(
        providers.contains("nodes/status") && providers.contains("create"),
        "{providers}"
    );
    let labels = &find(&objects, "Deployment", "rel-capstan").metadata.labels;
    let labels = labels.as_ref().unwrap();
    for key in [
        "app.kubernetes.io/name",
        "app.kubernetes.io/instance",
        "app.kubernetes.io/version",
        "app.kubernetes.io/managed-by",
        "helm.sh/chart",
    ] {
        assert!(labels.contains_key(key), "{key} missing: {labels:?}");
    }
}

#[test]
fn an_image_digest_pins_the_image() {
    let digest = format!("sha256:{}", "ab".repeat(32));
    let objects = template(&[
        "--set",
        "image.repository=registry.example/capstan",
        "--set",
        &format!("image.digest={digest}"),
    ]);
    let deployment = &find(&objects, "Deployment", "rel-capstan").data;
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        format!("registry.example/capstan:0.1.0@{digest}").as_str()
    );
}

#[test]
fn the_charts_provider_can_come_from_an_oci_registry_with_signatures_required() {
    let objects = template(&[
        "--set",
        "provider.enabled=true",
        "--set",
        "provider.name=kwok",
        "--set",
        "provider.oci.reference=registry.example.com/providers/kwok:v1",
        "--set",
        "provider.oci.pullSecret=registry-creds",
        "--set",
        "provider.oci.pollInterval=2m",
        "--set",
        "provider.verification.keys[0].configMapKeyRef.name=provider-keys",
        "--set",
        "provider.verification.keys[0].configMapKeyRef.key=cosign.pub",
        "--set",
        "requireProviderVerification=true",
    ]);
    assert!(
        !objects.iter().any(|o| {
            o.types.as_ref().is_some_and(|t| t.kind == "ConfigMap")
                && o.metadata.name.as_deref() == Some("rel-capstan-provider-kwok")
        }),
        "no component ConfigMap for an OCI source"
    );
    let provider = &find(&objects, "Provider", "kwok").data["spec"];
    assert_eq!(
        provider["source"],
        serde_json::json!({"oci": {
            "reference": "registry.example.com/providers/kwok:v1",
            "namespace": "capstan-system",
            "pullSecret": "registry-creds",
            "pollInterval": "2m",
        }})
    );
    let spec: capstan::api::ProviderSpec = serde_json::from_value(provider.clone()).unwrap();
    assert_eq!(spec.verification.unwrap().keys.len(), 1);
    let deployment = &find(&objects, "Deployment", "rel-capstan").data;
    let env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(
        env.as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "CAPSTAN_REQUIRE_PROVIDER_VERIFICATION" && e["value"] == "true"),
        "{env}"
    );
}

#[test]
fn a_provider_installed_with_the_chart_renders_a_configmap_a_provider_and_its_rbac() {
    let objects = template(&[
        "--set",
        "provider.enabled=true",
        "--set",
        "provider.name=fake",
        "--set",
        "provider.wasmBase64=AGFzbQEAAAA=",
        "--set",
        "provider.grants[0].apiGroups[0]=core",
        "--set",
        "provider.grants[0].resources[0]=configmaps",
        "--set",
        "provider.grants[0].verbs[0]=get",
        "--set",
        "provider.grants[0].namespaces[0]=default",
        "--set",
        "provider.limits.concurrency=4",
        "--set",
        "provider.egress[0]=https://api.example.com",
        "--set",
        "provider.egressCABundle.name=ca",
        "--set",
        "provider.egressCABundle.key=ca.crt",
        "--set",
        "provider.config[0].name=endpoint",
        "--set",
        "provider.config[0].value=https://api.example.com/v1",
        "--set",
        "provider.config[1].name=api-key",
        "--set",
        "provider.config[1].secretKeyRef.name=creds",
        "--set",
        "provider.config[1].secretKeyRef.key=key",
        "--set",
        "managementKubeconfig.secretName=mgmt",
        "--set",
        "metrics.serviceMonitor.enabled=true",
    ]);
    let config_map = find(&objects, "ConfigMap", "rel-capstan-provider-fake");
    assert_eq!(
        config_map.data["binaryData"]["provider.wasm"],
        "AGFzbQEAAAA="
    );
    let provider = &find(&objects, "Provider", "fake").data["spec"];
    assert_eq!(
        provider["source"]["configMap"],
        serde_json::json!({"namespace": "capstan-system", "name": "rel-capstan-provider-fake", "key": "provider.wasm"})
    );
    assert_eq!(provider["grants"][0]["resources"][0], "configmaps");
    assert_eq!(provider["limits"]["concurrency"], 4);
    assert_eq!(
        provider["egress"],
        serde_json::json!(["https://api.example.com"])
    );
    assert_eq!(
        provider["egressCABundle"],
        serde_json::json!({"name": "ca", "key": "ca.crt"})
    );
    assert_eq!(
        provider["config"],
        serde_json::json!([
            {"name": "endpoint", "value": "https://api.example.com/v1"},
            {"name": "api-key", "secretKeyRef": {"name": "creds", "key": "key"}},
        ])
    );
    // What the chart renders is what the Provider CRD takes.
    let spec: capstan::api::ProviderSpec = serde_json::from_value(provider.clone()).unwrap();
    assert_eq!(spec.config.len(), 2);
    // The provider's grant reaches the host's RBAC, `core` spelled as RBAC's "".
    let rules = find(&objects, "ClusterRole", "rel-capstan-providers").data["rules"].clone();
    assert!(
        rules
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["apiGroups"][0] == ""
                && r["resources"][0] == "configmaps"
                && r["verbs"][0] == "get"),
        "{rules}"
    );
    let deployment = &find(&objects, "Deployment", "rel-capstan").data;
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(
        args.contains("--management-kubeconfig=/etc/capstan/management/kubeconfig"),
        "{args}"
    );
    find(&objects, "ServiceMonitor", "rel-capstan");
}

/// The container's environment variables that have a plain value, by name.
fn plain_env(container: &serde_json::Value) -> std::collections::BTreeMap<String, String> {
    container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            Some((
                e["name"].as_str()?.to_owned(),
                e["value"].as_str()?.to_owned(),
            ))
        })
        .collect()
}

/// Asserts the environment has each `(name, value)`.
fn assert_env(env: &std::collections::BTreeMap<String, String>, want: &[(&str, &str)]) {
    for (name, value) in want {
        assert_eq!(
            env.get(*name).map(String::as_str),
            Some(*value),
            "{name}: {env:?}"
        );
    }
}

/// A values file written the way a Karpenter user writes it (the keys both charts have, including
/// Karpenter's feature gates Capstan does not implement): rendered into Karpenter's environment
/// variables, which the host reads and reports (`capstan run --print-settings` with the
/// Deployment's own arguments and environment).
#[test]
fn karpenter_style_helm_values_become_the_hosts_settings() {
    let values = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{}-karpenter-values.yaml", unique_name("kv")));
    std::fs::write(
        &values,
        "logLevel: debug\n\
         settings:\n\
         \x20 batchMaxDuration: 20s\n\
         \x20 batchIdleDuration: 2s\n\
         \x20 preferencePolicy: Ignore\n\
         \x20 minValuesPolicy: BestEffort\n\
         \x20 ignoreDRARequests: true\n\
         \x20 schedulerConfig:\n\
         \x20   podTopologySpread:\n\
         \x20     defaultConstraints:\n\
         \x20       - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule}\n\
         \x20 featureGates:\n\
         \x20   nodeRepair: true\n\
         \x20   spotToSpotConsolidation: true\n\
         \x20   reservedCapacity: true\n\
         \x20   nodeOverlay: false\n",
    )
    .unwrap();
    let objects = template(&[
        "--values",
        values.to_str().unwrap(),
        "--set",
        "settings.kubeClientQPS=50",
        "--set",
        "settings.kubeClientBurst=75",
    ]);
    let deployment = &find(&objects, "Deployment", "rel-capstan").data;
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let env = plain_env(container);
    assert_env(
        &env,
        &[
            ("LOG_LEVEL", "debug"),
            ("BATCH_MAX_DURATION", "20s"),
            ("BATCH_IDLE_DURATION", "2s"),
            ("PREFERENCE_POLICY", "Ignore"),
            ("MIN_VALUES_POLICY", "BestEffort"),
            ("IGNORE_DRA_REQUESTS", "true"),
            ("KUBE_CLIENT_QPS", "50"),
            ("KUBE_CLIENT_BURST", "75"),
            (
                "FEATURE_GATES",
                "CapacityBuffer=false,NodeOverlay=false,NodeRepair=true,ReservedCapacity=true,SpotToSpotConsolidation=true,TerminateFirstDrift=false",
            ),
        ],
    );

    // The host with the Deployment's arguments and environment (and nothing else of ours).
    let args = container_args(container);
    let out = with_print_settings(&args, &env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let settings: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(settings["logLevel"], "debug");
    assert_eq!(settings["batchMaxDuration"], "20s");
    assert_eq!(settings["batchIdleDuration"], "2s");
    assert_eq!(settings["preferencePolicy"], "Ignore");
    assert_eq!(settings["minValuesPolicy"], "BestEffort");
    assert_eq!(settings["ignoreDraRequests"], true);
    assert_eq!(settings["kubeClientQPS"], 50);
    assert_eq!(settings["kubeClientBurst"], 75);
    assert_eq!(settings["leaderElection"], true);
    assert_eq!(settings["leaderElectionName"], "rel-capstan");
    assert_eq!(settings["metricsAddress"], "0.0.0.0:8080");
    assert_eq!(settings["healthProbeAddress"], "0.0.0.0:8081");
    assert_eq!(settings["featureGates"]["nodeRepair"], true);
    assert_eq!(settings["featureGates"]["spotToSpotConsolidation"], true);
    assert_eq!(settings["featureGates"]["nodeOverlay"], false);
    assert_eq!(settings["featureGates"]["capacityBuffer"], false);
    assert_eq!(settings["featureGates"]["terminateFirstDrift"], false);
    // settings.schedulerConfig reaches the host as SCHEDULER_CONFIG, checked and taken.
    assert_eq!(settings["defaultTopologySpreadConstraints"], 1);
    assert_eq!(
        settings["featureGates"]["ignored"],
        serde_json::json!(["ReservedCapacity=true"])
    );

    // A gate neither Karpenter nor Capstan has is refused, naming it.
    let out = with_print_settings(&["run"], [("FEATURE_GATES", "NodeRepair=true,Drift=true")]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown feature gate \"Drift\""),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The metric names a PromQL expression reads (`karpenter_*` and `capstan_*`).
pub(crate) fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let rest = &expr[i..];
        let starts = (rest.starts_with("karpenter_") || rest.starts_with("capstan_"))
            && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'));
        if starts {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            names.push(rest[..end].to_owned());
            i += end;
        } else {
            i += 1;
        }
    }
    names
}

#[test]
fn the_grafana_dashboard_renders_when_enabled_and_queries_only_exported_metrics() {
    let off = template(&[]);
    assert!(
        !off.iter().any(|o| o.name_any() == "rel-capstan-dashboard"),
        "the dashboard is off by default"
    );
    let objects = template(&[
        "--set",
        "dashboards.enabled=true",
        "--set",
        "dashboards.labels.team=platform",
    ]);
    let config_map = find(&objects, "ConfigMap", "rel-capstan-dashboard");
    let labels = config_map.labels();
    assert_eq!(
        labels.get("grafana_dashboard").map(String::as_str),
        Some("1")
    );
    assert_eq!(labels.get("team").map(String::as_str), Some("platform"));
    let text = config_map.data["data"]["capstan.json"].as_str().unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(text).expect("valid JSON");
    let file = std::fs::read_to_string(chart().join("dashboards/capstan.json")).unwrap();
    assert_eq!(
        dashboard,
        serde_json::from_str::<serde_json::Value>(&file).unwrap(),
        "the ConfigMap carries the file"
    );
    // What the host exports (the registry's names: a family renders only once it has series).
    let exported = capstan::serve::exported_names(&capstan::metrics::Metrics::new());
    let mut queried = std::collections::BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            queried.extend(metric_names(target["expr"].as_str().unwrap()));
        }
    }
    assert!(queried.len() >= 20, "{queried:?}");
    for name in &queried {
        // A histogram's series are its name with `_bucket`, `_count` or `_sum`.
        let histogram = ["_bucket", "_count", "_sum"]
            .iter()
            .filter_map(|suffix| name.strip_suffix(suffix))
            .any(|base| exported.iter().any(|e| e == base));
        assert!(
            exported.contains(name) || histogram,
            "the dashboard queries {name}, which the host does not export"
        );
    }
    for wanted in [
        "karpenter_nodepools_usage",
        "karpenter_nodeclaims_launched_total",
        "karpenter_nodeclaims_terminated_total",
        "karpenter_nodeclaims_disrupted_total",
        "karpenter_pods_startup_duration_seconds_bucket",
        "karpenter_scheduler_scheduling_duration_seconds_bucket",
        "karpenter_voluntary_disruption_decisions_total",
        "karpenter_cloudprovider_errors_total",
        "capstan_provider_loads_total",
        "capstan_nodeclaims_consolidation_blocked",
    ] {
        assert!(queried.contains(wanted), "the dashboard shows {wanted}");
    }
}

#[test]
fn metric_names_are_read_from_promql() {
    assert_eq!(
        metric_names(
            r#"histogram_quantile(0.99, sum by (le) (rate(karpenter_pods_startup_duration_seconds_bucket[5m]))) / my_karpenter_x + capstan_provider_loads_total{a="b"}"#
        ),
        [
            "karpenter_pods_startup_duration_seconds_bucket",
            "capstan_provider_loads_total"
        ]
    );
}

#[test]
fn the_schema_rejects_bad_values_naming_them() {
    for (set, named) in [
        ("logLevel=loud", "/logLevel"),
        ("replicas=two", "/replicas"),
        ("logFormat=xml", "/logFormat"),
        (
            "settings.batchIdleDuration=soon",
            "/settings/batchIdleDuration",
        ),
        (
            "settings.preferencePolicy=Sometimes",
            "/settings/preferencePolicy",
        ),
        (
            "settings.featureGates.nodeRepair=maybe",
            "/settings/featureGates/nodeRepair",
        ),
        ("settings.clusterName=prod", "clusterName"),
        (
            "leaderElection.leaseDuration=15",
            "/leaderElection/leaseDuration",
        ),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("image.digest=latest", "/image/digest"),
        ("provider.enabled=true", "/provider/wasmBase64"),
        ("provider.sha256=abc", "/provider/sha256"),
        ("provider.egress[0]=ftp://x", "/provider/egress/0"),
        ("provider.config[0].name=k", "/provider/config/0"),
        (
            "rbac.providerRules[0].verbs[0]=own",
            "/rbac/providerRules/0/verbs/0",
        ),
        ("replica=3", "replica"),
    ] {
        let mut cmd = helm(None);
        cmd.args(["template", "rel"])
            .arg(chart())
            .args(["--set", set]);
        let (ok, _, err) = run(cmd);
        assert!(!ok, "--set {set} was accepted");
        assert!(err.contains("schema"), "--set {set}: {err}");
        assert!(
            err.contains(named),
            "--set {set}: the error does not name {named}:\n{err}"
        );
    }
}

/// A kubeconfig for the control plane that authenticates with `token`.
fn token_kubeconfig(cp: &ControlPlane, token: &str, path: &Path) {
    let admin = Kubeconfig::read_from(cp.kubeconfig_path()).unwrap();
    let cluster = admin.clusters[0].cluster.clone().unwrap();
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cp", "cluster": cluster}],
        "users": [{"name": "chart", "user": {"token": token}}],
        "contexts": [{"name": "chart", "context": {"cluster": "cp", "user": "chart"}}],
        "current-context": "chart",
    });
    std::fs::write(path, serde_json::to_string(&config).unwrap()).unwrap();
}

/// `helm install`s the chart `make chart` packaged for the built image (its reference and digest in
/// the values) as `release` into `release_ns`, with the kwok provider (its grants, the test run's
/// label so only this test's host loads it) and `values` (more top-level YAML keys). Checks the
/// Deployment names the image by digest; returns the Provider's name.
pub(crate) fn install_package(
    cp: &ControlPlane,
    names: &Names,
    release: &str,
    release_ns: &str,
    values: &str,
) -> String {
    let image = crate::image::BuiltImage::current();
    let package = image.chart_package();
    // The kwok provider ships with the chart: base64 for --set-file, its grants in a values file.
    let provider = names.name("kwok");
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let wasm = std::fs::read(providers_dir().join("kwok.wasm")).unwrap();
    let encoded = serde_json::to_value(k8s_openapi::ByteString(wasm)).unwrap();
    let wasm_b64 = tmp.join(format!("{release}-kwok.wasm.b64"));
    std::fs::write(&wasm_b64, encoded.as_str().unwrap()).unwrap();
    let values_file = tmp.join(format!("{release}-values.yaml"));
    let grants = crate::conformance::KWOK_GRANTS.replace('\n', "\n    ");
    std::fs::write(
        &values_file,
        format!(
            "replicas: 0\nprovider:\n  enabled: true\n  name: {provider}\n  labels:\n    \
             {RUN_LABEL}: {}\n  grants:\n    {grants}\n{values}",
            names.run
        ),
    )
    .unwrap();
    let mut install = helm(Some(cp.kubeconfig_path()));
    install
        .args(["install", release])
        .arg(&package)
        .args(["--namespace", release_ns, "--values"])
        .arg(&values_file)
        .arg("--set-file")
        .arg(format!("provider.wasmBase64={}", wasm_b64.display()));
    let (ok, out, err) = run(install);
    assert!(ok, "helm install {}:\n{out}\n{err}", package.display());
    assert!(
        out.contains(&format!("kubectl get provider {provider}")),
        "NOTES.txt: {out}"
    );
    let mut get = cp.kubectl();
    get.args([
        "get",
        "deployment",
        &format!("{release}-capstan"),
        "--namespace",
        release_ns,
        "-o",
        "jsonpath={.spec.template.spec.containers[0].image}",
    ]);
    let got = get.output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&got.stdout),
        image.reference(),
        "the packaged chart's image"
    );
    provider
}

/// Deletes `made` (their pods still running, so the drain evicts them) and waits until the host has
/// terminated them (drained, the Node and the instance deleted, the finalizer dropped); then deletes
/// the pods in `ns` and every claim left of `names`' run (a replacement the host may have launched
/// ahead of the drain for the evicted pods, as Karpenter does) and waits until none is left.
pub(crate) async fn terminate(
    client: &Client,
    names: &Names,
    made: &[NodeClaim],
    ns: &str,
) -> capstan_test_support::Result<()> {
    let api = Api::<NodeClaim>::all(client.clone());
    for claim in made {
        api.delete(&claim.name_any(), &DeleteParams::default())
            .await
            .unwrap();
    }
    let made: Vec<String> = made.iter().map(|c| c.name_any()).collect();
    wait_until(
        Duration::from_secs(120),
        "the NodeClaims drained and terminated",
        || async {
            let left = claims(client, names).await;
            Ok::<_, kube::Error>((!left.iter().any(|c| made.contains(&c.name_any()))).then_some(()))
        },
    )
    .await?;
    Api::<Pod>::namespaced(client.clone(), ns)
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    for claim in claims(client, names).await {
        let _ = api
            .delete(&claim.name_any(), &DeleteParams::default())
            .await;
    }
    wait_until(
        Duration::from_secs(120),
        "every NodeClaim terminated",
        || async { Ok::<_, kube::Error>(claims(client, names).await.is_empty().then_some(())) },
    )
    .await
}

/// Panics, with `tail()`, if the host's log shows the API server refused it anything.
pub(crate) fn assert_nothing_forbidden(log: &str, tail: impl FnOnce() -> String) {
    assert!(
        !log.to_lowercase().contains("forbidden"),
        "the chart's RBAC refused something:\n{}",
        tail()
    );
}

/// `helm uninstall`.
pub(crate) fn uninstall(cp: &ControlPlane, release: &str, release_ns: &str) {
    let mut uninstall = helm(Some(cp.kubeconfig_path()));
    uninstall.args(["uninstall", release, "--namespace", release_ns]);
    let (ok, _, err) = run(uninstall);
    assert!(ok, "helm uninstall: {err}");
}

#[tokio::test]
async fn a_host_with_only_the_charts_service_account_provisions_nodes() {
    let (cp, client) = cluster().await;
    let names = Names::new("chart");
    let release_ns = namespace(cp, "capstan").await;
    let release = unique_name("chart");
    let fullname = format!("{release}-capstan");
    let provider = install_package(cp, &names, &release, &release_ns, "");

    let mut token = cp.kubectl();
    token.args([
        "create",
        "token",
        &fullname,
        "--namespace",
        &release_ns,
        "--duration",
        "1h",
    ]);
    let token = token.output().unwrap();
    assert!(
        token.status.success(),
        "{}",
        String::from_utf8_lossy(&token.stderr)
    );
    let kubeconfig = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{release}.kubeconfig"));
    token_kubeconfig(
        cp,
        String::from_utf8_lossy(&token.stdout).trim(),
        &kubeconfig,
    );

    // The chart's identity can do what the host needs and no more than the chart says.
    let mut can = cp.kubectl();
    can.args([
        "auth",
        "can-i",
        "get",
        "secrets",
        "--all-namespaces",
        "--kubeconfig",
    ])
    .arg(&kubeconfig);
    let denied = can.env_remove("KUBECONFIG").output().unwrap();
    assert_eq!(String::from_utf8_lossy(&denied.stdout).trim(), "no");

    let host = Replica::spawn(
        &kubeconfig,
        &names,
        &names.name("host"),
        &release_ns,
        &fullname,
        &[("CAPSTAN_PROVIDER_SOURCE_NAMESPACE", &release_ns)],
        false,
    );
    host.wait_log("acquired the lease", Duration::from_secs(120))
        .await;
    let pool = kwok_pool(&client, &names, &provider).await;
    let ns = namespace(cp, "chartpods").await;
    nodepool_pods(&client, &names, &ns, ("web", 3), &pool).await;
    wait_running(&client, &ns, 3, &[&host]).await;
    let made = claims(&client, &names).await;
    assert!(!made.is_empty());
    let (status, report) = http_get(&host.probe_address().unwrap(), "/readyz").await;
    assert_eq!(status, 200, "{report}");
    assert_nothing_forbidden(&host.log(), || host.log_tail());
    // Termination too: drain (evictions), delete the Node, delete the instance, drop the
    // finalizer.
    let gone = terminate(&client, &names, &made, &ns).await;
    assert!(gone.is_ok(), "{gone:?}\n{}", host.log_tail());
    assert_nothing_forbidden(&host.log(), || host.log_tail());
    println!(
        "chart RBAC: kwok loaded from the chart's Provider; {} NodeClaim(s) for 3 pods, then \
         terminated, with the ServiceAccount of \
         release {release}",
        made.len()
    );
    teardown(&client, &names, &ns).await;
    drop(host);
    uninstall(cp, &release, &release_ns);
}
