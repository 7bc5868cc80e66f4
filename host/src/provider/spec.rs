//! A `Provider` resource's spec in the runtime's terms: its grants (parsed by the same rules as a
//! grants file) and its per-call limits.

use std::time::Duration;

use crate::api::provider::{ProviderLimits, ProviderSpec};
use crate::capability::grants::Grants;
use crate::capability::grants::parse::{self, ParseError};
use crate::runtime::Limits;
use crate::scheduling::quantity;

/// A spec the host cannot run with. Each has a condition reason ([`SpecError::reason`]).
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// `spec.grants` does not parse or can never match.
    #[error("spec.grants: {0}")]
    Grants(#[from] ParseError),
    /// A limit is malformed or out of range.
    #[error("spec.limits.{field}: {reason}")]
    Limits {
        /// The field.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
}

impl SpecError {
    /// The condition and Event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            SpecError::Grants(_) => "InvalidGrants",
            SpecError::Limits { .. } => "InvalidLimits",
        }
    }
}

/// The grants of `spec`, deny by default.
pub fn grants(spec: &ProviderSpec) -> Result<Grants, SpecError> {
    let value = serde_json::to_value(&spec.grants)
        .map_err(|err| SpecError::Grants(ParseError::Syntax(format!("cannot serialize: {err}"))))?;
    Ok(parse::from_value(value)?)
}

/// Smallest memory limit accepted: below it no component instantiates.
const MIN_MEMORY: u64 = 1 << 20;

/// The limits of `spec`, defaults where absent.
pub fn limits(spec: &ProviderSpec) -> Result<Limits, SpecError> {
    let mut limits = Limits::default();
    let Some(ProviderLimits {
        memory,
        call_timeout,
        launch_timeout,
        concurrency,
    }) = &spec.limits
    else {
        return Ok(limits);
    };
    if let Some(memory) = memory {
        let bytes = quantity::parse_units(&memory.0).map_err(|err| SpecError::Limits {
            field: "memory",
            reason: err.to_string(),
        })?;
        let bytes = u64::try_from(bytes).unwrap_or(0);
        if bytes < MIN_MEMORY {
            return Err(SpecError::Limits {
                field: "memory",
                reason: format!("{} is below the minimum of 1Mi", memory.0),
            });
        }
        limits.memory_bytes = bytes;
    }
    if let Some(text) = call_timeout {
        limits.call_timeout = duration("callTimeout", text)?;
    }
    if let Some(text) = launch_timeout {
        limits.create_timeout = duration("launchTimeout", text)?;
    }
    if let Some(n) = concurrency {
        if *n == 0 {
            return Err(SpecError::Limits {
                field: "concurrency",
                reason: "must be at least 1".into(),
            });
        }
        limits.concurrency = usize::try_from(*n).unwrap_or(usize::MAX);
    }
    Ok(limits)
}

fn duration(field: &'static str, text: &str) -> Result<Duration, SpecError> {
    let value = crate::api::duration::parse(text).map_err(|err| SpecError::Limits {
        field,
        reason: err.to_string(),
    })?;
    if value.is_zero() {
        return Err(SpecError::Limits {
            field,
            reason: "must be longer than 0s".into(),
        });
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::provider::{ConfigMapKeySource, GrantCluster, ProviderGrant, ProviderSource};
    use crate::api::shared::Quantity;
    use crate::capability::grants::{Cluster, Verb, VerbRule};

    fn spec(grants: Vec<ProviderGrant>, limits: Option<ProviderLimits>) -> ProviderSpec {
        ProviderSpec {
            source: ProviderSource {
                config_map: ConfigMapKeySource {
                    namespace: "capstan".into(),
                    name: "kwok".into(),
                    key: "provider.wasm".into(),
                },
                sha256: None,
            },
            grants,
            limits,
        }
    }

    fn grant(verbs: &[&str]) -> ProviderGrant {
        ProviderGrant {
            cluster: GrantCluster::Management,
            api_groups: vec!["cluster.x-k8s.io".into()],
            resources: vec!["machinedeployments/scale".into()],
            verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
            namespaces: vec!["default".into()],
        }
    }

    #[test]
    fn grants_parse_by_the_grants_file_rules() {
        let parsed = grants(&spec(vec![grant(&["get", "patch"])], None)).unwrap();
        let only = parsed.iter().next().unwrap();
        assert_eq!(only.cluster, Cluster::Management);
        assert_eq!(
            only.verbs,
            vec![VerbRule::One(Verb::Get), VerbRule::One(Verb::Patch)]
        );
        assert!(grants(&spec(Vec::new(), None)).unwrap().is_empty());

        let err = grants(&spec(vec![grant(&["get", "destroy"])], None)).unwrap_err();
        assert_eq!(err.reason(), "InvalidGrants");
        assert!(err.to_string().contains("destroy"), "{err}");

        let mut kind = grant(&["get"]);
        kind.resources = vec!["MachineDeployment".into()];
        assert_eq!(
            grants(&spec(vec![kind], None)).unwrap_err().reason(),
            "InvalidGrants"
        );
    }

    #[test]
    fn limits_default_and_override() {
        assert_eq!(limits(&spec(Vec::new(), None)).unwrap(), Limits::default());
        let set = limits(&spec(
            Vec::new(),
            Some(ProviderLimits {
                memory: Some(Quantity::new("128Mi")),
                call_timeout: Some("5s".into()),
                launch_timeout: Some("2m".into()),
                concurrency: Some(4),
            }),
        ))
        .unwrap();
        assert_eq!(set.memory_bytes, 128 << 20);
        assert_eq!(set.call_timeout, Duration::from_secs(5));
        assert_eq!(set.create_timeout, Duration::from_secs(120));
        assert_eq!(set.concurrency, 4);
    }

    #[test]
    fn bad_limits_name_the_field() {
        let bad = |l: ProviderLimits| limits(&spec(Vec::new(), Some(l))).unwrap_err().to_string();
        let memory = bad(ProviderLimits {
            memory: Some(Quantity::new("lots")),
            ..ProviderLimits::default()
        });
        assert!(memory.contains("spec.limits.memory"), "{memory}");
        let tiny = bad(ProviderLimits {
            memory: Some(Quantity::new("1Ki")),
            ..ProviderLimits::default()
        });
        assert!(tiny.contains("minimum"), "{tiny}");
        let zero = bad(ProviderLimits {
            call_timeout: Some("0s".into()),
            ..ProviderLimits::default()
        });
        assert!(zero.contains("callTimeout"), "{zero}");
        let none = bad(ProviderLimits {
            concurrency: Some(0),
            ..ProviderLimits::default()
        });
        assert!(none.contains("concurrency"), "{none}");
    }
}
