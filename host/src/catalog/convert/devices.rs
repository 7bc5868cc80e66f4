//! The devices of a 0.5 `get-instance-types` answer ([`devices::InstanceTypes`]) as the
//! scheduler's slice templates: each distinct WIT slice converted once and shared (an `Arc`) by
//! every instance type that carries it.

use std::collections::BTreeMap;
use std::sync::Arc;

use capstan_dra::template::{
    AttributeValue, CounterConsumption, CounterSet, Device, ResourceSliceTemplate,
};
use capstan_model::Quantity;

use crate::rules::snapshot::ProvisionError;
use crate::runtime::devices as wit;

fn bad(what: String) -> ProvisionError {
    ProvisionError::InstanceType(format!("devices: {what}"))
}

fn quantities(
    list: &[wit::Quantity],
    context: &dyn Fn() -> String,
) -> Result<BTreeMap<String, Quantity>, ProvisionError> {
    let mut out = BTreeMap::new();
    for q in list {
        let value = Quantity::parse(&q.value)
            .map_err(|err| bad(format!("{}: {} {:?}: {err}", context(), q.name, q.value)))?;
        if out.insert(q.name.clone(), value).is_some() {
            return Err(bad(format!("{}: {} given twice", context(), q.name)));
        }
    }
    Ok(out)
}

fn attribute(value: &wit::AttributeValue) -> AttributeValue {
    match value {
        wit::AttributeValue::Int(i) => AttributeValue::Int(*i),
        wit::AttributeValue::Boolean(b) => AttributeValue::Bool(*b),
        wit::AttributeValue::Text(s) => AttributeValue::String(s.clone()),
        wit::AttributeValue::Version(v) => AttributeValue::Version(v.clone()),
    }
}

fn device(slice: &wit::SliceTemplate, d: &wit::Device) -> Result<Device, ProvisionError> {
    let at = || {
        format!(
            "driver {} pool {} device {}",
            slice.driver, slice.pool, d.name
        )
    };
    if d.name.is_empty() {
        return Err(bad(format!(
            "driver {} pool {}: a device without a name",
            slice.driver, slice.pool
        )));
    }
    let mut attributes = BTreeMap::new();
    for a in &d.attributes {
        if attributes
            .insert(a.name.clone(), attribute(&a.value))
            .is_some()
        {
            return Err(bad(format!("{}: attribute {} given twice", at(), a.name)));
        }
    }
    let consumes_counters = d
        .consumes_counters
        .iter()
        .map(|c| {
            Ok(CounterConsumption {
                counter_set: c.counter_set.clone(),
                counters: quantities(&c.counters, &|| {
                    format!("{} counter set {}", at(), c.counter_set)
                })?,
            })
        })
        .collect::<Result<_, ProvisionError>>()?;
    Ok(Device {
        name: d.name.clone(),
        attributes,
        capacity: quantities(&d.capacity, &at)?,
        allow_multiple_allocations: d.allow_multiple_allocations,
        consumes_counters,
    })
}

fn slice(s: &wit::SliceTemplate) -> Result<ResourceSliceTemplate, ProvisionError> {
    if s.driver.is_empty() || s.pool.is_empty() {
        return Err(bad(format!(
            "a slice template needs a driver and a pool (driver {:?}, pool {:?})",
            s.driver, s.pool
        )));
    }
    let devices = s
        .devices
        .iter()
        .map(|d| device(s, d))
        .collect::<Result<_, _>>()?;
    let shared_counters = s
        .shared_counters
        .iter()
        .map(|set| {
            Ok(CounterSet {
                name: set.name.clone(),
                counters: quantities(&set.counters, &|| {
                    format!(
                        "driver {} pool {} counter set {}",
                        s.driver, s.pool, set.name
                    )
                })?,
            })
        })
        .collect::<Result<_, ProvisionError>>()?;
    Ok(ResourceSliceTemplate {
        driver: s.driver.clone(),
        pool: s.pool.clone(),
        devices,
        shared_counters,
    })
}

