//! Parity with Cluster Autoscaler's clusterapi provider (the table in the provider's README),
//! against real Cluster API: scale from zero from the infrastructure template's status, the
//! Machine template's taints, the minimum size consolidation keeps, and MachineSets without a
//! MachineDeployment as instance types.

use std::time::Duration;

use capstan::api::NodeClaim;
use capstan::provider::convert::catalog::CatalogView;
use capstan::runtime::types::{Operator, Requirement, Taint, TaintEffect};
use capstan_test_support::cluster_api::machine_template;
use capstan_test_support::wait_until;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::{
    CLUSTERAPI_GRANTS, World, capacity, claim, machine_deployment, provider, resource, start_host,
    templates, wit_class,
};
use crate::disruption::{App, deployment, pods as disruption_pods, running};
use crate::lifecycle::{Names, cleanup, cluster, node_class, node_pool, node_pool_json};
use crate::provisioner_e2e::wait_running;

const MAX_SIZE: &str = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size";
const MIN_SIZE: &str = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size";

/// A MachineDeployment without capacity annotations whose `TestMachineTemplate` reports
/// `status.capacity` and `status.nodeInfo` is an instance type with that capacity and
/// architecture; its Machine template's `spec.taints` are its taints (it is offered only to a
/// NodePool with them), and Cluster API puts them on the launched Node.
#[tokio::test]
async fn scale_from_zero_reads_the_infrastructure_template_and_the_machine_taints() {
    let world = World::new("capi-zero", &[]).await;
    let mut md = machine_deployment(
        "zero",
        json!({"capstan.dev/price-per-hour": "0.3", MAX_SIZE: "3"}),
    );
    md["spec"]["template"]["spec"]["taints"] = json!([
        {"key": "dedicated", "value": "capi", "effect": "NoSchedule", "propagation": "Always"},
    ]);
    let mut template = machine_template(
        "zero-v1",
        json!({"cpu": "4", "memory": "16Gi", "pods": "110"}),
        json!({"kubernetes.io/arch": "arm64"}),
        500,
    );
    template["spec"]["reportCapacity"] = json!(true);
    world.add(&[template], &md).await;

    let provider = provider(&world, CLUSTERAPI_GRANTS);
    let class = wit_class(&world.parameters());
    let mut tainted = crate::fixtures::pool("p");
    tainted.taints.push(Taint {
        key: "dedicated".into(),
        value: Some("capi".into()),
        effect: TaintEffect::NoSchedule,
    });
    // Once the infrastructure provider has reported the template's status.
    let catalog = wait_until(
        Duration::from_secs(30),
        "the template's capacity",
        || async {
            let catalog = provider
                .get_instance_types(&tainted, &class)
                .await
                .map_err(|e| e.to_string())?;
            let types = CatalogView::new(&catalog.catalog)
                .map_err(|e| e.to_string())?
                .len();
            Ok::<_, String>((types == 1).then_some(catalog))
        },
    )
    .await
    .unwrap();
    let view = CatalogView::new(&catalog.catalog).unwrap();
    let zero = view.instance_types().next().unwrap();
    assert_eq!(zero.name, "zero");
    let amount = |name: &str| {
        zero.capacity()
            .find(|a| a.name == name)
            .map(|a| a.units())
            .unwrap_or_default()
    };
    assert_eq!(amount("cpu"), 4);
    assert_eq!(amount("memory"), 16 << 30);
    let arch: Vec<&str> = zero
        .requirements()
        .find(|r| r.key() == "kubernetes.io/arch")
        .map(|r| r.values().collect())
        .unwrap_or_default();
    assert_eq!(arch, vec!["arm64"]);
    // A NodePool without the taint is not offered it.
    let plain = provider
        .get_instance_types(&crate::fixtures::pool("q"), &class)
        .await
        .unwrap();
    assert!(CatalogView::new(&plain.catalog).unwrap().is_empty());
    provider.validate_node_class(&class).await.unwrap();

    let mut wanted = claim("zero-claim", "zero");
    wanted.requirements.push(Requirement {
        key: "kubernetes.io/arch".into(),
        operator: Operator::In,
        values: vec!["arm64".into()],
        min_values: None,
    });
    let launched = provider.create(&wanted, &class).await.unwrap();
    let label = |key: &str| {
        launched
            .labels
            .iter()
            .find(|kv| kv.key == key)
            .map(|kv| kv.value.clone())
    };
    assert_eq!(label("kubernetes.io/arch").as_deref(), Some("arm64"));
    assert_eq!(
        label("node.kubernetes.io/instance-type").as_deref(),
        Some("zero")
    );
    let id = launched.provider_id.clone().unwrap();
    // Cluster API (feature gate MachineTaintPropagation) puts the template's taint on the Node.
    let nodes: Api<Node> = Api::all(world.workload.clone());
    wait_until(Duration::from_secs(60), "the Node's taint", || async {
        let list = nodes.list(&ListParams::default()).await?;
        Ok::<_, kube::Error>(
            list.items
                .iter()
                .find(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(&id))
                .filter(|n| {
                    n.spec
                        .as_ref()
                        .and_then(|s| s.taints.as_ref())
                        .is_some_and(|taints| {
                            taints.iter().any(|t| {
                                t.key == "dedicated"
                                    && t.value.as_deref() == Some("capi")
                                    && t.effect == "NoSchedule"
                            })
                        })
                })
                .map(|_| ()),
        )
    })
    .await
    .unwrap();
    provider.delete(&launched).await.unwrap();
    wait_until(Duration::from_secs(60), "the Machine gone", || async {
        let machines = world.machines().await.len();
        Ok::<_, String>((machines == 0 && world.replicas("zero").await == 0).then_some(()))
    })
    .await
    .unwrap();
}

