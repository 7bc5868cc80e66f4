mod fixtures;
mod properties;

use fixtures::*;

use super::*;
use crate::request::ExistingAllocation;

#[test]
fn one_two_four_eight_gpus_fit_an_eight_gpu_node() {
    let node = gpu_node(8, "80Gi");
    for count in [1, 2, 4, 8] {
        let claim = claim("pod", &exact("gpu", GPU_CLASS, count, &[]));
        let allocation = node.allocate(&[claim]).expect("fits");
        let devices = &allocation.claims[0].devices;
        assert_eq!(devices.len(), count);
        assert!(devices.iter().all(|d| d.request == "gpu"));
    }
    let nine = claim("pod", &exact("gpu", GPU_CLASS, 9, &[]));
    assert_eq!(
        node.allocate(&[nine]),
        Err(Unsatisfiable::NotEnoughDevices {
            claim: "default/pod".into(),
            request: "gpu".into(),
            class: GPU_CLASS.into(),
            wanted: 9,
            matching: 8,
            available: 8,
        })
    );
    let eight = claim("pod", &exact("gpu", GPU_CLASS, 8, &[]));
    assert!(matches!(
        gpu_node(4, "80Gi").allocate(&[eight]),
        Err(Unsatisfiable::NotEnoughDevices { matching: 4, .. })
    ));
}

#[test]
fn packs_pods_until_the_node_is_full() {
    let mut node = gpu_node(8, "80Gi");
    for pod in 0..4 {
        let claim = claim(&format!("pod-{pod}"), &exact("gpu", GPU_CLASS, 2, &[]));
        let allocation = node.allocate(&[claim]).expect("fits");
        node.commit(&allocation).expect("commits");
    }
    let claim = claim("pod-4", &exact("gpu", GPU_CLASS, 1, &[]));
    assert!(matches!(
        node.allocate(&[claim]),
        Err(Unsatisfiable::NotEnoughDevices {
            matching: 8,
            available: 0,
            ..
        })
    ));
}

#[test]
fn capacity_selectors_pick_the_big_devices() {
    let node = Inventory::from_templates(&[gpu_template(
        "pool",
        &[
            ("small-0", "40Gi"),
            ("big-0", "80Gi"),
            ("small-1", "40Gi"),
            ("big-1", "80Gi"),
        ],
    )])
    .expect("inventory");
    let selector = r#"device.capacity["gpu.example.com"].memory.compareTo(quantity("60Gi")) >= 0"#;
    let two = claim("pod", &exact("gpu", GPU_CLASS, 2, &[selector]));
    let allocation = node.allocate(&[two]).expect("fits");
    let mut names = device_names(&allocation);
    names.sort();
    assert_eq!(names, ["big-0", "big-1"]);
    let three = claim("pod", &exact("gpu", GPU_CLASS, 3, &[selector]));
    assert!(matches!(
        node.allocate(&[three]),
        Err(Unsatisfiable::NotEnoughDevices {
            wanted: 3,
            matching: 2,
            ..
        })
    ));
    let huge = r#"device.capacity["gpu.example.com"].memory.isGreaterThan(quantity("1Ti"))"#;
    let none = claim("pod", &exact("gpu", GPU_CLASS, 1, &[huge]));
    let error = node.allocate(&[none]).expect_err("nothing that big");
    assert!(matches!(error, Unsatisfiable::NoMatchingDevice { .. }));
    assert!(error.to_string().contains(huge), "{error}");
    assert!(error.to_string().contains("gpu.example.com\""), "{error}");
}

#[test]
fn allocation_mode_all_takes_every_matching_device() {
    let mut node = gpu_node(4, "80Gi");
    let all = claim("pod", &all_request("gpu", GPU_CLASS));
    let allocation = node.allocate(std::slice::from_ref(&all)).expect("fits");
    assert_eq!(allocation.claims[0].devices.len(), 4);

    let one = claim("other", &exact("gpu", GPU_CLASS, 1, &[]));
    let taken = node.allocate(&[one]).expect("fits");
    node.commit(&taken).expect("commits");
    assert!(matches!(
        node.allocate(&[all]),
        Err(Unsatisfiable::AllModeDevicesInUse {
            matching: 4,
            in_use: 1,
            ..
        })
    ));
    let nothing = claim("pod", &all_request("nic", NIC_CLASS));
    assert!(matches!(
        node.allocate(&[nothing]),
        Err(Unsatisfiable::NoMatchingDevice { .. })
    ));
}

