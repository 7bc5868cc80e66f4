//! The provisioner's [`Snapshot`] of the host's caches, and its scheduling input with instance
//! types from the host's providers. The snapshot itself, and how it becomes the scheduler's
//! input, are [`crate::rules::snapshot`]'s.

use crate::controllers::Context;
use crate::rules::snapshot::{Built, Snapshot};

use super::instance_types::FromProviders;
use crate::catalog::InstanceTypeCache;

/// The cluster as the host's caches hold it now ([`crate::state::ClusterState`]): no API
/// request ([`Snapshot::from_view`] over the caches' view).
pub fn take(ctx: &Context) -> Snapshot {
    Snapshot::from_view(&ctx.state.view(), &ctx.selector)
}

/// The simulation input of `snapshot` with instance types from the host's providers (through
/// `cache`) and the host's scheduling policies.
pub async fn input(snapshot: &Snapshot, ctx: &Context, cache: &InstanceTypeCache) -> Built {
    let mut built = snapshot.input_from(&FromProviders { ctx, cache }).await;
    built.input.options.preference_policy = ctx.settings.preference_policy;
    built.input.options.min_values_policy = ctx.settings.min_values_policy;
    built
}
