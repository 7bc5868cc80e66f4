//! Reading dumps: kubectl's List of mixed kinds, YAML documents, several files, stand-ins, and
//! errors that name the file and the object.

use serde_json::json;

use super::*;

fn list(items: serde_json::Value) -> String {
    json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items})
        .to_string()
}

fn pool(name: &str, labels: serde_json::Value, reference: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": name, "labels": labels},
        "spec": {"template": {"spec": {"nodeClassRef": reference, "requirements": []}}},
    })
}

fn capstan_ref(name: &str) -> serde_json::Value {
    json!({"group": "capstan.dev", "kind": "NodeClass", "name": name})
}

fn mixed() -> String {
    list(json!([
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"a": "1"}}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "p1", "namespace": "team-a"},
         "spec": {"containers": [{"name": "c", "image": "i"}]}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "p1", "namespace": "team-b"},
         "spec": {"containers": [{"name": "c", "image": "i"}]}},
        pool("managed", json!({"run": "x"}), capstan_ref("c")),
        pool("other", json!({}), capstan_ref("c")),
        {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
         "metadata": {"name": "managed-abcde", "labels": {"run": "x", "karpenter.sh/nodepool": "managed"}},
         "spec": {"nodeClassRef": capstan_ref("c"), "requirements": []}},
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "ds", "namespace": "kube-system"},
         "spec": {"selector": {}, "template": {"spec": {"containers": []}}}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
         "metadata": {"name": "pdb", "namespace": "team-a"}, "spec": {"maxUnavailable": 0}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "team-a"}},
        {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"}},
    ]))
}

#[test]
fn a_list_of_mixed_kinds() {
    let mut dump = Dump::new();
    dump.add_text("cluster.json", &mixed()).unwrap();
    assert_eq!(
        dump.counts(),
        Counts {
            nodes: 1,
            pods: 2,
            node_pools: 2,
            node_claims: 1,
            node_classes: 0,
            daemon_sets: 1,
            pod_disruption_budgets: 1,
            namespaces: 0,
        }
    );
    assert_eq!(
        dump.skipped,
        BTreeMap::from([
            ("apps/v1/Deployment".to_owned(), 1),
            ("karpenter.k8s.aws/v1/EC2NodeClass".to_owned(), 1),
        ])
    );
    let view = dump.view(&Selector::default());
    assert_eq!(view.pods.len(), 2);
    assert_eq!(view.pools.len(), 2);
    // Namespaces the dump lacks get the label the API server puts on every namespace.
    assert_eq!(
        view.namespaces["team-a"].get(NAMESPACE_NAME_LABEL),
        Some(&"team-a".to_owned())
    );
}

#[test]
fn the_selector_picks_the_managed_claims_and_pools_only() {
    let mut dump = Dump::new();
    dump.add_text("cluster.json", &mixed()).unwrap();
    let view = dump.view(&Selector::parse("run=x").unwrap());
    let names: Vec<String> = view.pools.iter().map(|p| p.name_any()).collect();
    assert_eq!(names, ["managed"]);
    assert_eq!(view.claims.len(), 1);
    // Pods and nodes are all there: the snapshot applies the selector to them, as the host does.
    assert_eq!(view.nodes.len(), 1);
    assert_eq!(view.pods.len(), 2);
    let view = dump.view(&Selector::parse("run=y").unwrap());
    assert!(view.pools.is_empty() && view.claims.is_empty());
}

#[test]
fn yaml_documents_and_several_files() {
    let yaml = "\
apiVersion: capstan.dev/v1alpha1
kind: NodeClass
metadata: {name: c}
spec: {provider: kwok, parameters: {families: [c]}}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-a, labels: {tier: gold}}
---
";
    let mut dump = Dump::new();
    dump.add_text("cluster.json", &mixed()).unwrap();
    dump.add_text("classes.yaml", yaml).unwrap();
    // The same object again (overlapping dumps) is fine.
    dump.add_text("again.yaml", yaml).unwrap();
    assert_eq!(dump.counts().node_classes, 1);
    assert_eq!(dump.counts().namespaces, 1);
    let view = dump.view(&Selector::default());
    assert_eq!(view.classes["c"].spec.provider, "kwok");
    assert_eq!(
        view.namespaces["team-a"].get("tier"),
        Some(&"gold".to_owned())
    );
    // A YAML List (kubectl get -o yaml) reads too.
    let mut yaml_list = Dump::new();
    yaml_list
        .add_text(
            "list.yaml",
            "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Node\n  metadata: {name: n9}\n",
        )
        .unwrap();
    assert_eq!(yaml_list.counts().nodes, 1);
}