#[test]
fn first_available_falls_back_in_order() {
    let spec = first_available(
        "gpu",
        &[
            ("big", GPU_CLASS, 4),
            ("medium", GPU_CLASS, 2),
            ("small", GPU_CLASS, 1),
        ],
    );
    let node = gpu_node(8, "80Gi");
    let allocation = node.allocate(&[claim("pod", &spec)]).expect("fits");
    assert!(
        allocation.claims[0]
            .devices
            .iter()
            .all(|d| d.request == "gpu/big")
    );
    assert_eq!(allocation.claims[0].devices.len(), 4);

    let node = gpu_node(3, "80Gi");
    let allocation = node.allocate(&[claim("pod", &spec)]).expect("fits");
    assert_eq!(allocation.claims[0].devices.len(), 2);
    assert!(
        allocation.claims[0]
            .devices
            .iter()
            .all(|d| d.request == "gpu/medium")
    );

    let error = gpu_node(0, "80Gi")
        .allocate(&[claim("pod", &spec)])
        .expect_err("no GPUs");
    let Unsatisfiable::NoAlternative { reasons, .. } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(reasons.len(), 3);
}

#[test]
fn first_available_backtracks_for_a_later_request() {
    // "a" prefers 2 GPUs; "b" needs 2 of the 3: "a" must fall back to 1.
    let spec = format!(
        r#"{{"devices": {{"requests": [{}, {}]}}}}"#,
        first_available_request("a", &[("two", GPU_CLASS, 2), ("one", GPU_CLASS, 1)]),
        exact_request("b", GPU_CLASS, 2, &[]),
    );
    let allocation = gpu_node(3, "80Gi")
        .allocate(&[claim("pod", &spec)])
        .expect("fits");
    let requests: Vec<_> = allocation.claims[0]
        .devices
        .iter()
        .map(|d| d.request.as_str())
        .collect();
    assert_eq!(requests.iter().filter(|r| **r == "a/one").count(), 1);
    assert_eq!(requests.iter().filter(|r| **r == "b").count(), 2);
}

#[test]
fn mig_partitions_share_the_gpu_counters() {
    let mut node = Inventory::from_templates(&[mig_template(1)]).expect("inventory");
    // Two 4g partitions use the whole GPU.
    let two_4g = claim("a", &exact("mig", MIG_4G_CLASS, 2, &[]));
    let allocation = node.allocate(&[two_4g]).expect("fits");
    assert_eq!(allocation.claims[0].devices.len(), 2);

    // 4g + 2g + 1g + 1g fill it exactly, across pods.
    for (pod, class) in [
        ("p1", MIG_4G_CLASS),
        ("p2", MIG_2G_CLASS),
        ("p3", MIG_1G_CLASS),
    ] {
        let claim = claim(pod, &exact("mig", class, 1, &[]));
        let allocation = node.allocate(&[claim]).expect("fits");
        node.commit(&allocation).expect("commits");
    }
    let last = claim("p4", &exact("mig", MIG_1G_CLASS, 1, &[]));
    let allocation = node.allocate(&[last]).expect("one slice left");
    node.commit(&allocation).expect("commits");
    let more = claim("p5", &exact("mig", MIG_1G_CLASS, 1, &[]));
    assert_eq!(
        node.allocate(&[more]),
        Err(Unsatisfiable::CountersExhausted {
            claim: "default/p5".into(),
            request: "mig".into(),
            counter_set: "mig.example.com/node/gpu-0".into(),
        })
    );
    let whole = Inventory::from_templates(&[mig_template(1)]).expect("inventory");
    let spec = format!(
        r#"{{"devices": {{"requests": [{}, {}]}}}}"#,
        exact_request("whole", MIG_WHOLE_CLASS, 1, &[]),
        exact_request("slice", MIG_1G_CLASS, 1, &[]),
    );
    let error = whole
        .allocate(&[claim("pod", &spec)])
        .expect_err("whole GPU leaves nothing");
    assert!(
        matches!(error, Unsatisfiable::CountersExhausted { .. }),
        "{error}"
    );
}

