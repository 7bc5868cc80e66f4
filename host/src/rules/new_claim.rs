//! The NodeClaim the provisioner writes for a claim the solver opened ([`claim_for`]): the same
//! object whether the provisioner, a disruption's replacement, a static pool or `capstan
//! simulate` makes it.

use std::collections::BTreeMap;

use kube::api::ObjectMeta;

use crate::api::labels::{NODEPOOL, NODEPOOL_HASH, NODEPOOL_HASH_VERSION, PRICE_ANNOTATION};
use crate::api::nodeclaim::ResourceRequirements;
use crate::api::template_hash::{HASH_VERSION, template_hash};
use crate::api::{NodeClaim, NodeClaimSpec, NodePool, NodeSelectorOperator, Quantity};
use crate::scheduling::requirements::SetOperator;
use crate::scheduling::{NewClaim, Requirements, Resources};

/// The label naming a claim's node class, as Karpenter spells it: `<group>/<kind, lower case>`
/// (`capstan.dev/nodeclass: <name>`).
pub fn node_class_label(class: &crate::api::shared::NodeClassReference) -> String {
    format!("{}/{}", class.group, class.kind.to_lowercase())
}

/// The NodeClaim for a new claim of `pool`: named `<pool>-<5 random chars>` by the API server,
/// labelled with the pool's template labels, the pool name, the node class
/// ([`node_class_label`]) and `extra_labels` (the host's selector), with the pool's annotations, taints, expiry and grace period, the solver's
/// requirements and requests, the price annotation and the pool's template hash.
pub fn claim_for(
    new: &NewClaim,
    pool: &NodePool,
    extra_labels: &BTreeMap<String, String>,
) -> NodeClaim {
    let template = &pool.spec.template;
    let (mut labels, mut annotations) = template
        .metadata
        .as_ref()
        .map(|m| (m.labels.clone(), m.annotations.clone()))
        .unwrap_or_default();
    labels.extend(extra_labels.clone());
    labels.insert(NODEPOOL.to_owned(), new.node_pool.clone());
    let class = &template.spec.node_class_ref;
    labels.insert(node_class_label(class), class.name.clone());
    annotations.insert(
        PRICE_ANNOTATION.to_owned(),
        format!("{}", new.cheapest_price),
    );
    annotations.insert(NODEPOOL_HASH.to_owned(), template_hash(pool));
    annotations.insert(NODEPOOL_HASH_VERSION.to_owned(), HASH_VERSION.to_owned());
    let spec = &template.spec;
    let mut claim = NodeClaim::new(
        "",
        NodeClaimSpec {
            taints: spec.taints.clone(),
            startup_taints: spec.startup_taints.clone(),
            requirements: api_requirements(&new.requirements),
            resources: Some(ResourceRequirements {
                requests: resource_list(&new.requests),
            }),
            node_class_ref: spec.node_class_ref.clone(),
            expire_after: spec.expire_after.clone(),
            termination_grace_period: spec.termination_grace_period.clone(),
        },
    );
    claim.metadata = ObjectMeta {
        generate_name: Some(format!("{}-", new.node_pool)),
        labels: Some(labels),
        annotations: Some(annotations),
        // Karpenter's owner reference to the pool (none for a pool not read from the API server,
        // as in `capstan simulate`): deleting the pool makes Kubernetes' garbage collector delete
        // its claims, which then drain and terminate as usual.
        owner_references: super::claims::owner_reference(pool).map(|owner| vec![owner]),
        ..ObjectMeta::default()
    };
    claim
}

/// The solver's requirements in the API's spelling; integer bounds become `Gt`/`Lt` entries (or
/// `Gte 0`).
pub fn api_requirements(reqs: &Requirements) -> Vec<crate::api::Requirement> {
    let mut out = Vec::new();
    for r in reqs.iter() {
        let set = r.set();
        let min_values = r.min_values().map(i64::from);
        let entry = |operator, values: Vec<String>| crate::api::Requirement {
            key: r.key().to_owned(),
            operator,
            values,
            min_values,
        };
        match set.operator() {
            SetOperator::In => out.push(entry(NodeSelectorOperator::In, set.values().to_vec())),
            SetOperator::DoesNotExist => {
                out.push(entry(NodeSelectorOperator::DoesNotExist, vec![]))
            }
            SetOperator::NotIn => {
                out.push(entry(NodeSelectorOperator::NotIn, set.values().to_vec()))
            }
            SetOperator::Exists => {
                if set.greater_than_bound().is_none() && set.less_than_bound().is_none() {
                    out.push(entry(NodeSelectorOperator::Exists, vec![]));
                }
            }
        }
        // The CRD takes only non-negative bounds. A label value cannot start with `-`, so an
        // integer label is never negative: any `Gt` below 0 means `Gte 0`, and an `Lt` below 0
        // admits nothing, as `Lt 0` does.
        if let Some(gt) = set.greater_than_bound() {
            out.push(if gt < 0 {
                entry(NodeSelectorOperator::Gte, vec!["0".to_owned()])
            } else {
                entry(NodeSelectorOperator::Gt, vec![gt.to_string()])
            });
        }
        if let Some(lt) = set.less_than_bound() {
            out.push(entry(NodeSelectorOperator::Lt, vec![lt.max(0).to_string()]));
        }
    }
    out
}

/// Resources as quantities (`cpu` in millicores), leaving zeros out.
pub fn resource_list(resources: &Resources) -> BTreeMap<String, Quantity> {
    resources
        .iter()
        .filter(|(_, v)| *v != 0)
        .map(|(name, v)| {
            let q = if name == "cpu" {
                format!("{v}m")
            } else {
                v.to_string()
            };
            (name.to_owned(), Quantity::new(q))
        })
        .collect()
}
