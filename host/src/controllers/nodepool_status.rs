//! NodePool status: `resources` and `nodes` summed over the pool's NodeClaims, and the conditions
//! `ValidationSucceeded`, `NodeClassReady` and `Ready` (both of them); `NodeRegistrationHealthy` is
//! set by the NodeClaim liveness and registration stages ([`set_registration_health`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};

use crate::api::labels::{HOSTNAME, NODEPOOL, RESTRICTED_LABEL_DOMAINS, WELL_KNOWN_REQUIREMENTS};
use crate::api::shared::{find_condition, set_condition};
use crate::api::{ConditionStatus, NodePool, NodePoolStatus, NodeSelectorOperator, Quantity};
use crate::controllers::resolve;
use crate::controllers::{Context, ControllerError, now};
use crate::provider::convert;
use crate::scheduling::quantity::{format_bytes, format_millis, parse_millis, parse_units};

/// Condition types.
pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
/// The pool's NodeClass is Ready.
pub const NODE_CLASS_READY: &str = "NodeClassReady";
/// Recent launches registered.
pub const NODE_REGISTRATION_HEALTHY: &str = "NodeRegistrationHealthy";
/// Everything above.
pub const READY: &str = crate::api::nodepool::conditions::READY;

/// The shortest time between two reconciles of one pool (see the end of [`reconcile`]).
const SETTLE: Duration = Duration::from_secs(1);

/// Runs the controller until it stops.
pub async fn run(ctx: Arc<Context>) {
    // Pools come from the host's lenient cache: one pool that does not parse must not stop the
    // status of the others (a typed watch would fail as a whole). Every pool is looked at once
    // at the start, then on its own changes and its claims' and class's.
    let pools = ctx.state.pools.store();
    let changes = ctx
        .state
        .pools
        .subscribe()
        .map(|pool| Ok(pool.as_ref().clone()));
    let controller = Controller::for_stream(changes, pools.clone())
        .trigger_backoff(crate::state::watch_backoff())
        .reconcile_all_on(futures::stream::select(
            futures::stream::once(futures::future::ready(())),
            // Node classes of served kinds changed (their objects or who serves them).
            futures::stream::unfold(ctx.state.served.subscribe(), |mut rx| async move {
                rx.changed().await.ok()?;
                Some(((), rx))
            }),
        ));
    // Triggers from the host's caches of claims and classes, not watches of their own: one copy
    // of each object in memory, one watch of each kind on the API server.
    let claim_pools =
        ctx.state.claims.subscribe().filter_map(|claim| async move {
            claim.labels().get(NODEPOOL).map(|p| ObjectRef::new(p))
        });
    let class_pools = ctx.state.classes.subscribe().flat_map(move |class| {
        let name = class.name_any();
        futures::stream::iter(
            pools
                .state()
                .iter()
                .filter(|p| p.spec.template.spec.node_class_ref.name == name)
                .map(|p| ObjectRef::from_obj(p.as_ref()))
                .collect::<Vec<_>>(),
        )
    });
    controller
        .reconcile_on(futures::stream::select(claim_pools, class_pools))
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!(error = %err, "nodepool reconcile failed");
            }
        })
        .await;
}

/// Reports NodePools that do not parse (the lenient cache leaves them out of everything else):
/// `ValidationSucceeded=False` and `Ready=False` with the parse error, and a `FailedParsing`
/// Event, once per distinct error.
pub async fn report_unparseable(ctx: Arc<Context>) {
    let mut reported: BTreeMap<String, String> = BTreeMap::new();
    let mut tick = tokio::time::interval(Duration::from_secs(2));
    loop {
        tick.tick().await;
        let rejected = ctx.state.pools.rejected();
        reported.retain(|name, _| rejected.contains_key(name));
        for (name, r) in rejected {
            if reported.get(&name) == Some(&r.error) {
                continue;
            }
            let message = format!("NodePool {name} cannot be read: {}", r.error);
            tracing::warn!(nodepool = %name, error = %r.error, "nodepool does not parse");
            let resource = kube::api::ApiResource::erase::<NodePool>(&());
            let api: Api<kube::api::DynamicObject> = Api::all_with(ctx.client.clone(), &resource);
            let condition = |type_: &str| {
                serde_json::json!({
                    "type": type_, "status": "False", "reason": "Unparseable",
                    "message": crate::capability::host::truncate(&message, 32_000),
                    "lastTransitionTime": now(),
                    "observedGeneration": r.object.metadata.generation,
                })
            };
            let patch = serde_json::json!({"status": {"conditions": [
                condition(VALIDATION_SUCCEEDED), condition(READY),
            ]}});
            if let Err(err) = api
                .patch_status(
                    &name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&patch),
                )
                .await
            {
                tracing::debug!(nodepool = %name, error = %err, "cannot report an unparseable nodepool");
                continue;
            }
            let reference = k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some("karpenter.sh/v1".to_owned()),
                kind: Some("NodePool".to_owned()),
                name: Some(name.clone()),
                uid: r.object.metadata.uid.clone(),
                resource_version: r.object.metadata.resource_version.clone(),
                ..Default::default()
            };
            ctx.events
                .warning_about(&reference, "FailedParsing", message)
                .await;
            reported.insert(name, r.error);
        }
    }
}

