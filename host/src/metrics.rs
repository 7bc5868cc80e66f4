//! Prometheus metrics, in the OpenMetrics text format (`prometheus-client`).
//!
//! What Karpenter has a name for is exported under Karpenter's name, type, labels and label
//! values (`karpenter_nodeclaims_*`, `karpenter_nodes_*`, `karpenter_pods_*`,
//! `karpenter_scheduler_*`, `karpenter_nodepools_*`, `karpenter_voluntary_disruption_*`,
//! `karpenter_cloudprovider_*`, `karpenter_cluster_state_*`), so dashboards and alerts built on
//! Karpenter keep working; the rest is Capstan's own (`capstan_*`: providers, their loads and
//! capabilities, launch failures by reason, consolidation savings). `docs/metrics.md` lists them
//! all.
//!
//! Counters and histograms are fed where things happen ([`lifecycle`], [`cloudprovider`],
//! [`disruption`], [`scheduler`], [`own`]); the gauges of what the cluster holds (nodes, pools,
//! pods) are rebuilt from the cluster state by the metrics controller ([`state`]), each time as
//! a whole, so a deleted pool or node leaves no series behind. [`global`] is the process-wide
//! set; [`render`] gives its text for the `/metrics` endpoint.
//!
//! Label values a provider (or a user) controls, such as the reason of a `create-failed`, pass
//! through [`BoundedValues`].

pub mod bounded;
pub mod cloudprovider;
pub mod disruption;
pub mod labels;
pub mod lifecycle;
pub mod own;
pub mod scheduler;
pub mod state;

use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, OnceLock, PoisonError};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::{Metric, Registry};

pub use self::bounded::{BoundedValues, MAX_LABEL_VALUES, OTHER};
pub use self::labels::Labels;

/// Why metrics could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The text encoder failed.
    #[error("encoding metrics: {0}")]
    Encode(#[from] std::fmt::Error),
}

/// Counters by label set.
pub type Counters = Family<Labels, Counter>;
/// Gauges (floating point) by label set.
pub type Gauges = Family<Labels, Gauge<f64, AtomicU64>>;
/// Histograms by label set, each with the buckets of its constructor.
pub type Histograms = Family<Labels, Histogram, fn() -> Histogram>;

/// Karpenter's `DurationBuckets`: controller-runtime's thresholds plus long ones (seconds).
pub const DURATION_BUCKETS: [f64; 45] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0, 120.0, 150.0, 300.0, 450.0, 600.0,
];

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// A histogram family with Karpenter's duration buckets.
pub fn durations() -> Histograms {
    Histograms::new_with_constructor(duration_histogram)
}

/// Registers metrics under a prefix and records the full name of each, as it renders (a
/// counter's with `_total`): the registry does not render a family without series, so the names
/// are how the docs, the dashboard and the tests know what the host exports.
#[derive(Debug)]
pub struct Registrar<'a> {
    registry: &'a mut Registry,
    prefix: String,
    names: &'a mut Vec<String>,
}

impl Registrar<'_> {
    /// Registers `metric` as `<prefix>_<name>`.
    pub fn register<M: Metric + TypedMetric>(&mut self, name: &str, help: &str, metric: M) {
        let suffix = if matches!(M::TYPE, MetricType::Counter) {
            "_total"
        } else {
            ""
        };
        self.names.push(format!("{}_{name}{suffix}", self.prefix));
        self.registry.register(name, help, metric);
    }

    /// A registrar under `<prefix>_<sub>`.
    pub fn sub(&mut self, sub: &str) -> Registrar<'_> {
        Registrar {
            prefix: format!("{}_{sub}", self.prefix),
            registry: self.registry.sub_registry_with_prefix(sub),
            names: self.names,
        }
    }
}

/// Brings gauges up to date just before a scrape reads them.
type Refresh = Box<dyn Fn() + Send + Sync>;

/// The [`Refresh`] a scrape runs first, if one is set.
#[derive(Default)]
struct OnScrape(Mutex<Option<Refresh>>);

impl std::fmt::Debug for OnScrape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = self.0.lock().map(|hook| hook.is_some()).unwrap_or_default();
        f.debug_tuple("OnScrape").field(&set).finish()
    }
}

