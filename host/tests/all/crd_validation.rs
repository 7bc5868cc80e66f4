//! The rules of Capstan's NodePool, NodeClaim and NodeOverlay CRDs (Karpenter's rules) on the real
//! API server: one row per rule, each malformed object refused with 422 and the rule's message, the
//! well-formed variants accepted, and the transition rules (immutable NodeClaim spec, NodePool
//! `nodeClassRef` group and kind, static versus dynamic pools) enforced on update; and the Provider's
//! verification rules.

use capstan::api::rules::{
    HOSTNAME_RESTRICTED, IN_NEEDS_VALUES, KARPENTER_DOMAIN_RESTRICTED, MIN_VALUES,
    NODE_CLASS_GROUP_IMMUTABLE, NODE_CLASS_KIND_IMMUTABLE, NODEPOOL_RESTRICTED, ONE_INTEGER,
    SCHEDULE_WITH_DURATION, SPEC_IMMUTABLE, STATIC_LIMITS, STATIC_TRANSITION, STATIC_WEIGHT,
};
use capstan::api::{NodeClaim, NodePool};
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};
use serde_json::{Value, json};

use crate::lifecycle::{Names, RUN_LABEL, cluster};

/// What the API server says of a value that does not match the schema's `pattern`.
const PATTERN: &str = "should match";
/// What it says of a value outside an `enum`.
const ENUM: &str = "Unsupported value";

/// Where a NodePool keeps the fields a NodeClaim has in its spec.
const POOL_SPEC: &str = "/spec/template/spec";
const CLAIM_SPEC: &str = "/spec";

/// JSON pointers and the values to put there (`null` removes the field).
type Changes = Vec<(String, Value)>;
/// A malformed object: what is wrong, the changes to a well-formed one, and what the refusal
/// must say.
type Row = (&'static str, Changes, Vec<&'static str>);

fn api<K: Resource<DynamicType = ()>>(client: &Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &ApiResource::erase::<K>(&()))
}

/// A NodePool using every field a rule covers, well-formed.
fn pool(names: &Names, name: &str) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": names.name(name), "labels": {RUN_LABEL: names.run}},
        "spec": {
            "template": {
                "metadata": {"labels": {"team": "a", "karpenter.sh/capacity-type": "spot"}},
                "spec": {
                    "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "x"},
                    "requirements": [
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    ],
                    "taints": [
                        {"key": "example.com/dedicated", "value": "gpu", "effect": "NoSchedule"},
                    ],
                    "startupTaints": [{"key": "example.com/starting", "effect": "NoExecute"}],
                    "expireAfter": "720h",
                    "terminationGracePeriod": "1h",
                },
            },
            "disruption": {
                "consolidateAfter": "30s",
                "consolidationPolicy": "WhenEmpty",
                "budgets": [{"nodes": "10%"}],
            },
            "limits": {"cpu": "100"},
            "weight": 10,
        },
    })
}

/// A NodeClaim using every field a rule covers, well-formed.
fn claim(names: &Names, name: &str) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": names.name(name), "labels": {RUN_LABEL: names.run}},
        "spec": {
            "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "x"},
            "requirements": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["p"]},
            ],
            "taints": [{"key": "example.com/dedicated", "value": "gpu", "effect": "NoSchedule"}],
            "startupTaints": [{"key": "example.com/starting", "effect": "NoExecute"}],
            "resources": {"requests": {"cpu": "1"}},
            "expireAfter": "Never",
            "terminationGracePeriod": "30s",
        },
    })
}

/// `base` with each JSON pointer set to its value (`null` removes the field; the parent must
/// exist).
fn with(mut base: Value, changes: &[(String, Value)]) -> Value {
    for (path, value) in changes {
        let (parent, key) = path.rsplit_once('/').unwrap();
        let parent = base
            .pointer_mut(parent)
            .and_then(Value::as_object_mut)
            .unwrap_or_else(|| panic!("no object at {parent}"));
        if value.is_null() {
            parent.remove(key);
        } else {
            parent.insert(key.to_owned(), value.clone());
        }
    }
    base
}

