use serde_json::{Value, json};

use super::*;

const REQUESTED_AT: &str = "2026-12-01T10:00:00Z";

fn ts(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn at(seconds: i64) -> Timestamp {
    ts(REQUESTED_AT)
        .checked_add(SignedDuration::from_secs(seconds))
        .unwrap()
}

fn condition(type_: &str, status: &str, reason: &str, at: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": "rebooting for KWOKRebootRequired/x", "lastTransitionTime": at})
}

fn claim(annotations: Value, conditions: Vec<Value>) -> NodeClaim {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "c", "uid": "u-1", "annotations": annotations},
        "spec": {"nodeClassRef": {"group": "capstan.dev", "kind": "KwokNodeClass", "name": "k"}, "requirements": []},
        "status": {"providerID": "kwok://c", "conditions": conditions}
    }))
    .unwrap()
}

fn requested(annotations: Value) -> Episode {
    Episode::of(&claim(
        annotations,
        vec![condition(
            "Rebooting",
            "True",
            "RebootRequested",
            REQUESTED_AT,
        )],
    ))
    .unwrap()
}

fn issued(issued_at: &str) -> Episode {
    Episode::of(&claim(
        json!({REBOOT_PRE_BOOT_ID: "boot-1"}),
        vec![
            condition("Rebooting", "True", "RebootIssued", REQUESTED_AT),
            condition("Initialized", "Unknown", "Rebooting", issued_at),
        ],
    ))
    .unwrap()
}

fn node(boot: &str, ready: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": "n"},
        "status": {
            "nodeInfo": {"bootID": boot, "architecture": "", "containerRuntimeVersion": "", "kernelVersion": "",
                "kubeProxyVersion": "", "kubeletVersion": "", "machineID": "", "operatingSystem": "", "osImage": "", "systemUUID": ""},
            "conditions": [{"type": "Ready", "status": ready}]
        }
    }))
    .unwrap()
}

#[test]
fn only_a_reboot_under_way_is_an_episode() {
    let ended = claim(
        json!({}),
        vec![condition(
            "Rebooting",
            "False",
            "RebootSucceeded",
            REQUESTED_AT,
        )],
    );
    assert_eq!(Episode::of(&ended), None);
    assert!(!ended.rebooting());
    assert_eq!(rebooted_at(&ended), Some(ts(REQUESTED_AT)));
    assert_eq!(Episode::of(&claim(json!({}), vec![])), None);
    let episode = requested(json!({REBOOT_GRACE_PERIOD: "1m30s"}));
    assert_eq!(episode.phase, Phase::Requested);
    assert_eq!(episode.grace, Ok(Some(Duration::from_secs(90))));
    assert_eq!(episode.message, "rebooting for KWOKRebootRequired/x");
}

#[test]
fn a_bounded_drain_lets_the_pods_left_ride_the_reboot() {
    let episode = requested(json!({REBOOT_GRACE_PERIOD: "60s"}));
    let step = next(&episode, Some(&node("boot-1", "True")), None, at(1));
    assert_eq!(
        step,
        Step::Drain {
            until: Some(at(60)),
            floor: at(5)
        }
    );
    assert!(!drain_over(true, Some(at(60)), at(5), at(1)), "floor");
    assert!(drain_over(true, Some(at(60)), at(5), at(5)));
    assert!(!drain_over(false, Some(at(60)), at(5), at(59)));
    assert!(drain_over(false, Some(at(60)), at(5), at(60)), "bound");
    assert!(!drain_over(false, None, at(5), at(3600)), "unbounded");
}

#[test]
fn a_bound_shorter_than_the_floor_is_the_floor_and_zero_skips_the_drain() {
    let short = requested(json!({REBOOT_GRACE_PERIOD: "1s"}));
    assert_eq!(
        next(&short, Some(&node("boot-1", "True")), None, at(0)),
        Step::Drain {
            until: Some(at(5)),
            floor: at(5)
        }
    );
    let forceful = requested(json!({REBOOT_GRACE_PERIOD: "0s"}));
    assert_eq!(
        next(&forceful, Some(&node("boot-1", "True")), None, at(0)),
        Step::Issue
    );
    let unbounded = requested(json!({}));
    assert_eq!(
        next(&unbounded, Some(&node("boot-1", "True")), None, at(0)),
        Step::Drain {
            until: None,
            floor: at(5)
        }
    );
}

