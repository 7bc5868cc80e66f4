//! `karpenter_scheduler_*` (the provisioner's scheduling simulation: how long, how many pods,
//! how many fit nowhere) and the pod durations `karpenter_pods_startup_duration_seconds` and
//! `karpenter_pods_bound_duration_seconds`, each observed once per pod the host saw waiting.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use crate::scheduling::convert::is_terminal;

use super::labels::labels;
use super::{Gauges, Histograms, Registrar, durations};

/// Scheduler and pod-duration metrics.
#[derive(Debug)]
pub struct Scheduler {
    duration: Histograms,
    queue_depth: Gauges,
    unschedulable: Gauges,
    startup: Histograms,
    bound: Histograms,
    /// Pods seen not Ready (uid), whose startup is still to observe.
    unstarted: Mutex<HashSet<String>>,
    /// Pods seen unbound (uid), whose binding is still to observe.
    unbound: Mutex<HashSet<String>>,
}

/// A pod condition's transition time, if the condition is True.
fn true_since<'a>(
    pod: &'a Pod,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")?
        .last_transition_time
        .as_ref()
}

/// Seconds from the pod's creation to `then`.
fn since_creation(pod: &Pod, then: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> f64 {
    let Some(created) = pod.metadata.creation_timestamp.as_ref() else {
        return 0.0;
    };
    let millis = then.0.as_millisecond() - created.0.as_millisecond();
    #[allow(clippy::cast_precision_loss)]
    let seconds = millis.max(0) as f64 / 1000.0;
    seconds
}

impl Scheduler {
    /// Registers the families under `registry` (prefix `karpenter`).
    pub fn register(registry: &mut Registrar<'_>) -> Self {
        let this = Self {
            duration: durations(),
            queue_depth: Gauges::default(),
            unschedulable: Gauges::default(),
            startup: durations(),
            bound: durations(),
            unstarted: Mutex::default(),
            unbound: Mutex::default(),
        };
        let mut s = registry.sub("scheduler");
        s.register(
            "scheduling_duration_seconds",
            "Duration of scheduling simulations used for deprovisioning and provisioning in seconds",
            this.duration.clone(),
        );
        s.register(
            "queue_depth",
            "The number of pods currently waiting to be scheduled",
            this.queue_depth.clone(),
        );
        s.register(
            "unschedulable_pods_count",
            "The number of unschedulable Pods (that fit no NodePool in the last simulation)",
            this.unschedulable.clone(),
        );
        let mut p = registry.sub("pods");
        p.register(
            "startup_duration_seconds",
            "The time from pod creation until the pod is running (Ready)",
            this.startup.clone(),
        );
        p.register(
            "bound_duration_seconds",
            "The time from pod creation until the pod is bound",
            this.bound.clone(),
        );
        this
    }

    /// A simulation of `controller` (`provisioner` or `disruption`) over `pods` pods starts:
    /// the queue depth of run `scheduling_id` until [`Scheduler::solved`].
    pub fn solving(&self, controller: &str, scheduling_id: &str, pods: usize) {
        #[allow(clippy::cast_precision_loss)]
        self.queue_depth
            .get_or_create(&labels(&[
                ("controller", controller),
                ("scheduling_id", scheduling_id),
            ]))
            .set(pods as f64);
    }

    /// The simulation `scheduling_id` of `controller` took `elapsed` and left `unschedulable`
    /// pods without a place.
    pub fn solved(
        &self,
        controller: &str,
        scheduling_id: &str,
        elapsed: Duration,
        unschedulable: usize,
    ) {
        self.queue_depth.remove(&labels(&[
            ("controller", controller),
            ("scheduling_id", scheduling_id),
        ]));
        self.duration
            .get_or_create(&labels(&[("controller", controller)]))
            .observe(elapsed.as_secs_f64());
        #[allow(clippy::cast_precision_loss)]
        self.unschedulable
            .get_or_create(&labels(&[("controller", controller)]))
            .set(unschedulable as f64);
    }

    /// A pod changed: observes its startup (creation to Ready) and binding (creation to
    /// `PodScheduled`) once, for pods seen before they were Ready or bound.
    pub fn pod_changed(&self, pod: &Pod) {
        let Some(uid) = pod.metadata.uid.as_deref() else {
            return;
        };
        if pod.metadata.deletion_timestamp.is_some() || is_terminal(pod) {
            self.pod_gone(uid);
            return;
        }
        let bound = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some();
        {
            let mut unbound = self.unbound.lock().unwrap_or_else(PoisonError::into_inner);
            match (bound, true_since(pod, "PodScheduled")) {
                (false, _) => {
                    unbound.insert(uid.to_owned());
                }
                (true, Some(at)) if unbound.remove(uid) => {
                    let dra = if crate::rules::pods::asks_for_devices(pod) {
                        "true"
                    } else {
                        "false"
                    };
                    self.bound
                        .get_or_create(&labels(&[("dynamic_resources", dra)]))
                        .observe(since_creation(pod, at));
                }
                _ => {}
            }
        }
        let mut unstarted = self
            .unstarted
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match true_since(pod, "Ready") {
            None => {
                unstarted.insert(uid.to_owned());
            }
            Some(at) if unstarted.remove(uid) => {
                self.startup
                    .get_or_create(&Vec::new())
                    .observe(since_creation(pod, at));
            }
            Some(_) => {}
        }
    }

    /// Forgets the pods not in `live` (uids of the pods the cluster holds): a pod deleted
    /// without a last change seen leaves nothing behind.
    pub fn retain_pods(&self, live: &HashSet<&str>) {
        for set in [&self.unstarted, &self.unbound] {
            set.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .retain(|uid| live.contains(uid.as_str()));
        }
    }

    /// A pod is gone (deleted or finished): nothing more to observe of it.
    pub fn pod_gone(&self, uid: &str) {
        self.unstarted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uid);
        self.unbound
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::super::Metrics;
    use super::*;
    use serde_json::json;

    fn pod(node: Option<&str>, ready_at: Option<&str>) -> Pod {
        let mut conditions = vec![];
        if node.is_some() {
            conditions.push(json!({"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:02Z"}));
        }
        if let Some(at) = ready_at {
            conditions.push(json!({"type": "Ready", "status": "True", "lastTransitionTime": at}));
        }
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "n", "uid": "u1", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"containers": [], "nodeName": node},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    }

    #[test]
    fn startup_and_binding_are_observed_once_for_pods_seen_waiting() {
        let m = Metrics::new();
        let s = &m.scheduler;
        s.pod_changed(&pod(None, None));
        s.pod_changed(&pod(Some("n1"), None));
        s.pod_changed(&pod(Some("n1"), Some("2026-01-01T00:00:05Z")));
        s.pod_changed(&pod(Some("n1"), Some("2026-01-01T00:00:05Z")));
        let text = m.render().unwrap();
        for line in [
            "karpenter_pods_startup_duration_seconds_count 1",
            "karpenter_pods_startup_duration_seconds_sum 5.0",
            r#"karpenter_pods_bound_duration_seconds_count{dynamic_resources="false"} 1"#,
            r#"karpenter_pods_bound_duration_seconds_sum{dynamic_resources="false"} 2.0"#,
        ] {
            assert!(text.contains(line), "missing {line}:\n{text}");
        }
    }

    #[test]
    fn pods_first_seen_running_are_not_observed() {
        let m = Metrics::new();
        m.scheduler
            .pod_changed(&pod(Some("n1"), Some("2026-01-01T00:00:05Z")));
        let text = m.render().unwrap();
        assert!(
            !text.contains("karpenter_pods_startup_duration_seconds_count"),
            "{text}"
        );
    }

    #[test]
    fn the_queue_depth_series_lives_while_its_run_does() {
        let m = Metrics::new();
        m.scheduler.solving("provisioner", "7", 12);
        let series =
            r#"karpenter_scheduler_queue_depth{controller="provisioner",scheduling_id="7"} 12"#;
        assert!(m.render().unwrap().contains(series));
        m.scheduler
            .solved("provisioner", "7", Duration::from_millis(5), 2);
        let text = m.render().unwrap();
        assert!(!text.contains("scheduling_id=\"7\""), "{text}");
        assert!(
            text.contains(
                r#"karpenter_scheduler_unschedulable_pods_count{controller="provisioner"} 2"#
            ),
            "{text}"
        );
        assert!(text.contains(r#"karpenter_scheduler_scheduling_duration_seconds_count{controller="provisioner"} 1"#), "{text}");
    }
}
