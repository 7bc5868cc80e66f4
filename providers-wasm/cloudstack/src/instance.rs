//! A VM as a NodeClaim, provider IDs (`cloudstack://<zone-id>/<vm-id>`) and VM names. Pure; the
//! API calls live in [`crate::provider`].

use capstan_provider_sdk::{KeyValue, NodeClaim, Quantity, Resource, ResourceList, labels};

use crate::api::model::{VirtualMachine, kube_arch};
use crate::catalog::{CAPACITY_TYPE, CPU_LABEL, GPU_COUNT_LABEL, InstanceType, MEMORY_LABEL};
use crate::params::DEFAULT_MAX_PODS;
use crate::tags;

/// Provider ID scheme.
pub const PROVIDER_ID_PREFIX: &str = "cloudstack://";
/// Annotation: the template the VM booted (drift).
pub const TEMPLATE_ANNOTATION: &str = "cloudstack.capstan.dev/template-id";
/// Annotation: the VM's network (drift).
pub const NETWORK_ANNOTATION: &str = "cloudstack.capstan.dev/network-id";
/// Annotation: the service offering (drift).
pub const OFFERING_ANNOTATION: &str = "cloudstack.capstan.dev/service-offering-id";
/// Annotation: the zone UUID.
pub const ZONE_ANNOTATION: &str = "cloudstack.capstan.dev/zone-id";
/// Annotation: the NodeClass parameters hash at launch (drift).
pub const HASH_ANNOTATION: &str = tags::PARAMETERS_HASH;
/// Prefix of this provider's annotations.
const ANNOTATION_PREFIX: &str = "cloudstack.capstan.dev/";

/// `cloudstack://<zone-id>/<vm-id>`.
pub fn provider_id(zone_id: &str, vm_id: &str) -> String {
    format!("{PROVIDER_ID_PREFIX}{zone_id}/{vm_id}")
}

/// `(zone UUID, VM UUID)` of a CloudStack provider ID.
pub fn parse_provider_id(id: &str) -> Option<(&str, &str)> {
    let (zone, vm) = id.strip_prefix(PROVIDER_ID_PREFIX)?.split_once('/')?;
    (!zone.is_empty() && !vm.is_empty() && !vm.contains('/')).then_some((zone, vm))
}

/// CloudStack's host name rule: ASCII letters, digits and `-`, 1 to 63 characters, not
/// starting with a digit or `-`, not ending with `-`.
pub fn valid_vm_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && name.as_bytes()[0].is_ascii_alphabetic()
        && !name.ends_with('-')
}

/// The VM (and Node) name for a claim: the claim's name when CloudStack accepts it as a host
/// name, else a deterministic host name made from it (`.` → `-`, `n-` before a leading digit,
/// at most 63 characters).
pub fn vm_name(claim: &str) -> String {
    if valid_vm_name(claim) {
        return claim.to_string();
    }
    let mut name: String = claim
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        name.insert_str(0, "n-");
    }
    name.truncate(63);
    while name.ends_with('-') {
        name.pop();
    }
    name
}

/// What `create` knows about the launch beyond the VM.
#[derive(Debug, Clone, Copy)]
pub struct Launched<'a> {
    /// The instance type.
    pub instance_type: &'a InstanceType,
    /// Kubernetes architecture.
    pub arch: &'a str,
    /// The network.
    pub network_id: &'a str,
}

fn kv(k: &str, v: impl Into<String>) -> KeyValue {
    KeyValue::new(k, v)
}

