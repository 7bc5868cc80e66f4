//! The WebAssembly runtime: turns component bytes into a [`ProviderPre`] and runs its calls in
//! fresh, bounded instances.
//!
//! ```text
//! bytes ─ validate ─ compile (or load from the cache) ─ link + type-check once ─ ProviderPre
//!                                                     per call: Store + instance ─┘
//! ```
//!
//! - [`engine`]: the one wasmtime engine (component model, async, epoch interruption, pooling
//!   allocator where possible).
//! - [`cache`]: compiled components on disk, through a `cap_std` directory handle.
//! - [`validate`]: refusing bad input with an error that names the problem.
//! - [`bindings`]: one `bindgen!` per supported WIT version.
//! - [`provider`]: per-call instances, limits and typed errors.

pub mod bindings;
pub mod cache;
mod call_state;
pub mod engine;
pub mod limits;
pub mod node_class_kinds;
pub mod provider;
pub mod validate;

use std::sync::Arc;

use cap_std::fs::Dir;
use wasmtime::component::{Component, Linker};

pub use self::bindings::{WitVersion, devices, lifecycle, types};
pub use self::cache::{CacheOutcome, ComponentCache};
pub use self::engine::{Allocator, AllocatorChoice, CapstanEngine, EngineBuilder};
pub use self::limits::Limits;
pub use self::provider::{CallError, CallStats, ProviderPre};
pub use self::validate::{ComponentInfo, ProviderExport, ValidateError};

use self::bindings::{since_v0_1_0, since_v0_2_0, since_v0_3_0, since_v0_4_0, since_v0_5_0};
use self::call_state::CallState;
use crate::capability::Capabilities;

