//! With the upstream karpenter.sh CRDs installed instead of Capstan's, the host still works.

use std::time::Duration;

use capstan::api::NodeClaim;
use capstan_test_support::upstream::{self, KARPENTER_NODECLAIMS_CRD, KARPENTER_NODEPOOLS_CRD};
use capstan_test_support::{ControlPlane, Options, repo_root};
use kube::Api;
use kube::api::DeleteParams;
use serde_json::json;

use super::*;

#[tokio::test]
async fn works_with_the_upstream_karpenter_crds() {
    let mut crds = upstream::paths(&[KARPENTER_NODEPOOLS_CRD, KARPENTER_NODECLAIMS_CRD])
        .unwrap_or_else(|err| panic!("{err}"));
    crds.push(repo_root().join("crds/capstan.dev_nodeclasses.yaml"));
    crds.push(repo_root().join("crds/capstan.dev_providers.yaml"));
    let cp = ControlPlane::start(Options::default())
        .await
        .expect("control plane");
    cp.install_crds_from_files(&crds)
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
