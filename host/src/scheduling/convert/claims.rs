//! Dynamic Resource Allocation objects as the simulation takes them: a pod's ResourceClaims
//! ([`ClaimIndex::pod_devices`]) and an existing node's devices ([`ClaimIndex::node_devices`]).
//!
//! A pod names its claims in `spec.resourceClaims`: a ResourceClaim by name, or a
//! ResourceClaimTemplate from which kube-controller-manager makes the pod its own claim (its name
//! in the pod's `status.resourceClaimStatuses`; until it exists, the template's spec stands in).
//! A claim already allocated pins a pending pod to the node its allocation selects; a pod bound
//! to a node that a disruption would move takes its claims' requests with it (its devices free
//! up with the pod), so consolidation and drift only move it where devices satisfy them again.
//!
//! A node's devices are the ResourceSlices its drivers published for it (`spec.nodeName`), less
//! the devices allocated claims hold.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use capstan_dra::{ClaimKey, ClaimRequests, DeviceClasses, DeviceId, Inventory, SelectorCache};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};

use crate::scheduling::devices::{NodeDevices, PodDevices};

/// Why a pod's claims could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// A claim the pod names does not exist (kube-scheduler waits for it too).
    #[error("pod {pod}: ResourceClaim {claim} not found")]
    ClaimNotFound { pod: String, claim: String },
    /// A template the pod names does not exist.
    #[error("pod {pod}: ResourceClaimTemplate {template} not found")]
    TemplateNotFound { pod: String, template: String },
    /// An entry of `spec.resourceClaims` names neither.
    #[error("pod {pod}: resourceClaims entry {entry} names no claim and no template")]
    Empty { pod: String, entry: String },
    /// A claim cannot be satisfied by any device set (an unknown class, a selector that does
    /// not compile, a malformed request).
    #[error("pod {pod}: {reason}")]
    Claim {
        pod: String,
        /// Boxed: the reason is large and the error is returned on every path.
        reason: Box<capstan_dra::Unsatisfiable>,
    },
}

/// The claims, templates, classes and slices a conversion looks up.
#[derive(Debug, Default)]
pub struct ClaimIndex {
    classes: DeviceClasses,
    claims: HashMap<(String, String), Arc<ResourceClaim>>,
    templates: HashMap<(String, String), Arc<ResourceClaimTemplate>>,
    slices: HashMap<String, Vec<ResourceSlice>>,
    /// The devices allocated claims hold, by driver and pool.
    allocated: HashMap<(String, String), Vec<DeviceId>>,
    /// Each selector compiled once per snapshot.
    selectors: Mutex<SelectorCache>,
}

