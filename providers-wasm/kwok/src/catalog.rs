//! The instance types kwok can "launch": a generated default catalog shaped like Karpenter's kwok
//! one, or the NodeClass's own `instanceTypes`, narrowed by the NodeClass filters.

mod custom;
mod generate;

use std::collections::BTreeMap;

use capstan_provider_sdk::model;
use capstan_provider_sdk::{
    Catalog, CatalogBuilder, ProviderError, Quantity, Requirement, Requirements, ResourceList,
    labels,
};

use crate::params::Parameters;

/// Region every kwok node reports.
pub const REGION: &str = "test-region";

/// Label: instance family (`c`, `s`, `m`).
pub const FAMILY_LABEL: &str = "karpenter.kwok.sh/instance-family";
/// Label: instance size (Karpenter's kwok: the vCPU count, `4`, for names not shaped like AWS's).
pub const SIZE_LABEL: &str = "karpenter.kwok.sh/instance-size";
/// Label: vCPUs.
pub const CPU_LABEL: &str = "karpenter.kwok.sh/instance-cpu";
/// Label: memory as a quantity (`16Gi`), as Karpenter's kwok spells it.
pub const MEMORY_LABEL: &str = "karpenter.kwok.sh/instance-memory";

/// One instance type.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Instance type name.
    pub name: String,
    /// Instance family, if it has one.
    pub family: Option<String>,
    /// Instance size, if it has one.
    pub size: Option<String>,
    /// CPU architecture.
    pub arch: String,
    /// Operating systems (the node reports the first).
    pub os: Vec<String>,
    /// Capacity (`cpu`, `memory`, `pods`, `ephemeral-storage`, ...).
    pub capacity: ResourceList,
    /// Kube-reserved overhead.
    pub kube_reserved: ResourceList,
    /// Extra labels of every node of this type.
    pub labels: BTreeMap<String, String>,
    /// Where and how it can be bought.
    pub offers: Vec<Offer>,
}

/// One offering of an instance type.
#[derive(Debug, Clone, PartialEq)]
pub struct Offer {
    /// Zone.
    pub zone: String,
    /// Capacity type.
    pub capacity_type: String,
    /// Price per hour.
    pub price: f64,
    /// Whether it can be launched now.
    pub available: bool,
}

impl Entry {
    /// Whole vCPUs (rounded up).
    pub fn cpu(&self) -> i128 {
        self.capacity.get(labels::RESOURCE_CPU).value()
    }

    /// Capacity minus overhead.
    pub fn allocatable(&self) -> ResourceList {
        self.capacity.saturating_sub(&self.kube_reserved)
    }

    /// Labels every node of this type carries, whatever the offering.
    pub fn node_labels(&self) -> BTreeMap<String, String> {
        let mut out = self.labels.clone();
        let mut set = |k: &str, v: String| {
            out.insert(k.to_string(), v);
        };
        set(labels::INSTANCE_TYPE, self.name.clone());
        set(labels::ARCH, self.arch.clone());
        if let Some(os) = self.os.first() {
            set(labels::OS, os.clone());
        }
        set(labels::REGION, REGION.to_string());
        if let Some(family) = &self.family {
            set(FAMILY_LABEL, family.clone());
        }
        if let Some(size) = &self.size {
            set(SIZE_LABEL, size.clone());
        }
        set(CPU_LABEL, self.cpu().to_string());
        set(
            MEMORY_LABEL,
            self.capacity.get(labels::RESOURCE_MEMORY).to_string(),
        );
        out
    }

    /// Requirements describing every node of this type (zones and capacity types across all its
    /// offerings).
    pub fn requirements(&self) -> Vec<Requirement> {
        let mut zones: Vec<&str> = self.offers.iter().map(|o| o.zone.as_str()).collect();
        zones.sort_unstable();
        zones.dedup();
        let mut capacity_types: Vec<&str> = self
            .offers
            .iter()
            .map(|o| o.capacity_type.as_str())
            .collect();
        capacity_types.sort_unstable();
        capacity_types.dedup();
        let mut out: Vec<Requirement> = self
            .node_labels()
            .into_iter()
            .filter(|(k, _)| k != labels::OS)
            .map(|(k, v)| Requirement::in_(k, [v]))
            .collect();
        out.push(Requirement::in_(labels::OS, self.os.iter().cloned()));
        out.push(Requirement::in_(labels::ZONE, zones));
        out.push(Requirement::in_(labels::CAPACITY_TYPE, capacity_types));
        out
    }

    /// The requirements a node launched from `offer` meets.
    pub fn offer_requirements(&self, offer: &Offer) -> Requirements {
        let mut reqs = Requirements::new();
        for (k, v) in self.node_labels() {
            if k != labels::OS {
                reqs.add(model::Requirement::in_(k, [v]));
            }
        }
        reqs.add(model::Requirement::in_(labels::OS, self.os.iter().cloned()));
        reqs.add(model::Requirement::in_(labels::ZONE, [offer.zone.as_str()]));
        reqs.add(model::Requirement::in_(
            labels::CAPACITY_TYPE,
            [offer.capacity_type.as_str()],
        ));
        reqs
    }

