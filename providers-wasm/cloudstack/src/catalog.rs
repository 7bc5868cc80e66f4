//! From what the cloud has (zones, service offerings, templates, networks) and the NodeClass to
//! the instance types: every selected service offering is an instance type, offered in each
//! zone (of the NodeClass's zones, in its order) that has the offering, a selected template and
//! a selected network. A zone's template is chosen per architecture (the newest selected one),
//! its network is the first the terms select.

use std::collections::{BTreeMap, BTreeSet};

use capstan_provider_sdk::model;
use capstan_provider_sdk::{
    Catalog, CatalogBuilder, Operator, ProviderError, Quantity, Requirements, ResourceList, labels,
};
use serde::{Deserialize, Serialize};

use crate::api::model::{DiskOffering, Network, ServiceOffering, Template, Zone, kube_arch};
use crate::params::Parameters;
use crate::selector;

/// Label: vCPUs of the offering.
pub const CPU_LABEL: &str = "cloudstack.capstan.dev/instance-cpu";
/// Label: memory of the offering in MiB.
pub const MEMORY_LABEL: &str = "cloudstack.capstan.dev/instance-memory";
/// Label: GPUs of the offering (only on GPU offerings).
pub const GPU_COUNT_LABEL: &str = "cloudstack.capstan.dev/instance-gpu-count";
/// The only capacity type CloudStack has.
pub const CAPACITY_TYPE: &str = labels::CAPACITY_TYPE_ON_DEMAND;
/// Ephemeral storage reported when `rootDiskSize` is not set, in GiB.
pub const DEFAULT_EPHEMERAL_GIB: u64 = 20;

/// What the cloud has, as listed once per call (or cached).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cloud {
    /// Zones.
    pub zones: Vec<Zone>,
    /// Service offerings.
    pub service_offerings: Vec<ServiceOffering>,
    /// Templates (one entry per zone).
    pub templates: Vec<Template>,
    /// Networks.
    pub networks: Vec<Network>,
    /// Disk offerings (listed only when the NodeClass names one).
    #[serde(default)]
    pub disk_offerings: Vec<DiskOffering>,
}

/// A template chosen for one zone and architecture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateChoice {
    /// UUID.
    pub id: String,
    /// Name.
    pub name: String,
}

/// A zone nodes can be launched in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Zone UUID.
    pub zone_id: String,
    /// Zone name (the node's `topology.kubernetes.io/zone`).
    pub zone_name: String,
    /// Template per Kubernetes architecture.
    pub templates: BTreeMap<String, TemplateChoice>,
    /// The network.
    pub network_id: String,
}

/// An instance type: a service offering.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceType {
    /// Offering UUID.
    pub offering_id: String,
    /// Offering name (the instance type's name).
    pub name: String,
    /// vCPUs.
    pub cpu: u64,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// GPUs.
    pub gpus: u64,
    /// The extended resource GPUs are counted as (`nvidia.com/gpu`, `amd.com/gpu`).
    pub gpu_resource: &'static str,
    /// Price per hour.
    pub price: f64,
    /// Indices into [`Resolved::placements`] where it is offered, in preference order.
    pub zones: Vec<usize>,
    /// Capacity.
    pub capacity: ResourceList,
    /// Kube-reserved overhead.
    pub kube_reserved: ResourceList,
}

/// The NodeClass resolved against the cloud.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// Zones nodes can be launched in, in preference order.
    pub placements: Vec<Placement>,
    /// Instance types.
    pub types: Vec<InstanceType>,
    /// The data disk offering's UUID, if the NodeClass names one.
    pub disk_offering_id: Option<String>,
}

/// The offering `(offering UUID, zone UUID)`: known to have no capacity now.
pub type Unavailable = BTreeSet<(String, String)>;

fn not_ready(message: String) -> ProviderError {
    ProviderError::NodeClassNotReady(message)
}

/// The GPU resource name for a card.
fn gpu_resource(card: Option<&str>) -> &'static str {
    let card = card.unwrap_or_default().to_ascii_lowercase();
    if ["amd", "radeon", "instinct"]
        .iter()
        .any(|v| card.contains(v))
    {
        "amd.com/gpu"
    } else {
        "nvidia.com/gpu"
    }
}

