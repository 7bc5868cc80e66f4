//! What the emulated cloud offers: zones, service offerings, templates, networks, disk offerings
//! and SSH key pairs. Fixed at start ([`Catalog::sample`] or a JSON file for the binary) and
//! changeable through the handle (a changed template or offering is how tests drive drift).

use serde::{Deserialize, Serialize};

/// A resource tag (`key`, `value`), as CloudStack's `tags` arrays and `tags[n].key` parameters
/// carry them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tag {
    /// Key.
    pub key: String,
    /// Value.
    pub value: String,
}

impl Tag {
    /// A tag.
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
        }
    }
}

/// A zone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Zone {
    /// UUID.
    pub id: String,
    /// Name (the Node's `topology.kubernetes.io/zone`).
    pub name: String,
    /// How many VMs (Starting or Running) fit; `None` is unlimited. A deploy beyond it fails
    /// asynchronously with insufficient capacity (533).
    #[serde(default)]
    pub capacity: Option<u32>,
    /// Resource tags.
    #[serde(default)]
    pub tags: Vec<Tag>,
}

/// A GPU a service offering attaches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Gpu {
    /// The card (CloudStack's `gpucardname`; `pciDevice` in `serviceofferingdetails`).
    pub card_name: String,
    /// The vGPU profile (`vgpuprofilename`; `vgpuType` in `serviceofferingdetails`).
    pub vgpu_profile: String,
    /// How many (`gpucount`; the Node's `nvidia.com/gpu`).
    pub count: u32,
}

/// A compute (service) offering.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceOffering {
    /// UUID.
    pub id: String,
    /// Name (the Node's `node.kubernetes.io/instance-type`).
    pub name: String,
    /// Display text.
    pub display_text: String,
    /// vCPUs.
    pub cpu_number: u32,
    /// CPU speed in MHz.
    pub cpu_speed: u32,
    /// Memory in MiB.
    pub memory: u64,
    /// GPU, if the offering has one.
    #[serde(default)]
    pub gpu: Option<Gpu>,
    /// Host tags (`hosttags`, comma-separated).
    #[serde(default)]
    pub host_tags: Option<String>,
    /// Storage tags (CloudStack's `tags` string of an offering).
    #[serde(default)]
    pub storage_tags: Option<String>,
    /// Details (`serviceofferingdetails`; what an offering selector term's `tags` match).
    #[serde(default)]
    pub details: std::collections::BTreeMap<String, String>,
    /// Zones it is offered in; empty is every zone.
    #[serde(default)]
    pub zone_ids: Vec<String>,
}

/// A template (image).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Template {
    /// UUID.
    pub id: String,
    /// Name.
    pub name: String,
    /// Display text.
    pub display_text: String,
    /// OS type UUID (`ostypeid`).
    pub os_type_id: String,
    /// OS type name (`ostypename`), e.g. `Ubuntu 24.04 LTS`.
    pub os_type_name: String,
    /// CloudStack's `arch`: `x86_64` or `aarch64`.
    pub arch: String,
    /// Featured (listed by `templatefilter=featured`).
    #[serde(default)]
    pub featured: bool,
    /// Public (listed by `executable` and `community`); otherwise the account's own (`self`).
    #[serde(default)]
    pub public: bool,
    /// Zones it is in; a template is listed once per zone, as CloudStack does.
    pub zone_ids: Vec<String>,
    /// Size in bytes.
    #[serde(default)]
    pub size: u64,
    /// Resource tags.
    #[serde(default)]
    pub tags: Vec<Tag>,
}

/// A guest network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Network {
    /// UUID.
    pub id: String,
    /// Name.
    pub name: String,
    /// Zone UUID.
    pub zone_id: String,
    /// `Isolated` or `Shared`.
    pub kind: String,
    /// CIDR, e.g. `10.1.0.0/24`: VMs get addresses from it.
    pub cidr: String,
    /// Resource tags.
    #[serde(default)]
    pub tags: Vec<Tag>,
}

