use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::*;

/// The clock of every case: deletion at T0, now at T0 + `at` seconds.
const T0: i64 = 1_800_000_000;

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(T0 + seconds).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn rfc3339(seconds: i64) -> String {
    at(seconds).to_string()
}

/// A running pod `name`, tweaked by `f` on its JSON.
fn pod(name: &str, f: impl FnOnce(&mut Value)) -> Pod {
    let mut v = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": name},
        "spec": {"containers": [{"name": "c", "image": "i"}], "terminationGracePeriodSeconds": 30},
        "status": {"phase": "Running", "startTime": rfc3339(-3600)},
    });
    f(&mut v);
    serde_json::from_value(v).unwrap()
}

fn plain(v: &mut Value) {
    let _ = v;
}

fn daemon(v: &mut Value) {
    v["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "ds-uid",
    }]);
}

fn critical(v: &mut Value) {
    v["spec"]["priorityClassName"] = json!("system-node-critical");
}

fn critical_daemon(v: &mut Value) {
    daemon(v);
    v["spec"]["priorityClassName"] = json!("system-cluster-critical");
}

fn dnd_annotation(v: &mut Value) {
    v["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"});
}

fn grace(seconds: i64) -> impl FnOnce(&mut Value) {
    move |v| v["spec"]["terminationGracePeriodSeconds"] = json!(seconds)
}

/// Terminating, with its deletion timestamp `seconds` after T0.
fn deleted_at(seconds: i64) -> impl FnOnce(&mut Value) {
    move |v| v["metadata"]["deletionTimestamp"] = json!(rfc3339(seconds))
}

fn phase(phase: &'static str) -> impl FnOnce(&mut Value) {
    move |v| v["status"]["phase"] = json!(phase)
}

fn tolerating(toleration: Value) -> impl FnOnce(&mut Value) {
    move |v| v["spec"]["tolerations"] = json!([toleration])
}

/// (pod name, decision), as [`plan`] returns them.
type Decided = Vec<(String, Decision)>;

