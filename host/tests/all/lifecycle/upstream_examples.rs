//! Compatibility with upstream's NodePool examples: each deserializes into Capstan's types and, on
//! the real control plane, is accepted by Capstan's CRDs (`crds/`); malformed NodePools are
//! rejected with a clear message.

use capstan::api::NodePool;
use capstan_test_support::parse_yaml;
use capstan_test_support::upstream::NODEPOOL_EXAMPLES;
use kube::api::{DynamicObject, PostParams};
use kube::discovery::ApiResource;
use kube::{Api, Client};
use serde_json::json;

use super::*;

fn node_pools_api(client: &Client) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "karpenter.sh".into(),
        version: "v1".into(),
        api_version: "karpenter.sh/v1".into(),
        kind: "NodePool".into(),
        plural: "nodepools".into(),
    };
    Api::all_with(client.clone(), &ar)
}

fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        ..PostParams::default()
    }
}

/// The NodePool documents of the upstream examples, each with where it came from.
fn upstream_node_pools() -> Vec<(String, DynamicObject)> {
    let mut pools = Vec::new();
    for file in NODEPOOL_EXAMPLES {
        let text = file.read().unwrap_or_else(|err| panic!("{err}"));
        let source = file.to_string();
        for obj in parse_yaml(&source, &text).unwrap() {
            if obj.types.as_ref().is_some_and(|t| t.kind == "NodePool") {
                pools.push((source.clone(), obj));
            }
        }
    }
    pools
}

#[test]
fn upstream_node_pool_examples_deserialize_into_our_types() {
    let pools = upstream_node_pools();
    assert_eq!(pools.len(), 3, "default, kwok README, test README");
    for (source, pool) in pools {
        let pool: NodePool = serde_json::from_value(serde_json::to_value(pool).unwrap())
            .unwrap_or_else(|err| panic!("{source}: {err}"));
        assert!(!pool.spec.template.spec.requirements.is_empty(), "{source}");
    }
}

#[tokio::test]
async fn upstream_node_pool_examples_are_accepted_and_malformed_ones_rejected() {
    let (_cp, client) = cluster().await;
    let api = node_pools_api(&client);
    let names = Names::new("examples");
    let pools = upstream_node_pools();
    assert_eq!(pools.len(), 3, "default, kwok README, test README");
    for (i, (source, mut pool)) in pools.into_iter().enumerate() {
        pool.metadata.name = Some(names.name(&format!("upstream-{i}")));
        let created = api.create(&dry_run(), &pool).await;
        let created = created.unwrap_or_else(|err| panic!("{source} rejected: {err}"));
        // Defaults the CRD fills in are there (the example's own values are kept).
        let spec = &created.data["spec"];
        assert!(
            spec["template"]["spec"]["requirements"].is_array(),
            "{source}: {spec}"
        );
        assert!(
            spec["disruption"]["consolidateAfter"].is_string(),
            "{source}: {spec}"
        );
        println!("accepted {source}");
    }

    let good = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": names.name("malformed")},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "x"},
            "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
            "expireAfter": "720h",
        }}},
    });
    let accepted: DynamicObject = serde_json::from_value(good.clone()).unwrap();
    api.create(&dry_run(), &accepted)
        .await
        .expect("the well-formed pool");

    let cases = [
        (
            "bad operator",
            json!({"key": "kubernetes.io/arch", "operator": "Sometimes", "values": ["amd64"]}),
            None,
            "operator",
        ),
        (
            "bad expireAfter",
            json!({"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}),
            Some("forever"),
            "expireAfter",
        ),
    ];
    for (what, requirement, expire_after, field) in cases {
        let mut pool = good.clone();
        pool["spec"]["template"]["spec"]["requirements"] = json!([requirement]);
        if let Some(expire_after) = expire_after {
            pool["spec"]["template"]["spec"]["expireAfter"] = json!(expire_after);
        }
        let pool: DynamicObject = serde_json::from_value(pool).unwrap();
        let err = api
            .create(&dry_run(), &pool)
            .await
            .expect_err(&format!("{what} was accepted"));
        let kube::Error::Api(status) = err else {
            panic!("{what}: not an API error: {err}");
        };
        println!("{what}: {} {}", status.code, status.message);
        assert_eq!(status.code, 422, "{what}: {status:?}");
        assert!(status.message.contains(field), "{what}: {}", status.message);
    }
}
