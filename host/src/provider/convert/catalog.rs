//! The flat `catalog` a provider returns from `get-instance-types`, checked once and then read
//! through borrowed views.
//!
//! [`CatalogView::new`] walks the whole catalog and refuses it with a [`CatalogError`] naming the
//! first problem: an index or span outside its list, a requirement whose values do not fit its
//! operator, an offering without a zone or capacity type, a price that is not finite and >= 0, an
//! amount above `i64::MAX`. Guest output never panics the host: after the check the accessors
//! still read with `get`, never by indexing.

use crate::runtime::types::{Amount, Catalog, CatalogOffering, CatalogRequirement, Operator, Span};

/// Why a provider's catalog is refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CatalogError {
    /// An index past the end of the list it points into.
    #[error("catalog: {what} is {index}, past the end of catalog.{list} ({len} entries)")]
    Index {
        /// Which field holds the index.
        what: String,
        /// The list it points into.
        list: &'static str,
        /// The index.
        index: u32,
        /// The list's length.
        len: usize,
    },
    /// A span reaching past the end of its list.
    #[error(
        "catalog: {what} spans entries {start}..{start}+{len}, past the end of catalog.{list} \
         ({total} entries)"
    )]
    Span {
        /// Which field holds the span.
        what: String,
        /// The list it spans.
        list: &'static str,
        /// The span's start.
        start: u32,
        /// The span's length.
        len: u32,
        /// The list's length.
        total: usize,
    },
    /// A requirement whose key or values do not fit its operator.
    #[error("catalog: requirement #{index} on {key:?}: {why}")]
    Requirement {
        /// Its index in `catalog.requirements`.
        index: u32,
        /// Its key.
        key: String,
        /// What is wrong.
        why: &'static str,
    },
    /// An instance type without a name.
    #[error("catalog: instance type #{index} has an empty name")]
    EmptyName {
        /// Its index in `catalog.instance-types`.
        index: usize,
    },
    /// An offering with an empty zone or capacity type.
    #[error("catalog: instance type {instance_type}: offering #{offering} has an empty {field}")]
    EmptyField {
        /// The instance type's name.
        instance_type: String,
        /// The offering's position among the type's offerings.
        offering: usize,
        /// `zone` or `capacity-type`.
        field: &'static str,
    },
    /// A price that is NaN, infinite or negative.
    #[error(
        "catalog: instance type {instance_type}: offering #{offering} price {price} is not finite \
         and >= 0"
    )]
    Price {
        /// The instance type's name.
        instance_type: String,
        /// The offering's position among the type's offerings.
        offering: usize,
        /// The price.
        price: f64,
    },
    /// An amount the host's 64-bit fixed point cannot hold.
    #[error("catalog: amount {name} of {milli_value} thousandths is above 2^63 - 1")]
    AmountOverflow {
        /// The resource name.
        name: String,
        /// The value.
        milli_value: u64,
    },
}

impl Catalog {
    /// How many instance types it holds.
    pub fn len(&self) -> usize {
        self.instance_types.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.instance_types.is_empty()
    }
}

/// One requirement of a checked catalog.
#[derive(Debug, Clone, Copy)]
pub struct RequirementView<'a> {
    catalog: &'a Catalog,
    requirement: &'a CatalogRequirement,
}

impl<'a> RequirementView<'a> {
    /// The label key.
    pub fn key(&self) -> &'a str {
        string(self.catalog, self.requirement.key)
    }

    /// The operator.
    pub fn operator(&self) -> Operator {
        self.requirement.operator
    }

    /// The values, in order.
    pub fn values(&self) -> impl ExactSizeIterator<Item = &'a str> + use<'a> {
        let catalog = self.catalog;
        span_of(&catalog.values, &self.requirement.values)
            .iter()
            .map(move |&v| string(catalog, v))
    }

    /// `min-values`.
    pub fn min_values(&self) -> Option<u32> {
        self.requirement.min_values
    }
}

/// One offering of a checked catalog.
#[derive(Debug, Clone, Copy)]
pub struct OfferingView<'a> {
    catalog: &'a Catalog,
    offering: &'a CatalogOffering,
}