/// One change at `spec` + `path`.
fn at(spec: &str, path: &str, value: Value) -> Changes {
    vec![(format!("{spec}{path}"), value)]
}

/// The requirements replaced by one requirement.
fn requirement(spec: &str, requirement: Value) -> Changes {
    at(spec, "/requirements", json!([requirement]))
}

/// The taints (`field` is `taints` or `startupTaints`) replaced by one taint.
fn taint(spec: &str, field: &str, key: &str, value: Option<&str>, effect: &str) -> Changes {
    let mut taint = json!({"key": key, "effect": effect});
    if let Some(value) = value {
        taint["value"] = json!(value);
    }
    at(spec, &format!("/{field}"), json!([taint]))
}

fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        ..PostParams::default()
    }
}

/// Asserts that the API server refused with 422 and a message holding every one of `expected`.
fn assert_refused<T: std::fmt::Debug>(what: &str, result: kube::Result<T>, expected: &[&str]) {
    let status = match result {
        Err(kube::Error::Api(status)) => status,
        Err(other) => panic!("{what}: not an API error: {other}"),
        Ok(accepted) => panic!("{what}: accepted: {accepted:?}"),
    };
    println!("{what}: {}", status.message);
    assert_eq!(status.code, 422, "{what}: {status:?}");
    for part in expected {
        assert!(
            status.message.contains(part),
            "{what}: {part:?} not in {:?}",
            status.message
        );
    }
}

/// A requirement on an integer label.
fn generation(operator: &str, values: Value) -> Value {
    json!({"key": "example.com/generation", "operator": operator, "values": values})
}

/// The rows both kinds share: requirements and taints, at `spec`.
fn requirement_and_taint_rows(spec: &str) -> Vec<Row> {
    vec![
        (
            "In without values",
            requirement(spec, json!({"key": "kubernetes.io/arch", "operator": "In"})),
            vec![IN_NEEDS_VALUES],
        ),
        (
            "In with values: []",
            requirement(spec, generation("In", json!([]))),
            vec![IN_NEEDS_VALUES],
        ),
        (
            "Gt with two values",
            requirement(spec, generation("Gt", json!(["1", "2"]))),
            vec![ONE_INTEGER],
        ),
        (
            "Gt with a non-integer",
            requirement(spec, generation("Gt", json!(["abc"]))),
            vec![ONE_INTEGER],
        ),
        (
            "Lt with a negative integer",
            requirement(spec, generation("Lt", json!(["-1"]))),
            vec![ONE_INTEGER],
        ),
        (
            "Gte without values",
            requirement(
                spec,
                json!({"key": "example.com/generation", "operator": "Gte"}),
            ),
            vec![ONE_INTEGER],
        ),
        (
            "Lte with a fraction",
            requirement(spec, generation("Lte", json!(["1.5"]))),
            vec![ONE_INTEGER],
        ),
        (
            "minValues above the number of values",
            requirement(
                spec,
                json!({
                    "key": "node.kubernetes.io/instance-type", "operator": "In",
                    "values": ["a"], "minValues": 2,
                }),
            ),
            vec![MIN_VALUES],
        ),
        (
            "minValues 0",
            requirement(
                spec,
                json!({
                    "key": "node.kubernetes.io/instance-type", "operator": "Exists", "minValues": 0,
                }),
            ),
            vec!["requirements[0].minValues", "greater than or equal to 1"],
        ),
        (
            "a key that is no label key",
            requirement(spec, json!({"key": "not a key!", "operator": "Exists"})),
            vec!["requirements[0].key", PATTERN],
        ),
        (
            "a key over 316 characters",
            requirement(spec, json!({"key": "a".repeat(317), "operator": "Exists"})),
            vec!["requirements[0].key", "316"],
        ),
        (
            "key kubernetes.io/hostname",
            requirement(
                spec,
                json!({"key": "kubernetes.io/hostname", "operator": "In", "values": ["n"]}),
            ),
            vec![HOSTNAME_RESTRICTED],
        ),
        (
            "a key in the karpenter.sh domain",
            requirement(
                spec,
                json!({"key": "karpenter.sh/other", "operator": "Exists"}),
            ),
            vec![KARPENTER_DOMAIN_RESTRICTED],
        ),
        (
            "a key in a karpenter.sh subdomain",
            requirement(
                spec,
                json!({"key": "x.karpenter.sh/other", "operator": "Exists"}),
            ),
            vec![KARPENTER_DOMAIN_RESTRICTED],
        ),
        (
            "an unknown operator",
            requirement(
                spec,
                json!({"key": "kubernetes.io/arch", "operator": "Sometimes", "values": ["amd64"]}),
            ),
            vec!["requirements[0].operator", ENUM],
        ),
        (
            "an unknown taint effect",
            taint(spec, "taints", "example.com/t", None, "NoWay"),
            vec!["taints[0].effect", ENUM],
        ),
        (
            "a taint key that is no label key",
            taint(spec, "taints", "bad key", None, "NoSchedule"),
            vec!["taints[0].key", PATTERN],
        ),
        (
            "an empty startup taint key",
            taint(spec, "startupTaints", "", None, "NoSchedule"),
            vec!["startupTaints[0].key"],
        ),
        (
            "a taint value that is no label value",
            taint(spec, "taints", "example.com/t", Some("a b"), "NoSchedule"),
            vec!["taints[0].value", PATTERN],
        ),
        (
            "expireAfter forever",
            at(spec, "/expireAfter", json!("forever")),
            vec!["expireAfter", PATTERN],
        ),
        (
            "expireAfter in days",
            at(spec, "/expireAfter", json!("30d")),
            vec!["expireAfter", PATTERN],
        ),
        (
            "terminationGracePeriod Never",
            at(spec, "/terminationGracePeriod", json!("Never")),
            vec!["terminationGracePeriod", PATTERN],
        ),
        (
            "an empty nodeClassRef group",
            at(spec, "/nodeClassRef/group", json!("")),
            vec!["nodeClassRef.group"],
        ),
        (
            "an empty nodeClassRef kind",
            at(spec, "/nodeClassRef/kind", json!("")),
            vec!["nodeClassRef.kind"],
        ),
    ]
}

