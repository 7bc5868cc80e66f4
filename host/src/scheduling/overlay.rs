//! NodeOverlays (`karpenter.sh/v1alpha1`, Karpenter v1.14's semantics) over a provider's
//! instance types: pure, no I/O.
//!
//! - **Matching.** An overlay applies to an instance type of a NodePool when its requirements
//!   are compatible with the type's requirements, the pool's template labels and
//!   `karpenter.sh/nodepool` (a key the overlay requires must be defined there), and to those of
//!   the type's offerings its requirements intersect (zone, capacity type, the offering's own
//!   requirements). A type none of whose offerings match is not matched.
//! - **Order.** Higher `weight` first (unset is 0); equal weights by name, the name later in
//!   the alphabet first.
//! - **Price.** The first overlay in that order that sets the price of an offering wins: `price`
//!   replaces it, `priceAdjustment` adds to it (`+0.1`, `-0.1`) or scales it (`+10%`, `-10%`),
//!   never below 0.
//! - **Capacity.** Per extended resource, the first overlay in that order that names it for a
//!   matched type wins (it replaces the provider's value); resources of several overlays merge.
//! - **Conflicts** ([`conflicts`]): two overlays of the same weight that both set the price of
//!   one offering, or both name one resource of one type, conflict. The later one in the order
//!   is refused as a whole (for every pool); [`apply`] is given only the overlays left.

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::api;
use crate::api::labels::{CAPACITY_TYPE, NODEPOOL, ZONE};

use super::convert::operator_of;
use super::quantity;
use super::resources::{CPU, EPHEMERAL_STORAGE, MEMORY, PODS};
use super::{InstanceType, Offering, Requirement, Requirements};

/// Why an overlay is not valid (Karpenter's runtime validation; the CRD refuses most of these
/// already).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OverlayError {
    #[error("requirement {key}: {message}")]
    Requirement { key: String, message: String },
    #[error("price {0:?} is not a non-negative decimal")]
    Price(String),
    #[error("priceAdjustment {0:?} is not +N, -N, +N% or -N% (at most -100%)")]
    Adjustment(String),
    #[error("cannot set both 'price' and 'priceAdjustment'")]
    PriceAndAdjustment,
    #[error(
        "capacity {0}: only extended resources may be added (not cpu, memory, ephemeral-storage, pods)"
    )]
    RestrictedResource(String),
    #[error("capacity {name}: {message}")]
    Quantity { name: String, message: String },
}

/// What an overlay does to the price of an offering.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PriceChange {
    /// `price`: this price.
    Set(f64),
    /// `priceAdjustment: +0.5` / `-0.5`: plus this amount.
    Add(f64),
    /// `priceAdjustment: +10%` / `-10%`: plus this percentage.
    Percent(f64),
}

impl PriceChange {
    /// `price`: a non-negative decimal.
    pub fn price(text: &str) -> Result<Self, OverlayError> {
        let bad = || OverlayError::Price(text.to_owned());
        if text.is_empty() || !text.chars().all(|c| c.is_ascii_digit() || c == '.') {
            return Err(bad());
        }
        let value: f64 = text.parse().map_err(|_| bad())?;
        value
            .is_finite()
            .then_some(Self::Set(value))
            .ok_or_else(bad)
    }

