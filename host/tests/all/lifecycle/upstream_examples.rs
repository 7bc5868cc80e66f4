//! Compatibility on the real control plane: every upstream NodePool example is accepted by
//! Capstan's CRDs (`crds/`), and malformed NodePools are rejected with a clear message.

use capstan_test_support::{parse_yaml, shared_upstream_dir};
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

/// The NodePool documents of the upstream examples.
fn upstream_node_pools() -> Vec<(String, DynamicObject)> {
    let dir = shared_upstream_dir();
    let mut files = vec![
        dir.join("karpenter/default_nodepool.yaml"),
        dir.join("karpenter-provider-cluster-api/default_nodepool.yaml"),
    ];
    let mut excerpts: Vec<_> = std::fs::read_dir(dir.join("karpenter/excerpts"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    excerpts.sort();
    files.extend(excerpts);
    let mut pools = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let source = file.display().to_string();
        for obj in parse_yaml(&source, &text).unwrap() {
            if obj.types.as_ref().is_some_and(|t| t.kind == "NodePool") {
                pools.push((source.clone(), obj));
            }
        }
    }
    pools
}

#[tokio::test]
async fn upstream_node_pool_examples_are_accepted_and_malformed_ones_rejected() {
    let (_cp, client) = cluster().await;
    let api = node_pools_api(&client);
    let names = Names::new("examples");
    let pools = upstream_node_pools();
    assert_eq!(pools.len(), 4, "default, cluster-api default, two excerpts");
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
