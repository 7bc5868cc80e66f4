//! Prices: what a running node costs, what a replacement would cost, and narrowing a
//! replacement to the instance types cheaper than what it replaces.

use crate::api::labels::{CAPACITY_TYPE, INSTANCE_TYPE, ZONE};
use crate::scheduling::{ChosenOffering, InstanceType, NewClaim, Requirements, ValueSet};

/// What a node of `it` in `zone` bought as `capacity_type` costs per hour (any offering of that
/// zone and capacity type, available now or not: the node already runs).
pub fn node_price(it: &InstanceType, zone: &str, capacity_type: &str) -> Option<f64> {
    it.offerings
        .iter()
        .filter(|o| o.zone == zone && o.capacity_type == capacity_type)
        .map(|o| o.price)
        .filter(|p| p.is_finite())
        .min_by(f64::total_cmp)
}

fn allows(requirements: &Requirements, key: &str, value: &str) -> bool {
    requirements.set_of(key).is_none_or(|s| s.contains(value))
}

/// The cheapest offering of `it` a claim with `requirements` could launch now.
pub fn launch_offering(it: &InstanceType, requirements: &Requirements) -> Option<ChosenOffering> {
    it.offerings
        .iter()
        .filter(|o| o.available && o.price.is_finite())
        .filter(|o| allows(requirements, ZONE, &o.zone))
        .filter(|o| allows(requirements, CAPACITY_TYPE, &o.capacity_type))
        .min_by(|a, b| a.price.total_cmp(&b.price))
        .map(|o| ChosenOffering {
            instance_type: it.name.clone(),
            zone: o.zone.clone(),
            capacity_type: o.capacity_type.clone(),
            price: o.price,
        })
}

/// Why a replacement cannot be narrowed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NarrowError {
    #[error("Can't replace with a cheaper node: it costs ${price:.4}/h, {}", cheapest_text(*.cheapest))]
    NoCheaper {
        /// $/h of what would be replaced.
        price: f64,
        /// $/h of the cheapest node its pods could move to, if any type can launch.
        cheapest: Option<f64>,
    },
    #[error("Filtering by price: minValues {min} for {key} not met: only {have} value(s) remain")]
    MinValues { key: String, min: u32, have: usize },
}

fn cheapest_text(cheapest: Option<f64>) -> String {
    match cheapest {
        Some(p) => format!("the cheapest replacement ${p:.4}/h"),
        None => "and no instance type its pods fit can launch".to_owned(),
    }
}

/// `claim` with its options cut to the types whose cheapest launchable offering is below
/// `max_price` (then, when `limit` is set, to the cheapest `limit` of those — more if
/// `minValues` needs them), cheapest first, its instance-type requirement and price updated.
pub fn narrow(
    claim: &NewClaim,
    types: &[InstanceType],
    max_price: f64,
    limit: Option<usize>,
) -> Result<NewClaim, NarrowError> {
    let launchable: Vec<(&InstanceType, ChosenOffering)> = claim
        .instance_type_options
        .iter()
        .filter_map(|name| types.iter().find(|t| &t.name == name))
        .filter_map(|it| Some((it, launch_offering(it, &claim.requirements)?)))
        .collect();
    let cheapest = launchable
        .iter()
        .map(|(_, o)| o.price)
        .min_by(f64::total_cmp);
    let mut options: Vec<(&InstanceType, ChosenOffering)> = launchable
        .into_iter()
        .filter(|(_, o)| o.price < max_price)
        .collect();
    options.sort_by(|a, b| {
        a.1.price
            .total_cmp(&b.1.price)
            .then_with(|| a.0.name.cmp(&b.0.name))
    });
    if options.is_empty() {
        return Err(NarrowError::NoCheaper {
            price: max_price,
            cheapest,
        });
    }
    check_min_values(&options, &claim.requirements)?;
    if let Some(limit) = limit {
        let mut keep = limit.min(options.len());
        while keep < options.len()
            && check_min_values(&options[..keep], &claim.requirements).is_err()
        {
            keep += 1;
        }
        options.truncate(keep);
    }
    let mut narrowed = claim.clone();
    narrowed.instance_type_options = options.iter().map(|(it, _)| it.name.clone()).collect();
    narrowed.requirements.set(
        INSTANCE_TYPE,
        ValueSet::in_(narrowed.instance_type_options.iter().cloned()),
    );
    let cheapest = options[0].1.clone();
    narrowed.cheapest_price = cheapest.price;
    narrowed.cheapest_offering = cheapest;
    Ok(narrowed)
}

/// Every `minValues` of `requirements` still met by `options`.
fn check_min_values(
    options: &[(&InstanceType, ChosenOffering)],
    requirements: &Requirements,
) -> Result<(), NarrowError> {
    for r in requirements.iter() {
        let Some(min) = r.min_values() else { continue };
        let mut values: Vec<&str> = Vec::new();
        for (it, _) in options {
            if r.key() == INSTANCE_TYPE {
                values.push(it.name.as_str());
                continue;
            }
            if let Some(set) = it
                .requirements
                .set_of(r.key())
                .filter(|s| !s.is_complement())
            {
                values.extend(
                    set.values()
                        .iter()
                        .filter(|v| r.set().contains(v))
                        .map(String::as_str),
                );
            }
        }
        values.sort_unstable();
        values.dedup();
        if values.len() < min as usize {
            return Err(NarrowError::MinValues {
                key: r.key().to_owned(),
                min,
                have: values.len(),
            });
        }
    }
    Ok(())
}
