//! Why a pod's claims cannot be allocated on a node, worded for a pod Event.

use crate::selector::SelectorError;

/// Why the claims cannot be allocated on this node. `claim` is `namespace/name`, `request` the
/// request (or `request/subrequest`) name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsatisfiable {
    /// The request names a DeviceClass that does not exist.
    #[error("claim {claim} request {request}: DeviceClass {class} does not exist")]
    UnknownDeviceClass {
        /// The claim.
        claim: String,
        /// The request.
        request: String,
        /// The missing class.
        class: String,
    },
    /// A class or request selector does not compile, so the claim can never be allocated.
    #[error("claim {claim} request {request}: {error}")]
    SelectorCompile {
        /// The claim.
        claim: String,
        /// The request.
        request: String,
        /// The compile error, with the expression (boxed: it is large and rare).
        error: Box<SelectorError>,
    },
    /// The request is malformed (e.g. `count` below 1, unknown allocation mode).
    #[error("claim {claim} request {request}: {reason}")]
    InvalidRequest {
        /// The claim.
        claim: String,
        /// The request.
        request: String,
        /// What is wrong.
        reason: String,
    },
    /// No device on the node matches the class and the request's selectors.
    #[error(
        "claim {claim} request {request}: no device of class {class} matches{}{}",
        selectors_text(.selectors),
        note_text(.note)
    )]
    NoMatchingDevice {
        /// The claim.
        claim: String,
        /// The request.
        request: String,
        /// The DeviceClass.
        class: String,
        /// Class and request selector expressions.
        selectors: Vec<String>,
        /// The first selector evaluation error, if devices failed to evaluate.
        note: Option<String>,
    },
    /// Fewer matching (or free) devices than asked for.
    #[error(
        "claim {claim} request {request}: {wanted} devices of class {class} asked for but only {matching} match ({available} free)"
    )]
    NotEnoughDevices {
        /// The claim.
        claim: String,
        /// The request.
        request: String,
        /// The DeviceClass.
        class: String,
        /// Devices asked for.
        wanted: usize,
        /// Devices matching class and selectors.
        matching: usize,
        /// Of those, not allocated to other claims.
        available: usize,
    },
    /// `allocationMode: All` needs every matching device, but some are allocated already.
    #[error(
        "claim {claim} request {request}: allocationMode All needs all {matching} devices of class {class} but {in_use} are allocated to other claims"
    )]
    AllModeDevicesInUse {
        /// The claim.
        claim: String,
        /// The request.
        request: String,
        /// The DeviceClass.
        class: String,
        /// Devices matching.
        matching: usize,
        /// Of those, already allocated.
        in_use: usize,
    },
    /// Matching devices are partitions whose shared counters are used up.
    #[error("claim {claim} request {request}: counters of set {counter_set} exhausted")]
    CountersExhausted {
        /// The claim.
        claim: String,
        /// The request.
        request: String,
        /// The counter set (`driver/pool/set`).
        counter_set: String,
    },
    /// No choice of devices shares one value of the attribute.
    #[error(
        "claim {claim}: matchAttribute {attribute} cannot be met by requests {}",
        .requests.join(", ")
    )]
    MatchAttribute {
        /// The claim.
        claim: String,
        /// The fully qualified attribute.
        attribute: String,
        /// The constrained requests.
        requests: Vec<String>,
    },
    /// No choice of devices has pairwise distinct values of the attribute.
    #[error(
        "claim {claim}: distinctAttribute {attribute} cannot be met by requests {}",
        .requests.join(", ")
    )]
    DistinctAttribute {
        /// The claim.
        claim: String,
        /// The fully qualified attribute.
        attribute: String,
        /// The constrained requests.
        requests: Vec<String>,
    },
    /// Each request fits alone, but not together with the pod's other requests.
    #[error(
        "claim {claim} request {request}: the {wanted} devices it needs are taken by the pod's other requests"
    )]
    Contention {
        /// The claim.
        claim: String,
        /// The request.
        request: String,
        /// Devices asked for.
        wanted: usize,
    },
    /// No subrequest of a `firstAvailable` request can be satisfied.
    #[error(
        "claim {claim} request {request}: no firstAvailable subrequest fits: {}",
        reasons_text(.reasons)
    )]
    NoAlternative {
        /// The claim.
        claim: String,
        /// The request.
        request: String,
        /// Why each subrequest does not fit, in order.
        reasons: Vec<Unsatisfiable>,
    },
    /// The claim is already allocated, on another node.
    #[error("claim {claim} is already allocated on another node")]
    AllocatedElsewhere {
        /// The claim.
        claim: String,
    },
    /// The search gave up: the claims are too hard to decide within the step budget.
    #[error("device allocation gave up after {budget} search steps")]
    StepBudgetExceeded {
        /// The budget.
        budget: u64,
    },
}

fn selectors_text(selectors: &[String]) -> String {
    if selectors.is_empty() {
        String::new()
    } else {
        format!(" selectors [{}]", selectors.join(", "))
    }
}

fn note_text(note: &Option<String>) -> String {
    note.as_ref().map(|n| format!(" ({n})")).unwrap_or_default()
}

fn reasons_text(reasons: &[Unsatisfiable]) -> String {
    reasons
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_as_event_text() {
        let no_match = Unsatisfiable::NoMatchingDevice {
            claim: "ml/train".into(),
            request: "gpu".into(),
            class: "gpu.example.com".into(),
            selectors: vec![r#"device.driver == "gpu.example.com""#.into()],
            note: None,
        };
        assert_eq!(
            no_match.to_string(),
            r#"claim ml/train request gpu: no device of class gpu.example.com matches selectors [device.driver == "gpu.example.com"]"#
        );
        let not_enough = Unsatisfiable::NotEnoughDevices {
            claim: "ml/train".into(),
            request: "gpu".into(),
            class: "gpu".into(),
            wanted: 4,
            matching: 2,
            available: 1,
        };
        assert_eq!(
            not_enough.to_string(),
            "claim ml/train request gpu: 4 devices of class gpu asked for but only 2 match (1 free)"
        );
        let nested = Unsatisfiable::NoAlternative {
            claim: "a/b".into(),
            request: "r".into(),
            reasons: vec![Unsatisfiable::CountersExhausted {
                claim: "a/b".into(),
                request: "r/big".into(),
                counter_set: "gpu/node/gpu-0".into(),
            }],
        };
        assert!(
            nested
                .to_string()
                .ends_with("counters of set gpu/node/gpu-0 exhausted")
        );
    }
}
