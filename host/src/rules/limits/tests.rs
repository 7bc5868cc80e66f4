use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use super::*;
use crate::api::labels::{CAPACITY_TYPE, ZONE};
use crate::scheduling::{
    self, NodePoolView, Offering, Pod, Requirement, Requirements, SchedulingInput,
};

const GI: i64 = 1 << 30;

fn instance_type(name: &str, cpu: i64) -> InstanceType {
    InstanceType {
        name: name.to_owned(),
        requirements: Requirements::new()
            .with(Requirement::in_(INSTANCE_TYPE, [name]))
            .with(Requirement::in_(ZONE, ["zone-1"]))
            .with(Requirement::in_(CAPACITY_TYPE, ["on-demand"])),
        offerings: vec![Offering::new("zone-1", "on-demand", 0.1 * cpu as f64)],
        capacity: Resources::new(cpu * 1000, 2 * cpu * GI, 10 * cpu),
        overhead: Resources::default(),
        volume_limits: Default::default(),
        devices: Vec::new(),
    }
}

fn types() -> Vec<InstanceType> {
    [1, 2, 4, 8]
        .iter()
        .map(|&c| instance_type(&format!("c{c}"), c))
        .collect()
}

fn pool(limits: Value, status: Option<Value>) -> NodePool {
    let mut pool = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "limits": limits,
            "template": {"spec": {
                "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "default"},
                "requirements": []
            }}
        }
    });
    if let Some(status) = status {
        pool["status"] = status;
    }
    serde_json::from_value(pool).unwrap()
}

/// A claim of `pool` that may launch as any of `options`, sized for `requests_cpu`.
fn launching(pool: &str, options: &[&str], requests_cpu: &str) -> NodeClaim {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": format!("{pool}-x"), "labels": {NODEPOOL: pool}},
        "spec": {
            "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "default"},
            "requirements": [
                {"key": INSTANCE_TYPE, "operator": "In", "values": options}
            ],
            "resources": {"requests": {"cpu": requests_cpu}}
        }
    }))
    .unwrap()
}

fn launched(pool: &str, cpu: &str) -> NodeClaim {
    let mut claim = launching(pool, &["c1", "c2", "c4", "c8"], "1");
    claim.status =
        Some(serde_json::from_value(json!({"capacity": {"cpu": cpu, "memory": "8Gi"}})).unwrap());
    claim
}

fn limits_of(pool: &NodePool) -> ResourceLimits {
    let list = pool.spec.limits.as_ref().unwrap();
    ResourceLimits::parse(list.iter().map(|(k, v)| (k.as_str(), v.as_str()))).unwrap()
}

#[test]
fn launching_claims_count_their_largest_option() {
    let types = types();
    let claims = vec![
        launching("default", &["c2", "c4"], "1500m"),
        launching("default", &["c1", "c8"], "500m"),
    ];
    let usage = claim_usage("default", &claims, &types);
    assert_eq!(usage.nodes, 2);
    assert_eq!(usage.resources.get("cpu"), 12_000);
    assert_eq!(usage.resources.get("memory"), 24 * GI);
    let p = pool(json!({"cpu": "16", "nodes": 3}), None);
    let remaining = remaining(Some(&limits_of(&p)), &p, &usage).unwrap();
    assert_eq!(remaining.0["cpu"], 4_000);
    assert_eq!(remaining.0["nodes"], 1);
}

#[test]
fn launching_claims_with_unknown_options_count_their_requests() {
    let types = types();
    let claims = vec![launching("default", &["z99"], "3")];
    let usage = claim_usage("default", &claims, &types);
    assert_eq!(usage.resources.get("cpu"), 3_000);
    let mut no_requirement = launching("default", &[], "2500m");
    no_requirement.spec.requirements.clear();
    assert_eq!(claim_capacity(&no_requirement, &types).get("cpu"), 2_500);
}

#[test]
fn launched_claims_count_their_capacity() {
    let types = types();
    let claims = vec![launched("default", "4"), launched("default", "2")];
    let usage = claim_usage("default", &claims, &types);
    assert_eq!(usage.nodes, 2);
    assert_eq!(usage.resources.get("cpu"), 6_000);
    assert_eq!(usage.resources.get("memory"), 16 * GI);
}