/// Every metric of the host.
#[derive(Debug)]
pub struct Metrics {
    registry: Mutex<Registry>,
    names: Vec<String>,
    on_scrape: OnScrape,
    /// NodeClaim and Node lifecycle counters and durations.
    pub lifecycle: lifecycle::Lifecycle,
    /// CloudProvider (provider call) durations and errors, and the instance-type catalog.
    pub cloudprovider: cloudprovider::CloudProvider,
    /// Voluntary disruption decisions.
    pub disruption: disruption::Disruption,
    /// The provisioner's scheduling simulation and pod startup.
    pub scheduler: scheduler::Scheduler,
    /// Gauges of what the cluster holds, rebuilt as a whole.
    pub state: state::State,
    /// Capstan's own metrics.
    pub own: own::Own,
    /// Each provider's health from the calls recorded by [`Metrics::provider_call`] (the source
    /// of `capstan_provider_healthy` and of the Provider's `Healthy` condition).
    pub health: crate::provider::health::HealthBook,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh set: Karpenter's names under `karpenter_`, Capstan's own under `capstan_`.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let mut names = Vec::new();
        let mut karpenter = Registrar {
            registry: registry.sub_registry_with_prefix("karpenter"),
            prefix: "karpenter".to_owned(),
            names: &mut names,
        };
        let lifecycle = lifecycle::Lifecycle::register(&mut karpenter);
        let cloudprovider = cloudprovider::CloudProvider::register(&mut karpenter);
        let disruption = disruption::Disruption::register(&mut karpenter);
        let scheduler = scheduler::Scheduler::register(&mut karpenter);
        let state = state::State::register(&mut karpenter);
        let own = own::Own::register(&mut Registrar {
            registry: registry.sub_registry_with_prefix("capstan"),
            prefix: "capstan".to_owned(),
            names: &mut names,
        });
        Self {
            registry: Mutex::new(registry),
            names,
            on_scrape: OnScrape::default(),
            lifecycle,
            cloudprovider,
            disruption,
            scheduler,
            state,
            own,
            health: crate::provider::health::HealthBook::default(),
        }
    }

    /// A call of `controller` to `function` of `provider` for `nodepool` (empty when the call
    /// covers several) took `elapsed` and ended with `result`: timed and counted
    /// (`karpenter_cloudprovider_*`), and recorded in the provider's [`Self::health`].
    pub fn provider_call<T>(
        &self,
        controller: &str,
        provider: &str,
        function: &'static str,
        nodepool: &str,
        elapsed: std::time::Duration,
        result: &Result<T, crate::runtime::CallError>,
    ) {
        self.cloudprovider
            .observe(controller, provider, function, nodepool, elapsed, result);
        let recorded = self.health.record(provider, function, result);
        if let Some(failure) = recorded.failure {
            self.own
                .provider_call_failure(provider, function, failure.label());
        }
        if let Some(verdict) = recorded.changed {
            self.own.provider_healthy(provider, !verdict.is_unhealthy());
        }
    }

    /// The name of every metric registered, as it renders (`karpenter_nodeclaims_created_total`,
    /// ...), series or not.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Runs `update` while no scrape reads the metrics (a scrape sees all of it or none).
    pub fn exclusive<R>(&self, update: impl FnOnce() -> R) -> R {
        let _registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        update()
    }

    /// Runs `refresh` before each scrape from now on (in place of any earlier one): gauges that
    /// are costly to rebuild are rebuilt when read, not on a timer. Scrapes run it one at a time.
    pub fn on_scrape(&self, refresh: impl Fn() + Send + Sync + 'static) {
        *self
            .on_scrape
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Box::new(refresh));
    }

    /// The metrics in the OpenMetrics text format (after the [`Self::on_scrape`] refresh).
    pub fn render(&self) -> Result<String, MetricsError> {
        {
            let hook = self
                .on_scrape
                .0
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(refresh) = hook.as_ref() {
                refresh();
            }
        }
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
    fn renders_both_prefixes_and_eof() {
        let m = Metrics::new();
        m.lifecycle.launched("default");
        m.own
            .provider_load("kwok", "Loaded", Some(std::time::Duration::from_millis(4)));
        let text = m.render().unwrap();
        assert!(
            text.contains(r#"karpenter_nodeclaims_launched_total{nodepool="default"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"capstan_provider_loads_total{provider="kwok",result="loaded",reason="Loaded"} 1"#
            ),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn a_scrape_runs_the_refresh_first_and_sees_what_it_wrote() {
        let m = std::sync::Arc::new(Metrics::new());
        assert!(!m.render().unwrap().contains("nodepool=\"late\""));
        let scrapes = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        m.on_scrape({
            let (m, scrapes) = (std::sync::Arc::downgrade(&m), scrapes.clone());
            move || {
                scrapes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if let Some(m) = m.upgrade() {
                    m.exclusive(|| m.lifecycle.launched("late"));
                }
            }
        });
        let text = m.render().unwrap();
        assert!(
            text.contains(r#"karpenter_nodeclaims_launched_total{nodepool="late"} 1"#),
            "{text}"
        );
        m.render().unwrap();
        assert_eq!(scrapes.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[test]
    fn every_metric_is_named_once_and_documented() {
        let m = Metrics::new();
        let docs = include_str!("../../docs/metrics.md");
        let mut seen = std::collections::HashSet::new();
        for name in m.names() {
            assert!(seen.insert(name), "{name} registered twice");
            assert!(
                name.starts_with("karpenter_") || name.starts_with("capstan_"),
                "{name}"
            );
            assert!(
                docs.contains(&format!("`{name}`")),
                "docs/metrics.md does not list {name}"
            );
        }
        assert!(
            m.names()
                .iter()
                .any(|n| n == "karpenter_nodeclaims_created_total")
        );
        assert!(m.names().iter().any(|n| n == "karpenter_nodepools_usage"));
        assert!(m.names().len() >= 45, "{}", m.names().len());
    }

    #[test]
    fn global_render_works() {
        global().lifecycle.launched("p");
        assert!(
            render()
                .unwrap()
                .contains("karpenter_nodeclaims_launched_total")
        );
    }
}
