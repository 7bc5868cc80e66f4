//! The CustomResourceDefinitions generated from the API types, and their YAML files in `crds/` and
//! in the Helm chart (`charts/capstan/crds/`).
//!
//! Validation lives on the types: schemars attributes for patterns, lengths and enums, and kube's
//! `KubeSchema` derive (`#[x_kube(validation = Rule::new(..).message(..))]`) for the CEL rules
//! Karpenter's own CRDs carry, so the API server refuses a malformed NodePool or NodeClaim.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use thiserror::Error;

use super::{CapacityBuffer, NodeClaim, NodeClass, NodeOverlay, NodePool, Provider};

#[derive(Debug, Error)]
pub enum CrdError {
    #[error("rendering CRD {name} as YAML: {message}")]
    Render { name: String, message: String },
}

/// Every CRD Capstan installs, with the file name it has in `crds/`.
pub fn all() -> Vec<(&'static str, CustomResourceDefinition)> {
    vec![
        ("karpenter.sh_nodepools.yaml", NodePool::crd()),
        ("karpenter.sh_nodeclaims.yaml", NodeClaim::crd()),
        ("karpenter.sh_nodeoverlays.yaml", NodeOverlay::crd()),
        ("capstan.dev_nodeclasses.yaml", NodeClass::crd()),
        ("capstan.dev_providers.yaml", Provider::crd()),
        (
            "autoscaling.x-k8s.io_capacitybuffers.yaml",
            CapacityBuffer::crd(),
        ),
    ]
}

/// The directories, relative to the repository root, that hold the CRD YAML: `crds/` and the Helm
/// chart's `crds/` (Helm reads only its chart's directory). Both are generated from [`all`].
pub const CRD_DIRS: &[&str] = &["crds", "charts/capstan/crds"];

