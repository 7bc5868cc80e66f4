//! A `Provider` resource's spec in the runtime's terms: its grants (parsed by the same rules as a
//! grants file), its per-call limits, its egress rules and HTTP limits, and its configuration
//! resolved against the Secrets it names.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;

use crate::api::provider::{ProviderLimits, ProviderSpec};
use crate::capability::config::ConfigValues;
use crate::capability::egress::{EgressRuleError, EgressRules};
use crate::capability::grants::Grants;
use crate::capability::grants::parse::{self, ParseError};
use crate::capability::outbound_http::HttpLimits;
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
    /// `spec.egress` has a rule that does not parse.
    #[error("spec.egress: {0}")]
    Egress(#[from] EgressRuleError),
    /// A `spec.config` entry is malformed.
    #[error("spec.config[{index}]: {reason}")]
    Config {
        /// The entry's position.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// A Secret `spec.config` names does not exist.
    #[error("Secret {namespace}/{name} (spec.config {entry:?}) not found")]
    SecretNotFound {
        /// The entry.
        entry: String,
        /// The Secret's namespace.
        namespace: String,
        /// The Secret.
        name: String,
    },
    /// A Secret `spec.config` names has no such key.
    #[error(
        "Secret {namespace}/{name} has no key {key:?} (spec.config {entry:?}; keys: {available})"
    )]
    SecretKeyNotFound {
        /// The entry.
        entry: String,
        /// The Secret's namespace.
        namespace: String,
        /// The Secret.
        name: String,
        /// The missing key.
        key: String,
        /// The keys it has (names only).
        available: String,
    },
    /// The CA bundle ConfigMap or key is missing or unusable.
    #[error("spec.egressCABundle: {0}")]
    CaBundle(String),
}

impl SpecError {
    /// The condition and Event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            SpecError::Grants(_) => "InvalidGrants",
            SpecError::Limits { .. } => "InvalidLimits",
            SpecError::Egress(_) => "InvalidEgress",
            SpecError::Config { .. } => "InvalidConfig",
            SpecError::SecretNotFound { .. } => "SecretNotFound",
            SpecError::SecretKeyNotFound { .. } => "SecretKeyNotFound",
            SpecError::CaBundle(_) => "InvalidCABundle",
        }
    }

    /// Whether this is about what the Provider points to (a Secret, a CA bundle) rather than the
    /// component: then the Provider is not Ready even while a version keeps serving with the last
    /// good values.
    pub fn blocks_ready(&self) -> bool {
        matches!(
            self,
            SpecError::SecretNotFound { .. }
                | SpecError::SecretKeyNotFound { .. }
                | SpecError::CaBundle(_)
        )
    }
}

/// The egress rules of `spec`, deny by default.
pub fn egress(spec: &ProviderSpec) -> Result<EgressRules, SpecError> {
    Ok(EgressRules::parse(&spec.egress)?)
}

/// The outbound HTTP limits of `spec`, defaults where absent.
pub fn http_limits(spec: &ProviderSpec) -> Result<HttpLimits, SpecError> {
    let mut http = HttpLimits::default();
    let Some(limits) = &spec.limits else {
        return Ok(http);
    };
    if let Some(text) = &limits.http_connect_timeout {
        http.connect_timeout = duration("httpConnectTimeout", text)?;
    }
    if let Some(text) = &limits.http_first_byte_timeout {
        http.first_byte_timeout = duration("httpFirstByteTimeout", text)?;
    }
    if let Some(text) = &limits.http_between_bytes_timeout {
        http.between_bytes_timeout = duration("httpBetweenBytesTimeout", text)?;
    }
    if let Some(size) = &limits.http_max_response_body {
        let bytes = quantity::parse_units(&size.0).map_err(|err| SpecError::Limits {
            field: "httpMaxResponseBody",
            reason: err.to_string(),
        })?;
        http.max_response_body = u64::try_from(bytes)
            .ok()
            .filter(|b| *b > 0)
            .ok_or_else(|| SpecError::Limits {
                field: "httpMaxResponseBody",
                reason: format!("{} must be more than 0", size.0),
            })?;
    }
    Ok(http)
}

/// The Secrets `spec.config` names (in the provider source namespace).
pub fn secret_names(spec: &ProviderSpec) -> impl Iterator<Item = &str> {
    spec.config
        .iter()
        .filter_map(|entry| entry.secret_key_ref.as_ref())
        .map(|key| key.name.as_str())
}

