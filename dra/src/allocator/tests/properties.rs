//! Property tests: every allocation is valid, and when the search says no, a brute-force
//! enumeration of every choice agrees.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::fixtures::q;
use crate::allocator::{Allocation, Inventory};
use crate::request::{
    AllocationMode, Alternative, ClaimKey, ClaimRequests, Constraint, ConstraintKind, Request,
};
use crate::selector::SelectorCache;
use crate::template::{
    AttributeValue, CounterConsumption, CounterSet, Device, DeviceId, ResourceSliceTemplate,
};
use crate::unsatisfiable::Unsatisfiable;

const MEMORY: [u32; 3] = [10, 20, 40];

#[derive(Debug, Clone)]
struct GenDevice {
    kind: u8,
    memory: usize,
    numa: u8,
    multi: bool,
    consumes: Option<(usize, u8)>,
    used: bool,
}

#[derive(Debug, Clone, Copy)]
enum Selector {
    Any,
    Kind(u8),
    MemoryAtLeast(usize),
}

impl Selector {
    fn expression(self) -> String {
        match self {
            Selector::Any => "true".into(),
            Selector::Kind(kind) => format!(r#"device.attributes["ex.com"].kind == "k{kind}""#),
            Selector::MemoryAtLeast(m) => format!(
                r#"device.capacity["ex.com"].memory.compareTo(quantity("{}Gi")) >= 0"#,
                MEMORY[m]
            ),
        }
    }

    fn matches(self, device: &GenDevice) -> bool {
        match self {
            Selector::Any => true,
            Selector::Kind(kind) => device.kind == kind,
            Selector::MemoryAtLeast(m) => device.memory >= m,
        }
    }
}

#[derive(Debug, Clone)]
struct GenAlt {
    selector: Selector,
    /// `None` is allocationMode All.
    count: Option<usize>,
}

#[derive(Debug, Clone)]
struct GenClaim {
    requests: Vec<Vec<GenAlt>>,
    /// (match rather than distinct, on numa rather than kind)
    constraint: Option<(bool, bool)>,
}

#[derive(Debug, Clone)]
struct Case {
    devices: Vec<GenDevice>,
    counters: [i128; 2],
    claims: Vec<GenClaim>,
}

fn device() -> impl Strategy<Value = GenDevice> {
    (
        0..2u8,
        0..3usize,
        0..2u8,
        prop::bool::weighted(0.15),
        prop::option::weighted(0.4, (0..2usize, 1..4u8)),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(kind, memory, numa, multi, consumes, used)| GenDevice {
            kind,
            memory,
            numa,
            multi,
            consumes,
            used,
        })
}

fn selector() -> impl Strategy<Value = Selector> {
    prop_oneof![
        Just(Selector::Any),
        (0..2u8).prop_map(Selector::Kind),
        (0..3usize).prop_map(Selector::MemoryAtLeast),
    ]
}

fn alternative() -> impl Strategy<Value = GenAlt> {
    (selector(), prop::option::weighted(0.85, 1..4usize))
        .prop_map(|(selector, count)| GenAlt { selector, count })
}

fn claim() -> impl Strategy<Value = GenClaim> {
    (
        prop::collection::vec(prop::collection::vec(alternative(), 1..3), 1..3),
        prop::option::weighted(0.4, (any::<bool>(), any::<bool>())),
    )
        .prop_map(|(requests, constraint)| GenClaim {
            requests,
            constraint,
        })
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(device(), 0..6),
        (1..5i128, 1..5i128),
        prop::collection::vec(claim(), 1..3),
    )
        .prop_map(|(mut devices, (a, b), claims)| {
            // Devices allocated before the simulation never overcommit their counters.
            let mut left = [a, b];
            for device in &mut devices {
                if let (true, Some((set, amount))) = (device.used, device.consumes) {
                    if left[set] < i128::from(amount) {
                        device.used = false;
                    } else {
                        left[set] -= i128::from(amount);
                    }
                }
            }
            Case {
                devices,
                counters: [a, b],
                claims,
            }
        })
}

fn alt_name(request: usize, alt: usize, alts: usize) -> String {
    if alts == 1 {
        format!("r{request}")
    } else {
        format!("r{request}/a{alt}")
    }
}

fn id(device: usize) -> DeviceId {
    DeviceId {
        driver: "ex.com".into(),
        pool: "p".into(),
        device: format!("d{device}"),
    }
}

