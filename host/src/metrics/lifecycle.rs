//! The NodeClaim and Node lifecycle: Karpenter's `karpenter_nodeclaims_*` and
//! `karpenter_nodes_*` counters and durations, fed by the NodeClaim controller, disruption and
//! garbage collection as things happen.
//!
//! `launched`, `registered`, `initialized` and `drifted` keep the names Karpenter used before
//! v1 (v1 dropped them); everything else is named as in Karpenter v1.15.

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::labels::{self, label, labels};
use super::{Counters, Histograms, Registrar, durations};
use crate::api::NodeClaim;
use crate::api::labels::{CAPACITY_TYPE, NODEPOOL, ZONE};

/// Counters and histograms of the lifecycle.
#[derive(Debug)]
pub struct Lifecycle {
    created: Counters,
    launched: Counters,
    registered: Counters,
    initialized: Counters,
    drifted: Counters,
    terminated: Counters,
    disrupted: Counters,
    pods_disruption_initiated: Counters,
    termination_duration: Histograms,
    instance_termination_duration: Histograms,
    nodes_created: Counters,
    nodes_terminated: Counters,
    nodes_drained: Counters,
    node_termination_duration: Histograms,
    node_lifetime: Histograms,
    reboots: Counters,
    reboot_duration: Histograms,
    reboot_recovery_duration: Histograms,
}

fn claim_termination_histogram() -> Histogram {
    // 1 s .. 2048 s, as Karpenter.
    Histogram::new(exponential_buckets(1.0, 2.0, 12))
}

fn instance_termination_histogram() -> Histogram {
    // 1 s .. 1024 s, as Karpenter.
    Histogram::new(exponential_buckets(1.0, 2.0, 11))
}

fn lifetime_histogram() -> Histogram {
    const MINUTE: f64 = 60.0;
    const HOUR: f64 = 3600.0;
    const DAY: f64 = 24.0 * HOUR;
    Histogram::new([
        15.0 * MINUTE,
        30.0 * MINUTE,
        45.0 * MINUTE,
        HOUR,
        2.0 * HOUR,
        4.0 * HOUR,
        6.0 * HOUR,
        8.0 * HOUR,
        10.0 * HOUR,
        12.0 * HOUR,
        16.0 * HOUR,
        20.0 * HOUR,
        DAY,
        2.0 * DAY,
        3.0 * DAY,
        5.0 * DAY,
        10.0 * DAY,
        15.0 * DAY,
        20.0 * DAY,
        25.0 * DAY,
        30.0 * DAY,
    ])
}

/// Seconds from `then` to now (0 if `then` is later).
pub fn seconds_since(then: &Time) -> f64 {
    let millis = k8s_openapi::jiff::Timestamp::now().as_millisecond() - then.0.as_millisecond();
    #[allow(clippy::cast_precision_loss)]
    let seconds = millis.max(0) as f64 / 1000.0;
    seconds
}

/// The NodePool a claim belongs to (its `karpenter.sh/nodepool` label), or empty.
pub fn nodepool_of(claim: &NodeClaim) -> &str {
    label(claim.metadata.labels.as_ref(), NODEPOOL)
}

