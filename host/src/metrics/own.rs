//! Capstan's own metrics (`capstan_*`), for what Karpenter has no name for: launch failures by
//! reason, leaked instances removed, disruptions blocked by budgets or pods, consolidation
//! savings, provider loads and NodeClass catalog health. (The providers' capability counters,
//! `capstan_provider_kube_*` and the like, are added per live provider by `serve`.)

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::bounded::{BoundedValues, MAX_LABEL_VALUES};
use super::labels::labels;
use super::{Counters, Gauges, Histograms, Registrar};

/// Capstan's own metrics.
#[derive(Debug)]
pub struct Own {
    failed: Counters,
    garbage_collected: Counters,
    disruption_blocked: Counters,
    consolidation_savings: Histograms,
    provider_loads: Counters,
    provider_load_duration: Histograms,
    instance_types_ready: Gauges,
    provider_healthy: Gauges,
    provider_call_failures: Counters,
    consolidation_blocked: Gauges,
    /// The (nodepool, reason) pairs of `consolidation_blocked` set last time.
    verdicts_seen: std::sync::Mutex<BTreeSet<(String, &'static str)>>,
    reasons: BoundedValues,
}

fn savings_histogram() -> Histogram {
    // $0.001/h .. ~$65/h.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

fn load_histogram() -> Histogram {
    // 0.5 ms .. ~16 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

impl Own {
    /// Registers the families under `registry` (prefix `capstan`).
    pub fn register(registry: &mut Registrar<'_>) -> Self {
        let this = Self {
            failed: Counters::default(),
            garbage_collected: Counters::default(),
            disruption_blocked: Counters::default(),
            consolidation_savings: Histograms::new_with_constructor(savings_histogram),
            provider_loads: Counters::default(),
            provider_load_duration: Histograms::new_with_constructor(load_histogram),
            instance_types_ready: Gauges::default(),
            provider_healthy: Gauges::default(),
            provider_call_failures: Counters::default(),
            consolidation_blocked: Gauges::default(),
            verdicts_seen: std::sync::Mutex::default(),
            reasons: BoundedValues::new(MAX_LABEL_VALUES),
        };
        registry.register(
            "nodeclaims_failed",
            "NodeClaim launch failures, by nodepool and reason (the provider's own reasons included, bounded)",
            this.failed.clone(),
        );
        registry.register(
            "instances_garbage_collected",
            "Leaked instances (no NodeClaim) deleted by garbage collection",
            this.garbage_collected.clone(),
        );
        registry.register(
            "disruption_blocked",
            "Disruptions held back, by reason (a budget at zero, pods that would not schedule elsewhere)",
            this.disruption_blocked.clone(),
        );
        registry.register(
            "consolidation_savings_dollars_per_hour",
            "What each consolidation decision saves, in the providers' price unit per hour, by reason",
            this.consolidation_savings.clone(),
        );
        registry.register(
            "provider_loads",
            "Provider (re)loads from Provider resources: result loaded or refused, with the reason",
            this.provider_loads.clone(),
        );
        registry.register(
            "provider_load_duration_seconds",
            "Time from reading a Provider's source to the new version serving",
            this.provider_load_duration.clone(),
        );
        registry.register(
            "nodeclass_instance_types_ready",
            "1 while the provider answers get-instance-types with a catalog the host takes for every NodePool of the NodeClass, else 0",
            this.instance_types_ready.clone(),
        );
        registry.register(
            "provider_healthy",
            "1 while no function of the provider has failed 3 times in a row (traps, limits, timeouts, retryable or create-failed answers), else 0",
            this.provider_healthy.clone(),
        );
        registry.register(
            "provider_call_failures",
            "Provider calls that failed its health, by provider, function and failure",
            this.provider_call_failures.clone(),
        );
        registry.register(
            "nodeclaims_consolidation_blocked",
            "Managed nodes by consolidation verdict, per nodepool and reason (the ConsolidationBlocked condition's reason; NotBlocked when nothing blocks)",
            this.consolidation_blocked.clone(),
        );
        this
    }

    /// The verdicts of a disruption pass: how many nodes per (nodepool, reason). Pairs of the
    /// last pass that are gone now drop out.
    pub fn consolidation_verdicts(&self, tally: &BTreeMap<(String, &'static str), usize>) {
        let Ok(mut seen) = self.verdicts_seen.lock() else {
            return;
        };
        for (pool, reason) in seen.iter() {
            if !tally.contains_key(&(pool.clone(), *reason)) {
                self.consolidation_blocked
                    .remove(&labels(&[("nodepool", pool), ("reason", reason)]));
            }
        }
        for ((pool, reason), n) in tally {
            self.consolidation_blocked
                .get_or_create(&labels(&[("nodepool", pool), ("reason", reason)]))
                .set(*n as f64);
        }
        *seen = tally.keys().cloned().collect();
    }

    /// A claim failed (`InsufficientCapacity`, `LaunchFailed`, `RegistrationTimeout`, ...).
    /// The reason may come from the provider: see [`BoundedValues`].
    pub fn failed(&self, nodepool: &str, reason: &str) {
        let reason = self.reasons.admit(&format!("failed/{nodepool}"), reason);
        self.failed
            .get_or_create(&labels(&[("nodepool", nodepool), ("reason", reason)]))
            .inc();
    }

    /// Garbage collection deleted a leaked instance.
    pub fn instance_garbage_collected(&self) {
        self.garbage_collected.get_or_create(&Vec::new()).inc();
    }

    /// A disruption for `reason` was held back.
    pub fn disruption_blocked(&self, reason: &str) {
        self.disruption_blocked
            .get_or_create(&labels(&[("reason", &reason.to_lowercase())]))
            .inc();
    }

    /// A consolidation decision for `reason` saves `per_hour`.
    pub fn consolidation_savings(&self, reason: &str, per_hour: f64) {
        self.consolidation_savings
            .get_or_create(&labels(&[("reason", reason)]))
            .observe(per_hour);
    }

    /// A Provider's source was loaded (`reason` `Loaded`, with how long it took) or refused
    /// (`reason` the condition reason).
    pub fn provider_load(&self, provider: &str, reason: &str, took: Option<Duration>) {
        let result = if took.is_some() { "loaded" } else { "refused" };
        self.provider_loads
            .get_or_create(&labels(&[
                ("provider", provider),
                ("result", result),
                ("reason", reason),
            ]))
            .inc();
        if let Some(took) = took {
            self.provider_load_duration
                .get_or_create(&labels(&[("provider", provider)]))
                .observe(took.as_secs_f64());
        }
    }

    /// Whether the instance types of NodeClass `nodeclass` are usable now.
    pub fn instance_types_ready(&self, nodeclass: &str, ready: bool) {
        self.instance_types_ready
            .get_or_create(&labels(&[("nodeclass", nodeclass)]))
            .set(if ready { 1.0 } else { 0.0 });
    }

    /// A call of `function` of `provider` failed its health with `failure`
    /// ([`crate::provider::health`]).
    pub fn provider_call_failure(&self, provider: &str, function: &str, failure: &str) {
        self.provider_call_failures
            .get_or_create(&labels(&[
                ("provider", provider),
                ("function", function),
                ("failure", failure),
            ]))
            .inc();
    }

    /// Whether `provider` is healthy now.
    pub fn provider_healthy(&self, provider: &str, healthy: bool) {
        self.provider_healthy
            .get_or_create(&labels(&[("provider", provider)]))
            .set(if healthy { 1.0 } else { 0.0 });
    }

    /// Provider `provider` is unloaded: its health series goes.
    pub fn forget_provider(&self, provider: &str) {
        self.provider_healthy
            .remove(&labels(&[("provider", provider)]));
    }

    /// NodeClass `nodeclass` is gone: its series goes too.
    pub fn forget_nodeclass(&self, nodeclass: &str) {
        self.instance_types_ready
            .remove(&labels(&[("nodeclass", nodeclass)]));
    }
}

#[cfg(test)]
mod tests {
    use super::super::{MAX_LABEL_VALUES, Metrics};
    use super::*;

    #[test]
    fn renders_provider_loads() {
        let m = Metrics::new();
        m.own
            .provider_load("kwok", "Loaded", Some(Duration::from_millis(400)));
        m.own.provider_load("kwok", "PinMismatch", None);
        m.own.provider_load("kwok", "PinMismatch", None);
        let text = m.render().unwrap();
        for line in [
            r#"capstan_provider_loads_total{provider="kwok",result="loaded",reason="Loaded"} 1"#,
            r#"capstan_provider_loads_total{provider="kwok",result="refused",reason="PinMismatch"} 2"#,
            r#"capstan_provider_load_duration_seconds_count{provider="kwok"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing in {text}");
        }
    }

    #[test]
    fn a_thousand_provider_reasons_make_a_bounded_set_of_series() {
        let m = Metrics::new();
        m.own.failed("p", "InsufficientCapacity");
        for i in 0..1000 {
            m.own.failed("p", &format!("QuotaExceeded{i}"));
        }
        m.own.failed("p", "InsufficientCapacity");
        m.own.failed("q", "LaunchTimeout");
        let text = m.render().unwrap();
        let series: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("capstan_nodeclaims_failed_total{nodepool=\"p\""))
            .collect();
        assert_eq!(series.len(), MAX_LABEL_VALUES + 1, "{text}");
        for line in [
            r#"capstan_nodeclaims_failed_total{nodepool="p",reason="InsufficientCapacity"} 2"#,
            r#"capstan_nodeclaims_failed_total{nodepool="p",reason="QuotaExceeded0"} 1"#,
            r#"capstan_nodeclaims_failed_total{nodepool="p",reason="other"} 969"#,
            r#"capstan_nodeclaims_failed_total{nodepool="q",reason="LaunchTimeout"} 1"#,
        ] {
            assert!(text.contains(line), "missing {line}:\n{text}");
        }
    }

    #[test]
    fn verdicts_are_counted_per_pool_and_reason_and_stale_pairs_drop_out() {
        let m = Metrics::new();
        let tally = BTreeMap::from([
            (("a".to_owned(), "NotBlocked"), 3),
            (("a".to_owned(), "DoNotDisruptPod"), 1),
        ]);
        m.own.consolidation_verdicts(&tally);
        let text = m.render().unwrap();
        let held =
            r#"capstan_nodeclaims_consolidation_blocked{nodepool="a",reason="DoNotDisruptPod"}"#;
        let free = r#"capstan_nodeclaims_consolidation_blocked{nodepool="a",reason="NotBlocked"}"#;
        assert!(text.contains(&format!("{held} 1")), "{text}");
        assert!(text.contains(&format!("{free} 3")), "{text}");
        m.own
            .consolidation_verdicts(&BTreeMap::from([(("a".to_owned(), "NotBlocked"), 4)]));
        let text = m.render().unwrap();
        assert!(!text.contains(held), "{text}");
        assert!(text.contains(&format!("{free} 4")), "{text}");
    }

    #[test]
    fn instance_types_ready_is_set_and_cleared() {
        let m = Metrics::new();
        m.own.instance_types_ready("nc", false);
        let line = r#"capstan_nodeclass_instance_types_ready{nodeclass="nc"}"#;
        assert!(m.render().unwrap().contains(&format!("{line} 0")));
        m.own.instance_types_ready("nc", true);
        assert!(m.render().unwrap().contains(&format!("{line} 1")));
        m.own.forget_nodeclass("nc");
        assert!(!m.render().unwrap().contains(line));
    }
}