/// The rows only NodePools have.
fn pool_rows() -> Vec<Row> {
    let budgets = |budgets: Value| vec![("/spec/disruption/budgets".to_owned(), budgets)];
    let disruption = |field: &str, value: Value| vec![(format!("/spec/disruption/{field}"), value)];
    let label = |key: &str, value: &str| {
        vec![(
            "/spec/template/metadata/labels".to_owned(),
            json!({ key: value }),
        )]
    };
    let static_pool = |extra: &[(&str, Value)]| {
        let mut changes = vec![
            ("/spec/replicas".to_owned(), json!(2)),
            ("/spec/weight".to_owned(), Value::Null),
            ("/spec/limits".to_owned(), Value::Null),
        ];
        changes.extend(extra.iter().map(|(p, v)| ((*p).to_owned(), v.clone())));
        changes
    };
    vec![
        (
            "requirement key karpenter.sh/nodepool",
            requirement(
                POOL_SPEC,
                json!({"key": "karpenter.sh/nodepool", "operator": "In", "values": ["p"]}),
            ),
            vec![NODEPOOL_RESTRICTED],
        ),
        (
            "budget nodes 101%",
            budgets(json!([{"nodes": "101%"}])),
            vec!["budgets[0].nodes", PATTERN],
        ),
        (
            "budget nodes -1",
            budgets(json!([{"nodes": "-1"}])),
            vec!["budgets[0].nodes", PATTERN],
        ),
        (
            "a schedule without a duration",
            budgets(json!([{"nodes": "1", "schedule": "@daily"}])),
            vec![SCHEDULE_WITH_DURATION],
        ),
        (
            "a duration without a schedule",
            budgets(json!([{"nodes": "1", "duration": "1h"}])),
            vec![SCHEDULE_WITH_DURATION],
        ),
        (
            "a schedule that is no cron expression",
            budgets(json!([{"nodes": "1", "schedule": "daily", "duration": "1h"}])),
            vec!["budgets[0].schedule", PATTERN],
        ),
        (
            "a schedule of four fields",
            budgets(json!([{"nodes": "1", "schedule": "0 9 * *", "duration": "1h"}])),
            vec!["budgets[0].schedule", PATTERN],
        ),
        (
            "a budget duration in seconds",
            budgets(json!([{"nodes": "1", "schedule": "@daily", "duration": "30s"}])),
            vec!["budgets[0].duration", PATTERN],
        ),
        (
            "an unknown budget reason",
            budgets(json!([{"nodes": "1", "reasons": ["Expired"]}])),
            vec!["budgets[0].reasons[0]", ENUM],
        ),
        (
            "a budget reason twice",
            budgets(json!([{"nodes": "1", "reasons": ["Empty", "Empty"]}])),
            vec!["budgets[0].reasons[1]", "Duplicate value"],
        ),
        (
            "51 budgets",
            budgets(json!(vec![json!({"nodes": "1"}); 51])),
            vec!["spec.disruption.budgets"],
        ),
        (
            "consolidateAfter in days",
            disruption("consolidateAfter", json!("1d")),
            vec!["consolidateAfter", PATTERN],
        ),
        (
            "an unknown consolidationPolicy",
            disruption("consolidationPolicy", json!("Always")),
            vec!["consolidationPolicy", ENUM],
        ),
        (
            "a template label in the karpenter.sh domain",
            label("karpenter.sh/team", "a"),
            vec![KARPENTER_DOMAIN_RESTRICTED],
        ),
        (
            "template label karpenter.sh/nodepool",
            label("karpenter.sh/nodepool", "p"),
            vec![NODEPOOL_RESTRICTED],
        ),
        (
            "template label kubernetes.io/hostname",
            label("kubernetes.io/hostname", "h"),
            vec![HOSTNAME_RESTRICTED],
        ),
        (
            "a template label value that is no label value",
            label("team", "not ok!"),
            vec!["labels.team", PATTERN],
        ),
        (
            "weight 0",
            vec![("/spec/weight".to_owned(), json!(0))],
            vec!["spec.weight", "greater than or equal to 1"],
        ),
        (
            "a static pool with a weight",
            static_pool(&[("/spec/weight", json!(10))]),
            vec![STATIC_WEIGHT],
        ),
        (
            "a static pool with a cpu limit",
            static_pool(&[("/spec/limits", json!({"nodes": "3", "cpu": "10"}))]),
            vec![STATIC_LIMITS],
        ),
    ]
}

