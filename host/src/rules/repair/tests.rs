use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use proptest::prelude::*;

use super::*;

fn rule(
    condition: &str,
    status: &str,
    regex: &str,
    toleration: u64,
    grace: Option<u64>,
    priority: u8,
    action: RepairAction,
) -> RepairRule {
    RepairRule {
        condition_type: condition.into(),
        condition_status: status.into(),
        reason_regex: regex.into(),
        toleration_seconds: toleration,
        termination_grace_seconds: grace,
        priority,
        action,
    }
}

/// Karpenter's kwok provider's rules.
fn kwok() -> Rules {
    Rules::new(&[
        rule("Ready", "False", "", 600, Some(0), 0, RepairAction::Replace),
        rule(
            "Ready",
            "Unknown",
            ".*",
            600,
            Some(0),
            0,
            RepairAction::Replace,
        ),
        rule(
            "KWOKUnhealthy",
            "True",
            ".*",
            30,
            Some(45),
            0,
            RepairAction::Replace,
        ),
        rule(
            "KWOKRebootRequired",
            "True",
            ".*",
            30,
            Some(60),
            0,
            RepairAction::Reboot,
        ),
    ])
    .unwrap()
    .unwrap()
}

/// Ready=False/Unknown for `toleration`, as contracts before 0.4 put it.
fn ready(toleration: u64) -> Rules {
    Rules::new(&[
        rule(
            "Ready",
            "False",
            "",
            toleration,
            None,
            0,
            RepairAction::Replace,
        ),
        rule(
            "Ready",
            "Unknown",
            ".*",
            toleration,
            None,
            0,
            RepairAction::Replace,
        ),
    ])
    .unwrap()
    .unwrap()
}

fn node(conditions: &[(&str, &str, &str, Option<Timestamp>)]) -> Node {
    Node {
        metadata: ObjectMeta {
            creation_timestamp: Some(Time(at(-3600))),
            ..ObjectMeta::default()
        },
        status: Some(NodeStatus {
            conditions: Some(
                conditions
                    .iter()
                    .map(|(type_, status, reason, since)| NodeCondition {
                        type_: (*type_).into(),
                        status: (*status).into(),
                        reason: Some((*reason).into()),
                        last_transition_time: since.map(Time),
                        ..NodeCondition::default()
                    })
                    .collect(),
            ),
            ..NodeStatus::default()
        }),
        ..Node::default()
    }
}

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap()
}

#[test]
fn a_set_needs_one_default_that_replaces_and_well_formed_rules() {
    assert!(Rules::new(&[]).unwrap().is_none(), "no rules: no repair");
    let replace = RepairAction::Replace;
    let two_defaults = [
        rule("Ready", "False", "", 1, None, 0, replace),
        rule("Ready", "Unknown", "", 1, None, 0, replace),
    ];
    assert_eq!(
        Rules::new(&two_defaults).unwrap_err(),
        RulesError::Defaults(2)
    );
    let none = [rule("Ready", "False", "x", 1, None, 0, replace)];
    assert_eq!(Rules::new(&none).unwrap_err(), RulesError::Defaults(0));
    let rebooting_default = [rule("Ready", "False", "", 1, None, 0, RepairAction::Reboot)];
    assert_eq!(
        Rules::new(&rebooting_default).unwrap_err(),
        RulesError::DefaultReboots("Ready=False".into())
    );
    for (bad, problem) in [
        (rule("", "False", "", 1, None, 0, replace), "condition type"),
        (
            rule("Ready", "Maybe", "", 1, None, 0, replace),
            "True, False or Unknown",
        ),
        (
            rule("Ready", "False", "", 1, None, 101, replace),
            "priority 101",
        ),
        (
            rule("Ready", "False", "(", 1, None, 0, replace),
            "reason-regex",
        ),
    ] {
        let err = Rules::new(&[bad]).unwrap_err().to_string();
        assert!(err.contains(problem), "{err}");
    }
}

#[test]
fn reasons_pick_the_rule_and_the_default_takes_the_rest() {
    let rules = Rules::new(&[
        rule("Ready", "False", "", 600, None, 0, RepairAction::Replace),
        rule(
            "Ready",
            "False",
            "^KernelDeadlock$",
            60,
            Some(0),
            50,
            RepairAction::Reboot,
        ),
        rule(
            "DiskPressure",
            "True",
            "Full",
            30,
            None,
            0,
            RepairAction::Replace,
        ),
    ])
    .unwrap()
    .unwrap();
    let deadlock = node(&[("Ready", "False", "KernelDeadlock", Some(at(0)))]);
    let m = rules.matches(&deadlock);
    assert_eq!(m.len(), 1);
    assert_eq!(rules.rules()[m[0].rule].action, Action::Reboot);
    assert_eq!(m[0].due, Some(at(60)));
    // Anchored: another reason of Ready=False falls to the default.
    let other = node(&[("Ready", "False", "KernelDeadlockish", Some(at(0)))]);
    let m = rules.matches(&other);
    assert_eq!(m.len(), 1);
    assert!(rules.rules()[m[0].rule].reason.is_none());
    assert_eq!(m[0].due, Some(at(600)));
    // The default covers every pair the set names: DiskPressure=True with another reason.
    let disk = node(&[("DiskPressure", "True", "Slow", Some(at(0)))]);
    let m = rules.matches(&disk);
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].condition_type, "DiskPressure");
    assert_eq!(m[0].due, Some(at(600)), "the default's toleration");
    // A pair no rule names is healthy.
    assert!(
        rules
            .matches(&node(&[("Ready", "True", "", Some(at(0)))]))
            .is_empty()
    );
    assert!(!rules.is_unhealthy(&node(&[("Ready", "True", "", Some(at(0)))])));
    assert!(rules.is_unhealthy(&other));
}