fn error_policy(pool: Arc<NodePool>, err: &ControllerError, ctx: Arc<Context>) -> Action {
    let name = pool.name_any();
    Action::requeue(super::retry_after("NodePool", &name, err, || {
        ctx.backoff(&format!("nodepool/{name}"))
    }))
}

/// What is wrong with a pool. Capstan's CRDs refuse most of it already; the checks stay for pools
/// stored under other CRDs (older ones, or Karpenter's), and the restricted template label domains
/// (`kubernetes.io`, `k8s.io`) are Capstan's own.
pub fn validate(pool: &NodePool) -> Result<(), String> {
    let spec = &pool.spec.template.spec;
    for r in &spec.requirements {
        if r.key == NODEPOOL || r.key == HOSTNAME {
            return Err(format!("requirement key {} is restricted", r.key));
        }
        if matches!(r.operator, NodeSelectorOperator::In) && r.values.is_empty() {
            return Err(format!(
                "requirement {}: In needs at least one value",
                r.key
            ));
        }
        if let (Some(min), NodeSelectorOperator::In) = (r.min_values, r.operator)
            && usize::try_from(min).is_ok_and(|m| m > r.values.len())
        {
            return Err(format!(
                "requirement {}: minValues {min} exceeds its {} values",
                r.key,
                r.values.len()
            ));
        }
    }
    convert::node_pool_to_wit(pool).map_err(|e| e.to_string())?;
    if let Some(meta) = &pool.spec.template.metadata {
        for key in meta.labels.keys() {
            let domain = key.split_once('/').map(|(d, _)| d).unwrap_or("");
            let restricted = RESTRICTED_LABEL_DOMAINS
                .iter()
                .any(|r| domain == *r || domain.ends_with(&format!(".{r}")));
            if restricted && !WELL_KNOWN_REQUIREMENTS.contains(&key.as_str()) {
                return Err(format!("label {key} is in a restricted domain"));
            }
        }
    }
    for budget in &pool.spec.disruption.budgets {
        if budget.schedule.is_some() != budget.duration.is_some() {
            return Err("a disruption budget needs both schedule and duration, or neither".into());
        }
    }
    Ok(())
}

/// Sums quantities: CPU in millicores, memory-like in bytes, the rest in units.
fn add(total: &mut BTreeMap<String, i64>, name: &str, q: &Quantity) {
    let value = if name == "cpu" {
        parse_millis(q.as_str())
    } else {
        parse_units(q.as_str())
    };
    let Ok(v) = value else {
        return;
    };
    // Looked up before inserting: a key is allocated once per pool, not once per claim.
    match total.get_mut(name) {
        Some(sum) => *sum += v,
        None => {
            total.insert(name.to_owned(), v);
        }
    }
}

fn format(name: &str, value: i64) -> Quantity {
    Quantity::new(match name {
        "cpu" => format_millis(value),
        "memory" | "ephemeral-storage" => format_bytes(value),
        _ => value.to_string(),
    })
}

