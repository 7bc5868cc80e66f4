//! Prometheus metrics of the controllers, in the OpenMetrics text format (`prometheus-client`).
//!
//! Counters of NodeClaims launched, registered, initialized, terminated and failed (by reason),
//! and a histogram of provider call latency by WIT function. [`global`] is the process-wide set;
//! [`render`] gives its text for the `/metrics` endpoint.
//!
//! Label values a provider (or a user) controls, such as the reason of a `create-failed`, pass
//! through [`BoundedValues`]: at most [`MAX_LABEL_VALUES`] distinct values per metric and
//! NodePool, and [`OTHER`] for the rest, so no answer of a provider grows the set of series.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Why metrics could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The text encoder failed.
    #[error("encoding metrics: {0}")]
    Encode(#[from] std::fmt::Error),
}

type Labels = Vec<(String, String)>;

/// Distinct values a bounded label takes per metric and scope before new ones count as [`OTHER`].
pub const MAX_LABEL_VALUES: usize = 32;
/// The value that stands for every value past the bound.
pub const OTHER: &str = "other";

/// Distinct values seen of labels whose values come from outside the host, per scope (a metric
/// and a NodePool, say): the first `cap` pass as they are, later new ones become the `other`
/// value ([`OTHER`] for metrics).
#[derive(Debug)]
pub struct BoundedValues {
    cap: usize,
    other: &'static str,
    seen: Mutex<HashMap<String, HashSet<String>>>,
}

impl BoundedValues {
    /// At most `cap` distinct values per scope, then [`OTHER`].
    pub fn new(cap: usize) -> Self {
        Self::with_other(cap, OTHER)
    }

    /// At most `cap` distinct values per scope, then `other`.
    pub fn with_other(cap: usize, other: &'static str) -> Self {
        Self {
            cap,
            other,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// `value` if it was seen in `scope` before or there is room for it, else the `other` value.
    pub fn admit<'a>(&self, scope: &str, value: &'a str) -> &'a str {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let values = seen.entry(scope.to_owned()).or_default();
        if values.contains(value) {
            return value;
        }
        if values.len() < self.cap {
            values.insert(value.to_owned());
            return value;
        }
        self.other
    }
}

/// Metrics of the NodeClaim lifecycle and of provider calls.
#[derive(Debug)]
pub struct Metrics {
    registry: Mutex<Registry>,
    launched: Family<Labels, Counter>,
    registered: Family<Labels, Counter>,
    initialized: Family<Labels, Counter>,
    terminated: Family<Labels, Counter>,
    failed: Family<Labels, Counter>,
    garbage_collected: Family<Labels, Counter>,
    disrupted: Family<Labels, Counter>,
    disruption_decisions: Family<Labels, Counter>,
    consolidation_savings: Family<Labels, Histogram, fn() -> Histogram>,
    provider_calls: Family<Labels, Histogram, fn() -> Histogram>,
    provider_loads: Family<Labels, Counter>,
    provider_load_duration: Family<Labels, Histogram, fn() -> Histogram>,
    instance_types_ready: Family<Labels, Gauge>,
    reasons: BoundedValues,
}

