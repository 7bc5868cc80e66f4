//! The default catalog, shaped like Karpenter's kwok one: families `c`, `s`, `m` (2, 4 and 8 GiB per
//! vCPU) × 12 sizes (1 to 256 vCPUs) × `amd64`/`arm64`, Linux, offered as spot and on-demand in
//! zones `test-zone-a` to `test-zone-d`.

use capstan_provider_sdk::{Quantity, ResourceList, labels};

use super::{Entry, Offer, quantity};

/// Families and their GiB of memory per vCPU.
const FAMILIES: [(&str, i128); 3] = [("c", 2), ("s", 4), ("m", 8)];
/// vCPUs per size.
const SIZES: [i128; 12] = [1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256];
const ARCHES: [&str; 2] = [labels::ARCH_AMD64, labels::ARCH_ARM64];
const ZONES: [&str; 4] = ["test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d"];
/// Price per vCPU-hour and per GiB-hour, on demand.
const CPU_PRICE: f64 = 0.025;
const GIB_PRICE: f64 = 0.001;
/// Spot costs this fraction of on-demand.
const SPOT_DISCOUNT: f64 = 0.7;
/// Pods per vCPU, up to `MAX_PODS`.
const PODS_PER_CPU: i128 = 16;
const MAX_PODS: i128 = 1024;

/// Every generated instance type.
pub fn entries() -> Vec<Entry> {
    let mut out = Vec::with_capacity(FAMILIES.len() * SIZES.len() * ARCHES.len());
    for (family, gib_per_cpu) in FAMILIES {
        for cpu in SIZES {
            for arch in ARCHES {
                out.push(entry(family, gib_per_cpu, cpu, arch));
            }
        }
    }
    out
}

fn entry(family: &str, gib_per_cpu: i128, cpu: i128, arch: &str) -> Entry {
    let gib = cpu * gib_per_cpu;
    let on_demand = CPU_PRICE * cpu as f64 + GIB_PRICE * gib as f64;
    let mut offers = Vec::with_capacity(ZONES.len() * 2);
    for zone in ZONES {
        for (capacity_type, price) in [
            (labels::CAPACITY_TYPE_SPOT, on_demand * SPOT_DISCOUNT),
            (labels::CAPACITY_TYPE_ON_DEMAND, on_demand),
        ] {
            offers.push(Offer {
                zone: zone.to_string(),
                capacity_type: capacity_type.to_string(),
                price,
                available: true,
            });
        }
    }
    Entry {
        name: format!("{family}-{cpu}x-{arch}-{}", labels::OS_LINUX),
        family: Some(family.to_string()),
        // Karpenter's kwok: the vCPU count (its `parseSizeFromType` for names not shaped like AWS's).
        size: Some(cpu.to_string()),
        arch: arch.to_string(),
        os: vec![labels::OS_LINUX.to_string()],
        capacity: ResourceList::new()
            .with(labels::RESOURCE_CPU, Quantity::from_units(cpu))
            .with(labels::RESOURCE_MEMORY, Quantity::from_bytes(gib << 30))
            .with(
                labels::RESOURCE_PODS,
                Quantity::from_units((cpu * PODS_PER_CPU).min(MAX_PODS)),
            )
            .with(
                labels::RESOURCE_EPHEMERAL_STORAGE,
                Quantity::from_bytes(20 << 30),
            ),
        kube_reserved: ResourceList::new()
            .with(labels::RESOURCE_CPU, quantity("100m"))
            .with(labels::RESOURCE_MEMORY, quantity("10Mi")),
        labels: Default::default(),
        offers,
    }
}