/// One reconcile of one NodePool.
pub async fn reconcile(pool: Arc<NodePool>, ctx: Arc<Context>) -> Result<Action, ControllerError> {
    let name = pool.name_any();
    // From the host's cache: listing the pool's claims on every claim change is thousands of
    // objects a second at scale.
    let members = ctx.state.claims.store().state();
    let mut totals = BTreeMap::new();
    let mut nodes = 0i64;
    for claim in members.iter().filter(|c| {
        c.metadata.deletion_timestamp.is_none()
            && c.labels().get(NODEPOOL).map(String::as_str) == Some(name.as_str())
    }) {
        nodes += 1;
        for (resource, q) in claim.status.iter().flat_map(|s| s.capacity.iter()) {
            add(&mut totals, resource, q);
        }
    }
    let mut resources: BTreeMap<String, Quantity> = totals
        .iter()
        .map(|(k, v)| (k.clone(), format(k, *v)))
        .collect();
    resources.insert("nodes".to_owned(), Quantity::new(nodes.to_string()));

    let mut next = pool.status.clone().unwrap_or_default();
    next.resources = resources;
    next.nodes = Some(nodes);
    let generation = pool.metadata.generation;
    let mut events = Vec::new();
    let validation = validate(&pool);
    let (v_status, v_reason, v_message) = match &validation {
        Ok(()) => (ConditionStatus::True, "ValidationSucceeded", String::new()),
        Err(m) => (
            ConditionStatus::False,
            "NodePoolValidationFailed",
            m.clone(),
        ),
    };
    if set_condition(
        &mut next.conditions,
        VALIDATION_SUCCEEDED,
        v_status,
        Some(v_reason),
        Some(&v_message),
        generation,
        now(),
    ) && v_status != ConditionStatus::True
    {
        events.push((v_reason, v_message.clone()));
    }
    let (c_status, c_reason, c_message) =
        match resolve::node_class_cached(&ctx, &pool.spec.template.spec.node_class_ref).await? {
            Err(unresolved) => (
                ConditionStatus::False,
                unresolved.reason(),
                unresolved.to_string(),
            ),
            Ok(class) => match class
                .status
                .as_ref()
                .and_then(|s| find_condition(&s.conditions, "Ready"))
            {
                Some(c) if c.is_true() => (ConditionStatus::True, "NodeClassReady", String::new()),
                Some(c) => (
                    ConditionStatus::False,
                    "NodeClassNotReady",
                    format!(
                        "NodeClass {}: {}: {}",
                        class.name_any(),
                        c.reason.clone().unwrap_or_default(),
                        c.message.clone().unwrap_or_default()
                    ),
                ),
                None => (
                    ConditionStatus::Unknown,
                    "NodeClassNotReady",
                    format!("NodeClass {} has no Ready condition yet", class.name_any()),
                ),
            },
        };
    if set_condition(
        &mut next.conditions,
        NODE_CLASS_READY,
        c_status,
        Some(c_reason),
        Some(&c_message),
        generation,
        now(),
    ) && c_status == ConditionStatus::False
    {
        events.push((c_reason, c_message.clone()));
    }
    let (r_status, r_reason, r_message) = if v_status != ConditionStatus::True {
        (ConditionStatus::False, v_reason, v_message)
    } else if c_status != ConditionStatus::True {
        (c_status, c_reason, c_message)
    } else {
        (ConditionStatus::True, "Ready", String::new())
    };
    set_condition(
        &mut next.conditions,
        READY,
        r_status,
        Some(r_reason),
        Some(&r_message),
        generation,
        now(),
    );
    if pool.status.as_ref() != Some(&next) {
        write_status(&ctx, &pool, &next).await?;
        for (reason, message) in events {
            ctx.events.warning(pool.as_ref(), reason, message).await;
        }
    }
    ctx.reset_backoff(&format!("nodepool/{name}"));
    // The pool stays in this reconcile a moment longer: the claim changes that arrive meanwhile
    // wait as one request, so a scale-up of 2,000 claims sums the pool's claims about once a second
    // instead of once per claim change (each sum is every claim of the pool).
    tokio::time::sleep(SETTLE).await;
    Ok(Action::requeue(Duration::from_secs(300)))
}

/// Writes `status` over `pool`'s with a merge patch on the status subresource, if `pool` is still
/// the current version (a conflict otherwise: the caller reads again).
async fn write_status(
    ctx: &Context,
    pool: &NodePool,
    status: &NodePoolStatus,
) -> Result<NodePool, kube::Error> {
    let api: Api<NodePool> = Api::all(ctx.client.clone());
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": pool.resource_version()},
        "status": status,
    });
    api.patch_status(
        &pool.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
}

/// Sets `NodeRegistrationHealthy` on pool `name` (best effort: failures are logged).
pub async fn set_registration_health(ctx: &Context, name: &str, healthy: bool, message: &str) {
    let (status, reason) = if healthy {
        (ConditionStatus::True, "Healthy")
    } else {
        (ConditionStatus::False, "RegistrationFailed")
    };
    let written = set_pool_condition(
        ctx,
        name,
        NODE_REGISTRATION_HEALTHY,
        status,
        reason,
        message,
    )
    .await;
    if let Some(pool) = written
        && !healthy
    {
        ctx.events
            .warning(&pool, "NodeRegistrationUnhealthy", message)
            .await;
    }
}

/// Sets condition `type_` on pool `name` (best effort: failures are logged); the pool when the
/// condition was written (none when it already said so, the pool is gone or the write failed).
pub async fn set_pool_condition(
    ctx: &Context,
    name: &str,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
) -> Option<NodePool> {
    let api: Api<NodePool> = Api::all(ctx.client.clone());
    for _ in 0..5 {
        let pool = match api.get_opt(name).await {
            Ok(Some(pool)) => pool,
            Ok(None) => return None,
            Err(err) => {
                tracing::warn!(nodepool = %name, error = %err, "cannot read nodepool");
                return None;
            }
        };
        let mut updated = pool.clone();
        let conditions = &mut updated
            .status
            .get_or_insert_with(Default::default)
            .conditions;
        if !set_condition(
            conditions,
            type_,
            status,
            Some(reason),
            Some(message),
            pool.metadata.generation,
            now(),
        ) {
            return None;
        }
        let next = updated.status.as_ref()?;
        match write_status(ctx, &pool, next).await {
            Ok(_) => return Some(pool),
            Err(err) if super::is_conflict(&err) => {
                tracing::debug!(nodepool = %name, condition = type_, "write conflict; retrying");
            }
            Err(err) => {
                tracing::warn!(nodepool = %name, error = %err, "cannot update nodepool status");
                return None;
            }
        }
    }
    None
}