#[test]
fn an_unreadable_bound_fails_without_a_replacement() {
    let episode = requested(json!({REBOOT_GRACE_PERIOD: "soon"}));
    let Step::Fail { outcome, message } =
        next(&episode, Some(&node("boot-1", "True")), None, at(0))
    else {
        panic!("not a failure");
    };
    assert_eq!(outcome, Outcome::InvalidRequest);
    assert!(!outcome.replaces());
    assert!(message.contains("soon"), "{message}");
}

#[test]
fn issuing_is_retried_until_the_timeout_and_a_new_boot_skips_the_call() {
    let episode = requested(json!({REBOOT_PRE_BOOT_ID: "boot-1"}));
    let up = node("boot-1", "True");
    assert_eq!(
        next(&episode, Some(&up), Some(at(10)), at(200)),
        Step::Issue
    );
    assert_eq!(
        next(&episode, Some(&up), Some(at(10)), at(311)),
        Step::Fail {
            outcome: Outcome::ProviderError,
            message: "reboot was not issued within the issuance timeout".into()
        }
    );
    assert_eq!(
        next(
            &episode,
            Some(&node("boot-2", "False")),
            Some(at(10)),
            at(20)
        ),
        Step::Issued
    );
}

#[test]
fn an_issued_reboot_succeeds_on_a_new_boot_that_is_ready() {
    let episode = issued("2026-12-01T10:01:00Z");
    assert_eq!(
        next(&episode, Some(&node("boot-1", "True")), None, at(70)),
        Step::Watch { booted: false },
        "the old boot, still up"
    );
    assert_eq!(
        next(&episode, Some(&node("boot-2", "False")), None, at(80)),
        Step::Watch { booted: true }
    );
    assert_eq!(
        next(&episode, Some(&node("boot-2", "True")), None, at(90)),
        Step::Succeed
    );
    let late = 60 + 20 * 60 + 1;
    assert_eq!(
        next(&episode, Some(&node("boot-1", "False")), None, at(late)),
        Step::Fail {
            outcome: Outcome::RecoveryTimeout,
            message: "node did not recover within the observation window".into()
        }
    );
}

#[test]
fn a_missing_node_is_awaited_until_the_phase_runs_out() {
    let episode = requested(json!({}));
    assert_eq!(
        next(&episode, None, None, at(60)),
        Step::AwaitNode(Duration::from_secs(15))
    );
    assert!(matches!(
        next(&episode, None, None, at(301)),
        Step::Fail {
            outcome: Outcome::ProviderError,
            ..
        }
    ));
}

#[test]
fn the_operation_id_is_stable_for_the_episode() {
    let episode = requested(json!({REBOOT_PRE_BOOT_ID: "boot-1"}));
    let id = operation_id("u-1", &episode);
    assert_eq!(id, format!("u-1-{}-boot-1", at(0).as_nanosecond()));
    assert_eq!(id, operation_id("u-1", &episode.clone()));
    let later = Episode {
        requested_at: at(1),
        ..episode
    };
    assert_ne!(id, operation_id("u-1", &later));
}

#[test]
fn two_reboots_a_day_then_a_replacement() {
    let none = claim(json!({}), vec![]);
    assert!(!exhausted(&none, at(0)));
    let once = claim(json!({REBOOTS: with_reboot(&none, at(0))}), vec![]);
    assert_eq!(recent_reboots(&once, at(10)), vec![at(0)]);
    assert!(!exhausted(&once, at(10)));
    let twice = claim(json!({REBOOTS: with_reboot(&once, at(3600))}), vec![]);
    assert!(exhausted(&twice, at(3700)));
    // A day after the first, one is left in the window.
    assert!(!exhausted(&twice, at(24 * 3600 + 1)));
    // The history keeps the last two only.
    let thrice = with_reboot(&twice, at(24 * 3600 + 1));
    assert_eq!(thrice.split(',').count(), 2, "{thrice}");
    let garbled = claim(json!({REBOOTS: "yesterday,"}), vec![]);
    assert!(recent_reboots(&garbled, at(0)).is_empty());
}
