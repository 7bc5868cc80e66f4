//! Karpenter's two scheduling policies (`--preference-policy`, `--min-values-policy`): how the
//! simulation treats a pod's preferences and a NodePool's `minValues`.

use std::fmt;
use std::str::FromStr;

use super::pod::{Pod, WhenUnsatisfiable};

/// How preferences (preferred node affinity, preferred pod affinity and anti-affinity,
/// `ScheduleAnyway` topology spread) count in the simulation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PreferencePolicy {
    /// Treated as required at first, relaxed one at a time when a pod does not fit (Karpenter's
    /// default).
    #[default]
    Respect,
    /// Left out of the simulation altogether: a pod is placed as if it had none.
    Ignore,
}

/// How a NodePool's `minValues` binds a new NodeClaim.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MinValuesPolicy {
    /// A claim that cannot keep `minValues` distinct values is not opened (Karpenter's default).
    #[default]
    Strict,
    /// The claim is opened with what is left, and its `minValues` lowered to the values it has.
    BestEffort,
}

/// A policy name that is not one of the known ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not one of {known}")]
pub struct UnknownPolicy {
    value: String,
    known: &'static str,
}

impl FromStr for PreferencePolicy {
    type Err = UnknownPolicy;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "Respect" => Ok(Self::Respect),
            "Ignore" => Ok(Self::Ignore),
            _ => Err(UnknownPolicy {
                value: text.to_owned(),
                known: "Respect, Ignore",
            }),
        }
    }
}

impl fmt::Display for PreferencePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Respect => "Respect",
            Self::Ignore => "Ignore",
        })
    }
}

impl FromStr for MinValuesPolicy {
    type Err = UnknownPolicy;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "Strict" => Ok(Self::Strict),
            "BestEffort" => Ok(Self::BestEffort),
            _ => Err(UnknownPolicy {
                value: text.to_owned(),
                known: "Strict, BestEffort",
            }),
        }
    }
}

impl fmt::Display for MinValuesPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Strict => "Strict",
            Self::BestEffort => "BestEffort",
        })
    }
}

/// Whether `pod` has anything [`PreferencePolicy::Ignore`] drops.
pub fn has_preferences(pod: &Pod) -> bool {
    !pod.preferred_node_affinity.is_empty()
        || !pod.preferred_pod_affinity.is_empty()
        || !pod.preferred_pod_anti_affinity.is_empty()
        || pod
            .topology_spread
            .iter()
            .any(|c| c.when_unsatisfiable == WhenUnsatisfiable::ScheduleAnyway)
}

/// Drops `pod`'s preferences, as Karpenter's `Ignore` policy does: required terms and
/// `DoNotSchedule` spreads stay.
pub fn drop_preferences(pod: &mut Pod) {
    pod.preferred_node_affinity.clear();
    pod.preferred_pod_affinity.clear();
    pod.preferred_pod_anti_affinity.clear();
    pod.topology_spread
        .retain(|c| c.when_unsatisfiable != WhenUnsatisfiable::ScheduleAnyway);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for policy in [PreferencePolicy::Respect, PreferencePolicy::Ignore] {
            assert_eq!(policy.to_string().parse::<PreferencePolicy>(), Ok(policy));
        }
        for policy in [MinValuesPolicy::Strict, MinValuesPolicy::BestEffort] {
            assert_eq!(policy.to_string().parse::<MinValuesPolicy>(), Ok(policy));
        }
        let err = "respect".parse::<PreferencePolicy>().unwrap_err();
        assert_eq!(err.to_string(), "\"respect\" is not one of Respect, Ignore");
        assert!("Lenient".parse::<MinValuesPolicy>().is_err());
        assert_eq!(PreferencePolicy::default(), PreferencePolicy::Respect);
        assert_eq!(MinValuesPolicy::default(), MinValuesPolicy::Strict);
    }
}