/// `namespace/name` of an object.
fn key(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// The node an allocation is pinned to: its node selector's `metadata.name` (or hostname) of
/// the first term, as kube-scheduler writes it for node-local devices.
fn allocated_node(claim: &ResourceClaim) -> Option<String> {
    let selector = claim
        .status
        .as_ref()?
        .allocation
        .as_ref()?
        .node_selector
        .as_ref()?;
    let term = selector.node_selector_terms.first()?;
    let by_field = term
        .match_fields
        .iter()
        .flatten()
        .find(|r| r.key == "metadata.name");
    let by_label = term
        .match_expressions
        .iter()
        .flatten()
        .find(|r| r.key == crate::api::labels::HOSTNAME);
    let requirement = by_field.or(by_label)?;
    (requirement.operator == "In")
        .then(|| requirement.values.as_ref()?.first().cloned())
        .flatten()
}

fn is_allocated(claim: &ResourceClaim) -> bool {
    claim
        .status
        .as_ref()
        .is_some_and(|s| s.allocation.is_some())
}

impl ClaimIndex {
    /// Indexes the objects.
    pub fn new<'a>(
        claims: impl IntoIterator<Item = &'a Arc<ResourceClaim>>,
        templates: impl IntoIterator<Item = &'a Arc<ResourceClaimTemplate>>,
        classes: impl IntoIterator<Item = &'a Arc<DeviceClass>>,
        slices: impl IntoIterator<Item = &'a Arc<ResourceSlice>>,
    ) -> Self {
        let mut index = ClaimIndex {
            classes: DeviceClasses::from_objects(classes.into_iter().map(AsRef::as_ref)),
            ..Self::default()
        };
        for claim in claims {
            for device in capstan_dra::allocated_devices(claim) {
                index
                    .allocated
                    .entry((device.driver.clone(), device.pool.clone()))
                    .or_default()
                    .push(device);
            }
            index.claims.insert(key(&claim.metadata), claim.clone());
        }
        for template in templates {
            index
                .templates
                .insert(key(&template.metadata), template.clone());
        }
        for slice in slices {
            if let Some(node) = &slice.spec.node_name {
                index
                    .slices
                    .entry(node.clone())
                    .or_default()
                    .push(ResourceSlice::clone(slice));
            }
        }
        index
    }

    fn requests(
        &self,
        pod: &str,
        build: impl FnOnce(
            &DeviceClasses,
            &mut SelectorCache,
        ) -> Result<ClaimRequests, capstan_dra::Unsatisfiable>,
    ) -> Result<Arc<ClaimRequests>, ClaimError> {
        let mut selectors = self
            .selectors
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        build(&self.classes, &mut selectors)
            .map(Arc::new)
            .map_err(|reason| ClaimError::Claim {
                pod: pod.to_owned(),
                reason: Box::new(reason),
            })
    }

    /// What `pod`'s ResourceClaims ask of a node. `moving`: the pod is bound and a disruption
    /// would move it, so its claims' requests go with it rather than pinning it.
    pub fn pod_devices(&self, pod: &core::Pod, moving: bool) -> Result<PodDevices, ClaimError> {
        let mut out = PodDevices::default();
        let Some(entries) = pod.spec.as_ref().and_then(|s| s.resource_claims.as_ref()) else {
            return Ok(out);
        };
        let (namespace, name) = key(&pod.metadata);
        let who = format!("{namespace}/{name}");
        let generated: BTreeMap<&str, &str> = pod
            .status
            .iter()
            .flat_map(|s| s.resource_claim_statuses.iter().flatten())
            .filter_map(|s| Some((s.name.as_str(), s.resource_claim_name.as_deref()?)))
            .collect();
        for entry in entries {
            let claim_name = entry
                .resource_claim_name
                .as_deref()
                .or_else(|| generated.get(entry.name.as_str()).copied());
            let claim = match claim_name {
                Some(claim_name) => {
                    let found = self.claims.get(&(namespace.clone(), claim_name.to_owned()));
                    match (found, &entry.resource_claim_name) {
                        (Some(claim), _) => Some(claim),
                        // Named by the pod: kube-scheduler waits for it too.
                        (None, Some(_)) => {
                            return Err(ClaimError::ClaimNotFound {
                                pod: who,
                                claim: format!("{namespace}/{claim_name}"),
                            });
                        }
                        // Generated but not in the cache yet: the template stands in.
                        (None, None) => None,
                    }
                }
                None => None,
            };
            match claim {
                Some(claim) if is_allocated(claim) && !moving => {
                    if let Some(node) = allocated_node(claim) {
                        out.pinned_to = Some(node);
                    }
                }
                Some(claim) => {
                    let claim_key =
                        ClaimKey::new(namespace.clone(), claim_name.unwrap_or_default());
                    out.claims.push(self.requests(&who, |classes, cache| {
                        ClaimRequests::from_spec(claim_key, &claim.spec, classes, cache)
                    })?);
                }
                None => {
                    let Some(template_name) = &entry.resource_claim_template_name else {
                        return Err(ClaimError::Empty {
                            pod: who,
                            entry: entry.name.clone(),
                        });
                    };
                    let template = self
                        .templates
                        .get(&(namespace.clone(), template_name.clone()))
                        .ok_or_else(|| ClaimError::TemplateNotFound {
                            pod: who.clone(),
                            template: format!("{namespace}/{template_name}"),
                        })?;
                    // The pod's own claim-to-be: a key no other pod shares.
                    let claim_key =
                        ClaimKey::new(namespace.clone(), format!("{name}/{}", entry.name));
                    out.claims.push(self.requests(&who, |classes, cache| {
                        ClaimRequests::from_template(claim_key, template, classes, cache)
                    })?);
                }
            }
        }
        Ok(out)
    }

    /// The devices of the node named `node` from the slices its drivers published, less what
    /// allocated claims hold; none when it has no slices (yet).
    pub fn node_devices(&self, node: &str) -> Option<NodeDevices> {
        let slices = self.slices.get(node)?;
        let mut inventory = match Inventory::from_slices(slices, &[]) {
            Ok(inventory) => inventory,
            Err(err) => {
                tracing::warn!(node, error = %err, "the node's ResourceSlices left out");
                return None;
            }
        };
        let pools: std::collections::BTreeSet<(&str, &str)> = slices
            .iter()
            .map(|s| (s.spec.driver.as_str(), s.spec.pool.name.as_str()))
            .collect();
        for (driver, pool) in pools {
            for device in self
                .allocated
                .get(&(driver.to_owned(), pool.to_owned()))
                .into_iter()
                .flatten()
            {
                inventory.mark_allocated(device);
            }
        }
        Some(NodeDevices(inventory))
    }

    /// Whether any object is indexed (a cluster without DRA has nothing to convert).
    pub fn is_empty(&self) -> bool {
        self.claims.is_empty() && self.templates.is_empty() && self.slices.is_empty()
    }
}

#[cfg(test)]
mod tests;