    /// `priceAdjustment`: `+N`, `-N`, `+N%`, or `-N%` with N at most 100.
    pub fn adjustment(text: &str) -> Result<Self, OverlayError> {
        let bad = || OverlayError::Adjustment(text.to_owned());
        let (negative, rest) = match text.as_bytes().first() {
            Some(b'+') => (false, &text[1..]),
            Some(b'-') => (true, &text[1..]),
            _ => return Err(bad()),
        };
        let (number, percent) = match rest.strip_suffix('%') {
            Some(number) => (number, true),
            None => (rest, false),
        };
        if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit() || c == '.') {
            return Err(bad());
        }
        let magnitude: f64 = number.parse().map_err(|_| bad())?;
        if !magnitude.is_finite() || (percent && negative && magnitude > 100.0) {
            return Err(bad());
        }
        let value = if negative { -magnitude } else { magnitude };
        Ok(if percent {
            Self::Percent(value)
        } else {
            Self::Add(value)
        })
    }

    /// The price after the change (never below 0).
    pub fn apply(self, price: f64) -> f64 {
        let changed = match self {
            Self::Set(value) => return value,
            Self::Add(delta) => price + delta,
            Self::Percent(percent) => price * (1.0 + percent / 100.0),
        };
        changed.max(0.0)
    }
}

impl fmt::Display for PriceChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Set(v) => write!(f, "{v}"),
            Self::Add(v) => write!(f, "{v:+}"),
            Self::Percent(v) => write!(f, "{v:+}%"),
        }
    }
}

/// A NodeOverlay as the scheduler applies it.
#[derive(Clone, Debug, PartialEq)]
pub struct Overlay {
    pub name: String,
    /// `spec.weight`, 0 when unset.
    pub weight: i32,
    pub requirements: Requirements,
    pub price: Option<PriceChange>,
    /// Extended resources in whole units, sorted by name.
    pub capacity: Vec<(String, i64)>,
}

impl Overlay {
    /// Reads and validates a NodeOverlay.
    pub fn from_api(overlay: &api::NodeOverlay) -> Result<Self, OverlayError> {
        let spec = &overlay.spec;
        let mut requirements = Requirements::new();
        for r in &spec.requirements {
            let requirement = Requirement::new(
                r.key.as_str(),
                operator_of(r.operator),
                r.values.iter().cloned(),
            )
            .map_err(|err| OverlayError::Requirement {
                key: r.key.clone(),
                message: err.to_string(),
            })?;
            if matches!(
                r.operator,
                api::NodeSelectorOperator::In | api::NodeSelectorOperator::NotIn
            ) && r.values.is_empty()
            {
                return Err(OverlayError::Requirement {
                    key: r.key.clone(),
                    message: format!("operator {:?} needs a value", r.operator),
                });
            }
            requirements.add(requirement);
        }
        let price = match (&spec.price, &spec.price_adjustment) {
            (Some(_), Some(_)) => return Err(OverlayError::PriceAndAdjustment),
            (Some(price), None) => Some(PriceChange::price(price)?),
            (None, Some(adjustment)) => Some(PriceChange::adjustment(adjustment)?),
            (None, None) => None,
        };
        let mut capacity = Vec::new();
        for (name, amount) in spec.capacity.iter().flatten() {
            if [CPU, MEMORY, EPHEMERAL_STORAGE, PODS].contains(&name.as_str()) {
                return Err(OverlayError::RestrictedResource(name.clone()));
            }
            let units =
                quantity::parse_units(amount.as_str()).map_err(|err| OverlayError::Quantity {
                    name: name.clone(),
                    message: err.to_string(),
                })?;
            capacity.push((name.clone(), units));
        }
        Ok(Self {
            name: overlay.metadata.name.clone().unwrap_or_default(),
            weight: spec.weight.unwrap_or(0),
            requirements,
            price,
            capacity,
        })
    }

    /// The offerings (indices) of `it` in `pool` this overlay applies to; empty when it does
    /// not match the type.
    pub fn matching_offerings(&self, pool: Pool<'_>, it: &InstanceType) -> Vec<usize> {
        let mut type_requirements = it.requirements.clone();
        type_requirements.merge(&Requirements::from_labels(
            pool.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        ));
        type_requirements.add(Requirement::in_(NODEPOOL, [pool.name]));
        if type_requirements
            .compatible(&self.requirements, |_| false)
            .is_err()
        {
            return Vec::new();
        }
        it.offerings
            .iter()
            .enumerate()
            .filter(|(_, o)| {
                self.requirements
                    .intersects(&offering_requirements(o))
                    .is_ok()
            })
            .map(|(i, _)| i)
            .collect()
    }
}

