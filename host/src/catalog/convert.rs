//! A provider's flat WIT catalog converted to the scheduler's instance types: each distinct
//! requirement is converted once and cloned where instance types share it; the devices of the
//! types ([`devices`]) likewise.

pub mod devices;

use crate::provider::convert::catalog::{AmountView, CatalogView, RequirementView};
use crate::rules::snapshot::ProvisionError;
use crate::runtime::devices::InstanceTypes;
use crate::runtime::types as wit;
use crate::scheduling::resources::CPU;
use crate::scheduling::{InstanceType, Offering, Requirement, Requirements, Resources};

fn requirement(r: &RequirementView<'_>) -> Result<Requirement, ProvisionError> {
    let op = crate::provider::convert::operator_from_wit(r.operator());
    Ok(Requirement::new(r.key(), op, r.values())
        .map_err(|err| ProvisionError::InstanceType(format!("requirement {}: {err}", r.key())))?
        .with_min_values(r.min_values()))
}

/// Each distinct requirement of a catalog converted once, on first use.
struct RequirementCache<'a> {
    view: CatalogView<'a>,
    converted: Vec<Option<Requirement>>,
}

impl<'a> RequirementCache<'a> {
    fn new(view: CatalogView<'a>) -> Self {
        Self {
            view,
            converted: vec![None; view.catalog().requirements.len()],
        }
    }

    fn requirements(&mut self, indices: &[u32]) -> Result<Requirements, ProvisionError> {
        let mut out = Requirements::new();
        for &i in indices {
            let slot = self.converted.get_mut(i as usize).ok_or_else(|| {
                ProvisionError::InstanceType(format!("catalog: no requirement #{i}"))
            })?;
            let r = match slot {
                Some(r) => r,
                None => {
                    let view = self.view.requirement(i).ok_or_else(|| {
                        ProvisionError::InstanceType(format!("catalog: no requirement #{i}"))
                    })?;
                    slot.insert(requirement(&view)?)
                }
            };
            out.add_ref(r);
        }
        Ok(out)
    }
}

/// Amounts as a resource vector: cpu in millicores, everything else in whole units rounded up (a
/// later duplicate wins).
fn resources<'a>(amounts: impl IntoIterator<Item = AmountView<'a>>) -> Resources {
    let mut out = Resources::default();
    for a in amounts {
        out.set(
            a.name,
            if a.name == CPU {
                a.milli_value
            } else {
                a.units()
            },
        );
    }
    out
}

/// Every instance type of a `get-instance-types` answer as the scheduler sees it: the catalog
/// ([`from_catalog`]) with each type's volume attachment limits and DRA devices.
pub fn from_answer(answer: &InstanceTypes) -> Result<Vec<InstanceType>, ProvisionError> {
    let mut types = from_catalog(&answer.catalog)?;
    if !answer.devices.is_empty() {
        let devices = devices::by_instance_type(answer, types.len())?;
        for (it, slices) in types.iter_mut().zip(devices) {
            it.devices = slices;
        }
    }
    for limit in &answer.volume_limits {
        let bad = |what: String| ProvisionError::InstanceType(format!("volume-limits: {what}"));
        let len = types.len();
        let it = types.get_mut(limit.instance_type as usize).ok_or_else(|| {
            bad(format!(
                "instance type #{} out of range ({len} types)",
                limit.instance_type
            ))
        })?;
        let driver = answer
            .catalog
            .strings
            .get(limit.driver as usize)
            .filter(|d| !d.is_empty())
            .ok_or_else(|| bad(format!("no driver name at string #{}", limit.driver)))?;
        it.volume_limits
            .insert(driver.clone(), i64::from(limit.limit));
    }
    Ok(types)
}

/// Every instance type of a provider's catalog as the scheduler sees it, after checking the
/// catalog ([`CatalogView::new`]).
pub fn from_catalog(catalog: &wit::Catalog) -> Result<Vec<InstanceType>, ProvisionError> {
    let view =
        CatalogView::new(catalog).map_err(|err| ProvisionError::InstanceType(err.to_string()))?;
    let mut cache = RequirementCache::new(view);
    let mut types = Vec::with_capacity(view.len());
    for it in view.instance_types() {
        let mut offerings = Vec::with_capacity(it.offerings().len());
        for o in it.offerings() {
            let mut offering = Offering::new(o.zone(), o.capacity_type(), o.price());
            offering.available = o.available();
            offering.requirements = cache.requirements(o.requirement_indices())?;
            offerings.push(offering);
        }
        let mut overhead = Resources::default();
        for (_, list) in it.overhead_lists() {
            overhead.add(&resources(list));
        }
        types.push(InstanceType {
            name: it.name.to_owned(),
            requirements: cache.requirements(it.requirement_indices())?,
            offerings,
            capacity: resources(it.capacity()),
            overhead,
            volume_limits: Default::default(),
            devices: Vec::new(),
        });
    }
    Ok(types)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::labels::{CAPACITY_TYPE, ZONE};
    use crate::provider::convert::catalog::builder::CatalogBuilder;

    fn catalog() -> wit::Catalog {
        let mut b = CatalogBuilder::new();
        for name in ["c-4x", "c-8x"] {
            let mut t = b.instance_type(name);
            t.requirement_in("node.kubernetes.io/instance-type", &[name])
                .requirement_in(ZONE, &["zone-a"])
                .requirement_in(CAPACITY_TYPE, &["spot"])
                .requirement("example.com/gen", wit::Operator::Gt, &["3"], Some(1))
                .offering("zone-a", "spot", 0.25, true)
                .offering_requirement("example.com/reservation", wit::Operator::In, &["r"], None)
                .offering("zone-b", "on-demand", 0.5, false)
                .capacity("cpu", 4000)
                .capacity("memory", (8 << 30) * 1000)
                .capacity("pods", 110_000)
                .capacity("example.com/device", 1500)
                .kube_reserved("cpu", 100)
                .system_reserved("cpu", 100)
                .eviction_threshold("memory", (100 << 20) * 1000);
        }
        b.finish().into()
    }

    #[test]
    fn converts_a_catalog() {
        let types = from_catalog(&catalog()).unwrap();
        assert_eq!(types.len(), 2);
        let out = &types[1];
        assert_eq!(out.name, "c-8x");
        assert_eq!(out.offerings[0].zone, "zone-a");
        assert_eq!(out.offerings[0].capacity_type, "spot");
        assert_eq!(out.offerings[0].requirements.len(), 1);
        assert!(out.offerings[1].requirements.is_empty());
        assert!(!out.offerings[1].available);
        assert_eq!(out.offerings[1].price, 0.5);
        assert_eq!(out.requirements.len(), 4);
        let generation = out.requirements.get("example.com/gen").unwrap();
        assert_eq!(generation.min_values(), Some(1));
        assert_eq!(out.allocatable().cpu_millis, 3800);
        assert_eq!(out.capacity.memory, 8 << 30);
        assert_eq!(out.overhead.memory, 100 << 20);
        assert_eq!(out.capacity.pods, 110);
        // 1.5 devices round up to 2, as Kubernetes' Value() does.
        assert_eq!(out.capacity.get("example.com/device"), 2);
    }

    #[test]
    fn a_bad_catalog_is_an_error_not_a_panic() {
        let mut bad = catalog();
        bad.requirement_lists[0] = 1_000;
        let err = from_catalog(&bad).unwrap_err();
        assert!(err.to_string().contains("requirement-lists"), "{err}");
        let mut bad = catalog();
        bad.offerings[0].price = f64::NAN;
        assert!(from_catalog(&bad).is_err());
    }
}
