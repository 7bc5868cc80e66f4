//! Guest SDK for Capstan providers.
//!
//! A provider is a WebAssembly component implementing the `capstan:provider` world
//! (`wit/since_v0.1.0/provider.wit`; with the `v0_2` feature `wit/since_v0.2.0/provider.wit`; with
//! `v0_3`, `wit/since_v0.3.0/provider.wit`; with `v0_4`, `wit/since_v0.4.0/provider.wit`; with
//! `v0_5`, `wit/since_v0.5.0/provider.wit`). This crate
//! generates the bindings once and adds what every provider needs on
//! top of them, so a provider crate is mostly its own logic:
//!
//! - [`bindings`]: the generated WIT bindings; the plain data types are re-exported at the crate root
//!   ([`Catalog`], [`NodeClaim`], [`ProviderError`], ...), the trait to implement is [`Guest`].
//! - [`catalog`]: [`CatalogBuilder`] fills the flat instance-type `catalog` `get-instance-types`
//!   returns, interning strings and lists; [`catalog::expand`] reads one back.
//! - [`export_provider!`]: registers the type implementing [`Guest`] as the component's export.
//! - [`requirements`]: constructors (`Requirement::in_("key", ["a"])`, `Requirement::gte`) and
//!   Karpenter's matching rules.
//! - [`quantity`]: Kubernetes quantities (`"500m"`, `"16Gi"`, `"2e3"`) as exact integers.
//! - [`model`]: the shared model behind [`requirements`], [`quantity`] and [`labels`]
//!   (`capstan-model`): the same code the host's scheduler runs, so the two agree.
//! - [`resources`]: resource lists (`capacity`, `requests`) as quantities, with fit checks.
//! - [`labels`]: well-known label, taint and value constants.
//! - [`kube`]: typed access to the host's `kube` import (serde in, serde out).
//! - [`log!`](crate::log!), [`cache`], [`clock`]: the host's small services.
//! - [`params`]: NodeClass parameter parsing with errors that name the offending field.
//! - With the `v0_2` or `v0_3` feature (contract `capstan:provider@0.2.0`, `@0.3.0`):
//!   [`http`](crate::http), blocking HTTP requests over `wasi:http` (checked by the host against
//!   the Provider's egress grants), and [`config`](crate::config), the Provider's configuration
//!   and Secret values.
//! - With `v0_3` (and `v0_4`): [`kube::list`] reads a list a page at a time ([`kube::PAGE_SIZE`]
//!   items), so a provider can list more objects than one answer of the host may hold.
//! - With `v0_4`: Karpenter v1.15's contract. [`Guest`] gains `reboot` and `registered`,
//!   `repair-policies` returns [`RepairRule`]s and `get-instance-types` an [`InstanceTypes`] (the
//!   catalog with [`VolumeLimit`]s).
//! - With `v0_5`: devices. `get-instance-types` returns [`devices::InstanceTypes`] (0.4's answer
//!   with the DRA devices of each instance type as [`devices::SliceTemplate`]s, built with
//!   [`catalog::DeviceTemplates`]).
//!
//! ```ignore
//! use capstan_provider_sdk::{Guest, Catalog, CatalogBuilder, NodeClaim, NodeClass, NodePool, ProviderError, RepairPolicy};
//!
//! struct MyCloud;
//! impl Guest for MyCloud { /* ... */ }
//! capstan_provider_sdk::export_provider!(MyCloud);
//! ```
//!
//! Everything except the host imports is plain Rust and also compiles natively, so provider logic can
//! be unit-tested with `cargo test`; calling a host import outside a component panics.

pub mod cache;
pub mod catalog;
pub mod clock;
pub mod kube;
pub mod log;
pub mod params;
pub mod requirements;
pub mod resources;
pub mod timestamp;

#[cfg(any(feature = "v0_2", feature = "v0_3"))]
pub mod config;
#[cfg(any(feature = "v0_2", feature = "v0_3"))]
pub mod http;