impl<'a> OfferingView<'a> {
    /// The zone.
    pub fn zone(&self) -> &'a str {
        string(self.catalog, self.offering.zone)
    }

    /// The capacity type.
    pub fn capacity_type(&self) -> &'a str {
        string(self.catalog, self.offering.capacity_type)
    }

    /// Price per hour (finite, >= 0).
    pub fn price(&self) -> f64 {
        self.offering.price
    }

    /// Whether it can be launched now.
    pub fn available(&self) -> bool {
        self.offering.available
    }

    /// Indices (into `catalog.requirements`) of its further requirements.
    pub fn requirement_indices(&self) -> &'a [u32] {
        span_of(&self.catalog.requirement_lists, &self.offering.requirements)
    }

    /// Its further requirements.
    pub fn requirements(&self) -> impl Iterator<Item = RequirementView<'a>> + use<'a> {
        requirements(self.catalog, self.requirement_indices())
    }
}

/// One resource amount of a checked catalog.
#[derive(Debug, Clone, Copy)]
pub struct AmountView<'a> {
    /// The resource name.
    pub name: &'a str,
    /// Thousandths of the resource's unit (fits in an `i64`).
    pub milli_value: i64,
}

impl AmountView<'_> {
    /// Whole units, rounded up like Kubernetes' `Value()`.
    pub fn units(&self) -> i64 {
        self.milli_value / 1000 + i64::from(self.milli_value % 1000 != 0)
    }
}

/// One instance type of a checked catalog.
#[derive(Debug, Clone, Copy)]
pub struct InstanceTypeView<'a> {
    catalog: &'a Catalog,
    /// The name (non-empty).
    pub name: &'a str,
    requirements: &'a [u32],
    offerings: &'a [CatalogOffering],
    capacity: &'a [Amount],
    kube_reserved: &'a [Amount],
    system_reserved: &'a [Amount],
    eviction_threshold: &'a [Amount],
}

impl<'a> InstanceTypeView<'a> {
    /// Indices (into `catalog.requirements`) of the requirements every node of this type meets.
    pub fn requirement_indices(&self) -> &'a [u32] {
        self.requirements
    }

    /// The requirements every node of this type meets.
    pub fn requirements(&self) -> impl Iterator<Item = RequirementView<'a>> + use<'a> {
        requirements(self.catalog, self.requirements)
    }

    /// The offerings.
    pub fn offerings(&self) -> impl ExactSizeIterator<Item = OfferingView<'a>> + use<'a> {
        let catalog = self.catalog;
        self.offerings
            .iter()
            .map(move |offering| OfferingView { catalog, offering })
    }

    /// The capacity.
    pub fn capacity(&self) -> impl ExactSizeIterator<Item = AmountView<'a>> + use<'a> {
        amounts(self.catalog, self.capacity)
    }

    /// Kube-reserved, system-reserved and the eviction threshold, in that order.
    pub fn overhead(&self) -> impl Iterator<Item = AmountView<'a>> + use<'a> {
        let catalog = self.catalog;
        amounts(catalog, self.kube_reserved)
            .chain(amounts(catalog, self.system_reserved))
            .chain(amounts(catalog, self.eviction_threshold))
    }

    /// The overhead lists by name (`kube-reserved`, `system-reserved`, `eviction-threshold`).
    pub fn overhead_lists(
        &self,
    ) -> [(
        &'static str,
        impl ExactSizeIterator<Item = AmountView<'a>> + use<'a>,
    ); 3] {
        let catalog = self.catalog;
        [
            ("kube-reserved", amounts(catalog, self.kube_reserved)),
            ("system-reserved", amounts(catalog, self.system_reserved)),
            (
                "eviction-threshold",
                amounts(catalog, self.eviction_threshold),
            ),
        ]
    }
}

/// A catalog that passed [`CatalogView::new`].
#[derive(Debug, Clone, Copy)]
pub struct CatalogView<'a> {
    catalog: &'a Catalog,
}