/// The slice templates of each of `types` instance types (by catalog index): empty for a type
/// the answer gives no devices. An index out of range, a malformed quantity or a nameless
/// device fails the whole answer, as a malformed catalog does.
pub fn by_instance_type(
    answer: &wit::InstanceTypes,
    types: usize,
) -> Result<Vec<Vec<Arc<ResourceSliceTemplate>>>, ProvisionError> {
    let mut converted: Vec<Option<Arc<ResourceSliceTemplate>>> = vec![None; answer.slices.len()];
    let mut out = vec![Vec::new(); types];
    for entry in &answer.devices {
        let of_type = out.get_mut(entry.instance_type as usize).ok_or_else(|| {
            bad(format!(
                "instance type #{} out of range ({types} types)",
                entry.instance_type
            ))
        })?;
        for &i in &entry.slices {
            let (Some(slot), Some(wit_slice)) =
                (converted.get_mut(i as usize), answer.slices.get(i as usize))
            else {
                return Err(bad(format!(
                    "slice #{i} out of range ({} slices)",
                    answer.slices.len()
                )));
            };
            let template = match slot {
                Some(t) => t.clone(),
                None => slot.insert(Arc::new(slice(wit_slice)?)).clone(),
            };
            of_type.push(template);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::convert::catalog::builder::CatalogBuilder;

    fn gpu(name: &str, memory: &str) -> wit::Device {
        wit::Device {
            name: name.to_owned(),
            attributes: vec![
                wit::Attribute {
                    name: "type".to_owned(),
                    value: wit::AttributeValue::Text("gpu".to_owned()),
                },
                wit::Attribute {
                    name: "gpu.example.com/index".to_owned(),
                    value: wit::AttributeValue::Int(0),
                },
            ],
            capacity: vec![wit::Quantity {
                name: "memory".to_owned(),
                value: memory.to_owned(),
            }],
            allow_multiple_allocations: false,
            consumes_counters: Vec::new(),
        }
    }

    fn answer(devices: Vec<wit::InstanceDevices>, memory: &str) -> wit::InstanceTypes {
        let mut b = CatalogBuilder::new();
        for name in ["c-4x", "g-8x", "g-16x"] {
            b.instance_type(name)
                .offering("zone-a", "on-demand", 1.0, true)
                .capacity("cpu", 4000);
        }
        wit::InstanceTypes {
            catalog: b.finish().into(),
            volume_limits: Vec::new(),
            slices: vec![
                wit::SliceTemplate {
                    driver: "gpu.example.com".to_owned(),
                    pool: "gpus".to_owned(),
                    devices: vec![gpu("gpu-0", memory), gpu("gpu-1", memory)],
                    shared_counters: Vec::new(),
                },
                wit::SliceTemplate {
                    driver: "nic.example.com".to_owned(),
                    pool: "nics".to_owned(),
                    devices: vec![gpu("nic-0", "1")],
                    shared_counters: Vec::new(),
                },
            ],
            devices,
        }
    }

    fn entry(instance_type: u32, slices: &[u32]) -> wit::InstanceDevices {
        wit::InstanceDevices {
            instance_type,
            slices: slices.to_vec(),
        }
    }

    #[test]
    fn each_type_gets_its_slices_converted_once_and_shared() {
        let answer = answer(vec![entry(1, &[0]), entry(2, &[0, 1])], "80Gi");
        let by_type = by_instance_type(&answer, 3).unwrap();
        assert!(by_type[0].is_empty());
        assert_eq!(by_type[1].len(), 1);
        assert_eq!(by_type[2].len(), 2);
        // One conversion, shared by both types.
        assert!(Arc::ptr_eq(&by_type[1][0], &by_type[2][0]));
        let gpus = &by_type[1][0];
        assert_eq!(gpus.driver, "gpu.example.com");
        assert_eq!(gpus.devices.len(), 2);
        let d = &gpus.devices[0];
        assert_eq!(
            d.attributes["type"],
            AttributeValue::String("gpu".to_owned())
        );
        assert_eq!(
            d.attributes["gpu.example.com/index"],
            AttributeValue::Int(0)
        );
        assert_eq!(d.capacity["memory"], Quantity::parse("80Gi").unwrap());
        assert_eq!(by_type[2][1].driver, "nic.example.com");
    }

    #[test]
    fn the_catalog_conversion_carries_the_devices() {
        let answer = answer(vec![entry(2, &[1])], "80Gi");
        let types = crate::catalog::from_answer(&answer).unwrap();
        assert!(types[0].devices.is_empty() && types[1].devices.is_empty());
        assert_eq!(types[2].devices[0].pool, "nics");
    }

    #[test]
    fn a_malformed_answer_is_refused_with_what_is_wrong() {
        let err =
            |answer: &wit::InstanceTypes| by_instance_type(answer, 3).unwrap_err().to_string();
        assert!(
            err(&answer(vec![entry(7, &[0])], "80Gi")).contains("instance type #7 out of range")
        );
        assert!(err(&answer(vec![entry(1, &[5])], "80Gi")).contains("slice #5 out of range"));
        let bad = err(&answer(vec![entry(1, &[0])], "lots"));
        assert!(bad.contains("gpu-0") && bad.contains("memory"), "{bad}");
        let mut nameless = answer(vec![entry(1, &[0])], "1");
        nameless.slices[0].devices[0].name.clear();
        assert!(err(&nameless).contains("a device without a name"));
    }
}
