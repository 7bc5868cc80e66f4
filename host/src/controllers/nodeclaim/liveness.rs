//! Liveness: a claim that has not launched within the launch timeout of its creation, or whose
//! Node has not registered within the registration timeout of its launch, is deleted (and the
//! NodePool's registration health marked). A claim that did not launch in time also has its
//! offerings marked unavailable for a while ([`super::launch::avoid_offerings`]), as after
//! `insufficient-capacity`, so its pods go to the next NodePool rather than to the same offerings
//! again (Karpenter re-creates the same claim). A registration timeout is the node's, not the
//! offering's (Karpenter's suite reuses an offering right after one), and marks nothing.

use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;

use super::{Step, delete};
use crate::api::NodeClaim;
use crate::api::nodeclaim::conditions::{LAUNCHED, REGISTERED};
use crate::api::shared::find_condition;
use crate::controllers::nodepool_status;
use crate::controllers::{Context, ControllerError, millis_since};
use crate::rules::claims::{is_true, nodepool};

/// Deletes the claim if it timed out.
pub async fn reconcile(claim: &mut NodeClaim, ctx: &Context) -> Result<Step, ControllerError> {
    if is_true(claim, REGISTERED) {
        return Ok(Step::Continue);
    }
    let pool = nodepool(claim);
    if !is_true(claim, LAUNCHED) {
        let Some(created) = claim.metadata.creation_timestamp.as_ref() else {
            return Ok(Step::Continue);
        };
        let timeout = ctx.settings.launch_timeout;
        if millis_since(created) >= i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX) {
            return launch_timed_out(claim, ctx).await;
        }
        return Ok(Step::Continue);
    }
    let launched = claim
        .status
        .as_ref()
        .and_then(|s| find_condition(&s.conditions, LAUNCHED))
        .map(|c| c.last_transition_time.clone());
    let Some(launched) = launched else {
        return Ok(Step::Continue);
    };
    let timeout = ctx.settings.registration_timeout;
    if millis_since(&launched) >= i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX) {
        let message = format!(
            "Node for NodeClaim {} did not register within {timeout:?}",
            claim.name_any()
        );
        ctx.metrics.own.failed(&pool, "RegistrationTimeout");
        ctx.metrics
            .lifecycle
            .disrupted(claim, "registration_timeout", "", 0);
        ctx.events
            .warning(claim, "RegistrationTimeout", message.clone())
            .await;
        if !pool.is_empty() {
            nodepool_status::set_registration_health(ctx, &pool, false, &message).await;
        }
        delete(ctx, claim).await?;
        return Ok(Step::Stop(Action::await_change()));
    }
    Ok(Step::Continue)
}

/// How much of the launch timeout is left for the claim (zero once it ran out).
pub fn launch_budget(claim: &NodeClaim, ctx: &Context) -> Duration {
    let timeout = ctx.settings.launch_timeout;
    let Some(created) = claim.metadata.creation_timestamp.as_ref() else {
        return timeout;
    };
    let age = u64::try_from(millis_since(created)).unwrap_or(0);
    timeout.saturating_sub(Duration::from_millis(age))
}

/// The claim did not launch in time: count it, record an Event, delete the claim.
pub async fn launch_timed_out(claim: &NodeClaim, ctx: &Context) -> Result<Step, ControllerError> {
    let timeout = ctx.settings.launch_timeout;
    ctx.metrics.own.failed(&nodepool(claim), "LaunchTimeout");
    ctx.metrics
        .lifecycle
        .disrupted(claim, "launch_timeout", "", 0);
    ctx.events
        .warning(
            claim,
            "LaunchTimeout",
            format!(
                "NodeClaim {} did not launch within {timeout:?}",
                claim.name_any()
            ),
        )
        .await;
    super::launch::avoid_offerings(ctx, claim).await;
    delete(ctx, claim).await?;
    Ok(Step::Stop(Action::await_change()))
}
