//! Bindings for `capstan:provider@0.1.x`, and its imports wired to [`crate::capability`].

use std::time::Duration;

use wasmtime::component::types::ComponentItem;
use wasmtime::component::{HasSelf, InstancePre, Linker};
use wasmtime::error::Context as _;

use crate::capability::{grants, host as host_cap, kube as kube_cap};
use crate::runtime::call_state::CallState;

wasmtime::component::bindgen!({
    path: "../wit/since_v0.1.0",
    world: "cloud-provider-world",
    imports: { default: async },
    exports: { default: async },
    additional_derives: [PartialEq],
});

use self::capstan::provider::{host, kube, types};
use self::types::{Catalog, NodeClaim, NodeClass, NodePool, ProviderError, RepairPolicy};

/// A linker with WASI (p2, async) and this version's imports.
pub(crate) fn linker(engine: &wasmtime::Engine) -> wasmtime::Result<Linker<CallState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    CloudProviderWorld::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |state| state)?;
    Ok(linker)
}

/// Type-checks every function of the `cloud-provider` export named `interface` against this
/// version's signatures, without instantiating (the generated bindings only check interface exports
/// when an instance is created, i.e. on the first call).
pub(crate) fn typecheck_exports(
    pre: &InstancePre<CallState>,
    interface: &str,
) -> wasmtime::Result<()> {
    let component = pre.component();
    let (_, instance) = component
        .get_export(None, interface)
        .ok_or_else(|| wasmtime::format_err!("no export `{interface}`"))?;
    let instance_type = pre.instance_type();
    macro_rules! check {
        ($name:literal, ($($param:ty),*) -> $result:ty) => {{
            let (item, _) = component
                .get_export(Some(&instance), $name)
                .ok_or_else(|| wasmtime::format_err!("no function `{}`", $name))?;
            match item {
                ComponentItem::ComponentFunc(func) => func
                    .typecheck::<($($param,)*), ($result,)>(&instance_type)
                    .with_context(|| format!("function `{}` has the wrong type", $name))?,
                _ => wasmtime::bail!("export `{}` is not a function", $name),
            }
        }};
    }
    check!("name", () -> String);
    check!("get-instance-types", (NodePool, NodeClass) -> Result<Catalog, ProviderError>);
    check!("create", (NodeClaim, NodeClass) -> Result<NodeClaim, ProviderError>);
    check!("delete", (NodeClaim) -> Result<(), ProviderError>);
    check!("get", (String) -> Result<NodeClaim, ProviderError>);
    check!("list", () -> Result<Vec<NodeClaim>, ProviderError>);
    check!("is-drifted", (NodeClaim, NodeClass) -> Result<Option<String>, ProviderError>);
    check!("repair-policies", () -> Vec<RepairPolicy>);
    check!("validate-node-class", (NodeClass) -> Result<(), ProviderError>);
    Ok(())
}

impl types::Host for CallState {}

impl From<kube::Cluster> for grants::Cluster {
    fn from(cluster: kube::Cluster) -> Self {
        match cluster {
            kube::Cluster::Workload => grants::Cluster::Workload,
            kube::Cluster::Management => grants::Cluster::Management,
        }
    }
}

impl From<kube::Target> for kube_cap::Target {
    fn from(target: kube::Target) -> Self {
        Self {
            cluster: target.cluster.into(),
            api_version: target.api_version,
            kind: target.kind,
            namespace: target.namespace,
        }
    }
}

impl From<kube::ObjectRef> for kube_cap::ObjectRef {
    fn from(object: kube::ObjectRef) -> Self {
        Self {
            target: object.target.into(),
            name: object.name,
            subresource: object.subresource,
        }
    }
}