fn savings_histogram() -> Histogram {
    // $0.001/h .. ~$65/h.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

fn latency_histogram() -> Histogram {
    // 0.5 ms .. ~16 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh set, registered under the `capstan` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("capstan");
        let launched = Family::<Labels, Counter>::default();
        let registered = Family::<Labels, Counter>::default();
        let initialized = Family::<Labels, Counter>::default();
        let terminated = Family::<Labels, Counter>::default();
        let failed = Family::<Labels, Counter>::default();
        let garbage_collected = Family::<Labels, Counter>::default();
        let disrupted = Family::<Labels, Counter>::default();
        let disruption_decisions = Family::<Labels, Counter>::default();
        let consolidation_savings =
            Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(savings_histogram);
        let provider_calls =
            Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(latency_histogram);
        let provider_loads = Family::<Labels, Counter>::default();
        let provider_load_duration =
            Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(latency_histogram);
        let instance_types_ready = Family::<Labels, Gauge>::default();
        registry.register(
            "nodeclaims_launched",
            "NodeClaims whose instance the provider launched",
            launched.clone(),
        );
        registry.register(
            "nodeclaims_registered",
            "NodeClaims whose Node registered",
            registered.clone(),
        );
        registry.register(
            "nodeclaims_initialized",
            "NodeClaims whose Node initialized",
            initialized.clone(),
        );
        registry.register(
            "nodeclaims_terminated",
            "NodeClaims terminated (finalizer removed)",
            terminated.clone(),
        );
        registry.register(
            "nodeclaims_failed",
            "NodeClaim failures, by reason",
            failed.clone(),
        );
        registry.register(
            "instances_garbage_collected",
            "Leaked instances and orphaned NodeClaims removed by garbage collection",
            garbage_collected.clone(),
        );
        registry.register(
            "nodeclaims_disrupted",
            "NodeClaims deleted by disruption, by pool and reason (drifted, expired)",
            disrupted.clone(),
        );
        registry.register(
            "disruption_decisions",
            "Disruption decisions, by decision (replace, delete, blocked, rolled-back) and reason",
            disruption_decisions.clone(),
        );
        registry.register(
            "consolidation_savings_dollars_per_hour",
            "What each consolidation decision saves, in the providers' price unit per hour, by reason",
            consolidation_savings.clone(),
        );
        registry.register(
            "provider_call_duration_seconds",
            "Latency of provider calls, by provider, function and outcome",
            provider_calls.clone(),
        );
        registry.register(
            "provider_loads",
            "Provider (re)loads from Provider resources: result loaded or refused, with the reason",
            provider_loads.clone(),
        );
        registry.register(
            "provider_load_duration_seconds",
            "Time from reading a Provider's source to the new version serving",
            provider_load_duration.clone(),
        );
        registry.register(
            "nodeclass_instance_types_ready",
            "1 while the provider answers get-instance-types with a catalog the host takes for every NodePool of the NodeClass, else 0",
            instance_types_ready.clone(),
        );
        Self {
            registry: Mutex::new(registry),
            launched,
            registered,
            initialized,
            terminated,
            failed,
            garbage_collected,
            disrupted,
            disruption_decisions,
            consolidation_savings,
            provider_calls,
            provider_loads,
            provider_load_duration,
            instance_types_ready,
            reasons: BoundedValues::new(MAX_LABEL_VALUES),
        }
    }

    fn pool(nodepool: &str) -> Labels {
        vec![("nodepool".to_owned(), nodepool.to_owned())]
    }

    /// A claim launched.
    pub fn launched(&self, nodepool: &str) {
        self.launched.get_or_create(&Self::pool(nodepool)).inc();
    }

    /// A claim registered.
    pub fn registered(&self, nodepool: &str) {
        self.registered.get_or_create(&Self::pool(nodepool)).inc();
    }

    /// A claim initialized.
    pub fn initialized(&self, nodepool: &str) {
        self.initialized.get_or_create(&Self::pool(nodepool)).inc();
    }

    /// A claim terminated.
    pub fn terminated(&self, nodepool: &str) {
        self.terminated.get_or_create(&Self::pool(nodepool)).inc();
    }

    /// A claim failed (`InsufficientCapacity`, `LaunchFailed`, `RegistrationTimeout`, ...).
    /// The reason may come from the provider: see [`BoundedValues`].
    pub fn failed(&self, nodepool: &str, reason: &str) {
        let reason = self.reasons.admit(&format!("failed/{nodepool}"), reason);
        let mut labels = Self::pool(nodepool);
        labels.push(("reason".to_owned(), reason.to_owned()));
        self.failed.get_or_create(&labels).inc();
    }

    /// Garbage collection removed something (`instance` or `nodeclaim`).
    pub fn garbage_collected(&self, kind: &str) {
        self.garbage_collected
            .get_or_create(&vec![("kind".to_owned(), kind.to_owned())])
            .inc();
    }

    /// Disruption deleted a claim of `nodepool` for `reason`.
    pub fn disrupted(&self, nodepool: &str, reason: &str) {
        let reason = self.reasons.admit(&format!("disrupted/{nodepool}"), reason);
        let mut labels = Self::pool(nodepool);
        labels.push(("reason".to_owned(), reason.to_owned()));
        self.disrupted.get_or_create(&labels).inc();
    }

    /// Disruption decided `decision` for `reason`.
    pub fn disruption_decision(&self, decision: &str, reason: &str) {
        let reason = self.reasons.admit("disruption_decisions", reason);
        let labels = vec![
            ("decision".to_owned(), decision.to_owned()),
            ("reason".to_owned(), reason.to_owned()),
        ];
        self.disruption_decisions.get_or_create(&labels).inc();
    }

    /// A consolidation decision for `reason` saves `per_hour`.
    pub fn consolidation_savings(&self, reason: &str, per_hour: f64) {
        let labels = vec![("reason".to_owned(), reason.to_owned())];
        self.consolidation_savings
            .get_or_create(&labels)
            .observe(per_hour);
    }

    /// A provider call took `elapsed`; `outcome` is `ok` or the error kind.
    pub fn provider_call(&self, provider: &str, function: &str, outcome: &str, elapsed: Duration) {
        let labels = vec![
            ("provider".to_owned(), provider.to_owned()),
            ("function".to_owned(), function.to_owned()),
            ("outcome".to_owned(), outcome.to_owned()),
        ];
        self.provider_calls
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    /// A Provider's source was loaded (`reason` `Loaded`, with how long it took) or refused
    /// (`reason` the condition reason).
    pub fn provider_load(&self, provider: &str, reason: &str, took: Option<Duration>) {
        let result = if took.is_some() { "loaded" } else { "refused" };
        let labels = vec![
            ("provider".to_owned(), provider.to_owned()),
            ("result".to_owned(), result.to_owned()),
            ("reason".to_owned(), reason.to_owned()),
        ];
        self.provider_loads.get_or_create(&labels).inc();
        if let Some(took) = took {
            self.provider_load_duration
                .get_or_create(&vec![("provider".to_owned(), provider.to_owned())])
                .observe(took.as_secs_f64());
        }
    }

    /// Whether the instance types of NodeClass `nodeclass` are usable now.
    pub fn instance_types_ready(&self, nodeclass: &str, ready: bool) {
        self.instance_types_ready
            .get_or_create(&vec![("nodeclass".to_owned(), nodeclass.to_owned())])
            .set(i64::from(ready));
    }

    /// NodeClass `nodeclass` is gone: its series goes too.
    pub fn forget_nodeclass(&self, nodeclass: &str) {
        self.instance_types_ready
            .remove(&vec![("nodeclass".to_owned(), nodeclass.to_owned())]);
    }

    /// The metrics in the OpenMetrics text format.
    pub fn render(&self) -> Result<String, MetricsError> {
        let registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        let mut text = String::new();
        encode(&mut text, &registry)?;
        Ok(text)
    }
}

/// The process-wide metrics.
pub fn global() -> &'static Metrics {
    static GLOBAL: OnceLock<Metrics> = OnceLock::new();
    GLOBAL.get_or_init(Metrics::new)
}

