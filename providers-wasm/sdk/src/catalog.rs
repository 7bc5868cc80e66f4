//! Instance types as the flat WIT `catalog`: build one with [`CatalogBuilder`], read one back with
//! [`expand`].
//!
//! ```
//! use capstan_provider_sdk::CatalogBuilder;
//!
//! let mut catalog = CatalogBuilder::new();
//! for (name, cores) in [("small", 2u64), ("large", 8)] {
//!     let mut t = catalog.instance_type(name);
//!     t.requirement_in("node.kubernetes.io/instance-type", &[name])
//!         .requirement_in("kubernetes.io/arch", &["amd64"])
//!         .requirement_in("kubernetes.io/os", &["linux"])
//!         .requirement_in("topology.kubernetes.io/zone", &["zone-a"])
//!         .requirement_in("karpenter.sh/capacity-type", &["on-demand"])
//!         .offering("zone-a", "on-demand", 0.05 * cores as f64, true)
//!         .capacity("cpu", cores * 1000)
//!         .capacity("memory", (cores << 30) * 1000)
//!         .capacity("pods", 110 * 1000);
//! } // each instance type is added when its builder is dropped
//! let catalog: capstan_provider_sdk::Catalog = catalog.finish().into();
//! assert_eq!(catalog.instance_types.len(), 2);
//! // "kubernetes.io/arch" and "amd64" are stored once, as is the arch requirement.
//! assert_eq!(catalog.strings.iter().filter(|s| *s == "amd64").count(), 1);
//! ```
//!
//! For large catalogs, intern what every type shares once and pass indices:
//! [`CatalogBuilder::string`] for zones, capacity types and resource names (then
//! [`InstanceTypeBuilder::offering_at`], [`InstanceTypeBuilder::capacity_at`]),
//! [`CatalogBuilder::requirement`] for shared requirements (then
//! [`InstanceTypeBuilder::requirement_index`]); the result is the same catalog, built with fewer
//! lookups.
//!
//! Amounts are in thousandths of the resource's unit (Kubernetes' `MilliValue()`): cpu in
//! millicores, memory in milli-bytes. [`milli_value`] converts a [`Quantity`], and the `*_list`
//! methods take whole [`ResourceList`]s.

#[cfg(feature = "v0_5")]
mod devices;
#[cfg(feature = "v0_5")]
pub use devices::DeviceTemplates;

use crate::requirements::Requirements;
use crate::{Catalog, Quantity, Requirement, ResourceList, Span};

/// The builder is the shared model's (`capstan-model`): the host's tests and benchmarks run the
/// same code natively. [`CatalogBuilder::finish`] returns the model's catalog; `.into()` makes it
/// the WIT [`Catalog`] (the lists move, nothing is copied but the small records).
pub use capstan_model::catalog::{
    CatalogBuilder, CatalogOperator, InstanceTypeBuilder, milli_value,
};

capstan_model::catalog_conversions!(crate::bindings::capstan::provider::types);

/// A catalog index or span that points outside its list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("catalog: {what} {index} is out of range ({len} entries)")]
pub struct ExpandError {
    /// Which list.
    pub what: &'static str,
    /// The index (or the end of a span).
    pub index: u64,
    /// The list's length.
    pub len: usize,
}

/// One offering of an [`Expanded`] instance type.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpandedOffering {
    /// Zone.
    pub zone: String,
    /// Capacity type.
    pub capacity_type: String,
    /// Price per hour.
    pub price: f64,
    /// Whether it can be launched now.
    pub available: bool,
    /// Further requirements.
    pub requirements: Vec<Requirement>,
}

/// An instance type of a catalog with every index resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Expanded {
    /// Name.
    pub name: String,
    /// Requirements of every node of this type.
    pub requirements: Vec<Requirement>,
    /// Offerings.
    pub offerings: Vec<ExpandedOffering>,
    /// Capacity.
    pub capacity: ResourceList,
    /// Kube-reserved.
    pub kube_reserved: ResourceList,
    /// System-reserved.
    pub system_reserved: ResourceList,
    /// Eviction threshold.
    pub eviction_threshold: ResourceList,
}

