//! Volume topology: where a pod's persistent volumes let it run, as node requirements.
//!
//! kube-scheduler's `VolumeBinding` places a pod only where its volumes can be: a bound claim's
//! PersistentVolume says so in `spec.nodeAffinity`, an unbound claim of a `WaitForFirstConsumer`
//! StorageClass in the class's `allowedTopologies`. As in Karpenter, these become requirements on
//! the node the pod needs, as alternatives (the terms of one volume are ORed; several volumes
//! multiply out, keeping only the combinations that can hold together), and they are not the
//! pod's own node affinity, so topology spread keeps counting the pod's domains as before.
//!
//! CSI attach limits: a node's CSINode says how many volumes each driver may attach to it
//! (`spec.drivers[].allocatable.count`); [`VolumeIndex::csi_volumes`] names the driver of each of
//! a pod's claims (the bound volume's `csi.driver`, or the StorageClass's provisioner while
//! unbound), and [`csi_limits`] reads a CSINode, as Karpenter does.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};

use super::{ConvertError, selector_terms};
use crate::scheduling::pod::CsiVolume;
use crate::scheduling::requirements::{Requirement, Requirements};

/// The volume objects a conversion looks up: claims by `namespace/name`, volumes and classes by
/// name.
#[derive(Clone, Debug, Default)]
pub struct VolumeIndex {
    pub claims: BTreeMap<String, core::PersistentVolumeClaim>,
    pub volumes: BTreeMap<String, core::PersistentVolume>,
    pub classes: BTreeMap<String, StorageClass>,
}

/// Why a pod's volumes could not be placed.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// A volume names a claim that does not exist (kube-scheduler waits for it too).
    #[error("pod {pod}: persistent volume claim {claim} not found")]
    ClaimNotFound { pod: String, claim: String },
    /// A claim is bound to a volume that does not exist.
    #[error("pod {pod}: persistent volume {volume} (of claim {claim}) not found")]
    VolumeNotFound {
        pod: String,
        claim: String,
        volume: String,
    },
    /// A claim names a StorageClass that does not exist.
    #[error("pod {pod}: storage class {class} (of claim {claim}) not found")]
    ClassNotFound {
        pod: String,
        claim: String,
        class: String,
    },
    /// A volume's node affinity does not parse.
    #[error(transparent)]
    Convert(#[from] ConvertError),
}

