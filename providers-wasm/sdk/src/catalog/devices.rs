//! [`DeviceTemplates`]: the devices half of a 0.5 `get-instance-types` answer, built alongside the
//! catalog. Instance types with the same devices share one set of slice templates.

use crate::devices::{InstanceDevices, InstanceTypes, SliceTemplate};
use crate::{Catalog, VolumeLimit};

/// Collects the slice templates of each instance type, by the type's index in the catalog (the
/// order [`CatalogBuilder::instance_type`](super::CatalogBuilder::instance_type) was called in).
#[derive(Debug, Default, Clone)]
pub struct DeviceTemplates {
    slices: Vec<SliceTemplate>,
    /// Each distinct set of slices and the indices of its slices (few: a linear search; the
    /// generated types are not `Hash`).
    sets: Vec<(Vec<SliceTemplate>, Vec<u32>)>,
    devices: Vec<InstanceDevices>,
}

impl DeviceTemplates {
    /// No devices yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Instance type `instance_type` (its catalog index) carries the devices of `slices`. A type
    /// given no slices carries none; calling twice for one type adds to its slices.
    pub fn add(&mut self, instance_type: u32, slices: &[SliceTemplate]) {
        if slices.is_empty() {
            return;
        }
        let indices = match self.sets.iter().find(|(set, _)| set == slices) {
            Some((_, indices)) => indices.clone(),
            None => {
                let start = self.slices.len() as u32;
                self.slices.extend(slices.iter().cloned());
                let indices: Vec<u32> = (start..start + slices.len() as u32).collect();
                self.sets.push((slices.to_vec(), indices.clone()));
                indices
            }
        };
        match self
            .devices
            .iter_mut()
            .find(|d| d.instance_type == instance_type)
        {
            Some(existing) => existing.slices.extend(indices),
            None => self.devices.push(InstanceDevices {
                instance_type,
                slices: indices,
            }),
        }
    }

    /// Whether no instance type carries devices.
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    /// The answer: `catalog`, its volume limits and these devices.
    pub fn answer(self, catalog: Catalog, volume_limits: Vec<VolumeLimit>) -> InstanceTypes {
        InstanceTypes {
            catalog,
            volume_limits,
            slices: self.slices,
            devices: self.devices,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::{Attribute, AttributeValue, Device};

    fn gpus(n: usize) -> SliceTemplate {
        SliceTemplate {
            driver: "gpu.example.com".into(),
            pool: "gpus".into(),
            devices: (0..n)
                .map(|i| Device {
                    name: format!("gpu-{i}"),
                    attributes: vec![Attribute {
                        name: "type".into(),
                        value: AttributeValue::Text("gpu".into()),
                    }],
                    capacity: Vec::new(),
                    allow_multiple_allocations: false,
                    consumes_counters: Vec::new(),
                })
                .collect(),
            shared_counters: Vec::new(),
        }
    }

    #[test]
    fn types_with_the_same_devices_share_their_templates() {
        let mut t = DeviceTemplates::new();
        t.add(0, &[gpus(1)]);
        t.add(1, &[gpus(8)]);
        t.add(2, &[gpus(1)]);
        t.add(3, &[]);
        let answer = t.answer(crate::CatalogBuilder::new().finish().into(), Vec::new());
        assert_eq!(answer.slices.len(), 2);
        let slices_of = |it: u32| {
            answer
                .devices
                .iter()
                .find(|d| d.instance_type == it)
                .map(|d| d.slices.clone())
        };
        assert_eq!(slices_of(0), Some(vec![0]));
        assert_eq!(slices_of(1), Some(vec![1]));
        assert_eq!(slices_of(2), Some(vec![0]));
        assert_eq!(slices_of(3), None);
        assert_eq!(answer.slices[1].devices.len(), 8);
    }
}
