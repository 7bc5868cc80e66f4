//! `karpenter_cloudprovider_*`: every provider call the controllers make, timed and, when it
//! fails, counted by Karpenter's error category. Karpenter's CloudProvider method names stand
//! for the WIT functions ([`labels::method`]).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::metrics::histogram::Histogram;

use super::labels::{self, Labels, labels};
use super::{Counters, Gauges, Histograms, Registrar};
use crate::runtime::CallError;
use crate::scheduling::InstanceType;

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
    /// Node repair.
    pub const NODE_REPAIR: &str = "node.repair";
    /// Reboots in place.
    pub const NODECLAIM_REBOOT: &str = "nodeclaim.reboot";
}

/// Provider call durations and errors, and the instance-type catalog.
#[derive(Debug)]
pub struct CloudProvider {
    duration: Histograms,
    errors: Counters,
    cpu_cores: Gauges,
    memory_bytes: Gauges,
    offering_available: Gauges,
    offering_price: Gauges,
    /// The catalog samples of each NodePool (the gauges show their union).
    catalogs: Mutex<BTreeMap<String, Vec<CatalogSample>>>,
}

/// Which catalog gauge a sample is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Catalog {
    CpuCores,
    MemoryBytes,
    OfferingAvailable,
    OfferingPrice,
}

type CatalogSample = (Catalog, Labels, f64);

/// The catalog gauges' samples of `types`.
fn catalog_samples(types: &[InstanceType]) -> Vec<CatalogSample> {
    let mut out = Vec::new();
    for t in types {
        let name = labels(&[("instance_type", &t.name)]);
        #[allow(clippy::cast_precision_loss)]
        out.push((
            Catalog::CpuCores,
            name.clone(),
            t.capacity.cpu_millis as f64 / 1000.0,
        ));
        #[allow(clippy::cast_precision_loss)]
        out.push((Catalog::MemoryBytes, name, t.capacity.memory as f64));
        for o in &t.offerings {
            let l = labels(&[
                ("instance_type", &t.name),
                ("capacity_type", &o.capacity_type),
                ("zone", &o.zone),
            ]);
            let available = if o.available { 1.0 } else { 0.0 };
            out.push((Catalog::OfferingAvailable, l.clone(), available));
            out.push((Catalog::OfferingPrice, l, o.price));
        }
    }
    out
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
            cpu_cores: Gauges::default(),
            memory_bytes: Gauges::default(),
            offering_available: Gauges::default(),
            offering_price: Gauges::default(),
            catalogs: Mutex::default(),
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
        cloud.register(
            "instance_type_cpu_cores",
            "CPU cores of an instance type, by instance type",
            this.cpu_cores.clone(),
        );
        cloud.register(
            "instance_type_memory_bytes",
            "Memory of an instance type in bytes, by instance type",
            this.memory_bytes.clone(),
        );
        cloud.register(
            "instance_type_offering_available",
            "1 if an offering of an instance type can launch now, else 0, by instance type, capacity type and zone",
            this.offering_available.clone(),
        );
        cloud.register(
            "instance_type_offering_price_estimate",
            "The provider's price per hour of an offering, by instance type, capacity type and zone",
            this.offering_price.clone(),
        );
        this
    }

    /// The provider answered `get-instance-types` for `nodepool` with `types` (call inside
    /// [`super::Metrics::exclusive`]).
    pub fn catalog(&self, nodepool: &str, types: &[InstanceType]) {
        let mut catalogs = self.catalogs.lock().unwrap_or_else(PoisonError::into_inner);
        catalogs.insert(nodepool.to_owned(), catalog_samples(types));
        self.show(&catalogs);
    }

    /// Forgets the catalogs of pools not in `pools` (call inside
    /// [`super::Metrics::exclusive`]).
    pub fn retain_catalogs(&self, pools: &HashSet<String>) {
        let mut catalogs = self.catalogs.lock().unwrap_or_else(PoisonError::into_inner);
        let before = catalogs.len();
        catalogs.retain(|pool, _| pools.contains(pool));
        if catalogs.len() != before {
            self.show(&catalogs);
        }
    }

    /// Sets the catalog gauges to the union of `catalogs`.
    fn show(&self, catalogs: &BTreeMap<String, Vec<CatalogSample>>) {
        let family = |kind| match kind {
            Catalog::CpuCores => &self.cpu_cores,
            Catalog::MemoryBytes => &self.memory_bytes,
            Catalog::OfferingAvailable => &self.offering_available,
            Catalog::OfferingPrice => &self.offering_price,
        };
        for kind in [
            Catalog::CpuCores,
            Catalog::MemoryBytes,
            Catalog::OfferingAvailable,
            Catalog::OfferingPrice,
        ] {
            family(kind).clear();
        }
        for (kind, labels, value) in catalogs.values().flatten() {
            family(*kind).get_or_create(labels).set(*value);
        }
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

    #[test]
    fn the_catalog_gauges_show_the_live_pools_catalogs() {
        use crate::scheduling::Offering;
        use crate::scheduling::resources::Resources;
        let m = Metrics::new();
        let mut spot = Offering::new("z1", "spot", 0.25);
        spot.available = false;
        let t = InstanceType {
            name: "c-2x".into(),
            requirements: Default::default(),
            offerings: vec![Offering::new("z1", "on-demand", 0.5), spot],
            capacity: Resources::new(2000, 4 << 30, 110),
            overhead: Resources::default(),
            volume_limits: Default::default(),
            devices: Vec::new(),
        };
        m.exclusive(|| m.cloudprovider.catalog("p", std::slice::from_ref(&t)));
        let text = m.render().unwrap();
        for line in [
            r#"karpenter_cloudprovider_instance_type_cpu_cores{instance_type="c-2x"} 2.0"#,
            r#"karpenter_cloudprovider_instance_type_memory_bytes{instance_type="c-2x"} 4294967296.0"#,
            r#"karpenter_cloudprovider_instance_type_offering_price_estimate{instance_type="c-2x",capacity_type="on-demand",zone="z1"} 0.5"#,
            r#"karpenter_cloudprovider_instance_type_offering_available{instance_type="c-2x",capacity_type="spot",zone="z1"} 0.0"#,
        ] {
            assert!(text.contains(line), "missing {line}:\n{text}");
        }
        m.exclusive(|| m.cloudprovider.retain_catalogs(&HashSet::new()));
        let text = m.render().unwrap();
        assert!(!text.contains("instance_type_cpu_cores{"), "{text}");
    }
}