impl Lifecycle {
    /// Registers the families under `registry` (prefix `karpenter`).
    pub fn register(registry: &mut Registrar<'_>) -> Self {
        let this = Self {
            created: Counters::default(),
            launched: Counters::default(),
            registered: Counters::default(),
            initialized: Counters::default(),
            drifted: Counters::default(),
            terminated: Counters::default(),
            disrupted: Counters::default(),
            pods_disruption_initiated: Counters::default(),
            termination_duration: Histograms::new_with_constructor(claim_termination_histogram),
            instance_termination_duration: Histograms::new_with_constructor(
                instance_termination_histogram,
            ),
            nodes_created: Counters::default(),
            nodes_terminated: Counters::default(),
            nodes_drained: Counters::default(),
            node_termination_duration: durations(),
            node_lifetime: Histograms::new_with_constructor(lifetime_histogram),
            reboots: Counters::default(),
            reboot_duration: durations(),
            reboot_recovery_duration: durations(),
        };
        let mut claims = registry.sub("nodeclaims");
        claims.register(
            "created",
            "Number of nodeclaims created in total, by reason, nodepool and whether minValues was relaxed",
            this.created.clone(),
        );
        claims.register(
            "launched",
            "Number of nodeclaims launched in total, by nodepool (Karpenter's pre-v1 name)",
            this.launched.clone(),
        );
        claims.register(
            "registered",
            "Number of nodeclaims registered in total, by nodepool (Karpenter's pre-v1 name)",
            this.registered.clone(),
        );
        claims.register(
            "initialized",
            "Number of nodeclaims initialized in total, by nodepool (Karpenter's pre-v1 name)",
            this.initialized.clone(),
        );
        claims.register(
            "drifted",
            "Number of nodeclaims found drifted, by drift type and nodepool (Karpenter's pre-v1 name)",
            this.drifted.clone(),
        );
        claims.register(
            "terminated",
            "Number of nodeclaims terminated in total, by nodepool, capacity type and zone",
            this.terminated.clone(),
        );
        claims.register(
            "disrupted",
            "Number of nodeclaims disrupted in total, by reason, nodepool, capacity type, consolidation policy and termination mode",
            this.disrupted.clone(),
        );
        claims.register(
            "termination_duration_seconds",
            "Duration of NodeClaim termination in seconds (deletion request to finalizer removed)",
            this.termination_duration.clone(),
        );
        claims.register(
            "instance_termination_duration_seconds",
            "Duration of CloudProvider Instance termination in seconds",
            this.instance_termination_duration.clone(),
        );
        registry.sub("pods").register(
            "disruption_initiated",
            "Number of pod disruptions initiated, incremented by the reschedulable pod count whenever a nodeclaim is disrupted, by reason, nodepool, capacity type, consolidation policy and termination mode",
            this.pods_disruption_initiated.clone(),
        );
        let mut nodes = registry.sub("nodes");
        nodes.register(
            "created",
            "Number of nodes created in total, by nodepool and zone",
            this.nodes_created.clone(),
        );
        nodes.register(
            "terminated",
            "Number of nodes terminated in total, by nodepool and zone",
            this.nodes_terminated.clone(),
        );
        nodes.register(
            "drained",
            "The total number of nodes drained, by nodepool",
            this.nodes_drained.clone(),
        );
        nodes.register(
            "termination_duration_seconds",
            "The time taken between a node's deletion request and the removal of its finalizer",
            this.node_termination_duration.clone(),
        );
        nodes.register(
            "lifetime_duration_seconds",
            "The lifetime duration of the nodes since creation",
            this.node_lifetime.clone(),
        );
        nodes.register(
            "reboots",
            "Number of node reboots carried out, by terminal result (succeeded, provider_error, recovery_timeout, invalid_request)",
            this.reboots.clone(),
        );
        nodes.register(
            "reboot_duration_seconds",
            "Duration of the full reboot action from request to terminal outcome, by result",
            this.reboot_duration.clone(),
        );
        nodes.register(
            "reboot_recovery_duration_seconds",
            "Duration from the reboot's issue to the node's rejoining with a new boot",
            this.reboot_recovery_duration.clone(),
        );
        this
    }

    /// A reboot ended with `result` (`succeeded`, `provider_error`, ...), `seconds` after it was
    /// requested; `recovery`: seconds from its issue to the new boot, for one that succeeded.
    pub fn rebooted(&self, result: &str, seconds: f64, recovery: Option<f64>) {
        let by_result = labels(&[("result", result)]);
        self.reboots.get_or_create(&by_result).inc();
        self.reboot_duration
            .get_or_create(&by_result)
            .observe(seconds);
        if let Some(recovery) = recovery {
            self.reboot_recovery_duration
                .get_or_create(&labels(&[]))
                .observe(recovery);
        }
    }

    /// The provisioner (`reason` `provisioned`) or disruption (`drifted`, `empty`,
    /// `underutilized`, ...) created a claim of `nodepool`.
    pub fn created(&self, reason: &str, nodepool: &str, min_values_relaxed: bool) {
        let relaxed = if min_values_relaxed { "true" } else { "false" };
        self.created
            .get_or_create(&labels(&[
                ("reason", &labels::reason(reason)),
                ("nodepool", nodepool),
                ("min_values_relaxed", relaxed),
            ]))
            .inc();
    }

