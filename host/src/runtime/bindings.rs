//! Host bindings, one module per supported version of the `capstan:provider` WIT package.
//!
//! Each module is a `bindgen!` over a that version's WIT (`wit/since_vX.Y.Z/` at the repository root,
//! the one copy the guests' SDK binds to as well),
//! plus the glue from its import traits to the version-independent [`crate::capability`] code. A
//! new minor version of the contract adds a module here and a [`WitVersion`] variant; old guests keep
//! loading with their own bindings (the pattern of Zed's extension host).
//!
//! One copy of everything the versions share: the `types` interface of every version is 0.1's, so
//! their bindings reuse 0.1's Rust types (`with` in `bindgen!`) and the rest of the host sees one
//! set of types; what 0.4 adds (Karpenter v1.15's reboot, repair rules, registration hook and
//! volume limits) is its `lifecycle` interface, whose Rust types are the host's ([`lifecycle`]);
//! the `kube` and `host` imports are implemented once, by [`capstan_imports!`], for each version's
//! generated traits (0.3's `list-options` adds the `continue-token` of paged lists);
//! [`typecheck_exports`] checks any version's export.

use std::fmt;

use wasmtime::component::InstancePre;
use wasmtime::component::types::ComponentItem;
use wasmtime::error::Context as _;

use crate::runtime::call_state::CallState;
use types::{Catalog, NodeClaim, NodeClass, NodePool, ProviderError, RepairPolicy};