fn inventory(case: &Case) -> Inventory {
    let devices = case
        .devices
        .iter()
        .enumerate()
        .map(|(i, d)| Device {
            name: format!("d{i}"),
            attributes: BTreeMap::from([
                (
                    "kind".into(),
                    AttributeValue::String(format!("k{}", d.kind)),
                ),
                ("numa".into(), AttributeValue::Int(d.numa.into())),
            ]),
            capacity: BTreeMap::from([("memory".into(), q(&format!("{}Gi", MEMORY[d.memory])))]),
            allow_multiple_allocations: d.multi,
            consumes_counters: d
                .consumes
                .iter()
                .map(|(set, amount)| CounterConsumption {
                    counter_set: format!("s{set}"),
                    counters: BTreeMap::from([("c".into(), q(&amount.to_string()))]),
                })
                .collect(),
        })
        .collect();
    let template = ResourceSliceTemplate {
        driver: "ex.com".into(),
        pool: "p".into(),
        devices,
        shared_counters: (0..2)
            .map(|s| CounterSet {
                name: format!("s{s}"),
                counters: BTreeMap::from([("c".into(), q(&case.counters[s].to_string()))]),
            })
            .collect(),
    };
    let mut inventory = Inventory::from_templates(&[template]).unwrap_or_else(|e| panic!("{e}"));
    for (i, device) in case.devices.iter().enumerate() {
        if device.used {
            assert!(inventory.mark_allocated(&id(i)));
        }
    }
    inventory
}

fn claims(case: &Case) -> Vec<ClaimRequests> {
    let mut cache = SelectorCache::new();
    case.claims
        .iter()
        .enumerate()
        .map(|(c, claim)| ClaimRequests {
            key: ClaimKey::new("ns", format!("c{c}")),
            requests: claim
                .requests
                .iter()
                .enumerate()
                .map(|(r, alts)| Request {
                    name: format!("r{r}"),
                    alternatives: alts
                        .iter()
                        .enumerate()
                        .map(|(a, alt)| Alternative {
                            name: alt_name(r, a, alts.len()),
                            class: "c".into(),
                            selectors: vec![
                                cache
                                    .compile(&alt.selector.expression())
                                    .unwrap_or_else(|e| panic!("{e}")),
                            ],
                            mode: alt
                                .count
                                .map_or(AllocationMode::All, AllocationMode::ExactCount),
                        })
                        .collect(),
                })
                .collect(),
            constraints: claim
                .constraint
                .iter()
                .map(|(matching, numa)| Constraint {
                    kind: if *matching {
                        ConstraintKind::MatchAttribute
                    } else {
                        ConstraintKind::DistinctAttribute
                    },
                    attribute: if *numa { "ex.com/numa" } else { "ex.com/kind" }.into(),
                    requests: vec![],
                })
                .collect(),
            existing: None,
        })
        .collect()
}

/// One choice: per claim, per request, the alternative and its devices.
type Choice = Vec<Vec<(usize, Vec<usize>)>>;

/// Whether `choice` is a valid allocation of `case`, judged without the allocator's code.
fn valid(case: &Case, choice: &Choice) -> bool {
    let mut uses: Vec<u32> = case.devices.iter().map(|d| u32::from(d.used)).collect();
    for (claim, requests) in case.claims.iter().zip(choice) {
        let mut values = Vec::new();
        for (alts, (alt, devices)) in claim.requests.iter().zip(requests) {
            let alt = &alts[*alt];
            let matching: Vec<usize> = (0..case.devices.len())
                .filter(|&d| alt.selector.matches(&case.devices[d]))
                .collect();
            match alt.count {
                Some(count) if devices.len() != count => return false,
                None if matching.is_empty() || *devices != matching => return false,
                _ => {}
            }
            let mut distinct = devices.clone();
            distinct.dedup();
            if distinct.len() != devices.len() {
                return false;
            }
            for &d in devices {
                let device = &case.devices[d];
                if !alt.selector.matches(device) {
                    return false;
                }
                uses[d] += 1;
                values.push(match claim.constraint {
                    Some((_, true)) => device.numa,
                    _ => device.kind,
                });
            }
        }
        match claim.constraint {
            Some((true, _)) if values.windows(2).any(|w| w[0] != w[1]) => return false,
            Some((false, _)) => {
                let mut sorted = values.clone();
                sorted.sort_unstable();
                sorted.dedup();
                if sorted.len() != values.len() {
                    return false;
                }
            }
            _ => {}
        }
    }
    let mut spent = [0i128; 2];
    for (device, uses) in case.devices.iter().zip(&uses) {
        if *uses > 1 && !device.multi {
            return false;
        }
        if let (Some((set, amount)), true) = (device.consumes, *uses > 0) {
            spent[set] += i128::from(amount);
        }
    }
    spent[0] <= case.counters[0] && spent[1] <= case.counters[1]
}

