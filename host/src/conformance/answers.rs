//! Whether the instances a provider describes agree with what was asked and with each other:
//! `create`'s labels as the host would accept them at launch (within the claim's labels and
//! requirements, nothing in reserved domains it did not ask for) and within the catalog, `get` and
//! `create` telling the same story.

use std::collections::BTreeMap;

use capstan_model::requirements::{Requirement, Requirements};

use super::instance_types::{CAPACITY_TYPE, INSTANCE_TYPE, ZONE};
use crate::provider::convert::{self, catalog::CatalogView};
use crate::provider::launch_answer;
use crate::runtime::types::{Catalog, KeyValue, NodeClaim};

fn label<'a>(labels: &'a [KeyValue], key: &str) -> Option<&'a str> {
    labels
        .iter()
        .find(|l| l.key == key)
        .map(|l| l.value.as_str())
}

/// What the catalog says about every node of the instance type named `name`, as requirements.
fn declared(view: &CatalogView<'_>, name: &str) -> Option<Requirements> {
    let it = view.instance_types().find(|it| it.name == name)?;
    let mut out = Requirements::new();
    for r in it.requirements() {
        let operator = convert::operator_from_wit(r.operator());
        out.add(Requirement::new(r.key(), operator, r.values()).ok()?);
    }
    Some(out)
}

/// What is wrong with `created`, `create`'s answer to `claim`, given the instance types
/// `get-instance-types` returned (`catalog`): every label the host would refuse at launch
/// ([`launch_answer::check`]), and an instance type or offering the catalog never listed.
pub fn create_problems(
    claim: &NodeClaim,
    created: &NodeClaim,
    catalog: Option<&Catalog>,
) -> Vec<String> {
    let view = catalog.and_then(|c| CatalogView::new(c).ok());
    let mut problems = Vec::new();
    match convert::requirements_from_wit(&claim.requirements) {
        Ok(requirements) => {
            let claim_labels = convert::key_values_from_wit(&claim.labels);
            let claim_annotations = convert::key_values_from_wit(&claim.annotations);
            let answer_labels = convert::key_values_from_wit(&created.labels);
            let answer_annotations = convert::key_values_from_wit(&created.annotations);
            let declared = view
                .as_ref()
                .zip(label(&created.labels, INSTANCE_TYPE))
                .and_then(|(view, name)| declared(view, name));
            let refusals = launch_answer::check(
                launch_answer::Claimed {
                    labels: &claim_labels,
                    annotations: &claim_annotations,
                    requirements: &requirements,
                },
                launch_answer::Answer {
                    labels: &answer_labels,
                    annotations: &answer_annotations,
                },
                declared.as_ref(),
            );
            problems.extend(refusals.iter().map(|r| {
                format!(
                    "create answered {r}; the host refuses such an answer: launch only what the claim allows, and keep the claim's labels and Karpenter's reserved label domains as they are"
                )
            }));
        }
        Err(err) => problems.push(format!("the test claim's requirements: {err}")),
    }
    let Some(view) = view else {
        return problems;
    };
    let Some(type_name) = label(&created.labels, INSTANCE_TYPE) else {
        return problems;
    };
    let Some(it) = view.instance_types().find(|it| it.name == type_name) else {
        problems.push(format!(
            "create answered {INSTANCE_TYPE}={type_name}, which get-instance-types never offered: launch only instance types the catalog lists"
        ));
        return problems;
    };
    let zone = label(&created.labels, ZONE);
    let capacity = label(&created.labels, CAPACITY_TYPE);
    let offered = it.offerings().any(|o| {
        zone.is_none_or(|z| o.zone() == z) && capacity.is_none_or(|c| o.capacity_type() == c)
    });
    if !offered {
        problems.push(format!(
            "create answered {type_name} in zone {} as {}, an offering get-instance-types never listed for {type_name}: launch only listed offerings",
            zone.unwrap_or("(none)"),
            capacity.unwrap_or("(none)")
        ));
    }
    problems
}

