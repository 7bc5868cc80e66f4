//! Contract 0.3's paged lists on a real API server: the kwok provider (built against 0.3) lists
//! more Nodes than one answer of the host may hold (`MAX_RESPONSE_BYTES`), a page at a time.
//! Before 0.3 a provider could not: one `list` answer is all it got, and past 16 MiB (about 2,600
//! kwok Nodes) the call failed, and with it garbage collection, every pass.

use capstan::capability::Capabilities;
use capstan::capability::grants::{Cluster, parse};
use capstan::capability::kube::{ClusterConnection, ListOptions, MAX_RESPONSE_BYTES, Target};
use capstan::runtime::Limits;
use capstan_test_support::{ControlPlane, Options};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::conformance::KWOK_GRANTS;
use crate::fixtures::{kwok_compiled, runtime};

/// Nodes in the cluster: more than two of the SDK's pages (500).
const NODES: usize = 1_100;
/// Bytes of image names in each Node's status (the provider does not read them): together past
/// the host's cap on one answer.
const FILLER_BYTES: usize = 16 << 10;

/// A kwok provider's Node as the provider launches them, with `status.images` padded.
fn node(index: usize) -> Node {
    let name = format!("paged-{index:04}");
    let images: Vec<_> = (0..16)
        .map(|image| {
            let tag = "x".repeat(FILLER_BYTES / 16 - 64);
            json!({"names": [format!("registry.example/filler/{image}:{tag}")], "sizeBytes": 1})
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"capstan.dev/provider": "kwok", "kubernetes.io/hostname": name},
        },
        "spec": {"providerID": format!("kwok://{name}")},
        "status": {
            "capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
            "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"},
            "images": images,
        },
    }))
    .unwrap()
}

#[tokio::test]
async fn a_provider_lists_more_nodes_than_one_answer_holds() {
    // A private API server: a thousand Nodes would disturb the tests sharing the usual one.
    let cp = ControlPlane::start(Options::api_server_only())
        .await
        .expect("control plane");
    let client = cp.client().unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    futures::stream::iter(0..NODES)
        .map(|i| {
            let nodes = nodes.clone();
            async move { nodes.create(&PostParams::default(), &node(i)).await }
        })
        .buffer_unordered(8)
        .try_collect::<Vec<_>>()
        .await
        .unwrap();

    let caps = Capabilities::builder("kwok")
        .grants(parse::from_text(KWOK_GRANTS).unwrap())
        .workload(ClusterConnection::new(Cluster::Workload, client))
        .build();
    let target = Target {
        cluster: Cluster::Workload,
        api_version: "v1".into(),
        kind: "Node".into(),
        namespace: None,
    };

    // The list in one answer is past the cap: what any 0.1 or 0.2 provider would get.
    let whole = caps.kube().list(&target, &ListOptions::default()).await;
    let err = whole.expect_err("one answer cannot hold the whole list");
    assert!(
        err.to_string()
            .contains(&format!("exceeds the limit of {MAX_RESPONSE_BYTES} bytes")),
        "{err}"
    );

    // The host passes a page's continue token on, as the API server gave it.
    let first = caps
        .kube()
        .list(
            &target,
            &ListOptions {
                limit: Some(600),
                ..ListOptions::default()
            },
        )
        .await
        .unwrap();
    let first: serde_json::Value = serde_json::from_str(&first).unwrap();
    let token = first["metadata"]["continue"].as_str().unwrap().to_owned();
    let rest = caps
        .kube()
        .list(
            &target,
            &ListOptions {
                continue_token: Some(token),
                ..ListOptions::default()
            },
        )
        .await
        .unwrap();
    let rest: serde_json::Value = serde_json::from_str(&rest).unwrap();
    assert_eq!(first["items"].as_array().unwrap().len(), 600);
    assert_eq!(rest["items"].as_array().unwrap().len(), NODES - 600);

    // The 0.3 kwok provider pages through them all, within its default memory limit.
    let provider = runtime()
        .instantiate_pre(kwok_compiled(), Limits::default(), caps.clone())
        .unwrap();
    let before = caps.metrics().snapshot().kube_calls;
    let claims = provider
        .list()
        .await
        .expect("the provider lists every Node");
    assert_eq!(claims.len(), NODES);
    let mut ids: Vec<_> = claims
        .iter()
        .filter_map(|c| c.provider_id.clone())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), NODES, "each Node once");
    let calls = caps.metrics().snapshot().kube_calls - before;
    assert_eq!(calls, NODES.div_ceil(500) as u64, "one call a page of 500");
    cp.stop().unwrap();
}