impl VolumeIndex {
    /// Indexes `claims`, `volumes` and `classes`.
    pub fn new<'a>(
        claims: impl IntoIterator<Item = &'a core::PersistentVolumeClaim>,
        volumes: impl IntoIterator<Item = &'a core::PersistentVolume>,
        classes: impl IntoIterator<Item = &'a StorageClass>,
    ) -> Self {
        let name = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            m.name.clone().unwrap_or_default()
        };
        Self {
            claims: claims
                .into_iter()
                .map(|c| {
                    let ns = c.metadata.namespace.as_deref().unwrap_or("default");
                    (format!("{ns}/{}", name(&c.metadata)), c.clone())
                })
                .collect(),
            volumes: volumes
                .into_iter()
                .map(|v| (name(&v.metadata), v.clone()))
                .collect(),
            classes: classes
                .into_iter()
                .map(|c| (name(&c.metadata), c.clone()))
                .collect(),
        }
    }

    /// `pod`'s persistent volumes whose CSI driver is known: a bound claim's from its volume's
    /// `csi.driver`, an unbound one's from its StorageClass's provisioner. Claims that are missing,
    /// or whose volume is not CSI, are left out (no limit applies to them).
    pub fn csi_volumes(&self, pod: &core::Pod) -> Vec<CsiVolume> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
        let mut out = Vec::new();
        for claim in pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .filter_map(|v| claim_name(pod_name, v))
        {
            let key = format!("{namespace}/{claim}");
            let Some(spec) = self.claims.get(&key).and_then(|c| c.spec.as_ref()) else {
                continue;
            };
            let driver = match spec.volume_name.as_deref().filter(|v| !v.is_empty()) {
                Some(volume) => self
                    .volumes
                    .get(volume)
                    .and_then(|pv| pv.spec.as_ref()?.csi.as_ref())
                    .map(|csi| csi.driver.clone()),
                None => spec
                    .storage_class_name
                    .as_deref()
                    .and_then(|class| self.classes.get(class))
                    .map(|sc| sc.provisioner.clone()),
            };
            if let Some(driver) = driver.filter(|d| !d.is_empty()) {
                out.push(CsiVolume { driver, claim: key });
            }
        }
        out
    }

    /// The alternatives (ORed) of node requirements `pod`'s volumes need; empty when its volumes
    /// constrain nothing.
    pub fn requirements(&self, pod: &core::Pod) -> Result<Vec<Requirements>, VolumeError> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
        // Named only for a pod with a claim (most have none, and a pass converts every pod).
        let mut key: Option<String> = None;
        let mut alternatives: Vec<Requirements> = Vec::new();
        for volume in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
            let Some(claim) = claim_name(pod_name, volume) else {
                continue;
            };
            let key = key.get_or_insert_with(|| format!("{namespace}/{pod_name}"));
            let terms = self.claim_terms(key, namespace, &claim)?;
            if terms.is_empty() {
                continue;
            }
            alternatives = multiply(alternatives, terms);
        }
        Ok(alternatives)
    }

    /// The ORed terms of one claim: its volume's node affinity once bound, else its class's
    /// allowed topologies.
    fn claim_terms(
        &self,
        pod: &str,
        namespace: &str,
        claim: &str,
    ) -> Result<Vec<Requirements>, VolumeError> {
        let Some(pvc) = self.claims.get(&format!("{namespace}/{claim}")) else {
            return Err(VolumeError::ClaimNotFound {
                pod: pod.to_owned(),
                claim: claim.to_owned(),
            });
        };
        let spec = pvc.spec.as_ref();
        if let Some(volume) = spec
            .and_then(|s| s.volume_name.as_deref())
            .filter(|v| !v.is_empty())
        {
            let Some(pv) = self.volumes.get(volume) else {
                return Err(VolumeError::VolumeNotFound {
                    pod: pod.to_owned(),
                    claim: claim.to_owned(),
                    volume: volume.to_owned(),
                });
            };
            let object = format!("persistent volume {volume}");
            let terms = pv
                .spec
                .as_ref()
                .and_then(|s| s.node_affinity.as_ref())
                .and_then(|a| a.required.as_ref())
                .map(|r| r.node_selector_terms.as_slice())
                .unwrap_or_default();
            let mut out = Vec::new();
            for term in terms {
                let reqs = selector_terms(&object, term)?;
                if !reqs.is_empty() {
                    out.push(reqs);
                }
            }
            return Ok(out);
        }
        let Some(class) = spec
            .and_then(|s| s.storage_class_name.as_deref())
            .filter(|c| !c.is_empty())
        else {
            return Ok(Vec::new());
        };
        let Some(sc) = self.classes.get(class) else {
            return Err(VolumeError::ClassNotFound {
                pod: pod.to_owned(),
                claim: claim.to_owned(),
                class: class.to_owned(),
            });
        };
        Ok(sc
            .allowed_topologies
            .iter()
            .flatten()
            .map(|term| {
                term.match_label_expressions
                    .iter()
                    .flatten()
                    .fold(Requirements::new(), |reqs, e| {
                        reqs.with(Requirement::in_(e.key.as_str(), e.values.iter().cloned()))
                    })
            })
            .filter(|r| !r.is_empty())
            .collect())
    }
}

/// The claim a pod's volume mounts, if it mounts one: a generic ephemeral volume's claim is
/// named after the pod and the volume.
/// Whether `pod` mounts a persistent volume claim (its own or an ephemeral volume's): only such a
/// pod has volume requirements or CSI volumes.
pub fn has_claims(pod: &core::Pod) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .any(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some())
}