/// Labels two answers about the same instance give different values (`first` and `second` name
/// the answers in the messages).
pub fn contradictions(first: (&str, &[KeyValue]), second: (&str, &[KeyValue])) -> Vec<String> {
    let earlier: BTreeMap<&str, &str> = first
        .1
        .iter()
        .map(|l| (l.key.as_str(), l.value.as_str()))
        .collect();
    second
        .1
        .iter()
        .filter_map(|l| {
            let before = earlier.get(l.key.as_str())?;
            (*before != l.value).then(|| {
                format!(
                    "{} labels {}={before}, {} labels it {}: describe one instance the same way every time",
                    first.0, l.key, second.0, l.value
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::types::{Operator, Requirement};

    fn kv(key: &str, value: &str) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: value.into(),
        }
    }

    fn claim(requirements: &[(&str, Operator, &[&str])], labels: &[(&str, &str)]) -> NodeClaim {
        NodeClaim {
            name: "c".into(),
            node_pool_name: None,
            labels: labels.iter().map(|(k, v)| kv(k, v)).collect(),
            annotations: Vec::new(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
            requirements: requirements
                .iter()
                .map(|(key, operator, values)| Requirement {
                    key: (*key).into(),
                    operator: *operator,
                    values: values.iter().map(|v| (*v).into()).collect(),
                    min_values: None,
                })
                .collect(),
            requests: Vec::new(),
            provider_id: None,
            image_id: None,
            node_name: None,
            capacity: Vec::new(),
            allocatable: Vec::new(),
            created_at: None,
        }
    }

    #[test]
    fn labels_outside_the_requirements_are_problems() {
        let asked = claim(
            &[
                (INSTANCE_TYPE, Operator::In, &["small"]),
                (ZONE, Operator::NotIn, &["z2"]),
                (CAPACITY_TYPE, Operator::In, &["on-demand"]),
            ],
            &[],
        );
        let good = claim(
            &[],
            &[
                (INSTANCE_TYPE, "small"),
                (ZONE, "z1"),
                (CAPACITY_TYPE, "on-demand"),
            ],
        );
        assert!(create_problems(&asked, &good, None).is_empty());
        let bad = claim(
            &[],
            &[
                (INSTANCE_TYPE, "large"),
                (ZONE, "z2"),
                (CAPACITY_TYPE, "spot"),
            ],
        );
        let problems = create_problems(&asked, &bad, None);
        assert_eq!(problems.len(), 3, "{problems:?}");
        for label in ["instance-type=large", "zone=z2", "capacity-type=spot"] {
            assert!(
                problems.iter().any(|p| p.contains(label)),
                "{label}: {problems:?}"
            );
        }
    }

    #[test]
    fn relabelling_into_another_pool_or_reserved_domains_are_problems() {
        let asked = claim(
            &[(INSTANCE_TYPE, Operator::In, &["small"])],
            &[("karpenter.sh/nodepool", "mine")],
        );
        let hostile = claim(
            &[],
            &[
                ("karpenter.sh/nodepool", "theirs"),
                ("node-restriction.kubernetes.io/secure", "true"),
                (INSTANCE_TYPE, "small"),
            ],
        );
        let problems = create_problems(&asked, &hostile, None);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].contains("karpenter.sh/nodepool=theirs would change the claim's karpenter.sh/nodepool=mine"),
            "{problems:?}"
        );
        assert!(
            problems[1].contains("node-restriction.kubernetes.io/secure=true is in the reserved domain kubernetes.io"),
            "{problems:?}"
        );
    }

    #[test]
    fn contradicting_answers() {
        let create = [kv(ZONE, "z1"), kv("a", "1")];
        let get = [kv(ZONE, "z2"), kv("b", "2"), kv("a", "1")];
        let found = contradictions(("create", &create), ("get", &get));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("create labels topology.kubernetes.io/zone=z1, get labels it z2"),
            "{found:?}"
        );
        assert!(contradictions(("create", &create), ("get", &create)).is_empty());
    }
}
