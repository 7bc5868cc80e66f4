//! The supply chain end to end: the kwok provider pushed by `capstan provider push` to a real OCI
//! registry (CNCF distribution, on loopback; `oras pull` gets the same bytes back), signed with
//! cosign, checked by `capstan provider verify`, and served by a `capstan run` host that requires
//! signatures (`--require-provider-verification`): a NodeClaim of a pool on it launches,
//! registers and initializes.

use std::process::{Command, Output};
use std::time::Duration;

use capstan::api::provider::Provider;
use capstan_test_support::supply_chain::{OciRegistry, Workdir};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::fixtures::wasm;
use crate::lifecycle::{
    Host, Names, RUN_LABEL, claim, claim_json, cleanup, cluster, node_class, node_pool,
    node_pool_json, wait_condition,
};

/// Runs `capstan ARGS` in `work` (no docker config of the user's: `HOME` is the workdir).
pub fn capstan(work: &Workdir, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(args)
        .current_dir(work.path())
        .env("HOME", work.path())
        .env_remove("DOCKER_CONFIG")
        .output()
        .expect("capstan runs")
}

/// `capstan provider verify --oci REFERENCE --key KEY --plain-http` in `work`.
fn verify_oci(work: &Workdir, reference: &str, key: &str) -> Output {
    capstan(
        work,
        &[
            "provider",
            "verify",
            "--oci",
            reference,
            "--key",
            key,
            "--plain-http",
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_kwok_provider_from_a_registry_serves_a_pool() {
    let registry = OciRegistry::start().expect("registry");
    let work = Workdir::new("pool").expect("workdir");
    let (cp, client) = cluster().await;
    let names = Names::new("ocipool");
    let namespace = cp.create_namespace_unique("ocipool").await.unwrap();

    let reference = format!("{}/capstan/kwok:v1", registry.host());
    let component = wasm("kwok");
    work.write("kwok.wasm", &component).expect("component");
    let pushed = capstan(
        &work,
        &["provider", "push", "kwok.wasm", &reference, "--plain-http"],
    );
    assert!(pushed.status.success(), "{pushed:?}");
    let pinned = String::from_utf8_lossy(&pushed.stdout).trim().to_owned();
    let manifest = pinned
        .rsplit_once('@')
        .map(|(_, digest)| digest.to_owned())
        .unwrap_or_default();
    assert_eq!(
        work.resolve(&reference).expect("oras resolve"),
        manifest,
        "capstan printed the digest the registry serves"
    );
    let pulled = work
        .oras_pull(&reference, "pulled", "kwok.wasm")
        .expect("oras pull of capstan's push");
    assert!(pulled == component, "oras pulled other bytes than pushed");

    let public = work.cosign_key("release").expect("cosign key");
    work.cosign_key("other").expect("cosign key");
    let unsigned = verify_oci(&work, &pinned, "release.pub");
    assert!(!unsigned.status.success(), "{unsigned:?}");
    assert!(
        String::from_utf8_lossy(&unsigned.stderr).contains("SignatureMissing"),
        "{unsigned:?}"
    );
    work.cosign_sign("release", &pinned).expect("cosign sign");
    let verified = verify_oci(&work, &reference, "release.pub");
    assert!(verified.status.success(), "{verified:?}");
    assert!(
        String::from_utf8_lossy(&verified.stdout).contains("release.pub"),
        "{verified:?}"
    );
    let wrong_key = verify_oci(&work, &pinned, "other.pub");
    assert!(!wrong_key.status.success(), "{wrong_key:?}");
    assert!(
        String::from_utf8_lossy(&wrong_key.stderr).contains("SignatureInvalid"),
        "{wrong_key:?}"
    );
    let keys = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "provider-keys", "namespace": namespace},
        "data": {"cosign.pub": public},
    });
    Api::<ConfigMap>::namespaced(client.clone(), &namespace)
        .patch(
            "provider-keys",
            &PatchParams::apply("capstan-tests").force(),
            &Patch::Apply(&keys),
        )
        .await
        .unwrap();

    let provider = names.name("kwok");
    let spec = json!({
        "apiVersion": "capstan.dev/v1alpha1",
        "kind": "Provider",
        "metadata": {"name": provider, "labels": {RUN_LABEL: names.run}},
        "spec": {
            "source": {"oci": {"reference": reference, "namespace": namespace, "plainHttp": true}},
            "verification": {"keys": [{"configMapKeyRef": {"name": "provider-keys", "key": "cosign.pub"}}]},
            "grants": [
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "create", "patch", "delete"]},
                {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["get", "patch"]},
            ],
        },
    });
    Api::<Provider>::all(client.clone())
        .patch(
            &provider,
            &PatchParams::apply("capstan-tests").force(),
            &Patch::Apply(&spec),
        )
        .await
        .unwrap();
    let host = Host::start(
        cp,
        &names,
        &[
            "--provider-source-namespace",
            &namespace,
            "--require-provider-verification",
        ],
    );

    let (class, pool, name) = (names.name("nc"), names.name("pool"), names.name("claim"));
    node_class(&client, &names, &class, &provider, json!({})).await;
    node_pool(&client, node_pool_json(&names, &pool, &class)).await;
    claim(&client, claim_json(&names, &name, &pool, &class)).await;
    let initialized = wait_condition(
        &client,
        &host,
        &name,
        "Initialized",
        "True",
        None,
        Duration::from_secs(120),
    )
    .await;
    let provider_id = initialized.status.unwrap().provider_id.unwrap_or_default();
    assert_eq!(provider_id, format!("kwok://{name}"));

    let status = Api::<Provider>::all(client.clone())
        .get(&provider)
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(status.artifact_digest.as_deref(), Some(manifest.as_str()));
    assert!(
        status
            .signed_by
            .as_deref()
            .is_some_and(|key| key.contains("provider-keys")),
        "{status:?}"
    );
    cleanup(&client, &names).await;
    drop(host);
}
