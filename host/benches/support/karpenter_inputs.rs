//! Karpenter's `BenchmarkScheduling` inputs (v1.15.0): `fake.InstanceTypes(n)` and
//! `makeDiversePods(count)`.
//!
//! Shared by `benches/scheduling.rs` and the scheduler's constraint validator test
//! (`src/scheduling/validate_tests.rs`), each including it with `#[path]`; it takes the scheduling
//! types from the including module (`use super::*`).

use super::*;

pub(super) const ZONE: &str = "topology.kubernetes.io/zone";
pub(super) const HOSTNAME: &str = "kubernetes.io/hostname";
pub(super) const MI: i64 = 1 << 20;
pub(super) const GI: i64 = 1 << 30;
pub(super) const ZONES: [&str; 3] = ["test-zone-1", "test-zone-2", "test-zone-3"];

/// Karpenter's `fake.InstanceTypes(n)`.
pub(super) fn instance_types(n: usize) -> Arc<[InstanceType]> {
    (0..n)
        .map(|i| {
            let cpu = i as i64 + 1;
            let memory = 2 * cpu * GI;
            let name = format!("fake-it-{i}");
            let price = 0.1 * cpu as f64 + 0.1 * memory as f64 / 1e9;
            let offerings = [
                ("spot", "test-zone-1"),
                ("spot", "test-zone-2"),
                ("on-demand", "test-zone-1"),
                ("on-demand", "test-zone-2"),
                ("on-demand", "test-zone-3"),
            ]
            .iter()
            .map(|(ct, zone)| Offering::new(*zone, *ct, price))
            .collect();
            let large = cpu > 4 && memory > 8 * GI;
            let mut requirements = Requirements::new()
                .with(Requirement::in_(
                    "node.kubernetes.io/instance-type",
                    [name.as_str()],
                ))
                .with(Requirement::in_("kubernetes.io/arch", ["amd64"]))
                .with(Requirement::in_(
                    "kubernetes.io/os",
                    ["darwin", "linux", "windows"],
                ))
                .with(Requirement::in_(ZONE, ZONES))
                .with(Requirement::in_(
                    "karpenter.sh/capacity-type",
                    ["on-demand", "spot"],
                ))
                .with(Requirement::in_(
                    "size",
                    [if large { "large" } else { "small" }],
                ))
                .with(Requirement::in_("integer", [cpu.to_string()]));
            requirements.add(if large {
                Requirement::in_("special", ["optional"])
            } else {
                Requirement::does_not_exist("special")
            });
            InstanceType {
                name,
                requirements,
                offerings,
                capacity: Resources::new(cpu * 1000, memory, 10 * cpu),
                overhead: Resources::new(100, 10 * MI, 0),
                volume_limits: Default::default(),
                devices: Vec::new(),
            }
        })
        .collect()
}

/// A small fixed-seed generator (SplitMix64): the benchmark needs the same pods every run, not
/// Go's exact sequence.
pub(super) struct Rng(u64);

impl Rng {
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        items[(z % items.len() as u64) as usize]
    }

    fn label(&mut self) -> &'static str {
        self.pick(&["a", "b", "c", "d", "e", "f", "g"])
    }

    fn requests(&mut self) -> Resources {
        let cpu = self.pick(&[100, 250, 500, 1000, 1500]);
        let mem = self.pick(&[100, 256, 512, 1024, 2048, 4096]);
        Resources::new(cpu, mem * MI, 0)
    }
}