impl From<kube_cap::KubeCallError> for kube::KubeError {
    fn from(err: kube_cap::KubeCallError) -> Self {
        use kube_cap::KubeCallError as E;
        match err {
            E::PermissionDenied(m) => kube::KubeError::PermissionDenied(m),
            E::NotFound(m) => kube::KubeError::NotFound(m),
            E::Conflict(m) => kube::KubeError::Conflict(m),
            E::Invalid(m) => kube::KubeError::Invalid(m),
            E::Unavailable(m) => kube::KubeError::Unavailable(m),
            E::Other(m) => kube::KubeError::Other(m),
        }
    }
}

impl kube::Host for CallState {
    async fn get(&mut self, object: kube::ObjectRef) -> Result<String, kube::KubeError> {
        let object = object.into();
        Ok(self
            .kube_call(0, async |kube| kube.get(&object).await)
            .await?)
    }

    async fn list(
        &mut self,
        target: kube::Target,
        options: kube::ListOptions,
    ) -> Result<String, kube::KubeError> {
        let target = target.into();
        let options = kube_cap::ListOptions {
            label_selector: options.label_selector,
            field_selector: options.field_selector,
            limit: options.limit,
        };
        Ok(self
            .kube_call(0, async |kube| kube.list(&target, &options).await)
            .await?)
    }

    async fn create(
        &mut self,
        target: kube::Target,
        body: String,
    ) -> Result<String, kube::KubeError> {
        let target = target.into();
        Ok(self
            .kube_call(body.len(), async |kube| kube.create(&target, &body).await)
            .await?)
    }

    async fn patch(
        &mut self,
        object: kube::ObjectRef,
        patch_type: kube::PatchType,
        body: String,
        field_manager: Option<String>,
    ) -> Result<String, kube::KubeError> {
        let object = object.into();
        let kind = match patch_type {
            kube::PatchType::Merge => kube_cap::PatchKind::Merge,
            kube::PatchType::Json => kube_cap::PatchKind::Json,
            kube::PatchType::Apply => kube_cap::PatchKind::Apply,
        };
        Ok(self
            .kube_call(body.len(), async |kube| {
                kube.patch(&object, kind, &body, field_manager.as_deref())
                    .await
            })
            .await?)
    }

    async fn delete(&mut self, object: kube::ObjectRef) -> Result<(), kube::KubeError> {
        let object = object.into();
        self.kube_call(0, async |kube| {
            kube.delete(&object).await.map(|()| String::new())
        })
        .await?;
        Ok(())
    }
}

impl From<host::LogLevel> for host_cap::LogLevel {
    fn from(level: host::LogLevel) -> Self {
        match level {
            host::LogLevel::Trace => host_cap::LogLevel::Trace,
            host::LogLevel::Debug => host_cap::LogLevel::Debug,
            host::LogLevel::Info => host_cap::LogLevel::Info,
            host::LogLevel::Warn => host_cap::LogLevel::Warn,
            host::LogLevel::Error => host_cap::LogLevel::Error,
        }
    }
}

impl host::Host for CallState {
    async fn log(&mut self, level: host::LogLevel, message: String) {
        self.caps.metrics().log_line();
        host_cap::log(self.caps.provider(), level.into(), &message);
    }

    async fn sleep(&mut self, millis: u64) {
        tokio::time::sleep(Duration::from_millis(millis)).await;
    }

    async fn now(&mut self) -> u64 {
        host_cap::now_millis()
    }

    async fn cache_get(&mut self, key: String) -> Option<Vec<u8>> {
        let value = self.caps.cache().get(&key);
        self.caps.metrics().cache_lookup(value.is_some());
        value
    }

    async fn cache_set(&mut self, key: String, value: Vec<u8>, ttl_millis: u64) {
        if let Err(err) = self
            .caps
            .cache()
            .set(&key, value, Duration::from_millis(ttl_millis))
        {
            tracing::debug!(provider = %self.caps.provider(), error = %err, "cache-set dropped");
        }
    }

    async fn cache_delete(&mut self, key: String) {
        self.caps.cache().delete(&key);
    }
}
