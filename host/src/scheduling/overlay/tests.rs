use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::api::labels::INSTANCE_TYPE;
use crate::api::nodeoverlay::{NodeOverlaySpec, OverlayRequirement};
use crate::api::{NodeOverlay, NodeSelectorOperator, Quantity};
use crate::scheduling::Resources;

fn it(name: &str, prices: &[(&str, &str, f64)]) -> InstanceType {
    let zones: Vec<&str> = prices.iter().map(|p| p.0).collect();
    let types: Vec<&str> = prices.iter().map(|p| p.1).collect();
    InstanceType {
        name: name.to_owned(),
        requirements: Requirements::new()
            .with(Requirement::in_(INSTANCE_TYPE, [name]))
            .with(Requirement::in_(ZONE, zones))
            .with(Requirement::in_(CAPACITY_TYPE, types)),
        offerings: prices
            .iter()
            .map(|(zone, ct, price)| Offering::new(*zone, *ct, *price))
            .collect(),
        capacity: Resources::new(4000, 8 << 30, 110),
        overhead: Resources::default(),
        volume_limits: Default::default(),
        devices: Vec::new(),
    }
}

fn catalog() -> Vec<InstanceType> {
    vec![
        it(
            "small",
            &[
                ("a", "on-demand", 1.0),
                ("a", "spot", 0.5),
                ("b", "on-demand", 1.2),
            ],
        ),
        it("large", &[("a", "on-demand", 4.0), ("b", "spot", 2.0)]),
    ]
}

fn overlay(name: &str, weight: i32, reqs: &[(&str, &[&str])]) -> Overlay {
    Overlay {
        name: name.to_owned(),
        weight,
        requirements: reqs
            .iter()
            .map(|(k, v)| Requirement::in_(*k, v.iter().copied()))
            .collect(),
        price: None,
        capacity: Vec::new(),
    }
}

fn priced(mut o: Overlay, change: PriceChange) -> Overlay {
    o.price = Some(change);
    o
}

fn with_capacity(mut o: Overlay, name: &str, units: i64) -> Overlay {
    o.capacity.push((name.to_owned(), units));
    o
}

const NO_LABELS: &BTreeMap<String, String> = &BTreeMap::new();

fn pool(name: &str) -> Pool<'_> {
    Pool {
        name,
        labels: NO_LABELS,
    }
}

fn prices(types: &[InstanceType]) -> Vec<Vec<f64>> {
    types
        .iter()
        .map(|t| t.offerings.iter().map(|o| o.price).collect())
        .collect()
}

#[test]
fn prices_and_adjustments_parse_as_karpenters_pattern() {
    assert_eq!(PriceChange::price("0.25"), Ok(PriceChange::Set(0.25)));
    assert_eq!(PriceChange::price("3"), Ok(PriceChange::Set(3.0)));
    for bad in ["", "-1", "+1", "1e3", "abc", "1%"] {
        assert!(PriceChange::price(bad).is_err(), "{bad}");
    }
    assert_eq!(PriceChange::adjustment("+0.1"), Ok(PriceChange::Add(0.1)));
    assert_eq!(PriceChange::adjustment("-.5"), Ok(PriceChange::Add(-0.5)));
    assert_eq!(
        PriceChange::adjustment("+10%"),
        Ok(PriceChange::Percent(10.0))
    );
    assert_eq!(
        PriceChange::adjustment("+250%"),
        Ok(PriceChange::Percent(250.0))
    );
    assert_eq!(
        PriceChange::adjustment("-100%"),
        Ok(PriceChange::Percent(-100.0))
    );
    for bad in ["0.1", "10%", "-101%", "+", "+%", "+1x", "--1"] {
        assert!(PriceChange::adjustment(bad).is_err(), "{bad}");
    }
}

#[test]
fn changes_apply_and_never_go_below_zero() {
    assert_eq!(PriceChange::Set(0.3).apply(1.0), 0.3);
    assert!((PriceChange::Add(0.1).apply(1.0) - 1.1).abs() < 1e-9);
    assert_eq!(PriceChange::Add(-2.0).apply(1.0), 0.0);
    assert!((PriceChange::Percent(10.0).apply(2.0) - 2.2).abs() < 1e-9);
    assert!((PriceChange::Percent(-25.0).apply(2.0) - 1.5).abs() < 1e-9);
    assert_eq!(PriceChange::Percent(-100.0).apply(2.0), 0.0);
}

