//! `/metrics` under Karpenter's names during a scale-up and a scale-down, on the real control
//! plane with kube-scheduler and the `capstan run` binary with the kwok provider: the counters
//! agree with the NodeClaims and Nodes the API server holds, the gauges with what is there now
//! (and lose the series of what is gone), the label sets are Karpenter's.
//!
//! Isolated like its neighbours: its own pool, class, namespace and `--selector`; the values it
//! checks exactly are the series of its own pool (series of other tests' hosts never reach this
//! host's `/metrics`, but pods and nodes of the whole cluster do, so cluster-wide values are
//! checked as lower bounds).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use capstan_test_support::wait_until;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::leader_election::{address_in, http_get};
use crate::lifecycle::{
    Host, Names, cluster, node_class, node_pool, node_pool_json, wait_claim_gone,
};
use crate::provisioner::{claims, namespace, teardown};
use crate::provisioner_e2e::{Pods, wait_running};

/// One sample: its labels and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// The samples of an OpenMetrics text, by series name.
pub fn parse(text: &str) -> BTreeMap<String, Vec<Sample>> {
    let mut out: BTreeMap<String, Vec<Sample>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line.rsplit_once(' ').unwrap();
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, rest.strip_suffix('}').unwrap()),
            None => (series, ""),
        };
        let mut map = BTreeMap::new();
        let mut rest = labels;
        while let Some((key, after)) = rest.split_once("=\"") {
            let mut value = String::new();
            let mut chars = after.char_indices();
            let mut end = after.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, escaped)) = chars.next() {
                            value.push(escaped);
                        }
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    c => value.push(c),
                }
            }
            map.insert(key.trim_start_matches(',').to_owned(), value);
            rest = &after[end..];
        }
        out.entry(name.to_owned()).or_default().push(Sample {
            labels: map,
            value: value.parse().unwrap(),
        });
    }
    out
}

/// A scrape of the host's `/metrics`.
struct Scrape(BTreeMap<String, Vec<Sample>>);