    /// A claim of `nodepool` launched.
    pub fn launched(&self, nodepool: &str) {
        self.launched
            .get_or_create(&labels(&[("nodepool", nodepool)]))
            .inc();
    }

    /// A claim of `nodepool` registered (its Node joined): also counts the Node created in
    /// `zone`.
    pub fn registered(&self, nodepool: &str, zone: &str) {
        self.registered
            .get_or_create(&labels(&[("nodepool", nodepool)]))
            .inc();
        self.nodes_created
            .get_or_create(&labels(&[("nodepool", nodepool), ("zone", zone)]))
            .inc();
    }

    /// A claim of `nodepool` initialized.
    pub fn initialized(&self, nodepool: &str) {
        self.initialized
            .get_or_create(&labels(&[("nodepool", nodepool)]))
            .inc();
    }

    /// A claim of `nodepool` was found drifted (`drift_type`: `NodePoolDrifted`,
    /// `RequirementsDrifted`, ... as the condition's reason).
    pub fn drifted(&self, drift_type: &str, nodepool: &str) {
        self.drifted
            .get_or_create(&labels(&[("type", drift_type), ("nodepool", nodepool)]))
            .inc();
    }

    /// A claim's finalizer was removed: it is terminated.
    pub fn terminated(&self, claim: &NodeClaim) {
        let labels_of = claim.metadata.labels.as_ref();
        let pool = nodepool_of(claim);
        self.terminated
            .get_or_create(&labels(&[
                ("nodepool", pool),
                ("capacity_type", label(labels_of, CAPACITY_TYPE)),
                ("zone", label(labels_of, ZONE)),
            ]))
            .inc();
        if let Some(deleted) = claim.metadata.deletion_timestamp.as_ref() {
            self.termination_duration
                .get_or_create(&labels(&[("nodepool", pool)]))
                .observe(seconds_since(deleted));
        }
    }

    /// A claim was disrupted (deleted) for `reason` (Karpenter's spelling: `drifted`,
    /// `expired`, `empty`, `underutilized`, `garbage_collected`, `insufficient_capacity`,
    /// `nodeclass_not_ready`, `launch_timeout`, `registration_timeout`); `consolidation_policy`
    /// is the pool's for voluntary disruption, else empty.
    /// `pods`: its node's reschedulable pods (not a DaemonSet's, not static), which count in
    /// `karpenter_pods_disruption_initiated_total`.
    pub fn disrupted(
        &self,
        claim: &NodeClaim,
        reason: &str,
        consolidation_policy: &str,
        pods: usize,
    ) {
        let labels_of = claim.metadata.labels.as_ref();
        let grace = claim.spec.termination_grace_period.as_deref();
        let set = labels(&[
            ("reason", &labels::reason(reason)),
            ("nodepool", nodepool_of(claim)),
            ("capacity_type", label(labels_of, CAPACITY_TYPE)),
            ("consolidation_policy", consolidation_policy),
            ("termination_mode", labels::termination_mode(grace)),
        ]);
        self.disrupted.get_or_create(&set).inc();
        self.pods_disruption_initiated
            .get_or_create(&set)
            .inc_by(pods as u64);
    }

    /// The provider deleted the instance of a claim of `nodepool`, `seconds` after the
    /// host started terminating it.
    pub fn instance_terminated(&self, nodepool: &str, seconds: f64) {
        self.instance_termination_duration
            .get_or_create(&labels(&[("nodepool", nodepool)]))
            .observe(seconds);
    }

    /// The pods of a node of `nodepool` were drained.
    pub fn node_drained(&self, nodepool: &str) {
        self.nodes_drained
            .get_or_create(&labels(&[("nodepool", nodepool)]))
            .inc();
    }

