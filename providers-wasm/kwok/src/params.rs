//! The kwok NodeClass `parameters` (a JSON object, camelCase), their validation, and the hash that
//! detects NodeClass drift. The schema is documented in `README.md`.

use std::collections::{BTreeMap, BTreeSet};

use capstan_provider_sdk::params::invalid;
use capstan_provider_sdk::{ProviderError, Quantity, labels};
use serde::{Deserialize, Serialize};

/// Image reported when `imageID` is not set.
pub const DEFAULT_IMAGE_ID: &str = "kwok-default-image";

/// Pods per node when an `instanceTypes` entry does not say.
pub const DEFAULT_PODS: &str = "110";

/// The NodeClass parameters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Parameters {
    /// Replaces the generated catalog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_types: Option<Vec<InstanceTypeSpec>>,
    /// Keeps only these instance families (`c`, `s`, `m` in the generated catalog).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub families: Option<Vec<String>>,
    /// Keeps only these architectures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architectures: Option<Vec<String>>,
    /// Keeps only offerings in these zones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zones: Option<Vec<String>>,
    /// Keeps only offerings of these capacity types.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_types: Option<Vec<String>>,
    /// Keeps only instance types with at most this many vCPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cpu: Option<i64>,
    /// Image reported as the claim's image ID; changing it drifts nodes (`ImageDrifted`).
    #[serde(default, rename = "imageID", skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// Simulated boot time: `create` sleeps this long before creating the Node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_delay_millis: Option<i64>,
    /// Offerings reported as unavailable (and never launched).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unavailable_offerings: Vec<OfferingSelector>,
}

/// One instance type of a replacement catalog (the shape of Karpenter's kwok `instance_types.json`
/// entries, camelCase).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct InstanceTypeSpec {
    /// Instance type name (unique).
    pub name: String,
    /// CPU architecture; default `amd64`.
    #[serde(default = "default_arch")]
    pub architecture: String,
    /// Operating systems; default `[linux]`.
    #[serde(default = "default_oses")]
    pub operating_systems: Vec<String>,
    /// Capacity as Kubernetes quantities; `cpu` and `memory` are required, `pods` defaults to 110.
    pub resources: BTreeMap<String, String>,
    /// Where and how it can be bought.
    pub offerings: Vec<OfferingSpec>,
    /// Optional instance family (label `karpenter.kwok.sh/instance-family`, filter `families`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    /// Optional instance size (label `karpenter.kwok.sh/instance-size`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
    /// Extra labels every node of this type carries (also reported as `In` requirements).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// One offering of a replacement catalog entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OfferingSpec {
    /// Zone.
    pub zone: String,
    /// `spot`, `on-demand` or `reserved`.
    pub capacity_type: String,
    /// Price per hour, finite and >= 0.
    pub price: f64,
    /// Default true.
    #[serde(default = "yes")]
    pub available: bool,
}

/// Selects offerings to mark unavailable: every field given must match; an empty selector matches
/// every offering.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OfferingSelector {
    /// Instance type name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    /// Zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Capacity type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_type: Option<String>,
}

fn default_arch() -> String {
    labels::ARCH_AMD64.to_string()
}

fn default_oses() -> Vec<String> {
    vec![labels::OS_LINUX.to_string()]
}

fn yes() -> bool {
    true
}

impl OfferingSelector {
    /// Whether the offering `(instance_type, zone, capacity_type)` is selected.
    pub fn matches(&self, instance_type: &str, zone: &str, capacity_type: &str) -> bool {
        self.instance_type
            .as_deref()
            .is_none_or(|v| v == instance_type)
            && self.zone.as_deref().is_none_or(|v| v == zone)
            && self
                .capacity_type
                .as_deref()
                .is_none_or(|v| v == capacity_type)
    }
}