/// Resolves the NodeClass against the cloud. A selector or zone that finds nothing makes the
/// NodeClass not ready, naming what is missing.
pub fn resolve(params: &Parameters, cloud: &Cloud) -> Result<Resolved, ProviderError> {
    let wanted = params.zone_names();
    let zones: Vec<&Zone> = if wanted.is_empty() {
        cloud.zones.iter().filter(|z| z.enabled()).collect()
    } else {
        let mut out = Vec::new();
        for name in &wanted {
            let zone = cloud
                .zones
                .iter()
                .find(|z| z.id == *name || z.name == *name)
                .or_else(|| {
                    cloud
                        .zones
                        .iter()
                        .find(|z| z.name.eq_ignore_ascii_case(name))
                });
            match zone {
                Some(z) if z.enabled() => out.push(z),
                // A disabled zone is skipped; it comes back when enabled.
                Some(_) => {}
                None => {
                    let known: Vec<&str> = cloud.zones.iter().map(|z| z.name.as_str()).collect();
                    return Err(not_ready(format!(
                        "zone {name:?} not found; CloudStack has zones [{}]",
                        known.join(", ")
                    )));
                }
            }
        }
        out
    };
    if zones.is_empty() {
        return Err(not_ready("no enabled zone to launch in".to_string()));
    }

    let mut placements = Vec::new();
    let mut missing = Vec::new();
    for zone in zones {
        let network = cloud
            .networks
            .iter()
            .filter(|n| n.zone_id == zone.id)
            .filter_map(|n| {
                selector::network_term(&params.network_selector_terms, n).map(|i| (i, n))
            })
            .min_by(|(i, a), (j, b)| {
                i.cmp(j)
                    .then_with(|| a.name.cmp(&b.name))
                    .then_with(|| a.id.cmp(&b.id))
            });
        let mut templates: BTreeMap<String, &Template> = BTreeMap::new();
        for t in cloud.templates.iter().filter(|t| {
            t.zone_id == zone.id
                && t.ready
                && selector::template_selected(&params.template_selector_terms, t)
        }) {
            let arch = kube_arch(t.arch.as_deref());
            let newer = templates.get(&arch).is_none_or(|cur| {
                (t.created.as_str(), std::cmp::Reverse(t.name.as_str()))
                    > (cur.created.as_str(), std::cmp::Reverse(cur.name.as_str()))
            });
            if newer {
                templates.insert(arch, t);
            }
        }
        match (network, templates.is_empty()) {
            (Some((_, network)), false) => placements.push(Placement {
                zone_id: zone.id.clone(),
                zone_name: zone.name.clone(),
                templates: templates
                    .into_iter()
                    .map(|(arch, t)| {
                        (
                            arch,
                            TemplateChoice {
                                id: t.id.clone(),
                                name: t.name.clone(),
                            },
                        )
                    })
                    .collect(),
                network_id: network.id.clone(),
            }),
            (None, _) => missing.push(format!(
                "networkSelectorTerms select no network in zone {}",
                zone.name
            )),
            (_, true) => missing.push(format!(
                "templateSelectorTerms select no ready template in zone {}",
                zone.name
            )),
        }
    }
    if placements.is_empty() {
        return Err(not_ready(missing.join("; ")));
    }

    let mut types: Vec<InstanceType> = Vec::new();
    let mut names = BTreeSet::new();
    for o in &cloud.service_offerings {
        if o.customized || !selector::offering_selected(&params.service_offering_selector_terms, o)
        {
            continue;
        }
        let (Some(cpu), Some(memory_mib)) = (o.cpu_number, o.memory) else {
            continue;
        };
        if cpu == 0 || memory_mib == 0 || !names.insert(o.name.clone()) {
            continue;
        }
        let zones: Vec<usize> = placements
            .iter()
            .enumerate()
            .filter(|(_, p)| o.in_zone(&p.zone_id))
            .map(|(i, _)| i)
            .collect();
        if zones.is_empty() {
            continue;
        }
        let gpus = o.gpus();
        let gpu_resource = gpu_resource(o.gpu_card_name.as_deref());
        let memory_bytes = i128::from(memory_mib) << 20;
        let disk_gib = params.root_disk_size.unwrap_or(DEFAULT_EPHEMERAL_GIB);
        let mut capacity = ResourceList::new()
            .with(
                labels::RESOURCE_CPU,
                Quantity::from_millis(i128::from(cpu) * 1000),
            )
            .with(
                labels::RESOURCE_MEMORY,
                Quantity::from_millis(memory_bytes * 1000),
            )
            .with(
                labels::RESOURCE_PODS,
                Quantity::from_millis(i128::from(params.max_pods()) * 1000),
            )
            .with(
                labels::RESOURCE_EPHEMERAL_STORAGE,
                Quantity::from_millis((i128::from(disk_gib) << 30) * 1000),
            );
        if gpus > 0 {
            capacity.insert(gpu_resource, Quantity::from_millis(i128::from(gpus) * 1000));
        }
        // The kubelet and system daemons: 100m of CPU, 64 MiB and 5% of memory.
        let reserved_bytes = (64i128 << 20) + memory_bytes / 20;
        let kube_reserved = ResourceList::new()
            .with(labels::RESOURCE_CPU, Quantity::from_millis(100))
            .with(
                labels::RESOURCE_MEMORY,
                Quantity::from_millis(reserved_bytes * 1000),
            );
        types.push(InstanceType {
            offering_id: o.id.clone(),
            name: o.name.clone(),
            cpu,
            memory_mib,
            gpus,
            gpu_resource,
            price: params.pricing.price(&o.name, cpu, memory_mib, gpus),
            zones,
            capacity,
            kube_reserved,
        });
    }
    if types.is_empty() {
        let zones: Vec<&str> = placements.iter().map(|p| p.zone_name.as_str()).collect();
        return Err(not_ready(format!(
            "serviceOfferingSelectorTerms select no fixed-size service offering in zones [{}]",
            zones.join(", ")
        )));
    }

    let disk_offering_id = match &params.disk_offering {
        None => None,
        Some(want) => Some(
            cloud
                .disk_offerings
                .iter()
                .find(|d| d.id == *want || d.name == *want)
                .map(|d| d.id.clone())
                .ok_or_else(|| not_ready(format!("diskOffering {want:?} not found")))?,
        ),
    };
    Ok(Resolved {
        placements,
        types,
        disk_offering_id,
    })
}

