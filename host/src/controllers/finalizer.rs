//! Finalizers, written once for every controller that keeps an object until its work is done
//! (the NodeClaim's `karpenter.sh/termination`, the NodeClass's `capstan.dev/termination`).
//!
//! Both writes are merge patches guarded by the resourceVersion the decision was made on: a
//! stale decision fails with a conflict and is made again on the next reconcile, and the other
//! finalizers on the object are kept as they were.

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

/// Whether `object` carries `finalizer`.
pub fn has<K: Resource>(object: &K, finalizer: &str) -> bool {
    object.finalizers().iter().any(|f| f == finalizer)
}

/// Adds `finalizer` to `object` (nothing when it is there already).
pub async fn add<K>(api: &Api<K>, object: &K, finalizer: &str) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    if has(object, finalizer) {
        return Ok(());
    }
    let mut finalizers = object.finalizers().to_vec();
    finalizers.push(finalizer.to_owned());
    write(api, object, finalizers).await
}

/// Removes `finalizer` from `object`, keeping the others.
pub async fn remove<K>(api: &Api<K>, object: &K, finalizer: &str) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    if !has(object, finalizer) {
        return Ok(());
    }
    let rest: Vec<String> = object
        .finalizers()
        .iter()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect();
    write(api, object, rest).await
}

async fn write<K>(api: &Api<K>, object: &K, finalizers: Vec<String>) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": object.resource_version(),
    }});
    api.patch(
        &object.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}