/// A disk offering.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiskOffering {
    /// UUID.
    pub id: String,
    /// Name.
    pub name: String,
    /// Size in GiB (0 when customized).
    pub disk_size: u64,
    /// Whether the size is chosen at deploy time.
    #[serde(default)]
    pub customized: bool,
    /// Storage tags.
    #[serde(default)]
    pub storage_tags: Option<String>,
}

/// An SSH key pair registered with the account.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SshKeyPair {
    /// Name (`keypair` at deploy).
    pub name: String,
    /// Fingerprint.
    pub fingerprint: String,
}

/// Everything the cloud offers.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Catalog {
    /// Zones.
    pub zones: Vec<Zone>,
    /// Service offerings.
    pub service_offerings: Vec<ServiceOffering>,
    /// Templates.
    pub templates: Vec<Template>,
    /// Networks.
    pub networks: Vec<Network>,
    /// Disk offerings.
    pub disk_offerings: Vec<DiskOffering>,
    /// SSH key pairs.
    pub ssh_key_pairs: Vec<SshKeyPair>,
}

/// UUIDs of the sample catalog, for tests.
pub mod sample {
    /// Zone `zone-a`.
    pub const ZONE_A: &str = "a1b2c3d4-0000-4000-8000-00000000000a";
    /// Zone `zone-b`.
    pub const ZONE_B: &str = "a1b2c3d4-0000-4000-8000-00000000000b";
    /// Offering `small` (1 vCPU, 1 GiB), every zone.
    pub const SMALL: &str = "5e000000-0000-4000-8000-000000000001";
    /// Offering `medium` (2 vCPU, 4 GiB), every zone.
    pub const MEDIUM: &str = "5e000000-0000-4000-8000-000000000002";
    /// Offering `large` (8 vCPU, 32 GiB), zone-a only.
    pub const LARGE: &str = "5e000000-0000-4000-8000-000000000003";
    /// Offering `gpu-a10` (8 vCPU, 64 GiB, 1 GPU), zone-b only.
    pub const GPU: &str = "5e000000-0000-4000-8000-000000000004";
    /// Template `ubuntu-24.04-kube` (x86_64), both zones, tagged `capstan=node-image`.
    pub const UBUNTU: &str = "7e000000-0000-4000-8000-000000000001";
    /// Template `ubuntu-24.04-kube-arm64` (aarch64), zone-a only.
    pub const UBUNTU_ARM: &str = "7e000000-0000-4000-8000-000000000002";
    /// Network `net-a` in zone-a, tagged `capstan=nodes`.
    pub const NET_A: &str = "4e000000-0000-4000-8000-00000000000a";
    /// Network `net-b` in zone-b, tagged `capstan=nodes`.
    pub const NET_B: &str = "4e000000-0000-4000-8000-00000000000b";
    /// Disk offering `data-50` (50 GiB).
    pub const DISK_50: &str = "d1000000-0000-4000-8000-000000000050";
    /// Disk offering `custom` (customized size).
    pub const DISK_CUSTOM: &str = "d1000000-0000-4000-8000-0000000000cc";
    /// SSH key pair name.
    pub const KEYPAIR: &str = "capstan";
}

/// UUIDs of the catalog [`Catalog::readme`].
pub mod readme {
    /// Zone `zone-01`.
    pub const ZONE: &str = "a1b2c3d4-0000-4000-8000-000000000001";
    /// Offering `medium` (2 vCPU, 4 GiB).
    pub const MEDIUM: &str = "5e000000-0000-4000-8000-000000000102";
    /// Offering `large` (4 vCPU, 8 GiB).
    pub const LARGE: &str = "5e000000-0000-4000-8000-000000000103";
    /// Template `ubuntu-22.04-kube`, tagged `os=ubuntu`, `version=22.04`.
    pub const UBUNTU: &str = "7e000000-0000-4000-8000-000000000122";
    /// Network `cluster-net`, tagged `karpenter.sh/discovery=my-cluster`.
    pub const NETWORK: &str = "4e000000-0000-4000-8000-000000000001";
}

