//! Node groups as instance types, and the choice of what to grow for a claim.
//!
//! Each MachineDeployment is one instance type named after it, with one offering (its zone and
//! capacity type, at its price) that is available while it may still grow. Its node labels
//! become requirements, so NodePools and pods can select them.
//!
//! Taints: a node of a tainted MachineDeployment carries those taints, and only pods that
//! tolerate them may land there. The host schedules a pool's pods knowing the pool's taints, so a
//! MachineDeployment is offered to a NodePool only if each of its `NoSchedule` and `NoExecute`
//! taints is one of the pool's taints or startup taints.

use std::cmp::Ordering;

use capstan_provider_sdk::catalog::milli_value;
use capstan_provider_sdk::{Catalog, CatalogBuilder, NodePool, Requirements, ResourceList};

use crate::node_group::NodeGroup;

/// Whether `pool` accepts every hard taint of `group`.
pub fn pool_tolerates(pool: &NodePool, group: &NodeGroup) -> bool {
    group
        .taints
        .iter()
        .filter(|t| t.effect != "PreferNoSchedule")
        .all(|taint| {
            pool.taints.iter().chain(&pool.startup_taints).any(|p| {
                p.key == taint.key
                    && p.effect.as_str() == taint.effect
                    && p.value.as_deref().unwrap_or_default() == taint.value
            })
        })
}

/// The catalog of `groups`.
pub fn to_catalog(groups: &[NodeGroup]) -> Catalog {
    let mut catalog = CatalogBuilder::new();
    for group in groups {
        let mut it = catalog.instance_type(&group.name);
        for (key, value) in &group.labels {
            it.requirement_in(key, &[value.as_str()]);
        }
        it.offering(
            &group.zone,
            &group.capacity_type,
            group.price,
            group.can_grow(),
        );
        for (name, quantity) in group.capacity.iter() {
            it.capacity(name, milli_value(quantity));
        }
    }
    catalog.finish().into()
}

/// Why no group can take a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoGroup {
    /// None meets the claim's requirements and requests.
    Incompatible(String),
    /// Some do, but all are at their maximum size.
    AtMaxSize(String),
}

impl NoGroup {
    /// The explanation.
    pub fn message(&self) -> &str {
        match self {
            NoGroup::Incompatible(m) | NoGroup::AtMaxSize(m) => m,
        }
    }
}

/// The cheapest group that meets `claim` and `requests` and may grow; ties go to the smaller
/// (fewer CPUs), then the name.
pub fn cheapest<'a>(
    groups: &'a [NodeGroup],
    claim: &Requirements,
    requests: &ResourceList,
) -> Result<&'a NodeGroup, NoGroup> {
    // Keys the group does not label (the NodePool's own labels, say) do not constrain it.
    let compatible: Vec<&NodeGroup> = groups
        .iter()
        .filter(|g| group_requirements(g).intersects(claim).is_ok())
        .filter(|g| g.capacity.fits(requests).is_ok())
        .collect();
    if compatible.is_empty() {
        return Err(NoGroup::Incompatible(format!(
            "no MachineDeployment among {} meets the claim's requirements and requests",
            groups.len()
        )));
    }
    compatible
        .iter()
        .copied()
        .filter(|g| g.can_grow())
        .min_by(|a, b| order(a, b))
        .ok_or_else(|| {
            NoGroup::AtMaxSize(format!(
                "all {} compatible MachineDeployments are at their maximum size",
                compatible.len()
            ))
        })
}

