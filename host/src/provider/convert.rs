//! Conversions between the Kubernetes API types ([`crate::api`]) and the WIT types a provider
//! sees ([`crate::runtime::types`]).
//!
//! The instance-type `catalog` providers answer with is checked and read in [`catalog`].
//!
//! Karpenter v1's `Gte`/`Lte` operators have no WIT counterpart; they become `Gt`/`Lt` with the
//! bound moved by one (the values are integers).

pub mod catalog;

use std::collections::BTreeMap;

use crate::api::{
    self, NodeSelectorOperator, Quantity, ResourceList, TaintEffect, labels::NODEPOOL,
};
use crate::runtime::types as wit;

/// A value that has no WIT form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    /// `Gt`/`Lt`/`Gte`/`Lte` need exactly one integer value.
    #[error("requirement {key}: {operator:?} needs exactly one integer value, got {values:?}")]
    Bound {
        /// The requirement's key.
        key: String,
        /// Its operator.
        operator: NodeSelectorOperator,
        /// Its values.
        values: Vec<String>,
    },
    /// A WIT requirement the model cannot hold (a bound that is not one integer).
    #[error("requirement {key}: {message}")]
    Requirement {
        /// The requirement's key.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// `minValues` outside what the contract carries.
    #[error("requirement {key}: minValues {value} is out of range")]
    MinValues {
        /// The requirement's key.
        key: String,
        /// The value.
        value: i64,
    },
}

/// One requirement.
pub fn requirement_to_wit(r: &api::Requirement) -> Result<wit::Requirement, ConvertError> {
    let bound = |delta: i64| -> Result<Vec<String>, ConvertError> {
        let err = || ConvertError::Bound {
            key: r.key.clone(),
            operator: r.operator,
            values: r.values.clone(),
        };
        match r.values.as_slice() {
            [one] => {
                let n: i64 = one.trim().parse().map_err(|_| err())?;
                Ok(vec![n.checked_add(delta).ok_or_else(err)?.to_string()])
            }
            _ => Err(err()),
        }
    };
    let (operator, values) = match r.operator {
        NodeSelectorOperator::In => (wit::Operator::In, r.values.clone()),
        NodeSelectorOperator::NotIn => (wit::Operator::NotIn, r.values.clone()),
        NodeSelectorOperator::Exists => (wit::Operator::Exists, Vec::new()),
        NodeSelectorOperator::DoesNotExist => (wit::Operator::DoesNotExist, Vec::new()),
        NodeSelectorOperator::Gt => (wit::Operator::Gt, bound(0)?),
        NodeSelectorOperator::Lt => (wit::Operator::Lt, bound(0)?),
        NodeSelectorOperator::Gte => (wit::Operator::Gt, bound(-1)?),
        NodeSelectorOperator::Lte => (wit::Operator::Lt, bound(1)?),
    };
    let min_values = match r.min_values {
        None => None,
        Some(v) => Some(u32::try_from(v).map_err(|_| ConvertError::MinValues {
            key: r.key.clone(),
            value: v,
        })?),
    };
    Ok(wit::Requirement {
        key: r.key.clone(),
        operator,
        values,
        min_values,
    })
}

/// Requirements, in order.
pub fn requirements_to_wit(
    requirements: &[api::Requirement],
) -> Result<Vec<wit::Requirement>, ConvertError> {
    requirements.iter().map(requirement_to_wit).collect()
}

/// A WIT operator as the model's.
pub fn operator_from_wit(op: wit::Operator) -> capstan_model::requirements::Operator {
    use capstan_model::requirements::Operator;
    match op {
        wit::Operator::In => Operator::In,
        wit::Operator::NotIn => Operator::NotIn,
        wit::Operator::Exists => Operator::Exists,
        wit::Operator::DoesNotExist => Operator::DoesNotExist,
        wit::Operator::Gt => Operator::Gt,
        wit::Operator::Lt => Operator::Lt,
    }
}

/// WIT requirements as the model's, intersected per key (what the host checks a provider's
/// answer against).
pub fn requirements_from_wit(
    list: &[wit::Requirement],
) -> Result<capstan_model::requirements::Requirements, ConvertError> {
    use capstan_model::requirements::{Requirement, Requirements};
    let mut out = Requirements::new();
    for r in list {
        let requirement = Requirement::new(&r.key, operator_from_wit(r.operator), &r.values)
            .map_err(|err| ConvertError::Requirement {
                key: r.key.clone(),
                message: err.to_string(),
            })?;
        out.add(requirement.with_min_values(r.min_values));
    }
    Ok(out)
}

