//! `karpenter_cloudprovider_*`: every provider call the controllers make, timed and, when it
//! fails, counted by Karpenter's error category. Karpenter's CloudProvider method names stand
//! for the WIT functions ([`labels::method`]).

use std::time::Duration;

use prometheus_client::metrics::histogram::Histogram;

use super::labels::{self, labels};
use super::{Counters, Histograms, Registrar};
use crate::runtime::CallError;

/// Which controller made a call: Karpenter's controller names where Karpenter has the same
/// controller.
pub mod controller {
    /// Launch and termination of NodeClaims.
    pub const NODECLAIM_LIFECYCLE: &str = "nodeclaim.lifecycle";
    /// Garbage collection of instances and NodeClaims.
    pub const GARBAGE_COLLECTION: &str = "nodeclaim.garbagecollection";
    /// The provisioner (instance types for the simulation).
    pub const PROVISIONER: &str = "provisioner";
    /// Disruption (drift, consolidation).
    pub const DISRUPTION: &str = "disruption";
    /// The NodeClass status controller.
    pub const NODECLASS: &str = "nodeclass.status";
}

/// Provider call durations and errors.
#[derive(Debug)]
pub struct CloudProvider {
    duration: Histograms,
    errors: Counters,
}

fn default_buckets() -> Histogram {
    // Prometheus' default buckets, which Karpenter's histogram keeps.
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

impl CloudProvider {
    /// Registers the families under `registry` (prefix `karpenter`).
    pub fn register(registry: &mut Registrar<'_>) -> Self {
        let this = Self {
            duration: Histograms::new_with_constructor(default_buckets),
            errors: Counters::default(),
        };
        let mut cloud = registry.sub("cloudprovider");
        cloud.register(
            "duration_seconds",
            "Duration of cloud provider method calls, by controller, method and provider",
            this.duration.clone(),
        );
        cloud.register(
            "errors",
            "Total number of errors returned from CloudProvider calls, by controller, method, provider, error and nodepool",
            this.errors.clone(),
        );
        this
    }

    /// A call of `controller` to `function` of `provider` for `nodepool` (empty when the call
    /// covers several) took `elapsed` and ended with `result`.
    pub fn observe<T>(
        &self,
        controller: &str,
        provider: &str,
        function: &str,
        nodepool: &str,
        elapsed: Duration,
        result: &Result<T, CallError>,
    ) {
        let method = labels::method(function);
        self.duration
            .get_or_create(&labels(&[
                ("controller", controller),
                ("method", method),
                ("provider", provider),
            ]))
            .observe(elapsed.as_secs_f64());
        if let Err(err) = result {
            self.errors
                .get_or_create(&labels(&[
                    ("controller", controller),
                    ("method", method),
                    ("provider", provider),
                    ("error", labels::error(err)),
                    ("nodepool", nodepool),
                ]))
                .inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Metrics;
    use super::*;
    use crate::runtime::bindings::types::ProviderError;

    #[test]
    fn calls_are_timed_and_errors_categorized() {
        let m = Metrics::new();
        let c = &m.cloudprovider;
        let ok: Result<(), CallError> = Ok(());
        let ice: Result<(), CallError> = Err(CallError::Provider {
            function: "create",
            error: ProviderError::InsufficientCapacity("none".into()),
        });
        for result in [&ok, &ice] {
            c.observe(
                controller::NODECLAIM_LIFECYCLE,
                "kwok",
                "create",
                "p",
                Duration::from_millis(3),
                result,
            );
        }
        c.observe(
            controller::PROVISIONER,
            "kwok",
            "get-instance-types",
            "p",
            Duration::from_millis(1),
            &ok,
        );
        let text = m.render().unwrap();
        for line in [
            r#"karpenter_cloudprovider_duration_seconds_count{controller="nodeclaim.lifecycle",method="Create",provider="kwok"} 2"#,
            r#"karpenter_cloudprovider_duration_seconds_count{controller="provisioner",method="GetInstanceTypes",provider="kwok"} 1"#,
            r#"karpenter_cloudprovider_errors_total{controller="nodeclaim.lifecycle",method="Create",provider="kwok",error="InsufficientCapacityError",nodepool="p"} 1"#,
        ] {
            assert!(text.contains(line), "missing {line}:\n{text}");
        }
        assert!(
            !text.contains(r#"method="GetInstanceTypes",provider="kwok",error"#),
            "{text}"
        );
    }
}