    /// Adds this entry to a WIT catalog.
    pub fn add_to(&self, catalog: &mut CatalogBuilder) {
        let requirements = self.requirements();
        let mut t = catalog.instance_type(&self.name);
        for r in &requirements {
            t.requirement_of(r);
        }
        for o in &self.offers {
            t.offering(&o.zone, &o.capacity_type, o.price, o.available);
        }
        t.capacity_list(&self.capacity)
            .kube_reserved_list(&self.kube_reserved);
    }
}

/// The WIT catalog of `entries`.
pub fn to_catalog(entries: &[Entry]) -> Catalog {
    let mut catalog = CatalogBuilder::with_capacity(entries.len());
    for entry in entries {
        entry.add_to(&mut catalog);
    }
    catalog.finish().into()
}

/// The catalog for these parameters: the generated one or `instanceTypes`, filtered, with
/// `unavailableOfferings` marked. Types left without offerings are dropped; an empty result is
/// invalid.
pub fn build(params: &Parameters) -> Result<Vec<Entry>, ProviderError> {
    let mut entries = match &params.instance_types {
        Some(specs) => custom::entries(specs)?,
        None => generate::entries(),
    };
    let keep = |list: &Option<Vec<String>>, value: Option<&str>| {
        list.as_ref()
            .is_none_or(|l| value.is_some_and(|v| l.iter().any(|x| x == v)))
    };
    entries.retain(|e| {
        keep(&params.families, e.family.as_deref())
            && keep(&params.architectures, Some(&e.arch))
            && params.max_cpu.is_none_or(|max| e.cpu() <= i128::from(max))
    });
    for entry in &mut entries {
        entry.offers.retain(|o| {
            keep(&params.zones, Some(&o.zone))
                && keep(&params.capacity_types, Some(&o.capacity_type))
        });
        for offer in &mut entry.offers {
            if params
                .unavailable_offerings
                .iter()
                .any(|s| s.matches(&entry.name, &offer.zone, &offer.capacity_type))
            {
                offer.available = false;
            }
        }
    }
    entries.retain(|e| !e.offers.is_empty());
    if entries.is_empty() {
        let fields: Vec<&str> = [
            ("instanceTypes", params.instance_types.is_some()),
            ("families", params.families.is_some()),
            ("architectures", params.architectures.is_some()),
            ("zones", params.zones.is_some()),
            ("capacityTypes", params.capacity_types.is_some()),
            ("maxCpu", params.max_cpu.is_some()),
        ]
        .into_iter()
        .filter_map(|(field, set)| set.then_some(field))
        .collect();
        return Err(ProviderError::Invalid(format!(
            "parameters.{}: no instance type is left to launch",
            fields.join(", parameters.")
        )));
    }
    Ok(entries)
}