/// With `…-node-group-min-size: 1`, one of the two Machines launched together holds the
/// MachineDeployment at its minimum: its NodeClaim carries `capstan.dev/held-by-provider`, and when
/// both nodes are empty consolidation removes only the other one.
#[tokio::test]
async fn consolidation_keeps_a_machine_deployment_at_its_minimum_size() {
    let mut annotations = capacity("2", "8Gi", "0.10", "5");
    annotations[MIN_SIZE] = json!("1");
    let world = World::new("capi-min", &[machine_deployment("floor", annotations)]).await;
    let (cp, client) = cluster().await;
    let names = Names::new("capimin");
    let host = start_host(cp, &names).await;
    let (class, pool) = (names.name("nc"), names.name("pool"));
    node_class(&client, &names, &class, "clusterapi", world.parameters()).await;
    let mut pool_json = node_pool_json(&names, &pool, &class);
    pool_json["spec"]["disruption"] = json!({
        "consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s",
        "budgets": [{"nodes": "100%"}],
    });
    node_pool(&client, pool_json).await;
    let ns = cp.create_namespace_unique("capi-min").await.unwrap();
    // One 1500m pod per 2-cpu node: two Machines.
    deployment(
        &client,
        &names,
        &ns,
        App {
            name: "web",
            replicas: 2,
            cpu: "1500m",
            node_selector: json!({"karpenter.sh/nodepool": pool}),
            annotations: json!({}),
        },
    )
    .await;
    wait_running(&client, &host, &ns, 2, Duration::from_secs(180)).await;
    assert_eq!(world.machines().await.len(), 2);
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let held: Vec<String> = claims
        .list(&ListParams::default().labels(&format!("karpenter.sh/nodepool={pool}")))
        .await
        .unwrap()
        .items
        .iter()
        .filter(|c| {
            c.annotations()
                .get("capstan.dev/held-by-provider")
                .is_some_and(|reason| reason.contains("minimum size"))
        })
        .map(ResourceExt::name_any)
        .collect();
    assert_eq!(
        held.len(),
        1,
        "one of two claims holds the minimum: {held:?}"
    );

    // Both nodes empty: consolidation takes one, never the last.
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await;
    wait_until(Duration::from_secs(180), "one Machine left", || async {
        host.check_alive();
        let pods = disruption_pods(&client, &ns).await;
        Ok::<_, String>((world.machines().await.len() == 1 && running(&pods) == 0).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nhost log:\n{}", host.log_tail()));
    // And it stays: the one left is the member holding the minimum, and nothing else goes.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let machines = world.machines().await;
    assert_eq!(machines.len(), 1);
    assert_eq!(
        machines[0].labels().get("capstan.dev/nodeclaim"),
        held.first(),
        "the Machine left is the held claim's"
    );
    assert!(
        machines[0]
            .annotations()
            .contains_key("capstan.dev/min-size-member")
    );
    assert_eq!(world.replicas("floor").await, 1);
    cleanup(&client, &names).await;
    wait_until(
        Duration::from_secs(120),
        "the last Machine gone",
        || async { Ok::<_, String>(world.machines().await.is_empty().then_some(())) },
    )
    .await
    .unwrap();
}

/// A MachineSet no MachineDeployment owns, labelled as a member, is an instance type of its own:
/// a launch scales it up and claims its Machine, a delete marks that Machine and scales it down.
#[tokio::test]
async fn a_machine_set_without_a_deployment_is_an_instance_type() {
    let world = World::new("capi-set", &[]).await;
    let set_label = "cluster.x-k8s.io/set-name";
    let mut set = machine_deployment("solo", capacity("2", "8Gi", "0.05", "3"));
    set["kind"] = json!("MachineSet");
    set["spec"]["selector"] = json!({"matchLabels": {set_label: "solo"}});
    // Its Machines carry the template's labels: the set's own, and the ownership mark.
    set["spec"]["template"]["metadata"]["labels"][set_label] = json!("solo");
    if let Some(labels) = set["spec"]["template"]["metadata"]["labels"].as_object_mut() {
        labels.remove(super::DEPLOYMENT_NAME);
    }
    let sets: Api<DynamicObject> = Api::namespaced_with(
        world.management.clone(),
        &world.namespace,
        &resource("MachineSet"),
    );
    let templates_api: Api<DynamicObject> = Api::namespaced_with(
        world.management.clone(),
        &world.namespace,
        &capstan_test_support::cluster_api::infrastructure_resource("TestMachineTemplate"),
    );
    for template in templates(&set, "Provision").into_iter().take(1) {
        templates_api
            .create(
                &PostParams::default(),
                &serde_json::from_value(template).unwrap(),
            )
            .await
            .unwrap();
    }
    sets.create(
        &PostParams::default(),
        &serde_json::from_value(set).unwrap(),
    )
    .await
    .unwrap();
    // Beside a MachineDeployment, whose own MachineSets are not instance types.
    world
        .add(
            &templates(
                &machine_deployment("pricier", capacity("2", "8Gi", "0.50", "3")),
                "Provision",
            )[..1],
            &machine_deployment("pricier", capacity("2", "8Gi", "0.50", "3")),
        )
        .await;

    let provider = provider(&world, CLUSTERAPI_GRANTS);
    let class = wit_class(&world.parameters());
    let catalog = provider
        .get_instance_types(&crate::fixtures::pool("p"), &class)
        .await
        .unwrap();
    let mut names: Vec<String> = CatalogView::new(&catalog.catalog)
        .unwrap()
        .instance_types()
        .map(|it| it.name.to_owned())
        .collect();
    names.sort();
    assert_eq!(names, vec!["pricier".to_string(), "solo".to_string()]);

    // The cheapest: the MachineSet.
    let mut any = claim("solo-claim", "solo");
    any.requirements.clear();
    let launched = provider.create(&any, &class).await.unwrap();
    let machines = world.machines().await;
    assert_eq!(machines.len(), 1, "{machines:?}");
    assert_eq!(
        machines[0].labels().get(set_label).map(String::as_str),
        Some("solo")
    );
    assert_eq!(
        machines[0]
            .labels()
            .get("capstan.dev/nodeclaim")
            .map(String::as_str),
        Some("solo-claim")
    );
    let replicas = |set: DynamicObject| set.data["spec"]["replicas"].as_i64().unwrap_or(0);
    assert_eq!(replicas(sets.get("solo").await.unwrap()), 1);
    // get finds it, with its instance type.
    let got = provider
        .get(launched.provider_id.as_deref().unwrap())
        .await
        .unwrap();
    assert!(
        got.labels
            .iter()
            .any(|kv| kv.key == "node.kubernetes.io/instance-type" && kv.value == "solo"),
        "{:?}",
        got.labels
    );

    provider.delete(&launched).await.unwrap();
    wait_until(Duration::from_secs(60), "the Machine gone", || async {
        let machines = world.machines().await.len();
        let replicas = replicas(sets.get("solo").await.map_err(|e| e.to_string())?);
        Ok::<_, String>((machines == 0 && replicas == 0).then_some(()))
    })
    .await
    .unwrap();
    assert_eq!(world.replicas("pricier").await, 0);
}