impl Scrape {
    /// The samples of `name` whose labels include `with`.
    fn all(&self, name: &str, with: &[(&str, &str)]) -> Vec<&Sample> {
        self.0
            .get(name)
            .map(|samples| {
                samples
                    .iter()
                    .filter(|s| {
                        with.iter()
                            .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The sum of the samples of `name` whose labels include `with`.
    fn sum(&self, name: &str, with: &[(&str, &str)]) -> f64 {
        self.all(name, with).iter().map(|s| s.value).sum()
    }

    /// The label names of every series of `name`, checked to be exactly `expected`.
    fn label_names(&self, name: &str, expected: &[&str]) -> Result<(), String> {
        let want: BTreeSet<&str> = expected.iter().copied().collect();
        let samples = self.all(name, &[]);
        if samples.is_empty() {
            return Err(format!("no series of {name}"));
        }
        for s in samples {
            let got: BTreeSet<&str> = s.labels.keys().map(String::as_str).collect();
            if got != want {
                return Err(format!(
                    "{name} has labels {got:?}, Karpenter's are {want:?}"
                ));
            }
        }
        Ok(())
    }
}

async fn scrape(address: &str) -> Scrape {
    let (status, body) = http_get(address, "/metrics").await;
    assert_eq!(status, 200, "{body}");
    Scrape(parse(&body))
}

/// `want == got`, or why not.
fn same(what: &str, want: f64, got: f64) -> Result<(), String> {
    if (want - got).abs() < 1e-9 {
        Ok(())
    } else {
        Err(format!("{what}: want {want}, /metrics says {got}"))
    }
}

fn at_least(what: &str, least: f64, got: f64) -> Result<(), String> {
    if got >= least {
        Ok(())
    } else {
        Err(format!(
            "{what}: want at least {least}, /metrics says {got}"
        ))
    }
}

/// Polls `/metrics` until `check` passes (the gauges follow the cluster within a second or two of
/// the cluster state; a pool's usage follows its status, which the NodePool status controller
/// writes, later under load); panics with its last complaint.
async fn eventually<F>(host: &Host, address: &str, what: &str, check: F) -> Scrape
where
    F: Fn(&Scrape) -> Result<(), String>,
{
    let last = Mutex::new(String::new());
    let result = wait_until(Duration::from_secs(60), what, || async {
        host.check_alive();
        let s = scrape(address).await;
        match check(&s) {
            Ok(()) => Ok::<_, std::convert::Infallible>(Some(s)),
            Err(why) => {
                *last.lock().unwrap() = why;
                Ok(None)
            }
        }
    })
    .await;
    match result {
        Ok(s) => s,
        Err(err) => panic!(
            "{err}: {}\nhost log:\n{}",
            last.lock().unwrap(),
            host.log_tail()
        ),
    }
}

/// The CPU of a resource list, in cores.
fn cores(
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> f64 {
    let text = &list.unwrap()["cpu"].0;
    text.strip_suffix('m').map_or_else(
        || text.parse::<f64>().unwrap(),
        |m| m.parse::<f64>().unwrap() / 1000.0,
    )
}

const NODE_LABELS: [&str; 12] = [
    "node_name",
    "nodepool",
    "zone",
    "region",
    "instance_type",
    "arch",
    "os",
    "capacity_type",
    "windows_build",
    "phase",
    "managed",
    "resource_type",
];

#[tokio::test]
async fn metrics_follow_a_scale_up_and_down_under_karpenters_names() {
    let (cp, client) = cluster().await;
    let names = Names::new("metrics");
    let host = Host::start(cp, &names, &["--batch-idle-duration", "500ms"]);
    let (class, pool) = (names.name("nc"), names.name("pool"));
    node_class(&client, &names, &class, "kwok", json!({"maxCpu": 4})).await;
    let mut pool_json = node_pool_json(&names, &pool, &class);
    pool_json["spec"]["limits"] = json!({"cpu": "64"});
    node_pool(&client, pool_json).await;
    let ns = namespace(cp, "metrics").await;
    let address = wait_until(Duration::from_secs(20), "the metrics address", || async {
        host.check_alive();
        Ok::<_, std::convert::Infallible>(address_in(&host.log(), "serving /metrics"))
    })
    .await
    .unwrap();
    let before = scrape(&address).await;
    let startups_before = before.sum("karpenter_pods_startup_duration_seconds_count", &[]);
    let pool_l = [("nodepool", pool.as_str())];

    // Scale up: 6 pods of 1 cpu on types of at most 4 cpu.
    Pods::new(&client, &names, &ns, "app")
        .count(6)
        .cpu("1")
        .memory("256Mi")
        .node_selector(json!({"karpenter.sh/nodepool": pool}))
        .tolerations(json!([{"operator": "Exists"}]))
        .create()
        .await;
    let running = wait_running(&client, &host, &ns, 6, Duration::from_secs(60)).await;
    let made = claims(&client, &names).await;
    let node_api = Api::<Node>::all(client.clone());
    let nodes: Vec<Node> = node_api
        .list(&ListParams::default().labels(&format!("karpenter.sh/nodepool={pool}")))
        .await
        .unwrap()
        .items;
    let (n_claims, n_nodes) = (made.len() as f64, nodes.len() as f64);
    assert!(n_nodes >= 2.0, "6 cpu of pods need 2 nodes or more");
    let capacity: f64 = nodes
        .iter()
        .map(|n| cores(n.status.as_ref().unwrap().capacity.as_ref()))
        .sum();
    let node_names: BTreeSet<String> = nodes.iter().map(ResourceExt::name_any).collect();

    let up = eventually(&host, &address, "metrics of the scale-up", |s| {
        let created = [
            ("reason", "provisioned"),
            ("nodepool", pool.as_str()),
            ("min_values_relaxed", "false"),
        ];
        same(
            "nodeclaims created",
            n_claims,
            s.sum("karpenter_nodeclaims_created_total", &created),
        )?;
        for counter in ["launched", "registered", "initialized"] {
            same(
                &format!("nodeclaims {counter}"),
                n_claims,
                s.sum(&format!("karpenter_nodeclaims_{counter}_total"), &pool_l),
            )?;
        }
        same(
            "nodes created",
            n_nodes,
            s.sum("karpenter_nodes_created_total", &pool_l),
        )?;
        let cpu = [("nodepool", pool.as_str()), ("resource_type", "cpu")];
        let gauge_nodes: BTreeSet<&str> = s
            .all("karpenter_nodes_allocatable", &cpu)
            .iter()
            .map(|x| x.labels["node_name"].as_str())
            .collect();
        if gauge_nodes != node_names.iter().map(String::as_str).collect() {
            return Err(format!(
                "karpenter_nodes_allocatable nodes {gauge_nodes:?}, the pool has {node_names:?}"
            ));
        }
        same(
            "nodepool cpu usage",
            capacity,
            s.sum(
                "karpenter_nodepools_usage",
                &[("resource_type", "cpu"), ("nodepool", pool.as_str())],
            ),
        )?;
        same(
            "nodepool nodes usage",
            n_nodes,
            s.sum(
                "karpenter_nodepools_usage",
                &[("resource_type", "nodes"), ("nodepool", pool.as_str())],
            ),
        )?;
        same(
            "nodepool cpu limit",
            64.0,
            s.sum(
                "karpenter_nodepools_limit",
                &[("resource_type", "cpu"), ("nodepool", pool.as_str())],
            ),
        )?;
        same(
            "pod requests",
            6.0,
            s.sum("karpenter_nodes_total_pod_requests", &cpu),
        )?;
        let pods = s.all(
            "karpenter_pods_state",
            &[
                ("namespace", ns.as_str()),
                ("phase", "Running"),
                ("nodepool", pool.as_str()),
                ("managed", "true"),
            ],
        );
        same(
            "pods state (Running, on the pool's nodes)",
            6.0,
            pods.len() as f64,
        )?;
        at_least(
            "pod startups observed",
            startups_before + 6.0,
            s.sum("karpenter_pods_startup_duration_seconds_count", &[]),
        )?;
        Ok(())
    })
    .await;

    // Values the scale-up left, read once.
    let lifecycle = [
        ("controller", "nodeclaim.lifecycle"),
        ("method", "Create"),
        ("provider", "kwok"),
    ];
    assert!(up.sum("karpenter_cloudprovider_duration_seconds_count", &lifecycle) >= n_claims);
    // The catalog is cached for every controller: whichever asked first made the call.
    let catalog = [("method", "GetInstanceTypes"), ("provider", "kwok")];
    let catalog = up.sum("karpenter_cloudprovider_duration_seconds_count", &catalog);
    assert!(catalog > 0.0, "GetInstanceTypes: {catalog}");
    let list = [
        ("controller", "nodeclaim.garbagecollection"),
        ("method", "List"),
        ("provider", "kwok"),
    ];
    let list = up.sum("karpenter_cloudprovider_duration_seconds_count", &list);
    assert!(list > 0.0, "List: {list}");
    assert!(
        up.sum(
            "karpenter_scheduler_scheduling_duration_seconds_count",
            &[("controller", "provisioner")]
        ) >= 1.0
    );
    assert_eq!(up.sum("karpenter_cluster_state_synced", &[]), 1.0);
    assert!(up.sum("karpenter_cluster_state_node_count", &[]) >= n_nodes);
    assert!(
        up.sum(
            "karpenter_pods_bound_duration_seconds_count",
            &[("dynamic_resources", "false")]
        ) >= 6.0
    );
    for pod in &running {
        let on = pod.spec.as_ref().unwrap().node_name.clone().unwrap();
        let state = up.all(
            "karpenter_pods_state",
            &[("namespace", &ns), ("name", &pod.name_any())],
        );
        assert_eq!(state.len(), 1, "{}", pod.name_any());
        assert_eq!(state[0].labels["node"], on);
        assert_eq!(state[0].labels["ready"], "true");
        assert_eq!(state[0].labels["scheduled"], "true");
    }
    for node in &nodes {
        let allocatable = cores(node.status.as_ref().unwrap().allocatable.as_ref());
        let series = up.all(
            "karpenter_nodes_allocatable",
            &[("node_name", &node.name_any()), ("resource_type", "cpu")],
        );
        assert_eq!(series.len(), 1);
        assert_eq!(series[0].value, allocatable, "{}", node.name_any());
        assert_eq!(
            series[0].labels["instance_type"],
            node.labels()["node.kubernetes.io/instance-type"]
        );
        assert_eq!(
            series[0].labels["capacity_type"],
            node.labels()["karpenter.sh/capacity-type"]
        );
    }
    // The catalog the provider answered: every launched offering is in it, priced.
    for node in &nodes {
        let offering = [
            (
                "instance_type",
                node.labels()["node.kubernetes.io/instance-type"].as_str(),
            ),
            (
                "capacity_type",
                node.labels()["karpenter.sh/capacity-type"].as_str(),
            ),
            (
                "zone",
                node.labels()["topology.kubernetes.io/zone"].as_str(),
            ),
        ];
        let price = up.all(
            "karpenter_cloudprovider_instance_type_offering_price_estimate",
            &offering,
        );
        assert_eq!(price.len(), 1, "{offering:?}");
        assert!(price[0].value > 0.0, "{offering:?}");
        let cpu = up.sum(
            "karpenter_cloudprovider_instance_type_cpu_cores",
            &offering[..1],
        );
        assert_eq!(cpu, cores(node.status.as_ref().unwrap().capacity.as_ref()));
    }
    // Karpenter's label sets.
    for (name, labels) in [
        (
            "karpenter_nodeclaims_created_total",
            &["reason", "nodepool", "min_values_relaxed"][..],
        ),
        ("karpenter_nodes_created_total", &["nodepool", "zone"]),
        ("karpenter_nodes_allocatable", &NODE_LABELS),
        ("karpenter_nodes_total_pod_requests", &NODE_LABELS),
        (
            "karpenter_nodes_current_lifetime_seconds",
            &NODE_LABELS[..11],
        ),
        ("karpenter_nodepools_usage", &["resource_type", "nodepool"]),
        ("karpenter_nodepools_limit", &["resource_type", "nodepool"]),
        (
            "karpenter_nodepools_allowed_disruptions",
            &["nodepool", "reason"],
        ),
        (
            "karpenter_cloudprovider_duration_seconds_count",
            &["controller", "method", "provider"],
        ),
        (
            "karpenter_scheduler_scheduling_duration_seconds_count",
            &["controller"],
        ),
        (
            "karpenter_scheduler_unschedulable_pods_count",
            &["controller"],
        ),
        ("karpenter_cluster_utilization_percent", &["resource_type"]),
        ("karpenter_pods_startup_duration_seconds_count", &[]),
        (
            "karpenter_pods_state",
            &[
                "name",
                "namespace",
                "owner",
                "node",
                "scheduled",
                "nodepool",
                "zone",
                "arch",
                "capacity_type",
                "instance_type",
                "phase",
                "ready",
                "managed",
            ],
        ),
    ] {
        up.label_names(name, labels).unwrap();
    }

    // Scale down: one NodeClaim goes; its node's series go with it.
    // The claims as they are now (the list above may predate a claim's status naming its node).
    let (gone, gone_node) = wait_until(Duration::from_secs(30), "a claim naming its node", || {
        let (client, names) = (client.clone(), names.clone());
        async move {
            Ok::<_, String>(claims(&client, &names).await.into_iter().find_map(|c| {
                let node = c.status.as_ref()?.node_name.clone()?;
                Some((c, node))
            }))
        }
    })
    .await
    .unwrap();
    let gone = &gone;
    Api::<capstan::api::NodeClaim>::all(client.clone())
        .delete(&gone.name_any(), &DeleteParams::default())
        .await
        .unwrap();
    wait_claim_gone(&client, &host, &gone.name_any(), Duration::from_secs(60)).await;
    // Evicted pods stay (Failed, or terminating on a node that is gone) until something deletes
    // them: the series follow the pods there are at each scrape, so the pods are listed anew.
    let pod_api = Api::<Pod>::namespaced(client.clone(), &ns);
    let last = Mutex::new(String::new());
    let down = wait_until(
        Duration::from_secs(60),
        "metrics of the scale-down",
        || async {
            host.check_alive();
            let before: BTreeSet<String> = pods_on(&pod_api, &gone_node).await;
            let live_before = live_claims(&client, &names).await;
            let s = scrape(&address).await;
            let after: BTreeSet<String> = pods_on(&pod_api, &gone_node).await;
            let live_after = live_claims(&client, &names).await;
            // The provisioner may replace the deleted node for its pods while it drains (as
            // Karpenter's does for pods on deleting nodes): the usage follows the pool's claims
            // that are not being deleted, whatever their number, once it is steady.
            let live = (live_before == live_after).then_some(live_after);
            match scale_down_check(&s, &pool_l, &gone_node, &before, &after, live, &pool) {
                Ok(()) => Ok::<_, std::convert::Infallible>(Some(s)),
                Err(why) => {
                    *last.lock().unwrap() = why;
                    Ok(None)
                }
            }
        },
    )
    .await
    .unwrap_or_else(|err| {
        panic!(
            "{err}: {}\nhost log:\n{}",
            last.lock().unwrap(),
            host.log_tail()
        )
    });
    let delete = [
        ("controller", "nodeclaim.lifecycle"),
        ("method", "Delete"),
        ("provider", "kwok"),
    ];
    assert!(down.sum("karpenter_cloudprovider_duration_seconds_count", &delete) >= 1.0);
    down.label_names(
        "karpenter_nodeclaims_terminated_total",
        &["nodepool", "capacity_type", "zone"],
    )
    .unwrap();
    let terminated = down.all("karpenter_nodeclaims_terminated_total", &pool_l);
    assert_eq!(
        terminated[0].labels["zone"],
        gone.labels()["topology.kubernetes.io/zone"]
    );
    assert_eq!(
        terminated[0].labels["capacity_type"],
        gone.labels()["karpenter.sh/capacity-type"]
    );

    // The pool goes: its gauges go.
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await;
    Api::<capstan::api::NodePool>::all(client.clone())
        .delete(&pool, &DeleteParams::default())
        .await
        .unwrap();
    eventually(&host, &address, "no series of the deleted pool", |s| {
        if !s
            .all("karpenter_cloudprovider_instance_type_cpu_cores", &[])
            .is_empty()
        {
            return Err("the catalog of the deleted pool (this host's only one) stays".to_owned());
        }
        for name in [
            "karpenter_nodepools_usage",
            "karpenter_nodepools_limit",
            "karpenter_nodepools_allowed_disruptions",
        ] {
            if !s.all(name, &pool_l).is_empty() {
                return Err(format!("{name} keeps series of deleted pool {pool}"));
            }
        }
        Ok(())
    })
    .await;
    host.check_alive();
    teardown(&client, &names, &ns).await;
}

/// The names of the pods bound to `node`.
async fn pods_on(pods: &Api<Pod>, node: &str) -> BTreeSet<String> {
    pods.list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect()
}

/// How many of the run's claims are not being deleted.
async fn live_claims(client: &Client, names: &Names) -> usize {
    claims(client, names)
        .await
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .count()
}

/// The scale-down as `/metrics` should show it. `before` and `after` are the pods on the gone node
/// listed just before and just after the scrape: the scrape's pod series must lie between them (a
/// pod deleted meanwhile may or may not be in it).
fn scale_down_check(
    s: &Scrape,
    pool_l: &[(&str, &str)],
    gone_node: &str,
    before: &BTreeSet<String>,
    after: &BTreeSet<String>,
    live_claims: Option<usize>,
    pool: &str,
) -> Result<(), String> {
    same(
        "nodeclaims terminated",
        1.0,
        s.sum("karpenter_nodeclaims_terminated_total", pool_l),
    )?;
    same(
        "nodes terminated",
        1.0,
        s.sum("karpenter_nodes_terminated_total", pool_l),
    )?;
    same(
        "nodeclaim terminations timed",
        1.0,
        s.sum(
            "karpenter_nodeclaims_termination_duration_seconds_count",
            pool_l,
        ),
    )?;
    if !s
        .all("karpenter_nodes_allocatable", &[("node_name", gone_node)])
        .is_empty()
    {
        return Err(format!("node {gone_node} is gone but its series stay"));
    }
    let series: BTreeSet<String> = s
        .all("karpenter_pods_state", &[("node", gone_node)])
        .iter()
        .map(|x| x.labels["name"].clone())
        .collect();
    if !(after.is_subset(&series) && series.is_subset(before)) {
        return Err(format!(
            "pods on {gone_node}: series of {series:?}, the cluster had {before:?} then {after:?}"
        ));
    }
    let Some(live_claims) = live_claims else {
        return Err("the pool's claims changed during the scrape".to_owned());
    };
    same(
        "nodepool nodes usage",
        live_claims as f64,
        s.sum(
            "karpenter_nodepools_usage",
            &[("resource_type", "nodes"), ("nodepool", pool)],
        ),
    )
}

#[test]
fn the_parser_reads_labels_with_escapes() {
    let parsed = parse("# HELP x y\nx_total{a=\"1\",b=\"q\\\"u\"} 2\ny 3.5\n# EOF\n");
    assert_eq!(parsed["x_total"][0].labels["b"], "q\"u");
    assert_eq!(parsed["x_total"][0].value, 2.0);
    assert_eq!(parsed["y"][0].value, 3.5);
}
