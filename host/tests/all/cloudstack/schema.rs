//! The `CloudStackNodeClass` CRD `cloudstack.wasm` declares, on the real API server, against
//! karpenter-provider-cloudstack's: its valid examples apply unchanged (strict field validation,
//! nothing pruned), the malformed objects its CRD refuses are refused here too with a message of
//! the same meaning (upstream's message is kept beside each row, and the words that carry its
//! meaning must be in both), the status holds the fields upstream's controller writes, and the
//! short names, category and columns are upstream's. Where this CRD is deliberately stricter
//! (values the provider refuses anyway) or looser (`osType` alone), the rows say so.
//!
//! Upstream: github.com/mperea/karpenter-provider-cloudstack at [`UPSTREAM_COMMIT`]; its CRD is
//! `charts/karpenter-cloudstack/crds/karpenter.k8s.cloudstack_cloudstacknodeclasses.yaml`. Its
//! module is not served by the Go module proxy (403), so its examples are quoted here.

use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::fixtures::wasm;
use crate::lifecycle::{Names, RUN_LABEL, cluster};

/// The upstream commit the examples and messages below are taken from.
const UPSTREAM_COMMIT: &str = "e0df0e53cc3786a426eada5a32121d7f3a2ed321";

/// `examples/nodeclass.yaml`, as upstream ships it (comments and all).
const EXAMPLE_NODECLASS: &str = r#"apiVersion: karpenter.k8s.cloudstack/v1
kind: CloudStackNodeClass
metadata:
  name: default
spec:
  # Zone where nodes will be created
  zone: zone-01

  # Network selection - you can use tags, id, or name
  networkSelectorTerms:
    - tags:
        karpenter.sh/discovery: my-cluster
        environment: production
    # Alternative: select by ID
    # - id: network-uuid
    # Alternative: select by name
    # - name: default-network

  # Service offering selection
  serviceOfferingSelectorTerms:
    - tags:
        karpenter.sh/discovery: my-cluster
    # Alternative: select specific offerings
    # - name: Medium Instance
    # - name: Large Instance

  # Template selection
  templateSelectorTerms:
    - tags:
        os: ubuntu
        version: "22.04"
        type: karpenter
    # Alternative: select by OS type
    # - osType: Ubuntu 22.04
    # Alternative: select by ID
    # - id: template-uuid

  # User data for node initialization
  userData: |
    #!/bin/bash
    set -e

    # Wait for cloud-init to complete
    cloud-init status --wait

    # Your custom initialization here
    echo "Node initialization complete"

  # Tags to apply to VMs
  tags:
    team: platform
    managed-by: karpenter
    environment: production

  # Optional: Root disk size in GB
  rootDiskSize: 50

  # Optional: SSH keypair name
  sshKeyPair: my-keypair

"#;

/// The two `CloudStackNodeClass` documents of `examples/provisioner-advanced.yaml` (the file's
/// NodePools and Pod left out).
const EXAMPLE_ADVANCED: &str = r#"---
# NodeClass for general workloads
apiVersion: karpenter.k8s.cloudstack/v1
kind: CloudStackNodeClass
metadata:
  name: general
spec:
  zone: zone-01
  networkSelectorTerms:
    - tags:
        karpenter.sh/discovery: my-cluster
  serviceOfferingSelectorTerms:
    - name: "Medium Instance"
    - name: "Large Instance"
  templateSelectorTerms:
    - tags:
        os: ubuntu
        version: "22.04"
  userData: |
    #!/bin/bash
    echo "General workload node"

---
# NodeClass for compute-intensive workloads
apiVersion: karpenter.k8s.cloudstack/v1
kind: CloudStackNodeClass
metadata:
  name: compute-intensive
spec:
  zone: zone-01
  networkSelectorTerms:
    - tags:
        karpenter.sh/discovery: my-cluster
  serviceOfferingSelectorTerms:
    - name: "Compute Optimized Large"
    - name: "Compute Optimized XL"
  templateSelectorTerms:
    - tags:
        os: ubuntu
        version: "22.04"
  rootDiskSize: 100
  userData: |
    #!/bin/bash
    echo "Compute-intensive node"
"#;

/// `INSTALLATION.md`, "Creating Your First NodeClass" (the body of its `kubectl apply` heredoc).
const EXAMPLE_INSTALLATION: &str = r#"apiVersion: karpenter.k8s.cloudstack/v1
kind: CloudStackNodeClass
metadata:
  name: default