/// The fields whose change makes existing nodes drift (`NodeClassDrifted`): everything that shapes
/// the catalog. `imageID` drifts separately; `launchDelayMillis` and `unavailableOfferings` describe
/// launches, not nodes, and never drift.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DriftFields<'a> {
    instance_types: &'a Option<Vec<InstanceTypeSpec>>,
    families: &'a Option<Vec<String>>,
    architectures: &'a Option<Vec<String>>,
    zones: &'a Option<Vec<String>>,
    capacity_types: &'a Option<Vec<String>>,
    max_cpu: &'a Option<i64>,
}

/// Karpenter's `karpenter.kwok.sh` group, whose `KWOKNodeClass` this provider serves.
pub const KWOK_GROUP: &str = "karpenter.kwok.sh";
/// The kind.
pub const KWOK_NODE_CLASS: &str = "KWOKNodeClass";

/// The `spec` of Karpenter's `KWOKNodeClass` (`karpenter.kwok.sh/v1alpha1`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KwokNodeClassSpec {
    /// How long after its launch a node registers (Go duration: `30s`, `1m30s`, `1h`).
    #[serde(default)]
    pub node_registration_delay: Option<String>,
}

/// Milliseconds of a duration as Karpenter's CRD admits it (`^([0-9]+(s|m|h))+$`).
pub fn duration_millis(text: &str) -> Option<u64> {
    let mut total: u64 = 0;
    let mut digits = String::new();
    for c in text.chars() {
        match c {
            '0'..='9' => digits.push(c),
            's' | 'm' | 'h' if !digits.is_empty() => {
                let n: u64 = digits.parse().ok()?;
                let unit = match c {
                    's' => 1_000,
                    'm' => 60_000,
                    _ => 3_600_000,
                };
                total = total.checked_add(n.checked_mul(unit)?)?;
                digits.clear();
            }
            _ => return None,
        }
    }
    (digits.is_empty() && !text.is_empty()).then_some(total)
}

impl Parameters {
    /// Parses and validates node class parameters: a `capstan.dev` NodeClass's `parameters`, or
    /// a Karpenter `KWOKNodeClass` as the host hands it over (its `nodeRegistrationDelay` becomes
    /// the delay before the node registers; the default catalog otherwise).
    pub fn parse(text: &str) -> Result<Self, ProviderError> {
        if let Some(served) = capstan_provider_sdk::params::served_object(text) {
            return Self::from_kwok_node_class(&served);
        }
        let params: Parameters = capstan_provider_sdk::params::parse(text)?;
        params.validate()?;
        Ok(params)
    }

    fn from_kwok_node_class(
        served: &capstan_provider_sdk::params::ServedObject,
    ) -> Result<Self, ProviderError> {
        let group = served.api_version.split('/').next().unwrap_or_default();
        if group != KWOK_GROUP || served.kind != KWOK_NODE_CLASS {
            return Err(ProviderError::Invalid(format!(
                "the kwok provider serves {KWOK_NODE_CLASS}.{KWOK_GROUP}, not {}.{group}",
                served.kind
            )));
        }
        let spec: KwokNodeClassSpec = served.spec()?;
        let delay = match &spec.node_registration_delay {
            None => None,
            Some(text) => {
                let millis = duration_millis(text).ok_or_else(|| {
                    ProviderError::Invalid(format!(
                        "{KWOK_NODE_CLASS} spec.nodeRegistrationDelay: {text:?} is not a duration like 30s, 1m or 1h30m"
                    ))
                })?;
                Some(i64::try_from(millis).unwrap_or(i64::MAX))
            }
        };
        Ok(Parameters {
            launch_delay_millis: delay,
            ..Parameters::default()
        })
    }

    /// The image nodes launched now report.
    pub fn image_id(&self) -> &str {
        self.image_id.as_deref().unwrap_or(DEFAULT_IMAGE_ID)
    }

    /// How long `create` sleeps before creating the Node.
    pub fn launch_delay_millis(&self) -> u64 {
        self.launch_delay_millis
            .and_then(|ms| u64::try_from(ms).ok())
            .unwrap_or(0)
    }

