//! What `create` launches: every (offering, zone, architecture) the claim's requirements and
//! requests allow, cheapest first; at equal price the NodeClass's zone order decides, so when
//! one zone has no capacity the next candidate is the same offering in the next zone.

use std::cmp::Ordering;

use capstan_provider_sdk::{Requirements, ResourceList};

use crate::catalog::{InstanceType, Placement, Resolved, Unavailable};

/// One way to launch the claim.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate<'a> {
    /// The instance type.
    pub instance_type: &'a InstanceType,
    /// Where.
    pub placement: &'a Placement,
    /// Index of the placement in the NodeClass's zone order.
    pub zone_rank: usize,
    /// Kubernetes architecture.
    pub arch: &'a str,
}

impl Candidate<'_> {
    /// The template to boot.
    pub fn template_id(&self) -> &str {
        self.placement
            .templates
            .get(self.arch)
            .map_or("", |t| t.id.as_str())
    }

    /// `(offering UUID, zone UUID)`, as [`Unavailable`] keys it.
    pub fn key(&self) -> (String, String) {
        (
            self.instance_type.offering_id.clone(),
            self.placement.zone_id.clone(),
        )
    }
}

fn order(a: &Candidate<'_>, b: &Candidate<'_>) -> Ordering {
    a.instance_type
        .price
        .total_cmp(&b.instance_type.price)
        .then_with(|| a.zone_rank.cmp(&b.zone_rank))
        .then_with(|| a.instance_type.name.cmp(&b.instance_type.name))
        .then_with(|| a.arch.cmp(b.arch))
}