/// Every ConfigMap of the provider source namespace `spec` reads: the component's (and its
/// parts), the CA bundle, the verification keys. A change to one re-checks the Provider.
pub fn config_maps_read(spec: &ProviderSpec) -> Vec<&str> {
    let source = spec.source.config_map.iter().map(|c| c.name.as_str());
    let parts = spec.source.parts.iter().map(String::as_str);
    let ca = spec.egress_ca_bundle.iter().map(|ca| ca.name.as_str());
    let keys = spec
        .verification
        .iter()
        .flat_map(|v| &v.keys)
        .filter_map(|key| key.config_map_key_ref.as_ref())
        .map(|key| key.name.as_str());
    let trust_root = spec
        .verification
        .iter()
        .filter_map(|v| v.trust_root.as_ref())
        .map(|root| root.name.as_str());
    source
        .chain(parts)
        .chain(ca)
        .chain(keys)
        .chain(trust_root)
        .collect()
}

/// Every Secret of the provider source namespace `spec` reads: `spec.config`'s, the pull Secret,
/// the verification keys.
pub fn secrets_read(spec: &ProviderSpec) -> Vec<&str> {
    let pull = spec
        .source
        .oci
        .iter()
        .filter_map(|oci| oci.pull_secret.as_deref());
    let keys = spec
        .verification
        .iter()
        .flat_map(|v| &v.keys)
        .filter_map(|key| key.secret_key_ref.as_ref())
        .map(|key| key.name.as_str());
    secret_names(spec).chain(pull).chain(keys).collect()
}