#[test]
fn mixed_claims_other_pools_and_deleting_claims() {
    let types = types();
    let mut deleting = launched("default", "8");
    deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    let claims = vec![
        launched("default", "4"),
        launching("default", &["c2", "c4", "c8"], "3"),
        launched("other", "8"),
        deleting,
    ];
    let usage = claim_usage("default", &claims, &types);
    assert_eq!(usage.nodes, 2);
    assert_eq!(usage.resources.get("cpu"), 12_000);
    let p = pool(json!({"cpu": "20"}), None);
    let remaining = remaining(Some(&limits_of(&p)), &p, &usage).unwrap();
    assert_eq!(remaining.0["cpu"], 8_000);
}

#[test]
fn status_counts_when_it_is_larger_and_nodes_are_not_counted_twice() {
    let p = pool(
        json!({"cpu": "16", "memory": "64Gi", "nodes": 5}),
        Some(json!({"resources": {"cpu": "10", "memory": "4Gi", "nodes": "2"}, "nodes": 2})),
    );
    let usage = claim_usage("default", &[launched("default", "4")], &types());
    let remaining = remaining(Some(&limits_of(&p)), &p, &usage).unwrap();
    // cpu from status (10 > 4), memory from the claim (8Gi > 4Gi), nodes max(1, 2).
    assert_eq!(remaining.0["cpu"], 6_000);
    assert_eq!(remaining.0["memory"], 56 * GI);
    assert_eq!(remaining.0["nodes"], 3);
    assert_eq!(super::remaining(None, &p, &usage), None);
}

#[test]
fn a_pool_at_its_limit_with_unlaunched_claims_launches_nothing() {
    let types = types();
    // Status still shows nothing: both claims were created by the previous batch.
    let p = pool(
        json!({"cpu": "8"}),
        Some(json!({"resources": {}, "nodes": 0})),
    );
    let claims = vec![
        launching("default", &["c2", "c4"], "2"),
        launching("default", &["c4"], "3"),
    ];
    let usage = claim_usage("default", &claims, &types);
    let remaining = remaining(Some(&limits_of(&p)), &p, &usage).unwrap();
    assert!(remaining.0["cpu"] <= 0, "{remaining:?}");

    let mut view = NodePoolView::new("default", Arc::from(types));
    view.limits = Some(limits_of(&p));
    view.remaining = Some(remaining);
    let result = scheduling::solve(&SchedulingInput {
        pods: vec![Pod::new("default", "p", Resources::new(500, GI, 0))],
        node_pools: vec![view],
        ..SchedulingInput::default()
    });
    assert!(result.new_claims.is_empty());
    assert_eq!(
        result.unschedulable,
        vec![(0, "nodepool default limit cpu exceeded".to_owned())]
    );
}

/// One provisioning run as the host makes it: the pool's claims so far count against its limits,
/// the solver runs, and its claims become NodeClaims (with their `instance-type In` list) that
/// the next run counts while they are still launching.
fn run_batch(
    p: &NodePool,
    types: &[InstanceType],
    claims: &mut Vec<NodeClaim>,
    pods: Vec<Pod>,
) -> scheduling::SchedulingResult {
    let usage = claim_usage("default", claims, types);
    let mut view = NodePoolView::new("default", Arc::from(types.to_vec()));
    view.limits = Some(limits_of(p));
    view.remaining = remaining(view.limits.as_ref(), p, &usage);
    let result = scheduling::solve(&SchedulingInput {
        pods,
        node_pools: vec![view],
        ..SchedulingInput::default()
    });
    for (i, new) in result.new_claims.iter().enumerate() {
        let mut claim = super::super::new_claim::claim_for(new, p, &Default::default());
        claim.metadata.name = Some(format!("default-{}-{i}", claims.len()));
        claims.push(claim);
    }
    result
}

/// The sizes of a kwok-like catalog: 1 to 64 CPUs.
fn wide_types() -> Vec<InstanceType> {
    [1, 2, 4, 8, 16, 32, 48, 64]
        .iter()
        .map(|&c| instance_type(&format!("c{c}"), c))
        .collect()
}