/// The VM as a claim: labels of what runs, provider ID, image, capacity, creation time, and
/// this provider's annotations. With `launched` (from `create`), capacity and allocatable are
/// the instance type's; without, they are read off the VM.
pub fn to_claim(vm: &VirtualMachine, launched: Option<Launched<'_>>) -> NodeClaim {
    let arch = match launched {
        Some(l) => l.arch.to_string(),
        None => kube_arch(vm.arch.as_deref()),
    };
    let cpu = vm.cpu_number.unwrap_or(0);
    let memory = vm.memory.unwrap_or(0);
    let gpus = vm.gpu_count.unwrap_or(0);
    let mut labels_out = vec![
        kv(labels::INSTANCE_TYPE, vm.service_offering_name.clone()),
        kv(labels::ZONE, vm.zone_name.clone()),
        kv(labels::CAPACITY_TYPE, CAPACITY_TYPE),
        kv(labels::ARCH, arch),
        kv(labels::OS, labels::OS_LINUX),
        kv(labels::HOSTNAME, vm.name.to_ascii_lowercase()),
        kv(CPU_LABEL, cpu.to_string()),
        kv(MEMORY_LABEL, memory.to_string()),
    ];
    if gpus > 0 {
        labels_out.push(kv(GPU_COUNT_LABEL, gpus.to_string()));
    }
    let pool = vm.tag(tags::NODE_POOL).map(str::to_string);
    if let Some(pool) = &pool {
        labels_out.push(kv(labels::NODE_POOL, pool.clone()));
    }
    let mut annotations = vec![
        kv(TEMPLATE_ANNOTATION, vm.template_id.clone()),
        kv(OFFERING_ANNOTATION, vm.service_offering_id.clone()),
        kv(ZONE_ANNOTATION, vm.zone_id.clone()),
    ];
    let network = launched
        .map(|l| l.network_id.to_string())
        .or_else(|| vm.nics.first().map(|n| n.network_id.clone()));
    if let Some(network) = network {
        annotations.push(kv(NETWORK_ANNOTATION, network));
    }
    if let Some(hash) = vm.tag(tags::PARAMETERS_HASH) {
        annotations.push(kv(HASH_ANNOTATION, hash));
    }
    let (capacity, allocatable) = match launched {
        Some(l) => (
            l.instance_type.capacity.to_resources(),
            l.instance_type.allocatable().to_resources(),
        ),
        None => {
            let mut list = ResourceList::new()
                .with(
                    labels::RESOURCE_CPU,
                    Quantity::from_millis(i128::from(cpu) * 1000),
                )
                .with(
                    labels::RESOURCE_MEMORY,
                    Quantity::from_millis((i128::from(memory) << 20) * 1000),
                )
                .with(
                    labels::RESOURCE_PODS,
                    Quantity::from_millis(i128::from(DEFAULT_MAX_PODS) * 1000),
                );
            if gpus > 0 {
                list.insert(
                    "nvidia.com/gpu",
                    Quantity::from_millis(i128::from(gpus) * 1000),
                );
            }
            let resources = list.to_resources();
            (resources.clone(), resources)
        }
    };
    NodeClaim {
        name: vm
            .tag(tags::NODE_CLAIM)
            .map_or_else(|| vm.name.clone(), str::to_string),
        node_pool_name: pool,
        labels: labels_out,
        annotations,
        taints: Vec::new(),
        startup_taints: Vec::new(),
        requirements: Vec::new(),
        requests: Vec::new(),
        provider_id: Some(provider_id(&vm.zone_id, &vm.id)),
        image_id: (!vm.template_id.is_empty()).then(|| vm.template_id.clone()),
        node_name: Some(vm.name.to_ascii_lowercase()),
        capacity,
        allocatable,
        created_at: cloudstack_sign::parse_expires(&vm.created)
            .ok()
            .and_then(|ms| u64::try_from(ms).ok()),
    }
}

/// The claim `create` returns: what the VM says, plus the input claim's own labels (under the
/// launched ones), requirements, requests, taints, and its annotations under the VM's.
pub fn launched_claim(vm: &VirtualMachine, launched: Launched<'_>, input: &NodeClaim) -> NodeClaim {
    let mut out = to_claim(vm, Some(launched));
    let mut labels_out: Vec<KeyValue> = input
        .labels
        .iter()
        .filter(|l| !out.labels.iter().any(|o| o.key == l.key))
        .cloned()
        .collect();
    labels_out.append(&mut out.labels);
    let mut annotations: Vec<KeyValue> = input
        .annotations
        .iter()
        .filter(|a| !(a.key.starts_with(ANNOTATION_PREFIX) || a.key == HASH_ANNOTATION))
        .cloned()
        .collect();
    annotations.append(&mut out.annotations);
    NodeClaim {
        name: input.name.clone(),
        node_pool_name: out.node_pool_name.or_else(|| input.node_pool_name.clone()),
        labels: labels_out,
        annotations,
        taints: input.taints.clone(),
        startup_taints: input.startup_taints.clone(),
        requirements: input.requirements.clone(),
        requests: input.requests.clone(),
        ..out
    }
}