/// [`global`] as OpenMetrics text.
pub fn render() -> Result<String, MetricsError> {
    global().render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_latency() {
        let m = Metrics::new();
        m.launched("default");
        m.launched("default");
        m.failed("default", "InsufficientCapacity");
        m.provider_call("kwok", "create", "ok", Duration::from_millis(3));
        let text = m.render().unwrap();
        assert!(
            text.contains(r#"capstan_nodeclaims_launched_total{nodepool="default"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"capstan_nodeclaims_failed_total{nodepool="default",reason="InsufficientCapacity"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"capstan_provider_call_duration_seconds_count{provider="kwok",function="create",outcome="ok"} 1"#
            ),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn renders_provider_loads() {
        let m = Metrics::new();
        m.provider_load("kwok", "Loaded", Some(Duration::from_millis(400)));
        m.provider_load("kwok", "PinMismatch", None);
        m.provider_load("kwok", "PinMismatch", None);
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
    fn every_lifecycle_counter_and_call_latency_renders() {
        let m = Metrics::new();
        m.launched("p");
        m.registered("p");
        m.initialized("p");
        m.terminated("p");
        for reason in [
            "LaunchTimeout",
            "RegistrationTimeout",
            "RegistrationTimeout",
        ] {
            m.failed("p", reason);
        }
        m.garbage_collected("instance");
        m.provider_call("kwok", "create", "ok", Duration::from_millis(2));
        m.provider_call("kwok", "delete", "not-found", Duration::from_millis(1));
        m.provider_call("chaos", "create", "launch-timeout", Duration::from_secs(4));
        let text = m.render().unwrap();
        for line in [
            r#"capstan_nodeclaims_launched_total{nodepool="p"} 1"#,
            r#"capstan_nodeclaims_registered_total{nodepool="p"} 1"#,
            r#"capstan_nodeclaims_initialized_total{nodepool="p"} 1"#,
            r#"capstan_nodeclaims_terminated_total{nodepool="p"} 1"#,
            r#"capstan_nodeclaims_failed_total{nodepool="p",reason="LaunchTimeout"} 1"#,
            r#"capstan_nodeclaims_failed_total{nodepool="p",reason="RegistrationTimeout"} 2"#,
            r#"capstan_instances_garbage_collected_total{kind="instance"} 1"#,
            r#"capstan_provider_call_duration_seconds_count{provider="kwok",function="delete",outcome="not-found"} 1"#,
            r#"capstan_provider_call_duration_seconds_count{provider="chaos",function="create",outcome="launch-timeout"} 1"#,
            r#"capstan_provider_call_duration_seconds_sum{provider="chaos",function="create",outcome="launch-timeout"} 4.0"#,
            "# TYPE capstan_nodeclaims_failed counter",
            "# TYPE capstan_provider_call_duration_seconds histogram",
        ] {
            assert!(text.contains(line), "missing {line}:\n{text}");
        }
    }

    #[test]
    fn a_thousand_provider_reasons_make_a_bounded_set_of_series() {
        let m = Metrics::new();
        m.failed("p", "InsufficientCapacity");
        for i in 0..1000 {
            m.failed("p", &format!("QuotaExceeded{i}"));
        }
        m.failed("p", "InsufficientCapacity");
        m.failed("q", "LaunchTimeout");
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
    fn instance_types_ready_is_set_and_cleared() {
        let m = Metrics::new();
        m.instance_types_ready("nc", false);
        let line = r#"capstan_nodeclass_instance_types_ready{nodeclass="nc"}"#;
        assert!(m.render().unwrap().contains(&format!("{line} 0")));
        m.instance_types_ready("nc", true);
        assert!(m.render().unwrap().contains(&format!("{line} 1")));
        m.forget_nodeclass("nc");
        assert!(!m.render().unwrap().contains(line));
    }

    #[test]
    fn bounded_values_keep_what_they_admitted() {
        let bounded = BoundedValues::new(2);
        assert_eq!(bounded.admit("s", "a"), "a");
        assert_eq!(bounded.admit("s", "b"), "b");
        assert_eq!(bounded.admit("s", "c"), OTHER);
        assert_eq!(bounded.admit("s", "a"), "a");
        assert_eq!(bounded.admit("t", "c"), "c");
    }

    #[test]
    fn global_render_works() {
        global().terminated("p");
        assert!(
            render()
                .unwrap()
                .contains("capstan_nodeclaims_terminated_total")
        );
    }
}