impl Catalog {
    /// The cloud karpenter-provider-cloudstack's README example expects: zone `zone-01`,
    /// offerings `medium` and `large` with the detail `karpenter.sh/discovery: my-cluster`, an
    /// Ubuntu 22.04 template tagged `os: ubuntu`, `version: "22.04"`, and a network tagged
    /// `karpenter.sh/discovery: my-cluster`; UUIDs in [`readme`].
    pub fn readme() -> Self {
        use readme::*;
        let discovery = || Tag::new("karpenter.sh/discovery", "my-cluster");
        let offering = |id: &str, name: &str, cpu: u32, memory: u64| ServiceOffering {
            id: id.into(),
            name: name.into(),
            display_text: format!("{name}: {cpu} vCPU, {} GiB", memory / 1024),
            cpu_number: cpu,
            cpu_speed: 2000,
            memory,
            gpu: None,
            host_tags: None,
            storage_tags: None,
            details: [("karpenter.sh/discovery".to_owned(), "my-cluster".to_owned())].into(),
            zone_ids: Vec::new(),
        };
        Catalog {
            zones: vec![Zone {
                id: ZONE.into(),
                name: "zone-01".into(),
                capacity: None,
                tags: Vec::new(),
            }],
            service_offerings: vec![
                offering(MEDIUM, "medium", 2, 4096),
                offering(LARGE, "large", 4, 8192),
            ],
            templates: vec![Template {
                id: UBUNTU.into(),
                name: "ubuntu-22.04-kube".into(),
                display_text: "Ubuntu 22.04 with kubelet".into(),
                os_type_id: "05000000-0000-4000-8000-000000002204".into(),
                os_type_name: "Ubuntu 22.04 LTS".into(),
                arch: "x86_64".into(),
                featured: true,
                public: true,
                zone_ids: vec![ZONE.into()],
                size: 10 * 1024 * 1024 * 1024,
                tags: vec![Tag::new("os", "ubuntu"), Tag::new("version", "22.04")],
            }],
            networks: vec![Network {
                id: NETWORK.into(),
                name: "cluster-net".into(),
                zone_id: ZONE.into(),
                kind: "Isolated".into(),
                cidr: "10.2.0.0/24".into(),
                tags: vec![discovery()],
            }],
            disk_offerings: Vec::new(),
            ssh_key_pairs: Vec::new(),
        }
    }

