//! NodeOverlays (`--feature-gates NodeOverlay=true`) on the real control plane with
//! kube-scheduler, kwok and the `capstan run` binary: an overlay that makes kwok's cheapest type
//! the dearest prices the provisioner's NodeClaim and the price metric, and the claim launches
//! the overlaid cheapest at once; lowering its price makes consolidation move the pod back; an
//! overlay of the same weight pricing the same offerings is refused with
//! `ValidationSucceeded=False` (`Conflict`).
//!
//! The kwok provider launches the cheapest of a claim's types by its own prices, which know
//! nothing of overlays (as Karpenter's providers). Karpenter's claim lists the overlaid types
//! regardless, so the provider launches its own cheapest and consolidation replaces it; Capstan's
//! claim leaves out the types the provider would launch before the overlaid cheapest.
//!
//! NodeOverlays are cluster-wide: this test's select its own pool (`karpenter.sh/nodepool`), and
//! no other test's host runs with the gate on.

use std::time::Duration;

use capstan::api::{NodeClaim, NodeOverlay};
use capstan_test_support::wait_until;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::consolidation::{Scene, on_demand, pool, scene};
use crate::disruption::{App, GROUP, deployment, pods, pool_nodes, running};
use crate::leader_election::{address_in, http_get};
use crate::lifecycle::{RUN_LABEL, events};
use crate::provisioner::{claims, teardown};

const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";

/// The overlay `name`: `price` for the on-demand offerings of `instance_type` in `pool`.
fn overlay(run: &str, name: &str, pool: &str, instance_type: &str, price: &str) -> NodeOverlay {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": name, "labels": {RUN_LABEL: run}},
        "spec": {
            "weight": 10,
            "requirements": [
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": [pool]},
                {"key": INSTANCE_TYPE, "operator": "In", "values": [instance_type]},
            ],
            "price": price,
        },
    }))
    .unwrap()
}

/// The overlay's `type` condition: status and reason.
async fn condition(client: &Client, name: &str, type_: &str) -> Option<(String, String)> {
    let overlay = Api::<NodeOverlay>::all(client.clone())
        .get(name)
        .await
        .ok()?;
    let c = overlay
        .status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_)?;
    Some((
        format!("{:?}", c.status),
        c.reason.unwrap_or_default() + ": " + &c.message.unwrap_or_default(),
    ))
}

/// The price series of `instance_type` on `/metrics`.
async fn metric_price(address: &str, instance_type: &str) -> Option<f64> {
    let (_, body) = http_get(address, "/metrics").await;
    body.lines()
        .filter(|l| {
            l.starts_with("karpenter_cloudprovider_instance_type_offering_price_estimate{")
                && l.contains(&format!("instance_type=\"{instance_type}\""))
        })
        .find_map(|l| l.rsplit_once(' ')?.1.parse().ok())
}

