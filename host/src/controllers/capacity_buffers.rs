//! CapacityBuffers (`--feature-gates CapacityBuffer=true`, off by default as in Karpenter v1.14):
//! resolves each buffer's pod shape (its PodTemplate, or the pod template of the Deployment,
//! ReplicaSet or StatefulSet it names) and size ([`crate::scheduling::buffer::desired_replicas`]),
//! writes `ReadyForProvisioning`, `replicas`, `podTemplateRef` and `podTemplateGeneration` on it,
//! and keeps the virtual pods of the ready ones in [`Buffers`], where the provisioner takes them
//! as pending pods. After each provisioning pass the provisioner hands back where they went
//! ([`record_pass`]): the `Provisioning` condition, and the nodes holding buffer room, which
//! consolidation counts as those nodes' pods.
//!
//! It evaluates at start, when a CapacityBuffer or a PodTemplate changes, and every [`RECHECK`]
//! (a workload's replicas change without an event here). With `--selector`, only the buffers
//! carrying its labels are this host's (as NodePools). A bad reference is a
//! `ReadyForProvisioning=False` condition and a Warning Event; the buffer keeps no room.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, PodTemplate, PodTemplateSpec};
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::api::capacitybuffer::{
    POD_TEMPLATE_NOT_FOUND, PROVISIONING, READY_FOR_PROVISIONING, RESOLUTION_FAILED, RESOLVED,
    SCALABLE_KINDS, SCALABLE_REF_NOT_FOUND,
};
use crate::api::shared::{find_condition, set_condition};
use crate::api::{CapacityBuffer, CapacityBufferStatus, ConditionStatus, NodeClaim};
use crate::controllers::{Context, ControllerError, evaluations, now};
use crate::scheduling::buffer::{self, BufferKey, Placed};
use crate::scheduling::convert::pod_requests;

/// How often every buffer is evaluated again without an event.
pub const RECHECK: Duration = Duration::from_secs(5);
/// How long triggers are gathered before an evaluation.
const SETTLE: Duration = Duration::from_millis(200);

/// The buffers' virtual pods and where the last provisioning pass put them, shared by this
/// controller, the provisioner and consolidation.
#[derive(Debug, Default)]
pub struct Buffers {
    /// The virtual pods of every ready buffer.
    pods: Mutex<BTreeMap<BufferKey, Vec<Pod>>>,
    /// Where the last provisioning pass placed virtual pods.
    room: Mutex<Room>,
    /// Told when the virtual pods change (the provisioner runs a batch).
    changed: tokio::sync::Notify,
    /// Status writes, one at a time (this controller and the provisioner both write).
    writing: tokio::sync::Mutex<()>,
}

impl Buffers {
    /// Every virtual pod of every ready buffer.
    pub fn pods(&self) -> Vec<Pod> {
        let pods = self.pods.lock().unwrap_or_else(PoisonError::into_inner);
        pods.values().flatten().cloned().collect()
    }

    /// Whether any buffer holds room.
    pub fn active(&self) -> bool {
        !self
            .pods
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }

    /// Replaces the virtual pods; tells the provisioner when they changed.
    fn set(&self, next: BTreeMap<BufferKey, Vec<Pod>>) {
        let mut pods = self.pods.lock().unwrap_or_else(PoisonError::into_inner);
        if *pods != next {
            *pods = next;
            self.changed.notify_one();
        }
    }

    /// Waits until the virtual pods change.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    /// Asks the provisioner for another pass (its claims for buffer pods were created: the next
    /// pass finds the pods fit on them).
    pub fn again(&self) {
        self.changed.notify_one();
    }

    /// The virtual pods the last provisioning pass placed on nodes, or on claims that have a node
    /// now (`claims`), bound to those nodes (`spec.nodeName`), for consolidation: the room they
    /// hold is not free.
    pub fn room(&self, claims: &[Arc<NodeClaim>]) -> Vec<Pod> {
        let room = self.room.lock().unwrap_or_else(PoisonError::into_inner);
        let node_of: BTreeMap<String, String> = claims
            .iter()
            .filter_map(|c| Some((c.name_any(), c.status.as_ref()?.node_name.clone()?)))
            .collect();
        let on_claims = room
            .claims
            .iter()
            .filter_map(|(claim, pods)| Some((node_of.get(claim)?, pods)));
        room.nodes
            .iter()
            .chain(on_claims)
            .flat_map(|(node, pods)| {
                pods.iter().map(move |pod| {
                    let mut pod = pod.clone();
                    if let Some(spec) = pod.spec.as_mut() {
                        spec.node_name = Some(node.clone());
                    }
                    pod
                })
            })
            .collect()
    }
}