#[test]
fn matches_instance_type_zone_capacity_type_and_pool() {
    let types = catalog();
    let small = &types[0];
    let p = pool("default");
    // Every offering of the type.
    let o = overlay("a", 0, &[(INSTANCE_TYPE, &["small"])]);
    assert_eq!(o.matching_offerings(p, small), vec![0, 1, 2]);
    // A zone and a capacity type narrow the offerings.
    let o = overlay("a", 0, &[(ZONE, &["a"]), (CAPACITY_TYPE, &["spot"])]);
    assert_eq!(o.matching_offerings(p, small), vec![1]);
    assert!(o.matching_offerings(p, &types[1]).is_empty());
    // The pool's name, and its template labels.
    let o = overlay("a", 0, &[(NODEPOOL, &["other"])]);
    assert!(o.matching_offerings(p, small).is_empty());
    let o = overlay("a", 0, &[("example.com/team", &["ml"])]);
    assert!(
        o.matching_offerings(p, small).is_empty(),
        "a label the pool does not define does not match"
    );
    let labels = BTreeMap::from([("example.com/team".to_owned(), "ml".to_owned())]);
    let labelled = Pool {
        name: "default",
        labels: &labels,
    };
    assert_eq!(o.matching_offerings(labelled, small), vec![0, 1, 2]);
    // NotIn on an undefined label matches; no requirements match everything.
    let mut o = overlay("a", 0, &[]);
    assert_eq!(o.matching_offerings(p, small).len(), 3);
    o.requirements
        .add(Requirement::not_in("example.com/gpu", ["true"]));
    assert_eq!(o.matching_offerings(p, small).len(), 3);
}

#[test]
fn the_heaviest_overlay_sets_the_price_and_the_rest_stay() {
    let types = catalog();
    let mut overlays = vec![
        priced(
            overlay("cheap-spot", 10, &[(CAPACITY_TYPE, &["spot"])]),
            PriceChange::Set(0.01),
        ),
        priced(overlay("everything", 1, &[]), PriceChange::Percent(100.0)),
    ];
    order(&mut overlays);
    assert!(
        conflicts(
            &overlays,
            &[Catalog {
                pool: pool("p"),
                types: &types
            }]
        )
        .is_empty()
    );
    let (out, applied) = apply(&overlays, pool("p"), &types);
    assert_eq!(prices(&out), vec![vec![2.0, 0.01, 2.4], vec![8.0, 0.01]]);
    assert_eq!(applied.priced, vec!["small", "large"]);
    assert!(applied.extended.is_empty());
    // The provider's catalog is untouched, and each re-priced offering keeps its listed price.
    assert_eq!(prices(&types)[0], vec![1.0, 0.5, 1.2]);
    let listed: Vec<Option<f64>> = out[0].offerings.iter().map(|o| o.listed_price).collect();
    assert_eq!(listed, vec![Some(1.0), Some(0.5), Some(1.2)]);
}

#[test]
fn equal_weights_setting_one_price_conflict() {
    let types = catalog();
    let catalogs = [Catalog {
        pool: pool("p"),
        types: &types,
    }];
    let mut overlays = vec![
        priced(
            overlay("a", 5, &[(INSTANCE_TYPE, &["small"])]),
            PriceChange::Set(1.0),
        ),
        priced(overlay("b", 5, &[(ZONE, &["a"])]), PriceChange::Set(2.0)),
        // Same weight, other offerings: no conflict.
        priced(
            overlay("c", 5, &[(INSTANCE_TYPE, &["large"]), (ZONE, &["b"])]),
            PriceChange::Set(3.0),
        ),
    ];
    order(&mut overlays);
    assert_eq!(
        overlays.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(),
        ["c", "b", "a"]
    );
    let refused = conflicts(&overlays, &catalogs);
    assert_eq!(refused.keys().collect::<Vec<_>>(), ["a"]);
    assert!(refused["a"].contains("NodeOverlay b"), "{}", refused["a"]);
    assert!(
        refused["a"].contains("small a/on-demand"),
        "{}",
        refused["a"]
    );
    // Another weight does not conflict: the heavier one wins.
    overlays[2].weight = 4;
    order(&mut overlays);
    assert!(conflicts(&overlays, &catalogs).is_empty());
    let (out, _) = apply(&overlays, pool("p"), &types);
    assert_eq!(prices(&out), vec![vec![2.0, 2.0, 1.0], vec![2.0, 3.0]]);
}