#[test]
fn mig_partitions_pack_into_used_gpus_first() {
    let mut node = Inventory::from_templates(&[mig_template(2)]).expect("inventory");
    for pod in 0..8 {
        let claim = claim(&format!("p{pod}"), &exact("mig", MIG_1G_CLASS, 1, &[]));
        let allocation = node.allocate(&[claim]).expect("fits");
        node.commit(&allocation).expect("commits");
    }
    // Eight 1g slices filled one GPU, so the other still takes a whole-GPU partition.
    let whole = claim("big", &exact("mig", MIG_WHOLE_CLASS, 1, &[]));
    assert!(node.allocate(&[whole]).is_ok());
}

#[test]
fn a_claim_shared_by_pods_is_allocated_once() {
    let mut node = gpu_node(2, "80Gi");
    let shared = claim("shared", &exact("gpu", GPU_CLASS, 2, &[]));
    // The same claim twice in one call (two pods of one simulation step) is allocated once.
    let allocation = node
        .allocate(&[shared.clone(), shared.clone()])
        .expect("fits");
    assert_eq!(allocation.claims.len(), 1);
    node.commit(&allocation).expect("commits");
    assert!(node.is_committed(&shared.key));
    // The second pod needs nothing more on this node.
    let again = node.allocate(std::slice::from_ref(&shared)).expect("fits");
    assert!(again.claims.is_empty());
    node.commit(&allocation)
        .expect("committing twice is harmless");
    let id = DeviceId {
        driver: "gpu.example.com".into(),
        pool: "node".into(),
        device: "gpu-0".into(),
    };
    assert_eq!(node.uses(&id), Some(1));
}

#[test]
fn allocated_claims_are_not_allocated_again() {
    let node = gpu_node(1, "80Gi");
    let here = ClaimRequests::allocated(ClaimKey::new("ns", "here"), true);
    assert_eq!(here.existing, Some(ExistingAllocation::ThisNode));
    assert!(node.allocate(&[here]).expect("fits").claims.is_empty());
    let elsewhere = ClaimRequests::allocated(ClaimKey::new("ns", "there"), false);
    assert_eq!(
        node.allocate(&[elsewhere]),
        Err(Unsatisfiable::AllocatedElsewhere {
            claim: "ns/there".into()
        })
    );
}

#[test]
fn an_existing_node_with_partly_allocated_devices() {
    let slices = [published_slice("node-a", 4)];
    let used = allocated_claim(&["gpu-0", "gpu-2"]);
    let node = Inventory::from_slices(&slices, &[used]).expect("inventory");
    let three = claim("pod", &exact("gpu", GPU_CLASS, 3, &[]));
    assert!(matches!(
        node.allocate(&[three]),
        Err(Unsatisfiable::NotEnoughDevices {
            matching: 4,
            available: 2,
            ..
        })
    ));
    let two = claim("pod", &exact("gpu", GPU_CLASS, 2, &[]));
    let mut names = device_names(&node.allocate(&[two]).expect("fits"));
    names.sort();
    assert_eq!(names, ["gpu-1", "gpu-3"]);
}

#[test]
fn only_the_newest_pool_generation_counts() {
    let mut old = published_slice("node-a", 8);
    old.spec.pool.generation = 1;
    let mut new = published_slice("node-a", 2);
    new.spec.pool.generation = 2;
    let node = Inventory::from_slices(&[old, new], &[]).expect("inventory");
    assert_eq!(node.devices().count(), 2);
}

