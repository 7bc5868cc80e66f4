//! Issue 25, part 3, through the snapshot: the pools as NodePool objects, the spread pods
//! as Pods. `tiny-limit` reaches zone d for arm64 pods; whether it is at its limits (counted from
//! its NodeClaims), not Ready, or static, it launches nothing, and zone d is no domain: the six
//! spread pods place two per zone a, b, c on `arm-spot-only`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::api::labels::{CAPACITY_TYPE, ZONE};
use crate::rules::snapshot::{InstanceTypeSource, Snapshot};
use crate::scheduling::{InstanceType, Offering, Requirement, Requirements};

const ZONES: [&str; 4] = ["test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d"];

/// Every pool gets a 4 CPU amd64 and a 4 CPU arm64 type, spot and on-demand in every zone.
struct FourZones;

impl InstanceTypeSource for FourZones {
    async fn instance_types(
        &self,
        _pool: &NodePool,
        _classes: &HashMap<String, std::sync::Arc<crate::api::NodeClass>>,
    ) -> Result<Arc<[InstanceType]>, ProvisionError> {
        let it = |name: &str, arch: &str| InstanceType {
            name: name.to_owned(),
            requirements: Requirements::new()
                .with(Requirement::in_(crate::api::labels::INSTANCE_TYPE, [name]))
                .with(Requirement::in_(crate::api::labels::ARCH, [arch]))
                .with(Requirement::in_(ZONE, ZONES))
                .with(Requirement::in_(CAPACITY_TYPE, ["spot", "on-demand"])),
            offerings: ZONES
                .iter()
                .flat_map(|z| {
                    [
                        Offering::new(*z, "spot", 0.1),
                        Offering::new(*z, "on-demand", 0.2),
                    ]
                })
                .collect(),
            capacity: scheduling::Resources::new(4000, 16 << 30, 110),
            overhead: scheduling::Resources::default(),
            volume_limits: Default::default(),
            devices: Vec::new(),
        };
        Ok(Arc::from(vec![it("amd-4", "amd64"), it("arm-4", "arm64")]))
    }
}

fn object<T: serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).unwrap())
}

fn req(key: &str, operator: &str, values: &[&str]) -> Value {
    json!({"key": key, "operator": operator, "values": values})
}

fn pool(name: &str, weight: i32, requirements: Vec<Value>, taints: Value) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "weight": weight,
            "template": {"spec": {
                "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "nc"},
                "requirements": requirements,
                "taints": taints,
            }},
        },
    })
}

/// `arm-spot-only`, `general` and `tiny-limit` (edited by `tiny`).
fn pools(tiny: impl FnOnce(&mut Value)) -> Vec<Arc<NodePool>> {
    let arm = pool(
        "arm-spot-only",
        50,
        vec![
            req("kubernetes.io/arch", "In", &["arm64"]),
            req("karpenter.sh/capacity-type", "In", &["spot"]),
            req(ZONE, "NotIn", &["test-zone-d"]),
        ],
        json!([{"key": "example.com/arm", "effect": "NoSchedule"}]),
    );
    let general = pool(
        "general",
        10,
        vec![req("kubernetes.io/arch", "In", &["amd64"])],
        json!([]),
    );
    let mut tiny_limit = pool(
        "tiny-limit",
        100,
        vec![req("example.com/pool", "In", &["tiny"])],
        json!([]),
    );
    tiny_limit["spec"]["limits"] = json!({"cpu": "4"});
    tiny(&mut tiny_limit);
    vec![object(arm), object(general), object(tiny_limit)]
}

fn spread_pod(i: usize) -> Arc<Pod> {
    object(json!({
        "metadata": {"name": format!("spread-{i}"), "namespace": "default", "labels": {"app": "spread"}},
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
            "nodeSelector": {"kubernetes.io/arch": "arm64"},
            "tolerations": [{"key": "example.com/arm", "operator": "Exists"}],
            "topologySpreadConstraints": [{
                "maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "spread"}},
            }],
        },
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"},
        ]},
    }))
}