impl InstanceType {
    /// Capacity minus overhead.
    pub fn allocatable(&self) -> ResourceList {
        self.capacity.saturating_sub(&self.kube_reserved)
    }

    /// Labels every node of this type carries, whatever its zone and architecture.
    pub fn labels(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![
            (labels::INSTANCE_TYPE, self.name.clone()),
            (labels::OS, labels::OS_LINUX.to_string()),
            (labels::CAPACITY_TYPE, CAPACITY_TYPE.to_string()),
            (CPU_LABEL, self.cpu.to_string()),
            (MEMORY_LABEL, self.memory_mib.to_string()),
        ];
        if self.gpus > 0 {
            out.push((GPU_COUNT_LABEL, self.gpus.to_string()));
        }
        out
    }

    /// The requirements a node of this type launched in `placement` with `arch` meets.
    pub fn requirements_at(&self, placement: &Placement, arch: &str) -> Requirements {
        let mut reqs = Requirements::new();
        for (k, v) in self.labels() {
            reqs.add(model::Requirement::in_(k, [v]));
        }
        reqs.add(model::Requirement::in_(
            labels::ZONE,
            [placement.zone_name.as_str()],
        ));
        reqs.add(model::Requirement::in_(labels::ARCH, [arch]));
        reqs
    }
}