/// Brute force: tries every alternative and every device subset of every request.
fn exists(case: &Case, slot: usize, choice: &mut Choice) -> bool {
    let slots: Vec<(usize, usize)> = case
        .claims
        .iter()
        .enumerate()
        .flat_map(|(c, claim)| (0..claim.requests.len()).map(move |r| (c, r)))
        .collect();
    if slot == slots.len() {
        return valid(case, choice);
    }
    let (c, r) = slots[slot];
    let n = case.devices.len();
    for (a, alt) in case.claims[c].requests[r].iter().enumerate() {
        for mask in 0u32..(1 << n) {
            let devices: Vec<usize> = (0..n).filter(|d| mask & (1 << d) != 0).collect();
            let fits = match alt.count {
                Some(count) => devices.len() == count,
                None => true,
            };
            if !fits
                || !devices
                    .iter()
                    .all(|&d| alt.selector.matches(&case.devices[d]))
            {
                continue;
            }
            choice[c].push((a, devices));
            if exists(case, slot + 1, choice) {
                return true;
            }
            choice[c].pop();
        }
    }
    false
}

fn choice_of(case: &Case, allocation: &Allocation) -> Choice {
    case.claims
        .iter()
        .enumerate()
        .map(|(c, claim)| {
            let got = allocation
                .claims
                .iter()
                .find(|a| a.claim.name == format!("c{c}"))
                .unwrap_or_else(|| panic!("claim c{c} missing"));
            claim
                .requests
                .iter()
                .enumerate()
                .map(|(r, alts)| {
                    let names: Vec<String> = (0..alts.len())
                        .map(|a| alt_name(r, a, alts.len()))
                        .collect();
                    let mut chosen = None;
                    let mut devices = Vec::new();
                    for device in &got.devices {
                        if let Some(a) = names.iter().position(|n| *n == device.request) {
                            assert!(chosen.is_none_or(|c| c == a), "two alternatives used");
                            chosen = Some(a);
                            let index = device.device.device.trim_start_matches('d');
                            devices.push(index.parse::<usize>().unwrap_or(usize::MAX));
                        }
                    }
                    devices.sort_unstable();
                    (
                        chosen.unwrap_or_else(|| panic!("request r{r} unallocated")),
                        devices,
                    )
                })
                .collect()
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn allocations_are_valid_and_refusals_are_right(case in case()) {
        let inventory = inventory(&case);
        let claims = claims(&case);
        match inventory.allocate(&claims) {
            Ok(allocation) => {
                let choice = choice_of(&case, &allocation);
                prop_assert!(valid(&case, &choice), "invalid {:?}", allocation);
                let mut committed = inventory.clone();
                prop_assert!(committed.commit(&allocation).is_ok());
                for (i, device) in case.devices.iter().enumerate() {
                    let uses = committed.uses(&id(i)).unwrap_or(0);
                    prop_assert!(device.multi || uses <= 1);
                }
                // Everything is committed: the same claims need nothing more.
                prop_assert_eq!(committed.allocate(&claims), Ok(Allocation::default()));
            }
            Err(Unsatisfiable::StepBudgetExceeded { .. }) => {
                prop_assert!(false, "tiny cases stay within budget");
            }
            Err(reason) => {
                let mut choice = vec![Vec::new(); case.claims.len()];
                prop_assert!(
                    !exists(&case, 0, &mut choice),
                    "refused ({}) but {:?} fits",
                    reason,
                    choice
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn packing_pods_one_by_one_never_overcommits(case in case(), rounds in 1..4usize) {
        let mut node = inventory(&case);
        let claims = claims(&case);
        for round in 0..rounds {
            for claim in &claims {
                let mut claim = claim.clone();
                claim.key.name = format!("{}-{round}", claim.key.name);
                if let Ok(allocation) = node.allocate(std::slice::from_ref(&claim)) {
                    prop_assert!(node.commit(&allocation).is_ok());
                }
            }
        }
        prop_assert!(node.remaining.iter().all(|left| *left >= 0), "{:?}", node.remaining);
        for (entry, uses) in node.entries.iter().zip(node.uses.iter()) {
            prop_assert!(entry.device.allow_multiple_allocations || *uses <= 1);
        }
    }
}