#[test]
fn the_transition_counts_from_the_nodes_creation_at_the_earliest() {
    let rules = ready(60);
    let mut sick = node(&[("Ready", "False", "", Some(at(-7200)))]);
    // Created at -3600: due at -3540, not -7140.
    assert_eq!(rules.matches(&sick)[0].due, Some(at(-3540)));
    sick.metadata.creation_timestamp = None;
    assert_eq!(rules.matches(&sick)[0].due, Some(at(-7140)));
    let never = node(&[("Ready", "False", "", None)]);
    let mut never = never;
    never.metadata.creation_timestamp = None;
    assert_eq!(rules.matches(&never)[0].due, None);
}

#[test]
fn replace_beats_reboot_and_the_shortest_grace_bounds_the_drain() {
    let rules = kwok();
    let sick = node(&[
        ("KWOKRebootRequired", "True", "Fault", Some(at(0))),
        ("KWOKUnhealthy", "True", "Fault", Some(at(100))),
    ]);
    let m = rules.matches(&sick);
    // Only the reboot is due at 30 s.
    let r = rules.resolve(&m, at(30), None).unwrap();
    assert_eq!(r.action, Action::Reboot);
    assert_eq!(r.grace, Some(Duration::from_secs(60)));
    // At 130 s both are: the replace wins, the shorter grace (45 s) bounds it.
    let r = rules.resolve(&m, at(130), None).unwrap();
    assert_eq!(r.action, Action::Replace);
    assert_eq!(r.condition_type, "KWOKUnhealthy");
    assert_eq!(r.grace, Some(Duration::from_secs(45)));
    assert!(!r.default);
    // Nothing is due before 30 s; the next due time says when to look again.
    assert_eq!(rules.resolve(&m, at(29), None), None);
    assert_eq!(rules.next_due(&m, None), Some(at(30)));
}

#[test]
fn the_toleration_runs_again_after_a_reboot_and_aging_raises_the_score() {
    let rules = kwok();
    let sick = node(&[("KWOKRebootRequired", "True", "Fault", Some(at(0)))]);
    let m = rules.matches(&sick);
    // Rebooted at 1000: due again at 1030.
    assert_eq!(rules.resolve(&m, at(1029), Some(at(1000))), None);
    assert!(rules.resolve(&m, at(1030), Some(at(1000))).is_some());
    let fresh = rules.resolve(&m, at(30), None).unwrap().score;
    let aged = rules.resolve(&m, at(30 + 3600), None).unwrap().score;
    assert!((aged - fresh - 2.0).abs() < 1e-9, "{fresh} {aged}");
}

#[test]
fn higher_priority_wins_between_equal_actions() {
    let rules = Rules::new(&[
        rule("Ready", "False", "", 0, None, 0, RepairAction::Replace),
        rule("A", "True", ".*", 0, None, 10, RepairAction::Replace),
        rule("B", "True", ".*", 0, None, 90, RepairAction::Replace),
    ])
    .unwrap()
    .unwrap();
    let sick = node(&[
        ("A", "True", "", Some(at(0))),
        ("B", "True", "", Some(at(5))),
    ]);
    let r = rules.resolve(&rules.matches(&sick), at(10), None).unwrap();
    assert_eq!(r.condition_type, "B");
    // Dense ranks: priorities 0, 10, 90 are ranks 0, 1, 2.
    assert!(r.score >= 2.0 && r.score < 2.01, "{}", r.score);
}

#[test]
fn a_matching_condition_waits_out_its_toleration_then_repairs() {
    let rules = ready(600);
    let sick = node(&[("Ready", "False", "", Some(at(0)))]);
    assert_eq!(
        decide(&sick, &rules, at(599), 1, 10, None),
        Decision::Wait(Some(Duration::from_secs(1)))
    );
    let Decision::Repair(found) = decide(&sick, &rules, at(600), 1, 10, None) else {
        panic!("not repaired at the end of the toleration");
    };
    assert_eq!(found.condition_type, "Ready");
    assert_eq!(found.condition_status, "False");
    assert_eq!(found.due, at(600));
    for healthy in [
        node(&[("Ready", "True", "", Some(at(0)))]),
        node(&[("MemoryPressure", "False", "", Some(at(0)))]),
        node(&[]),
        Node::default(),
    ] {
        assert_eq!(
            decide(&healthy, &rules, at(10_000), 0, 10, None),
            Decision::Healthy
        );
        assert!(!rules.is_unhealthy(&healthy));
    }
}