    /// A stable hash (16 hex digits) of the fields that shape nodes; see [`DriftFields`].
    pub fn hash(&self) -> String {
        let fields = DriftFields {
            instance_types: &self.instance_types,
            families: &self.families,
            architectures: &self.architectures,
            zones: &self.zones,
            capacity_types: &self.capacity_types,
            max_cpu: &self.max_cpu,
        };
        // Serializing plain structs, vectors and BTreeMaps cannot fail and is deterministic.
        let text = serde_json::to_string(&fields).unwrap_or_default();
        format!("{:016x}", fnv1a(text.as_bytes()))
    }

    /// Checks values serde cannot: signs, ranges, names, quantities, prices.
    pub fn validate(&self) -> Result<(), ProviderError> {
        if let Some(max_cpu) = self.max_cpu
            && max_cpu < 0
        {
            return Err(invalid(
                "maxCpu",
                format!("must not be negative, got {max_cpu}"),
            ));
        }
        if let Some(delay) = self.launch_delay_millis
            && delay < 0
        {
            return Err(invalid(
                "launchDelayMillis",
                format!("must not be negative, got {delay}"),
            ));
        }
        if let Some(image) = &self.image_id
            && image.trim().is_empty()
        {
            return Err(invalid("imageID", "must not be empty"));
        }
        non_empty_strings("families", self.families.as_deref())?;
        non_empty_strings("architectures", self.architectures.as_deref())?;
        non_empty_strings("zones", self.zones.as_deref())?;
        for (i, ct) in self.capacity_types.iter().flatten().enumerate() {
            capacity_type(&format!("capacityTypes[{i}]"), ct)?;
        }
        for (i, selector) in self.unavailable_offerings.iter().enumerate() {
            if let Some(ct) = &selector.capacity_type {
                capacity_type(&format!("unavailableOfferings[{i}].capacityType"), ct)?;
            }
        }
        let mut names = BTreeSet::new();
        for (i, spec) in self.instance_types.iter().flatten().enumerate() {
            spec.validate(&format!("instanceTypes[{i}]"))?;
            if !names.insert(spec.name.as_str()) {
                return Err(invalid(
                    &format!("instanceTypes[{i}].name"),
                    format!("duplicate instance type {:?}", spec.name),
                ));
            }
        }
        Ok(())
    }
}

impl InstanceTypeSpec {
    fn validate(&self, at: &str) -> Result<(), ProviderError> {
        if self.name.trim().is_empty() {
            return Err(invalid(&format!("{at}.name"), "must not be empty"));
        }
        if self.architecture.trim().is_empty() {
            return Err(invalid(&format!("{at}.architecture"), "must not be empty"));
        }
        if self.operating_systems.is_empty() {
            return Err(invalid(
                &format!("{at}.operatingSystems"),
                "must list at least one",
            ));
        }
        non_empty_strings(
            &format!("{at}.operatingSystems"),
            Some(&self.operating_systems),
        )?;
        for required in [labels::RESOURCE_CPU, labels::RESOURCE_MEMORY] {
            if !self.resources.contains_key(required) {
                return Err(invalid(
                    &format!("{at}.resources"),
                    format!("{required} is required"),
                ));
            }
        }
        for (name, quantity) in &self.resources {
            let field = format!("{at}.resources.{name}");
            let q = Quantity::parse(quantity).map_err(|e| invalid(&field, e))?;
            if q.millis() < 0 {
                return Err(invalid(
                    &field,
                    format!("must not be negative, got {quantity}"),
                ));
            }
        }
        if self.offerings.is_empty() {
            return Err(invalid(
                &format!("{at}.offerings"),
                "must list at least one",
            ));
        }
        for (j, offering) in self.offerings.iter().enumerate() {
            let of = format!("{at}.offerings[{j}]");
            if offering.zone.trim().is_empty() {
                return Err(invalid(&format!("{of}.zone"), "must not be empty"));
            }
            capacity_type(&format!("{of}.capacityType"), &offering.capacity_type)?;
            if !offering.price.is_finite() || offering.price < 0.0 {
                return Err(invalid(
                    &format!("{of}.price"),
                    format!("must be finite and >= 0, got {}", offering.price),
                ));
            }
        }
        Ok(())
    }
}