#[derive(Clone, Copy)]
pub(super) enum Kind {
    Generic,
    Spread(&'static str),
    Affinity(&'static str),
    AntiAffinity(&'static str),
}

/// `self_affinity`: Karpenter v1.15.0's `makePodAffinityPods` selects the pod's own labels (one
/// draw); the older port drew the selector independently.
pub(super) fn make_pod(rng: &mut Rng, i: usize, kind: Kind, self_affinity: bool) -> Pod {
    let mut pod = Pod::new("default", format!("pod-{i}"), Resources::default());
    match kind {
        Kind::Generic => {
            pod.labels = BTreeMap::from([("my-label".to_owned(), rng.label().to_owned())]);
        }
        Kind::Spread(key) => {
            pod.labels = BTreeMap::from([("my-label".to_owned(), rng.label().to_owned())]);
            pod.topology_spread.push(TopologySpreadConstraint {
                max_skew: 1,
                topology_key: key.to_owned(),
                when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
                label_selector: Some(LabelSelector::labels([("my-label", rng.label())])),
                min_domains: None,
                node_affinity_policy: NodeInclusionPolicy::Honor,
                node_taints_policy: NodeInclusionPolicy::Ignore,
            });
        }
        Kind::Affinity(key) => {
            let own = rng.label();
            let selected = if self_affinity { own } else { rng.label() };
            pod.labels = BTreeMap::from([("my-affininity".to_owned(), own.to_owned())]);
            pod.pod_affinity.push(PodAffinityTerm {
                topology_key: key.to_owned(),
                label_selector: Some(LabelSelector::labels([("my-affininity", selected)])),
                namespaces: Namespaces::Own,
            });
        }
        Kind::AntiAffinity(key) => {
            pod.labels = BTreeMap::from([("app".to_owned(), "nginx".to_owned())]);
            pod.pod_anti_affinity.push(PodAffinityTerm {
                topology_key: key.to_owned(),
                label_selector: Some(LabelSelector::labels([("app", "nginx")])),
                namespaces: Namespaces::Own,
            });
        }
    }
    pod.requests = rng.requests();
    pod
}

/// Karpenter v1.15.0's `makeDiversePods(count)`: five kinds, count/5 each, remainder generic.
pub(super) fn diverse_pods_v1_15(count: usize) -> Vec<Pod> {
    diverse_pods(
        count,
        &[
            Kind::Generic,
            Kind::Spread(ZONE),
            Kind::Spread(HOSTNAME),
            Kind::Affinity(ZONE),
            Kind::AntiAffinity(HOSTNAME),
        ],
        true,
    )
}

pub(super) fn diverse_pods(count: usize, kinds: &[Kind], self_affinity: bool) -> Vec<Pod> {
    let mut rng = Rng(42);
    let mut pods = Vec::with_capacity(count);
    for &kind in kinds {
        for _ in 0..count / kinds.len() {
            let i = pods.len();
            pods.push(make_pod(&mut rng, i, kind, self_affinity));
        }
    }
    while pods.len() < count {
        let i = pods.len();
        pods.push(make_pod(&mut rng, i, Kind::Generic, self_affinity));
    }
    pods
}

/// A digest of everything a [`SchedulingResult`] decides: each new claim's pool, requirements,
/// requests, instance-type options, cheapest offering and pods (in placement order), the
/// placements on existing capacity, and the unschedulable pods with their reasons. Two results
/// with the same digest place every pod the same way (FNV-1a over a canonical text, so it does
/// not depend on `Debug` formatting or the standard library's hasher).
pub(super) fn fingerprint(result: &SchedulingResult) -> u64 {
    use std::fmt::Write;
    let mut text = String::new();
    for c in &result.new_claims {
        let _ = writeln!(
            text,
            "claim {} [{}] {} {:?} {}/{}/{}/{} {:?}",
            c.node_pool,
            c.requirements,
            c.requests,
            c.instance_type_options,
            c.cheapest_offering.instance_type,
            c.cheapest_offering.zone,
            c.cheapest_offering.capacity_type,
            c.cheapest_price.to_bits(),
            c.pods
        );
    }
    for (p, target) in &result.existing_placements {
        let _ = writeln!(text, "placed {p} {target:?}");
    }
    for (p, reason) in &result.unschedulable {
        let _ = writeln!(text, "unschedulable {p} {reason}");
    }
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