/// Well-formed variants: none of them may trip a rule.
fn accepted_pool_variants() -> Vec<(&'static str, Changes)> {
    let requirements = |list: Value| vec![(format!("{POOL_SPEC}/requirements"), list)];
    vec![
        ("the base pool", vec![]),
        (
            "every operator",
            requirements(json!([
                {
                    "key": "node.kubernetes.io/instance-type", "operator": "In",
                    "values": ["a", "b"], "minValues": 2,
                },
                {"key": "karpenter.sh/capacity-type", "operator": "NotIn", "values": ["spot"]},
                {"key": "karpenter.kwok.sh/instance-family", "operator": "Exists", "minValues": 1},
                {"key": "example.com/legacy", "operator": "DoesNotExist"},
                {"key": "example.com/generation", "operator": "Gt", "values": ["0"]},
                {"key": "example.com/generation", "operator": "Lt", "values": ["10"]},
                {"key": "example.com/cpus", "operator": "Gte", "values": ["4"]},
                {"key": "example.com/cpus", "operator": "Lte", "values": ["64"]},
            ])),
        ),
        (
            "budgets with schedules",
            vec![(
                "/spec/disruption/budgets".to_owned(),
                json!([
                    {"nodes": "0"},
                    {"nodes": "100%", "schedule": "@daily", "duration": "10m"},
                    {
                        "nodes": "5", "schedule": "0 9 * * mon-fri", "duration": "8h",
                        "reasons": ["Drifted", "Empty"],
                    },
                    {
                        "nodes": "1", "schedule": "*/5 * * * *", "duration": "1h30m0s",
                        "reasons": ["Underutilized"],
                    },
                ]),
            )],
        ),
        (
            "Balanced, Never and a taint with an empty value",
            vec![
                (
                    "/spec/disruption/consolidationPolicy".to_owned(),
                    json!("Balanced"),
                ),
                (
                    "/spec/disruption/consolidateAfter".to_owned(),
                    json!("Never"),
                ),
                (format!("{POOL_SPEC}/expireAfter"), json!("Never")),
                (
                    format!("{POOL_SPEC}/taints"),
                    json!([{"key": "dedicated", "value": "", "effect": "PreferNoSchedule"}]),
                ),
            ],
        ),
        (
            "a static pool limited in nodes",
            vec![
                ("/spec/replicas".to_owned(), json!(3)),
                ("/spec/weight".to_owned(), Value::Null),
                ("/spec/limits".to_owned(), json!({"nodes": "5"})),
            ],
        ),
    ]
}