/// A case with a deadline: (what, pods, deadline, now, decisions).
type DeadlineCase = (&'static str, Vec<Pod>, Option<i64>, i64, Decided);

fn decisions(pods: &[Pod], deadline: Option<i64>, now: i64) -> Decided {
    plan(pods, deadline.map(at), at(now))
        .pods
        .into_iter()
        .map(|(p, d)| (p.name_any(), d))
        .collect()
}

fn expect(pairs: &[(&str, Decision)]) -> Decided {
    pairs.iter().map(|(n, d)| ((*n).to_owned(), *d)).collect()
}

const EVICT: Decision = Decision::Evict;
const TERMINATING: Decision = Decision::Wait(Wait::Terminating);
const DND: Decision = Decision::Wait(Wait::DoNotDisrupt);

fn behind(group: Group) -> Decision {
    Decision::Wait(Wait::Behind(group))
}

fn delete(grace_seconds: i64) -> Decision {
    Decision::Delete { grace_seconds }
}

#[test]
fn groups_go_in_karpenters_order() {
    let all = || {
        vec![
            pod("cd", critical_daemon),
            pod("c", critical),
            pod("d", daemon),
            pod("n", plain),
        ]
    };
    let nc = Group::NonCritical;
    // The others wait behind "n", the only non-critical non-DaemonSet pod.
    let first_group_is = |n: Decision| {
        expect(&[
            ("cd", behind(nc)),
            ("c", behind(nc)),
            ("d", behind(nc)),
            ("n", n),
        ])
    };
    let cases: Vec<(&str, Vec<Pod>, Decided)> = vec![
        (
            "all four: only the non-critical non-DaemonSet pods go first",
            all(),
            first_group_is(EVICT),
        ),
        (
            "an evicted pod still terminating holds the next group",
            {
                let mut pods = all();
                pods[3] = pod("n", deleted_at(10));
                pods
            },
            first_group_is(TERMINATING),
        ),
        (
            "then the DaemonSet pods",
            all().into_iter().take(3).collect(),
            expect(&[
                ("cd", behind(Group::NonCriticalDaemon)),
                ("c", behind(Group::NonCriticalDaemon)),
                ("d", EVICT),
            ]),
        ),
        (
            "then the critical pods",
            all().into_iter().take(2).collect(),
            expect(&[("cd", behind(Group::Critical)), ("c", EVICT)]),
        ),
        (
            "the critical DaemonSet pods last",
            all().into_iter().take(1).collect(),
            expect(&[("cd", EVICT)]),
        ),
        ("nothing left: drained", vec![], vec![]),
        (
            "a DaemonSet owner of another API version is not a DaemonSet",
            vec![
                pod("odd", |v| {
                    v["metadata"]["ownerReferences"] = json!([{
                        "apiVersion": "extensions/v1beta1", "kind": "DaemonSet",
                        "name": "ds", "uid": "u",
                    }]);
                }),
                pod("d", daemon),
            ],
            expect(&[("odd", EVICT), ("d", behind(nc))]),
        ),
    ];
    for (name, pods, want) in cases {
        assert_eq!(decisions(&pods, None, 0), want, "{name}");
    }
}

#[test]
fn pods_that_do_not_hold_the_node() {
    let cases: Vec<(&str, Pod)> = vec![
        ("succeeded", pod("p", phase("Succeeded"))),
        ("failed", pod("p", phase("Failed"))),
        (
            "mirror pod",
            pod("p", |v| {
                v["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "x"});
            }),
        ),
        (
            "owned by its Node",
            pod("p", |v| {
                v["metadata"]["ownerReferences"] =
                    json!([{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u"}]);
            }),
        ),
        (
            "tolerates the disrupted taint",
            pod(
                "p",
                tolerating(json!({"key": "karpenter.sh/disrupted", "operator": "Exists"})),
            ),
        ),
        (
            "tolerates every taint",
            pod("p", tolerating(json!({"operator": "Exists"}))),
        ),
        (
            "tolerates the key with the NoSchedule effect",
            pod(
                "p",
                tolerating(json!({
                    "key": "karpenter.sh/disrupted", "operator": "Exists", "effect": "NoSchedule",
                })),
            ),
        ),
        (
            "terminating for more than a minute past its deletion timestamp",
            pod("p", deleted_at(-61)),
        ),
    ];
    for (name, p) in cases {
        let pods = [p];
        assert!(plan(&pods, Some(at(100)), at(0)).drained(), "{name}");
        // Even a pod in a later group does not wait behind it.
        let pods = [pods[0].clone(), pod("d", daemon)];
        assert_eq!(
            decisions(&pods, None, 0),
            expect(&[("d", EVICT)]),
            "{name} + a DaemonSet pod"
        );
    }
    let holding: Vec<(&str, Pod, Decision)> = vec![
        (
            "tolerates the key with NoExecute only",
            pod(
                "p",
                tolerating(json!({
                    "key": "karpenter.sh/disrupted", "operator": "Exists", "effect": "NoExecute",
                })),
            ),
            EVICT,
        ),
        (
            "tolerates another key",
            pod(
                "p",
                tolerating(json!({"key": "karpenter.sh/other", "operator": "Exists"})),
            ),
            EVICT,
        ),
        (
            "terminating within the minute",
            pod("p", deleted_at(-59)),
            TERMINATING,
        ),
        ("pending", pod("p", phase("Pending")), EVICT),
    ];
    for (name, p, want) in holding {
        assert_eq!(decisions(&[p], None, 0), expect(&[("p", want)]), "{name}");
    }
}

#[test]
fn do_not_disrupt_holds_until_the_deadline() {
    let dnd = || {
        pod("dnd", |v| {
            dnd_annotation(v);
            grace(0)(v);
        })
    };
    let cases: Vec<DeadlineCase> = vec![
        (
            "no deadline: waits for ever",
            vec![dnd()],
            None,
            100_000,
            expect(&[("dnd", DND)]),
        ),
        (
            "before the deadline",
            vec![dnd()],
            Some(20),
            19,
            expect(&[("dnd", DND)]),
        ),
        (
            "at the deadline, not yet past",
            vec![dnd()],
            Some(20),
            20,
            expect(&[("dnd", DND)]),
        ),
        (
            "past the deadline: deleted with the minimum grace",
            vec![dnd()],
            Some(20),
            21,
            expect(&[("dnd", delete(1))]),
        ),
        (
            "it holds its group and the ones after",
            vec![
                dnd(),
                pod("n", grace(0)),
                pod("d", |v| {
                    daemon(v);
                    grace(0)(v);
                }),
            ],
            Some(20),
            5,
            expect(&[
                ("dnd", DND),
                ("n", EVICT),
                ("d", behind(Group::NonCritical)),
            ]),
        ),
    ];
    for (name, pods, deadline, now, want) in cases {
        assert_eq!(decisions(&pods, deadline, now), want, "{name}");
    }
}

#[test]
fn near_the_deadline_pods_are_deleted_with_the_time_left() {
    // Deadline at T0+20; pods of 10 s grace go at T0+10 with 10 s, ... every group at once.
    let cases: Vec<(&str, Pod, i64, Decision)> = vec![
        ("own grace 10 s, 11 s left", pod("p", grace(10)), 9, EVICT),
        ("own grace 10 s, 10 s left", pod("p", grace(10)), 10, EVICT),
        (
            "own grace 10 s, 9 s left",
            pod("p", grace(10)),
            11,
            delete(9),
        ),
        (
            "own grace 30 s: at once, with the 20 s left",
            pod("p", grace(30)),
            0,
            delete(20),
        ),
        (
            "no grace in the spec counts as 30 s",
            pod("p", |v| {
                v["spec"]["terminationGracePeriodSeconds"] = Value::Null
            }),
            0,
            delete(20),
        ),
        (
            "own grace 0: at the deadline",
            pod("p", grace(0)),
            20,
            EVICT,
        ),
        ("own grace 0: past it", pod("p", grace(0)), 25, delete(1)),
        (
            "a critical DaemonSet pod is not held behind its group",
            pod("p", |v| {
                critical_daemon(v);
                grace(10)(v);
            }),
            15,
            delete(5),
        ),
        (
            "terminating, ends before the deadline: left alone",
            pod("p", deleted_at(18)),
            5,
            TERMINATING,
        ),
        (
            "terminating, ends after the deadline: deleted again",
            pod("p", deleted_at(40)),
            5,
            delete(15),
        ),
        (
            "terminating just past the deadline, shortening impossible",
            pod("p", deleted_at(21)),
            20,
            TERMINATING,
        ),
        (
            "terminating past the deadline, after it",
            pod("p", deleted_at(30)),
            25,
            delete(1),
        ),
    ];
    for (name, p, now, want) in cases {
        let pods = [p, pod("d", daemon)];
        let got = decisions(&pods, Some(20), now);
        assert_eq!(got[0], ("p".to_owned(), want), "{name}: {got:?}");
    }
}

#[test]
fn summary_names_what_is_left() {
    let pods = [
        pod("a", plain),
        pod("b", dnd_annotation),
        pod("c", daemon),
        pod("d", deleted_at(5)),
    ];
    let p = plan(&pods, None, at(0));
    assert_eq!(
        p.summary(3),
        "4 pods left: ns/a (evicting), ns/b (do-not-disrupt), \
         ns/c (after the non-critical pods) and 1 more"
    );
    let one = [pod("a", grace(10))];
    let p = plan(&one, Some(at(5)), at(0));
    assert_eq!(p.summary(5), "1 pod left: ns/a (deleting, 5s grace)");
}