/// The bindings `wit-bindgen` generates for `capstan:provider/cloud-provider-world` (0.1.0; with
/// the `v0_2` feature, 0.2.0; with `v0_3`, 0.3.0; with `v0_4`, 0.4.0; with `v0_5`, 0.5.0).
#[cfg(not(any(feature = "v0_2", feature = "v0_3")))]
#[allow(missing_docs, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "cloud-provider-world",
        path: "../../wit/since_v0.1.0",
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "capstan_provider_sdk::bindings",
        additional_derives: [PartialEq, Clone],
        additional_type_attributes: {
            "capstan:provider/kube@0.1.0/list-options": [#[derive(Default)]],
        },
    });
}

/// `wit-bindgen`'s bindings for a contract with `wasi:http/outgoing-handler` (bound to the `wasip2`
/// crate's types, so any client built on it works) and `wasi:config/store`: 0.2 and later.
#[cfg(any(feature = "v0_2", feature = "v0_3"))]
macro_rules! bindings_with_wasi_http {
    ($path:literal, $list_options:literal) => {
        wit_bindgen::generate!({
            world: "cloud-provider-world",
            path: $path,
            pub_export_macro: true,
            export_macro_name: "export",
            default_bindings_module: "capstan_provider_sdk::bindings",
            additional_derives: [PartialEq, Clone],
            additional_type_attributes: {
                $list_options: [#[derive(Default)]],
            },
            with: {
                "wasi:http/types@0.2.12": wasip2::http::types,
                "wasi:http/outgoing-handler@0.2.12": wasip2::http::outgoing_handler,
                "wasi:io/error@0.2.12": wasip2::io::error,
                "wasi:io/poll@0.2.12": wasip2::io::poll,
                "wasi:io/streams@0.2.12": wasip2::io::streams,
                "wasi:clocks/monotonic-clock@0.2.12": wasip2::clocks::monotonic_clock,
                "wasi:config/store@0.2.0-rc.1": generate,
            },
        });
    };
}

/// The bindings for `capstan:provider/cloud-provider-world@0.2.0`: 0.1's plus
/// `wasi:http/outgoing-handler` and `wasi:config/store`.
#[cfg(all(feature = "v0_2", not(feature = "v0_3")))]
#[allow(missing_docs, clippy::all)]
pub mod bindings {
    bindings_with_wasi_http!(
        "../../wit/since_v0.2.0",
        "capstan:provider/kube@0.2.0/list-options"
    );
}

/// The bindings for `capstan:provider/cloud-provider-world@0.3.0`: 0.2's, with paged lists
/// (`list-options.continue-token`). Wins over `v0_2` when both are on (cargo unifies features).
#[cfg(all(feature = "v0_3", not(feature = "v0_4")))]
#[allow(missing_docs, clippy::all)]
pub mod bindings {
    bindings_with_wasi_http!(
        "../../wit/since_v0.3.0",
        "capstan:provider/kube@0.3.0/list-options"
    );
}

/// The bindings for `capstan:provider/cloud-provider-world@0.4.0`: 0.3's, with Karpenter v1.15's
/// contract in the export and the `lifecycle` interface.
#[cfg(all(feature = "v0_4", not(feature = "v0_5")))]
#[allow(missing_docs, clippy::all)]
pub mod bindings {
    bindings_with_wasi_http!(
        "../../wit/since_v0.4.0",
        "capstan:provider/kube@0.4.0/list-options"
    );
}

/// The bindings for `capstan:provider/cloud-provider-world@0.5.0`: 0.4's, with the `devices`
/// interface and `get-instance-types` answering [`devices::InstanceTypes`].
#[cfg(feature = "v0_5")]
#[allow(missing_docs, clippy::all)]
pub mod bindings {
    bindings_with_wasi_http!(
        "../../wit/since_v0.5.0",
        "capstan:provider/kube@0.5.0/list-options"
    );
}

/// Declares the node class kinds the provider serves: embeds the file at `$path` (as
/// `include_bytes!` takes it; an absolute path built from `CARGO_MANIFEST_DIR` is safest), a YAML list of their cluster-scoped
/// `apiextensions.k8s.io/v1` CustomResourceDefinitions, in the component's
/// `capstan:node-class-crds` custom section. The host serves these kinds for the provider and
/// `capstan provider package` ships the CRDs; the provider receives an object of such a kind as
/// [`params::ServedObject`] in `node-class.parameters`.
///
/// ```ignore
/// capstan_provider_sdk::declare_node_class_crds!(concat!(env!("CARGO_MANIFEST_DIR"), "/node-class-crds.yaml"));
/// ```
#[macro_export]
macro_rules! declare_node_class_crds {
    ($path:expr) => {
        #[cfg(target_arch = "wasm32")]
        #[used]
        #[unsafe(link_section = "capstan:node-class-crds")]
        static CAPSTAN_NODE_CLASS_CRDS: [u8; include_bytes!($path).len()] = *include_bytes!($path);
    };
}

/// Registers a type implementing [`Guest`] as this component's `cloud-provider` export.
///
/// Invoke it once, in the provider crate: `capstan_provider_sdk::export_provider!(MyCloud);`
///
/// The exports exist only when compiling for `wasm32` (their symbol names, such as
/// `capstan:provider/cloud-provider@0.1.0#create`, cannot be exported from a native shared
/// library); natively the macro only checks that the type implements [`Guest`], so provider crates
/// still build, lint and unit-test on the host.
#[macro_export]
macro_rules! export_provider {
    ($ty:ident) => {
        #[cfg(target_arch = "wasm32")]
        $crate::bindings::export!($ty with_types_in $crate::bindings);
        #[cfg(not(target_arch = "wasm32"))]
        const _: () = {
            fn implements_guest<T: $crate::Guest>() {}
            let _ = implements_guest::<$ty>;
        };
    };
}

/// The trait a provider implements: Karpenter's CloudProvider surface.
pub use bindings::exports::capstan::provider::cloud_provider::Guest;

pub use bindings::capstan::provider::types::{
    Amount, Catalog, CatalogInstanceType, CatalogOffering, CatalogOverhead, CatalogRequirement,
    CreateFailure, KeyValue, NodeClaim, NodeClass, NodePool, Operator, ProviderError, Requirement,
    Resource, Span, Taint, TaintEffect,
};

/// A repair policy of contracts 0.1 to 0.3 (0.4's are [`RepairRule`]s).
#[cfg(not(feature = "v0_4"))]
pub use bindings::capstan::provider::types::RepairPolicy;

/// What contract 0.4 adds (its `lifecycle` interface).
#[cfg(feature = "v0_4")]
pub use bindings::capstan::provider::lifecycle::{
    RebootError, Registration, RegistrationWait, RepairAction, RepairRule, VolumeLimit,
};

/// The answer of `get-instance-types` under 0.4: the catalog and its volume limits.
#[cfg(all(feature = "v0_4", not(feature = "v0_5")))]
pub use bindings::capstan::provider::lifecycle::InstanceTypes;

/// What contract 0.5 adds (its `devices` interface): the DRA devices of instance types, as the
/// ResourceSlices their drivers will publish. Kept in a module of its own: its `Device`,
/// `Attribute` and `Quantity` would shadow other names at the crate root.
#[cfg(feature = "v0_5")]
pub use bindings::capstan::provider::devices;

/// The answer of `get-instance-types` under 0.5: 0.4's and the devices.
#[cfg(feature = "v0_5")]
pub use devices::InstanceTypes;

pub use catalog::{CatalogBuilder, InstanceTypeBuilder};

/// Karpenter's usual node auto-repair: replace a node whose `Ready` condition has been `False` or
/// `Unknown` for `toleration_seconds`.
#[cfg(not(feature = "v0_4"))]
pub fn ready_repair_policies(toleration_seconds: u64) -> Vec<RepairPolicy> {
    ["False", "Unknown"]
        .into_iter()
        .map(|status| RepairPolicy {
            condition_type: "Ready".to_string(),
            condition_status: status.to_string(),
            toleration_seconds,
        })
        .collect()
}
/// The shared model of requirements, quantities, labels and taints (`capstan-model`).
pub use capstan_model as model;
/// Well-known Kubernetes and Karpenter label keys, taint keys and values.
pub use capstan_model::labels;
/// Kubernetes quantities (`"500m"`, `"16Gi"`, `"2e3"`) as exact integers.
pub use capstan_model::quantity;
pub use quantity::Quantity;
pub use requirements::Requirements;
pub use resources::ResourceList;

/// Re-exported so generated code and macros resolve the runtime through this crate.
#[doc(hidden)]
pub use wit_bindgen;

impl Resource {
    /// A named quantity: `Resource::new("cpu", "4")`.
    pub fn new(name: impl Into<String>, quantity: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            quantity: quantity.into(),
        }
    }
}

