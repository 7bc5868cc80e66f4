//! Well-formedness of the instance types a provider reports.

use std::collections::HashSet;

use crate::runtime::types::{InstanceType, Operator, Requirement, Resource};
use crate::scheduling::quantity;

/// `node.kubernetes.io/instance-type`.
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
/// `kubernetes.io/arch`.
pub const ARCH: &str = "kubernetes.io/arch";
/// `kubernetes.io/os`.
pub const OS: &str = "kubernetes.io/os";
/// `topology.kubernetes.io/zone`.
pub const ZONE: &str = "topology.kubernetes.io/zone";
/// `karpenter.sh/capacity-type`.
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";

/// Requirements every instance type must carry.
pub const TYPE_REQUIREMENTS: [&str; 5] = [INSTANCE_TYPE, ARCH, OS, ZONE, CAPACITY_TYPE];
/// Requirements every offering must carry (each `In` with one value).
pub const OFFERING_REQUIREMENTS: [&str; 2] = [ZONE, CAPACITY_TYPE];
/// Capacity every instance type must report.
pub const CAPACITY: [&str; 3] = ["cpu", "memory", "pods"];

/// Every problem found in `types` (empty when they are all well formed).
pub fn problems(types: &[InstanceType]) -> Vec<String> {
    let mut problems = Vec::new();
    if types.is_empty() {
        problems.push("no instance types at all".to_owned());
    }
    let mut names = HashSet::new();
    for (index, it) in types.iter().enumerate() {
        let who = if it.name.is_empty() {
            format!("instance type #{index}")
        } else {
            format!("instance type {}", it.name)
        };
        let mut report = |what: String| problems.push(format!("{who}: {what}"));
        if it.name.is_empty() {
            report("empty name".into());
        } else if !names.insert(it.name.as_str()) {
            report("name used twice".into());
        }
        for key in TYPE_REQUIREMENTS {
            if !it.requirements.iter().any(|r| r.key == key) {
                report(format!("no {key} requirement"));
            }
        }
        for r in &it.requirements {
            if let Err(why) = requirement_shape(r) {
                report(format!("requirement {}: {why}", r.key));
            }
        }
        if let Some(r) = it.requirements.iter().find(|r| r.key == INSTANCE_TYPE)
            && !(r.operator == Operator::In && r.values.contains(&it.name))
        {
            report(format!(
                "{INSTANCE_TYPE} requirement does not say In [{}]",
                it.name
            ));
        }
        if it.offerings.is_empty() {
            report("no offerings".into());
        }
        for (o, offering) in it.offerings.iter().enumerate() {
            for key in OFFERING_REQUIREMENTS {
                match offering.requirements.iter().find(|r| r.key == key) {
                    None => report(format!("offering #{o} has no {key} requirement")),
                    Some(r) if r.operator != Operator::In || r.values.len() != 1 => report(
                        format!("offering #{o}: {key} must be In with exactly one value"),
                    ),
                    Some(_) => {}
                }
            }
            for r in &offering.requirements {
                if let Err(why) = requirement_shape(r) {
                    report(format!("offering #{o} requirement {}: {why}", r.key));
                }
            }
            if !offering.price.is_finite() || offering.price < 0.0 {
                report(format!(
                    "offering #{o} price {} is not finite and >= 0",
                    offering.price
                ));
            }
        }
        for name in CAPACITY {
            if !it.capacity.iter().any(|r| r.name == name) {
                report(format!("capacity lacks {name}"));
            }
        }
        let overhead = &it.overhead;
        let lists: [(&str, &[Resource]); 4] = [
            ("capacity", &it.capacity),
            ("kube-reserved", &overhead.kube_reserved),
            ("system-reserved", &overhead.system_reserved),
            ("eviction-threshold", &overhead.eviction_threshold),
        ];
        for (what, resources) in lists {
            for resource in resources {
                match quantity::parse_millis(&resource.quantity) {
                    Err(why) => report(format!("{what} {}: {why}", resource.name)),
                    Ok(v) if v < 0 => report(format!("{what} {} is negative", resource.name)),
                    Ok(_) => {}
                }
            }
        }
    }
    problems
}

/// Whether a requirement's values fit its operator.
pub fn requirement_shape(r: &Requirement) -> Result<(), String> {
    if r.key.is_empty() {
        return Err("empty key".into());
    }
    match r.operator {
        Operator::In | Operator::NotIn if r.values.is_empty() => {
            Err("In/NotIn need at least one value".into())
        }
        Operator::Exists | Operator::DoesNotExist if !r.values.is_empty() => {
            Err("Exists/DoesNotExist take no values".into())
        }
        Operator::Gt | Operator::Lt
            if r.values.len() != 1 || r.values[0].parse::<i64>().is_err() =>
        {
            Err("Gt/Lt take exactly one integer value".into())
        }
        _ => Ok(()),
    }
}