/// An offering's labels as requirements: zone, capacity type and its own requirements.
fn offering_requirements(offering: &Offering) -> Requirements {
    let mut out = offering.requirements.clone();
    out.add(Requirement::in_(ZONE, [offering.zone.as_str()]));
    out.add(Requirement::in_(
        CAPACITY_TYPE,
        [offering.capacity_type.as_str()],
    ));
    out
}

/// Sorts overlays in the order they apply: higher weight first, then the name later in the
/// alphabet first (Karpenter's `OrderByWeight`).
pub fn order(overlays: &mut [Overlay]) {
    overlays.sort_by(|a, b| b.weight.cmp(&a.weight).then_with(|| b.name.cmp(&a.name)));
}

/// What of a NodePool an overlay matches on besides the instance type: its name and template
/// labels.
#[derive(Clone, Copy, Debug)]
pub struct Pool<'a> {
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
}

/// One pool's instance types, as [`conflicts`] looks at them.
#[derive(Clone, Copy, Debug)]
pub struct Catalog<'a> {
    pub pool: Pool<'a>,
    pub types: &'a [InstanceType],
}

/// The overlay of the lowest weight that matched something so far, and that weight (Karpenter
/// compares a later overlay's weight with it).
#[derive(Debug)]
struct Claimed<'a> {
    by: &'a str,
    lowest_weight: i32,
}

/// The resources of one type named at the lowest weight so far, and by whom.
type ClaimedResources<'a> = (Claimed<'a>, &'a [(String, i64)]);

