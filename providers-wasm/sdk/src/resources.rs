//! Resource lists (`capacity`, `allocatable`, `requests`) as maps of parsed quantities.

use std::collections::BTreeMap;

use crate::Resource;
use crate::quantity::{Quantity, QuantityError};

/// A resource whose quantity does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("resource {name:?}: {source}")]
pub struct ResourceError {
    /// The resource name.
    pub name: String,
    /// Why its quantity is wrong.
    pub source: QuantityError,
}

/// The first resource a list cannot cover.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}: requested {requested}, available {available}")]
pub struct Shortfall {
    /// The resource name.
    pub name: String,
    /// How much was asked for.
    pub requested: Quantity,
    /// How much there is.
    pub available: Quantity,
}

/// Named quantities, one per resource name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceList(BTreeMap<String, Quantity>);

impl ResourceList {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses WIT resources; a name given twice keeps the last quantity.
    pub fn from_resources(resources: &[Resource]) -> Result<Self, ResourceError> {
        let mut list = Self::new();
        for r in resources {
            let quantity = Quantity::parse(&r.quantity).map_err(|source| ResourceError {
                name: r.name.clone(),
                source,
            })?;
            list.insert(&r.name, quantity);
        }
        Ok(list)
    }

    /// The list as WIT resources, in name order, with canonical quantities.
    pub fn to_resources(&self) -> Vec<Resource> {
        self.0
            .iter()
            .map(|(name, q)| Resource::new(name.clone(), q.to_string()))
            .collect()
    }

    /// Sets one resource.
    pub fn insert(&mut self, name: &str, quantity: Quantity) {
        self.0.insert(name.to_string(), quantity);
    }

    /// Builder form of [`insert`](Self::insert).
    pub fn with(mut self, name: &str, quantity: Quantity) -> Self {
        self.insert(name, quantity);
        self
    }

    /// The quantity of `name`, zero when absent.
    pub fn get(&self, name: &str) -> Quantity {
        self.0.get(name).copied().unwrap_or(Quantity::ZERO)
    }

    /// Whether `name` is listed.
    pub fn contains(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    /// The entries, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Quantity)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether every request fits in this list (resources absent here count as zero).
    pub fn fits(&self, requests: &ResourceList) -> Result<(), Shortfall> {
        for (name, requested) in &requests.0 {
            let available = self.get(name);
            if *requested > available {
                return Err(Shortfall {
                    name: name.clone(),
                    requested: *requested,
                    available,
                });
            }
        }
        Ok(())
    }

    /// This list minus `other`, per resource, never below zero; resources only in `other` are
    /// ignored.
    pub fn saturating_sub(&self, other: &ResourceList) -> ResourceList {
        ResourceList(
            self.0
                .iter()
                .map(|(name, q)| (name.clone(), q.saturating_sub(&other.get(name))))
                .collect(),
        )
    }

    /// Adds `other` into this list, saturating on overflow.
    pub fn add(&mut self, other: &ResourceList) {
        for (name, q) in &other.0 {
            let sum = match self.0.get(name) {
                Some(existing) => existing
                    .checked_add(q)
                    .unwrap_or(Quantity::with_format(i128::MAX, existing.format())),
                None => *q,
            };
            self.0.insert(name.clone(), sum);
        }
    }
}

impl FromIterator<(String, Quantity)> for ResourceList {
    fn from_iter<T: IntoIterator<Item = (String, Quantity)>>(iter: T) -> Self {
        ResourceList(iter.into_iter().collect())
    }
}

/// The entries, in name order (what the catalog builder's `*_list` methods take).
impl<'a> IntoIterator for &'a ResourceList {
    type Item = (&'a str, &'a Quantity);
    type IntoIter = std::iter::Map<
        std::collections::btree_map::Iter<'a, String, Quantity>,
        fn((&'a String, &'a Quantity)) -> (&'a str, &'a Quantity),
    >;

    fn into_iter(self) -> Self::IntoIter {
        fn entry<'a>((k, v): (&'a String, &'a Quantity)) -> (&'a str, &'a Quantity) {
            (k.as_str(), v)
        }
        self.0.iter().map(entry as fn(_) -> _)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(pairs: &[(&str, &str)]) -> ResourceList {
        ResourceList::from_resources(
            &pairs
                .iter()
                .map(|(n, q)| Resource::new(*n, *q))
                .collect::<Vec<_>>(),
        )
        .unwrap()
    }

    #[test]
    fn parses_and_writes_back_canonically() {
        let l = list(&[("cpu", "2000m"), ("memory", "1024Mi")]);
        assert_eq!(
            l.to_resources(),
            vec![Resource::new("cpu", "2"), Resource::new("memory", "1Gi")]
        );
        let err = ResourceList::from_resources(&[Resource::new("cpu", "lots")]).unwrap_err();
        assert_eq!(err.name, "cpu");
    }

    #[test]
    fn fit_and_subtraction() {
        let capacity = list(&[("cpu", "4"), ("memory", "8Gi"), ("pods", "110")]);
        let overhead = list(&[("cpu", "100m"), ("memory", "10Mi"), ("gpu", "1")]);
        let allocatable = capacity.saturating_sub(&overhead);
        assert_eq!(allocatable.get("cpu").millis(), 3900);
        assert!(!allocatable.contains("gpu"));
        assert!(
            allocatable
                .fits(&list(&[("cpu", "3.9"), ("pods", "1")]))
                .is_ok()
        );
        let short = allocatable.fits(&list(&[("cpu", "4")])).unwrap_err();
        assert_eq!(short.name, "cpu");
        assert!(allocatable.fits(&list(&[("gpu", "1")])).is_err());
        assert!(allocatable.fits(&list(&[("gpu", "0")])).is_ok());
        let mut total = capacity.clone();
        total.add(&overhead);
        assert_eq!(total.get("gpu").value(), 1);
        assert_eq!(total.get("cpu").millis(), 4100);
    }
}
