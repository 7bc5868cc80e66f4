//! The CloudStack objects the provider reads, as its JSON API returns them (lower-case field
//! names; fields the provider does not need are ignored, missing optional ones default).

use serde::{Deserialize, Deserializer, Serialize};

/// A resource tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tag {
    /// Key.
    pub key: String,
    /// Value.
    #[serde(default)]
    pub value: String,
}

/// A zone (`listZones`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Zone {
    /// UUID.
    pub id: String,
    /// Name.
    pub name: String,
    /// `Enabled` or `Disabled`.
    #[serde(default, rename = "allocationstate")]
    pub allocation_state: Option<String>,
}

impl Zone {
    /// Whether VMs can be deployed here.
    pub fn enabled(&self) -> bool {
        self.allocation_state
            .as_deref()
            .is_none_or(|s| s.eq_ignore_ascii_case("enabled"))
    }
}

/// A compute offering (`listServiceOfferings`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceOffering {
    /// UUID.
    pub id: String,
    /// Name (the instance type).
    pub name: String,
    /// vCPUs (absent for custom offerings, which the provider cannot size).
    #[serde(default, rename = "cpunumber", deserialize_with = "lenient_u64")]
    pub cpu_number: Option<u64>,
    /// Memory in MiB (absent for custom offerings).
    #[serde(default, deserialize_with = "lenient_u64")]
    pub memory: Option<u64>,
    /// GPUs the offering attaches.
    #[serde(default, rename = "gpucount", deserialize_with = "lenient_u64")]
    pub gpu_count: Option<u64>,
    /// The GPU card.
    #[serde(default, rename = "gpucardname")]
    pub gpu_card_name: Option<String>,
    /// The vGPU profile.
    #[serde(default, rename = "vgpuprofilename")]
    pub vgpu_profile: Option<String>,
    /// Comma-separated host tags.
    #[serde(default, rename = "hosttags")]
    pub host_tags: Option<String>,
    /// Comma-separated storage tags (CloudStack's `tags` of an offering).
    #[serde(default, rename = "tags")]
    pub storage_tags: Option<String>,
    /// Details (`serviceofferingdetails`), string values.
    #[serde(default, rename = "serviceofferingdetails")]
    pub details: std::collections::BTreeMap<String, serde_json::Value>,
    /// Comma-separated zone UUIDs it is limited to (absent: every zone).
    #[serde(default, rename = "zoneid")]
    pub zone_ids: Option<String>,
    /// Whether the size is chosen at deploy (not usable as an instance type).
    #[serde(default, rename = "iscustomized")]
    pub customized: bool,
}

impl ServiceOffering {
    /// Whether it is offered in zone `zone_id`.
    pub fn in_zone(&self, zone_id: &str) -> bool {
        match self.zone_ids.as_deref().map(str::trim) {
            None | Some("") => true,
            Some(list) => list.split(',').any(|z| z.trim() == zone_id),
        }
    }

    /// GPUs attached: `gpucount`, or one when a card or vGPU profile is named without a count.
    pub fn gpus(&self) -> u64 {
        match self.gpu_count {
            Some(n) => n,
            None if self.gpu_card_name.is_some() || self.vgpu_profile.is_some() => 1,
            None => {
                if self.details.contains_key("pciDevice") || self.details.contains_key("vgpuType") {
                    1
                } else {
                    0
                }
            }
        }
    }
}

/// A template (`listTemplates`), one entry per zone it is in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Template {
    /// UUID.
    pub id: String,
    /// Name.
    pub name: String,
    /// OS type name (`Ubuntu 24.04 LTS`).
    #[serde(default, rename = "ostypename")]
    pub os_type_name: String,
    /// The zone of this entry.
    #[serde(default, rename = "zoneid")]
    pub zone_id: String,
    /// `x86_64` or `aarch64` (older CloudStack versions leave it out: x86_64).
    #[serde(default)]
    pub arch: Option<String>,
    /// Whether it can be deployed.
    #[serde(default = "yes", rename = "isready")]
    pub ready: bool,
    /// Creation time (`2025-01-01T00:00:00+0000`): the newest matching template wins.
    #[serde(default)]
    pub created: String,
    /// Resource tags.
    #[serde(default, deserialize_with = "lenient_tags")]
    pub tags: Vec<Tag>,
}

fn yes() -> bool {
    true
}

/// A guest network (`listNetworks`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Network {
    /// UUID.
    pub id: String,
    /// Name.
    pub name: String,
    /// Zone UUID.
    #[serde(default, rename = "zoneid")]
    pub zone_id: String,
    /// Resource tags.
    #[serde(default, deserialize_with = "lenient_tags")]
    pub tags: Vec<Tag>,
}

/// A disk offering (`listDiskOfferings`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskOffering {
    /// UUID.
    pub id: String,
    /// Name.
    pub name: String,
    /// Whether the size is chosen at deploy.
    #[serde(default, rename = "iscustomized")]
    pub customized: bool,
}

/// A VM's NIC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nic {
    /// The network.
    #[serde(default, rename = "networkid")]
    pub network_id: String,
    /// Its address.
    #[serde(default, rename = "ipaddress")]
    pub ip_address: Option<String>,
}