    /// Two zones, four offerings (one GPU), two templates (x86_64 and aarch64), a network per
    /// zone, two disk offerings and a key pair; UUIDs in [`sample`].
    pub fn sample() -> Self {
        use sample::*;
        let offering =
            |id: &str, name: &str, cpu: u32, memory: u64, zones: &[&str]| ServiceOffering {
                id: id.into(),
                name: name.into(),
                display_text: format!("{name}: {cpu} vCPU, {} GiB", memory / 1024),
                cpu_number: cpu,
                cpu_speed: 2000,
                memory,
                gpu: None,
                host_tags: None,
                storage_tags: None,
                details: Default::default(),
                zone_ids: zones.iter().map(|z| z.to_string()).collect(),
            };
        let nodes_tag = vec![Tag::new("capstan", "nodes")];
        Catalog {
            zones: vec![
                Zone {
                    id: ZONE_A.into(),
                    name: "zone-a".into(),
                    capacity: None,
                    tags: Vec::new(),
                },
                Zone {
                    id: ZONE_B.into(),
                    name: "zone-b".into(),
                    capacity: None,
                    tags: Vec::new(),
                },
            ],
            service_offerings: vec![
                offering(SMALL, "small", 1, 1024, &[]),
                offering(MEDIUM, "medium", 2, 4096, &[]),
                ServiceOffering {
                    host_tags: Some("compute".into()),
                    ..offering(LARGE, "large", 8, 32768, &[ZONE_A])
                },
                ServiceOffering {
                    gpu: Some(Gpu {
                        card_name: "NVIDIA A10".into(),
                        vgpu_profile: "passthrough".into(),
                        count: 1,
                    }),
                    host_tags: Some("gpu".into()),
                    ..offering(GPU, "gpu-a10", 8, 65536, &[ZONE_B])
                },
            ],
            templates: vec![
                Template {
                    id: UBUNTU.into(),
                    name: "ubuntu-24.04-kube".into(),
                    display_text: "Ubuntu 24.04 with kubelet".into(),
                    os_type_id: "05000000-0000-4000-8000-000000002404".into(),
                    os_type_name: "Ubuntu 24.04 LTS".into(),
                    arch: "x86_64".into(),
                    featured: true,
                    public: true,
                    zone_ids: vec![ZONE_A.into(), ZONE_B.into()],
                    size: 10 * 1024 * 1024 * 1024,
                    tags: vec![Tag::new("capstan", "node-image")],
                },
                Template {
                    id: UBUNTU_ARM.into(),
                    name: "ubuntu-24.04-kube-arm64".into(),
                    display_text: "Ubuntu 24.04 with kubelet (arm64)".into(),
                    os_type_id: "05000000-0000-4000-8000-000000002404".into(),
                    os_type_name: "Ubuntu 24.04 LTS".into(),
                    arch: "aarch64".into(),
                    featured: false,
                    public: false,
                    zone_ids: vec![ZONE_A.into()],
                    size: 10 * 1024 * 1024 * 1024,
                    tags: vec![Tag::new("capstan", "node-image")],
                },
            ],
            networks: vec![
                Network {
                    id: NET_A.into(),
                    name: "net-a".into(),
                    zone_id: ZONE_A.into(),
                    kind: "Isolated".into(),
                    cidr: "10.1.1.0/24".into(),
                    tags: nodes_tag.clone(),
                },
                Network {
                    id: NET_B.into(),
                    name: "net-b".into(),
                    zone_id: ZONE_B.into(),
                    kind: "Isolated".into(),
                    cidr: "10.1.2.0/24".into(),
                    tags: nodes_tag,
                },
            ],
            disk_offerings: vec![
                DiskOffering {
                    id: DISK_50.into(),
                    name: "data-50".into(),
                    disk_size: 50,
                    customized: false,
                    storage_tags: None,
                },
                DiskOffering {
                    id: DISK_CUSTOM.into(),
                    name: "custom".into(),
                    disk_size: 0,
                    customized: true,
                    storage_tags: None,
                },
            ],
            ssh_key_pairs: vec![SshKeyPair {
                name: KEYPAIR.into(),
                fingerprint: "3a:5c:2f:0e:4b:91:7d:aa:10:be:62:f3:09:c4:58:e7".into(),
            }],
        }
    }

    /// The zone with this UUID.
    pub fn zone(&self, id: &str) -> Option<&Zone> {
        self.zones.iter().find(|z| z.id == id)
    }

    /// The service offering with this UUID.
    pub fn service_offering(&self, id: &str) -> Option<&ServiceOffering> {
        self.service_offerings.iter().find(|o| o.id == id)
    }

    /// The template with this UUID.
    pub fn template(&self, id: &str) -> Option<&Template> {
        self.templates.iter().find(|t| t.id == id)
    }

    /// The network with this UUID.
    pub fn network(&self, id: &str) -> Option<&Network> {
        self.networks.iter().find(|n| n.id == id)
    }

    /// The disk offering with this UUID.
    pub fn disk_offering(&self, id: &str) -> Option<&DiskOffering> {
        self.disk_offerings.iter().find(|d| d.id == id)
    }
}