impl<'a> CatalogView<'a> {
    /// Checks every index, span, requirement, offering and amount of `catalog`.
    pub fn new(catalog: &'a Catalog) -> Result<Self, CatalogError> {
        check(catalog)?;
        Ok(Self { catalog })
    }

    /// The catalog.
    pub fn catalog(&self) -> &'a Catalog {
        self.catalog
    }

    /// How many instance types it has.
    pub fn len(&self) -> usize {
        self.catalog.instance_types.len()
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.catalog.instance_types.is_empty()
    }

    /// The requirement at `index` of `catalog.requirements`, if any.
    pub fn requirement(&self, index: u32) -> Option<RequirementView<'a>> {
        let catalog = self.catalog;
        catalog
            .requirements
            .get(index as usize)
            .map(|requirement| RequirementView {
                catalog,
                requirement,
            })
    }

    /// The instance types, in the provider's order.
    pub fn instance_types(&self) -> impl ExactSizeIterator<Item = InstanceTypeView<'a>> + use<'a> {
        let catalog = self.catalog;
        catalog.instance_types.iter().map(move |it| {
            let amounts = |s: &Span| span_of(&catalog.amounts, s);
            InstanceTypeView {
                catalog,
                name: string(catalog, it.name),
                requirements: span_of(&catalog.requirement_lists, &it.requirements),
                offerings: span_of(&catalog.offerings, &it.offerings),
                capacity: amounts(&it.capacity),
                kube_reserved: amounts(&it.overhead.kube_reserved),
                system_reserved: amounts(&it.overhead.system_reserved),
                eviction_threshold: amounts(&it.overhead.eviction_threshold),
            }
        })
    }
}

/// `catalog.strings[index]`, or `""` (never after [`check`]).
fn string(catalog: &Catalog, index: u32) -> &str {
    catalog
        .strings
        .get(index as usize)
        .map_or("", String::as_str)
}

/// The entries of `list` a span covers, or none (never after [`check`]).
fn span_of<'a, T>(list: &'a [T], span: &Span) -> &'a [T] {
    if span.len == 0 {
        return &[];
    }
    let start = span.start as usize;
    start
        .checked_add(span.len as usize)
        .and_then(|end| list.get(start..end))
        .unwrap_or(&[])
}

fn requirements<'a>(
    catalog: &'a Catalog,
    indices: &'a [u32],
) -> impl Iterator<Item = RequirementView<'a>> + use<'a> {
    indices.iter().filter_map(move |&i| {
        catalog
            .requirements
            .get(i as usize)
            .map(|requirement| RequirementView {
                catalog,
                requirement,
            })
    })
}

fn amounts<'a>(
    catalog: &'a Catalog,
    list: &'a [Amount],
) -> impl ExactSizeIterator<Item = AmountView<'a>> + use<'a> {
    list.iter().map(move |a| AmountView {
        name: string(catalog, a.name),
        milli_value: i64::try_from(a.milli_value).unwrap_or(i64::MAX),
    })
}

fn index(
    what: impl FnOnce() -> String,
    list: &'static str,
    index: u32,
    len: usize,
) -> Result<(), CatalogError> {
    if (index as usize) < len {
        Ok(())
    } else {
        Err(CatalogError::Index {
            what: what(),
            list,
            index,
            len,
        })
    }
}

fn span<'a, T>(
    what: impl FnOnce() -> String,
    list_name: &'static str,
    list: &'a [T],
    span: &Span,
) -> Result<&'a [T], CatalogError> {
    if span.len == 0 {
        return Ok(&[]);
    }
    let start = span.start as usize;
    start
        .checked_add(span.len as usize)
        .and_then(|end| list.get(start..end))
        .ok_or_else(|| CatalogError::Span {
            what: what(),
            list: list_name,
            start: span.start,
            len: span.len,
            total: list.len(),
        })
}

