use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::api::labels::INSTANCE_TYPE;
use crate::scheduling::{
    InstanceType, NodePoolView, Offering, Pod, Requirement, Requirements, SchedulingInput, solve,
};

const GI: i64 = 1 << 30;

fn shape(name: &str, cpu: i64, mem_gib: i64, price: f64) -> Shape {
    Shape {
        name: name.to_owned(),
        allocatable: Resources::new(cpu * 1000, mem_gib * GI, 110),
        price,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

#[test]
fn small_pods_cost_their_share_of_the_cheapest_per_unit_type() {
    // Eight 1-CPU pods; 4 CPUs for 1.00 is cheaper per CPU than 8 for 2.40: two nodes' worth.
    let pods = vec![Resources::new(1000, GI, 0); 8];
    let shapes = [shape("s4", 4, 16, 1.0), shape("s8", 8, 32, 2.4)];
    let floor = floor(&pods, &shapes).unwrap();
    assert!(close(floor.price, 2.0), "{floor:?}");
    assert!(close(floor.nodes["s4"], 2.0), "{floor:?}");
}

#[test]
fn a_pod_too_large_for_the_cheap_type_pays_for_a_large_one() {
    // A 6-CPU pod fits only s8. Counting CPUs alone, 1.5 of s4 (1.50) would do; its fit set
    // says it needs 6/8 of an s8 at least: 1.80.
    let pods = vec![Resources::new(6000, GI, 0)];
    let shapes = [shape("s4", 4, 16, 1.0), shape("s8", 8, 32, 2.4)];
    let floor = floor(&pods, &shapes).unwrap();
    assert!(close(floor.price, 1.8), "{floor:?}");
}

#[test]
fn the_scarcest_resource_sets_the_bound() {
    // Memory-heavy pods: 4 × 12 GiB needs 48 GiB, three s4 by memory where CPU asks for one.
    let pods = vec![Resources::new(500, 12 * GI, 0); 4];
    let shapes = [shape("s4", 4, 16, 1.0)];
    assert!(close(floor(&pods, &shapes).unwrap().price, 3.0));
    // Pods count too: 220 tiny pods need two nodes of 110.
    let pods = vec![Resources::new(1, 1, 0); 220];
    assert!(close(floor(&pods, &shapes).unwrap().price, 2.0));
}

#[test]
fn nothing_costs_nothing_and_bad_input_is_refused() {
    let shapes = [shape("s4", 4, 16, 1.0)];
    assert_eq!(floor(&[], &shapes).unwrap().price, 0.0);
    assert_eq!(
        floor(&[Resources::new(5000, GI, 0)], &shapes),
        Err(FloorError::Unplaceable(0))
    );
    let nan = [shape("bad", 4, 16, f64::NAN)];
    assert_eq!(
        floor(&[Resources::new(1000, GI, 0)], &nan),
        Err(FloorError::Price("bad".to_owned()))
    );
}

/// `shapes` as a pool's catalog: one on-demand offering each, no overhead.
fn pool(shapes: &[Shape]) -> NodePoolView {
    let types: Vec<InstanceType> = shapes
        .iter()
        .map(|s| {
            let mut capacity = s.allocatable.clone();
            capacity.pods = 110;
            InstanceType {
                name: s.name.clone(),
                requirements: Requirements::new()
                    .with(Requirement::in_(INSTANCE_TYPE, [s.name.as_str()])),
                offerings: vec![Offering::new("zone-a", "on-demand", s.price)],
                capacity,
                overhead: Resources::default(),
                volume_limits: Default::default(),
                devices: Vec::new(),
            }
        })
        .collect();
    NodePoolView::new("default", Arc::from(types))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// No placement is below the bound: the solver's, and one node per pod on its cheapest
    /// fitting type.
    #[test]
    fn no_placement_costs_less_than_the_floor(
        sizes in proptest::collection::vec((1..=4i64, 1..=8i64, 0.1..3.0f64), 1..5),
        pods in proptest::collection::vec((100..=6000i64, 1..=24i64), 1..40),
    ) {
        let shapes: Vec<Shape> = sizes
            .iter()
            .enumerate()
            .map(|(i, &(c, m, p))| shape(&format!("t{i}"), 2 * c, 4 * m, p))
            .collect();
        let requests: Vec<Resources> = pods
            .iter()
            .map(|&(cpu, mem)| Resources::new(cpu, mem * GI / 4, 0))
            .collect();
        let bound = match floor(&requests, &shapes) {
            Ok(bound) => bound,
            Err(FloorError::Unplaceable(_)) => return Ok(()),
            Err(err) => return Err(TestCaseError::fail(err.to_string())),
        };
        prop_assert!(bound.price >= 0.0);
        let one_each: f64 = requests
            .iter()
            .map(|r| {
                let mut r = r.clone();
                r.pods = 1;
                shapes
                    .iter()
                    .filter(|s| r.fits_in(&s.allocatable))
                    .map(|s| s.price)
                    .fold(f64::INFINITY, f64::min)
            })
            .sum();
        prop_assert!(bound.price <= one_each + 1e-6, "{} > {one_each}", bound.price);
        let result = solve(&SchedulingInput {
            pods: requests
                .iter()
                .enumerate()
                .map(|(i, r)| Pod::new("default", format!("p{i}"), r.clone()))
                .collect(),
            node_pools: vec![pool(&shapes)],
            ..SchedulingInput::default()
        });
        prop_assert!(result.unschedulable.is_empty(), "{:?}", result.unschedulable);
        let solved: f64 = result.new_claims.iter().map(|c| c.cheapest_price).sum();
        prop_assert!(bound.price <= solved + 1e-6, "{} > {solved}", bound.price);
    }
}