spec:
  zone: zone-01
  networkSelectorTerms:
    - tags:
        karpenter.sh/discovery: my-cluster
  serviceOfferingSelectorTerms:
    - tags:
        karpenter.sh/discovery: my-cluster
  templateSelectorTerms:
    - tags:
        os: ubuntu
        version: "22.04"
  userData: |
    #!/bin/bash
    echo "Karpenter node initialization"
"#;

/// `docs/ARCHITECTURE.md`, "CloudStackNodeClass".
const EXAMPLE_ARCHITECTURE: &str = r#"apiVersion: karpenter.k8s.cloudstack/v1
kind: CloudStackNodeClass
metadata:
  name: default
spec:
  zone: zone-01
  networkSelectorTerms:
    - name: k8s-network
  serviceOfferingSelectorTerms:
    - tags:
        compute-type: general-purpose
  templateSelectorTerms:
    - name: ubuntu-22.04-k8s
  userData: |
    #!/bin/bash
    # Bootstrap script
"#;

/// Every upstream example: where it is, and its text (the README's holds a NodePool too).
fn upstream_examples() -> [(&'static str, &'static str); 5] {
    [
        ("README.md", super::README_EXAMPLE),
        ("INSTALLATION.md", EXAMPLE_INSTALLATION),
        ("docs/ARCHITECTURE.md", EXAMPLE_ARCHITECTURE),
        ("examples/nodeclass.yaml", EXAMPLE_NODECLASS),
        ("examples/provisioner-advanced.yaml", EXAMPLE_ADVANCED),
    ]
}

fn classes(client: &Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &ApiResource {
            group: "karpenter.k8s.cloudstack".into(),
            version: "v1".into(),
            api_version: "karpenter.k8s.cloudstack/v1".into(),
            kind: "CloudStackNodeClass".into(),
            plural: "cloudstacknodeclasses".into(),
        },
    )
}

/// The `CloudStackNodeClass` documents of an example, as JSON, renamed unique to this test.
fn example_classes(names: &Names, source: &str, text: &str) -> Vec<Value> {
    let objects = capstan_test_support::parse_yaml(source, text).unwrap();
    objects
        .into_iter()
        .filter(|o| {
            o.types
                .as_ref()
                .is_some_and(|t| t.kind == "CloudStackNodeClass")
        })
        .map(|o| {
            let mut value = serde_json::to_value(&o).unwrap();
            let name = value["metadata"]["name"].as_str().unwrap().to_owned();
            value["metadata"]["name"] = json!(names.name(&name));
            value
        })
        .collect()
}

/// Server-side applies `object` as a dry run with strict field validation (an unknown field is
/// an error, as `kubectl apply` makes it).
async fn apply(api: &Api<DynamicObject>, object: &Value) -> kube::Result<DynamicObject> {
    let object: DynamicObject = serde_json::from_value(object.clone()).unwrap();
    let name = object.metadata.name.clone().unwrap();
    api.patch(
        &name,
        &PatchParams::apply("capstan-tests")
            .dry_run()
            .validation_strict(),
        &Patch::Apply(&object),
    )
    .await
}

/// Creates `object` as a dry run (as `kubectl create` or a client-side `kubectl apply` sends it).
async fn create(api: &Api<DynamicObject>, object: &Value) -> kube::Result<DynamicObject> {
    let object: DynamicObject = serde_json::from_value(object.clone()).unwrap();
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    api.create(&params, &object).await
}

/// Asserts `object` is accepted and stored as written (nothing pruned or defaulted in `spec`).
async fn assert_accepted(api: &Api<DynamicObject>, what: &str, object: &Value) {
    let stored = apply(api, object)
        .await
        .unwrap_or_else(|err| panic!("{what}: refused: {err}"));
    assert_eq!(stored.data["spec"], object["spec"], "{what}: spec changed");
}

/// The `message` of the API server's refusal of `result` with `code`.
fn refusal<T: std::fmt::Debug>(what: &str, result: kube::Result<T>, code: u16) -> String {
    match result {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, code, "{what}: {status:?}");
            status.message.clone()
        }
        Err(other) => panic!("{what}: not an API error: {other}"),
        Ok(accepted) => panic!("{what}: accepted: {accepted:?}"),
    }
}

