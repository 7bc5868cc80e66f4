//! A catalog from the NodeClass's `instanceTypes` (already validated by [`crate::params`]).

use capstan_provider_sdk::{ProviderError, Quantity, ResourceList, labels};

use super::{Entry, Offer};
use crate::params::{DEFAULT_PODS, InstanceTypeSpec};

/// The entries the specs describe.
pub fn entries(specs: &[InstanceTypeSpec]) -> Result<Vec<Entry>, ProviderError> {
    specs.iter().enumerate().map(|(i, s)| entry(i, s)).collect()
}

fn entry(index: usize, spec: &InstanceTypeSpec) -> Result<Entry, ProviderError> {
    let mut capacity = ResourceList::new();
    for (name, text) in &spec.resources {
        let q = Quantity::parse(text).map_err(|e| {
            capstan_provider_sdk::params::invalid(
                &format!("instanceTypes[{index}].resources.{name}"),
                e,
            )
        })?;
        capacity.insert(name, q);
    }
    if !capacity.contains(labels::RESOURCE_PODS) {
        capacity.insert(labels::RESOURCE_PODS, super::quantity(DEFAULT_PODS));
    }
    Ok(Entry {
        name: spec.name.clone(),
        family: spec.family.clone(),
        size: spec.size.clone(),
        arch: spec.architecture.clone(),
        os: spec.operating_systems.clone(),
        capacity,
        kube_reserved: ResourceList::new()
            .with(labels::RESOURCE_CPU, super::quantity("100m"))
            .with(labels::RESOURCE_MEMORY, super::quantity("10Mi")),
        labels: spec.labels.clone(),
        offers: spec
            .offerings
            .iter()
            .map(|o| Offer {
                zone: o.zone.clone(),
                capacity_type: o.capacity_type.clone(),
                price: o.price,
                available: o.available,
            })
            .collect(),
    })
}
