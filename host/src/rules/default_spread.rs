//! kube-scheduler's default topology spread, mirrored as Karpenter v1.15 mirrors it: the
//! cluster's `podTopologySpread.defaultConstraints` (given to the host as `--scheduler-config` /
//! `SCHEDULER_CONFIG`, Karpenter's document) apply to every pod that declares no
//! `topologySpreadConstraints` of its own, each with the label selector kube-scheduler deduces
//! for the pod: the selectors of the Services in its namespace that select it, merged as
//! equalities, then its controller's (a ReplicationController's labels overwrite; a ReplicaSet's
//! or StatefulSet's selector is added as requirements). A pod for which nothing can be deduced
//! keeps no constraint, as kube-scheduler does. The constraints exist only in the simulation.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController, Service, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::ResourceExt;
use serde::Deserialize;

/// Why a scheduler configuration is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SchedulerConfigError {
    /// Not a document of the expected shape (an unknown field among them).
    #[error("decoding the scheduler config: {0}")]
    Decode(String),
    /// A default constraint kube-scheduler would refuse too.
    #[error(
        "validating the scheduler config: podTopologySpread.defaultConstraints[{index}]{problem}"
    )]
    Invalid { index: usize, problem: String },
}

/// The parts of the cluster's kube-scheduler configuration the simulation mirrors (Karpenter's
/// `SchedulerConfiguration`: not kube-scheduler's versioned API, only its field names).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SchedulerConfig {
    #[serde(default)]
    pub pod_topology_spread: Option<PodTopologySpreadConfig>,
}

/// kube-scheduler's `PodTopologySpread` arguments the simulation mirrors.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PodTopologySpreadConfig {
    /// Applied to every pod that declares no constraints of its own; no `labelSelector` (one is
    /// deduced per pod) and no `matchLabelKeys` (kube-scheduler ignores them here).
    #[serde(default)]
    pub default_constraints: Vec<TopologySpreadConstraint>,
}

impl SchedulerConfig {
    /// Decodes and checks `raw` (YAML or JSON). Empty: no configuration (`None`).
    pub fn parse(raw: &str) -> Result<Option<Self>, SchedulerConfigError> {
        if raw.trim().is_empty() {
            return Ok(None);
        }
        let config: Self = serde_saphyr::from_str(raw)
            .map_err(|err| SchedulerConfigError::Decode(err.to_string()))?;
        config.validate()?;
        Ok(Some(config))
    }

    /// The default constraints (none when not configured).
    pub fn default_constraints(&self) -> &[TopologySpreadConstraint] {
        self.pod_topology_spread
            .as_ref()
            .map_or(&[], |p| p.default_constraints.as_slice())
    }

    /// kube-scheduler's own checks of `defaultConstraints`, so a document one accepts the other
    /// does too.
    fn validate(&self) -> Result<(), SchedulerConfigError> {
        let constraints = self.default_constraints();
        for (index, c) in constraints.iter().enumerate() {
            let invalid = |problem: String| SchedulerConfigError::Invalid { index, problem };
            if c.max_skew <= 0 {
                return Err(invalid(".maxSkew must be greater than 0".to_owned()));
            }
            if c.topology_key.is_empty() {
                return Err(invalid(".topologyKey must be set".to_owned()));
            }
            if !qualified_name(&c.topology_key) {
                return Err(invalid(format!(
                    ".topologyKey {:?} is not a valid label name",
                    c.topology_key
                )));
            }
            if !matches!(
                c.when_unsatisfiable.as_str(),
                "DoNotSchedule" | "ScheduleAnyway"
            ) {
                return Err(invalid(format!(
                    ".whenUnsatisfiable {:?} must be DoNotSchedule or ScheduleAnyway",
                    c.when_unsatisfiable
                )));
            }
            if c.label_selector.is_some() {
                return Err(invalid(
                    ".labelSelector must not be set: selectors are deduced for each pod".to_owned(),
                ));
            }
            if c.match_label_keys.as_ref().is_some_and(|k| !k.is_empty()) {
                return Err(invalid(
                    ".matchLabelKeys must not be set: it has no effect on default constraints"
                        .to_owned(),
                ));
            }
            if let Some(first) = constraints[..index].iter().position(|o| {
                o.topology_key == c.topology_key && o.when_unsatisfiable == c.when_unsatisfiable
            }) {
                return Err(invalid(format!(
                    " repeats [{first}] ({}, {})",
                    c.topology_key, c.when_unsatisfiable
                )));
            }
        }
        Ok(())
    }
}

/// What a pod's controller adds to the deduced selector.
#[derive(Debug, Clone, PartialEq)]
enum Contribution {
    /// A ReplicationController's selector: equalities that overwrite the Services'.
    Labels(BTreeMap<String, String>),
    /// A ReplicaSet's or StatefulSet's selector, as requirements added to the Services'.
    Requirements(Vec<LabelSelectorRequirement>),
}

/// The default constraints and what deducing a pod's selector reads: the Services' selectors
/// by namespace and the controllers' contributions by UID.
#[derive(Debug, Clone, Default)]
pub struct DefaultSpread {
    constraints: Vec<TopologySpreadConstraint>,
    services: HashMap<String, Vec<BTreeMap<String, String>>>,
    owners: HashMap<String, Contribution>,
}