fn claim_name(pod_name: &str, volume: &core::Volume) -> Option<String> {
    match (&volume.persistent_volume_claim, &volume.ephemeral) {
        (Some(source), _) => Some(source.claim_name.clone()),
        (None, Some(_)) => Some(format!("{pod_name}-{}", volume.name)),
        (None, None) => None,
    }
}

/// How many volumes each driver of `csi_node` may attach (drivers that report no count are
/// unlimited and left out).
pub fn csi_limits(csi_node: &CSINode) -> BTreeMap<String, i64> {
    csi_node
        .spec
        .drivers
        .iter()
        .filter_map(|d| {
            let count = d.allocatable.as_ref()?.count?;
            Some((d.name.clone(), i64::from(count)))
        })
        .collect()
}

/// Every combination of one of `alternatives` (none yet: no constraint) with one of `terms`,
/// keeping the combinations that can hold together; when none can, all of them (the pod then
/// fails to schedule with the requirement's own message).
fn multiply(alternatives: Vec<Requirements>, terms: Vec<Requirements>) -> Vec<Requirements> {
    if alternatives.is_empty() {
        return terms;
    }
    let combine = |a: &Requirements, t: &Requirements| {
        let mut merged = a.clone();
        merged.merge(t);
        merged
    };
    let compatible: Vec<Requirements> = alternatives
        .iter()
        .flat_map(|a| {
            terms
                .iter()
                .filter(|t| a.intersects(t).is_ok())
                .map(move |t| combine(a, t))
        })
        .collect();
    if !compatible.is_empty() {
        return compatible;
    }
    alternatives
        .iter()
        .flat_map(|a| terms.iter().map(move |t| combine(a, t)))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::labels::ZONE;

    fn pod(volumes: serde_json::Value) -> core::Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "db-0", "namespace": "apps"},
            "spec": {"containers": [{"name": "c"}], "volumes": volumes},
        }))
        .unwrap()
    }

    fn pvc(name: &str, spec: serde_json::Value) -> core::PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "apps"},
            "spec": spec,
        }))
        .unwrap()
    }

    fn pv(name: &str, zones: &[&[&str]]) -> core::PersistentVolume {
        let terms: Vec<_> = zones
            .iter()
            .map(|z| json!({"matchExpressions": [{"key": ZONE, "operator": "In", "values": z}]}))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": terms}}},
        }))
        .unwrap()
    }

    fn class(name: &str, zones: &[&str]) -> StorageClass {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "provisioner": "example.com/csi",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [{"matchLabelExpressions": [{"key": ZONE, "values": zones}]}],
        }))
        .unwrap()
    }

    fn zones(reqs: &Requirements) -> Vec<String> {
        reqs.set_of(ZONE)
            .map(|s| s.values().to_vec())
            .unwrap_or_default()
    }

    #[test]
    fn a_bound_claim_takes_its_volumes_node_affinity() {
        let index = VolumeIndex::new(
            &[pvc("data", json!({"volumeName": "pv-b"}))],
            &[pv("pv-b", &[&["zone-b"]])],
            &[],
        );
        let got = index
            .requirements(&pod(
                json!([{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]),
            ))
            .unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(zones(&got[0]), vec!["zone-b"]);
    }

    #[test]
    fn an_unbound_claim_takes_its_classes_allowed_topologies_and_ephemeral_claims_are_named_after_the_pod()
     {
        let index = VolumeIndex::new(
            &[pvc("db-0-scratch", json!({"storageClassName": "zonal"}))],
            &[],
            &[class("zonal", &["zone-a", "zone-c"])],
        );
        let got = index
            .requirements(&pod(json!([{"name": "scratch", "ephemeral": {}}])))
            .unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(zones(&got[0]), vec!["zone-a", "zone-c"]);
    }

    #[test]
    fn volumes_multiply_out_and_keep_what_holds_together() {
        // One volume in zone a or b (two terms), another only in b: b is what remains.
        let index = VolumeIndex::new(
            &[
                pvc("one", json!({"volumeName": "pv-1"})),
                pvc("two", json!({"volumeName": "pv-2"})),
            ],
            &[
                pv("pv-1", &[&["zone-a"], &["zone-b"]]),
                pv("pv-2", &[&["zone-b"]]),
            ],
            &[],
        );
        let got = index
            .requirements(&pod(json!([
                {"name": "a", "persistentVolumeClaim": {"claimName": "one"}},
                {"name": "b", "persistentVolumeClaim": {"claimName": "two"}},
                {"name": "tmp", "emptyDir": {}},
            ])))
            .unwrap();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(zones(&got[0]), vec!["zone-b"]);
    }

    #[test]
    fn csi_volumes_name_their_driver_from_the_volume_or_the_class() {
        let mut csi_pv = pv("pv-csi", &[]);
        csi_pv.spec.as_mut().unwrap().csi = Some(
            serde_json::from_value(json!({"driver": "ebs.csi.example.com", "volumeHandle": "h"}))
                .unwrap(),
        );
        let index = VolumeIndex::new(
            &[
                pvc("bound", json!({"volumeName": "pv-csi"})),
                pvc("host-path", json!({"volumeName": "pv-plain"})),
                pvc("db-0-scratch", json!({"storageClassName": "zonal"})),
            ],
            &[csi_pv, pv("pv-plain", &[])],
            &[class("zonal", &["zone-a"])],
        );
        let got = index.csi_volumes(&pod(json!([
            {"name": "a", "persistentVolumeClaim": {"claimName": "bound"}},
            {"name": "b", "persistentVolumeClaim": {"claimName": "host-path"}},
            {"name": "scratch", "ephemeral": {}},
            {"name": "c", "persistentVolumeClaim": {"claimName": "absent"}},
            {"name": "tmp", "emptyDir": {}},
        ])));
        assert_eq!(
            got,
            vec![
                CsiVolume {
                    driver: "ebs.csi.example.com".to_owned(),
                    claim: "apps/bound".to_owned()
                },
                CsiVolume {
                    driver: "example.com/csi".to_owned(),
                    claim: "apps/db-0-scratch".to_owned()
                },
            ]
        );
    }

    #[test]
    fn csi_limits_are_the_drivers_that_report_a_count() {
        let node: CSINode = serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "spec": {"drivers": [
                {"name": "ebs.csi.example.com", "nodeID": "i-1", "allocatable": {"count": 25}},
                {"name": "efs.csi.example.com", "nodeID": "i-1"},
            ]},
        }))
        .unwrap();
        assert_eq!(
            csi_limits(&node),
            BTreeMap::from([("ebs.csi.example.com".to_owned(), 25)])
        );
    }

    #[test]
    fn missing_objects_are_clear_errors_and_unconstrained_volumes_add_nothing() {
        let index = VolumeIndex::new(
            &[
                pvc("bound", json!({"volumeName": "gone"})),
                pvc("classless", json!({})),
                pvc("no-class", json!({"storageClassName": "absent"})),
            ],
            &[],
            &[],
        );
        let claim =
            |name: &str| pod(json!([{"name": "v", "persistentVolumeClaim": {"claimName": name}}]));
        let err = index.requirements(&claim("nope")).unwrap_err().to_string();
        assert_eq!(err, "pod apps/db-0: persistent volume claim nope not found");
        let err = index.requirements(&claim("bound")).unwrap_err().to_string();
        assert!(err.contains("persistent volume gone"), "{err}");
        let err = index
            .requirements(&claim("no-class"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("storage class absent"), "{err}");
        assert!(index.requirements(&claim("classless")).unwrap().is_empty());
    }
}