#[tokio::test]
async fn malformed_node_pools_and_node_claims_are_refused_by_the_crd_rules() {
    let (_cp, client) = cluster().await;
    let names = Names::new("crdrules");
    let (pools, claims) = (api::<NodePool>(&client), api::<NodeClaim>(&client));

    for (what, changes) in accepted_pool_variants() {
        let object: DynamicObject =
            serde_json::from_value(with(pool(&names, "ok"), &changes)).unwrap();
        if let Err(err) = pools.create(&dry_run(), &object).await {
            panic!("NodePool with {what} refused: {err}");
        }
    }
    claims
        .create(
            &dry_run(),
            &serde_json::from_value(claim(&names, "ok")).unwrap(),
        )
        .await
        .expect("the well-formed NodeClaim (with a karpenter.sh/nodepool requirement)");

    let mut rows = 0;
    let pool_cases = requirement_and_taint_rows(POOL_SPEC)
        .into_iter()
        .chain(pool_rows());
    for (what, changes, expected) in pool_cases {
        let object: DynamicObject =
            serde_json::from_value(with(pool(&names, "bad"), &changes)).unwrap();
        let result = pools.create(&dry_run(), &object).await;
        assert_refused(&format!("NodePool with {what}"), result, &expected);
        rows += 1;
    }
    for (what, changes, expected) in requirement_and_taint_rows(CLAIM_SPEC) {
        let object: DynamicObject =
            serde_json::from_value(with(claim(&names, "bad"), &changes)).unwrap();
        let result = claims.create(&dry_run(), &object).await;
        assert_refused(&format!("NodeClaim with {what}"), result, &expected);
        rows += 1;
    }
    println!("{rows} malformed objects refused");
}