/// The objects a [`DefaultSpread`] is made from.
#[derive(Debug, Clone, Default)]
pub struct Workloads {
    pub services: Vec<Arc<Service>>,
    pub replica_sets: Vec<Arc<ReplicaSet>>,
    pub stateful_sets: Vec<Arc<StatefulSet>>,
    pub replication_controllers: Vec<Arc<ReplicationController>>,
}

impl DefaultSpread {
    /// The configuration's default constraints over `workloads`; `None` when it has none.
    pub fn new(config: &SchedulerConfig, workloads: &Workloads) -> Option<Self> {
        let constraints = config.default_constraints();
        if constraints.is_empty() {
            return None;
        }
        let mut services: HashMap<String, Vec<BTreeMap<String, String>>> = HashMap::new();
        for s in &workloads.services {
            // A Service without a selector selects nothing; an empty one selects every pod
            // and adds no label.
            if let Some(selector) = s.spec.as_ref().and_then(|s| s.selector.clone()) {
                services
                    .entry(s.namespace().unwrap_or_default())
                    .or_default()
                    .push(selector);
            }
        }
        let mut owners = HashMap::new();
        let mut add = |uid: Option<&String>, contribution: Option<Contribution>| {
            if let (Some(uid), Some(c)) = (uid, contribution) {
                owners.insert(uid.clone(), c);
            }
        };
        for rc in &workloads.replication_controllers {
            let labels = rc.spec.as_ref().and_then(|s| s.selector.clone());
            add(
                rc.metadata.uid.as_ref(),
                labels.filter(|l| !l.is_empty()).map(Contribution::Labels),
            );
        }
        for rs in &workloads.replica_sets {
            let selector = rs.spec.as_ref().map(|s| requirements(&s.selector));
            add(
                rs.metadata.uid.as_ref(),
                selector.map(Contribution::Requirements),
            );
        }
        for ss in &workloads.stateful_sets {
            let selector = ss.spec.as_ref().map(|s| requirements(&s.selector));
            add(
                ss.metadata.uid.as_ref(),
                selector.map(Contribution::Requirements),
            );
        }
        Some(Self {
            constraints: constraints.to_vec(),
            services,
            owners,
        })
    }

    /// The constraints the pod gets: the defaults with its deduced selector, or `None` when it
    /// declares constraints of its own or no selector can be deduced for it.
    pub fn for_pod(&self, pod: &Pod) -> Option<Vec<TopologySpreadConstraint>> {
        let spec = pod.spec.as_ref()?;
        if spec
            .topology_spread_constraints
            .as_ref()
            .is_some_and(|c| !c.is_empty())
        {
            return None;
        }
        let selector = self.selector(pod)?;
        Some(
            self.constraints
                .iter()
                .map(|c| TopologySpreadConstraint {
                    label_selector: Some(selector.clone()),
                    ..c.clone()
                })
                .collect(),
        )
    }

    /// kube-scheduler's `helper.DefaultSelector` for the pod; `None` when it is empty (an empty
    /// selector would count every pod of the namespace).
    fn selector(&self, pod: &Pod) -> Option<LabelSelector> {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let namespace = pod.namespace().unwrap_or_default();
        let mut match_labels = BTreeMap::new();
        for selector in self.services.get(&namespace).into_iter().flatten() {
            if selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                match_labels.extend(selector.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        let mut match_expressions = Vec::new();
        let controller = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true));
        match controller.and_then(|o| self.owners.get(&o.uid)) {
            Some(Contribution::Labels(l)) => {
                match_labels.extend(l.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            Some(Contribution::Requirements(r)) => match_expressions.extend(r.iter().cloned()),
            None => {}
        }
        if match_labels.is_empty() && match_expressions.is_empty() {
            return None;
        }
        Some(LabelSelector {
            match_labels: (!match_labels.is_empty()).then_some(match_labels),
            match_expressions: (!match_expressions.is_empty()).then_some(match_expressions),
        })
    }
}

/// Whether `key` is a label key (Kubernetes' qualified name: an optional DNS-subdomain prefix of
/// at most 253 characters and `/`, then a name of at most 63).
fn qualified_name(key: &str) -> bool {
    let (prefix, name) = key.rsplit_once('/').map_or(("", key), |(p, n)| (p, n));
    prefix.len() <= 253
        && name.len() <= 63
        && regex::Regex::new(crate::api::shared::QUALIFIED_NAME_PATTERN)
            .is_ok_and(|pattern| pattern.is_match(key))
}

/// A selector as requirements, each `matchLabels` entry a one-value `In`.
fn requirements(selector: &LabelSelector) -> Vec<LabelSelectorRequirement> {
    selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| LabelSelectorRequirement {
            key: k.clone(),
            operator: "In".to_owned(),
            values: Some(vec![v.clone()]),
        })
        .chain(selector.match_expressions.iter().flatten().cloned())
        .collect()
}

#[cfg(test)]
mod tests;
