//! The CloudStack NodeClass `parameters` (a JSON object, camelCase): the seed provider's
//! `CloudStackNodeClass` spec plus an endpoint, a price model and a pods limit. Strict: unknown
//! fields are rejected with the path of the offending field. The schema is documented in
//! `README.md`.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use capstan_provider_sdk::ProviderError;
use capstan_provider_sdk::params::invalid;
use serde::{Deserialize, Serialize};

use crate::pricing::Pricing;
use crate::selector::{SelectorTerm, TemplateSelectorTerm};
use crate::tags::RESERVED_KEYS;

/// CloudStack's default limit on Base64 `userdata` in a POST (`vm.userdata.max.length`).
pub const MAX_USER_DATA_BASE64: usize = 32_768;
/// Pods per node when `maxPods` is not set (the kubelet's default).
pub const DEFAULT_MAX_PODS: u32 = 110;
/// The most selector terms of one kind (as the seed provider's CRD allows).
pub const MAX_TERMS: usize = 30;

/// The NodeClass parameters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Parameters {
    /// The API endpoint (`https://cloud.example.com/client/api`); default: the Provider's
    /// `endpoint` config value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// One zone (name or UUID), as the seed provider's `zone`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Zones (names or UUIDs) in order of preference; neither `zone` nor `zones`: every zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zones: Option<Vec<String>>,
    /// Which service offerings are instance types (terms ORed).
    #[serde(default)]
    pub service_offering_selector_terms: Vec<SelectorTerm>,
    /// Which templates nodes boot (terms ORed; per zone and architecture the newest wins).
    #[serde(default)]
    pub template_selector_terms: Vec<TemplateSelectorTerm>,
    /// Which networks nodes join (terms ORed; per zone the first match wins).
    #[serde(default)]
    pub network_selector_terms: Vec<SelectorTerm>,
    /// Cloud-init user data (plain text; sent Base64-encoded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    /// Extra tags on every VM.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Root disk size in GiB (CloudStack's `rootdisksize`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_disk_size: Option<u64>,
    /// A disk offering (name or UUID) for a data disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_offering: Option<String>,
    /// The SSH key pair name (CloudStack's `keypair`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_key_pair: Option<String>,
    /// Prices (CloudStack has no price API).
    #[serde(default)]
    pub pricing: Pricing,
    /// Pods per node; default 110.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<u32>,
    /// How long `create` waits for the deploy job before giving up (and destroying the VM);
    /// default 300. Keep it below the Provider's `limits.launchTimeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_timeout_seconds: Option<u64>,
    /// How often async jobs are polled at first, in ms (then backing off to 4x); default 250.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_millis: Option<u64>,
}

/// Default of `launchTimeoutSeconds`.
pub const DEFAULT_LAUNCH_TIMEOUT_SECONDS: u64 = 300;
/// Default of `pollMillis`.
pub const DEFAULT_POLL_MILLIS: u64 = 250;

/// The fields that shape a VM but are not resolved against the cloud: a change drifts nodes
/// (`NodeClassDrifted`). Selectors drift through what they resolve to (see [`crate::drift`]);
/// pricing, the endpoint and `maxPods` never drift.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DriftFields<'a> {
    user_data: &'a Option<String>,
    tags: &'a BTreeMap<String, String>,
    root_disk_size: &'a Option<u64>,
    disk_offering: &'a Option<String>,
    ssh_key_pair: &'a Option<String>,
}

/// karpenter-provider-cloudstack's API group, whose `CloudStackNodeClass` this provider serves.
pub const CLOUDSTACK_GROUP: &str = "karpenter.k8s.cloudstack";
/// The kind.
pub const CLOUDSTACK_NODE_CLASS: &str = "CloudStackNodeClass";

