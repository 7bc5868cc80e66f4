//! `capstan explain pod NAMESPACE/NAME`: what the host last decided for a pod (the node it
//! nominated, or why it made none), and the state of the pod's ResourceClaims, read back from the
//! pod, its Events and its claims.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::ResourceExt;
use serde::Serialize;

/// The Event reasons of the host's provisioning decisions about a pod.
const DECISIONS: [&str; 2] = ["Nominated", "FailedScheduling"];

/// One decision of the host's about the pod (its latest Event of that reason).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// `Nominated` or `FailedScheduling`.
    pub reason: String,
    pub note: String,
    /// When it was last made (RFC 3339), if the Event says.
    pub at: Option<String>,
    /// How many times.
    pub count: i32,
}

/// One of the pod's ResourceClaims.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimState {
    /// The pod's name for it (`spec.resourceClaims[].name`).
    pub name: String,
    /// The ResourceClaim, once it exists.
    pub claim: Option<String>,
    /// Allocated devices (`driver/pool/device`), if allocated.
    pub devices: Vec<String>,
}

/// The answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodReport {
    pub schema: &'static str,
    pub pod: String,
    pub phase: String,
    pub node: Option<String>,
    /// The host's latest decision (none: it has not decided about this pod).
    pub decision: Option<Decision>,
    pub claims: Vec<ClaimState>,
}

fn event_time(event: &Event) -> Option<String> {
    event
        .series
        .as_ref()
        .map(|s| s.last_observed_time.0.to_string())
        .or_else(|| event.event_time.as_ref().map(|t| t.0.to_string()))
        .or_else(|| {
            event
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
        })
}

/// The report on `pod` from `events` (its Events; only the host's, `reporting_controller` ==
/// `reporter`, count) and `claims` (the ResourceClaims of its namespace).
pub fn explain_pod(
    pod: &Pod,
    events: &[Event],
    claims: &[ResourceClaim],
    reporter: &str,
) -> PodReport {
    let decision = events
        .iter()
        .filter(|e| e.reporting_controller.as_deref() == Some(reporter))
        .filter(|e| e.reason.as_deref().is_some_and(|r| DECISIONS.contains(&r)))
        .max_by_key(|e| event_time(e))
        .map(|e| Decision {
            reason: e.reason.clone().unwrap_or_default(),
            note: e.note.clone().unwrap_or_default(),
            at: event_time(e),
            count: e.series.as_ref().map_or(1, |s| s.count),
        });
    let generated: Vec<(&str, &str)> = pod
        .status
        .iter()
        .flat_map(|s| s.resource_claim_statuses.iter().flatten())
        .filter_map(|s| Some((s.name.as_str(), s.resource_claim_name.as_deref()?)))
        .collect();
    let claims = pod
        .spec
        .iter()
        .flat_map(|s| s.resource_claims.iter().flatten())
        .map(|entry| {
            let claim_name = entry.resource_claim_name.clone().or_else(|| {
                generated
                    .iter()
                    .find(|(n, _)| *n == entry.name)
                    .map(|(_, c)| (*c).to_owned())
            });
            let devices = claim_name
                .as_deref()
                .and_then(|n| claims.iter().find(|c| c.name_any() == n))
                .and_then(|c| {
                    c.status
                        .as_ref()?
                        .allocation
                        .as_ref()?
                        .devices
                        .as_ref()?
                        .results
                        .clone()
                })
                .unwrap_or_default()
                .into_iter()
                .map(|r| format!("{}/{}/{}", r.driver, r.pool, r.device))
                .collect();
            ClaimState {
                name: entry.name.clone(),
                claim: claim_name,
                devices,
            }
        })
        .collect();
    PodReport {
        schema: super::SCHEMA,
        pod: format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any()),
        phase: pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Unknown".to_owned()),
        node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        decision,
        claims,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(reason: &str, note: &str, at: &str, reporter: &str) -> Event {
        serde_json::from_value(json!({
            "metadata": {"name": format!("e-{reason}-{at}"), "namespace": "default"},
            "eventTime": at,
            "reason": reason, "note": note, "reportingController": reporter,
            "reportingInstance": "x", "action": "Provisioning",
        }))
        .unwrap()
    }

    #[test]
    fn the_latest_host_decision_and_the_claims_devices() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c"}], "resourceClaims": [
                {"name": "gpus", "resourceClaimTemplateName": "t"},
                {"name": "nic", "resourceClaimName": "shared-nic"}]},
            "status": {"phase": "Pending", "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "p-gpus-1"}]}
        }))
        .unwrap();
        let claim: ResourceClaim = serde_json::from_value(json!({
            "metadata": {"name": "p-gpus-1", "namespace": "default"},
            "spec": {},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpus", "driver": "gpu.example.com", "pool": "n1", "device": "gpu-0"}]}}}
        }))
        .unwrap();
        let events = [
            event(
                "Nominated",
                "nodeclaim/a",
                "2026-12-03T10:00:00.000000Z",
                "capstan",
            ),
            event(
                "FailedScheduling",
                "no instance type carries the devices",
                "2026-12-03T10:05:00.000000Z",
                "capstan",
            ),
            event(
                "FailedScheduling",
                "0/3 nodes are available",
                "2026-12-03T10:06:00.000000Z",
                "default-scheduler",
            ),
        ];
        let report = explain_pod(&pod, &events, &[claim], "capstan");
        assert_eq!(report.pod, "default/p");
        assert_eq!(report.phase, "Pending");
        let decision = report.decision.unwrap();
        assert_eq!(decision.reason, "FailedScheduling");
        assert!(decision.note.contains("carries the devices"));
        assert_eq!(report.claims.len(), 2);
        assert_eq!(report.claims[0].claim.as_deref(), Some("p-gpus-1"));
        assert_eq!(report.claims[0].devices, ["gpu.example.com/n1/gpu-0"]);
        assert_eq!(report.claims[1].claim.as_deref(), Some("shared-nic"));
        assert!(report.claims[1].devices.is_empty());
    }
}