#[test]
fn match_attribute_keeps_devices_on_one_numa_node() {
    // gpu-0..3 on NUMA 0, gpu-4..7 on NUMA 1; gpu-0 and gpu-4 in use.
    let mut node = gpu_node(8, "80Gi");
    for device in ["gpu-0", "gpu-4"] {
        assert!(node.mark_allocated(&gpu_id(device)));
    }
    let spec = format!(
        r#"{{"devices": {{"requests": [{}, {}],
             "constraints": [{{"matchAttribute": "gpu.example.com/numa"}}]}}}}"#,
        exact_request("a", GPU_CLASS, 2, &[]),
        exact_request("b", GPU_CLASS, 1, &[]),
    );
    let allocation = node.allocate(&[claim("pod", &spec)]).expect("fits");
    let numa: BTreeSet<_> = device_names(&allocation)
        .iter()
        .map(|name| name.trim_start_matches("gpu-").parse::<u32>().unwrap_or(99) / 4)
        .collect();
    assert_eq!(numa.len(), 1);

    let spec = format!(
        r#"{{"devices": {{"requests": [{}],
             "constraints": [{{"matchAttribute": "gpu.example.com/numa", "requests": ["a"]}}]}}}}"#,
        exact_request("a", GPU_CLASS, 4, &[]),
    );
    let error = node
        .allocate(&[claim("pod", &spec)])
        .expect_err("no NUMA node has 4 free GPUs");
    assert_eq!(
        error,
        Unsatisfiable::MatchAttribute {
            claim: "default/pod".into(),
            attribute: "gpu.example.com/numa".into(),
            requests: vec!["a".into()],
        }
    );
}

#[test]
fn distinct_attribute_spreads_devices() {
    let node = gpu_node(8, "80Gi");
    let spec = format!(
        r#"{{"devices": {{"requests": [{}],
             "constraints": [{{"distinctAttribute": "gpu.example.com/numa"}}]}}}}"#,
        exact_request("a", GPU_CLASS, 2, &[]),
    );
    assert!(node.allocate(&[claim("pod", &spec)]).is_ok());
    let spec = spec.replace(r#""count":2"#, r#""count":3"#);
    assert!(matches!(
        node.allocate(&[claim("pod", &spec)]),
        Err(Unsatisfiable::DistinctAttribute { .. })
    ));
}

#[test]
fn devices_allowing_multiple_allocations_are_shared() {
    let shared = |multi: bool| {
        let mut template = gpu_template("pool", &[("gpu-0", "80Gi")]);
        template.devices[0].allow_multiple_allocations = multi;
        Inventory::from_templates(&[template]).expect("inventory")
    };
    let claims = [
        claim("a", &exact("gpu", GPU_CLASS, 1, &[])),
        claim("b", &exact("gpu", GPU_CLASS, 1, &[])),
    ];
    let mut node = shared(true);
    let allocation = node.allocate(&claims).expect("shared");
    node.commit(&allocation).expect("commits");
    assert_eq!(node.uses(&gpu_id_in("pool", "gpu-0")), Some(2));
    assert!(matches!(
        shared(false).allocate(&claims),
        Err(Unsatisfiable::Contention { .. })
    ));
}

#[test]
fn clones_are_independent() {
    let node = gpu_node(2, "80Gi");
    let mut clone = node.clone();
    let allocation = clone
        .allocate(&[claim("a", &exact("gpu", GPU_CLASS, 2, &[]))])
        .expect("fits");
    clone.commit(&allocation).expect("commits");
    assert_eq!(clone.uses(&gpu_id("gpu-0")), Some(1));
    assert_eq!(node.uses(&gpu_id("gpu-0")), Some(0));
    assert!(
        node.allocate(&[claim("b", &exact("gpu", GPU_CLASS, 2, &[]))])
            .is_ok()
    );
}

#[test]
fn a_hostile_claim_hits_the_step_budget() {
    // 24 unique devices in 11 groups; 12 pairwise-distinct groups are impossible, and the
    // devices differ, so only exhaustive search could tell.
    let devices: Vec<(String, String)> = (0..24)
        .map(|i| (format!("gpu-{i}"), format!("{}Gi", 10 + i)))
        .collect();
    let refs: Vec<(&str, &str)> = devices
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let mut template = gpu_template("pool", &refs);
    for (i, device) in template.devices.iter_mut().enumerate() {
        let group = i64::try_from(i % 11).unwrap_or(0);
        device
            .attributes
            .insert("group".into(), AttributeValue::Int(group));
    }
    let node = Inventory::from_templates(&[template]).expect("inventory");
    let spec = format!(
        r#"{{"devices": {{"requests": [{}],
             "constraints": [{{"distinctAttribute": "gpu.example.com/group"}}]}}}}"#,
        exact_request("a", GPU_CLASS, 12, &[]),
    );
    assert_eq!(
        node.allocate_with_budget(&[claim("pod", &spec)], 10_000),
        Err(Unsatisfiable::StepBudgetExceeded { budget: 10_000 })
    );
}

