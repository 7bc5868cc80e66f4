//! The clusterapi NodeClass `parameters` (a JSON object, camelCase). See `README.md`.

use std::collections::BTreeMap;

use capstan_provider_sdk::ProviderError;
use capstan_provider_sdk::kube::Cluster;
use capstan_provider_sdk::params::invalid;
use serde::{Deserialize, Serialize};

/// The Cluster API group.
pub const GROUP: &str = "cluster.x-k8s.io";

/// The NodeClass parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Parameters {
    /// Where MachineDeployments and Machines live: `management` (default) or `workload`.
    #[serde(default)]
    pub cluster: ClusterName,
    /// Their namespace.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// The Cluster API version to use: `v1beta2` (default) or `v1beta1`.
    #[serde(default = "default_version")]
    pub api_version: String,
    /// Only MachineDeployments with these labels too (besides the karpenter-member label).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub selector: BTreeMap<String, String>,
    /// How long `create` waits for the new Machine's providerID before undoing the scale-up.
    /// Default 600 (keep it below the Provider's launch timeout).
    #[serde(default = "default_launch_timeout")]
    pub launch_timeout_seconds: u64,
    /// How often `create` polls while waiting. Default 500.
    #[serde(default = "default_poll")]
    pub poll_millis: u64,
    /// How long a launch waits for others to join its scale-up. Default 200.
    #[serde(default = "default_batch")]
    pub batch_millis: u64,
    /// Look in every namespace (a `ClusterAPINodeClass` names none), not `namespace` only.
    #[serde(skip)]
    pub all_namespaces: bool,
    /// Further label selector requirements (a `ClusterAPINodeClass`'s `matchExpressions`), in
    /// the API server's selector syntax (`key in (a,b)`, `!key`).
    #[serde(skip)]
    pub expressions: Vec<String>,
}

/// karpenter-provider-cluster-api's API group, whose `ClusterAPINodeClass` this provider serves.
pub const CAPI_NODE_CLASS_GROUP: &str = "karpenter.cluster.x-k8s.io";
/// The kind.
pub const CAPI_NODE_CLASS: &str = "ClusterAPINodeClass";

/// The `spec` of a `ClusterAPINodeClass` (`karpenter.cluster.x-k8s.io/v1alpha1`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterApiNodeClassSpec {
    /// Which scalable resources (MachineDeployments) take part, besides the karpenter-member
    /// label every one of them needs.
    #[serde(default)]
    pub scalable_resource_selector: Option<LabelSelector>,
}

/// A Kubernetes label selector.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LabelSelector {
    /// Labels that must be present with these values.
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
    /// Requirements.
    #[serde(default)]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LabelSelectorRequirement {
    /// The label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// Values (`In`, `NotIn`).
    #[serde(default)]
    pub values: Vec<String>,
}

impl LabelSelectorRequirement {
    /// The requirement in the API server's selector syntax.
    fn to_selector(&self, at: &str) -> Result<String, ProviderError> {
        let values = || self.values.join(",");
        let needs_values = |op: &str| {
            if self.values.is_empty() {
                Err(ProviderError::Invalid(format!(
                    "{CAPI_NODE_CLASS} {at}: operator {op} needs values"
                )))
            } else {
                Ok(())
            }
        };
        let no_values = |op: &str| {
            if self.values.is_empty() {
                Ok(())
            } else {
                Err(ProviderError::Invalid(format!(
                    "{CAPI_NODE_CLASS} {at}: operator {op} takes no values"
                )))
            }
        };
        match self.operator.as_str() {
            "In" => needs_values("In").map(|()| format!("{} in ({})", self.key, values())),
            "NotIn" => needs_values("NotIn").map(|()| format!("{} notin ({})", self.key, values())),
            "Exists" => no_values("Exists").map(|()| self.key.clone()),
            "DoesNotExist" => no_values("DoesNotExist").map(|()| format!("!{}", self.key)),
            other => Err(ProviderError::Invalid(format!(
                "{CAPI_NODE_CLASS} {at}.operator: {other:?} is not In, NotIn, Exists or DoesNotExist"
            ))),
        }
    }
}

/// Which cluster holds the Cluster API objects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClusterName {
    /// The management cluster (`--management-kubeconfig`).
    #[default]
    Management,
    /// The workload cluster (self-hosted Cluster API).
    Workload,
}

impl ClusterName {
    /// The `kube` import's cluster.
    pub fn cluster(self) -> Cluster {
        match self {
            ClusterName::Management => Cluster::Management,
            ClusterName::Workload => Cluster::Workload,
        }
    }
}

fn default_namespace() -> String {
    "default".to_string()
}

fn default_version() -> String {
    "v1beta2".to_string()
}

fn default_launch_timeout() -> u64 {
    600
}

fn default_poll() -> u64 {
    500
}

fn default_batch() -> u64 {
    200
}

impl Default for Parameters {
    fn default() -> Self {
        Self {
            cluster: ClusterName::default(),
            namespace: default_namespace(),
            api_version: default_version(),
            selector: BTreeMap::new(),
            launch_timeout_seconds: default_launch_timeout(),
            poll_millis: default_poll(),
            batch_millis: default_batch(),
            all_namespaces: false,
            expressions: Vec::new(),
        }
    }
}