fn check(catalog: &Catalog) -> Result<(), CatalogError> {
    let strings = catalog.strings.len();
    for (i, r) in catalog.requirements.iter().enumerate() {
        let what = |field: &'static str| move || format!("requirement #{i} {field}");
        index(what("key"), "strings", r.key, strings)?;
        let values = span(what("values"), "values", &catalog.values, &r.values)?;
        for &v in values {
            index(what("value"), "strings", v, strings)?;
        }
        let fail = |why| CatalogError::Requirement {
            index: i as u32,
            key: string(catalog, r.key).to_owned(),
            why,
        };
        if string(catalog, r.key).is_empty() {
            return Err(fail("empty key"));
        }
        match r.operator {
            Operator::In | Operator::NotIn if values.is_empty() => {
                return Err(fail("In/NotIn need at least one value"));
            }
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
                return Err(fail("Exists/DoesNotExist take no values"));
            }
            Operator::Gt | Operator::Lt => match values {
                [one] if string(catalog, *one).trim().parse::<i64>().is_ok() => {}
                _ => return Err(fail("Gt/Lt take exactly one integer value")),
            },
            _ => {}
        }
    }
    for (i, &r) in catalog.requirement_lists.iter().enumerate() {
        index(
            || format!("requirement-lists entry #{i}"),
            "requirements",
            r,
            catalog.requirements.len(),
        )?;
    }
    for (i, a) in catalog.amounts.iter().enumerate() {
        index(|| format!("amount #{i} name"), "strings", a.name, strings)?;
        if i64::try_from(a.milli_value).is_err() {
            return Err(CatalogError::AmountOverflow {
                name: string(catalog, a.name).to_owned(),
                milli_value: a.milli_value,
            });
        }
    }
    for (t, it) in catalog.instance_types.iter().enumerate() {
        let what = |field: &'static str| move || format!("instance type #{t} {field}");
        index(what("name"), "strings", it.name, strings)?;
        let name = string(catalog, it.name);
        if name.is_empty() {
            return Err(CatalogError::EmptyName { index: t });
        }
        span(
            what("requirements"),
            "requirement-lists",
            &catalog.requirement_lists,
            &it.requirements,
        )?;
        for (field, s) in [
            ("capacity", &it.capacity),
            ("kube-reserved", &it.overhead.kube_reserved),
            ("system-reserved", &it.overhead.system_reserved),
            ("eviction-threshold", &it.overhead.eviction_threshold),
        ] {
            span(what(field), "amounts", &catalog.amounts, s)?;
        }
        let offerings = span(
            what("offerings"),
            "offerings",
            &catalog.offerings,
            &it.offerings,
        )?;
        for (o, offering) in offerings.iter().enumerate() {
            let what =
                |field: &'static str| move || format!("instance type {name} offering #{o} {field}");
            index(what("zone"), "strings", offering.zone, strings)?;
            index(
                what("capacity-type"),
                "strings",
                offering.capacity_type,
                strings,
            )?;
            span(
                what("requirements"),
                "requirement-lists",
                &catalog.requirement_lists,
                &offering.requirements,
            )?;
            let empty = |field| CatalogError::EmptyField {
                instance_type: name.to_owned(),
                offering: o,
                field,
            };
            if string(catalog, offering.zone).is_empty() {
                return Err(empty("zone"));
            }
            if string(catalog, offering.capacity_type).is_empty() {
                return Err(empty("capacity-type"));
            }
            if !offering.price.is_finite() || offering.price < 0.0 {
                return Err(CatalogError::Price {
                    instance_type: name.to_owned(),
                    offering: o,
                    price: offering.price,
                });
            }
        }
    }
    Ok(())
}

// The shared model's catalog (what the guests' `CatalogBuilder` builds, see `capstan-model`) as
// the host's bindings of the WIT record, and the operator both ways: tests and benchmarks build
// catalogs with the guests' builder through these.
capstan_model::catalog_conversions!(crate::runtime::types);

/// The guests' `CatalogBuilder` (the shared model's), to build catalogs in tests; `.into()` its
/// `finish()` for the host's bindings.
#[cfg(test)]
pub(crate) mod builder {
    pub(crate) use capstan_model::catalog::CatalogBuilder;
}

#[cfg(test)]
mod tests;