/// The overlays of `ordered` (in [`order`]) that conflict with an overlay before them, with why.
/// Each is left out before the next is looked at, as Karpenter does.
pub fn conflicts(ordered: &[Overlay], catalogs: &[Catalog<'_>]) -> BTreeMap<String, String> {
    // (catalog, type, offering) → who set its price; (catalog, type) → resources set at the
    // lowest weight so far, by whom.
    let mut prices: BTreeMap<(usize, usize, usize), Claimed<'_>> = BTreeMap::new();
    let mut capacity: BTreeMap<(usize, usize), ClaimedResources<'_>> = BTreeMap::new();
    let mut refused = BTreeMap::new();
    for overlay in ordered {
        let matches: Vec<(usize, usize, Vec<usize>)> = catalogs
            .iter()
            .enumerate()
            .flat_map(|(c, catalog)| {
                catalog.types.iter().enumerate().filter_map(move |(t, it)| {
                    let offerings = overlay.matching_offerings(catalog.pool, it);
                    (!offerings.is_empty()).then_some((c, t, offerings))
                })
            })
            .collect();
        let conflict = matches.iter().find_map(|(c, t, offerings)| {
            let it = &catalogs[*c].types[*t];
            let pool = catalogs[*c].pool.name;
            if overlay.price.is_some() {
                for o in offerings {
                    if let Some(claimed) = prices.get(&(*c, *t, *o))
                        && claimed.lowest_weight == overlay.weight
                    {
                        let offering = &it.offerings[*o];
                        return Some(format!(
                            "conflicts with NodeOverlay {} (weight {}) on the price of {} {}/{} in NodePool {pool}",
                            claimed.by,
                            overlay.weight,
                            it.name,
                            offering.zone,
                            offering.capacity_type
                        ));
                    }
                }
            }
            if let Some((claimed, resources)) = capacity.get(&(*c, *t))
                && claimed.lowest_weight == overlay.weight
                && let Some((name, _)) = overlay
                    .capacity
                    .iter()
                    .find(|(name, _)| resources.iter().any(|(n, _)| n == name))
            {
                return Some(format!(
                    "conflicts with NodeOverlay {} (weight {}) on the capacity {name} of {} in NodePool {pool}",
                    claimed.by, overlay.weight, it.name
                ));
            }
            None
        });
        if let Some(why) = conflict {
            refused.insert(overlay.name.clone(), why);
            continue;
        }
        for (c, t, offerings) in matches {
            if overlay.price.is_some() {
                for o in offerings {
                    prices
                        .entry((c, t, o))
                        .and_modify(|claimed| {
                            claimed.by = &overlay.name;
                            claimed.lowest_weight = overlay.weight;
                        })
                        .or_insert(Claimed {
                            by: &overlay.name,
                            lowest_weight: overlay.weight,
                        });
                }
            }
            if !overlay.capacity.is_empty() {
                capacity.insert(
                    (c, t),
                    (
                        Claimed {
                            by: &overlay.name,
                            lowest_weight: overlay.weight,
                        },
                        &overlay.capacity,
                    ),
                );
            }
        }
    }
    refused
}

/// Orders `overlays` and leaves out the ones that conflict over `catalogs`: the overlays to
/// [`apply`], and the refused ones with why.
pub fn accept(
    mut overlays: Vec<Overlay>,
    catalogs: &[Catalog<'_>],
) -> (Vec<Overlay>, BTreeMap<String, String>) {
    order(&mut overlays);
    let refused = conflicts(&overlays, catalogs);
    overlays.retain(|o| !refused.contains_key(&o.name));
    (overlays, refused)
}

/// One NodePool's catalog as the host holds it: the pool's name, its template labels
/// ([`template_labels`]) and its instance types.
pub type PoolCatalog = (String, BTreeMap<String, String>, Arc<[InstanceType]>);

/// [`accept`] over catalogs the host holds.
pub fn accept_over(
    overlays: Vec<Overlay>,
    catalogs: &[PoolCatalog],
) -> (Vec<Overlay>, BTreeMap<String, String>) {
    let targets: Vec<Catalog<'_>> = catalogs
        .iter()
        .map(|(name, labels, types)| Catalog {
            pool: Pool { name, labels },
            types,
        })
        .collect();
    accept(overlays, &targets)
}

/// A NodePool's template labels (what an overlay matches besides the instance type).
pub fn template_labels(pool: &api::NodePool) -> BTreeMap<String, String> {
    pool.spec
        .template
        .metadata
        .as_ref()
        .map(|m| m.labels.clone())
        .unwrap_or_default()
}

/// What [`apply`] changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Instance types with at least one offering's price changed.
    pub priced: Vec<String>,
    /// Instance types with capacity added.
    pub extended: Vec<String>,
}

/// `types` of `pool` with the overlays of `ordered` (in [`order`], conflicting ones left out)
/// applied, and what changed.
pub fn apply(
    ordered: &[Overlay],
    pool: Pool<'_>,
    types: &[InstanceType],
) -> (Vec<InstanceType>, Applied) {
    let mut applied = Applied::default();
    let mut out = types.to_vec();
    for it in &mut out {
        let mut priced = vec![false; it.offerings.len()];
        let mut named: Vec<&str> = Vec::new();
        for overlay in ordered {
            if overlay.price.is_none() && overlay.capacity.is_empty() {
                continue;
            }
            let offerings = overlay.matching_offerings(pool, it);
            if offerings.is_empty() {
                continue;
            }
            if let Some(change) = overlay.price {
                for o in offerings {
                    if !priced[o] {
                        priced[o] = true;
                        let offering = &mut it.offerings[o];
                        offering.listed_price.get_or_insert(offering.price);
                        offering.price = change.apply(offering.price);
                    }
                }
            }
            for (name, units) in &overlay.capacity {
                if !named.contains(&name.as_str()) {
                    named.push(name);
                    it.capacity.set(name, *units);
                }
            }
        }
        if priced.contains(&true) {
            applied.priced.push(it.name.clone());
        }
        if !named.is_empty() {
            applied.extended.push(it.name.clone());
        }
    }
    (out, applied)
}