/// A quantity known to be valid (generated catalogs and validated parameters).
fn quantity(text: &str) -> Quantity {
    Quantity::parse(text).unwrap_or(Quantity::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_provider_sdk::Operator;
    use capstan_provider_sdk::catalog::{Expanded, expand};

    fn expanded(entry: &Entry) -> Expanded {
        expand(&to_catalog(std::slice::from_ref(entry)))
            .unwrap()
            .remove(0)
    }

    fn params(text: &str) -> Parameters {
        Parameters::parse(text).unwrap()
    }

    #[test]
    fn default_catalog_has_families_sizes_and_arches() {
        let all = build(&Parameters::default()).unwrap();
        assert_eq!(all.len(), 3 * 12 * 2);
        let c4 = all.iter().find(|e| e.name == "c-4x-amd64-linux").unwrap();
        assert_eq!(c4.cpu(), 4);
        assert_eq!(c4.capacity.get("memory").value(), 8 << 30);
        assert_eq!(c4.capacity.get("pods").value(), 64);
        assert_eq!(c4.capacity.get("ephemeral-storage").value(), 20 << 30);
        assert_eq!(c4.allocatable().get("cpu").millis(), 3900);
        assert_eq!(c4.offers.len(), 8);
        for e in &all {
            let price = |ct: &str, zone: &str| {
                e.offers
                    .iter()
                    .find(|o| o.capacity_type == ct && o.zone == zone)
                    .unwrap()
                    .price
            };
            for o in &e.offers {
                assert!(o.price.is_finite() && o.price >= 0.0 && o.available);
            }
            assert!(price("spot", "test-zone-a") < price("on-demand", "test-zone-a"));
        }
    }

    #[test]
    fn instance_types_carry_the_documented_requirements() {
        let all = build(&Parameters::default()).unwrap();
        let it = all
            .iter()
            .find(|e| e.name == "m-2x-arm64-linux")
            .map(expanded)
            .unwrap();
        let get = |key: &str| {
            it.requirements
                .iter()
                .find(|r| r.key == key)
                .map(|r| (r.operator, r.values.clone()))
        };
        assert_eq!(
            get(labels::INSTANCE_TYPE),
            Some((Operator::In, vec!["m-2x-arm64-linux".into()]))
        );
        assert_eq!(
            get(labels::ARCH),
            Some((Operator::In, vec!["arm64".into()]))
        );
        assert_eq!(get(labels::OS), Some((Operator::In, vec!["linux".into()])));
        assert_eq!(
            get(labels::ZONE).unwrap().1,
            vec!["test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d"]
        );
        assert_eq!(
            get(labels::CAPACITY_TYPE).unwrap().1,
            vec!["on-demand", "spot"]
        );
        assert_eq!(get(FAMILY_LABEL).unwrap().1, vec!["m"]);
        assert_eq!(get(SIZE_LABEL).unwrap().1, vec!["2"]);
        assert_eq!(get(CPU_LABEL).unwrap().1, vec!["2"]);
        assert_eq!(get(MEMORY_LABEL).unwrap().1, vec!["16Gi"]);
        assert_eq!(it.offerings.len(), 8);
        assert!(it.offerings.iter().all(|o| o.requirements.is_empty()));
        let capacity: Vec<&str> = it.capacity.iter().map(|(name, _)| name).collect();
        assert_eq!(capacity, vec!["cpu", "ephemeral-storage", "memory", "pods"]);
        assert_eq!(it.capacity.get("memory").value(), 16 << 30);
        assert_eq!(it.kube_reserved.iter().count(), 2);
    }

    #[test]
    fn filters_narrow_the_catalog() {
        let some = build(&params(
            r#"{"families":["c","m"],"architectures":["amd64"],"zones":["test-zone-b"],
                "capacityTypes":["on-demand"],"maxCpu":4}"#,
        ))
        .unwrap();
        assert_eq!(some.len(), 2 * 3);
        for e in &some {
            assert!(e.family.as_deref() != Some("s") && e.arch == "amd64" && e.cpu() <= 4);
            assert_eq!(e.offers.len(), 1);
            assert_eq!(e.offers[0].zone, "test-zone-b");
            assert_eq!(e.offers[0].capacity_type, "on-demand");
        }
        let none = build(&params(r#"{"zones":["mars"]}"#)).unwrap_err();
        assert_eq!(
            none,
            ProviderError::Invalid("parameters.zones: no instance type is left to launch".into())
        );
        let none = build(&params(r#"{"families":["x"],"maxCpu":1}"#)).unwrap_err();
        assert!(
            matches!(&none, ProviderError::Invalid(m) if m.starts_with("parameters.families, parameters.maxCpu:")),
            "{none:?}"
        );
        assert!(build(&params(r#"{"maxCpu":0}"#)).is_err());
    }

    #[test]
    fn unavailable_offerings_are_marked_not_dropped() {
        let all = build(&params(
            r#"{"unavailableOfferings":[{"instanceType":"c-1x-amd64-linux","capacityType":"spot"},
                                        {"zone":"test-zone-d"}]}"#,
        ))
        .unwrap();
        let c1 = all.iter().find(|e| e.name == "c-1x-amd64-linux").unwrap();
        assert_eq!(c1.offers.len(), 8);
        for o in &c1.offers {
            assert_eq!(
                o.available,
                o.capacity_type == "on-demand" && o.zone != "test-zone-d"
            );
        }
        let m8 = all.iter().find(|e| e.name == "m-8x-arm64-linux").unwrap();
        assert_eq!(m8.offers.iter().filter(|o| !o.available).count(), 2);
    }

    #[test]
    fn custom_catalog_replaces_the_default() {
        let all = build(&params(
            r#"{"instanceTypes":[{"name":"g5.4xlarge","architecture":"amd64",
                "operatingSystems":["linux","windows"],"family":"g5",
                "resources":{"cpu":"16","memory":"64Gi","ephemeral-storage":"600Gi","nvidia.com/gpu":"1"},
                "labels":{"accelerator":"a10g"},
                "offerings":[{"capacityType":"on-demand","zone":"us-east-1a","price":1.624},
                             {"capacityType":"spot","zone":"us-east-1b","price":0.5,"available":false}]}]}"#,
        ))
        .unwrap();
        assert_eq!(all.len(), 1);
        let it = expanded(&all[0]);
        assert_eq!(it.name, "g5.4xlarge");
        assert_eq!(it.capacity.get("pods").value(), 110);
        assert_eq!(it.capacity.get("nvidia.com/gpu").value(), 1);
        assert!(it.requirements.iter().any(|r| r.key == "accelerator"));
        let os = it
            .requirements
            .iter()
            .find(|r| r.key == labels::OS)
            .unwrap();
        assert_eq!(os.values, vec!["linux", "windows"]);
        assert!(!it.offerings[1].available);
        let families = build(&params(
            r#"{"families":["c"],"instanceTypes":[{"name":"x","resources":{"cpu":"1","memory":"1Gi"},
                "offerings":[{"capacityType":"spot","zone":"z","price":0}]}]}"#,
        ));
        assert!(
            families.is_err(),
            "types without a family do not pass a family filter"
        );
    }
}