/// A CRD as the YAML checked into [`CRD_DIRS`].
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, CrdError> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    let body = serde_saphyr::to_string(crd).map_err(|e| CrdError::Render {
        name: name.clone(),
        message: e.to_string(),
    })?;
    Ok(format!(
        "# Generated from host/src/api (CAPSTAN_UPDATE_CRDS=1 cargo test -p capstan --lib crds_match). Do not edit.\n{body}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::duration::{DURATION_PATTERN, NILLABLE_DURATION_PATTERN};
    use crate::api::nodepool::{
        BUDGET_DURATION_PATTERN, BUDGET_NODES_PATTERN, BUDGET_SCHEDULE_PATTERN,
    };
    use crate::api::rules::*;
    use crate::api::shared::{LABEL_VALUE_PATTERN, QUALIFIED_NAME_PATTERN};
    use serde_json::{Value, json};
    use std::path::PathBuf;

    fn repo_root() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    /// `crds/` and `charts/capstan/crds/` must hold exactly what the types generate. Regenerate
    /// both with `CAPSTAN_UPDATE_CRDS=1 cargo test -p capstan --lib crds_match`.
    #[test]
    fn crds_match_checked_in_yaml() {
        let update = std::env::var_os("CAPSTAN_UPDATE_CRDS").is_some();
        let generated: Vec<(&str, String)> = all()
            .iter()
            .map(|(file, crd)| (*file, to_yaml(crd).unwrap()))
            .collect();
        let mut stale = Vec::new();
        for dir in CRD_DIRS {
            let dir_path = repo_root().join(dir);
            for (file, want) in &generated {
                let path = dir_path.join(file);
                if update {
                    std::fs::create_dir_all(&dir_path).unwrap();
                    std::fs::write(&path, want).unwrap();
                    continue;
                }
                let have = std::fs::read_to_string(&path).unwrap_or_default();
                if &have != want {
                    stale.push(format!("{dir}/{file}"));
                }
            }
            for entry in std::fs::read_dir(&dir_path).unwrap() {
                let name = entry.unwrap().file_name().to_string_lossy().into_owned();
                if !generated.iter().any(|(file, _)| *file == name) {
                    stale.push(format!("{dir}/{name} (not generated: remove it)"));
                }
            }
        }
        assert!(
            stale.is_empty(),
            "out of date: {stale:?}; run CAPSTAN_UPDATE_CRDS=1 cargo test -p capstan --lib crds_match"
        );
    }

    #[test]
    fn every_crd_has_its_upstream_scope_and_status() {
        for (file, crd) in all() {
            // CapacityBuffers live with the workloads they buffer, as upstream.
            let scope = if file.starts_with("autoscaling.x-k8s.io") {
                "Namespaced"
            } else {
                "Cluster"
            };
            assert_eq!(crd.spec.scope, scope, "{file}");
            let version = &crd.spec.versions[0];
            assert!(
                version
                    .subresources
                    .as_ref()
                    .and_then(|s| s.status.as_ref())
                    .is_some(),
                "{file} has no status subresource"
            );
        }
    }

    /// The schema of `crd` at `path`: property names separated by dots, `[]` after a name for the
    /// items of that array.
    fn schema(crd: &CustomResourceDefinition, path: &str) -> Value {
        let root = serde_json::to_value(
            &crd.spec.versions[0]
                .schema
                .as_ref()
                .unwrap()
                .open_api_v3_schema,
        )
        .unwrap();
        path.split('.').fold(root, |node, segment| {
            let (name, items) = match segment.strip_suffix("[]") {
                Some(name) => (name, true),
                None => (segment, false),
            };
            let next = node["properties"][name].clone();
            assert!(!next.is_null(), "{path}: no property {name}");
            if items { next["items"].clone() } else { next }
        })
    }

    /// The messages of the CEL rules on `node`.
    fn messages(node: &Value) -> Vec<&str> {
        node["x-kubernetes-validations"]
            .as_array()
            .map(|rules| {
                rules
                    .iter()
                    .map(|r| r["message"].as_str().unwrap_or("(no message)"))
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn requirements_and_taints_carry_karpenters_rules_in_both_kinds() {
        for (crd, spec) in [
            (NodePool::crd(), "spec.template.spec"),
            (NodeClaim::crd(), "spec"),
        ] {
            let at = |path: &str| schema(&crd, &format!("{spec}.{path}"));
            assert_eq!(
                messages(&at("requirements[]")),
                [IN_NEEDS_VALUES, ONE_INTEGER, MIN_VALUES],
                "{spec}"
            );
            let key = at("requirements[].key");
            assert_eq!(
                messages(&key),
                [KARPENTER_DOMAIN_RESTRICTED, HOSTNAME_RESTRICTED],
                "{spec}"
            );
            assert_eq!(key["pattern"], QUALIFIED_NAME_PATTERN, "{spec}");
            assert_eq!(key["maxLength"], 316, "{spec}");
            for taints in ["taints[]", "startupTaints[]"] {
                let taint = at(taints);
                assert_eq!(
                    taint["properties"]["key"]["pattern"], QUALIFIED_NAME_PATTERN,
                    "{spec}.{taints}"
                );
                assert_eq!(taint["properties"]["key"]["minLength"], 1);
                assert_eq!(taint["properties"]["value"]["pattern"], LABEL_VALUE_PATTERN);
                assert_eq!(
                    taint["properties"]["effect"]["enum"],
                    json!(["NoSchedule", "PreferNoSchedule", "NoExecute"])
                );
            }
            assert_eq!(at("expireAfter")["pattern"], NILLABLE_DURATION_PATTERN);
            assert_eq!(at("terminationGracePeriod")["pattern"], DURATION_PATTERN);
            assert_eq!(at("nodeClassRef.group")["minLength"], 1);
        }
    }

    #[test]
    fn node_pools_carry_karpenters_pool_rules() {
        let crd = NodePool::crd();
        assert_eq!(
            messages(&schema(&crd, "spec")),
            [STATIC_TRANSITION, STATIC_LIMITS, STATIC_WEIGHT]
        );
        assert_eq!(
            messages(&schema(&crd, "spec.template.spec.requirements")),
            [NODEPOOL_RESTRICTED]
        );
        assert_eq!(
            messages(&schema(&crd, "spec.template.spec.nodeClassRef")),
            [NODE_CLASS_GROUP_IMMUTABLE, NODE_CLASS_KIND_IMMUTABLE]
        );
        let labels = schema(&crd, "spec.template.metadata.labels");
        assert_eq!(
            messages(&labels),
            [
                KARPENTER_DOMAIN_RESTRICTED,
                NODEPOOL_RESTRICTED,
                HOSTNAME_RESTRICTED
            ]
        );
        assert_eq!(labels["maxProperties"], 100);
        assert_eq!(
            labels["additionalProperties"]["pattern"],
            LABEL_VALUE_PATTERN
        );

        let disruption = |path: &str| schema(&crd, &format!("spec.disruption.{path}"));
        assert_eq!(
            disruption("consolidationPolicy")["enum"],
            json!(["WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced"])
        );
        assert_eq!(
            disruption("consolidateAfter")["pattern"],
            NILLABLE_DURATION_PATTERN
        );
        assert_eq!(disruption("budgets")["maxItems"], 50);
        assert_eq!(messages(&disruption("budgets[]")), [SCHEDULE_WITH_DURATION]);
        assert_eq!(
            disruption("budgets[].nodes")["pattern"],
            BUDGET_NODES_PATTERN
        );
        assert_eq!(
            disruption("budgets[].schedule")["pattern"],
            BUDGET_SCHEDULE_PATTERN
        );
        assert_eq!(
            disruption("budgets[].duration")["pattern"],
            BUDGET_DURATION_PATTERN
        );
        let reasons = disruption("budgets[].reasons");
        assert_eq!(reasons["x-kubernetes-list-type"], "set");
        assert_eq!(
            reasons["items"]["enum"],
            json!(["Underutilized", "Empty", "Drifted", "Unhealthy"])
        );
    }

    #[test]
    fn node_claim_specs_are_immutable() {
        assert_eq!(
            messages(&schema(&NodeClaim::crd(), "spec")),
            [SPEC_IMMUTABLE]
        );
        let rules = &schema(&NodeClaim::crd(), "spec")["x-kubernetes-validations"];
        assert_eq!(rules[0]["rule"], "self == oldSelf");
    }

    /// Every CEL rule anywhere has a message of one line (the API server shows it, and refuses
    /// multi-line messages).
    #[test]
    fn every_rule_has_a_one_line_message() {
        fn walk(node: &Value, path: &str, rules: &mut usize) {
            match node {
                Value::Object(map) => {
                    if let Some(Value::Array(list)) = map.get("x-kubernetes-validations") {
                        for rule in list {
                            let message = rule["message"].as_str().unwrap_or_default();
                            assert!(
                                !message.is_empty() && !message.contains('\n'),
                                "{path}: {rule}"
                            );
                            *rules += 1;
                        }
                    }
                    for (key, value) in map {
                        walk(value, &format!("{path}/{key}"), rules);
                    }
                }
                Value::Array(items) => items.iter().for_each(|v| walk(v, path, rules)),
                _ => {}
            }
        }
        let mut rules = 0;
        for (file, crd) in all() {
            walk(&serde_json::to_value(&crd).unwrap(), file, &mut rules);
        }
        assert_eq!(rules, 37, "rules counted across all CRDs");
    }
}