fn pods(prefix: &str, cpus: &[i64]) -> Vec<Pod> {
    cpus.iter()
        .enumerate()
        .map(|(i, &c)| {
            Pod::new(
                "default",
                format!("{prefix}-{i}"),
                Resources::new(c * 1000, GI, 0),
            )
        })
        .collect()
}

/// The case: `limits.cpu: 64` with 12 CPUs in use, pods arriving in batches while the
/// earlier claims are still launching. Each claim holds only what its pods need, so every pod
/// that fits under the limit gets a claim, and only the one that does not is refused.
#[test]
fn claims_in_flight_hold_what_they_need_not_what_fits_under_the_limit() {
    let types = wide_types();
    let p = pool(json!({"cpu": "64"}), None);
    let mut claims = vec![launched("default", "12")];
    for (batch, cpus) in [&[8][..], &[8, 8], &[8], &[4]].into_iter().enumerate() {
        let result = run_batch(&p, &types, &mut claims, pods(&format!("b{batch}"), cpus));
        assert!(
            result.unschedulable.is_empty() && result.limits_reached.is_empty(),
            "batch {batch}: {:?}",
            result.unschedulable
        );
        let usage = claim_usage("default", &claims, &types);
        assert!(usage.resources.get("cpu") <= 64_000, "{usage:?}");
    }
    // 12 + 8 + 16 + 8 + 4 = 48 in use or launching: a 24-CPU pod (which needs the 32-CPU type)
    // no longer fits, a 4-CPU one does, into the 4-CPU type.
    let result = run_batch(&p, &types, &mut claims, pods("last", &[24, 4]));
    assert_eq!(result.new_claims.len(), 1);
    assert_eq!(result.new_claims[0].instance_type_options, vec!["c4"]);
    assert_eq!(
        result.unschedulable,
        vec![(0, "nodepool default limit cpu exceeded".to_owned())]
    );
    assert_eq!(
        result.limits_reached,
        vec![scheduling::LimitReached {
            node_pool: "default".to_owned(),
            resource: "cpu".to_owned(),
            limit: 64_000,
            left: 12_000,
            pods: vec![0],
        }]
    );
    assert_eq!(
        limit_note(&result.limits_reached[0]),
        "limit cpu=64 reached: cpu=12 left once its nodes and the claims launching count; 1 pending pod(s) need more"
    );
    let usage = claim_usage("default", &claims, &types);
    assert_eq!(usage.resources.get("cpu"), 52_000);
}

/// A spend limit: types cost 0.1 per CPU per hour, the pool may spend 1.5 per hour, a launched
/// 4-CPU claim (0.4) counts at its offering's price. An 8-CPU node (0.8) fits under what is left,
/// a second one does not, a 2-CPU one (0.2) still does.
#[test]
fn a_spend_limit_bounds_claims_by_their_price() {
    let p = pool(json!({"capstan.dev/price-per-hour": "1.5"}), None);
    let limits = limits_of(&p);
    assert_eq!(limits.0[PRICE], 1_500);
    let types = with_price_capacity(Some(&limits), Arc::from(types()));
    assert_eq!(types[3].capacity.get(PRICE), 800, "c8's dearest offering");
    let unlimited = with_price_capacity(None, Arc::from(self::types()));
    assert_eq!(
        unlimited[3].capacity.get(PRICE),
        0,
        "no spend limit, no price"
    );

    let mut c4 = launched("default", "4");
    c4.metadata.labels.get_or_insert_default().extend([
        (INSTANCE_TYPE.to_owned(), "c4".to_owned()),
        (ZONE.to_owned(), "zone-1".to_owned()),
        (CAPACITY_TYPE.to_owned(), "on-demand".to_owned()),
    ]);
    assert_eq!(claim_capacity(&c4, &types).get(PRICE), 400);
    // Without the labels it is not known which offering it runs on: nothing counts.
    assert_eq!(
        claim_capacity(&launched("default", "4"), &types).get(PRICE),
        0
    );
    let mut claims = vec![c4];
    let usage = claim_usage("default", &claims, &types);
    let view = |claims: &[NodeClaim]| {
        let usage = claim_usage("default", claims, &types);
        let mut view = NodePoolView::new("default", Arc::clone(&types));
        view.limits = Some(limits.clone());
        view.remaining = remaining(view.limits.as_ref(), &p, &usage);
        view
    };
    assert_eq!(
        remaining(Some(&limits), &p, &usage).unwrap().0[PRICE],
        1_100
    );
    let result = scheduling::solve(&SchedulingInput {
        pods: pods("a", &[8]),
        node_pools: vec![view(&claims)],
        ..SchedulingInput::default()
    });
    assert_eq!(result.new_claims.len(), 1);
    assert_eq!(result.new_claims[0].instance_type_options, vec!["c8"]);
    let mut claim =
        super::super::new_claim::claim_for(&result.new_claims[0], &p, &Default::default());
    claim.metadata.name = Some("default-c8".to_owned());
    claims.push(claim);
    // Launching, the new claim counts at c8's dearest offering: 0.3 is left, 0.1 once the
    // 2-CPU pod's c2 counts too.
    let result = scheduling::solve(&SchedulingInput {
        pods: pods("b", &[8, 2]),
        node_pools: vec![view(&claims)],
        ..SchedulingInput::default()
    });
    assert_eq!(result.new_claims.len(), 1);
    assert_eq!(result.new_claims[0].instance_type_options, vec!["c2"]);
    assert_eq!(
        result.unschedulable,
        vec![(0, format!("nodepool default limit {PRICE} exceeded"))]
    );
    assert_eq!(
        limit_note(&result.limits_reached[0]),
        format!(
            "limit {PRICE}=1.5 reached: {PRICE}=0.1 left once its nodes and the claims launching count; 1 pending pod(s) need more"
        )
    );
}