/// Resolves `spec.config` with `secrets` (the Secrets of `namespace` it names, by name; absent
/// ones are missing). Messages name Secrets and keys, never values.
pub fn config_values(
    spec: &ProviderSpec,
    namespace: &str,
    secrets: &BTreeMap<String, Secret>,
) -> Result<ConfigValues, SpecError> {
    let mut values = BTreeMap::new();
    for (index, entry) in spec.config.iter().enumerate() {
        let invalid = |reason: &str| SpecError::Config {
            index,
            reason: reason.to_owned(),
        };
        if entry.name.is_empty() {
            return Err(invalid("name is empty"));
        }
        let value = match (&entry.value, &entry.secret_key_ref) {
            (Some(value), None) => value.clone(),
            (None, Some(key)) => {
                let Some(secret) = secrets.get(&key.name) else {
                    return Err(SpecError::SecretNotFound {
                        entry: entry.name.clone(),
                        namespace: namespace.to_owned(),
                        name: key.name.clone(),
                    });
                };
                let data = secret.data.as_ref();
                let string_data = secret.string_data.as_ref();
                match (
                    data.and_then(|d| d.get(&key.key)),
                    string_data.and_then(|d| d.get(&key.key)),
                ) {
                    (Some(bytes), _) => String::from_utf8(bytes.0.clone()).map_err(|_| {
                        invalid(&format!(
                            "Secret {}/{} key {:?} is not UTF-8 text",
                            namespace, key.name, key.key
                        ))
                    })?,
                    (None, Some(text)) => text.clone(),
                    (None, None) => {
                        let keys: Vec<&str> = data
                            .into_iter()
                            .flat_map(|d| d.keys())
                            .chain(string_data.into_iter().flat_map(|d| d.keys()))
                            .map(String::as_str)
                            .collect();
                        return Err(SpecError::SecretKeyNotFound {
                            entry: entry.name.clone(),
                            namespace: namespace.to_owned(),
                            name: key.name.clone(),
                            key: key.key.clone(),
                            available: if keys.is_empty() {
                                "none".to_owned()
                            } else {
                                keys.join(", ")
                            },
                        });
                    }
                }
            }
            _ => return Err(invalid("set exactly one of value and secretKeyRef")),
        };
        if values.insert(entry.name.clone(), value).is_some() {
            return Err(invalid(&format!("name {:?} is repeated", entry.name)));
        }
    }
    Ok(ConfigValues::new(values))
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
        ..
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
                config_map: Some(ConfigMapKeySource {
                    namespace: "capstan".into(),
                    name: "kwok".into(),
                    key: "provider.wasm".into(),
                    bundle_key: None,
                }),
                oci: None,
                parts: Vec::new(),
                sha256: None,
            },
            grants,
            egress: Vec::new(),
            egress_ca_bundle: None,
            config: Vec::new(),
            limits,
            spend_limit_per_hour: None,
            node_class_kinds: None,
            verification: None,
        }
    }

    fn grant(verbs: &[&str]) -> ProviderGrant {
        ProviderGrant {
            cluster: GrantCluster::Management,
            api_groups: vec!["cluster.x-k8s.io".into()],
            resources: vec!["machinedeployments/scale".into()],
            verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
            namespaces: vec!["default".into()],
            scope: crate::api::provider::GrantScope::Owned,
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
                ..ProviderLimits::default()
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

    fn config_spec(config: Vec<crate::api::provider::ProviderConfigEntry>) -> ProviderSpec {
        let mut spec = spec(Vec::new(), None);
        spec.config = config;
        spec
    }

    fn from_secret(
        name: &str,
        secret: &str,
        key: &str,
    ) -> crate::api::provider::ProviderConfigEntry {
        crate::api::provider::ProviderConfigEntry {
            name: name.into(),
            value: None,
            secret_key_ref: Some(crate::api::provider::LocalObjectKey {
                name: secret.into(),
                key: key.into(),
            }),
        }
    }

    fn secret(name: &str, data: &[(&str, &[u8])]) -> (String, Secret) {
        let secret = Secret {
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), k8s_openapi::ByteString(v.to_vec())))
                    .collect(),
            ),
            ..Secret::default()
        };
        (name.to_owned(), secret)
    }

    #[test]
    fn config_resolves_values_and_secret_keys() {
        let mut literal = from_secret("zone", "x", "y");
        literal.secret_key_ref = None;
        literal.value = Some("zone-a".into());
        let spec = config_spec(vec![from_secret("api-key", "creds", "key"), literal]);
        let secrets = BTreeMap::from([secret("creds", &[("key", b"s3cr3t")])]);
        let values = config_values(&spec, "ns", &secrets).unwrap();
        assert_eq!(values.get("api-key"), Some("s3cr3t"));
        assert_eq!(values.get("zone"), Some("zone-a"));
        assert_eq!(secret_names(&spec).collect::<Vec<_>>(), ["creds"]);
    }

    #[test]
    fn missing_secrets_and_keys_are_named_never_valued() {
        let spec = config_spec(vec![from_secret("api-key", "creds", "key")]);
        let err = config_values(&spec, "ns", &BTreeMap::new()).unwrap_err();
        assert_eq!(err.reason(), "SecretNotFound");
        assert!(err.blocks_ready());
        assert!(err.to_string().contains("ns/creds"), "{err}");

        let secrets = BTreeMap::from([secret("creds", &[("other", b"s3cr3t")])]);
        let err = config_values(&spec, "ns", &secrets).unwrap_err();
        assert_eq!(err.reason(), "SecretKeyNotFound");
        let text = err.to_string();
        assert!(text.contains("\"key\"") && text.contains("other"), "{text}");
        assert!(!text.contains("s3cr3t"), "{text}");

        let secrets = BTreeMap::from([secret("creds", &[("key", &[0xff, 0xfe])])]);
        let err = config_values(&spec, "ns", &secrets).unwrap_err();
        assert_eq!(err.reason(), "InvalidConfig");
        assert!(!err.blocks_ready());
    }

    #[test]
    fn config_entries_need_exactly_one_source_and_unique_names() {
        let mut both = from_secret("k", "s", "k");
        both.value = Some("v".into());
        let err = config_values(&config_spec(vec![both]), "ns", &BTreeMap::new()).unwrap_err();
        assert!(err.to_string().contains("exactly one"), "{err}");
        let mut neither = from_secret("k", "s", "k");
        neither.secret_key_ref = None;
        assert_eq!(
            config_values(&config_spec(vec![neither]), "ns", &BTreeMap::new())
                .unwrap_err()
                .reason(),
            "InvalidConfig"
        );
        let secrets = BTreeMap::from([secret("s", &[("k", b"v")])]);
        let twice = config_spec(vec![from_secret("k", "s", "k"), from_secret("k", "s", "k")]);
        assert!(
            config_values(&twice, "ns", &secrets)
                .unwrap_err()
                .to_string()
                .contains("repeated")
        );
    }

    #[test]
    fn egress_and_http_limits_parse() {
        let mut spec = spec(
            Vec::new(),
            Some(ProviderLimits {
                http_connect_timeout: Some("2s".into()),
                http_max_response_body: Some(Quantity::new("1Mi")),
                ..ProviderLimits::default()
            }),
        );
        let http = http_limits(&spec).unwrap();
        assert_eq!(http.connect_timeout, Duration::from_secs(2));
        assert_eq!(http.max_response_body, 1 << 20);
        assert_eq!(
            http.first_byte_timeout,
            HttpLimits::default().first_byte_timeout
        );
        spec.egress = vec!["https://api.example.com".into(), "ftp://x".into()];
        let err = egress(&spec).unwrap_err();
        assert_eq!(err.reason(), "InvalidEgress");
        assert!(err.to_string().contains("ftp://x"), "{err}");
        spec.limits = Some(ProviderLimits {
            http_max_response_body: Some(Quantity::new("0")),
            ..ProviderLimits::default()
        });
        assert!(
            http_limits(&spec)
                .unwrap_err()
                .to_string()
                .contains("httpMaxResponseBody")
        );
    }
}