#[test]
fn a_lighter_overlay_in_between_takes_the_weight_a_conflict_is_judged_by() {
    // As Karpenter: once an overlay of weight 5 matched an offering (even without winning it),
    // another of weight 5 conflicts there.
    let types = catalog();
    let catalogs = [Catalog {
        pool: pool("p"),
        types: &types,
    }];
    let mut overlays = vec![
        priced(overlay("heavy", 10, &[]), PriceChange::Set(1.0)),
        priced(overlay("b", 5, &[]), PriceChange::Set(2.0)),
        priced(overlay("a", 5, &[]), PriceChange::Set(3.0)),
    ];
    order(&mut overlays);
    let refused = conflicts(&overlays, &catalogs);
    assert_eq!(refused.keys().collect::<Vec<_>>(), ["a"]);
    assert!(refused["a"].contains("NodeOverlay b"), "{}", refused["a"]);
}

#[test]
fn a_conflict_in_any_pool_refuses_the_overlay() {
    let types = catalog();
    let labels = BTreeMap::from([("team".to_owned(), "ml".to_owned())]);
    let catalogs = [
        Catalog {
            pool: pool("plain"),
            types: &types,
        },
        Catalog {
            pool: Pool {
                name: "ml",
                labels: &labels,
            },
            types: &types,
        },
    ];
    let mut overlays = vec![
        priced(
            overlay("b-ml", 1, &[("team", &["ml"])]),
            PriceChange::Set(1.0),
        ),
        priced(overlay("a-all", 1, &[]), PriceChange::Set(2.0)),
    ];
    order(&mut overlays);
    let refused = conflicts(&overlays, &catalogs);
    assert!(refused["a-all"].contains("NodePool ml"), "{refused:?}");
}

#[test]
fn capacity_merges_by_resource_and_conflicts_on_one() {
    let types = catalog();
    let catalogs = [Catalog {
        pool: pool("p"),
        types: &types,
    }];
    let mut overlays = vec![
        with_capacity(
            overlay("gpu", 2, &[(INSTANCE_TYPE, &["large"])]),
            "example.com/gpu",
            4,
        ),
        with_capacity(
            with_capacity(overlay("all", 1, &[]), "example.com/gpu", 1),
            "example.com/fpga",
            2,
        ),
    ];
    order(&mut overlays);
    assert!(conflicts(&overlays, &catalogs).is_empty());
    let (out, applied) = apply(&overlays, pool("p"), &types);
    assert_eq!(out[1].capacity.get("example.com/gpu"), 4);
    assert_eq!(out[1].capacity.get("example.com/fpga"), 2);
    assert_eq!(out[0].capacity.get("example.com/gpu"), 1);
    assert_eq!(out[0].capacity.cpu_millis, 4000);
    assert_eq!(applied.extended, vec!["small", "large"]);
    assert!(applied.priced.is_empty());
    // The same weight and resource: a conflict; another resource: none.
    overlays.push(with_capacity(overlay("z", 1, &[]), "example.com/fpga", 3));
    order(&mut overlays);
    let refused = conflicts(&overlays, &catalogs);
    assert_eq!(refused.keys().collect::<Vec<_>>(), ["all"]);
    assert!(
        refused["all"].contains("capacity example.com/fpga"),
        "{refused:?}"
    );
}

fn api_overlay(spec: NodeOverlaySpec) -> NodeOverlay {
    NodeOverlay::new("o", spec)
}

fn spec() -> NodeOverlaySpec {
    NodeOverlaySpec {
        requirements: vec![OverlayRequirement {
            key: INSTANCE_TYPE.to_owned(),
            operator: NodeSelectorOperator::In,
            values: vec!["small".to_owned()],
        }],
        price_adjustment: None,
        price: None,
        capacity: None,
        weight: None,
    }
}