    /// A node's finalizer was removed (the host deletes the Node as it terminates its claim).
    pub fn node_terminated(&self, node: &Node) {
        let node_labels = node.metadata.labels.as_ref();
        let pool = label(node_labels, NODEPOOL);
        self.nodes_terminated
            .get_or_create(&labels(&[
                ("nodepool", pool),
                ("zone", label(node_labels, ZONE)),
            ]))
            .inc();
        let by_pool = labels(&[("nodepool", pool)]);
        if let Some(deleted) = node.metadata.deletion_timestamp.as_ref() {
            self.node_termination_duration
                .get_or_create(&by_pool)
                .observe(seconds_since(deleted));
        }
        if let Some(created) = node.metadata.creation_timestamp.as_ref() {
            self.node_lifetime
                .get_or_create(&by_pool)
                .observe(seconds_since(created));
        }
        tracing::trace!(node = %node.name_any(), "node terminated");
    }
}

#[cfg(test)]
mod tests {
    use super::super::Metrics;
    use serde_json::json;

    use super::*;

    fn claim(grace: Option<&str>) -> NodeClaim {
        let mut spec = json!({"nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "c"}, "requirements": []});
        if let Some(grace) = grace {
            spec["terminationGracePeriod"] = json!(grace);
        }
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c1", "labels": {NODEPOOL: "p", CAPACITY_TYPE: "spot", ZONE: "z1"},
                         "deletionTimestamp": "2020-01-01T00:00:00Z"},
            "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn lifecycle_series_carry_karpenters_labels() {
        let m = Metrics::new();
        let l = &m.lifecycle;
        l.created("provisioned", "p", false);
        l.created("Drifted", "p", false);
        l.launched("p");
        l.registered("p", "z1");
        l.initialized("p");
        l.drifted("NodePoolDrifted", "p");
        l.terminated(&claim(None));
        l.disrupted(&claim(Some("0s")), "Expired", "", 0);
        l.disrupted(
            &claim(None),
            "underutilized",
            "when_empty_or_underutilized",
            3,
        );
        l.instance_terminated("p", 3.0);
        l.rebooted("succeeded", 40.0, Some(12.0));
        l.rebooted("provider_error", 5.0, None);
        let text = m.render().unwrap();
        for line in [
            r#"karpenter_nodeclaims_created_total{reason="provisioned",nodepool="p",min_values_relaxed="false"} 1"#,
            r#"karpenter_nodeclaims_created_total{reason="drifted",nodepool="p",min_values_relaxed="false"} 1"#,
            r#"karpenter_nodeclaims_launched_total{nodepool="p"} 1"#,
            r#"karpenter_nodeclaims_registered_total{nodepool="p"} 1"#,
            r#"karpenter_nodes_created_total{nodepool="p",zone="z1"} 1"#,
            r#"karpenter_nodeclaims_initialized_total{nodepool="p"} 1"#,
            r#"karpenter_nodeclaims_drifted_total{type="NodePoolDrifted",nodepool="p"} 1"#,
            r#"karpenter_nodeclaims_terminated_total{nodepool="p",capacity_type="spot",zone="z1"} 1"#,
            r#"karpenter_nodeclaims_termination_duration_seconds_count{nodepool="p"} 1"#,
            r#"karpenter_nodeclaims_termination_duration_seconds_bucket{le="2048.0",nodepool="p"} 0"#,
            r#"karpenter_nodeclaims_disrupted_total{reason="expired",nodepool="p",capacity_type="spot",consolidation_policy="",termination_mode="forceful"} 1"#,
            r#"karpenter_nodeclaims_disrupted_total{reason="underutilized",nodepool="p",capacity_type="spot",consolidation_policy="when_empty_or_underutilized",termination_mode="graceful"} 1"#,
            r#"karpenter_pods_disruption_initiated_total{reason="underutilized",nodepool="p",capacity_type="spot",consolidation_policy="when_empty_or_underutilized",termination_mode="graceful"} 3"#,
            r#"karpenter_nodeclaims_instance_termination_duration_seconds_bucket{le="4.0",nodepool="p"} 1"#,
            "# TYPE karpenter_nodeclaims_termination_duration_seconds histogram",
            r#"karpenter_nodes_reboots_total{result="succeeded"} 1"#,
            r#"karpenter_nodes_reboots_total{result="provider_error"} 1"#,
            r#"karpenter_nodes_reboot_duration_seconds_count{result="succeeded"} 1"#,
            "karpenter_nodes_reboot_recovery_duration_seconds_count 1",
        ] {
            assert!(text.contains(line), "missing {line}:\n{text}");
        }
    }
}