#[test]
fn more_than_twenty_percent_unhealthy_blocks_repair() {
    let rules = ready(60);
    let sick = node(&[("Ready", "False", "", Some(at(0)))]);
    assert_eq!(allowed_unhealthy(0), 0);
    assert_eq!(allowed_unhealthy(1), 1);
    assert_eq!(allowed_unhealthy(3), 1);
    assert_eq!(allowed_unhealthy(5), 1);
    assert_eq!(allowed_unhealthy(6), 2);
    assert_eq!(allowed_unhealthy(10), 2);
    assert_eq!(allowed_unhealthy(11), 3);
    assert!(matches!(
        decide(&sick, &rules, at(60), 1, 1, None),
        Decision::Repair(_)
    ));
    assert!(matches!(
        decide(&sick, &rules, at(60), 1, 3, None),
        Decision::Repair(_)
    ));
    assert_eq!(
        decide(&sick, &rules, at(60), 2, 3, None),
        Decision::Blocked {
            unhealthy: 2,
            total: 3
        }
    );
    assert!(matches!(
        decide(&sick, &rules, at(60), 2, 10, None),
        Decision::Repair(_)
    ));
}

proptest! {
    /// Repair goes on exactly while the unhealthy share is at most 20% rounded up, and the
    /// allowance never exceeds the pool or falls below 20% of it.
    #[test]
    fn the_threshold_is_twenty_percent_rounded_up(total in 1usize..500, unhealthy in 1usize..500) {
        let unhealthy = unhealthy.min(total);
        let allowed = allowed_unhealthy(total);
        prop_assert!(allowed <= total);
        prop_assert!(allowed * 100 >= total * 20);
        prop_assert!((allowed - 1) * 100 < total * 20);
        let rules = ready(1);
        let sick = node(&[("Ready", "False", "", Some(at(0)))]);
        let decision = decide(&sick, &rules, at(5), unhealthy, total, None);
        prop_assert_eq!(matches!(decision, Decision::Repair(_)), 5 * (unhealthy - 1) < total);
    }
}

fn due(action: Action, grace: Option<u64>) -> Repair {
    Repair {
        action,
        condition_type: "KWOKRebootRequired".into(),
        condition_status: "True".into(),
        reason: "x".into(),
        default: false,
        toleration: Duration::from_secs(30),
        due: at(30),
        grace: grace.map(Duration::from_secs),
        score: 0.0,
    }
}

#[test]
fn a_reboot_is_bounded_by_the_shorter_grace_and_becomes_a_replacement_after_two() {
    let secs = |s| Some(Duration::from_secs(s));
    assert_eq!(
        act(&due(Action::Reboot, Some(60)), None, false, false, None),
        Act::Reboot { grace: secs(60) }
    );
    assert_eq!(
        act(&due(Action::Reboot, Some(60)), secs(20), false, false, None),
        Act::Reboot { grace: secs(20) }
    );
    // No bound in the rule: the claim's own, else unbounded.
    assert_eq!(
        act(&due(Action::Reboot, None), secs(20), false, false, None),
        Act::Reboot { grace: secs(20) }
    );
    assert_eq!(
        act(&due(Action::Reboot, None), None, false, false, None),
        Act::Reboot { grace: None }
    );
    assert_eq!(
        act(&due(Action::Reboot, Some(60)), None, true, false, None),
        Act::Replace { grace: secs(60) }
    );
    assert_eq!(
        act(
            &due(Action::Replace, Some(0)),
            secs(300),
            false,
            false,
            None
        ),
        Act::Replace { grace: secs(0) }
    );
    assert_eq!(
        act(&due(Action::Replace, None), secs(300), false, false, None),
        Act::Replace { grace: None }
    );
}

#[test]
fn do_not_repair_and_unbounded_blockers_veto() {
    let Act::Veto(why) = act(&due(Action::Replace, Some(0)), None, false, true, None) else {
        panic!("not vetoed");
    };
    assert!(why.contains("karpenter.sh/do-not-repair"), "{why}");
    let Act::Veto(why) = act(&due(Action::Reboot, None), None, false, false, Some("ns/p")) else {
        panic!("not vetoed");
    };
    assert!(why.contains("ns/p"), "{why}");
    // Either bound lets the repair through the blocker.
    assert!(matches!(
        act(
            &due(Action::Reboot, None),
            Some(Duration::from_secs(5)),
            false,
            false,
            Some("ns/p")
        ),
        Act::Reboot { .. }
    ));
    assert!(matches!(
        act(
            &due(Action::Replace, Some(5)),
            None,
            false,
            false,
            Some("ns/p")
        ),
        Act::Replace { .. }
    ));
}