/// `tiny-limit`'s one NodeClaim, launched with 4 CPU: its whole limit.
fn tiny_claim() -> Arc<NodeClaim> {
    object(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "tiny-limit-abc", "labels": {"karpenter.sh/nodepool": "tiny-limit"}},
        "spec": {
            "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "nc"},
            "requirements": [],
        },
        "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"}},
    }))
}

/// The spread pods per zone, and which pools the claims came from.
async fn solve(
    pools: Vec<Arc<NodePool>>,
    claims: Vec<Arc<NodeClaim>>,
) -> (BTreeMap<String, usize>, Vec<String>) {
    let view = crate::state::View {
        pods: (0..6).map(spread_pod).collect(),
        pools,
        claims,
        ..crate::state::View::default()
    };
    let snapshot = Snapshot::from_view(&view, &crate::rules::selector::Selector::default());
    let built = snapshot.input_from(&FourZones).await;
    assert_eq!(built.input.pods.len(), 6, "{:?}", built.rejected);
    let result = scheduling::solve(&built.input);
    assert!(result.unschedulable.is_empty(), "{result:?}");
    let mut zones = BTreeMap::new();
    let mut used = Vec::new();
    for claim in &result.new_claims {
        let zone = claim
            .requirements
            .set_of(ZONE)
            .and_then(scheduling::ValueSet::single_value)
            .unwrap_or("<unset>");
        *zones.entry(zone.to_owned()).or_default() += claim.pods.len();
        used.push(claim.node_pool.clone());
    }
    used.sort();
    used.dedup();
    (zones, used)
}

fn two_per_zone_abc() -> BTreeMap<String, usize> {
    ZONES[..3].iter().map(|z| ((*z).to_owned(), 2)).collect()
}

#[tokio::test]
async fn a_pool_at_its_limits_not_ready_or_static_reaches_no_zone() {
    // At its limits: its NodeClaim holds all 4 CPU.
    let (zones, used) = solve(pools(|_| {}), vec![tiny_claim()]).await;
    assert_eq!(zones, two_per_zone_abc());
    assert_eq!(used, ["arm-spot-only"]);

    // Not Ready (no claim: it would have room).
    let not_ready = pools(|p| {
        p["status"] = json!({"conditions": [{
            "type": "Ready", "status": "False", "reason": "NodeClassNotReady",
            "message": "NodeClass nc is not ready", "lastTransitionTime": "2026-01-01T00:00:00Z",
        }]});
    });
    let (zones, used) = solve(not_ready, Vec::new()).await;
    assert_eq!(zones, two_per_zone_abc());
    assert_eq!(used, ["arm-spot-only"]);

    // Static (`spec.replicas`).
    let (zones, used) = solve(pools(|p| p["spec"]["replicas"] = json!(1)), Vec::new()).await;
    assert_eq!(zones, two_per_zone_abc());
    assert_eq!(used, ["arm-spot-only"]);

    // Ready, dynamic and with room for one node: it takes one claim (the heaviest pool), then
    // its limit is spent within the run and zone d drops out again; nothing is stranded.
    let (zones, used) = solve(pools(|_| {}), Vec::new()).await;
    assert_eq!(zones, two_per_zone_abc());
    assert_eq!(used, ["arm-spot-only", "tiny-limit"]);

    // With room for every pod: the heaviest pool takes them all, over all four zones.
    let (zones, used) = solve(
        pools(|p| p["spec"]["limits"]["cpu"] = json!("16")),
        Vec::new(),
    )
    .await;
    assert_eq!(zones.len(), 4, "{zones:?}");
    assert!(zones.values().all(|&n| n == 1 || n == 2), "{zones:?}");
    assert_eq!(used, ["tiny-limit"]);
}