impl Expanded {
    /// The requirements merged per key.
    pub fn requirement_set(&self) -> Result<Requirements, crate::requirements::RequirementError> {
        Requirements::from_slice(&self.requirements)
    }

    /// The requirement on `key`, if any.
    pub fn requirement(&self, key: &str) -> Option<&Requirement> {
        self.requirements.iter().find(|r| r.key == key)
    }
}

fn range<'a, T>(list: &'a [T], s: &Span, what: &'static str) -> Result<&'a [T], ExpandError> {
    let end = u64::from(s.start) + u64::from(s.len);
    if s.len == 0 {
        return Ok(&[]);
    }
    list.get(s.start as usize..end as usize).ok_or(ExpandError {
        what,
        index: end,
        len: list.len(),
    })
}

fn at<'a, T>(list: &'a [T], index: u32, what: &'static str) -> Result<&'a T, ExpandError> {
    list.get(index as usize).ok_or(ExpandError {
        what,
        index: u64::from(index),
        len: list.len(),
    })
}

/// Every instance type of `catalog`, with strings, requirements and amounts resolved.
pub fn expand(catalog: &Catalog) -> Result<Vec<Expanded>, ExpandError> {
    let string = |i: u32| at(&catalog.strings, i, "string").cloned();
    let requirements = |s: &Span| -> Result<Vec<Requirement>, ExpandError> {
        range(&catalog.requirement_lists, s, "requirement list")?
            .iter()
            .map(|&i| {
                let r = at(&catalog.requirements, i, "requirement")?;
                Ok(Requirement {
                    key: string(r.key)?,
                    operator: r.operator,
                    values: range(&catalog.values, &r.values, "value")?
                        .iter()
                        .map(|&v| string(v))
                        .collect::<Result<_, _>>()?,
                    min_values: r.min_values,
                })
            })
            .collect()
    };
    let amounts = |s: &Span| -> Result<ResourceList, ExpandError> {
        let mut list = ResourceList::new();
        for a in range(&catalog.amounts, s, "amount")? {
            let milli = i128::from(a.milli_value);
            list.insert(&string(a.name)?, Quantity::from_millis(milli));
        }
        Ok(list)
    };
    catalog
        .instance_types
        .iter()
        .map(|it| {
            Ok(Expanded {
                name: string(it.name)?,
                requirements: requirements(&it.requirements)?,
                offerings: range(&catalog.offerings, &it.offerings, "offering")?
                    .iter()
                    .map(|o| {
                        Ok(ExpandedOffering {
                            zone: string(o.zone)?,
                            capacity_type: string(o.capacity_type)?,
                            price: o.price,
                            available: o.available,
                            requirements: requirements(&o.requirements)?,
                        })
                    })
                    .collect::<Result<_, _>>()?,
                capacity: amounts(&it.capacity)?,
                kube_reserved: amounts(&it.overhead.kube_reserved)?,
                system_reserved: amounts(&it.overhead.system_reserved)?,
                eviction_threshold: amounts(&it.overhead.eviction_threshold)?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Operator;

    fn two_types() -> Catalog {
        let mut b = CatalogBuilder::new();
        for (name, cpu) in [("a", 1u64), ("b", 2)] {
            let mut t = b.instance_type(name);
            t.requirement_in("node.kubernetes.io/instance-type", &[name])
                .requirement_in("kubernetes.io/arch", &["amd64"])
                .requirement("example.com/gen", Operator::Gt, &["3"], Option::Some(2))
                .offering("z1", "spot", 0.5, true)
                .offering_requirement("example.com/reservation", Operator::In, &["r1"], None)
                .offering("z2", "on-demand", 1.0, false)
                .capacity("cpu", cpu * 1000)
                .capacity("pods", 110_000)
                .kube_reserved("cpu", 100);
        }
        b.finish().into()
    }

    #[test]
    fn builds_and_expands() {
        let c = two_types();
        let all = expand(&c).unwrap();
        assert_eq!(all.len(), 2);
        let b = &all[1];
        assert_eq!(b.name, "b");
        assert_eq!(
            b.requirement("node.kubernetes.io/instance-type")
                .unwrap()
                .values,
            vec!["b"]
        );
        let gen_req = b.requirement("example.com/gen").unwrap();
        assert_eq!(
            (gen_req.operator, gen_req.min_values),
            (Operator::Gt, Some(2))
        );
        assert_eq!(b.offerings.len(), 2);
        assert_eq!(b.offerings[0].zone, "z1");
        assert_eq!(b.offerings[0].requirements.len(), 1);
        assert!(b.offerings[1].requirements.is_empty());
        assert!(!b.offerings[1].available);
        assert_eq!(b.capacity.get("cpu").millis(), 2000);
        assert_eq!(b.kube_reserved.get("cpu").millis(), 100);
        assert!(b.system_reserved.is_empty());
    }

    #[test]
    fn everything_is_stored_once() {
        let c = two_types();
        let count = |s: &str| c.strings.iter().filter(|x| *x == s).count();
        for s in ["kubernetes.io/arch", "amd64", "z1", "spot", "cpu", "a", "b"] {
            assert_eq!(count(s), 1, "{s}");
        }
        // instance-type a, instance-type b, arch, gen, reservation.
        assert_eq!(c.requirements.len(), 5);
        // The shared kube-reserved list and the reservation list are stored once.
        let [a, b] = [&c.instance_types[0], &c.instance_types[1]];
        assert_eq!(a.overhead.kube_reserved, b.overhead.kube_reserved);
        assert_ne!(a.capacity, b.capacity);
        assert_ne!(a.requirements, b.requirements);
        let (oa, ob) = (&c.offerings[0], &c.offerings[2]);
        assert_eq!(oa.requirements, ob.requirements);
        assert_eq!(c.requirement_lists.len(), 3 + 3 + 1);
    }

    #[test]
    fn empty_lists_and_bad_indices() {
        let mut b = CatalogBuilder::new();
        drop(b.instance_type("bare"));
        let mut c: Catalog = b.finish().into();
        let all = expand(&c).unwrap();
        assert!(all[0].requirements.is_empty() && all[0].offerings.is_empty());
        c.instance_types[0].name = 7;
        assert_eq!(
            expand(&c).unwrap_err(),
            ExpandError {
                what: "string",
                index: 7,
                len: 1
            }
        );
        c.instance_types[0].name = 0;
        c.instance_types[0].offerings = Span { start: 0, len: 1 };
        assert_eq!(expand(&c).unwrap_err().what, "offering");
    }

    #[test]
    fn interning_survives_hash_collisions_of_distinct_entries() {
        let mut b = CatalogBuilder::new();
        let ids: Vec<u32> = (0..5000).map(|i| b.string(&format!("s{i}"))).collect();
        let again: Vec<u32> = (0..5000).map(|i| b.string(&format!("s{i}"))).collect();
        assert_eq!(ids, again);
        assert_eq!(ids, (0..5000).collect::<Vec<u32>>());
    }

    #[test]
    fn with_capacity_builds_the_same_catalog() {
        let build = |mut b: CatalogBuilder| {
            for i in 0..50 {
                let name = format!("t{i}");
                b.instance_type(&name)
                    .requirement_in("k", &[&name])
                    .offering("z", "spot", 1.0, true)
                    .capacity("cpu", 1000);
            }
            b.finish()
        };
        assert_eq!(
            build(CatalogBuilder::new()),
            build(CatalogBuilder::with_capacity(50))
        );
    }

    #[test]
    fn milli_values_of_quantities() {
        assert_eq!(milli_value(&Quantity::parse("1Ki").unwrap()), 1_024_000);
        assert_eq!(milli_value(&Quantity::parse("100m").unwrap()), 100);
        assert_eq!(milli_value(&Quantity::parse("-1").unwrap()), 0);
    }
}
