//! Pods converted once, not once a pass: a provisioning or disruption pass takes every bound pod
//! of the cluster for the solver ([`super::node`]), and converting 50,000 unchanged pods again
//! for each pass (then freeing them) was most of what a pass at 5,000 nodes spent before its
//! searches. A [`PodMemo`] keeps each pod's conversion while the pod's `resourceVersion` and the
//! namespaces' labels (which affinity terms' namespace selectors read) are what they were.
//!
//! The memo is shared by every pass of a host (it sits in [`crate::state::ClusterState`]);
//! [`PodMemo::retain`] drops the pods that are gone.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1 as core;

use super::{ConvertError, NamespaceLabels};
use crate::scheduling::Pod;

/// Conversions by pod UID.
#[derive(Default)]
pub struct PodMemo {
    entries: Mutex<HashMap<String, Entry>>,
}

struct Entry {
    resource_version: String,
    namespaces: u64,
    pod: Arc<Pod>,
}

impl std::fmt::Debug for PodMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodMemo")
            .field("pods", &self.len())
            .finish()
    }
}

/// What the namespaces' labels are, as one number: a conversion made under other labels is made
/// again.
pub fn fingerprint(namespaces: &NamespaceLabels) -> u64 {
    let mut hasher = DefaultHasher::new();
    namespaces.hash(&mut hasher);
    hasher.finish()
}

impl PodMemo {
    /// `pod` as the scheduler sees it ([`super::pod`]): the conversion made before if the pod is
    /// unchanged since, else a new one (kept for the next pass). `namespaces` is
    /// [`fingerprint`] of `labels`. A pod without a UID or a `resourceVersion` (one built
    /// in memory, not read from the API) is converted every time.
    pub fn pod(
        &self,
        pod: &core::Pod,
        labels: &NamespaceLabels,
        namespaces: u64,
    ) -> Result<Arc<Pod>, ConvertError> {
        let (Some(uid), Some(version)) = (
            pod.metadata.uid.as_deref(),
            pod.metadata.resource_version.as_deref(),
        ) else {
            return super::pod(pod, labels).map(Arc::new);
        };
        if let Some(entry) = self.lock().get(uid)
            && entry.resource_version == version
            && entry.namespaces == namespaces
        {
            return Ok(Arc::clone(&entry.pod));
        }
        let converted = Arc::new(super::pod(pod, labels)?);
        self.lock().insert(
            uid.to_owned(),
            Entry {
                resource_version: version.to_owned(),
                namespaces,
                pod: Arc::clone(&converted),
            },
        );
        Ok(converted)
    }

    /// Forgets every pod whose UID `live` does not hold.
    pub fn retain<'a>(&self, live: impl IntoIterator<Item = &'a str>) {
        let live: HashSet<&str> = live.into_iter().collect();
        self.lock().retain(|uid, _| live.contains(uid.as_str()));
    }

    /// How many conversions it holds.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        // A panic while the lock was held leaves at worst a conversion missing or stale by
        // `resourceVersion`, which the check above sees.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::collections::BTreeMap;

    fn pod(uid: &str, version: &str, cpu: &str) -> core::Pod {
        let mut p = core::Pod::default();
        p.metadata.name = Some(format!("p-{uid}"));
        p.metadata.namespace = Some("default".into());
        p.metadata.uid = Some(uid.into());
        p.metadata.resource_version = Some(version.into());
        p.spec = Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    requests: Some(BTreeMap::from([("cpu".into(), Quantity(cpu.into()))])),
                    ..ResourceRequirements::default()
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        });
        p
    }

    #[test]
    fn an_unchanged_pod_is_converted_once_and_a_changed_one_again() {
        let memo = PodMemo::default();
        let labels = NamespaceLabels::new();
        let ns = fingerprint(&labels);
        let first = memo.pod(&pod("a", "1", "1"), &labels, ns).unwrap();
        let again = memo.pod(&pod("a", "1", "1"), &labels, ns).unwrap();
        assert!(Arc::ptr_eq(&first, &again), "the same conversion is shared");
        let changed = memo.pod(&pod("a", "2", "2"), &labels, ns).unwrap();
        assert!(!Arc::ptr_eq(&first, &changed));
        assert_eq!(changed.requests.cpu_millis, 2000);
        assert_eq!(first.requests.cpu_millis, 1000);
        assert_eq!(memo.len(), 1);
    }

    #[test]
    fn new_namespace_labels_convert_again() {
        let memo = PodMemo::default();
        let mut labels = NamespaceLabels::new();
        let before = memo
            .pod(&pod("a", "1", "1"), &labels, fingerprint(&labels))
            .unwrap();
        labels.insert("team".into(), BTreeMap::from([("a".into(), "b".into())]));
        let after = memo
            .pod(&pod("a", "1", "1"), &labels, fingerprint(&labels))
            .unwrap();
        assert!(!Arc::ptr_eq(&before, &after));
    }

    #[test]
    fn a_pod_without_uid_is_not_kept_and_gone_pods_are_dropped() {
        let memo = PodMemo::default();
        let labels = NamespaceLabels::new();
        let ns = fingerprint(&labels);
        let mut anonymous = pod("x", "1", "1");
        anonymous.metadata.uid = None;
        memo.pod(&anonymous, &labels, ns).unwrap();
        assert!(memo.is_empty());
        memo.pod(&pod("a", "1", "1"), &labels, ns).unwrap();
        memo.pod(&pod("b", "1", "1"), &labels, ns).unwrap();
        memo.retain(["b"]);
        assert_eq!(memo.len(), 1);
        let b = memo.pod(&pod("b", "1", "1"), &labels, ns).unwrap();
        assert_eq!(b.name, "p-b");
    }

    #[test]
    fn a_pod_that_does_not_convert_is_an_error_and_not_kept() {
        let memo = PodMemo::default();
        let labels = NamespaceLabels::new();
        let err = memo.pod(&pod("a", "1", "lots"), &labels, fingerprint(&labels));
        assert!(err.is_err());
        assert!(memo.is_empty());
    }
}
