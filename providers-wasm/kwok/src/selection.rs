//! Choosing what to launch for a claim: the cheapest available offering whose instance type and
//! place meet the claim's requirements and whose allocatable resources cover its requests.

use std::cmp::Ordering;

use capstan_provider_sdk::{Requirements, ResourceList};

use crate::catalog::{Entry, Offer};

/// What to launch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Launch<'a> {
    /// The instance type.
    pub entry: &'a Entry,
    /// The offering (zone, capacity type, price).
    pub offer: &'a Offer,
}

/// Why nothing can be launched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoLaunch {
    /// No offering meets the requirements and requests at all.
    Incompatible(String),
    /// Some do, but every one of them is unavailable.
    Unavailable(String),
}

impl NoLaunch {
    /// The explanation, for the `insufficient-capacity` error.
    pub fn message(&self) -> &str {
        match self {
            NoLaunch::Incompatible(m) | NoLaunch::Unavailable(m) => m,
        }
    }
}

/// The cheapest available compatible offering; ties go to the instance type name, then zone, then
/// capacity type, so the choice is deterministic.
pub fn cheapest<'a>(
    catalog: &'a [Entry],
    claim: &Requirements,
    requests: &ResourceList,
) -> Result<Launch<'a>, NoLaunch> {
    let mut best: Option<Launch<'a>> = None;
    let mut unavailable = 0usize;
    let mut too_small = 0usize;
    for entry in catalog {
        if entry.allocatable().fits(requests).is_err() {
            too_small += 1;
            continue;
        }
        for offer in &entry.offers {
            if entry.offer_requirements(offer).intersects(claim).is_err() {
                continue;
            }
            if !offer.available {
                unavailable += 1;
                continue;
            }
            let candidate = Launch { entry, offer };
            if best.is_none_or(|b| order(&candidate, &b) == Ordering::Less) {
                best = Some(candidate);
            }
        }
    }
    match best {
        Some(launch) => Ok(launch),
        None if unavailable > 0 => Err(NoLaunch::Unavailable(format!(
            "all {unavailable} offerings compatible with the claim are unavailable"
        ))),
        None => Err(NoLaunch::Incompatible(format!(
            "no offering among {} instance types meets the claim's requirements and requests ({too_small} too small for the requests)",
            catalog.len()
        ))),
    }
}

fn order(a: &Launch<'_>, b: &Launch<'_>) -> Ordering {
    a.offer
        .price
        .total_cmp(&b.offer.price)
        .then_with(|| a.entry.name.cmp(&b.entry.name))
        .then_with(|| a.offer.zone.cmp(&b.offer.zone))
        .then_with(|| a.offer.capacity_type.cmp(&b.offer.capacity_type))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;
    use crate::params::Parameters;
    use capstan_provider_sdk::{Requirement, Resource, labels};

    fn catalog(params: &str) -> Vec<Entry> {
        catalog::build(&Parameters::parse(params).unwrap()).unwrap()
    }

    fn reqs(list: &[Requirement]) -> Requirements {
        Requirements::from_slice(list).unwrap()
    }

    fn requests(list: &[(&str, &str)]) -> ResourceList {
        ResourceList::from_resources(
            &list
                .iter()
                .map(|(n, q)| Resource::new(*n, *q))
                .collect::<Vec<_>>(),
        )
        .unwrap()
    }

    fn pick(cat: &[Entry], r: &[Requirement], q: &[(&str, &str)]) -> (String, String, String) {
        let l = cheapest(cat, &reqs(r), &requests(q)).unwrap();
        (
            l.entry.name.clone(),
            l.offer.zone.clone(),
            l.offer.capacity_type.clone(),
        )
    }

    #[test]
    fn picks_the_cheapest_fitting_offering() {
        let cat = catalog("{}");
        let (name, zone, ct) = pick(&cat, &[], &[("cpu", "500m")]);
        assert_eq!(
            (name.as_str(), zone.as_str(), ct.as_str()),
            ("c-1x-amd64-linux", "test-zone-a", "spot")
        );
        let (name, _, _) = pick(&cat, &[], &[("cpu", "1"), ("memory", "1Gi")]);
        assert_eq!(name, "c-2x-amd64-linux", "1x has only 900m allocatable");
        let (name, _, _) = pick(&cat, &[], &[("memory", "30Gi")]);
        assert_eq!(name, "m-4x-amd64-linux");
        let (name, _, _) = pick(&cat, &[], &[("pods", "100")]);
        assert_eq!(name, "c-8x-amd64-linux");
    }

    #[test]
    fn honours_every_operator() {
        let cat = catalog("{}");
        let (name, zone, ct) = pick(
            &cat,
            &[
                Requirement::in_(labels::CAPACITY_TYPE, ["on-demand"]),
                Requirement::not_in(labels::ZONE, ["test-zone-a", "test-zone-b"]),
                Requirement::in_(labels::ARCH, ["arm64"]),
                Requirement::exists(labels::INSTANCE_TYPE),
                Requirement::does_not_exist("example.com/gpu"),
                Requirement::gt(catalog::CPU_LABEL, 2),
                Requirement::lt(catalog::CPU_LABEL, 8),
            ],
            &[],
        );
        assert_eq!(name, "c-4x-arm64-linux");
        assert_eq!(zone, "test-zone-c");
        assert_eq!(ct, "on-demand");
        let (name, _, _) = pick(
            &cat,
            &[Requirement::in_(
                labels::INSTANCE_TYPE,
                ["m-2x-amd64-linux", "s-2x-amd64-linux"],
            )],
            &[],
        );
        assert_eq!(name, "s-2x-amd64-linux");
        let (name, _, _) = pick(&cat, &[Requirement::in_(catalog::FAMILY_LABEL, ["m"])], &[]);
        assert_eq!(name, "m-1x-amd64-linux");
    }

    #[test]
    fn claim_labels_outside_the_catalog_do_not_block() {
        let cat = catalog("{}");
        let (name, _, _) = pick(
            &cat,
            &[
                Requirement::in_(labels::NODE_POOL, ["default"]),
                Requirement::in_("team", ["a"]),
            ],
            &[],
        );
        assert_eq!(name, "c-1x-amd64-linux");
    }

    #[test]
    fn nothing_compatible_or_everything_unavailable() {
        let cat = catalog("{}");
        let none = cheapest(
            &cat,
            &reqs(&[Requirement::in_(labels::ZONE, ["mars"])]),
            &ResourceList::new(),
        );
        assert!(matches!(none, Err(NoLaunch::Incompatible(_))));
        let none = cheapest(
            &cat,
            &reqs(&[Requirement::in_(labels::REGION, ["us-east-1"])]),
            &ResourceList::new(),
        );
        assert!(matches!(none, Err(NoLaunch::Incompatible(_))));
        let none = cheapest(&cat, &Requirements::new(), &requests(&[("cpu", "1000")]));
        assert!(matches!(none, Err(NoLaunch::Incompatible(_))));

        let sold_out = catalog(r#"{"unavailableOfferings":[{"zone":"test-zone-a"}]}"#);
        let in_a = reqs(&[Requirement::in_(labels::ZONE, ["test-zone-a"])]);
        let err = cheapest(&sold_out, &in_a, &ResourceList::new()).unwrap_err();
        assert!(matches!(err, NoLaunch::Unavailable(_)), "{err:?}");
        let (_, zone, _) = pick(&sold_out, &[], &[]);
        assert_eq!(zone, "test-zone-b", "falls back to an available zone");
    }
}