/// `base` with each JSON pointer set to its value (`null` removes the field).
fn with(mut base: Value, changes: &[(&str, Value)]) -> Value {
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

/// A malformed object and its refusal.
struct Row {
    /// What is wrong.
    what: String,
    /// The changes to the well-formed `examples/nodeclass.yaml`.
    changes: Vec<(&'static str, Value)>,
    /// The path the refusal names.
    field: String,
    /// What upstream's CRD says of it, or `None` where upstream accepts it (this CRD is stricter:
    /// the provider refuses it anyway, later, as a NodeClass not ready).
    upstream: Option<&'static str>,
    /// The words carrying the message's meaning: in upstream's message (when it refuses) and
    /// in ours.
    meaning: Vec<String>,
}

fn row(
    what: impl Into<String>,
    changes: Vec<(&'static str, Value)>,
    field: impl Into<String>,
    upstream: Option<&'static str>,
    meaning: &[&str],
) -> Row {
    Row {
        what: what.into(),
        changes,
        field: field.into(),
        upstream,
        meaning: meaning.iter().map(|m| (*m).to_owned()).collect(),
    }
}

/// The three selector term lists: name, JSON pointer, and what upstream says of an empty one.
const TERM_LISTS: [(&str, &str, &str); 3] = [
    (
        "networkSelectorTerms",
        "/spec/networkSelectorTerms",
        "networkSelectorTerms cannot be empty",
    ),
    (
        "serviceOfferingSelectorTerms",
        "/spec/serviceOfferingSelectorTerms",
        "serviceOfferingSelectorTerms cannot be empty",
    ),
    (
        "templateSelectorTerms",
        "/spec/templateSelectorTerms",
        "templateSelectorTerms cannot be empty",
    ),
];

/// `count` tags `k0: v`, `k1: v`, ...
fn many_tags(count: usize) -> Value {
    Value::Object((0..count).map(|i| (format!("k{i}"), json!("v"))).collect())
}

/// Every malformed object upstream's CRD refuses, and those this CRD alone refuses.
fn rows() -> Vec<Row> {
    let mut rows = vec![
        row(
            "no spec",
            vec![("/spec", Value::Null)],
            "spec",
            None,
            &["Required value"],
        ),
        row(
            "no zone",
            vec![("/spec/zone", Value::Null)],
            "spec.zone",
            Some("Required value"),
            &["Required value"],
        ),
        row(
            "an empty zone",
            vec![("/spec/zone", json!(""))],
            "spec.zone",
            None,
            &["at least 1 chars long"],
        ),
    ];
    for (list, pointer, empty) in TERM_LISTS {
        let term = |t: Value| vec![(pointer, json!([t]))];
        rows.extend([
            row(
                format!("no {list}"),
                vec![(pointer, Value::Null)],
                format!("spec.{list}"),
                Some("Required value"),
                &["Required value"],
            ),
            row(
                format!("{list}: []"),
                vec![(pointer, json!([]))],
                format!("spec.{list}"),
                Some(empty),
                &[list, "empty"],
            ),
            row(
                format!("a term of {list} with no field"),
                term(json!({})),
                format!("spec.{list}"),
                Some("expected at least one, got none, ['tags', 'id', 'name']"),
                &["at least one", "tags", "id", "name"],
            ),
            row(
                format!("an empty tag key in a term of {list}"),
                term(json!({"tags": {"": "x"}})),
                format!("spec.{list}[0].tags"),
                Some("empty tag keys or values aren't supported"),
                &["empty tag keys or values"],
            ),
            row(
                format!("an empty tag value in a term of {list}"),
                term(json!({"tags": {"os": ""}})),
                format!("spec.{list}[0].tags"),
                Some("empty tag keys or values aren't supported"),
                &["empty tag keys or values"],
            ),
            row(
                format!("21 tags in a term of {list}"),
                term(json!({"tags": many_tags(21)})),
                format!("spec.{list}[0].tags"),
                Some("Too many: 21: must have at most 20 items"),
                &["at most 20"],
            ),
            row(
                format!("31 terms in {list}"),
                vec![(pointer, Value::Array(vec![json!({"name": "n"}); 31]))],
                format!("spec.{list}"),
                Some("Too many: 31: must have at most 30 items"),
                &["at most 30"],
            ),
            row(
                format!("an empty id in a term of {list}"),
                term(json!({"id": ""})),
                format!("spec.{list}[0].id"),
                None,
                &["at least 1 chars long"],
            ),
            row(
                format!("an empty name in a term of {list}"),
                term(json!({"name": ""})),
                format!("spec.{list}[0].name"),
                None,
                &["at least 1 chars long"],
            ),
        ]);
    }
    rows.push(row(
        "an empty osType in a template term",
        vec![("/spec/templateSelectorTerms", json!([{"osType": ""}]))],
        "spec.templateSelectorTerms[0].osType",
        None,
        &["at least 1 chars long"],
    ));
    rows.push(row(
        "an empty key in tags",
        vec![("/spec/tags", json!({"": "x"}))],
        "spec.tags",
        Some("empty tag keys aren't supported"),
        &["empty tag keys"],
    ));
    // Upstream's restricted keys, then Capstan's ownership tags (src/tags.rs) and a restricted
    // key in another letter case (CloudStack compares tag keys ignoring case).
    let restricted: [(&str, Option<&'static str>); 9] = [
        (
            "karpenter.sh/nodepool",
            Some("tag contains a restricted tag matching karpenter.sh/nodepool"),
        ),
        (
            "karpenter.sh/nodeclaim",
            Some("tag contains a restricted tag matching karpenter.sh/nodeclaim"),
        ),
        (
            "karpenter.k8s.cloudstack/nodeclass",
            Some("tag contains a restricted tag matching karpenter.k8s.cloudstack/nodeclass"),
        ),
        ("capstan.dev/nodeclass", None),
        ("capstan.dev/managed-by", None),
        ("capstan.dev/cluster", None),
        ("cloudstack.capstan.dev/parameters-hash", None),
        ("cloudstack.capstan.dev/reboot-operation", None),
        ("Karpenter.sh/NodePool", None),
    ];
    for (key, upstream) in restricted {
        rows.push(row(
            format!("tag key {key}"),
            vec![("/spec/tags", json!({"team": "platform", key: "x"}))],
            "spec.tags",
            upstream,
            &["restricted", &key.to_lowercase()],
        ));
    }
    rows.extend([
        row(
            "rootDiskSize 1001",
            vec![("/spec/rootDiskSize", json!(1001))],
            "spec.rootDiskSize",
            Some("spec.rootDiskSize in body should be less than or equal to 1000"),
            &["less than or equal to 1000"],
        ),
        row(
            "rootDiskSize 0",
            vec![("/spec/rootDiskSize", json!(0))],
            "spec.rootDiskSize",
            Some("spec.rootDiskSize in body should be greater than or equal to 1"),
            &["greater than or equal to 1"],
        ),
        row(
            "an empty diskOffering",
            vec![("/spec/diskOffering", json!(""))],
            "spec.diskOffering",
            None,
            &["at least 1 chars long"],
        ),
        row(
            "an empty sshKeyPair",
            vec![("/spec/sshKeyPair", json!(""))],
            "spec.sshKeyPair",
            None,
            &["at least 1 chars long"],
        ),
    ]);
    rows
}

/// Well-formed variants of `examples/nodeclass.yaml`: the alternatives its comments name (the
/// `osType`-only template term among them, which upstream's CRD refuses although its example
/// suggests it: this CRD accepts it, as the provider does) and the limits themselves.
fn accepted_variants() -> Vec<(&'static str, Vec<(&'static str, Value)>)> {
    vec![
        (
            "a network by id",
            vec![(
                "/spec/networkSelectorTerms",
                json!([{"id": "network-uuid"}]),
            )],
        ),
        (
            "a network by name",
            vec![(
                "/spec/networkSelectorTerms",
                json!([{"name": "default-network"}]),
            )],
        ),
        (
            "offerings by name",
            vec![(
                "/spec/serviceOfferingSelectorTerms",
                json!([{"name": "Medium Instance"}, {"name": "Large Instance"}]),
            )],
        ),
        (
            "a template by osType alone (upstream's CRD refuses it)",
            vec![(
                "/spec/templateSelectorTerms",
                json!([{"osType": "Ubuntu 22.04"}]),
            )],
        ),
        (
            "a template by id",
            vec![(
                "/spec/templateSelectorTerms",
                json!([{"id": "template-uuid"}]),
            )],
        ),
        (
            "every field of a term, the value * and 20 tags",
            vec![(
                "/spec/templateSelectorTerms",
                json!([
                    {"tags": {"os": "*"}, "id": "t", "name": "n", "osType": "Ubuntu"},
                    {"tags": many_tags(20)},
                ]),
            )],
        ),
        (
            "30 terms",
            vec![(
                "/spec/networkSelectorTerms",
                Value::Array(vec![json!({"name": "n"}); 30]),
            )],
        ),
        (
            "rootDiskSize 1 and a disk offering",
            vec![
                ("/spec/rootDiskSize", json!(1)),
                ("/spec/diskOffering", json!("data-50")),
            ],
        ),
        (
            "rootDiskSize 1000",
            vec![("/spec/rootDiskSize", json!(1000))],
        ),
        (
            "tag keys near the restricted ones",
            vec![(
                "/spec/tags",
                json!({"karpenter.sh/discovery": "c", "karpenter.sh/nodepool-owner": "x", "capstan.dev/team": "y"}),
            )],
        ),
        (
            "only the required fields",
            vec![
                ("/spec/userData", Value::Null),
                ("/spec/tags", Value::Null),
                ("/spec/rootDiskSize", Value::Null),
                ("/spec/sshKeyPair", Value::Null),
            ],
        ),
    ]
}

/// The CRD as `cloudstack.wasm` declares it, installed on the shared control plane.
async fn with_cloudstack_crd() -> Client {
    let (cp, client) = cluster().await;
    crate::node_class_kinds::install_declared_kind(cp, &wasm("cloudstack"), "CloudStackNodeClass")
        .await;
    client
}

/// Upstream's examples apply unchanged, with the alternatives their comments name; every
/// malformed object upstream's CRD refuses is refused with a message of the same meaning, at the
/// same field; and what this CRD refuses beyond upstream is refused too.
#[tokio::test]
async fn upstream_cloudstack_node_classes_apply_and_malformed_ones_are_refused_as_upstream() {
    let client = with_cloudstack_crd().await;
    let names = Names::new("cs-schema");
    let api = classes(&client);

    let mut applied = 0;
    for (source, text) in upstream_examples() {
        for object in example_classes(&names, source, text) {
            let what = format!("{source} ({})", object["metadata"]["name"]);
            assert_accepted(&api, &what, &object).await;
            applied += 1;
        }
    }
    assert_eq!(
        applied, 6,
        "every CloudStackNodeClass of upstream's examples"
    );

    let base = example_classes(&names, "examples/nodeclass.yaml", EXAMPLE_NODECLASS)
        .pop()
        .unwrap();
    for (what, changes) in accepted_variants() {
        assert_accepted(&api, what, &with(base.clone(), &changes)).await;
    }

    // A misspelled field: refused under strict field validation (what `kubectl apply` and
    // `kubectl create` ask for), as upstream's structural schema refuses it, not pruned in silence.
    let misspelled = with(base.clone(), &[("/spec/zonee", json!("zone-01"))]);
    let request = http::Request::post(
        "/apis/karpenter.k8s.cloudstack/v1/cloudstacknodeclasses?dryRun=All&fieldValidation=Strict",
    )
    .header(http::header::CONTENT_TYPE, "application/json")
    .body(serde_json::to_vec(&misspelled).unwrap())
    .unwrap();
    let message = refusal("spec.zonee", client.request::<Value>(request).await, 400);
    assert!(
        message.contains("unknown field \"spec.zonee\""),
        "{message}"
    );

    let (mut as_upstream, mut stricter) = (0, 0);
    for row in rows() {
        let object = with(base.clone(), &row.changes);
        let message = refusal(&row.what, create(&api, &object).await, 422);
        println!("{}: {message}", row.what);
        assert!(
            message.contains(&format!("{}: ", row.field)),
            "{}: the refusal does not name {}: {message}",
            row.what,
            row.field
        );
        for word in &row.meaning {
            assert!(
                message.contains(word.as_str()),
                "{}: {word:?} not in {message:?}",
                row.what
            );
            if let Some(upstream) = row.upstream {
                assert!(
                    upstream.contains(word.as_str()),
                    "{}: {word:?} does not carry upstream's meaning ({upstream:?})",
                    row.what
                );
            }
        }
        match row.upstream {
            Some(_) => as_upstream += 1,
            None => stricter += 1,
        }
    }
    println!(
        "{applied} upstream examples applied; {as_upstream} malformed objects refused as upstream \
         ({UPSTREAM_COMMIT}), {stricter} refused beyond it"
    );
}

/// The status holds what upstream's controller writes (`networks`, `serviceOfferings`,
/// `templates`, `conditions`), with upstream's required fields; the kind has upstream's short
/// names, category and columns.
#[tokio::test]
async fn the_cloudstack_node_class_status_names_and_columns_are_upstreams() {
    let client = with_cloudstack_crd().await;
    let names = Names::new("cs-status");
    let api = classes(&client);

    let mut object = example_classes(&names, "examples/nodeclass.yaml", EXAMPLE_NODECLASS)
        .pop()
        .unwrap();
    object["metadata"]["labels"] = json!({RUN_LABEL: names.run});
    let name = object["metadata"]["name"].as_str().unwrap().to_owned();
    let created: DynamicObject = serde_json::from_value(object).unwrap();
    api.patch(
        &name,
        &PatchParams::apply("capstan-tests").validation_strict(),
        &Patch::Apply(&created),
    )
    .await
    .unwrap();

    let status = json!({
        "networks": [{"id": "n-1", "name": "k8s-network", "type": "Isolated", "zone": "zone-01"}],
        "serviceOfferings": [{
            "id": "so-1", "name": "Medium Instance", "cpuNumber": 2, "cpuSpeed": 2000,
            "memory": 4096, "networkRate": 200,
        }],
        "templates": [{"id": "t-1", "name": "ubuntu-22.04-k8s", "osType": "Ubuntu 22.04 LTS", "zone": "zone-01"}],
        "conditions": [{
            "type": "Ready", "status": "True", "reason": "Ready", "message": "",
            "lastTransitionTime": "2025-01-01T00:00:00Z",
        }],
    });
    let written = api
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": status})),
        )
        .await
        .unwrap();
    assert_eq!(written.data["status"], status, "nothing pruned");

    let missing: [(&str, Value, &str); 4] = [
        (
            "a network without its zone",
            json!({"networks": [{"id": "n-1", "name": "k8s-network"}]}),
            "status.networks[0].zone",
        ),
        (
            "an offering without cpuNumber",
            json!({"serviceOfferings": [{"id": "so-1", "name": "m", "memory": 1024}]}),
            "status.serviceOfferings[0].cpuNumber",
        ),
        (
            "an offering without memory",
            json!({"serviceOfferings": [{"id": "so-1", "name": "m", "cpuNumber": 1}]}),
            "status.serviceOfferings[0].memory",
        ),
        (
            "a template without its id",
            json!({"templates": [{"name": "t", "zone": "zone-01"}]}),
            "status.templates[0].id",
        ),
    ];
    for (what, status, field) in missing {
        let result = api
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": status})),
            )
            .await;
        let message = refusal(what, result, 422);
        assert!(
            message.contains(&format!("{field}: Required value")),
            "{what}: {message}"
        );
    }

    // Discovery: `kubectl get csnc`, `kubectl get karpenter`.
    let resources = client
        .list_api_group_resources("karpenter.k8s.cloudstack/v1")
        .await
        .unwrap();
    let resource = resources
        .resources
        .iter()
        .find(|r| r.name == "cloudstacknodeclasses")
        .unwrap();
    assert_eq!(
        resource.short_names.as_deref(),
        Some(&["csnc".to_owned(), "csncs".to_owned()][..])
    );
    assert_eq!(
        resource.categories.as_deref(),
        Some(&["karpenter".to_owned()][..])
    );
    assert!(!resource.namespaced);
    assert!(
        resources
            .resources
            .iter()
            .any(|r| r.name == "cloudstacknodeclasses/status")
    );

    // `kubectl get csnc` columns: Name, Ready, Age; Zone with `-o wide` (priority 1).
    let request = http::Request::get(format!(
        "/apis/karpenter.k8s.cloudstack/v1/cloudstacknodeclasses/{name}"
    ))
    .header(
        http::header::ACCEPT,
        "application/json;as=Table;v=v1;g=meta.k8s.io",
    )
    .body(Vec::new())
    .unwrap();
    let table: Value = client.request(request).await.unwrap();
    let columns: Vec<(String, i64)> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or_default().to_owned(),
                c["priority"].as_i64().unwrap_or_default(),
            )
        })
        .collect();
    let expected = [("Name", 0), ("Ready", 0), ("Age", 0), ("Zone", 1)]
        .map(|(n, p)| (n.to_owned(), p))
        .to_vec();
    assert_eq!(columns, expected);
    let cells = &table["rows"][0]["cells"];
    assert_eq!(cells[1], "True", "{table}");
    assert_eq!(cells[3], "zone-01", "{table}");

    api.delete(&name, &DeleteParams::default()).await.unwrap();
}
