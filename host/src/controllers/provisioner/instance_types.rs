//! Instance types per NodePool and NodeClass, fetched from the provider and cached: an entry
//! lives for a TTL and is keyed by the pool's and the class's generations, so editing either
//! invalidates it at once. Converted from the WIT types to the scheduler's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::api::labels::{CAPACITY_TYPE, ZONE};
use crate::api::{NodeClass, NodePool};
use crate::provider::convert::{node_class_to_wit, node_pool_to_wit};
use crate::runtime::ProviderPre;
use crate::runtime::types as wit;
use crate::scheduling::{InstanceType, Offering, Operator, Requirement, Requirements, Resources};

use super::ProvisionError;

/// How long an entry is fresh.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    pool: String,
    pool_generation: Option<i64>,
    class: String,
    class_generation: Option<i64>,
    provider_sha256: String,
}

type Entries = HashMap<Key, (Instant, Arc<[InstanceType]>)>;

/// The cache.
#[derive(Debug)]
pub struct InstanceTypeCache {
    ttl: Duration,
    entries: Mutex<Entries>,
}

impl Default for InstanceTypeCache {
    fn default() -> Self {
        Self::new(DEFAULT_TTL)
    }
}

impl InstanceTypeCache {
    /// An empty cache whose entries live `ttl`.
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The instance types `provider` offers for `pool` with `class`.
    pub async fn get(
        &self,
        provider: &ProviderPre,
        pool: &NodePool,
        class: &NodeClass,
    ) -> Result<Arc<[InstanceType]>, ProvisionError> {
        let key = Key {
            pool: pool.metadata.name.clone().unwrap_or_default(),
            pool_generation: pool.metadata.generation,
            class: class.metadata.name.clone().unwrap_or_default(),
            class_generation: class.metadata.generation,
            provider_sha256: provider.sha256().to_owned(),
        };
        if let Some((at, types)) = self.lock().get(&key)
            && at.elapsed() < self.ttl
        {
            return Ok(Arc::clone(types));
        }
        let wit_types = provider
            .get_instance_types(&node_pool_to_wit(pool)?, &node_class_to_wit(class))
            .await?;
        let types: Arc<[InstanceType]> = wit_types
            .iter()
            .map(from_wit)
            .collect::<Result<Vec<_>, _>>()?
            .into();
        let mut entries = self.lock();
        entries.retain(|_, (at, _)| at.elapsed() < self.ttl);
        entries.insert(key, (Instant::now(), Arc::clone(&types)));
        Ok(types)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn requirement(r: &wit::Requirement) -> Result<Requirement, ProvisionError> {
    let op = match r.operator {
        wit::Operator::In => Operator::In,
        wit::Operator::NotIn => Operator::NotIn,
        wit::Operator::Exists => Operator::Exists,
        wit::Operator::DoesNotExist => Operator::DoesNotExist,
        wit::Operator::Gt => Operator::Gt,
        wit::Operator::Lt => Operator::Lt,
    };
    Ok(
        Requirement::new(r.key.as_str(), op, r.values.iter().cloned())
            .map_err(|err| ProvisionError::InstanceType(format!("requirement {}: {err}", r.key)))?
            .with_min_values(r.min_values),
    )
}

fn requirements(list: &[wit::Requirement]) -> Result<Requirements, ProvisionError> {
    let mut out = Requirements::new();
    for r in list {
        out.add(requirement(r)?);
    }
    Ok(out)
}

fn resources(what: &str, list: &[wit::Resource]) -> Result<Resources, ProvisionError> {
    Resources::parse(list.iter().map(|r| (r.name.as_str(), r.quantity.as_str())))
        .map_err(|err| ProvisionError::InstanceType(format!("{what}: {err}")))
}

/// One WIT instance type as the scheduler sees it. An offering's zone and capacity type are its
/// single-valued `topology.kubernetes.io/zone` and `karpenter.sh/capacity-type` requirements; its
/// other requirements stay on the offering.
pub fn from_wit(it: &wit::InstanceType) -> Result<InstanceType, ProvisionError> {
    let mut offerings = Vec::with_capacity(it.offerings.len());
    for o in &it.offerings {
        let mut reqs = requirements(&o.requirements)?;
        let mut single = |key: &str| -> Result<String, ProvisionError> {
            reqs.remove(key)
                .and_then(|r| r.set().single_value().map(str::to_owned))
                .ok_or_else(|| {
                    ProvisionError::InstanceType(format!(
                        "instance type {}: an offering has no single {key}",
                        it.name
                    ))
                })
        };
        let zone = single(ZONE)?;
        let capacity_type = single(CAPACITY_TYPE)?;
        let mut offering = Offering::new(zone, capacity_type, o.price);
        offering.available = o.available;
        offering.requirements = reqs;
        offerings.push(offering);
    }
    let what = format!("instance type {}", it.name);
    let mut overhead = resources(&what, &it.overhead.kube_reserved)?;
    overhead.add(&resources(&what, &it.overhead.system_reserved)?);
    overhead.add(&resources(&what, &it.overhead.eviction_threshold)?);
    Ok(InstanceType {
        name: it.name.clone(),
        requirements: requirements(&it.requirements)?,
        offerings,
        capacity: resources(&what, &it.capacity)?,
        overhead,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(key: &str, values: &[&str]) -> wit::Requirement {
        wit::Requirement {
            key: key.into(),
            operator: wit::Operator::In,
            values: values.iter().map(|v| (*v).to_owned()).collect(),
            min_values: None,
        }
    }

    fn res(name: &str, q: &str) -> wit::Resource {
        wit::Resource {
            name: name.into(),
            quantity: q.into(),
        }
    }

    #[test]
    fn converts_an_instance_type() {
        let it = wit::InstanceType {
            name: "c-4x".into(),
            requirements: vec![req("node.kubernetes.io/instance-type", &["c-4x"])],
            offerings: vec![wit::Offering {
                requirements: vec![req(ZONE, &["zone-a"]), req(CAPACITY_TYPE, &["spot"])],
                price: 0.25,
                available: true,
            }],
            capacity: vec![res("cpu", "4"), res("memory", "8Gi"), res("pods", "110")],
            overhead: wit::Overhead {
                kube_reserved: vec![res("cpu", "100m")],
                system_reserved: vec![res("cpu", "100m")],
                eviction_threshold: vec![res("memory", "100Mi")],
            },
        };
        let out = from_wit(&it).unwrap();
        assert_eq!(out.offerings[0].zone, "zone-a");
        assert_eq!(out.offerings[0].capacity_type, "spot");
        assert!(out.offerings[0].requirements.is_empty());
        assert_eq!(out.allocatable().cpu_millis, 3800);
        assert_eq!(out.capacity.pods, 110);
        let mut bad = it.clone();
        bad.offerings[0].requirements.clear();
        assert!(from_wit(&bad).is_err());
    }
}