#[tokio::test]
async fn node_claim_specs_and_node_pool_modes_and_class_kinds_do_not_change() {
    let (_cp, client) = cluster().await;
    let names = Names::new("crdtransitions");
    let (pools, claims) = (api::<NodePool>(&client), api::<NodeClaim>(&client));
    let patch = |value: Value| Patch::Merge(value);
    let params = PatchParams::default();

    let claim_object: DynamicObject = serde_json::from_value(claim(&names, "claim")).unwrap();
    let claim_name = names.name("claim");
    claims
        .create(&PostParams::default(), &claim_object)
        .await
        .unwrap();
    let result = claims
        .patch(
            &claim_name,
            &params,
            &patch(json!({"spec": {"expireAfter": "1h"}})),
        )
        .await;
    assert_refused("a NodeClaim spec change", result, &[SPEC_IMMUTABLE]);
    claims
        .patch(
            &claim_name,
            &params,
            &patch(json!({"metadata": {"labels": {"touched": "yes"}}})),
        )
        .await
        .expect("metadata of a NodeClaim may change");

    let pool_object: DynamicObject = serde_json::from_value(pool(&names, "pool")).unwrap();
    let pool_name = names.name("pool");
    pools
        .create(&PostParams::default(), &pool_object)
        .await
        .unwrap();
    let class_ref = |field: &str, value: &str| {
        patch(json!({"spec": {"template": {"spec": {"nodeClassRef": {field: value}}}}}))
    };
    let result = pools
        .patch(&pool_name, &params, &class_ref("group", "example.com"))
        .await;
    assert_refused(
        "a nodeClassRef group change",
        result,
        &[NODE_CLASS_GROUP_IMMUTABLE],
    );
    let result = pools
        .patch(&pool_name, &params, &class_ref("kind", "OtherClass"))
        .await;
    assert_refused(
        "a nodeClassRef kind change",
        result,
        &[NODE_CLASS_KIND_IMMUTABLE],
    );
    pools
        .patch(&pool_name, &params, &class_ref("name", "another"))
        .await
        .expect("the nodeClassRef name may change");
    let result = pools
        .patch(
            &pool_name,
            &params,
            &patch(json!({"spec": {"replicas": 1, "weight": null, "limits": null}})),
        )
        .await;
    assert_refused("a dynamic pool turned static", result, &[STATIC_TRANSITION]);

    let static_name = names.name("static");
    let static_object = with(
        pool(&names, "static"),
        &[
            ("/spec/replicas".to_owned(), json!(1)),
            ("/spec/weight".to_owned(), Value::Null),
            ("/spec/limits".to_owned(), Value::Null),
        ],
    );
    pools
        .create(
            &PostParams::default(),
            &serde_json::from_value(static_object).unwrap(),
        )
        .await
        .unwrap();
    let result = pools
        .patch(
            &static_name,
            &params,
            &patch(json!({"spec": {"replicas": null}})),
        )
        .await;
    assert_refused("a static pool turned dynamic", result, &[STATIC_TRANSITION]);
    pools
        .patch(
            &static_name,
            &params,
            &patch(json!({"spec": {"replicas": 4}})),
        )
        .await
        .expect("a static pool's replicas may change");

    for name in [&pool_name, &static_name] {
        pools.delete(name, &DeleteParams::default()).await.unwrap();
    }
    claims
        .delete(&claim_name, &DeleteParams::default())
        .await
        .unwrap();
}

/// A NodeOverlay using every field, well-formed.
fn overlay(names: &Names, name: &str) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
        "metadata": {"name": names.name(name), "labels": {RUN_LABEL: names.run}},
        "spec": {
            "weight": 10,
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["a"]},
                {"key": "karpenter.sh/capacity-type", "operator": "NotIn", "values": ["spot"]},
                {"key": "example.com/cpus", "operator": "Gte", "values": ["4"]},
            ],
            "priceAdjustment": "-10%",
            "capacity": {"example.com/fpga": "2"},
        },
    })
}

