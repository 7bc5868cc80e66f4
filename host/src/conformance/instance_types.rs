//! Well-formedness of the instance-type catalog a provider reports, beyond what the host checks
//! on every catalog ([`CatalogView::new`]).

use std::collections::HashSet;

use crate::provider::convert::catalog::CatalogView;
use crate::runtime::types::{Catalog, Operator};

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
/// What every offering carries as fields (and so never among its requirements).
pub const OFFERING_REQUIREMENTS: [&str; 2] = [ZONE, CAPACITY_TYPE];
/// Capacity every instance type must report.
pub const CAPACITY: [&str; 3] = ["cpu", "memory", "pods"];

/// Every problem found in `catalog` (empty when its instance types are all well formed). A catalog
/// the host refuses outright (an index out of range, a bad price or requirement, an empty zone)
/// is one problem.
pub fn problems(catalog: &Catalog) -> Vec<String> {
    let view = match CatalogView::new(catalog) {
        Ok(view) => view,
        Err(err) => return vec![err.to_string()],
    };
    let mut problems = Vec::new();
    if view.is_empty() {
        problems.push("no instance types at all".to_owned());
    }
    let mut names = HashSet::new();
    for it in view.instance_types() {
        let mut report = |what: String| problems.push(format!("instance type {}: {what}", it.name));
        if !names.insert(it.name) {
            report("name used twice".into());
        }
        for key in TYPE_REQUIREMENTS {
            if !it.requirements().any(|r| r.key() == key) {
                report(format!("no {key} requirement"));
            }
        }
        if let Some(r) = it.requirements().find(|r| r.key() == INSTANCE_TYPE)
            && !(r.operator() == Operator::In && r.values().any(|v| v == it.name))
        {
            report(format!(
                "{INSTANCE_TYPE} requirement does not say In [{}]",
                it.name
            ));
        }
        if it.offerings().len() == 0 {
            report("no offerings".into());
        }
        for (o, offering) in it.offerings().enumerate() {
            for r in offering.requirements() {
                if OFFERING_REQUIREMENTS.contains(&r.key()) {
                    report(format!(
                        "offering #{o} repeats {} among its requirements (it is a field)",
                        r.key()
                    ));
                }
            }
        }
        for name in CAPACITY {
            if !it.capacity().any(|a| a.name == name) {
                report(format!("capacity lacks {name}"));
            }
        }
    }
    problems
}