/// Every launchable candidate for the claim, best first; none is an explanation (no offering
/// fits the claim, or all that do had no capacity recently).
pub fn candidates<'a>(
    resolved: &'a Resolved,
    claim: &Requirements,
    requests: &ResourceList,
    unavailable: &Unavailable,
) -> Result<Vec<Candidate<'a>>, String> {
    let mut out = Vec::new();
    let mut sold_out = 0usize;
    let mut too_small = 0usize;
    for t in &resolved.types {
        if t.allocatable().fits(requests).is_err() {
            too_small += 1;
            continue;
        }
        for &rank in &t.zones {
            let placement = &resolved.placements[rank];
            for arch in placement.templates.keys() {
                if t.requirements_at(placement, arch)
                    .intersects(claim)
                    .is_err()
                {
                    continue;
                }
                let c = Candidate {
                    instance_type: t,
                    placement,
                    zone_rank: rank,
                    arch,
                };
                if unavailable.contains(&c.key()) {
                    sold_out += 1;
                } else {
                    out.push(c);
                }
            }
        }
    }
    if out.is_empty() {
        return Err(if sold_out > 0 {
            format!("all {sold_out} offerings compatible with the claim had no capacity recently")
        } else {
            format!(
                "no offering among {} instance types meets the claim's requirements and requests ({too_small} too small for the requests)",
                resolved.types.len()
            )
        });
    }
    out.sort_by(order);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::tests::resolved;
    use capstan_provider_sdk::{Requirement, Resource, labels};
    use proptest::prelude::*;

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

    fn first(
        r: &[Requirement],
        q: &[(&str, &str)],
        unavailable: &Unavailable,
    ) -> (String, String, String) {
        let res = resolved();
        let c = candidates(&res, &reqs(r), &requests(q), unavailable).unwrap();
        let c = c[0];
        (
            c.instance_type.name.clone(),
            c.placement.zone_name.clone(),
            c.arch.to_string(),
        )
    }

    #[test]
    fn picks_the_cheapest_fitting_offering_not_the_first() {
        let none = Unavailable::new();
        assert_eq!(
            first(&[], &[], &none),
            ("small".into(), "zone-a".into(), "amd64".into())
        );
        assert_eq!(first(&[], &[("cpu", "1500m")], &none).0, "medium");
        assert_eq!(first(&[], &[("memory", "8Gi")], &none).0, "large");
        let gpu = first(&[], &[("nvidia.com/gpu", "1")], &none);
        assert_eq!((gpu.0.as_str(), gpu.1.as_str()), ("gpu-a10", "zone-b"));
        assert_eq!(
            first(&[Requirement::in_(labels::ZONE, ["zone-b"])], &[], &none).1,
            "zone-b"
        );
        assert_eq!(
            first(&[Requirement::in_(labels::ARCH, ["arm64"])], &[], &none).2,
            "arm64"
        );
        assert_eq!(
            first(
                &[Requirement::in_(labels::INSTANCE_TYPE, ["large", "medium"])],
                &[],
                &none
            )
            .0,
            "medium"
        );
        assert_eq!(
            first(&[Requirement::gt(crate::catalog::CPU_LABEL, 4)], &[], &none).0,
            "large"
        );
    }

    #[test]
    fn insufficient_capacity_falls_to_the_next_zone() {
        let res = resolved();
        let all = candidates(
            &res,
            &Requirements::new(),
            &ResourceList::new(),
            &Unavailable::new(),
        )
        .unwrap();
        let order: Vec<(&str, &str, &str)> = all
            .iter()
            .take(3)
            .map(|c| {
                (
                    c.instance_type.name.as_str(),
                    c.placement.zone_name.as_str(),
                    c.arch,
                )
            })
            .collect();
        assert_eq!(
            order,
            vec![
                ("small", "zone-a", "amd64"),
                ("small", "zone-a", "arm64"),
                ("small", "zone-b", "amd64")
            ]
        );
        let mut sold = Unavailable::new();
        sold.insert(("o-small".into(), "za-id".into()));
        assert_eq!(
            first(&[], &[], &sold),
            ("small".into(), "zone-b".into(), "amd64".into())
        );
        sold.insert(("o-small".into(), "zb-id".into()));
        assert_eq!(first(&[], &[], &sold).0, "medium");
    }

    #[test]
    fn nothing_fits_or_everything_sold_out() {
        let res = resolved();
        let none = candidates(
            &res,
            &reqs(&[Requirement::in_(labels::ZONE, ["mars"])]),
            &ResourceList::new(),
            &Unavailable::new(),
        );
        assert!(
            matches!(&none, Err(m) if m.starts_with("no offering")),
            "{none:?}"
        );
        let none = candidates(
            &res,
            &Requirements::new(),
            &requests(&[("cpu", "64")]),
            &Unavailable::new(),
        );
        assert!(matches!(none, Err(m) if m.contains("(4 too small")));
        let sold: Unavailable = [("o-small".to_string(), "za-id".to_string())]
            .into_iter()
            .collect();
        let only = reqs(&[
            Requirement::in_(labels::INSTANCE_TYPE, ["small"]),
            Requirement::in_(labels::ZONE, ["zone-a"]),
        ]);
        let err = candidates(&res, &only, &ResourceList::new(), &sold).unwrap_err();
        assert!(err.contains("had no capacity recently"), "{err}");
    }

    proptest! {
        #[test]
        fn the_first_candidate_is_never_dearer_than_any_other(cpu in 0u32..9000, mem_mib in 0u64..70000, zone in 0usize..3) {
            let res = resolved();
            let zones = [vec!["zone-a"], vec!["zone-b"], vec!["zone-a", "zone-b"]];
            let claim = reqs(&[Requirement::in_(labels::ZONE, zones[zone].clone())]);
            let q = requests(&[("cpu", &format!("{cpu}m")), ("memory", &format!("{mem_mib}Mi"))]);
            if let Ok(all) = candidates(&res, &claim, &q, &Unavailable::new()) {
                let best = all[0].instance_type.price;
                for c in &all {
                    prop_assert!(c.instance_type.price >= best);
                    prop_assert!(c.instance_type.allocatable().fits(&q).is_ok());
                    prop_assert!(zones[zone].contains(&c.placement.zone_name.as_str()));
                }
                // No compatible type is missing: every fitting type in an allowed zone is listed.
                for t in &res.types {
                    let fits = t.allocatable().fits(&q).is_ok();
                    let in_zone = t.zones.iter().any(|&i| zones[zone].contains(&res.placements[i].zone_name.as_str()));
                    prop_assert_eq!(fits && in_zone, all.iter().any(|c| c.instance_type.name == t.name));
                }
            }
        }
    }
}
