//! Liveness: a claim that has not launched within the launch timeout of its creation, or whose
//! Node has not registered within the registration timeout of its launch, is deleted (and the
//! NodePool's registration health marked).

use kube::ResourceExt;
use kube::runtime::controller::Action;

use super::{Step, delete, is_true, nodepool};
use crate::api::NodeClaim;
use crate::api::nodeclaim::conditions::{LAUNCHED, REGISTERED};
use crate::api::shared::find_condition;
use crate::controllers::nodepool_status;
use crate::controllers::{Context, ControllerError, millis_since};

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
            ctx.metrics.failed(&pool, "LaunchTimeout");
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
            delete(ctx, claim).await?;
            return Ok(Step::Stop(Action::await_change()));
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
        ctx.metrics.failed(&pool, "RegistrationTimeout");
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