fn non_empty_strings(field: &str, values: Option<&[String]>) -> Result<(), ProviderError> {
    for (i, v) in values.unwrap_or_default().iter().enumerate() {
        if v.trim().is_empty() {
            return Err(invalid(&format!("{field}[{i}]"), "must not be empty"));
        }
    }
    Ok(())
}

fn capacity_type(field: &str, value: &str) -> Result<(), ProviderError> {
    if labels::CAPACITY_TYPES.contains(&value) {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!("unknown capacity type {value:?} (spot, on-demand or reserved)"),
        ))
    }
}

/// 64-bit FNV-1a: small, dependency-free and stable across builds.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod kwok_node_class_tests {
    use super::*;

    #[test]
    fn a_kwok_node_class_is_the_default_catalog_with_its_registration_delay() {
        let params = Parameters::parse(
            r#"{"apiVersion":"karpenter.kwok.sh/v1alpha1","kind":"KWOKNodeClass","spec":{"nodeRegistrationDelay":"1m30s"}}"#,
        )
        .unwrap();
        assert_eq!(params.launch_delay_millis(), 90_000);
        assert_eq!(params.instance_types, None);
        let none = Parameters::parse(
            r#"{"apiVersion":"karpenter.kwok.sh/v1alpha1","kind":"KWOKNodeClass","spec":{}}"#,
        )
        .unwrap();
        assert_eq!(none, Parameters::default());
        for bad in [
            r#"{"apiVersion":"karpenter.kwok.sh/v1alpha1","kind":"KWOKNodeClass","spec":{"nodeRegistrationDelay":"5"}}"#,
            r#"{"apiVersion":"karpenter.kwok.sh/v1alpha1","kind":"KWOKNodeClass","spec":{"other":1}}"#,
            r#"{"apiVersion":"example.com/v1","kind":"KWOKNodeClass","spec":{}}"#,
        ] {
            assert!(
                matches!(Parameters::parse(bad), Err(ProviderError::Invalid(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn durations_read_as_karpenter_admits_them() {
        assert_eq!(duration_millis("30s"), Some(30_000));
        assert_eq!(duration_millis("1h2m3s"), Some(3_723_000));
        assert_eq!(duration_millis("0s"), Some(0));
        for bad in ["", "5", "s", "1.5s", "1d", "-1s"] {
            assert_eq!(duration_millis(bad), None, "{bad}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(e: ProviderError) -> String {
        match e {
            ProviderError::Invalid(m) => m,
            other => panic!("not invalid: {other:?}"),
        }
    }

    fn err(text: &str) -> String {
        message(Parameters::parse(text).unwrap_err())
    }

    #[test]
    fn accepts_the_documented_fields() {
        let p = Parameters::parse(
            r#"{"families":["c"],"architectures":["arm64"],"zones":["test-zone-a"],
                "capacityTypes":["spot"],"maxCpu":8,"imageID":"img-2","launchDelayMillis":250,
                "unavailableOfferings":[{"instanceType":"c-1x-arm64-linux","zone":"test-zone-a"}],
                "instanceTypes":[{"name":"g","resources":{"cpu":"4","memory":"16Gi"},
                  "offerings":[{"zone":"z","capacityType":"on-demand","price":1.5}]}]}"#,
        )
        .unwrap();
        assert_eq!(p.image_id(), "img-2");
        assert_eq!(p.launch_delay_millis(), 250);
        let spec = &p.instance_types.as_ref().unwrap()[0];
        assert_eq!(spec.architecture, "amd64");
        assert_eq!(spec.operating_systems, vec!["linux".to_string()]);
        assert!(spec.offerings[0].available);
        assert_eq!(
            Parameters::parse("{}").unwrap().image_id(),
            DEFAULT_IMAGE_ID
        );
        assert_eq!(Parameters::parse("").unwrap(), Parameters::default());
    }

    #[test]
    fn rejects_garbage_naming_the_field() {
        assert_eq!(err("42"), "parameters: must be a JSON object");
        assert!(err(r#"{"maxCPU":1}"#).contains("unknown field `maxCPU`"));
        assert!(err(r#"{"maxCpu":-1}"#).starts_with("parameters.maxCpu:"));
        assert!(err(r#"{"maxCpu":"x"}"#).starts_with("parameters.maxCpu:"));
        assert!(err(r#"{"launchDelayMillis":-5}"#).starts_with("parameters.launchDelayMillis:"));
        assert!(err(r#"{"imageID":" "}"#).starts_with("parameters.imageID:"));
        assert!(err(r#"{"capacityTypes":["cheap"]}"#).starts_with("parameters.capacityTypes[0]:"));
        assert!(err(r#"{"zones":[""]}"#).starts_with("parameters.zones[0]:"));
        let m = err(r#"{"unavailableOfferings":[{"zone":"a","size":"x"}]}"#);
        assert!(m.starts_with("parameters.unavailableOfferings[0]"), "{m}");
        let it = |body: &str| format!(r#"{{"instanceTypes":[{body}]}}"#);
        assert!(
            err(&it(
                r#"{"name":"a","resources":{"cpu":"1"},"offerings":[]}"#
            ))
            .starts_with("parameters.instanceTypes[0].resources: memory is required")
        );
        assert!(
            err(&it(
                r#"{"name":"a","resources":{"cpu":"x","memory":"1Gi"},"offerings":[]}"#
            ))
            .starts_with("parameters.instanceTypes[0].resources.cpu:")
        );
        assert!(
            err(&it(
                r#"{"name":"a","resources":{"cpu":"-1","memory":"1Gi"},"offerings":[]}"#
            ))
            .starts_with("parameters.instanceTypes[0].resources.cpu:")
        );
        assert!(
            err(&it(
                r#"{"name":"a","resources":{"cpu":"1","memory":"1Gi"},"offerings":[]}"#
            ))
            .starts_with("parameters.instanceTypes[0].offerings:")
        );
        assert!(
            err(&it(r#"{"name":"a","resources":{"cpu":"1","memory":"1Gi"},
                    "offerings":[{"zone":"z","capacityType":"spot","price":-1}]}"#))
            .starts_with("parameters.instanceTypes[0].offerings[0].price:")
        );
        let dup = r#"{"name":"a","resources":{"cpu":"1","memory":"1Gi"},
                      "offerings":[{"zone":"z","capacityType":"spot","price":1}]}"#;
        assert!(
            err(&format!(r#"{{"instanceTypes":[{dup},{dup}]}}"#))
                .starts_with("parameters.instanceTypes[1].name: duplicate")
        );
    }

    #[test]
    fn hash_tracks_node_shaping_fields_only() {
        let base = Parameters::parse(r#"{"families":["c"]}"#).unwrap();
        let same = Parameters::parse(
            r#"{"families":["c"],"imageID":"x","launchDelayMillis":9,
                "unavailableOfferings":[{"zone":"test-zone-a"}]}"#,
        )
        .unwrap();
        let other = Parameters::parse(r#"{"families":["m"]}"#).unwrap();
        assert_eq!(base.hash(), same.hash());
        assert_ne!(base.hash(), other.hash());
        assert_eq!(base.hash().len(), 16);
        assert_eq!(base.hash(), base.clone().hash());
    }

    #[test]
    fn selectors_match_given_fields() {
        let any = OfferingSelector::default();
        assert!(any.matches("t", "z", "spot"));
        let zone = OfferingSelector {
            zone: Some("a".into()),
            ..OfferingSelector::default()
        };
        assert!(zone.matches("t", "a", "spot"));
        assert!(!zone.matches("t", "b", "spot"));
    }
}
