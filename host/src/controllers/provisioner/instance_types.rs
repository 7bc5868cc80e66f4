//! The provisioner's source of instance types: the NodeClass's live provider, through the
//! host's [`InstanceTypeCache`] without waiting on a slow provider
//! ([`InstanceTypeCache::get_within`]), with the offerings recently out of capacity marked
//! unavailable.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use kube::ResourceExt;

use crate::api::{NodeClass, NodePool};
use crate::catalog::{Catalog, InstanceTypeCache};
use crate::controllers::{Context, resolve};
use crate::metrics::cloudprovider::controller;
use crate::rules::limits::SpendGroup;
use crate::rules::snapshot::{InstanceTypeSource, ProvisionError};
use crate::scheduling::InstanceType;

/// The host's source: the NodeClass's live provider from the registry, through the cache, with
/// the offerings recently out of capacity ([`Context::unavailable_offerings`]) marked unavailable.
#[derive(Debug, Clone, Copy)]
pub struct FromProviders<'a> {
    pub ctx: &'a Context,
    pub cache: &'a InstanceTypeCache,
}

impl InstanceTypeSource for FromProviders<'_> {
    async fn instance_types(
        &self,
        pool: &NodePool,
        classes: &HashMap<String, Arc<NodeClass>>,
    ) -> Result<Arc<[InstanceType]>, ProvisionError> {
        let ctx = self.ctx;
        // As Karpenter: with the NodeOverlay gate on, nothing is decided on prices the overlays
        // have not been applied to yet.
        if !self.cache.overlays_evaluated() {
            return Err(ProvisionError::Pool(
                "NodeOverlays are not evaluated yet".to_owned(),
            ));
        }
        let (provider_name, result) = self.fetch(pool, classes, Catalog::Overlaid).await?;
        let mut types = result?;
        forget_restored(ctx, self.cache);
        // Offerings that recently ran out of capacity are simulated as unavailable.
        if !ctx.unavailable_offerings.entries(&provider_name).is_empty() {
            let mut marked = types.to_vec();
            ctx.unavailable_offerings.mark(&provider_name, &mut marked);
            types = marked.into();
        }
        Ok(types)
    }

    fn spend_group(
        &self,
        pool: &NodePool,
        classes: &HashMap<String, Arc<NodeClass>>,
    ) -> Option<SpendGroup> {
        let resolved =
            resolve::resolve_in(self.ctx, &pool.spec.template.spec.node_class_ref, classes).ok()?;
        let limit = self.ctx.registry.spend_limit(&resolved.provider_name)?;
        Some(SpendGroup {
            name: resolved.provider_name,
            limit,
        })
    }
}

impl FromProviders<'_> {
    /// `pool`'s catalog from its NodeClass's provider, through the cache; the provider's name
    /// and the result.
    pub async fn fetch(
        &self,
        pool: &NodePool,
        classes: &HashMap<String, Arc<NodeClass>>,
        catalog: Catalog,
    ) -> Result<(String, Result<Arc<[InstanceType]>, ProvisionError>), ProvisionError> {
        let resolved =
            resolve::resolve_in(self.ctx, &pool.spec.template.spec.node_class_ref, classes)
                .map_err(|unresolved| ProvisionError::Pool(unresolved.to_string()))?;
        let (class, provider) = (&resolved.node_class, &resolved.provider);
        let started = Instant::now();
        let result = self
            .cache
            .get_within(
                controller::PROVISIONER,
                provider,
                pool,
                class,
                catalog,
                crate::catalog::DEFAULT_FIRST_WAIT,
            )
            .await;
        if let Err(ProvisionError::Call(err)) = &result {
            tracing::warn!(provider = %class.spec.provider, error = %err, "get-instance-types failed");
        }
        tracing::debug!(nodepool = %pool.name_any(), elapsed = ?started.elapsed(), "instance types");
        Ok((class.spec.provider.clone(), result))
    }
}

/// Every managed NodePool (not being deleted) with its catalog as its provider gives it (a miss
/// waits at most the first-answer bound; see [`FromProviders::fetch`]). The NodeOverlay
/// controller evaluates overlays over these; the provisioner asks them every half TTL so that a
/// stale catalog is fetched afresh even when nothing is pending, and consolidation sees capacity
/// that freed ([`InstanceTypeCache::changes`]) without waiting for a pod.
pub async fn raw_catalogs(
    ctx: &Context,
) -> Vec<(Arc<NodePool>, Result<Arc<[InstanceType]>, ProvisionError>)> {
    // The pools and classes only (a snapshot would copy every pod).
    let view = ctx.state.view();
    let source = FromProviders {
        ctx,
        cache: &ctx.instance_types,
    };
    let mut out = Vec::new();
    for pool in view
        .pools
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let types = match source.fetch(pool, &view.classes, Catalog::Raw).await {
            Ok((_, result)) => result,
            Err(err) => Err(err),
        };
        out.push((Arc::clone(pool), types));
    }
    forget_restored(ctx, &ctx.instance_types);
    out
}

/// Forgets the unavailable offerings the providers' catalogs say are available again
/// ([`InstanceTypeCache::take_restored`]).
fn forget_restored(ctx: &Context, cache: &InstanceTypeCache) {
    for restored in cache.take_restored() {
        let forgotten = ctx.unavailable_offerings.forget_restored(&restored);
        if forgotten > 0 {
            tracing::info!(provider = %restored.provider, instance_type = %restored.instance_type, zone = %restored.zone, capacity_type = %restored.capacity_type, forgotten, "offering available again in the provider's catalog: no longer avoided");
        }
    }
}