#[tokio::test]
async fn an_overlay_prices_the_claim_and_consolidation_follows_it() {
    let offer =
        |price: f64| json!([{"zone": "test-zone-a", "capacityType": "on-demand", "price": price}]);
    let Scene {
        client,
        names,
        host,
        class,
        ns,
        ..
    } = scene(
        "overlay",
        &[
            "--batch-idle-duration",
            "500ms",
            "--feature-gates",
            "NodeOverlay=true",
        ],
        json!({"instanceTypes": [
            {"name": "ovl-small", "resources": {"cpu": "2", "memory": "8Gi", "pods": "110"},
             "offerings": offer(0.10)},
            {"name": "ovl-big", "resources": {"cpu": "8", "memory": "32Gi", "pods": "110"},
             "offerings": offer(0.40)},
        ]}),
    )
    .await;
    let p = names.name("pool");
    pool(
        &client,
        &names,
        (&p, &class),
        on_demand(),
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "5s",
               "budgets": [{"nodes": "100%"}]}),
    )
    .await;
    let overlays = Api::<NodeOverlay>::all(client.clone());
    // The provider's cheapest type (ovl-small, 0.10) made the dearest.
    let repriced = names.name("small-dear");
    overlays
        .create(
            &PostParams::default(),
            &overlay(&names.run, &repriced, &p, "ovl-small", "0.99"),
        )
        .await
        .unwrap();
    wait_until(Duration::from_secs(60), "the overlay Ready", || async {
        host.check_alive();
        let ready = condition(&client, &repriced, "Ready").await;
        Ok::<_, kube::Error>(ready.filter(|(s, _)| s == "True").map(|_| ()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));

    // The provisioner's cheapest is ovl-big at 0.40; the claim leaves out ovl-small, which kwok
    // lists cheaper and would launch instead.
    let app = App {
        name: "app",
        replicas: 1,
        cpu: "1",
        node_selector: json!({GROUP: p}),
        annotations: json!({}),
    };
    deployment(&client, &names, &ns, app).await;
    let first: NodeClaim = wait_until(Duration::from_secs(120), "a NodeClaim", || async {
        host.check_alive();
        Ok::<_, kube::Error>(claims(&client, &names).await.into_iter().next())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    assert_eq!(first.annotations()["capstan.dev/price-per-hour"], "0.4");
    let types: Vec<String> = first
        .spec
        .requirements
        .iter()
        .filter(|r| r.key == INSTANCE_TYPE)
        .flat_map(|r| r.values.clone())
        .collect();
    assert_eq!(types, vec!["ovl-big"], "the claim's types");
    // Karpenter's annotation names overlays that priced one of the claim's types: none did.
    assert!(
        !first
            .annotations()
            .contains_key("karpenter.sh/price-overlay-applied")
    );
    let provisioned = wait_until(Duration::from_secs(30), "Provisioned", || async {
        Ok::<_, kube::Error>(
            events(&client, "default", &first.name_any(), "Provisioned")
                .await
                .into_iter()
                .find_map(|e| e.note),
        )
    })
    .await
    .unwrap();
    assert!(
        provisioned.contains("cheapest ovl-big at 0.4/h"),
        "{provisioned}"
    );
    let address = address_in(&host.log(), "serving /metrics").expect("metrics address");
    assert_eq!(metric_price(&address, "ovl-small").await, Some(0.99));
    assert_eq!(metric_price(&address, "ovl-big").await, Some(0.40));

    // kwok launches ovl-big at once, and consolidation (5 s after) has nothing to replace: the
    // first claim is still the only one 20 s later.
    let on_type = |want: &'static str| {
        let (client, ns, p) = (client.clone(), ns.clone(), p.clone());
        async move {
            let nodes = pool_nodes(&client, &p, INSTANCE_TYPE).await;
            let ok = nodes.len() == 1
                && nodes.values().all(|t| t == want)
                && running(&pods(&client, &ns).await) == 1;
            Ok::<_, kube::Error>(ok.then_some(nodes))
        }
    };
    wait_until(Duration::from_secs(120), "the pod on ovl-big", || {
        host.check_alive();
        on_type("ovl-big")
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    tokio::time::sleep(Duration::from_secs(20)).await;
    let names_now: Vec<String> = claims(&client, &names)
        .await
        .iter()
        .map(|c| c.name_any())
        .collect();
    assert_eq!(names_now, vec![first.name_any()], "no claim replaced");

    // An overlay of the same weight on the same offering conflicts; the name earlier in the
    // alphabet is the one refused.
    let rival = names.name("a-rival");
    overlays
        .create(
            &PostParams::default(),
            &overlay(&names.run, &rival, &p, "ovl-small", "0.98"),
        )
        .await
        .unwrap();
    let (_, why) = wait_until(Duration::from_secs(60), "the rival refused", || async {
        host.check_alive();
        let c = condition(&client, &rival, "ValidationSucceeded").await;
        Ok::<_, kube::Error>(c.filter(|(s, _)| s == "False"))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    assert!(
        why.starts_with("Conflict: ") && why.contains(&repriced),
        "{why}"
    );
    assert_eq!(
        condition(&client, &repriced, "ValidationSucceeded")
            .await
            .map(|(s, _)| s),
        Some("True".to_owned())
    );
    // The Event is written just after the condition.
    crate::lifecycle::wait_event(&client, "default", &rival, "Conflict").await;
    overlays
        .delete(&rival, &DeleteParams::default())
        .await
        .unwrap();

    // The overlay's price drops below ovl-big's: consolidation, on the overlaid prices, moves
    // the pod to ovl-small.
    overlays
        .patch(
            &repriced,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"price": "0.01"}})),
        )
        .await
        .unwrap();
    wait_until(Duration::from_secs(300), "the pod on ovl-small", || {
        host.check_alive();
        on_type("ovl-small")
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    assert_eq!(metric_price(&address, "ovl-small").await, Some(0.01));

    overlays
        .delete(&repriced, &DeleteParams::default())
        .await
        .unwrap();
    host.check_alive();
    teardown(&client, &names, &ns).await;
}