/// A group's node labels as `In` requirements.
fn group_requirements(group: &NodeGroup) -> Requirements {
    Requirements::from_labels(group.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

fn order(a: &NodeGroup, b: &NodeGroup) -> Ordering {
    a.price
        .total_cmp(&b.price)
        .then_with(|| {
            a.capacity
                .get("cpu")
                .millis()
                .cmp(&b.capacity.get("cpu").millis())
        })
        .then_with(|| a.name.cmp(&b.name))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use capstan_provider_sdk::{Quantity, Requirement, Taint, TaintEffect};

    use super::*;
    use crate::node_group::GroupTaint;

    fn group(name: &str, cpu: i128, price: f64, replicas: i64, max: Option<i64>) -> NodeGroup {
        NodeGroup {
            kind: crate::node_group::Kind::MachineDeployment,
            name: name.into(),
            namespace: "capi".into(),
            replicas,
            max_size: max,
            min_size: 0,
            max_provision_millis: None,
            capacity: ResourceList::new()
                .with("cpu", Quantity::from_units(cpu))
                .with("memory", Quantity::from_bytes(cpu * (4 << 30)))
                .with("pods", Quantity::from_units(110)),
            labels: BTreeMap::from([
                (
                    "node.kubernetes.io/instance-type".to_string(),
                    name.to_string(),
                ),
                ("kubernetes.io/arch".to_string(), "amd64".to_string()),
                ("topology.kubernetes.io/zone".to_string(), "z1".to_string()),
                (
                    "karpenter.sh/capacity-type".to_string(),
                    "on-demand".to_string(),
                ),
            ]),
            taints: Vec::new(),
            zone: "z1".into(),
            capacity_type: "on-demand".into(),
            price,
            template_hash: "h".into(),
        }
    }

    fn requests(cpu: i128) -> ResourceList {
        ResourceList::new().with("cpu", Quantity::from_units(cpu))
    }

    #[test]
    fn picks_the_cheapest_that_fits_and_can_grow() {
        let groups = vec![
            group("big", 16, 0.8, 0, None),
            group("small", 2, 0.1, 3, Some(3)),
            group("medium", 4, 0.2, 0, Some(5)),
        ];
        let any = Requirements::new();
        // small is cheapest but at max size; medium is next.
        assert_eq!(
            cheapest(&groups, &any, &requests(1)).unwrap().name,
            "medium"
        );
        // Too big for medium.
        assert_eq!(cheapest(&groups, &any, &requests(8)).unwrap().name, "big");
        // Requirements narrow by name (the host narrows claims to instance types).
        let only_small = Requirements::from_slice(&[Requirement::in_(
            "node.kubernetes.io/instance-type",
            ["small"],
        )])
        .unwrap();
        assert!(matches!(
            cheapest(&groups, &only_small, &requests(1)),
            Err(NoGroup::AtMaxSize(_))
        ));
        assert!(matches!(
            cheapest(&groups, &any, &requests(64)),
            Err(NoGroup::Incompatible(_))
        ));
        let arm =
            Requirements::from_slice(&[Requirement::in_("kubernetes.io/arch", ["arm64"])]).unwrap();
        assert!(matches!(
            cheapest(&groups, &arm, &requests(1)),
            Err(NoGroup::Incompatible(_))
        ));
    }

    #[test]
    fn ties_go_to_the_smaller_then_the_name() {
        let groups = vec![
            group("b", 4, 0.0, 0, None),
            group("c", 2, 0.0, 0, None),
            group("a", 2, 0.0, 0, None),
        ];
        assert_eq!(
            cheapest(&groups, &Requirements::new(), &requests(1))
                .unwrap()
                .name,
            "a"
        );
    }

    #[test]
    fn tainted_groups_go_only_to_pools_with_those_taints() {
        let mut gpu = group("gpu", 8, 2.0, 0, None);
        gpu.taints = vec![
            GroupTaint {
                key: "gpu".into(),
                value: "true".into(),
                effect: "NoSchedule".into(),
            },
            GroupTaint {
                key: "soft".into(),
                value: String::new(),
                effect: "PreferNoSchedule".into(),
            },
        ];
        let mut pool = NodePool {
            name: "p".into(),
            requirements: Vec::new(),
            labels: Vec::new(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
        };
        assert!(!pool_tolerates(&pool, &gpu));
        assert!(pool_tolerates(&pool, &group("plain", 2, 0.1, 0, None)));
        pool.taints.push(Taint::new(
            "gpu",
            Some("false".into()),
            TaintEffect::NoSchedule,
        ));
        assert!(!pool_tolerates(&pool, &gpu), "value differs");
        pool.taints.push(Taint::new(
            "gpu",
            Some("true".into()),
            TaintEffect::NoSchedule,
        ));
        assert!(pool_tolerates(&pool, &gpu));
    }

    #[test]
    fn the_catalog_has_one_offering_per_group_available_while_it_can_grow() {
        let groups = vec![group("a", 2, 0.1, 0, None), group("b", 4, 0.2, 5, Some(5))];
        let catalog = to_catalog(&groups);
        let expanded = capstan_provider_sdk::catalog::expand(&catalog).unwrap();
        assert_eq!(expanded.len(), 2);
        assert_eq!(expanded[0].name, "a");
        assert_eq!(expanded[0].offerings.len(), 1);
        assert!(expanded[0].offerings[0].available);
        assert!(!expanded[1].offerings[0].available);
        assert_eq!(expanded[1].offerings[0].price, 0.2);
        let requirement = expanded[1]
            .requirement("node.kubernetes.io/instance-type")
            .unwrap();
        assert_eq!(requirement.values, vec!["b".to_string()]);
    }
}