/// A taint.
pub fn taint_to_wit(t: &api::Taint) -> wit::Taint {
    wit::Taint {
        key: t.key.clone(),
        value: t.value.clone(),
        effect: match t.effect {
            TaintEffect::NoSchedule => wit::TaintEffect::NoSchedule,
            TaintEffect::PreferNoSchedule => wit::TaintEffect::PreferNoSchedule,
            TaintEffect::NoExecute => wit::TaintEffect::NoExecute,
        },
    }
}

/// Resources as `(name, quantity)` records.
pub fn resources_to_wit(list: &ResourceList) -> Vec<wit::Resource> {
    list.iter()
        .map(|(name, q)| wit::Resource {
            name: name.clone(),
            quantity: q.as_str().to_owned(),
        })
        .collect()
}

/// Resource records as a resource list (a later duplicate wins).
pub fn resources_from_wit(list: &[wit::Resource]) -> ResourceList {
    list.iter()
        .map(|r| (r.name.clone(), Quantity::new(r.quantity.clone())))
        .collect()
}

/// A string map as key-value records.
pub fn key_values_to_wit(map: &BTreeMap<String, String>) -> Vec<wit::KeyValue> {
    map.iter()
        .map(|(key, value)| wit::KeyValue {
            key: key.clone(),
            value: value.clone(),
        })
        .collect()
}

/// Key-value records as a string map (a later duplicate wins).
pub fn key_values_from_wit(list: &[wit::KeyValue]) -> BTreeMap<String, String> {
    list.iter()
        .map(|kv| (kv.key.clone(), kv.value.clone()))
        .collect()
}

/// A NodeClass as the provider receives it.
pub fn node_class_to_wit(class: &api::NodeClass) -> wit::NodeClass {
    wit::NodeClass {
        name: class.metadata.name.clone().unwrap_or_default(),
        parameters: class.spec.parameters_json(),
    }
}

/// A NodePool as the provider receives it.
pub fn node_pool_to_wit(pool: &api::NodePool) -> Result<wit::NodePool, ConvertError> {
    let template = &pool.spec.template;
    Ok(wit::NodePool {
        name: pool.metadata.name.clone().unwrap_or_default(),
        requirements: requirements_to_wit(&template.spec.requirements)?,
        labels: template
            .metadata
            .as_ref()
            .map(|m| key_values_to_wit(&m.labels))
            .unwrap_or_default(),
        taints: template.spec.taints.iter().map(taint_to_wit).collect(),
        startup_taints: template
            .spec
            .startup_taints
            .iter()
            .map(taint_to_wit)
            .collect(),
    })
}

/// Annotations a provider has no business seeing.
const SKIPPED_ANNOTATIONS: &[&str] = &["kubectl.kubernetes.io/last-applied-configuration"];

/// A NodeClaim as the provider receives it: spec and metadata always, status fields when set.
pub fn node_claim_to_wit(claim: &api::NodeClaim) -> Result<wit::NodeClaim, ConvertError> {
    let labels = claim.metadata.labels.clone().unwrap_or_default();
    let mut annotations = claim.metadata.annotations.clone().unwrap_or_default();
    annotations.retain(|k, _| !SKIPPED_ANNOTATIONS.contains(&k.as_str()));
    let status = claim.status.clone().unwrap_or_default();
    Ok(wit::NodeClaim {
        name: claim.metadata.name.clone().unwrap_or_default(),
        node_pool_name: labels.get(NODEPOOL).cloned(),
        labels: key_values_to_wit(&labels),
        annotations: key_values_to_wit(&annotations),
        taints: claim.spec.taints.iter().map(taint_to_wit).collect(),
        startup_taints: claim.spec.startup_taints.iter().map(taint_to_wit).collect(),
        requirements: requirements_to_wit(&claim.spec.requirements)?,
        requests: claim
            .spec
            .resources
            .as_ref()
            .map(|r| resources_to_wit(&r.requests))
            .unwrap_or_default(),
        provider_id: status.provider_id,
        image_id: status.image_id,
        node_name: status.node_name,
        capacity: resources_to_wit(&status.capacity),
        allocatable: resources_to_wit(&status.allocatable),
        created_at: None,
    })
}

/// What a provider's `create` answer adds to a NodeClaim.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Launched {
    /// The instance's provider ID.
    pub provider_id: Option<String>,
    /// Its image.
    pub image_id: Option<String>,
    /// Labels to merge into the claim (the provider's win).
    pub labels: BTreeMap<String, String>,
    /// Annotations to merge into the claim (the provider's win).
    pub annotations: BTreeMap<String, String>,
    /// The node's capacity.
    pub capacity: ResourceList,
    /// The node's allocatable.
    pub allocatable: ResourceList,
}