#[test]
fn unknown_devices_do_not_commit() {
    let mut node = gpu_node(1, "80Gi");
    let allocation = Allocation {
        claims: vec![ClaimAllocation {
            claim: ClaimKey::new("ns", "c"),
            devices: vec![AllocatedDevice {
                request: "r".into(),
                device: gpu_id("gpu-9"),
            }],
        }],
    };
    assert_eq!(
        node.commit(&allocation),
        Err(InventoryError::UnknownDevice(gpu_id("gpu-9")))
    );
    assert!(!node.is_committed(&ClaimKey::new("ns", "c")));
}

#[test]
fn templates_must_declare_the_counters_devices_consume() {
    let mut template = mig_template(1);
    template.shared_counters.clear();
    assert!(matches!(
        Inventory::from_templates(&[template]),
        Err(InventoryError::UnknownCounter { .. })
    ));
    let template = gpu_template("pool", &[("gpu-0", "1Gi"), ("gpu-0", "2Gi")]);
    assert!(matches!(
        Inventory::from_templates(&[template]),
        Err(InventoryError::DuplicateDevice(_))
    ));
}

#[test]
fn inventories_and_claims_cross_threads() {
    fn check<T: Send + Sync>() {}
    check::<Inventory>();
    check::<ClaimRequests>();
    check::<crate::selector::SelectorCache>();
}

#[test]
fn a_selector_erring_on_any_device_refuses_the_node_as_kube_scheduler_does() {
    // gpu-0 has a `model`, gpu-1 none: reading it errs at run time on gpu-1.
    let mut template = gpu_template("pool", &[("gpu-0", "80Gi"), ("gpu-1", "80Gi")]);
    template.devices[0]
        .attributes
        .insert("model".into(), AttributeValue::String("a100".into()));
    let node = Inventory::from_templates(&[template]).expect("inventory");
    let unguarded = r#"device.attributes["gpu.example.com"].model == "a100""#;
    let error = node
        .allocate(&[claim("pod", &exact("gpu", GPU_CLASS, 1, &[unguarded]))])
        .expect_err("kube-scheduler fails the allocation on this node, gpu-0 matching or not");
    assert!(error.to_string().contains("model"), "{error}");
    // Guarded with `in`, the selector is false on gpu-1, not an error: gpu-0 is taken.
    let guarded = r#""model" in device.attributes["gpu.example.com"] && device.attributes["gpu.example.com"].model == "a100""#;
    let allocation = node
        .allocate(&[claim("pod", &exact("gpu", GPU_CLASS, 1, &[guarded]))])
        .expect("gpu-0 matches");
    assert_eq!(device_names(&allocation), ["gpu-0"]);
}

#[test]
fn the_device_bound_counts_free_devices_and_the_fewest_a_claim_takes() {
    let mut node = gpu_node(8, "80Gi");
    assert_eq!(node.free_devices(), Some(8));
    let two = claim("a", &exact("gpu", GPU_CLASS, 2, &[]));
    assert_eq!(two.min_devices(), 2);
    let allocation = node.allocate(&[two]).expect("fits");
    node.commit(&allocation).expect("commits");
    assert_eq!(node.free_devices(), Some(6));
    let spec = first_available("gpu", &[("big", GPU_CLASS, 4), ("small", GPU_CLASS, 1)]);
    assert_eq!(claim("b", &spec).min_devices(), 1);
    assert_eq!(claim("c", &all_request("gpu", GPU_CLASS)).min_devices(), 1);
    // A shared device bounds nothing.
    let mut template = gpu_template("pool", &[("gpu-0", "80Gi")]);
    template.devices[0].allow_multiple_allocations = true;
    let shared = Inventory::from_templates(&[template]).expect("inventory");
    assert_eq!(shared.free_devices(), None);
}