impl KeyValue {
    /// A label or annotation.
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
        }
    }
}

impl Taint {
    /// A taint with a value.
    pub fn new(key: impl Into<String>, value: Option<String>, effect: TaintEffect) -> Self {
        Self {
            key: key.into(),
            value,
            effect,
        }
    }
}

impl From<TaintEffect> for model::TaintEffect {
    fn from(effect: TaintEffect) -> Self {
        match effect {
            TaintEffect::NoSchedule => model::TaintEffect::NoSchedule,
            TaintEffect::PreferNoSchedule => model::TaintEffect::PreferNoSchedule,
            TaintEffect::NoExecute => model::TaintEffect::NoExecute,
        }
    }
}

impl From<model::TaintEffect> for TaintEffect {
    fn from(effect: model::TaintEffect) -> Self {
        match effect {
            model::TaintEffect::NoSchedule => TaintEffect::NoSchedule,
            model::TaintEffect::PreferNoSchedule => TaintEffect::PreferNoSchedule,
            model::TaintEffect::NoExecute => TaintEffect::NoExecute,
        }
    }
}

impl From<&Taint> for model::Taint {
    fn from(taint: &Taint) -> Self {
        model::Taint::new(
            taint.key.clone(),
            taint.value.clone().unwrap_or_default(),
            taint.effect.into(),
        )
    }
}

