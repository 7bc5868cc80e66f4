//! The provisioner's memory of which NodeClaim each pod was sent to, and the guard built on it.
//!
//! The simulation already counts claims that are launching or whose Node is still starting as
//! capacity, so a pod it placed on a claim in one batch lands on that claim again in the next.
//! The guard is a second line behind it: when every pending pod of a batch was nominated to a
//! claim that is still coming up, the batch creates no claim, whatever the simulation says. The
//! guard looks at the batch as a whole, not claim by claim: pods alike are interchangeable, and
//! the simulation may well place a nominated pod on a new claim and a new pod on the claim the
//! first was nominated to. A batch the guard holds is logged, so a disagreement between the
//! simulation and the cluster shows up there instead of as a node launched every batch until the
//! pool's limits stop it.
//!
//! A nomination holds while its claim exists, is not being deleted and is not initialized yet.
//! Once the claim's node is initialized the simulation sees it as it is (with the pods
//! kube-scheduler bound there, which need not be the ones nominated to it: pods alike are
//! interchangeable), so the guard has nothing left to add. The launch and registration timeouts
//! delete claims that never come up, which ends their nominations.

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};

use kube::ResourceExt;

use crate::api::NodeClaim;
use crate::api::nodeclaim::conditions::INITIALIZED;
use crate::api::shared::find_condition;

/// Pod UID → the claim it was nominated to.
#[derive(Debug, Default)]
pub struct Nominations {
    by_pod: HashMap<String, String>,
}

/// What [`Nominations::guard`] decided about a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Create them: at least one pod is not waiting for a claim.
    Create,
    /// Do not: every pod is waiting for one of these claims.
    Waiting(Vec<String>),
}

impl Nominations {
    /// Records that the pods with these UIDs were sent to `claim`.
    pub fn nominate<'a>(&mut self, pods: impl IntoIterator<Item = &'a str>, claim: &str) {
        for uid in pods {
            self.by_pod.insert(uid.to_owned(), claim.to_owned());
        }
    }

    /// Forgets nominations whose claim is gone, deleting or initialized, and those of pods no
    /// longer pending.
    pub fn expire<C: Borrow<NodeClaim>>(&mut self, claims: &[C], pending: &HashSet<&str>) {
        let waiting: HashSet<String> = claims
            .iter()
            .map(Borrow::borrow)
            .filter(|c| still_coming_up(c))
            .map(|c| c.name_any())
            .collect();
        self.by_pod
            .retain(|pod, claim| pending.contains(pod.as_str()) && waiting.contains(claim));
    }

    /// Whether new claims may be created for a batch of pending pods with these UIDs: not when
    /// every one of them waits for a claim still coming up.
    pub fn guard<'a>(&self, pods: impl IntoIterator<Item = &'a str>) -> Verdict {
        let mut waiting = Vec::new();
        for uid in pods {
            match self.by_pod.get(uid) {
                Some(claim) => {
                    if !waiting.contains(claim) {
                        waiting.push(claim.clone());
                    }
                }
                None => return Verdict::Create,
            }
        }
        if waiting.is_empty() {
            Verdict::Create
        } else {
            Verdict::Waiting(waiting)
        }
    }

    /// How many pods have a nomination.
    pub fn len(&self) -> usize {
        self.by_pod.len()
    }

    /// Whether no pod has a nomination.
    pub fn is_empty(&self) -> bool {
        self.by_pod.is_empty()
    }
}

fn still_coming_up(claim: &NodeClaim) -> bool {
    claim.metadata.deletion_timestamp.is_none()
        && !claim
            .status
            .as_ref()
            .and_then(|s| find_condition(&s.conditions, INITIALIZED))
            .is_some_and(|c| c.is_true())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::shared::{ConditionStatus, set_condition};
    use crate::api::{NodeClaim, NodeClaimSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn claim(name: &str) -> NodeClaim {
        let spec: NodeClaimSpec = serde_json::from_value(serde_json::json!({
            "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "c"},
            "requirements": []
        }))
        .unwrap();
        NodeClaim::new(name, spec)
    }

    fn initialized(mut c: NodeClaim, at: Timestamp) -> NodeClaim {
        let status = c.status.get_or_insert_with(Default::default);
        set_condition(
            &mut status.conditions,
            INITIALIZED,
            ConditionStatus::True,
            Some("Initialized"),
            Some(""),
            None,
            Time(at),
        );
        c
    }

    fn ts(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    #[test]
    fn table() {
        struct Case {
            name: &'static str,
            claims: Vec<NodeClaim>,
            pending: &'static [&'static str],
            batch: &'static [&'static str],
            want: Verdict,
        }
        let deleting = {
            let mut c = claim("a");
            c.metadata.deletion_timestamp = Some(Time(ts(0)));
            c
        };
        let cases = [
            Case {
                name: "pods waiting for a launching claim get no second claim",
                claims: vec![claim("a")],
                pending: &["p1", "p2"],
                batch: &["p1", "p2"],
                want: Verdict::Waiting(vec!["a".into()]),
            },
            Case {
                name: "one pod without a nomination is enough to create",
                claims: vec![claim("a")],
                pending: &["p1", "p2", "p3"],
                batch: &["p1", "p3"],
                want: Verdict::Create,
            },
            Case {
                name: "a deleted claim releases its pods",
                claims: vec![deleting],
                pending: &["p1", "p2"],
                batch: &["p1", "p2"],
                want: Verdict::Create,
            },
            Case {
                name: "a claim that is gone releases its pods",
                claims: vec![claim("b")],
                pending: &["p1", "p2"],
                batch: &["p1"],
                want: Verdict::Create,
            },
            Case {
                name: "an initialized claim releases its pods (the simulation sees its node)",
                claims: vec![initialized(claim("a"), ts(90))],
                pending: &["p1", "p2"],
                batch: &["p1", "p2"],
                want: Verdict::Create,
            },
        ];
        for case in cases {
            let mut n = Nominations::default();
            n.nominate(["p1", "p2"], "a");
            let pending: HashSet<&str> = case.pending.iter().copied().collect();
            n.expire(&case.claims, &pending);
            assert_eq!(
                n.guard(case.batch.iter().copied()),
                case.want,
                "{}",
                case.name
            );
        }
    }

    #[test]
    fn pods_no_longer_pending_are_forgotten() {
        let mut n = Nominations::default();
        n.nominate(["p1", "p2"], "a");
        n.expire(&[claim("a")], &HashSet::from(["p2"]));
        assert_eq!(n.len(), 1);
        assert_eq!(n.guard(["p1"]), Verdict::Create);
    }
}
