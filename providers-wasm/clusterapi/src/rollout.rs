//! Removing one Machine from a MachineDeployment that is mid-rollout.
//!
//! A MachineDeployment whose template changed has several MachineSets with replicas until the
//! rollout is done (with the `OnDelete` strategy, until someone deletes the old Machines). Lowering
//! its replicas then makes Cluster API's MachineDeployment controller shrink the *oldest*
//! MachineSet, whatever Machine is marked `cluster.x-k8s.io/delete-machine`: the claimed Machine
//! stays and another (maybe another claim's) goes. So, when more than one MachineSet has replicas,
//! the provider pauses the MachineDeployment (`cluster.x-k8s.io/paused`), lowers the replicas of
//! the marked Machine's own MachineSet (whose controller removes marked Machines first) and of the
//! MachineDeployment, and unpauses it: the MachineDeployment controller then finds its MachineSets
//! adding up to its replicas and changes nothing. A pause left behind by a host that died in
//! between is lifted after [`STALE_PAUSE_MILLIS`].

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::machine::Machine;
use crate::node_group::Meta;

/// Cluster API's annotation that pauses reconciling an object.
pub const PAUSED: &str = "cluster.x-k8s.io/paused";
/// When this provider paused a MachineDeployment (epoch milliseconds); only such pauses it lifts.
pub const PAUSED_AT: &str = "capstan.dev/paused-for-removal";
/// The MachineSet a Machine belongs to.
pub const SET_LABEL: &str = "cluster.x-k8s.io/set-name";
/// After this long, a pause this provider left is lifted by the next look at the
/// MachineDeployment.
pub const STALE_PAUSE_MILLIS: u64 = 60_000;

/// The parts of a MachineSet this provider reads.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct MachineSet {
    /// Metadata.
    #[serde(default)]
    pub metadata: Meta,
    /// Spec.
    #[serde(default)]
    pub spec: SetSpec,
}

/// MachineSet spec (the fields used).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct SetSpec {
    /// Desired replicas.
    #[serde(default)]
    pub replicas: Option<i64>,
}

/// The MachineSet to shrink to remove `machine`, when its MachineDeployment is mid-rollout (more
/// than one of its MachineSets has replicas); `None` when lowering the MachineDeployment's replicas
/// alone removes the marked Machine (one MachineSet), or the Machine's set is not among them.
pub fn set_to_shrink<'a>(sets: &'a [MachineSet], machine: &Machine) -> Option<&'a MachineSet> {
    let active: Vec<&MachineSet> = sets
        .iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none() && s.spec.replicas.unwrap_or(0) > 0)
        .collect();
    if active.len() < 2 {
        return None;
    }
    let own = machine.metadata.labels.get(SET_LABEL)?;
    active.into_iter().find(|s| &s.metadata.name == own)
}

/// Whether a MachineDeployment's annotations hold a pause this provider set more than
/// [`STALE_PAUSE_MILLIS`] before `now`.
pub fn stale_pause(annotations: &BTreeMap<String, String>, now: u64) -> bool {
    annotations
        .get(PAUSED_AT)
        .and_then(|at| at.parse::<u64>().ok())
        .is_some_and(|at| now.saturating_sub(at) > STALE_PAUSE_MILLIS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(name: &str, replicas: i64) -> MachineSet {
        MachineSet {
            metadata: Meta {
                name: name.into(),
                ..Meta::default()
            },
            spec: SetSpec {
                replicas: Some(replicas),
            },
        }
    }

    fn machine_of(set: &str) -> Machine {
        let mut machine = Machine::default();
        machine.metadata.labels.insert(SET_LABEL.into(), set.into());
        machine
    }

    #[test]
    fn one_active_set_needs_no_set_scale() {
        let sets = [set("old", 0), set("new", 2)];
        assert_eq!(set_to_shrink(&sets, &machine_of("new")), None);
    }

    #[test]
    fn mid_rollout_the_machines_own_set_shrinks() {
        let sets = [set("old", 2), set("new", 1)];
        assert_eq!(
            set_to_shrink(&sets, &machine_of("new")).map(|s| s.metadata.name.as_str()),
            Some("new")
        );
        assert_eq!(
            set_to_shrink(&sets, &machine_of("old")).map(|s| s.metadata.name.as_str()),
            Some("old")
        );
    }

    #[test]
    fn an_unknown_set_falls_back_to_the_deployment() {
        let sets = [set("old", 2), set("new", 1)];
        assert_eq!(set_to_shrink(&sets, &machine_of("gone")), None);
        assert_eq!(set_to_shrink(&sets, &Machine::default()), None);
    }

    #[test]
    fn only_old_own_pauses_are_stale() {
        let mut annotations = BTreeMap::new();
        assert!(!stale_pause(&annotations, 100_000));
        annotations.insert(PAUSED_AT.to_owned(), "10000".to_owned());
        assert!(!stale_pause(&annotations, 60_000));
        assert!(stale_pause(&annotations, 80_000));
    }
}