/// Why a component could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The bytes were refused before compiling.
    #[error(transparent)]
    Invalid(#[from] ValidateError),
    /// Compiling (or loading the compiled form) failed.
    #[error(transparent)]
    Compile(#[from] cache::CacheError),
    /// The component imports something this host does not provide.
    #[error("component cannot be linked: {0}")]
    Link(String),
    /// The component's exports do not have the types of the contract version it claims.
    #[error("component does not match the {interface} contract: {message}")]
    Mismatch {
        /// The exported interface.
        interface: String,
        /// Wasmtime's type-check error.
        message: String,
    },
    /// The engine could not be created.
    #[error(transparent)]
    Engine(#[from] engine::EngineError),
}

/// Builder for [`Runtime`].
#[derive(Debug, Default)]
pub struct RuntimeBuilder {
    engine: EngineBuilder,
    cache: Option<Dir>,
    max_component_size: Option<usize>,
}

impl RuntimeBuilder {
    /// Engine settings (allocator, instance count, memory ceiling, epoch tick).
    pub fn engine(mut self, engine: EngineBuilder) -> Self {
        self.engine = engine;
        self
    }

    /// Cache compiled components in `dir` (opened by the caller).
    pub fn cache_dir(mut self, dir: Dir) -> Self {
        self.cache = Some(dir);
        self
    }

    /// Refuse components larger than this (default
    /// [`validate::DEFAULT_MAX_COMPONENT_SIZE`]).
    pub fn max_component_size(mut self, bytes: usize) -> Self {
        self.max_component_size = Some(bytes);
        self
    }

    /// Creates the engine and the linkers.
    pub fn build(self) -> Result<Runtime, LoadError> {
        let engine = self.engine.build()?;
        let link_failed = |err: wasmtime::Error| {
            LoadError::Link(format!("cannot build the host linker: {err:#}"))
        };
        let linker_v0_1 = since_v0_1_0::linker(engine.engine()).map_err(link_failed)?;
        let linker_v0_2 = since_v0_2_0::linker(engine.engine()).map_err(link_failed)?;
        let linker_v0_3 = since_v0_3_0::linker(engine.engine()).map_err(link_failed)?;
        let linker_v0_4 = since_v0_4_0::linker(engine.engine()).map_err(link_failed)?;
        let linker_v0_5 = since_v0_5_0::linker(engine.engine()).map_err(link_failed)?;
        Ok(Runtime {
            engine,
            cache: self.cache.map(ComponentCache::new),
            linker_v0_1,
            linker_v0_2,
            linker_v0_3,
            linker_v0_4,
            linker_v0_5,
            max_component_size: self
                .max_component_size
                .unwrap_or(validate::DEFAULT_MAX_COMPONENT_SIZE),
        })
    }
}

/// The runtime: one engine, its cache and its linkers. Share it (`Arc`) across the process.
pub struct Runtime {
    engine: CapstanEngine,
    cache: Option<ComponentCache>,
    linker_v0_1: Linker<CallState>,
    linker_v0_2: Linker<CallState>,
    linker_v0_3: Linker<CallState>,
    linker_v0_4: Linker<CallState>,
    linker_v0_5: Linker<CallState>,
    max_component_size: usize,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("engine", &self.engine)
            .field("cache", &self.cache)
            .field("max_component_size", &self.max_component_size)
            .finish_non_exhaustive()
    }
}

/// A component that passed validation and compiled.
#[derive(Clone)]
pub struct Compiled {
    /// What it is.
    pub info: ComponentInfo,
    /// The contract it implements.
    pub export: ProviderExport,
    /// The compiled component.
    pub component: Component,
    /// Whether it came from the cache.
    pub outcome: CacheOutcome,
}

impl Runtime {
    /// A builder with the defaults.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// The engine.
    pub fn engine(&self) -> &CapstanEngine {
        &self.engine
    }

    /// The compiled-component cache, if configured.
    pub fn cache(&self) -> Option<&ComponentCache> {
        self.cache.as_ref()
    }

    /// The size limit of components.
    pub fn max_component_size(&self) -> usize {
        self.max_component_size
    }

    /// Validates and compiles `bytes` (through the cache if there is one). CPU-heavy on a cache
    /// miss: call it off the async executor (`spawn_blocking`).
    pub fn compile(&self, bytes: &[u8]) -> Result<Compiled, LoadError> {
        let (info, export) = validate::validate(bytes, self.max_component_size)?;
        let engine = self.engine.engine();
        let (component, outcome) = match &self.cache {
            Some(cache) => cache.load_or_compile(engine, bytes)?,
            None => {
                let component = cache::Precompiled::compile(engine, bytes)?.load(engine)?;
                (component, CacheOutcome::Uncached)
            }
        };
        tracing::debug!(sha256 = %info.sha256, ?outcome, wit = %export.wit, "component compiled");
        Ok(Compiled {
            info,
            export,
            component,
            outcome,
        })
    }

    /// Links and type-checks a compiled component into a provider with these limits and
    /// capabilities.
    pub fn instantiate_pre(
        &self,
        compiled: &Compiled,
        limits: Limits,
        caps: Arc<Capabilities>,
    ) -> Result<ProviderPre, LoadError> {
        let linker = match compiled.export.wit {
            WitVersion::V0_1 => &self.linker_v0_1,
            WitVersion::V0_2 => &self.linker_v0_2,
            WitVersion::V0_3 => &self.linker_v0_3,
            WitVersion::V0_4 => &self.linker_v0_4,
            WitVersion::V0_5 => &self.linker_v0_5,
        };
        let pre = linker
            .instantiate_pre(&compiled.component)
            .map_err(|err| LoadError::Link(format!("{err:#}")))?;
        let mismatch = |err: wasmtime::Error| LoadError::Mismatch {
            interface: compiled.export.interface.clone(),
            message: format!("{err:#}"),
        };
        bindings::typecheck_exports(&pre, &compiled.export.interface, compiled.export.wit)
            .map_err(mismatch)?;
        let pre = match compiled.export.wit {
            WitVersion::V0_1 => provider::Pre::V0_1(
                since_v0_1_0::CloudProviderWorldPre::new(pre).map_err(mismatch)?,
            ),
            WitVersion::V0_2 => provider::Pre::V0_2(
                since_v0_2_0::CloudProviderWorldPre::new(pre).map_err(mismatch)?,
            ),
            WitVersion::V0_3 => provider::Pre::V0_3(
                since_v0_3_0::CloudProviderWorldPre::new(pre).map_err(mismatch)?,
            ),
            WitVersion::V0_4 => provider::Pre::V0_4(
                since_v0_4_0::CloudProviderWorldPre::new(pre).map_err(mismatch)?,
            ),
            WitVersion::V0_5 => provider::Pre::V0_5(
                since_v0_5_0::CloudProviderWorldPre::new(pre).map_err(mismatch)?,
            ),
        };
        Ok(ProviderPre::new(
            self.engine.clone(),
            pre,
            compiled.export.clone(),
            compiled.info.sha256.clone(),
            limits,
            caps,
        )
        .with_node_class_kinds(compiled.info.node_class_kinds.clone()))
    }

    /// [`Runtime::compile`] then [`Runtime::instantiate_pre`].
    pub fn load(
        &self,
        bytes: &[u8],
        limits: Limits,
        caps: Arc<Capabilities>,
    ) -> Result<ProviderPre, LoadError> {
        let compiled = self.compile(bytes)?;
        self.instantiate_pre(&compiled, limits, caps)
    }
}