#[test]
fn bad_input_names_the_file_and_the_object() {
    let bad_pool = list(json!([
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}},
        {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "broken"},
         "spec": {"template": {"spec": {"requirements": []}}}},
    ]));
    let err = Dump::new().add_text("cluster.json", &bad_pool).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("cluster.json: items[1] (NodePool broken): "),
        "{text}"
    );
    assert!(text.contains("nodeClassRef"), "{text}");

    let bad_pod = list(json!([
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-1", "namespace": "a"},
         "spec": {"containers": "not a list"}},
    ]));
    let err = Dump::new().add_text("pods.json", &bad_pod).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("pods.json: items[0] (Pod web-1): "),
        "{err}"
    );

    let err = Dump::new()
        .add_text("x.json", r#"{"items": [1, 2"#)
        .unwrap_err();
    assert!(
        matches!(&err, DumpError::Syntax { file, .. } if file == "x.json"),
        "{err}"
    );

    let err = Dump::new()
        .add_text("y.json", &list(json!([{"metadata": {"name": "n"}}])))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "y.json: items[0]: not a Kubernetes object (no apiVersion and kind)"
    );

    let err = Dump::new()
        .add_text(
            "z.yaml",
            "kind: Node\napiVersion: v1\nmetadata: {name: a}\n---\n- 3\n",
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "z.yaml: document 2.[0]: not a Kubernetes object (no apiVersion and kind)"
    );

    let mut dump = Dump::new();
    dump.add_text(
        "a.json",
        &list(json!([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}])),
    )
    .unwrap();
    let err = dump
        .add_text(
            "b.json",
            &list(json!([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"x": "y"}}}])),
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "b.json: items[0]: Node n1 appears twice with different contents"
    );
}

#[test]
fn stand_ins_replace_non_capstan_node_class_refs() {
    let aws =
        |name: &str| json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": name});
    let text = list(json!([
        pool("general", json!({}), aws("default")),
        pool("gpu", json!({}), aws("gpu")),
        pool("capstan", json!({}), capstan_ref("c")),
    ]));
    let mut dump = Dump::new();
    dump.add_text("cluster.json", &text).unwrap();

    let whole = stand_in(
        "gpu.yaml",
        "apiVersion: capstan.dev/v1alpha1\nkind: NodeClass\nmetadata: {name: kwok-gpu}\nspec: {provider: kwok}\n",
        "unused",
    )
    .unwrap();
    assert_eq!(whole.name_any(), "kwok-gpu");
    let spec_only = stand_in(
        "all.yaml",
        "provider: kwok\nparameters: {families: [m]}\n",
        "stand-in",
    )
    .unwrap();
    assert_eq!(spec_only.name_any(), "stand-in");
    assert_eq!(spec_only.spec.parameters, Some(json!({"families": ["m"]})));
    dump.add_stand_in("gpu.yaml", whole).unwrap();
    dump.add_stand_in("all.yaml", spec_only).unwrap();

    let by_name = HashMap::from([("gpu".to_owned(), "kwok-gpu".to_owned())]);
    let changed = dump.map_node_classes(&by_name, Some("stand-in"));
    let summary: Vec<(&str, &str, &str)> = changed
        .iter()
        .map(|s| {
            (
                s.node_pool.as_str(),
                s.node_class_ref.as_str(),
                s.node_class.as_str(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                "general",
                "karpenter.k8s.aws/EC2NodeClass default",
                "stand-in"
            ),
            ("gpu", "karpenter.k8s.aws/EC2NodeClass gpu", "kwok-gpu"),
        ]
    );
    let view = dump.view(&Selector::default());
    let reference = |name: &str| {
        view.pools
            .iter()
            .find(|p| p.name_any() == name)
            .unwrap()
            .spec
            .template
            .spec
            .node_class_ref
            .clone()
    };
    assert_eq!(reference("gpu").name, "kwok-gpu");
    assert_eq!(reference("gpu").group, "capstan.dev");
    assert_eq!(reference("capstan").name, "c");
    assert!(view.classes.contains_key("stand-in"));

    // Without a stand-in the pool keeps its reference (the provisioner then leaves it out).
    let mut untouched = Dump::new();
    untouched.add_text("cluster.json", &text).unwrap();
    assert!(untouched.map_node_classes(&HashMap::new(), None).is_empty());

    // Bad stand-ins.
    let err = stand_in("x.yaml", "apiVersion: v1\nkind: ConfigMap\n", "s").unwrap_err();
    assert!(
        err.to_string().starts_with("x.yaml: v1/ConfigMap is not"),
        "{err}"
    );
    let err = stand_in("y.yaml", "parameters: {}\n", "s").unwrap_err();
    assert!(err.to_string().contains("provider"), "{err}");
    let mut clash = Dump::new();
    clash
        .add_text(
            "c.yaml",
            "apiVersion: capstan.dev/v1alpha1\nkind: NodeClass\nmetadata: {name: c}\nspec: {provider: kwok}\n",
        )
        .unwrap();
    let other = stand_in("s.yaml", "provider: other\n", "c").unwrap();
    let err = clash.add_stand_in("s.yaml", other).unwrap_err();
    assert!(
        err.to_string().contains("NodeClass c is in the dump too"),
        "{err}"
    );
}