#[test]
fn reads_and_validates_the_api_object() {
    let mut s = spec();
    s.price_adjustment = Some("-10%".to_owned());
    s.weight = Some(7);
    s.capacity = Some(BTreeMap::from([(
        "example.com/gpu".to_owned(),
        Quantity::new("2"),
    )]));
    let o = Overlay::from_api(&api_overlay(s)).unwrap();
    assert_eq!((o.name.as_str(), o.weight), ("o", 7));
    assert_eq!(o.price, Some(PriceChange::Percent(-10.0)));
    assert_eq!(o.capacity, vec![("example.com/gpu".to_owned(), 2)]);

    let mut s = spec();
    s.price = Some("1".to_owned());
    s.price_adjustment = Some("+1".to_owned());
    assert_eq!(
        Overlay::from_api(&api_overlay(s)),
        Err(OverlayError::PriceAndAdjustment)
    );
    let mut s = spec();
    s.capacity = Some(BTreeMap::from([(
        "memory".to_owned(),
        Quantity::new("1Gi"),
    )]));
    assert!(matches!(
        Overlay::from_api(&api_overlay(s)),
        Err(OverlayError::RestrictedResource(_))
    ));
    let mut s = spec();
    s.requirements[0].operator = NodeSelectorOperator::Gt;
    assert!(matches!(
        Overlay::from_api(&api_overlay(s)),
        Err(OverlayError::Requirement { .. })
    ));
    let mut s = spec();
    s.requirements[0].values.clear();
    assert!(Overlay::from_api(&api_overlay(s)).is_err());
}

fn change() -> impl Strategy<Value = PriceChange> {
    prop_oneof![
        (0.0f64..10.0).prop_map(PriceChange::Set),
        (-10.0f64..10.0).prop_map(PriceChange::Add),
        (-100.0f64..300.0).prop_map(PriceChange::Percent),
    ]
}

proptest! {
    /// Whatever the overlays, prices stay finite and non-negative, only matched offerings
    /// change, and the result does not depend on the order the overlays came in.
    #[test]
    fn apply_is_order_independent_and_bounded(
        specs in proptest::collection::vec(
            (0i32..3, 0usize..4, proptest::option::of(change())),
            0..6,
        ),
        seed in any::<u64>(),
    ) {
        let types = catalog();
        let selectors: [&[(&str, &[&str])]; 4] = [
            &[],
            &[(INSTANCE_TYPE, &["small"])],
            &[(ZONE, &["b"])],
            &[(CAPACITY_TYPE, &["spot"])],
        ];
        let mut overlays: Vec<Overlay> = specs
            .iter()
            .enumerate()
            .map(|(i, (weight, sel, price))| Overlay {
                price: *price,
                ..overlay(&format!("o{i}"), *weight, selectors[*sel])
            })
            .collect();
        let mut shuffled = overlays.clone();
        let n = shuffled.len().max(1);
        shuffled.rotate_left((seed as usize) % n);
        order(&mut overlays);
        order(&mut shuffled);
        let catalogs = [Catalog { pool: pool("p"), types: &types }];
        let refused = conflicts(&overlays, &catalogs);
        prop_assert_eq!(&refused, &conflicts(&shuffled, &catalogs));
        let kept: Vec<Overlay> = overlays.iter().filter(|o| !refused.contains_key(&o.name)).cloned().collect();
        let (out, _) = apply(&kept, pool("p"), &types);
        for (t, it) in out.iter().enumerate() {
            for (o, offering) in it.offerings.iter().enumerate() {
                prop_assert!(offering.price.is_finite() && offering.price >= 0.0);
                let matched = kept.iter().any(|k| k.price.is_some() && k.matching_offerings(pool("p"), &types[t]).contains(&o));
                if matched {
                    prop_assert_eq!(offering.listed_price, Some(types[t].offerings[o].price));
                } else {
                    prop_assert_eq!(offering.price, types[t].offerings[o].price);
                    prop_assert_eq!(offering.listed_price, None);
                }
            }
        }
        // No two kept overlays of one weight set the price of one offering.
        for (i, a) in kept.iter().enumerate() {
            for b in &kept[i + 1..] {
                if a.weight != b.weight || a.price.is_none() || b.price.is_none() { continue; }
                for it in &types {
                    let (x, y) = (a.matching_offerings(pool("p"), it), b.matching_offerings(pool("p"), it));
                    prop_assert!(!x.iter().any(|o| y.contains(o)), "{} and {} both price {}", a.name, b.name, it.name);
                }
            }
        }
    }
}