/// Implements a version's `kube` and `host` import traits (the modules `kube` and `host` in
/// scope where it is invoked) with [`crate::capability`]. Every version with these interfaces
/// unchanged invokes it, so there is one copy of the glue.
///
/// `capstan_imports!()` for versions whose lists do not page (0.1, 0.2);
/// `capstan_imports!(paged)` for those whose `list-options` carry a `continue-token` (0.3).
macro_rules! capstan_imports {
    () => {
        capstan_imports!(@glue options => None);
    };
    (paged) => {
        capstan_imports!(@glue options => options.continue_token);
    };
    (@glue $options:ident => $continue_token:expr) => {
        impl From<kube::Cluster> for $crate::capability::grants::Cluster {
            fn from(cluster: kube::Cluster) -> Self {
                match cluster {
                    kube::Cluster::Workload => $crate::capability::grants::Cluster::Workload,
                    kube::Cluster::Management => $crate::capability::grants::Cluster::Management,
                }
            }
        }

        impl From<kube::Target> for $crate::capability::kube::Target {
            fn from(target: kube::Target) -> Self {
                Self {
                    cluster: target.cluster.into(),
                    api_version: target.api_version,
                    kind: target.kind,
                    namespace: target.namespace,
                }
            }
        }

        impl From<kube::ObjectRef> for $crate::capability::kube::ObjectRef {
            fn from(object: kube::ObjectRef) -> Self {
                Self {
                    target: object.target.into(),
                    name: object.name,
                    subresource: object.subresource,
                }
            }
        }

        impl From<$crate::capability::kube::KubeCallError> for kube::KubeError {
            fn from(err: $crate::capability::kube::KubeCallError) -> Self {
                use $crate::capability::kube::KubeCallError as E;
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

        // Every call goes through `CallState::kube_call`: the request and response bytes count
        // against the call's memory limit and the provider's calls on the wire are bounded.
        impl kube::Host for $crate::runtime::call_state::CallState {
            async fn get(&mut self, object: kube::ObjectRef) -> Result<String, kube::KubeError> {
                let object = object.into();
                Ok(self
                    .kube_call(0, async |kube| kube.get(&object).await)
                    .await?)
            }

            async fn list(
                &mut self,
                target: kube::Target,
                $options: kube::ListOptions,
            ) -> Result<String, kube::KubeError> {
                let target = target.into();
                let options = $crate::capability::kube::ListOptions {
                    label_selector: $options.label_selector,
                    field_selector: $options.field_selector,
                    limit: $options.limit,
                    continue_token: $continue_token,
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
                let launching = self.launching.clone();
                let purpose = $crate::capability::kube::CallPurpose {
                    launching: launching.as_deref(),
                };
                // The guest's body and the stamped copy the host sends (made only of a body
                // within the request limit).
                let held = body.len() + body.len().min($crate::capability::kube::MAX_REQUEST_BYTES);
                Ok(self
                    .kube_call(held, async |kube| {
                        kube.create(&target, &body, purpose).await
                    })
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
                    kube::PatchType::Merge => $crate::capability::kube::PatchKind::Merge,
                    kube::PatchType::Json => $crate::capability::kube::PatchKind::Json,
                    kube::PatchType::Apply => $crate::capability::kube::PatchKind::Apply,
                };
                // The guest's body and the guarded copy the host sends (made only of a body
                // within the request limit).
                let held = body.len() + body.len().min($crate::capability::kube::MAX_REQUEST_BYTES);
                Ok(self
                    .kube_call(held, async |kube| {
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

        impl From<host::LogLevel> for $crate::capability::host::LogLevel {
            fn from(level: host::LogLevel) -> Self {
                match level {
                    host::LogLevel::Trace => $crate::capability::host::LogLevel::Trace,
                    host::LogLevel::Debug => $crate::capability::host::LogLevel::Debug,
                    host::LogLevel::Info => $crate::capability::host::LogLevel::Info,
                    host::LogLevel::Warn => $crate::capability::host::LogLevel::Warn,
                    host::LogLevel::Error => $crate::capability::host::LogLevel::Error,
                }
            }
        }

        impl host::Host for $crate::runtime::call_state::CallState {
            async fn log(&mut self, level: host::LogLevel, message: String) {
                self.caps.metrics().log_line();
                $crate::capability::host::log(self.caps.provider(), level.into(), &message);
            }

            async fn sleep(&mut self, millis: u64) {
                tokio::time::sleep(::std::time::Duration::from_millis(millis)).await;
            }

            async fn now(&mut self) -> u64 {
                $crate::capability::host::now_millis()
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
                    .set(&key, value, ::std::time::Duration::from_millis(ttl_millis))
                {
                    tracing::debug!(provider = %self.caps.provider(), error = %err, "cache-set dropped");
                }
            }

            async fn cache_delete(&mut self, key: String) {
                self.caps.cache().delete(&key);
            }
        }
    };
}

/// The bindings of a contract of 0.2 or later in the module where it is invoked: `bindgen!` over
/// the version's WIT directory (`types` bound to 0.1's Rust types, the interfaces listed after `;`
/// to an earlier version's Rust types, the WASI packages to wasmtime's), its linker (WASI, `wasi:http`, `wasi:config`, `kube`, `host`, and the instances
/// of its type-only interfaces) and its import glue ([`capstan_imports!`], with `paged` when its
/// lists page).
macro_rules! bindings_with_wasi_http {
    (
        [$($types_instance:literal),+] $path:literal $(, $paged:ident)?
        $(; $($shared:literal => $shared_types:path),+)?
    ) => {
        use wasmtime::component::{HasSelf, Linker};

        use $crate::runtime::call_state::CallState;

        wasmtime::component::bindgen!({
            path: $path,
            world: "cloud-provider-world",
            imports: { default: async },
            exports: { default: async },
            additional_derives: [PartialEq],
            with: {
                // Identical to 0.1's (checked by a test in `bindings`): one set of host types.
                "capstan:provider/types": super::since_v0_1_0::capstan::provider::types,
                // The plain-data interfaces a later version shares unchanged with an earlier one.
                $($($shared: $shared_types,)+)?
                "wasi:http": wasmtime_wasi_http::p2::bindings::http,
                "wasi:io": wasmtime_wasi::p2::bindings::io,
                "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
            },
        });

        use self::capstan::provider::{host, kube};

        /// A linker with WASI (p2, async), `wasi:http`, `wasi:config` and this version's imports.
        pub(crate) fn linker(engine: &wasmtime::Engine) -> wasmtime::Result<Linker<CallState>> {
            let mut linker = super::wasi_http_config_linker(engine)?;
            kube::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |state| state)?;
            host::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |state| state)?;
            // The type-only interfaces (`types`, 0.4's `lifecycle`): nothing to link but their
            // instance names.
            $(linker.instance($types_instance)?;)+
            Ok(linker)
        }

        capstan_imports!($($paged)?);
    };
}

pub mod since_v0_1_0;
pub mod since_v0_2_0;
pub mod since_v0_3_0;
pub mod since_v0_4_0;
pub mod since_v0_5_0;
pub mod wit_files;

/// A linker with WASI (p2, async), `wasi:http/outgoing-handler` (wasmtime-wasi-http, with the
/// host's [`OutboundHttp`](crate::capability::outbound_http) hooks doing the sending) and
/// `wasi:config/store` (serving the call's snapshot of the provider's configuration): the
/// standard imports of 0.2 and later, to which each version adds its own.
fn wasi_http_config_linker(
    engine: &wasmtime::Engine,
) -> wasmtime::Result<wasmtime::component::Linker<CallState>> {
    let mut linker = wasmtime::component::Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    wasmtime_wasi_config::add_to_linker(&mut linker, |state: &mut CallState| {
        wasmtime_wasi_config::WasiConfig::from(&state.config)
    })?;
    Ok(linker)
}

/// The package every provider's contract lives in.
pub const PACKAGE_NAMESPACE: &str = "capstan";
/// The package name.
pub const PACKAGE_NAME: &str = "provider";
/// The interface a provider exports.
pub const EXPORT_INTERFACE: &str = "cloud-provider";

/// The data types of every supported contract (every version's `types` is 0.1's), used by the rest
/// of the host.
pub use since_v0_1_0::capstan::provider::types;

/// What 0.4 adds (its `lifecycle` interface): the host's types for repair rules, reboots, the
/// registration hook and volume limits, whatever version a provider speaks.
pub use since_v0_4_0::capstan::provider::lifecycle;

/// What 0.5 adds (its `devices` interface): the DRA device templates of instance types, and the
/// `get-instance-types` answer the host works with, whatever version a provider speaks.
pub use since_v0_5_0::capstan::provider::devices;

/// A version of the contract this host can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WitVersion {
    /// `capstan:provider@0.1.x`.
    V0_1,
    /// `capstan:provider@0.2.x`: 0.1 plus `wasi:http/outgoing-handler` and `wasi:config/store`.
    V0_2,
    /// `capstan:provider@0.3.x`: 0.2 with paged lists (`list-options.continue-token`).
    V0_3,
    /// `capstan:provider@0.4.x`: 0.3 with Karpenter v1.15's contract (`reboot`, repair rules,
    /// the `registered` hook, volume attachment limits).
    V0_4,
    /// `capstan:provider@0.5.x`: 0.4 with the DRA devices of instance types.
    V0_5,
}

impl WitVersion {
    /// Every supported version, oldest first.
    pub const SUPPORTED: &[WitVersion] = &[
        WitVersion::V0_1,
        WitVersion::V0_2,
        WitVersion::V0_3,
        WitVersion::V0_4,
        WitVersion::V0_5,
    ];

    /// The newest supported version.
    pub const LATEST: WitVersion = WitVersion::V0_5;

    /// The supported version compatible with `major.minor` (semver: for `0.x` the minor number is
    /// the compatibility boundary), if any. A newer minor than the host knows is not supported: its
    /// guest may call imports the host does not have.
    pub fn for_version(major: u64, minor: u64) -> Option<Self> {
        match (major, minor) {
            (0, 1) => Some(WitVersion::V0_1),
            (0, 2) => Some(WitVersion::V0_2),
            (0, 3) => Some(WitVersion::V0_3),
            (0, 4) => Some(WitVersion::V0_4),
            (0, 5) => Some(WitVersion::V0_5),
            _ => None,
        }
    }

    /// `0.1`.
    pub fn as_str(self) -> &'static str {
        match self {
            WitVersion::V0_1 => "0.1",
            WitVersion::V0_2 => "0.2",
            WitVersion::V0_3 => "0.3",
            WitVersion::V0_4 => "0.4",
            WitVersion::V0_5 => "0.5",
        }
    }

    /// The supported versions, for messages: `0.1.x, 0.2.x`.
    pub fn supported_list() -> String {
        Self::SUPPORTED
            .iter()
            .map(|v| format!("{}.x", v.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The functions the `cloud-provider` interface of this version exports.
    pub fn exported_functions(self) -> &'static [&'static str] {
        // 0.2 and 0.3 changed the imports only; 0.5 the answer of `get-instance-types` only.
        match self {
            WitVersion::V0_1 | WitVersion::V0_2 | WitVersion::V0_3 => &[
                "name",
                "get-instance-types",
                "create",
                "delete",
                "get",
                "list",
                "is-drifted",
                "repair-policies",
                "validate-node-class",
            ],
            WitVersion::V0_4 | WitVersion::V0_5 => &[
                "name",
                "get-instance-types",
                "create",
                "delete",
                "get",
                "list",
                "is-drifted",
                "repair-policies",
                "reboot",
                "registered",
                "validate-node-class",
            ],
        }
    }
}

/// Type-checks every function of the `cloud-provider` export named `interface` against this
/// version's signatures, without instantiating (the generated bindings only check interface exports
/// when an instance is created, i.e. on the first call).
pub(crate) fn typecheck_exports(
    pre: &InstancePre<CallState>,
    interface: &str,
    version: WitVersion,
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
    check!("create", (NodeClaim, NodeClass) -> Result<NodeClaim, ProviderError>);
    check!("delete", (NodeClaim) -> Result<(), ProviderError>);
    check!("get", (String) -> Result<NodeClaim, ProviderError>);
    check!("list", () -> Result<Vec<NodeClaim>, ProviderError>);
    check!("is-drifted", (NodeClaim, NodeClass) -> Result<Option<String>, ProviderError>);
    check!("validate-node-class", (NodeClass) -> Result<(), ProviderError>);
    match version {
        WitVersion::V0_1 | WitVersion::V0_2 | WitVersion::V0_3 => {
            check!("get-instance-types", (NodePool, NodeClass) -> Result<Catalog, ProviderError>);
            check!("repair-policies", () -> Vec<RepairPolicy>);
        }
        WitVersion::V0_4 | WitVersion::V0_5 => {
            use lifecycle::{RebootError, Registration, RepairRule};
            if version == WitVersion::V0_4 {
                check!("get-instance-types", (NodePool, NodeClass) -> Result<lifecycle::InstanceTypes, ProviderError>);
            } else {
                check!("get-instance-types", (NodePool, NodeClass) -> Result<devices::InstanceTypes, ProviderError>);
            }
            check!("repair-policies", () -> Vec<RepairRule>);
            check!("reboot", (NodeClaim, String) -> Result<(), RebootError>);
            check!("registered", (NodeClaim) -> Result<Registration, ProviderError>);
        }
    }
    Ok(())
}

impl fmt::Display for WitVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(WitVersion::for_version(0, 1), Some(WitVersion::V0_1));
        assert_eq!(WitVersion::for_version(0, 2), Some(WitVersion::V0_2));
        assert_eq!(WitVersion::for_version(0, 3), Some(WitVersion::V0_3));
        assert_eq!(WitVersion::for_version(0, 4), Some(WitVersion::V0_4));
        assert_eq!(WitVersion::for_version(0, 5), Some(WitVersion::V0_5));
        assert_eq!(WitVersion::for_version(0, 6), None);
        assert_eq!(WitVersion::for_version(1, 0), None);
        assert_eq!(
            WitVersion::supported_list(),
            "0.1.x, 0.2.x, 0.3.x, 0.4.x, 0.5.x"
        );
    }

    fn resolve(dir: &str) -> (wit_parser::Resolve, wit_parser::PackageId) {
        let mut resolve = wit_parser::Resolve::default();
        let dir = format!("{}/../wit/{dir}", env!("CARGO_MANIFEST_DIR"));
        let (package, _) = resolve.push_dir(dir).unwrap();
        (resolve, package)
    }

    fn interface<'a>(
        resolve: &'a wit_parser::Resolve,
        package: wit_parser::PackageId,
        name: &str,
    ) -> &'a wit_parser::Interface {
        let id = resolve.packages[package].interfaces[name];
        &resolve.interfaces[id]
    }

    /// The bindings' WIT lists exactly the functions each version exports, in order.
    #[test]
    fn function_list_matches_the_wit() {
        for (dir, version) in [
            ("since_v0.1.0", WitVersion::V0_1),
            ("since_v0.2.0", WitVersion::V0_2),
            ("since_v0.3.0", WitVersion::V0_3),
            ("since_v0.4.0", WitVersion::V0_4),
            ("since_v0.5.0", WitVersion::V0_5),
        ] {
            let (resolve, package) = resolve(dir);
            let iface = interface(&resolve, package, EXPORT_INTERFACE);
            let names: Vec<&str> = iface.functions.keys().map(String::as_str).collect();
            assert_eq!(names, version.exported_functions(), "{dir}");
        }
    }

    /// The declarations of interface `name` of the contract in `dir`, numbers (arena ids) and
    /// docs aside, except the types named in `skip`.
    fn shape(dir: &str, name: &str, skip: &[&str]) -> (Vec<String>, Vec<String>) {
        let (resolve, package) = resolve(dir);
        let iface = interface(&resolve, package, name);
        let types = iface
            .types
            .iter()
            .filter(|(n, _)| !skip.contains(&n.as_str()))
            .map(|(n, id)| {
                format!("{n}: {:?}", resolve.types[*id].kind).replace(char::is_numeric, "")
            })
            .collect();
        let functions = iface
            .functions
            .values()
            .map(|f| {
                format!("{}{:?}{:?}", f.name, f.params, f.result).replace(char::is_numeric, "")
            })
            .collect();
        (types, functions)
    }

    /// Every version reuses 0.1's Rust types and import glue: its `types`, `kube` and `host`
    /// interfaces must be 0.1's, declaration for declaration, but for `list-options` from 0.3 on;
    /// its export is 0.1's up to 0.3 (0.4's is checked by [`typecheck_exports`]'s signatures).
    #[test]
    fn shared_interfaces_are_unchanged_since_0_1() {
        for dir in [
            "since_v0.2.0",
            "since_v0.3.0",
            "since_v0.4.0",
            "since_v0.5.0",
        ] {
            let skip: &[&str] = if dir == "since_v0.2.0" {
                &[]
            } else {
                &["list-options"]
            };
            let interfaces: &[&str] = if dir >= "since_v0.4.0" {
                &["types", "kube", "host"]
            } else {
                &["types", "kube", "host", EXPORT_INTERFACE]
            };
            for name in interfaces {
                assert_eq!(
                    shape("since_v0.1.0", name, skip),
                    shape(dir, name, skip),
                    "{dir}: interface {name}"
                );
            }
        }
        // 0.4's and 0.5's `list-options` are 0.3's.
        for dir in ["since_v0.4.0", "since_v0.5.0"] {
            assert_eq!(shape("since_v0.3.0", "kube", &[]), shape(dir, "kube", &[]));
        }
        // 0.5 binds its `lifecycle` to 0.4's Rust types: it must be 0.4's.
        assert_eq!(
            shape("since_v0.4.0", "lifecycle", &[]),
            shape("since_v0.5.0", "lifecycle", &[])
        );
    }

    /// 0.3's `list-options` is 0.2's plus `continue-token`, which the glue passes on.
    #[test]
    fn list_options_of_0_3_add_the_continue_token() {
        let (resolve, package) = resolve("since_v0.3.0");
        let kube = interface(&resolve, package, "kube");
        let wit_parser::TypeDefKind::Record(record) =
            &resolve.types[kube.types["list-options"]].kind
        else {
            panic!("list-options is not a record");
        };
        let fields: Vec<&str> = record.fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            fields,
            [
                "label-selector",
                "field-selector",
                "limit",
                "continue-token"
            ]
        );
    }
}