impl TaintEffect {
    /// The Kubernetes spelling (`NoSchedule`, `PreferNoSchedule`, `NoExecute`).
    pub fn as_str(self) -> &'static str {
        model::TaintEffect::from(self).as_str()
    }

    /// Parses the Kubernetes spelling.
    pub fn parse(s: &str) -> Option<Self> {
        model::TaintEffect::parse(s).map(Into::into)
    }
}

impl ProviderError {
    /// The kebab-case WIT case name (`not-found`, `create-failed`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            ProviderError::NotFound(_) => "not-found",
            ProviderError::InsufficientCapacity(_) => "insufficient-capacity",
            ProviderError::NodeClassNotReady(_) => "node-class-not-ready",
            ProviderError::CreateFailed(_) => "create-failed",
            ProviderError::Retryable(_) => "retryable",
            ProviderError::Invalid(_) => "invalid",
        }
    }

    /// A `create-failed` error.
    pub fn create_failed(reason: impl Into<String>, message: impl Into<String>) -> Self {
        ProviderError::CreateFailed(CreateFailure {
            reason: reason.into(),
            message: message.into(),
        })
    }
}

/// Looks a key up in a label or annotation list (the last entry wins, as when building a map).
pub fn lookup<'a>(pairs: &'a [KeyValue], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .rev()
        .find(|kv| kv.key == key)
        .map(|kv| kv.value.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_takes_the_last_entry() {
        let pairs = vec![KeyValue::new("a", "1"), KeyValue::new("a", "2")];
        assert_eq!(lookup(&pairs, "a"), Some("2"));
        assert_eq!(lookup(&pairs, "b"), None);
    }

    #[test]
    fn taint_effects_round_trip() {
        for effect in [
            TaintEffect::NoSchedule,
            TaintEffect::PreferNoSchedule,
            TaintEffect::NoExecute,
        ] {
            assert_eq!(TaintEffect::parse(effect.as_str()), Some(effect));
        }
        assert_eq!(TaintEffect::parse("Nope"), None);
    }

    #[test]
    fn provider_error_kinds_are_kebab_case() {
        assert_eq!(
            ProviderError::create_failed("R", "m").kind(),
            "create-failed"
        );
        assert_eq!(
            ProviderError::InsufficientCapacity(String::new()).kind(),
            "insufficient-capacity"
        );
    }
}