impl Parameters {
    /// Parses and validates: a `capstan.dev` NodeClass's `parameters`, or a
    /// `ClusterAPINodeClass` as the host hands it over (MachineDeployments in every namespace of
    /// the management cluster, `v1beta2`, narrowed by `scalableResourceSelector`).
    pub fn parse(text: &str) -> Result<Self, ProviderError> {
        if let Some(served) = capstan_provider_sdk::params::served_object(text) {
            let group = served.api_version.split('/').next().unwrap_or_default();
            if group != CAPI_NODE_CLASS_GROUP || served.kind != CAPI_NODE_CLASS {
                return Err(ProviderError::Invalid(format!(
                    "the clusterapi provider serves {CAPI_NODE_CLASS}.{CAPI_NODE_CLASS_GROUP}, not {}.{group}",
                    served.kind
                )));
            }
            let spec: ClusterApiNodeClassSpec = served.spec()?;
            let selector = spec.scalable_resource_selector.unwrap_or_default();
            let expressions = selector
                .match_expressions
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    r.to_selector(&format!(
                        "spec.scalableResourceSelector.matchExpressions[{i}]"
                    ))
                })
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(Parameters {
                selector: selector.match_labels,
                all_namespaces: true,
                expressions,
                ..Parameters::default()
            });
        }
        let params: Parameters = capstan_provider_sdk::params::parse(text)?;
        params.validate()?;
        Ok(params)
    }

    fn validate(&self) -> Result<(), ProviderError> {
        if !matches!(self.api_version.as_str(), "v1beta2" | "v1beta1") {
            return Err(invalid(
                "apiVersion",
                format!("{:?}: expected v1beta2 or v1beta1", self.api_version),
            ));
        }
        if self.namespace.is_empty() {
            return Err(invalid("namespace", "must not be empty"));
        }
        if self.poll_millis == 0 || self.poll_millis > 60_000 {
            return Err(invalid("pollMillis", "must be 1..=60000"));
        }
        if self.batch_millis > 10_000 {
            return Err(invalid("batchMillis", "must be at most 10000"));
        }
        if self.launch_timeout_seconds == 0 {
            return Err(invalid("launchTimeoutSeconds", "must be at least 1"));
        }
        Ok(())
    }

    /// How long a waiting launch is remembered on its MachineDeployment (the launch timeout and a
    /// minute), in ms.
    pub fn ledger_max_age(&self) -> u64 {
        self.launch_timeout_seconds
            .saturating_mul(1000)
            .saturating_add(60_000)
    }

    /// `cluster.x-k8s.io/<version>`.
    pub fn group_version(&self) -> String {
        format!("{GROUP}/{}", self.api_version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(text: &str) -> String {
        match Parameters::parse(text) {
            Err(ProviderError::Invalid(m)) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_cluster_api_node_class_selects_across_namespaces() {
        let served = serde_json::json!({
            "apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1",
            "kind": "ClusterAPINodeClass",
            "spec": {"scalableResourceSelector": {
                "matchLabels": {"pool": "a"},
                "matchExpressions": [
                    {"key": "tier", "operator": "In", "values": ["x", "y"]},
                    {"key": "legacy", "operator": "DoesNotExist"},
                ],
            }},
        });
        let p = Parameters::parse(&served.to_string()).unwrap();
        assert!(p.all_namespaces);
        assert_eq!(p.selector["pool"], "a");
        assert_eq!(p.expressions, vec!["tier in (x,y)", "!legacy"]);
        assert_eq!(p.group_version(), "cluster.x-k8s.io/v1beta2");
        let empty = serde_json::json!({"apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1", "kind": "ClusterAPINodeClass", "spec": {}});
        let p = Parameters::parse(&empty.to_string()).unwrap();
        assert!(p.all_namespaces && p.selector.is_empty() && p.expressions.is_empty());
        let bad = serde_json::json!({"apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1", "kind": "ClusterAPINodeClass",
            "spec": {"scalableResourceSelector": {"matchExpressions": [{"key": "k", "operator": "In"}]}}});
        assert!(
            matches!(Parameters::parse(&bad.to_string()), Err(ProviderError::Invalid(m)) if m.contains("needs values"))
        );
    }

    #[test]
    fn defaults() {
        let p = Parameters::parse("{}").unwrap();
        assert_eq!(p, Parameters::default());
        assert_eq!(p.group_version(), "cluster.x-k8s.io/v1beta2");
        assert_eq!(p.cluster.cluster(), Cluster::Management);
    }

    #[test]
    fn fields() {
        let p = Parameters::parse(
            r#"{"cluster":"workload","namespace":"capi","apiVersion":"v1beta1","selector":{"pool":"a"},"launchTimeoutSeconds":30,"pollMillis":100,"batchMillis":50}"#,
        )
        .unwrap();
        assert_eq!(p.cluster, ClusterName::Workload);
        assert_eq!(p.namespace, "capi");
        assert_eq!(p.group_version(), "cluster.x-k8s.io/v1beta1");
        assert_eq!(p.selector["pool"], "a");
        assert_eq!(
            (p.launch_timeout_seconds, p.poll_millis, p.batch_millis),
            (30, 100, 50)
        );
        assert_eq!(p.ledger_max_age(), 90_000);
    }

    #[test]
    fn errors_name_the_field() {
        assert!(message(r#"{"apiVersion":"v1"}"#).contains("parameters.apiVersion"));
        assert!(message(r#"{"namespace":""}"#).contains("parameters.namespace"));
        assert!(message(r#"{"pollMillis":0}"#).contains("parameters.pollMillis"));
        assert!(message(r#"{"batchMillis":60000}"#).contains("parameters.batchMillis"));
        assert!(message(r#"{"cluster":"other"}"#).contains("cluster"));
        assert!(message(r#"{"colour":"red"}"#).contains("colour"));
    }
}