/// The requests of a claim, for logs.
pub fn describe_requests(requests: &[Resource]) -> String {
    requests
        .iter()
        .map(|r| format!("{}={}", r.name, r.quantity))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::tests::resolved;
    use proptest::prelude::*;

    fn vm() -> VirtualMachine {
        serde_json::from_value(serde_json::json!({
            "id": "vm-1", "name": "default-abc12", "state": "Running", "zoneid": "za-id",
            "zonename": "zone-a", "templateid": "t-new", "serviceofferingid": "o-small",
            "serviceofferingname": "small", "cpunumber": 1, "memory": 1024,
            "created": "2026-01-02T03:04:05+0000", "arch": "x86_64",
            "nic": [{"networkid": "n-a"}],
            "tags": [{"key": "karpenter.sh/nodeclaim", "value": "default-abc12"},
                     {"key": "karpenter.sh/nodepool", "value": "default"},
                     {"key": "cloudstack.capstan.dev/parameters-hash", "value": "h1"}]
        }))
        .unwrap()
    }

    #[test]
    fn provider_ids_round_trip() {
        assert_eq!(provider_id("z", "v"), "cloudstack://z/v");
        assert_eq!(parse_provider_id("cloudstack://z/v"), Some(("z", "v")));
        for bad in [
            "cloudstack://z",
            "cloudstack:///v",
            "cloudstack://z/",
            "kwok://n",
            "cloudstack://z/v/w",
        ] {
            assert_eq!(parse_provider_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn vm_names() {
        assert_eq!(vm_name("default-abc12"), "default-abc12");
        assert_eq!(vm_name("1pool-x"), "n-1pool-x");
        assert_eq!(vm_name("pool.example-x"), "pool-example-x");
        assert_eq!(vm_name(&"a".repeat(80)).len(), 63);
    }

    proptest! {
        #[test]
        fn vm_names_are_always_valid_and_stable(name in "[a-z0-9][a-z0-9.-]{0,90}") {
            let n = vm_name(&name);
            prop_assert!(valid_vm_name(&n), "{n}");
            prop_assert_eq!(vm_name(&name), n.clone());
            if valid_vm_name(&name) {
                prop_assert_eq!(n, name);
            }
        }
    }

    #[test]
    fn claims_from_vms() {
        let c = to_claim(&vm(), None);
        assert_eq!(c.name, "default-abc12");
        assert_eq!(c.provider_id.as_deref(), Some("cloudstack://za-id/vm-1"));
        assert_eq!(c.image_id.as_deref(), Some("t-new"));
        assert_eq!(c.node_pool_name.as_deref(), Some("default"));
        let label = |k: &str| capstan_provider_sdk::lookup(&c.labels, k).map(str::to_string);
        assert_eq!(label(labels::INSTANCE_TYPE).as_deref(), Some("small"));
        assert_eq!(label(labels::ZONE).as_deref(), Some("zone-a"));
        assert_eq!(label(labels::ARCH).as_deref(), Some("amd64"));
        assert_eq!(label(labels::CAPACITY_TYPE).as_deref(), Some("on-demand"));
        let ann = |k: &str| capstan_provider_sdk::lookup(&c.annotations, k).map(str::to_string);
        assert_eq!(ann(NETWORK_ANNOTATION).as_deref(), Some("n-a"));
        assert_eq!(ann(HASH_ANNOTATION).as_deref(), Some("h1"));
        assert_eq!(c.created_at, Some(1_767_323_045_000));
        let capacity = ResourceList::from_resources(&c.capacity).unwrap();
        assert_eq!(capacity.get("memory").value(), 1 << 30);
        assert_eq!(capacity.get("cpu").value(), 1);

        let res = resolved();
        let input = NodeClaim {
            name: "default-abc12".into(),
            annotations: vec![
                KeyValue::new("keep", "me"),
                KeyValue::new(HASH_ANNOTATION, "stale"),
            ],
            labels: vec![
                KeyValue::new("team", "a"),
                KeyValue::new(labels::ZONE, "wrong"),
            ],
            requests: vec![Resource::new("cpu", "100m")],
            ..to_claim(&vm(), None)
        };
        let out = launched_claim(
            &vm(),
            Launched {
                instance_type: &res.types[0],
                arch: "amd64",
                network_id: "n-a",
            },
            &input,
        );
        assert_eq!(capstan_provider_sdk::lookup(&out.labels, "team"), Some("a"));
        assert_eq!(
            capstan_provider_sdk::lookup(&out.labels, labels::ZONE),
            Some("zone-a")
        );
        assert_eq!(
            out.labels.iter().filter(|l| l.key == labels::ZONE).count(),
            1
        );
        assert_eq!(
            capstan_provider_sdk::lookup(&out.annotations, "keep"),
            Some("me")
        );
        assert_eq!(
            capstan_provider_sdk::lookup(&out.annotations, HASH_ANNOTATION),
            Some("h1")
        );
        assert_eq!(out.requests, input.requests);
        let allocatable = ResourceList::from_resources(&out.allocatable).unwrap();
        assert_eq!(allocatable.get("cpu").millis(), 900);
    }
}