/// A provider's spend limit is one budget for all its pools: 2.0 per hour over pools `a`, `b`
/// and `gone` (not dynamic, left out of the batch). A launched c4 of `a` counts at its offering
/// (0.4), `gone`'s claim at its price annotation (0.3), one being deleted not at all: 1.3 is
/// left for both pools together. Three 8-CPU pods (0.8 each) get one c8 in all, not one per pool.
#[test]
fn a_provider_spend_limit_is_shared_by_its_pools() {
    let group = SpendGroup {
        name: "onprem".to_owned(),
        limit: 2_000,
    };
    let groups: HashMap<String, SpendGroup> = ["a", "b", "gone"]
        .iter()
        .map(|p| ((*p).to_owned(), group.clone()))
        .collect();
    let labelled = |pool: &str, it: &str| {
        let mut claim = launched(pool, "4");
        claim.metadata.labels.get_or_insert_default().extend([
            (INSTANCE_TYPE.to_owned(), it.to_owned()),
            (ZONE.to_owned(), "zone-1".to_owned()),
            (CAPACITY_TYPE.to_owned(), "on-demand".to_owned()),
        ]);
        claim
    };
    let mut gone = launched("gone", "4");
    gone.metadata
        .annotations
        .get_or_insert_default()
        .insert(PRICE_ANNOTATION.to_owned(), "0.3".to_owned());
    let mut deleting = labelled("b", "c8");
    deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    let claims = vec![labelled("a", "c4"), gone, deleting];

    let mut views: Vec<NodePoolView> = ["a", "b"]
        .iter()
        .map(|name| {
            let mut view = NodePoolView::new(*name, Arc::from(types()));
            join_spend_group(&mut view, &group);
            view.instance_types =
                with_price_capacity(view.limits.as_ref(), Arc::clone(&view.instance_types));
            let usage = claim_usage(name, &claims, &view.instance_types);
            view.remaining = remaining(view.limits.as_ref(), &pool(json!({}), None), &usage);
            view
        })
        .collect();
    assert_eq!(
        views[0].remaining.as_ref().unwrap().0[PROVIDER_PRICE],
        1_600,
        "alone, a counts only its own c4"
    );
    share_spend_groups(&mut views, &groups, &claims);
    for view in &views {
        assert_eq!(view.spend_group.as_deref(), Some("onprem"));
        assert_eq!(view.remaining.as_ref().unwrap().0[PROVIDER_PRICE], 1_300);
    }

    let result = scheduling::solve(&SchedulingInput {
        pods: pods("p", &[8, 8, 8]),
        node_pools: views,
        ..SchedulingInput::default()
    });
    assert_eq!(result.new_claims.len(), 1, "{result:?}");
    assert_eq!(result.new_claims[0].instance_type_options, vec!["c8"]);
    assert_eq!(result.unschedulable.len(), 2);
    assert!(
        result
            .unschedulable
            .iter()
            .all(|(_, why)| why.ends_with(&format!("limit {PROVIDER_PRICE} exceeded"))),
        "{:?}",
        result.unschedulable
    );
    let reached = &result.limits_reached[0];
    assert_eq!(reached.resource, PROVIDER_PRICE);
    assert_eq!((reached.limit, reached.left), (2_000, 500));
    assert_eq!(
        limit_note(reached),
        format!(
            "limit {PROVIDER_PRICE}=2 reached: {PROVIDER_PRICE}=0.5 left once the nodes and launching claims of every NodePool of its provider count; 2 pending pod(s) need more"
        )
    );
}

