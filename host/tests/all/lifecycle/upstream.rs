//! With the upstream karpenter.sh CRDs installed instead of Capstan's, the host still works.

use std::time::Duration;

use capstan::api::NodeClaim;
use capstan_test_support::{ControlPlane, Options, repo_root, shared_upstream_dir};
use kube::Api;
use kube::api::DeleteParams;
use serde_json::json;

use super::*;

#[tokio::test]
async fn works_with_the_upstream_karpenter_crds() {
    let cp = ControlPlane::start(Options::default())
        .await
        .expect("control plane");
    let upstream = shared_upstream_dir().join("karpenter");
    cp.install_crds_from_files(&[
        upstream.join("karpenter.sh_nodepools.yaml"),
        upstream.join("karpenter.sh_nodeclaims.yaml"),
        repo_root().join("crds/capstan.dev_nodeclasses.yaml"),
        repo_root().join("crds/capstan.dev_providers.yaml"),
    ])
    .await
    .expect("install CRDs");
    let client = cp.client().unwrap();
    let names = Names::new("upstream");
    let host = Host::start(&cp, &names, &[]);
    let (class, pool, name) = (names.name("nc"), names.name("pool"), names.name("claim"));
    node_class(&client, &names, &class, "kwok", json!({})).await;
    node_pool(&client, node_pool_json(&names, &pool, &class)).await;
    claim(&client, claim_json(&names, &name, &pool, &class)).await;
    wait_condition(
        &client,
        &host,
        &name,
        "Launched",
        "True",
        None,
        Duration::from_secs(90),
    )
    .await;
    wait_condition(
        &client,
        &host,
        &name,
        "Registered",
        "True",
        None,
        Duration::from_secs(60),
    )
    .await;
    wait_condition(
        &client,
        &host,
        &name,
        "Initialized",
        "True",
        None,
        Duration::from_secs(60),
    )
    .await;
    Api::<NodeClaim>::all(client.clone())
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    wait_claim_gone(&client, &host, &name, Duration::from_secs(60)).await;
    host.check_alive();
}