/// Reads what a provider launched.
pub fn launched_from_wit(created: &wit::NodeClaim) -> Launched {
    Launched {
        provider_id: created.provider_id.clone().filter(|id| !id.is_empty()),
        image_id: created.image_id.clone().filter(|id| !id.is_empty()),
        labels: key_values_from_wit(&created.labels),
        annotations: key_values_from_wit(&created.annotations),
        capacity: resources_from_wit(&created.capacity),
        allocatable: resources_from_wit(&created.allocatable),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::nodeclaim::ResourceRequirements;
    use crate::api::{NodeClaim, NodeClaimSpec, NodeClassReference, Requirement};

    fn claim() -> NodeClaim {
        let mut c = NodeClaim::new(
            "c1",
            NodeClaimSpec {
                taints: vec![api::Taint {
                    key: "t".into(),
                    value: Some("v".into()),
                    effect: TaintEffect::NoSchedule,
                    time_added: None,
                }],
                startup_taints: vec![api::Taint {
                    key: "s".into(),
                    value: None,
                    effect: TaintEffect::NoExecute,
                    time_added: None,
                }],
                requirements: vec![
                    Requirement::new("a", NodeSelectorOperator::In, vec!["x".into()]),
                    Requirement::new("cpu", NodeSelectorOperator::Gte, vec!["4".into()]),
                    Requirement::new("mem", NodeSelectorOperator::Lte, vec!["8".into()]),
                    Requirement::new("e", NodeSelectorOperator::Exists, vec![]),
                ],
                resources: Some(ResourceRequirements {
                    requests: [("cpu".to_owned(), Quantity::new("500m"))].into(),
                }),
                node_class_ref: NodeClassReference {
                    group: "capstan.dev".into(),
                    kind: "NodeClass".into(),
                    name: "nc".into(),
                },
                expire_after: "720h".into(),
                termination_grace_period: None,
            },
        );
        c.metadata.labels = Some([(NODEPOOL.to_owned(), "pool".to_owned())].into());
        c.metadata.annotations = Some(
            [
                ("keep".to_owned(), "1".to_owned()),
                (SKIPPED_ANNOTATIONS[0].to_owned(), "{}".to_owned()),
            ]
            .into(),
        );
        c
    }

    #[test]
    fn claim_to_wit() {
        let w = node_claim_to_wit(&claim()).unwrap();
        assert_eq!(w.name, "c1");
        assert_eq!(w.node_pool_name.as_deref(), Some("pool"));
        assert_eq!(w.annotations.len(), 1);
        assert_eq!(w.taints[0].effect, wit::TaintEffect::NoSchedule);
        assert_eq!(w.taints[0].value.as_deref(), Some("v"));
        assert_eq!(w.startup_taints[0].effect, wit::TaintEffect::NoExecute);
        assert_eq!(w.requirements[1].operator, wit::Operator::Gt);
        assert_eq!(w.requirements[1].values, vec!["3"]);
        assert_eq!(w.requirements[2].operator, wit::Operator::Lt);
        assert_eq!(w.requirements[2].values, vec!["9"]);
        assert!(w.requirements[3].values.is_empty());
        assert_eq!(w.requests[0].name, "cpu");
        assert_eq!(w.requests[0].quantity, "500m");
        assert_eq!(w.provider_id, None);
    }

    #[test]
    fn bad_bounds_are_errors() {
        let r = Requirement::new("k", NodeSelectorOperator::Gt, vec!["x".into()]);
        assert!(matches!(
            requirement_to_wit(&r),
            Err(ConvertError::Bound { .. })
        ));
        let r = Requirement::new("k", NodeSelectorOperator::Lt, vec![]);
        assert!(requirement_to_wit(&r).is_err());
    }

    #[test]
    fn launched_round_trip() {
        let created = wit::NodeClaim {
            name: "c1".into(),
            node_pool_name: None,
            labels: vec![wit::KeyValue {
                key: "l".into(),
                value: "v".into(),
            }],
            annotations: vec![],
            taints: vec![],
            startup_taints: vec![],
            requirements: vec![],
            requests: vec![],
            provider_id: Some("kwok://c1".into()),
            image_id: Some(String::new()),
            node_name: None,
            capacity: vec![wit::Resource {
                name: "cpu".into(),
                quantity: "4".into(),
            }],
            allocatable: vec![],
            created_at: None,
        };
        let l = launched_from_wit(&created);
        assert_eq!(l.provider_id.as_deref(), Some("kwok://c1"));
        assert_eq!(l.image_id, None);
        assert_eq!(l.labels["l"], "v");
        assert_eq!(l.capacity["cpu"].as_str(), "4");
        assert_eq!(resources_to_wit(&l.capacity), created.capacity);
    }
}