impl Parameters {
    /// Parses and validates node class parameters: a `capstan.dev` NodeClass's `parameters`, or
    /// a `CloudStackNodeClass` (`karpenter.k8s.cloudstack/v1`) as the host hands it over, whose
    /// `spec` fields are the same (`zone`, the three selector term lists, `userData`, `tags`,
    /// `rootDiskSize`, `diskOffering`); the endpoint then comes from the Provider's configuration
    /// and prices from the default price model.
    pub fn parse(text: &str) -> Result<Self, ProviderError> {
        let params: Parameters = match capstan_provider_sdk::params::served_object(text) {
            Some(served) => {
                let group = served.api_version.split('/').next().unwrap_or_default();
                if group != CLOUDSTACK_GROUP || served.kind != CLOUDSTACK_NODE_CLASS {
                    return Err(ProviderError::Invalid(format!(
                        "the cloudstack provider serves {CLOUDSTACK_NODE_CLASS}.{CLOUDSTACK_GROUP}, not {}.{group}",
                        served.kind
                    )));
                }
                served.spec()?
            }
            None => capstan_provider_sdk::params::parse(text)?,
        };
        params.validate()?;
        Ok(params)
    }

    /// The zones asked for, in order of preference (empty: every zone).
    pub fn zone_names(&self) -> Vec<&str> {
        match (&self.zone, &self.zones) {
            (Some(zone), _) => vec![zone.as_str()],
            (None, Some(zones)) => zones.iter().map(String::as_str).collect(),
            (None, None) => Vec::new(),
        }
    }

    /// How long `create` waits for the deploy job, in ms.
    pub fn launch_timeout_millis(&self) -> u64 {
        self.launch_timeout_seconds
            .unwrap_or(DEFAULT_LAUNCH_TIMEOUT_SECONDS)
            .saturating_mul(1000)
    }

    /// The first poll interval of async jobs, in ms.
    pub fn poll_millis(&self) -> u64 {
        self.poll_millis.unwrap_or(DEFAULT_POLL_MILLIS)
    }

    /// Pods per node.
    pub fn max_pods(&self) -> u32 {
        self.max_pods.unwrap_or(DEFAULT_MAX_PODS)
    }

    /// `userData` as CloudStack wants it (Base64), if set.
    pub fn user_data_base64(&self) -> Option<String> {
        self.user_data.as_ref().map(|u| BASE64.encode(u.as_bytes()))
    }

    /// A stable hash (16 hex digits) of the fields in [`DriftFields`].
    pub fn hash(&self) -> String {
        let fields = DriftFields {
            user_data: &self.user_data,
            tags: &self.tags,
            root_disk_size: &self.root_disk_size,
            disk_offering: &self.disk_offering,
            ssh_key_pair: &self.ssh_key_pair,
        };
        // Plain structs, options and BTreeMaps serialize deterministically and cannot fail.
        crate::hash::short(
            serde_json::to_string(&fields)
                .unwrap_or_default()
                .as_bytes(),
        )
    }

    /// Checks what serde cannot.
    pub fn validate(&self) -> Result<(), ProviderError> {
        if let Some(endpoint) = &self.endpoint {
            crate::endpoint::Endpoint::parse(endpoint).map_err(|e| invalid("endpoint", e))?;
        }
        if self.zone.is_some() && self.zones.is_some() {
            return Err(invalid("zones", "set zone or zones, not both"));
        }
        if let Some(zone) = &self.zone
            && zone.trim().is_empty()
        {
            return Err(invalid("zone", "must not be empty"));
        }
        if let Some(zones) = &self.zones {
            if zones.is_empty() {
                return Err(invalid(
                    "zones",
                    "must list at least one zone (or be left out)",
                ));
            }
            for (i, zone) in zones.iter().enumerate() {
                if zone.trim().is_empty() {
                    return Err(invalid(&format!("zones[{i}]"), "must not be empty"));
                }
                if zones[..i].contains(zone) {
                    return Err(invalid(
                        &format!("zones[{i}]"),
                        format!("duplicate zone {zone:?}"),
                    ));
                }
            }
        }
        terms(
            "serviceOfferingSelectorTerms",
            &self.service_offering_selector_terms,
            |t, at| t.validate(at),
        )?;
        terms(
            "templateSelectorTerms",
            &self.template_selector_terms,
            |t, at| t.validate(at),
        )?;
        terms(
            "networkSelectorTerms",
            &self.network_selector_terms,
            |t, at| t.validate(at),
        )?;
        if let Some(encoded) = self.user_data_base64()
            && encoded.len() > MAX_USER_DATA_BASE64
        {
            return Err(invalid(
                "userData",
                format!(
                    "too long: {} bytes once Base64-encoded, CloudStack accepts {MAX_USER_DATA_BASE64} by default",
                    encoded.len()
                ),
            ));
        }
        for key in self.tags.keys() {
            if key.trim().is_empty() {
                return Err(invalid("tags", "empty tag keys are not supported"));
            }
            if RESERVED_KEYS.iter().any(|r| r.eq_ignore_ascii_case(key)) {
                return Err(invalid(
                    &format!("tags.{key}"),
                    "is set by the provider (ownership tags) and cannot be overridden",
                ));
            }
        }
        if let Some(size) = self.root_disk_size
            && !(1..=65_536).contains(&size)
        {
            return Err(invalid(
                "rootDiskSize",
                format!("must be 1..=65536 GiB, got {size}"),
            ));
        }
        for (field, value) in [
            ("diskOffering", &self.disk_offering),
            ("sshKeyPair", &self.ssh_key_pair),
        ] {
            if value.as_ref().is_some_and(|v| v.trim().is_empty()) {
                return Err(invalid(field, "must not be empty"));
            }
        }
        if self.max_pods == Some(0) {
            return Err(invalid("maxPods", "must be at least 1"));
        }
        if self.launch_timeout_seconds == Some(0) {
            return Err(invalid("launchTimeoutSeconds", "must be at least 1"));
        }
        if self
            .poll_millis
            .is_some_and(|p| !(10..=60_000).contains(&p))
        {
            return Err(invalid("pollMillis", "must be 10..=60000"));
        }
        self.pricing.validate()
    }
}