/// A VM (`listVirtualMachines`, and deploy's job result).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VirtualMachine {
    /// UUID.
    pub id: String,
    /// Host name.
    #[serde(default)]
    pub name: String,
    /// `Starting`, `Running`, `Stopped`, `Error`, `Destroyed`, `Expunging`...
    #[serde(default)]
    pub state: String,
    /// Zone UUID.
    #[serde(default, rename = "zoneid")]
    pub zone_id: String,
    /// Zone name.
    #[serde(default, rename = "zonename")]
    pub zone_name: String,
    /// Template UUID.
    #[serde(default, rename = "templateid")]
    pub template_id: String,
    /// Service offering UUID.
    #[serde(default, rename = "serviceofferingid")]
    pub service_offering_id: String,
    /// Service offering name.
    #[serde(default, rename = "serviceofferingname")]
    pub service_offering_name: String,
    /// vCPUs.
    #[serde(default, rename = "cpunumber", deserialize_with = "lenient_u64")]
    pub cpu_number: Option<u64>,
    /// Memory in MiB.
    #[serde(default, deserialize_with = "lenient_u64")]
    pub memory: Option<u64>,
    /// GPUs.
    #[serde(default, rename = "gpucount", deserialize_with = "lenient_u64")]
    pub gpu_count: Option<u64>,
    /// Architecture, when CloudStack reports it.
    #[serde(default)]
    pub arch: Option<String>,
    /// Creation time.
    #[serde(default)]
    pub created: String,
    /// NICs.
    #[serde(default, rename = "nic")]
    pub nics: Vec<Nic>,
    /// Resource tags.
    #[serde(default, deserialize_with = "lenient_tags")]
    pub tags: Vec<Tag>,
}

impl VirtualMachine {
    /// The tag `key`.
    pub fn tag(&self, key: &str) -> Option<&str> {
        self.tags
            .iter()
            .find(|t| t.key == key)
            .map(|t| t.value.as_str())
    }

    /// Whether the VM is gone or going (`Destroyed`, `Expunging`, `Expunged`).
    pub fn is_leaving(&self) -> bool {
        ["destroyed", "expunging", "expunged"]
            .iter()
            .any(|s| self.state.eq_ignore_ascii_case(s))
    }

    /// Whether the VM failed to start (`Error`).
    pub fn is_error(&self) -> bool {
        self.state.eq_ignore_ascii_case("error")
    }

    /// Whether it is `Running`.
    pub fn is_running(&self) -> bool {
        self.state.eq_ignore_ascii_case("running")
    }
}

/// Numbers CloudStack sends as numbers or, in some versions, strings.
fn lenient_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let v = Option::<serde_json::Value>::deserialize(d)?;
    Ok(match v {
        Some(serde_json::Value::Number(n)) => n.as_u64(),
        Some(serde_json::Value::String(s)) => s.trim().parse().ok(),
        _ => None,
    })
}

/// `tags` arrays; anything else (CloudStack versions that send a string) as none.
fn lenient_tags<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Tag>, D::Error> {
    let v = Option::<serde_json::Value>::deserialize(d)?;
    Ok(match v {
        Some(v @ serde_json::Value::Array(_)) => serde_json::from_value(v).unwrap_or_default(),
        _ => Vec::new(),
    })
}

/// Kubernetes' name (`amd64`, `arm64`) for a CloudStack architecture (`x86_64`, `aarch64`);
/// unknown names are passed through lower-cased.
pub fn kube_arch(arch: Option<&str>) -> String {
    match arch.map(str::to_ascii_lowercase).as_deref() {
        None | Some("" | "x86_64" | "amd64" | "x86-64") => "amd64".to_string(),
        Some("aarch64" | "arm64") => "arm64".to_string(),
        Some(other) => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn offerings_parse_with_and_without_optional_fields() {
        let o: ServiceOffering = serde_json::from_value(json!({
            "id": "o", "name": "gpu", "cpunumber": 8, "memory": "65536", "gpucount": 2,
            "gpucardname": "NVIDIA A10", "zoneid": "z1, z2", "hosttags": "gpu",
            "serviceofferingdetails": {"pciDevice": "x"}, "other": true
        }))
        .unwrap();
        assert_eq!(
            (o.cpu_number, o.memory, o.gpus()),
            (Some(8), Some(65536), 2)
        );
        assert!(o.in_zone("z2") && !o.in_zone("z3"));
        let o: ServiceOffering =
            serde_json::from_value(json!({"id": "o", "name": "custom", "iscustomized": true}))
                .unwrap();
        assert_eq!((o.cpu_number, o.gpus()), (None, 0));
        assert!(o.in_zone("anything") && o.customized);
        let o: ServiceOffering = serde_json::from_value(
            json!({"id": "o", "name": "v", "serviceofferingdetails": {"vgpuType": "p"}}),
        )
        .unwrap();
        assert_eq!(o.gpus(), 1);
    }

    #[test]
    fn vms_and_templates() {
        let vm: VirtualMachine = serde_json::from_value(json!({
            "id": "v", "name": "n", "state": "Running", "zoneid": "z", "tags": [{"key": "k", "value": "v"}],
            "nic": [{"networkid": "net", "ipaddress": "10.0.0.2", "isdefault": true}]
        }))
        .unwrap();
        assert_eq!(vm.tag("k"), Some("v"));
        assert!(vm.is_running() && !vm.is_leaving() && !vm.is_error());
        let vm: VirtualMachine =
            serde_json::from_value(json!({"id": "v", "state": "Expunging", "tags": "x"})).unwrap();
        assert!(vm.is_leaving() && vm.tags.is_empty());
        let t: Template = serde_json::from_value(json!({"id": "t", "name": "n"})).unwrap();
        assert!(t.ready && t.arch.is_none());
        assert_eq!(kube_arch(t.arch.as_deref()), "amd64");
        assert_eq!(kube_arch(Some("aarch64")), "arm64");
        assert_eq!(kube_arch(Some("S390X")), "s390x");
        let z: Zone =
            serde_json::from_value(json!({"id": "z", "name": "a", "allocationstate": "Disabled"}))
                .unwrap();
        assert!(!z.enabled());
    }
}
