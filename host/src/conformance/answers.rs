//! Whether the instances a provider describes agree with what was asked and with each other:
//! `create`'s labels within the claim's requirements and the catalog, `get` and `create`
//! telling the same story.

use std::collections::BTreeMap;

use super::instance_types::{CAPACITY_TYPE, INSTANCE_TYPE, ZONE};
use crate::provider::convert::catalog::CatalogView;
use crate::runtime::types::{Catalog, KeyValue, NodeClaim, Operator};

/// The labels that name what was launched, and so must match the claim and the catalog.
pub const LAUNCH_LABELS: [&str; 3] = [INSTANCE_TYPE, ZONE, CAPACITY_TYPE];

fn label<'a>(labels: &'a [KeyValue], key: &str) -> Option<&'a str> {
    labels
        .iter()
        .find(|l| l.key == key)
        .map(|l| l.value.as_str())
}

/// Whether `value` satisfies every requirement of `claim` on `key`.
fn allowed(claim: &NodeClaim, key: &str, value: &str) -> bool {
    claim
        .requirements
        .iter()
        .filter(|r| r.key == key)
        .all(|r| match r.operator {
            Operator::In => r.values.iter().any(|v| v == value),
            Operator::NotIn => !r.values.iter().any(|v| v == value),
            Operator::Exists => true,
            Operator::DoesNotExist => false,
            // Gt/Lt do not apply to these labels; leave them to the host.
            Operator::Gt | Operator::Lt => true,
        })
}

/// What is wrong with `created`, `create`'s answer to `claim`, given the instance types
/// `get-instance-types` returned (`catalog`).
pub fn create_problems(
    claim: &NodeClaim,
    created: &NodeClaim,
    catalog: Option<&Catalog>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for key in LAUNCH_LABELS {
        let Some(value) = label(&created.labels, key) else {
            continue;
        };
        if !allowed(claim, key, value) {
            let wanted: Vec<String> = claim
                .requirements
                .iter()
                .filter(|r| r.key == key)
                .map(|r| {
                    let operator = format!("{:?}", r.operator);
                    let operator = operator.trim_start_matches("Operator::");
                    format!("{operator} {:?}", r.values)
                })
                .collect();
            problems.push(format!(
                "create answered {key}={value}, but the claim requires {}: launch only what the claim's requirements allow, and label the instance with what was launched",
                wanted.join(" and ")
            ));
        }
    }
    let Some(view) = catalog.and_then(|c| CatalogView::new(c).ok()) else {
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
    use crate::runtime::types::Requirement;

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
        assert!(problems[0].contains("instance-type=large"), "{problems:?}");
        assert!(problems[1].contains("zone=z2"), "{problems:?}");
        assert!(problems[2].contains("capacity-type=spot"), "{problems:?}");
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