fn terms<T>(
    field: &str,
    list: &[T],
    check: impl Fn(&T, &str) -> Result<(), ProviderError>,
) -> Result<(), ProviderError> {
    if list.is_empty() {
        return Err(invalid(field, "must list at least one term"));
    }
    if list.len() > MAX_TERMS {
        return Err(invalid(
            field,
            format!("at most {MAX_TERMS} terms, got {}", list.len()),
        ));
    }
    for (i, term) in list.iter().enumerate() {
        check(term, &format!("{field}[{i}]"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cloudstack_node_class_as_its_readme_writes_it() {
        let served = serde_json::json!({
            "apiVersion": "karpenter.k8s.cloudstack/v1",
            "kind": "CloudStackNodeClass",
            "spec": {
                "zone": "zone-01",
                "networkSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-cluster"}}],
                "serviceOfferingSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-cluster"}}],
                "templateSelectorTerms": [{"tags": {"os": "ubuntu", "version": "22.04"}}],
                "userData": "#!/bin/bash\necho \"Node initialization script\"\n",
            },
        });
        let params = Parameters::parse(&served.to_string()).unwrap();
        assert_eq!(params.zone_names(), vec!["zone-01"]);
        assert_eq!(params.template_selector_terms[0].tags["version"], "22.04");
        assert!(params.user_data.unwrap().starts_with("#!/bin/bash"));
        let other = serde_json::json!({"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "spec": {}});
        assert!(matches!(
            Parameters::parse(&other.to_string()),
            Err(ProviderError::Invalid(_))
        ));
        let typo = serde_json::json!({"apiVersion": "karpenter.k8s.cloudstack/v1", "kind": "CloudStackNodeClass", "spec": {"zonee": "x"}});
        assert!(
            matches!(Parameters::parse(&typo.to_string()), Err(ProviderError::Invalid(m)) if m.contains("zonee"))
        );
    }

    pub(crate) const MINIMAL: &str = r#"{"serviceOfferingSelectorTerms":[{"name":"small"}],
        "templateSelectorTerms":[{"tags":{"capstan":"node-image"}}],
        "networkSelectorTerms":[{"tags":{"capstan":"nodes"}}]}"#;

    fn message(text: &str) -> String {
        match Parameters::parse(text) {
            Err(ProviderError::Invalid(m)) => m,
            other => panic!("not invalid: {other:?}"),
        }
    }

    fn with(extra: &str) -> String {
        format!("{},{extra}}}", MINIMAL.trim_end().trim_end_matches('}'))
    }

    #[test]
    fn accepts_the_seed_providers_fields() {
        let p = Parameters::parse(&with(
            r#""zone":"zone-a","userData":"a","tags":{"team":"x"},"rootDiskSize":50,
               "diskOffering":"data-50","sshKeyPair":"k","maxPods":58,
               "endpoint":"https://cloud.example.com/client/api",
               "pricing":{"offerings":{"small":0.5},"perVcpu":0.1,"perGiB":0.01,"perGpu":2}"#,
        ))
        .unwrap();
        assert_eq!(p.zone_names(), vec!["zone-a"]);
        assert_eq!(p.user_data_base64().as_deref(), Some("YQ=="));
        assert_eq!(p.max_pods(), 58);
        assert_eq!((p.launch_timeout_millis(), p.poll_millis()), (300_000, 250));
        assert_eq!(p.root_disk_size, Some(50));
        let p = Parameters::parse(&with(r#""zones":["b","a"]"#)).unwrap();
        assert_eq!(p.zone_names(), vec!["b", "a"]);
        assert!(Parameters::parse(MINIMAL).unwrap().zone_names().is_empty());
        assert_eq!(Parameters::parse(MINIMAL).unwrap().max_pods(), 110);
    }

    #[test]
    fn rejects_garbage_naming_the_field() {
        assert!(message(&with(r#""zonez":"a""#)).contains("unknown field `zonez`"));
        assert!(message(&with(r#""zone":"a","zones":["b"]"#)).starts_with("parameters.zones:"));
        assert!(message(&with(r#""zones":[]"#)).starts_with("parameters.zones:"));
        assert!(message(&with(r#""zones":["a","a"]"#)).starts_with("parameters.zones[1]:"));
        assert!(message(&with(r#""rootDiskSize":0"#)).starts_with("parameters.rootDiskSize:"));
        assert!(message(&with(r#""rootDiskSize":-1"#)).starts_with("parameters.rootDiskSize:"));
        assert!(message(&with(r#""maxPods":0"#)).starts_with("parameters.maxPods:"));
        assert!(message(&with(r#""pollMillis":1"#)).starts_with("parameters.pollMillis:"));
        assert!(
            message(&with(r#""launchTimeoutSeconds":0"#))
                .starts_with("parameters.launchTimeoutSeconds:")
        );
        assert!(message(&with(r#""sshKeyPair":" ""#)).starts_with("parameters.sshKeyPair:"));
        assert!(
            message(&with(r#""tags":{"karpenter.sh/nodeclaim":"x"}"#))
                .starts_with("parameters.tags.karpenter.sh/nodeclaim:")
        );
        assert!(message(&with(r#""endpoint":"ftp://x""#)).contains("endpoint"));
        let big = "x".repeat(30_000);
        assert!(
            message(&with(&format!(r#""userData":"{big}""#))).starts_with("parameters.userData:")
        );
        assert_eq!(
            message("{}"),
            "parameters.serviceOfferingSelectorTerms: must list at least one term"
        );
        let m = message(
            r#"{"serviceOfferingSelectorTerms":[{"name":"a"},{}],
                "templateSelectorTerms":[{"id":"t"}],"networkSelectorTerms":[{"id":"n"}]}"#,
        );
        assert!(
            m.starts_with("parameters.serviceOfferingSelectorTerms[1]:"),
            "{m}"
        );
        let m = message(
            r#"{"serviceOfferingSelectorTerms":[{"name":"a"}],
                "templateSelectorTerms":[{"osType":"x","colour":"red"}],"networkSelectorTerms":[{"id":"n"}]}"#,
        );
        assert!(m.starts_with("parameters.templateSelectorTerms[0]"), "{m}");
        assert!(m.contains("unknown field `colour`"), "{m}");
        let m = message(&with(r#""pricing":{"perVcpu":-1}"#));
        assert!(m.starts_with("parameters.pricing.perVcpu:"), "{m}");
    }

    #[test]
    fn hash_tracks_vm_shaping_fields_only() {
        let base = Parameters::parse(&with(r#""userData":"a""#)).unwrap();
        let same = Parameters::parse(&with(
            r#""userData":"a","pricing":{"perVcpu":9},"maxPods":3,"zone":"q""#,
        ))
        .unwrap();
        let other = Parameters::parse(&with(r#""userData":"b""#)).unwrap();
        assert_eq!(base.hash(), same.hash());
        assert_ne!(base.hash(), other.hash());
        assert_eq!(base.hash().len(), 16);
    }
}