/// The WIT catalog: one instance type per offering, one offering per zone (on-demand), the
/// architectures of every zone's templates (and per offering, when a zone has fewer).
pub fn to_catalog(resolved: &Resolved, unavailable: &Unavailable) -> Catalog {
    let mut catalog = CatalogBuilder::with_capacity(resolved.types.len());
    for t in &resolved.types {
        let all_arches: BTreeSet<&str> = t
            .zones
            .iter()
            .flat_map(|&i| resolved.placements[i].templates.keys().map(String::as_str))
            .collect();
        let arches: Vec<&str> = all_arches.iter().copied().collect();
        let zones: Vec<&str> = t
            .zones
            .iter()
            .map(|&i| resolved.placements[i].zone_name.as_str())
            .collect();
        let labels = t.labels();
        let mut b = catalog.instance_type(&t.name);
        for (k, v) in &labels {
            b.requirement_in(k, &[v.as_str()]);
        }
        b.requirement_in(labels::ARCH, &arches)
            .requirement_in(labels::ZONE, &zones);
        for &i in &t.zones {
            let p = &resolved.placements[i];
            let available = !unavailable.contains(&(t.offering_id.clone(), p.zone_id.clone()));
            b.offering(&p.zone_name, CAPACITY_TYPE, t.price, available);
            if p.templates.len() < all_arches.len() {
                let here: Vec<&str> = p.templates.keys().map(String::as_str).collect();
                b.offering_requirement(labels::ARCH, Operator::In, &here, None);
            }
        }
        b.capacity_list(&t.capacity)
            .kube_reserved_list(&t.kube_reserved);
    }
    catalog.finish().into()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::api::model::Tag;
    use capstan_provider_sdk::catalog::expand;

    pub(crate) const PARAMS: &str = r#"{"zones":["zone-a","zone-b"],
        "serviceOfferingSelectorTerms":[{"name":"small"},{"name":"medium"},{"name":"large"},{"name":"gpu-a10"}],
        "templateSelectorTerms":[{"tags":{"capstan":"node-image"}}],
        "networkSelectorTerms":[{"tags":{"capstan":"nodes"}}]}"#;

    fn tag(k: &str, v: &str) -> Tag {
        Tag {
            key: k.into(),
            value: v.into(),
        }
    }

    fn offering(id: &str, name: &str, cpu: u64, mem: u64, zones: Option<&str>) -> ServiceOffering {
        serde_json::from_value(serde_json::json!({
            "id": id, "name": name, "cpunumber": cpu, "memory": mem, "zoneid": zones
        }))
        .unwrap()
    }

    fn template(id: &str, zone: &str, arch: &str, created: &str, tags: Vec<Tag>) -> Template {
        Template {
            id: id.into(),
            name: format!("tpl-{id}"),
            os_type_name: "Ubuntu 24.04 LTS".into(),
            zone_id: zone.into(),
            arch: Some(arch.into()),
            ready: true,
            created: created.into(),
            tags,
        }
    }

    /// Shaped like the emulator's sample cloud.
    pub(crate) fn cloud() -> Cloud {
        let image = || vec![tag("capstan", "node-image")];
        let mut gpu = offering("o-gpu", "gpu-a10", 8, 65536, Some("za-id"));
        gpu.gpu_count = Some(1);
        gpu.gpu_card_name = Some("NVIDIA A10".into());
        gpu.zone_ids = Some("zb-id".into());
        Cloud {
            zones: vec![
                serde_json::from_value(serde_json::json!({"id": "za-id", "name": "zone-a"}))
                    .unwrap(),
                serde_json::from_value(serde_json::json!({"id": "zb-id", "name": "zone-b"}))
                    .unwrap(),
            ],
            service_offerings: vec![
                offering("o-small", "small", 1, 1024, None),
                offering("o-medium", "medium", 2, 4096, None),
                offering("o-large", "large", 8, 32768, Some("za-id")),
                gpu,
                offering("o-other", "unselected", 1, 512, None),
            ],
            templates: vec![
                template(
                    "t-old",
                    "za-id",
                    "x86_64",
                    "2024-01-01T00:00:00+0000",
                    image(),
                ),
                template(
                    "t-new",
                    "za-id",
                    "x86_64",
                    "2025-01-01T00:00:00+0000",
                    image(),
                ),
                template(
                    "t-new",
                    "zb-id",
                    "x86_64",
                    "2025-01-01T00:00:00+0000",
                    image(),
                ),
                template(
                    "t-arm",
                    "za-id",
                    "aarch64",
                    "2025-01-01T00:00:00+0000",
                    image(),
                ),
                template(
                    "t-untagged",
                    "zb-id",
                    "x86_64",
                    "2026-01-01T00:00:00+0000",
                    vec![],
                ),
            ],
            networks: vec![
                Network {
                    id: "n-a".into(),
                    name: "net-a".into(),
                    zone_id: "za-id".into(),
                    tags: vec![tag("capstan", "nodes")],
                },
                Network {
                    id: "n-b".into(),
                    name: "net-b".into(),
                    zone_id: "zb-id".into(),
                    tags: vec![tag("capstan", "nodes")],
                },
                Network {
                    id: "n-x".into(),
                    name: "aaa".into(),
                    zone_id: "za-id".into(),
                    tags: vec![],
                },
            ],
            disk_offerings: vec![],
        }
    }

    pub(crate) fn resolved() -> Resolved {
        resolve(&Parameters::parse(PARAMS).unwrap(), &cloud()).unwrap()
    }

    #[test]
    fn resolves_zones_templates_and_networks() {
        let r = resolved();
        assert_eq!(r.placements.len(), 2);
        let a = &r.placements[0];
        assert_eq!(
            (a.zone_name.as_str(), a.network_id.as_str()),
            ("zone-a", "n-a")
        );
        assert_eq!(a.templates["amd64"].id, "t-new", "newest wins");
        assert_eq!(a.templates["arm64"].id, "t-arm");
        let b = &r.placements[1];
        assert_eq!(b.templates.len(), 1);
        assert_eq!(
            b.templates["amd64"].id, "t-new",
            "untagged template ignored"
        );
        let names: Vec<&str> = r.types.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, vec!["small", "medium", "large", "gpu-a10"]);
        assert_eq!(r.types[2].zones, vec![0]);
        assert_eq!(r.types[3].zones, vec![1]);
        assert_eq!(r.types[3].capacity.get("nvidia.com/gpu").value(), 1);
        assert_eq!(r.types[1].capacity.get("memory").value(), 4 << 30);
        assert_eq!(r.types[1].capacity.get("pods").value(), 110);
    }

    #[test]
    fn zone_order_follows_the_node_class() {
        let p =
            Parameters::parse(&PARAMS.replace(r#"["zone-a","zone-b"]"#, r#"["zone-b","za-id"]"#))
                .unwrap();
        let r = resolve(&p, &cloud()).unwrap();
        assert_eq!(r.placements[0].zone_name, "zone-b");
        assert_eq!(r.placements[1].zone_name, "zone-a");
    }

    #[test]
    fn selectors_that_find_nothing_are_not_ready() {
        let not_ready = |params: &str| match resolve(&Parameters::parse(params).unwrap(), &cloud())
        {
            Err(ProviderError::NodeClassNotReady(m)) => m,
            other => panic!("{other:?}"),
        };
        let m = not_ready(&PARAMS.replace(r#""zone-a","zone-b""#, r#""zone-q""#));
        assert!(
            m.contains("zone \"zone-q\" not found") && m.contains("zone-a, zone-b"),
            "{m}"
        );
        let m = not_ready(&PARAMS.replace(r#"{"tags":{"capstan":"nodes"}}"#, r#"{"name":"nope"}"#));
        assert!(
            m.contains("networkSelectorTerms select no network in zone zone-a"),
            "{m}"
        );
        let m = not_ready(&PARAMS.replace(
            r#"{"tags":{"capstan":"node-image"}}"#,
            r#"{"osType":"Windows"}"#,
        ));
        assert!(m.contains("templateSelectorTerms"), "{m}");
        let m = not_ready(&PARAMS.replace(
            r#"{"name":"small"},{"name":"medium"},{"name":"large"},{"name":"gpu-a10"}"#,
            r#"{"name":"xl"}"#,
        ));
        assert!(m.contains("serviceOfferingSelectorTerms"), "{m}");
        let with_disk = PARAMS.replacen('{', r#"{"diskOffering":"data-50","#, 1);
        let m = not_ready(&with_disk);
        assert!(m.contains("diskOffering"), "{m}");
        let mut c = cloud();
        c.disk_offerings.push(DiskOffering {
            id: "d50".into(),
            name: "data-50".into(),
            customized: false,
        });
        let r = resolve(&Parameters::parse(&with_disk).unwrap(), &c).unwrap();
        assert_eq!(r.disk_offering_id.as_deref(), Some("d50"));
    }

    #[test]
    fn catalog_has_offerings_per_zone_and_arches() {
        let mut unavailable = Unavailable::new();
        unavailable.insert(("o-small".into(), "za-id".into()));
        let c = to_catalog(&resolved(), &unavailable);
        let all = expand(&c).unwrap();
        let small = &all[0];
        assert_eq!(small.name, "small");
        assert_eq!(small.offerings.len(), 2);
        assert!(!small.offerings[0].available && small.offerings[1].available);
        assert_eq!(small.offerings[0].zone, "zone-a");
        assert!(small.offerings[0].requirements.is_empty());
        assert_eq!(
            small.offerings[1].requirements.len(),
            1,
            "zone-b has amd64 only"
        );
        assert_eq!(small.offerings[1].requirements[0].values, vec!["amd64"]);
        let arch = small.requirement(labels::ARCH).unwrap();
        assert_eq!(arch.values, vec!["amd64", "arm64"]);
        assert_eq!(
            small.requirement(labels::CAPACITY_TYPE).unwrap().values,
            vec!["on-demand"]
        );
        assert_eq!(small.requirement(CPU_LABEL).unwrap().values, vec!["1"]);
        let gpu = all.iter().find(|t| t.name == "gpu-a10").unwrap();
        assert_eq!(gpu.requirement(GPU_COUNT_LABEL).unwrap().values, vec!["1"]);
        assert_eq!(gpu.offerings.len(), 1);
        assert!(gpu.offerings[0].price > small.offerings[0].price);
        assert!(small.kube_reserved.get("memory").value() > 64 << 20);
    }
}