#[test]
fn limit_events_are_rate_limited_per_pool_and_resource() {
    let mut events = LimitEvents::default();
    let t0 = Instant::now();
    assert!(events.due("a", "cpu", t0));
    assert!(!events.due("a", "cpu", t0 + Duration::from_secs(10)));
    assert!(events.due("a", "memory", t0), "another limit of the pool");
    assert!(events.due("b", "cpu", t0), "another pool");
    events.expire(t0 + LIMIT_EVENT_INTERVAL);
    assert!(events.due("a", "cpu", t0 + LIMIT_EVENT_INTERVAL));
    assert!(!events.due(
        "a",
        "cpu",
        t0 + LIMIT_EVENT_INTERVAL + Duration::from_secs(1)
    ));
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    fn any_types() -> impl Strategy<Value = Vec<InstanceType>> {
        proptest::collection::btree_set(1i64..40, 1..8).prop_map(|cpus| {
            cpus.into_iter()
                .map(|c| instance_type(&format!("c{c}"), c))
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Whatever the limits, types and batches: the claims' worst cases (every launching
        /// claim at its largest option) plus what is in use never exceed a limit, and a pod is
        /// refused by a limit only when no type that fits it fits in what is left.
        #[test]
        fn claims_never_exceed_the_limits_and_refuse_only_when_the_room_is_used(
            types in any_types(),
            limit_cpu in 1i64..120,
            limit_nodes in proptest::option::of(1i64..12),
            used_cpu in 0i64..40,
            batches in proptest::collection::vec(
                proptest::collection::vec(100i64..20_000, 1..6), 1..5),
        ) {
            let mut limits = json!({"cpu": limit_cpu.to_string()});
            if let Some(nodes) = limit_nodes {
                limits["nodes"] = json!(nodes.to_string());
            }
            let p = pool(limits, None);
            let mut claims = Vec::new();
            if used_cpu > 0 {
                claims.push(launched("default", &used_cpu.to_string()));
            }
            let used_nodes = claims.len() as i64;
            for (b, batch) in batches.iter().enumerate() {
                let pods: Vec<Pod> = batch
                    .iter()
                    .enumerate()
                    .map(|(i, &m)| Pod::new("default", format!("p{b}-{i}"), Resources::new(m, GI / 4, 0)))
                    .collect();
                let result = run_batch(&p, &types, &mut claims, pods.clone());
                let usage = claim_usage("default", &claims, &types);
                prop_assert!(
                    usage.resources.get("cpu") <= (limit_cpu * 1000).max(used_cpu * 1000),
                    "cpu: {:?} in use and launching over {limit_cpu}", usage.resources
                );
                if let Some(nodes) = limit_nodes {
                    prop_assert!(usage.nodes <= nodes.max(used_nodes), "{} claims over {nodes} nodes", usage.nodes);
                }
                for reached in &result.limits_reached {
                    if reached.resource == "nodes" {
                        prop_assert!(reached.left <= 0, "refused with {} nodes left", reached.left);
                        continue;
                    }
                    prop_assert_eq!(&reached.resource, "cpu");
                    for &i in &reached.pods {
                        let fits_left = types.iter().any(|t| {
                            pods[i].requests.fits_in(&t.capacity)
                                && t.capacity.cpu_millis <= reached.left
                        });
                        prop_assert!(!fits_left, "pod {i} refused with {}m left", reached.left);
                    }
                }
            }
        }
    }
}