/// Karpenter's NodeOverlay rules on the API server: both prices, a price that is not a decimal,
/// an adjustment below -100%, capacity of a standard resource, `In` or `NotIn` without values, a
/// bound with two values, a karpenter.sh key, a weight out of range.
#[tokio::test]
async fn malformed_node_overlays_are_refused_by_the_crd_rules() {
    use capstan::api::NodeOverlay;
    use capstan::api::rules::{
        NOT_IN_NEEDS_VALUES, OVERLAY_ONE_INTEGER, PRICE_OR_ADJUSTMENT, RESTRICTED_RESOURCE,
    };
    let (_cp, client) = cluster().await;
    let names = Names::new("overlayrules");
    let overlays = api::<NodeOverlay>(&client);
    for (what, changes) in [
        ("an adjustment", vec![]),
        (
            "a price",
            vec![
                ("/spec/priceAdjustment".to_owned(), Value::Null),
                ("/spec/price".to_owned(), json!("0.25")),
            ],
        ),
        (
            "+0.5 and no weight",
            vec![
                ("/spec/priceAdjustment".to_owned(), json!("+0.5")),
                ("/spec/weight".to_owned(), Value::Null),
            ],
        ),
        (
            "-100%",
            vec![("/spec/priceAdjustment".to_owned(), json!("-100%"))],
        ),
    ] {
        let object: DynamicObject =
            serde_json::from_value(with(overlay(&names, "ok"), &changes)).unwrap();
        if let Err(err) = overlays.create(&dry_run(), &object).await {
            panic!("NodeOverlay with {what} refused: {err}");
        }
    }
    let requirement = |r: Value| ("/spec/requirements".to_owned(), json!([r]));
    let rows: Vec<Row> = vec![
        (
            "both prices",
            vec![("/spec/price".to_owned(), json!("1"))],
            vec![PRICE_OR_ADJUSTMENT],
        ),
        (
            "a negative price",
            vec![
                ("/spec/priceAdjustment".to_owned(), Value::Null),
                ("/spec/price".to_owned(), json!("-1")),
            ],
            vec![PATTERN],
        ),
        (
            "-150%",
            vec![("/spec/priceAdjustment".to_owned(), json!("-150%"))],
            vec![PATTERN],
        ),
        (
            "capacity of memory",
            vec![("/spec/capacity".to_owned(), json!({"memory": "1Gi"}))],
            vec![RESTRICTED_RESOURCE],
        ),
        (
            "NotIn without values",
            vec![requirement(json!({"key": "a", "operator": "NotIn"}))],
            vec![NOT_IN_NEEDS_VALUES],
        ),
        (
            "In without values",
            vec![requirement(json!({"key": "a", "operator": "In"}))],
            vec![IN_NEEDS_VALUES],
        ),
        (
            "Gt with two values",
            vec![requirement(
                json!({"key": "a", "operator": "Gt", "values": ["1", "2"]}),
            )],
            vec![OVERLAY_ONE_INTEGER],
        ),
        (
            "a karpenter.sh key",
            vec![requirement(
                json!({"key": "karpenter.sh/foo", "operator": "Exists"}),
            )],
            vec![KARPENTER_DOMAIN_RESTRICTED],
        ),
        (
            "weight 0",
            vec![("/spec/weight".to_owned(), json!(0))],
            vec!["should be greater than or equal to 1"],
        ),
    ];
    for (what, changes, expected) in rows {
        let object: DynamicObject =
            serde_json::from_value(with(overlay(&names, "bad"), &changes)).unwrap();
        let result = overlays.create(&dry_run(), &object).await;
        assert_refused(&format!("NodeOverlay with {what}"), result, &expected);
    }
}

/// `Provider.spec.verification`'s rules: something to trust, a trust root for identities, and
/// exactly one of each exact/prefix pair; a well-formed keyless block is accepted.
#[tokio::test]
async fn malformed_provider_verification_is_refused_by_the_crd_rules() {
    use capstan::api::provider::Provider;
    let (_cp, client) = cluster().await;
    let names = Names::new("verifyrules");
    let providers = api::<Provider>(&client);
    let provider = |verification: Value| {
        json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "Provider",
            "metadata": {"name": names.name("p"), "labels": {RUN_LABEL: names.run}},
            "spec": {
                "source": {"configMap": {"namespace": "capstan", "name": "kwok", "key": "provider.wasm"}},
                "verification": verification,
            },
        })
    };
    let identity =
        json!({"subject": "release@example.com", "issuer": "https://accounts.example.com"});
    let good = provider(json!({
        "identities": [identity],
        "trustRoot": {"name": "fulcio", "key": "trusted_root.json"},
    }));
    let object: DynamicObject = serde_json::from_value(good).unwrap();
    if let Err(err) = providers.create(&dry_run(), &object).await {
        panic!("keyless verification refused: {err}");
    }
    for (what, verification, expected) in [
        (
            "nothing to trust",
            json!({}),
            "set keys, identities, or both",
        ),
        (
            "identities without a trust root",
            json!({"identities": [identity]}),
            "identities need a trustRoot",
        ),
        (
            "subject and subjectPrefix",
            json!({"identities": [{"subject": "a@example.com", "subjectPrefix": "a@", "issuer": "x"}],
                   "trustRoot": {"name": "fulcio", "key": "trusted_root.json"}}),
            "set exactly one of subject and subjectPrefix",
        ),
        (
            "no issuer",
            json!({"identities": [{"subject": "a@example.com"}],
                   "trustRoot": {"name": "fulcio", "key": "trusted_root.json"}}),
            "set exactly one of issuer and issuerPrefix",
        ),
    ] {
        let object: DynamicObject = serde_json::from_value(provider(verification)).unwrap();
        assert_refused(
            what,
            providers.create(&dry_run(), &object).await,
            &[expected],
        );
    }
}
