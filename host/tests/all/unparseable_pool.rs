//! A NodePool the host cannot read (a value the installed CRD lets through but the host's types
//! do not take) is reported on that pool, and the other pools are provisioned as usual. On a
//! control plane of its own, with a NodePool CRD whose `spec` schema is open (as a CRD from a
//! newer or older API could be).

use std::time::Duration;

use capstan::api::crds;
use capstan_test_support::{ControlPlane, Options, wait_until};
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;

use crate::lifecycle::{Host, Names, events, node_class, node_pool, node_pool_json};
use crate::provisioner_e2e::{Pods, wait_running};

#[tokio::test]
async fn a_pool_that_does_not_parse_is_reported_and_the_others_provision() {
    let cp = ControlPlane::start(Options::default()).await.unwrap();
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(capstan_test_support::unique_name("open-crds"));
    std::fs::create_dir_all(&dir).unwrap();
    for (file, mut crd) in crds::all() {
        if file == "karpenter.sh_nodepools.yaml" {
            let schema = crd.spec.versions[0]
                .schema
                .as_mut()
                .and_then(|s| s.open_api_v3_schema.as_mut())
                .unwrap();
            let open: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps =
                serde_json::from_value(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}))
                    .unwrap();
            schema
                .properties
                .as_mut()
                .unwrap()
                .insert("spec".to_owned(), open);
        }
        std::fs::write(dir.join(file), crds::to_yaml(&crd).unwrap()).unwrap();
    }
    cp.install_crds_from_dir(&dir).await.unwrap();
    let client = cp.client().unwrap();
    let names = Names::new("unparse");
    let host = Host::start(&cp, &names, &["--batch-idle-duration", "500ms"]);
    let (class, good, bad) = (names.name("nc"), names.name("good"), names.name("bad"));
    node_class(&client, &names, &class, "kwok", json!({"maxCpu": 4})).await;
    node_pool(&client, node_pool_json(&names, &good, &class)).await;
    let mut broken = node_pool_json(&names, &bad, &class);
    broken["spec"]["weight"] = json!("heavy");
    let resource = kube::api::ApiResource::erase::<capstan::api::NodePool>(&());
    let raw: DynamicObject = serde_json::from_value(broken).unwrap();
    Api::<DynamicObject>::all_with(client.clone(), &resource)
        .create(&PostParams::default(), &raw)
        .await
        .unwrap();
    let ns = cp.create_namespace_unique("unparse").await.unwrap();
    Pods::new(&client, &names, &ns, "web")
        .count(3)
        .cpu("1")
        .node_selector(json!({"karpenter.sh/nodepool": good}))
        .create()
        .await;
    wait_running(&client, &host, &ns, 3, Duration::from_secs(120)).await;

    let pools = Api::<DynamicObject>::all_with(client.clone(), &resource);
    let condition = wait_until(
        Duration::from_secs(30),
        "the bad pool's condition",
        || async {
            let pool = pools.get(&bad).await?;
            let found = pool.data["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "ValidationSucceeded" && c["status"] == "False")
                .cloned();
            Ok::<_, kube::Error>(found)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    assert_eq!(condition["reason"], "Unparseable", "{condition}");
    assert!(
        condition["message"]
            .as_str()
            .unwrap_or_default()
            .contains("weight")
            || condition["message"]
                .as_str()
                .unwrap_or_default()
                .contains("invalid type"),
        "{condition}"
    );
    let event = events(&client, "default", &bad, "FailedParsing").await;
    assert!(!event.is_empty(), "a FailedParsing Event about {bad}");
    println!("reported: {}", condition["message"]);
    drop(host);
    cp.stop().unwrap();
}