/// Where a provisioning pass placed virtual pods: on nodes, and on NodeClaims not up yet.
#[derive(Debug, Default)]
pub struct Room {
    pub nodes: BTreeMap<String, Vec<Pod>>,
    pub claims: BTreeMap<String, Vec<Pod>>,
}

/// Runs while the gate is on; does nothing (forever) when it is off.
pub async fn run(ctx: Arc<Context>) {
    if !ctx.settings.capacity_buffer {
        return std::future::pending().await;
    }
    tracing::info!("capacity buffers on (feature gate CapacityBuffer)");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let buffers = evaluations::trigger_on(
        Api::<CapacityBuffer>::all(ctx.client.clone()),
        ctx.watcher_config(),
        tx.clone(),
        "CapacityBuffer",
    );
    let templates = evaluations::trigger_on(
        Api::<PodTemplate>::all(ctx.client.clone()),
        watcher::Config::default(),
        tx.clone(),
        "PodTemplate",
    );
    evaluations::run(&ctx, "capacitybuffers", (RECHECK, SETTLE), (tx, rx), || {
        evaluate(&ctx)
    })
    .await;
    buffers.abort();
    templates.abort();
}

/// What resolving a buffer found.
#[derive(Debug)]
enum Resolution {
    /// The pod shape, and how many; the PodTemplate's name and generation for a
    /// `podTemplateRef`.
    Resolved {
        template: Box<PodTemplateSpec>,
        replicas: i32,
        pod_template: Option<(String, i64)>,
    },
    /// Not resolved: reason and message of `ReadyForProvisioning=False`.
    Failed(&'static str, String),
}

fn key_of(buffer: &CapacityBuffer) -> BufferKey {
    (buffer.namespace().unwrap_or_default(), buffer.name_any())
}

/// One evaluation: every buffer resolved, its status written, the virtual pods of the ready
/// ones handed to the provisioner.
async fn evaluate(ctx: &Context) -> Result<(), ControllerError> {
    let api: Api<CapacityBuffer> = Api::all(ctx.client.clone());
    let mut params = ListParams::default();
    if let Some(selector) = &ctx.settings.selector {
        params = params.labels(selector);
    }
    let objects = match api.list(&params).await {
        Ok(list) => list.items,
        Err(kube::Error::Api(status)) if status.code == 404 => {
            tracing::warn!(
                "the CapacityBuffer CRD (capacitybuffers.autoscaling.x-k8s.io) is not installed: no buffers apply"
            );
            Vec::new()
        }
        Err(err) => return Err(err.into()),
    };
    let mut pods = BTreeMap::new();
    let mut failure = None;
    for object in &objects {
        if object.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let resolution = match resolve(ctx, object).await {
            Ok(r) => r,
            Err(err) => {
                let message = err.to_string();
                failure = Some(err);
                Resolution::Failed(RESOLUTION_FAILED, message)
            }
        };
        let written = write_resolution(ctx, object, &resolution).await;
        if let Err(err) = written {
            failure = Some(err);
        }
        if let Resolution::Resolved {
            template, replicas, ..
        } = &resolution
            && *replicas > 0
        {
            let (namespace, name) = key_of(object);
            let uid = object.uid().unwrap_or_default();
            pods.insert(
                key_of(object),
                buffer::virtual_pods(&namespace, &name, &uid, *replicas, template),
            );
        }
    }
    ctx.buffers.set(pods);
    failure.map_or(Ok(()), Err)
}

/// The buffer's pod shape and size. API errors other than not-found are errors (retried).
async fn resolve(ctx: &Context, object: &CapacityBuffer) -> Result<Resolution, ControllerError> {
    let namespace = object.namespace().unwrap_or_default();
    let spec = &object.spec;
    let (template, scalable_replicas, pod_template) = if let Some(r) = &spec.pod_template_ref {
        let api: Api<PodTemplate> = Api::namespaced(ctx.client.clone(), &namespace);
        match api.get_opt(&r.name).await? {
            Some(pt) => (
                pt.template.unwrap_or_default(),
                None,
                Some((r.name.clone(), pt.metadata.generation.unwrap_or(0))),
            ),
            None => {
                return Ok(Resolution::Failed(
                    POD_TEMPLATE_NOT_FOUND,
                    format!("podtemplates {:?} not found", r.name),
                ));
            }
        }
    } else if let Some(r) = &spec.scalable_ref {
        if !r.api_group.is_empty() && r.api_group != "apps" {
            return Ok(Resolution::Failed(
                RESOLUTION_FAILED,
                format!("unsupported scalableRef API group {:?}", r.api_group),
            ));
        }
        let found = match r.kind.as_str() {
            "Deployment" => Api::<Deployment>::namespaced(ctx.client.clone(), &namespace)
                .get_opt(&r.name)
                .await?
                .and_then(|o| o.spec)
                .map(|s| (s.template, s.replicas)),
            "ReplicaSet" => Api::<ReplicaSet>::namespaced(ctx.client.clone(), &namespace)
                .get_opt(&r.name)
                .await?
                .and_then(|o| o.spec)
                .map(|s| (s.template.unwrap_or_default(), s.replicas)),
            "StatefulSet" => Api::<StatefulSet>::namespaced(ctx.client.clone(), &namespace)
                .get_opt(&r.name)
                .await?
                .and_then(|o| o.spec)
                .map(|s| (s.template, s.replicas)),
            other => {
                return Ok(Resolution::Failed(
                    RESOLUTION_FAILED,
                    format!(
                        "unsupported kind {other:?} (supported: {})",
                        SCALABLE_KINDS.join(", ")
                    ),
                ));
            }
        };
        match found {
            Some((template, replicas)) => (template, Some(replicas.unwrap_or(1)), None),
            None => {
                return Ok(Resolution::Failed(
                    SCALABLE_REF_NOT_FOUND,
                    format!("{} {:?} not found", r.kind.to_lowercase(), r.name),
                ));
            }
        }
    } else {
        return Ok(Resolution::Failed(
            RESOLUTION_FAILED,
            "Neither podTemplateRef nor scalableRef is set".to_owned(),
        ));
    };
    let probe = Pod {
        spec: template.spec.clone(),
        ..Pod::default()
    };
    let requests = match pod_requests(&probe) {
        Ok(r) => r,
        Err(err) => return Ok(Resolution::Failed(RESOLUTION_FAILED, err.to_string())),
    };
    let replicas = match buffer::desired_replicas(
        spec.replicas,
        spec.percentage,
        spec.limits.as_ref(),
        &requests,
        scalable_replicas,
    ) {
        Ok(n) => n,
        Err(err) => {
            return Ok(Resolution::Failed(
                RESOLUTION_FAILED,
                format!("limits: {err}"),
            ));
        }
    };
    Ok(Resolution::Resolved {
        template: Box::new(template),
        replicas,
        pod_template,
    })
}

/// Writes what resolving found: `ReadyForProvisioning`, `replicas`, the PodTemplate and its
/// generation, the strategy, and `Provisioning=False` for a buffer that keeps no room; a
/// Warning Event when `ReadyForProvisioning` turns false or its message changes.
async fn write_resolution(
    ctx: &Context,
    object: &CapacityBuffer,
    resolution: &Resolution,
) -> Result<(), ControllerError> {
    let strategy = object.spec.provisioning_strategy.clone();
    let outcome = update_status(ctx, object, |current, status| {
        let generation = current.metadata.generation;
        let mut changed = status.provisioning_strategy != strategy;
        status.provisioning_strategy = strategy.clone();
        let (ready, reason, message) = match resolution {
            Resolution::Resolved {
                replicas,
                pod_template,
                ..
            } => {
                let template_ref = pod_template.as_ref().map(|(name, _)| {
                    crate::api::capacitybuffer::LocalObjectRef { name: name.clone() }
                });
                let generation = pod_template.as_ref().map(|(_, g)| *g);
                changed |= status.replicas != Some(*replicas)
                    || status.pod_template_ref != template_ref
                    || status.pod_template_generation != generation;
                status.replicas = Some(*replicas);
                status.pod_template_ref = template_ref;
                status.pod_template_generation = generation;
                (
                    ConditionStatus::True,
                    RESOLVED,
                    "Pod template resolved successfully".to_owned(),
                )
            }
            Resolution::Failed(reason, message) => {
                (ConditionStatus::False, *reason, message.clone())
            }
        };
        changed |= set_condition(
            &mut status.conditions,
            READY_FOR_PROVISIONING,
            ready,
            Some(reason),
            Some(&message),
            generation,
            now(),
        );
        let probe = CapacityBuffer {
            status: Some(status.clone()),
            ..current.clone()
        };
        // The provisioner decides `Provisioning` for a buffer with room; one without is settled
        // here.
        if !buffer::ready(&probe)
            && let Some((s, reason, message)) = buffer::provisioning_condition(&probe, None)
        {
            changed |= set_condition(
                &mut status.conditions,
                PROVISIONING,
                s,
                Some(reason),
                Some(&message),
                generation,
                now(),
            );
        }
        changed
    })
    .await?;
    if let (Some(before), Resolution::Failed(reason, message)) = (outcome, resolution) {
        let was = before
            .as_ref()
            .and_then(|s| find_condition(&s.conditions, READY_FOR_PROVISIONING))
            .map(|c| (c.status, c.message.clone()));
        if was != Some((ConditionStatus::False, Some(message.clone()))) {
            ctx.events.warning(object, reason, message.clone()).await;
        }
    }
    Ok(())
}

/// Reads the buffer afresh, lets `change` edit its status (returning whether it changed) and
/// writes it. One write at a time. Returns the status before, when it wrote.
async fn update_status(
    ctx: &Context,
    object: &CapacityBuffer,
    change: impl FnOnce(&CapacityBuffer, &mut CapacityBufferStatus) -> bool,
) -> Result<Option<Option<CapacityBufferStatus>>, ControllerError> {
    let _one = ctx.buffers.writing.lock().await;
    let namespace = object.namespace().unwrap_or_default();
    let api: Api<CapacityBuffer> = Api::namespaced(ctx.client.clone(), &namespace);
    let Some(fresh) = api.get_opt(&object.name_any()).await? else {
        return Ok(None);
    };
    let mut next = fresh.status.clone().unwrap_or_default();
    if !change(&fresh, &mut next) {
        return Ok(None);
    }
    // Nulls remove what no longer holds (a merge patch keeps what it does not name).
    let patch = json!({
        "metadata": {"resourceVersion": fresh.resource_version()},
        "status": {
            "podTemplateRef": next.pod_template_ref,
            "replicas": next.replicas,
            "podTemplateGeneration": next.pod_template_generation,
            "conditions": next.conditions,
            "provisioningStrategy": next.provisioning_strategy,
        },
    });
    match api
        .patch_status(
            &fresh.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        // Gone or changed meanwhile: the next evaluation or pass writes again.
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(None),
        Err(err) => Err(err.into()),
        Ok(_) => Ok(Some(fresh.status)),
    }
}

/// What a provisioning pass did with the virtual pods: per buffer where they went, per node
/// the ones placed there. Keeps the room for consolidation and writes each ready buffer's
/// `Provisioning` condition when the pass settles it.
pub async fn record_pass(ctx: &Context, placed: BTreeMap<BufferKey, Placed>, room: Room) {
    *ctx.buffers
        .room
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = room;
    for (namespace, name) in placed.keys() {
        let mut object = CapacityBuffer::new(name, Default::default());
        object.metadata.namespace = Some(namespace.clone());
        let key = (namespace.clone(), name.clone());
        let written = update_status(ctx, &object, |current, status| {
            let probe = CapacityBuffer {
                status: Some(status.clone()),
                ..current.clone()
            };
            let Some((s, reason, message)) =
                buffer::provisioning_condition(&probe, placed.get(&key))
            else {
                return false;
            };
            set_condition(
                &mut status.conditions,
                PROVISIONING,
                s,
                Some(reason),
                Some(&message),
                current.metadata.generation,
                now(),
            )
        })
        .await;
        if let Err(err) = written {
            tracing::warn!(buffer = %format!("{namespace}/{name}"), error = %err, "writing the Provisioning condition failed");
        }
    }
}
