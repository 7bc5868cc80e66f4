//! A loaded provider, and its calls.
//!
//! [`ProviderPre`] holds what is prepared once per component: the compiled component, its
//! pre-linked instance (`InstancePre`, wrapped in the bindings' `*Pre`), the limits and the
//! provider's capabilities. Every call then gets a fresh [`Store`] and instance, so a trap, a
//! runaway loop or a memory bomb kills that call only: the next call starts clean, and calls in
//! flight are unaffected.
//!
//! Each call is bounded four ways: a concurrency slot (a semaphore per provider), memory (the
//! store's resource limiter), CPU (epoch ticks counted while the guest runs; the guest also yields
//! to the executor every tick, so a spinning guest never starves other tasks), and wall-clock time
//! (per function; `create` gets longer).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use wasmtime::{PoolConcurrencyLimitError, Store, Trap, UpdateDeadline, WasmBacktrace};

use crate::capability::Capabilities;
use crate::runtime::bindings::WitVersion;
use crate::runtime::bindings::devices::InstanceTypes;
use crate::runtime::bindings::lifecycle::{
    self, RebootError, Registration, RepairAction, RepairRule,
};
use crate::runtime::bindings::types::{
    Catalog, NodeClaim, NodeClass, NodePool, ProviderError, RepairPolicy,
};
use crate::runtime::bindings::{
    since_v0_1_0, since_v0_2_0, since_v0_3_0, since_v0_4_0, since_v0_5_0,
};
use crate::runtime::call_state::CallState;
use crate::runtime::engine::CapstanEngine;
use crate::runtime::limits::Limits;
use crate::runtime::node_class_kinds::DeclaredKind;
use crate::runtime::validate::ProviderExport;

/// Why a call failed. Only [`CallError::Provider`] comes from the provider's own logic; the others
/// are the host stopping or refusing the call.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// The provider returned one of its typed errors.
    #[error("{function}: {}", describe_provider_error(.error))]
    Provider {
        /// The WIT function.
        function: &'static str,
        /// The provider's error.
        error: ProviderError,
    },
    /// The guest trapped (a panic, an `unreachable`, an out-of-bounds access...).
    #[error("{function}: the provider trapped: {message}{}", stderr_suffix(.stderr))]
    Trap {
        /// The WIT function.
        function: &'static str,
        /// What happened (e.g. `wasm trap: wasm 'unreachable' instruction executed`).
        message: String,
        /// The wasm backtrace, if wasmtime captured one.
        backtrace: String,
        /// The end of what the guest wrote to stderr (a Rust panic message lands here).
        stderr: String,
    },
    /// The call used up its CPU time.
    #[error("{function}: the provider exceeded its CPU limit of {limit:?}")]
    CpuLimit {
        /// The WIT function.
        function: &'static str,
        /// The limit.
        limit: Duration,
    },
    /// The call tried to grow its memory past the limit.
    #[error("{function}: the provider exceeded its memory limit of {limit} bytes")]
    MemoryLimit {
        /// The WIT function.
        function: &'static str,
        /// The limit in bytes.
        limit: u64,
    },
    /// The call did not finish in time (the guest is dropped where it was suspended).
    #[error("{function}: the provider did not answer within {limit:?}")]
    WallTimeout {
        /// The WIT function.
        function: &'static str,
        /// The limit.
        limit: Duration,
    },
    /// No slot for the call: the provider's concurrency limit stayed full for the whole wall-clock
    /// limit, or the engine's instance pool is exhausted.
    #[error("{function}: overloaded: {reason}")]
    Overloaded {
        /// The WIT function.
        function: &'static str,
        /// Which limit was full.
        reason: String,
    },
    /// A fresh instance could not be created.
    #[error("{function}: cannot instantiate the provider: {message}")]
    Instantiate {
        /// The WIT function.
        function: &'static str,
        /// Wasmtime's description.
        message: String,
    },
}

impl CallError {
    /// The WIT function the call was to.
    pub fn function(&self) -> &'static str {
        match self {
            CallError::Provider { function, .. }
            | CallError::Trap { function, .. }
            | CallError::CpuLimit { function, .. }
            | CallError::MemoryLimit { function, .. }
            | CallError::WallTimeout { function, .. }
            | CallError::Overloaded { function, .. }
            | CallError::Instantiate { function, .. } => function,
        }
    }

    /// The provider's own error, if that is what this is.
    pub fn provider_error(&self) -> Option<&ProviderError> {
        match self {
            CallError::Provider { error, .. } => Some(error),
            _ => None,
        }
    }
}

fn stderr_suffix(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!("\nguest stderr:\n{stderr}")
    }
}

/// `kind: message` of a provider error, with the WIT variant's name as the kind.
pub fn describe_provider_error(error: &ProviderError) -> String {
    match error {
        ProviderError::NotFound(m) => format!("not-found: {m}"),
        ProviderError::InsufficientCapacity(m) => format!("insufficient-capacity: {m}"),
        ProviderError::NodeClassNotReady(m) => format!("node-class-not-ready: {m}"),
        ProviderError::CreateFailed(f) => format!("create-failed: {}: {}", f.reason, f.message),
        ProviderError::Retryable(m) => format!("retryable: {m}"),
        ProviderError::Invalid(m) => format!("invalid: {m}"),
    }
}

/// Counters of a provider's calls.
#[derive(Debug, Default)]
struct Counters {
    in_flight: AtomicUsize,
    peak_in_flight: AtomicUsize,
    calls: AtomicU64,
    failed: AtomicU64,
    peak_memory: AtomicUsize,
}

/// A copy of a provider's call counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallStats {
    /// Calls running now.
    pub in_flight: usize,
    /// The most calls that ever ran at once.
    pub peak_in_flight: usize,
    /// Calls started (that got a slot).
    pub calls: u64,
    /// Calls that failed for any reason but the provider's own typed error.
    pub failed: u64,
    /// The most linear memory one call's instance ever had, in bytes (what a call costs: a
    /// Python provider's instance starts with CPython's heap).
    pub peak_memory_bytes: usize,
}

struct InFlight<'a>(&'a Counters);

impl<'a> InFlight<'a> {
    fn enter(counters: &'a Counters) -> Self {
        counters.calls.fetch_add(1, Ordering::Relaxed);
        let now = counters.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        counters.peak_in_flight.fetch_max(now, Ordering::SeqCst);
        Self(counters)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Which bindings run the component.
pub(crate) enum Pre {
    V0_1(since_v0_1_0::CloudProviderWorldPre<CallState>),
    V0_2(since_v0_2_0::CloudProviderWorldPre<CallState>),
    V0_3(since_v0_3_0::CloudProviderWorldPre<CallState>),
    V0_4(since_v0_4_0::CloudProviderWorldPre<CallState>),
    V0_5(since_v0_5_0::CloudProviderWorldPre<CallState>),
}

/// An instance of the component, by the bindings that run it.
enum World {
    V0_1(since_v0_1_0::CloudProviderWorld),
    V0_2(since_v0_2_0::CloudProviderWorld),
    V0_3(since_v0_3_0::CloudProviderWorld),
    V0_4(since_v0_4_0::CloudProviderWorld),
    V0_5(since_v0_5_0::CloudProviderWorld),
}

/// Calls `$method` of the `cloud-provider` export of `$call`'s instance, whichever version it
/// is. Where 0.4 changed a function's result, `$older` turns an answer of 0.1 to 0.3 into 0.4's;
/// where 0.5 changed it, `$v0_4` turns 0.4's into 0.5's (the newest answer is the host's).
macro_rules! guest_call {
    ($call:ident, $method:ident($($arg:expr),*)) => {
        guest_call!($call, $method($($arg),*), ::std::convert::identity)
    };
    ($call:ident, $method:ident($($arg:expr),*), $older:expr) => {
        guest_call!($call, $method($($arg),*), $older, ::std::convert::identity)
    };
    ($call:ident, $method:ident($($arg:expr),*), $older:expr, $v0_4:expr) => {
        match &$call.world {
            World::V0_1(world) => world
                .capstan_provider_cloud_provider()
                .$method(&mut $call.store $(, $arg)*)
                .await
                .map($older),
            World::V0_2(world) => world
                .capstan_provider_cloud_provider()
                .$method(&mut $call.store $(, $arg)*)
                .await
                .map($older),
            World::V0_3(world) => world
                .capstan_provider_cloud_provider()
                .$method(&mut $call.store $(, $arg)*)
                .await
                .map($older),
            World::V0_4(world) => world
                .capstan_provider_cloud_provider()
                .$method(&mut $call.store $(, $arg)*)
                .await
                .map($v0_4),
            World::V0_5(world) => {
                world.capstan_provider_cloud_provider().$method(&mut $call.store $(, $arg)*).await
            }
        }
    };
}

/// Calls `$method`, a function of the `cloud-provider` export new in 0.4, on `$call`'s instance;
/// an older instance answers `$before` without a call.
macro_rules! guest_call_since_v0_4 {
    ($call:ident, $method:ident($($arg:expr),*), $before:expr) => {
        match &$call.world {
            World::V0_4(world) => {
                world.capstan_provider_cloud_provider().$method(&mut $call.store $(, $arg)*).await
            }
            World::V0_5(world) => {
                world.capstan_provider_cloud_provider().$method(&mut $call.store $(, $arg)*).await
            }
            World::V0_1(_) | World::V0_2(_) | World::V0_3(_) => Ok($before),
        }
    };
}

struct Inner {
    engine: CapstanEngine,
    pre: Pre,
    export: ProviderExport,
    sha256: String,
    limits: Limits,
    caps: Arc<Capabilities>,
    node_class_kinds: Vec<DeclaredKind>,
    permits: Semaphore,
    counters: Counters,
}

/// A provider ready to be called: compiled, linked and type-checked once; instantiated per call.
/// Cheap to clone (shared).
#[derive(Clone)]
pub struct ProviderPre {
    inner: Arc<Inner>,
}

impl fmt::Debug for ProviderPre {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderPre")
            .field("provider", &self.inner.caps.provider())
            .field("export", &self.inner.export)
            .field("sha256", &self.inner.sha256)
            .field("limits", &self.inner.limits)
            .finish()
    }
}

/// One call in progress: its store and instance.
struct Call<'a> {
    provider: &'a Inner,
    function: &'static str,
    store: Store<CallState>,
    world: World,
}

impl ProviderPre {
    pub(crate) fn new(
        engine: CapstanEngine,
        pre: Pre,
        export: ProviderExport,
        sha256: String,
        mut limits: Limits,
        caps: Arc<Capabilities>,
    ) -> Self {
        limits.memory_bytes = limits.memory_bytes.min(engine.memory_ceiling());
        limits.concurrency = limits.concurrency.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            inner: Arc::new(Inner {
                engine,
                pre,
                export,
                sha256,
                permits: Semaphore::new(limits.concurrency),
                limits,
                caps,
                node_class_kinds: Vec::new(),
                counters: Counters::default(),
            }),
        }
    }

    /// This provider, declaring `kinds` (from its component; set before it is shared).
    pub(crate) fn with_node_class_kinds(mut self, kinds: Vec<DeclaredKind>) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.node_class_kinds = kinds;
        }
        self
    }

    /// The node class kinds the component declares (see [`crate::runtime::node_class_kinds`]).
    pub fn node_class_kinds(&self) -> &[DeclaredKind] {
        &self.inner.node_class_kinds
    }

    /// The exported contract.
    pub fn export(&self) -> &ProviderExport {
        &self.inner.export
    }

    /// Hex sha256 of the component bytes.
    pub fn sha256(&self) -> &str {
        &self.inner.sha256
    }

    /// The limits in force (after capping memory at the engine's ceiling).
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// The provider's capabilities.
    pub fn capabilities(&self) -> &Arc<Capabilities> {
        &self.inner.caps
    }

    /// The call counters.
    pub fn stats(&self) -> CallStats {
        let c = &self.inner.counters;
        CallStats {
            in_flight: c.in_flight.load(Ordering::SeqCst),
            peak_in_flight: c.peak_in_flight.load(Ordering::SeqCst),
            calls: c.calls.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            peak_memory_bytes: c.peak_memory.load(Ordering::Relaxed),
        }
    }

    /// `name()`: the provider's self-reported name.
    pub async fn name(&self) -> Result<String, CallError> {
        self.guarded("name", async {
            let mut call = self.instantiate("name").await?;
            let result = guest_call!(call, call_name());
            call.finish(result)
        })
        .await
    }

    /// `get-instance-types(pool, class)`: the provider's catalog as it sent it (check it with
    /// [`crate::provider::convert::catalog::CatalogView`] before use), with the volume limits of
    /// its instance types (none before 0.4) and their devices (none before 0.5).
    pub async fn get_instance_types(
        &self,
        pool: &NodePool,
        class: &NodeClass,
    ) -> Result<InstanceTypes, CallError> {
        const F: &str = "get-instance-types";
        self.guarded(F, async {
            let mut call = self.instantiate(F).await?;
            let result = guest_call!(
                call,
                call_get_instance_types(pool, class),
                |answer: Result<Catalog, ProviderError>| {
                    answer.map(|catalog| InstanceTypes {
                        catalog,
                        volume_limits: Vec::new(),
                        slices: Vec::new(),
                        devices: Vec::new(),
                    })
                },
                |answer: Result<lifecycle::InstanceTypes, ProviderError>| {
                    answer.map(|answer| InstanceTypes {
                        catalog: answer.catalog,
                        volume_limits: answer.volume_limits,
                        slices: Vec::new(),
                        devices: Vec::new(),
                    })
                }
            );
            provider_result(F, call.finish(result)?)
        })
        .await
    }

    /// `create(claim, class)`, with the longer `create` wall-clock limit.
    pub async fn create(
        &self,
        claim: &NodeClaim,
        class: &NodeClass,
    ) -> Result<NodeClaim, CallError> {
        const F: &str = "create";
        self.guarded(F, async {
            let mut call = self.instantiate(F).await?;
            call.store.data_mut().launching = Some(claim.name.clone());
            let result = guest_call!(call, call_create(claim, class));
            provider_result(F, call.finish(result)?)
        })
        .await
    }

    /// `delete(claim)`.
    pub async fn delete(&self, claim: &NodeClaim) -> Result<(), CallError> {
        const F: &str = "delete";
        self.guarded(F, async {
            let mut call = self.instantiate(F).await?;
            let result = guest_call!(call, call_delete(claim));
            provider_result(F, call.finish(result)?)
        })
        .await
    }

    /// `get(provider-id)`.
    pub async fn get(&self, provider_id: &str) -> Result<NodeClaim, CallError> {
        const F: &str = "get";
        self.guarded(F, async {
            let mut call = self.instantiate(F).await?;
            let result = guest_call!(call, call_get(provider_id));
            provider_result(F, call.finish(result)?)
        })
        .await
    }

    /// `list()`.
    pub async fn list(&self) -> Result<Vec<NodeClaim>, CallError> {
        const F: &str = "list";
        self.guarded(F, async {
            let mut call = self.instantiate(F).await?;
            let result = guest_call!(call, call_list());
            provider_result(F, call.finish(result)?)
        })
        .await
    }

    /// `is-drifted(claim, class)`.
    pub async fn is_drifted(
        &self,
        claim: &NodeClaim,
        class: &NodeClass,
    ) -> Result<Option<String>, CallError> {
        const F: &str = "is-drifted";
        self.guarded(F, async {
            let mut call = self.instantiate(F).await?;
            let result = guest_call!(call, call_is_drifted(claim, class));
            provider_result(F, call.finish(result)?)
        })
        .await
    }

    /// `repair-policies()`: the provider's repair rules; before 0.4, its policies as rules that
    /// replace the node after the toleration, whatever the condition's reason, draining as the
    /// claim says (what Karpenter v1.14 did with them).
    pub async fn repair_policies(&self) -> Result<Vec<RepairRule>, CallError> {
        const F: &str = "repair-policies";
        self.guarded(F, async {
            let mut call = self.instantiate(F).await?;
            let result = guest_call!(call, call_repair_policies(), |policies: Vec<
                RepairPolicy,
            >| policies
                .into_iter()
                .enumerate()
                .map(|(i, policy)| replace_rule(policy, i == 0))
                .collect());
            call.finish(result)
        })
        .await
    }

    /// `reboot(claim, operation-id)`: `Ok(Err(_))` is the provider's answer that it did not start a
    /// reboot; a provider of a version before 0.4 cannot reboot (`not-implemented`, not called).
    pub async fn reboot(
        &self,
        claim: &NodeClaim,
        operation_id: &str,
    ) -> Result<Result<(), RebootError>, CallError> {
        const F: &str = "reboot";
        if self.inner.export.wit < WitVersion::V0_4 {
            return Ok(Err(RebootError::NotImplemented));
        }
        self.guarded(F, async {
            let mut call = self.instantiate(F).await?;
            let result = guest_call_since_v0_4!(
                call,
                call_reboot(claim, operation_id),
                Err(RebootError::NotImplemented)
            );
            call.finish(result)
        })
        .await
    }

    /// `registered(claim)`, the registration hook: a provider of a version before 0.4 has none
    /// (`ready`, not called).
    pub async fn registered(&self, claim: &NodeClaim) -> Result<Registration, CallError> {
        const F: &str = "registered";
        if self.inner.export.wit < WitVersion::V0_4 {
            return Ok(Registration::Ready);
        }
        self.guarded(F, async {
            let mut call = self.instantiate(F).await?;
            let result =
                guest_call_since_v0_4!(call, call_registered(claim), Ok(Registration::Ready));
            provider_result(F, call.finish(result)?)
        })
        .await
    }

    /// `validate-node-class(class)`.
    pub async fn validate_node_class(&self, class: &NodeClass) -> Result<(), CallError> {
        const F: &str = "validate-node-class";
        self.guarded(F, async {
            let mut call = self.instantiate(F).await?;
            let result = guest_call!(call, call_validate_node_class(class));
            provider_result(F, call.finish(result)?)
        })
        .await
    }

    /// Runs `call` in a concurrency slot, within the function's wall-clock limit (waiting for the
    /// slot counts against it).
    async fn guarded<R>(
        &self,
        function: &'static str,
        call: impl Future<Output = Result<R, CallError>>,
    ) -> Result<R, CallError> {
        let inner = &*self.inner;
        let limit = inner.limits.wall_limit(function);
        let started = Instant::now();
        let permit = match tokio::time::timeout(limit, inner.permits.acquire()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_closed)) => {
                return Err(CallError::Overloaded {
                    function,
                    reason: "the provider is shutting down".into(),
                });
            }
            Err(_elapsed) => {
                return Err(CallError::Overloaded {
                    function,
                    reason: format!(
                        "all {} concurrency slots stayed busy for {limit:?}",
                        inner.limits.concurrency
                    ),
                });
            }
        };
        let in_flight = InFlight::enter(&inner.counters);
        let remaining = limit.saturating_sub(started.elapsed());
        let result = match tokio::time::timeout(remaining, call).await {
            Ok(result) => result,
            Err(_elapsed) => Err(CallError::WallTimeout { function, limit }),
        };
        drop(in_flight);
        drop(permit);
        if let Err(err) = &result
            && !matches!(err, CallError::Provider { .. })
        {
            inner.counters.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(provider = %inner.caps.provider(), function, error = %err, "provider call failed");
            if let CallError::Trap { backtrace, .. } = err
                && !backtrace.is_empty()
            {
                tracing::debug!(provider = %inner.caps.provider(), function, %backtrace, "trap backtrace");
            }
        }
        result
    }

    /// A fresh store and instance for one call.
    async fn instantiate(&self, function: &'static str) -> Result<Call<'_>, CallError> {
        let inner = &*self.inner;
        let engine = inner.engine.engine();
        let mut store = Store::new(
            engine,
            CallState::new(Arc::clone(&inner.caps), &inner.limits),
        );
        store.limiter(|state| &mut state.limiter);
        let budget = inner.engine.ticks(inner.limits.cpu_time);
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |mut context| {
            let state = context.data_mut();
            state.cpu_ticks += 1;
            if state.cpu_ticks >= budget {
                state.cpu_exhausted = true;
                Ok(UpdateDeadline::Interrupt)
            } else {
                Ok(UpdateDeadline::Yield(1))
            }
        });
        let world = match &inner.pre {
            Pre::V0_1(pre) => pre.instantiate_async(&mut store).await.map(World::V0_1),
            Pre::V0_2(pre) => pre.instantiate_async(&mut store).await.map(World::V0_2),
            Pre::V0_3(pre) => pre.instantiate_async(&mut store).await.map(World::V0_3),
            Pre::V0_4(pre) => pre.instantiate_async(&mut store).await.map(World::V0_4),
            Pre::V0_5(pre) => pre.instantiate_async(&mut store).await.map(World::V0_5),
        };
        match world {
            Ok(world) => Ok(Call {
                provider: inner,
                function,
                store,
                world,
            }),
            Err(err) => Err(classify(inner, function, &store, err, true)),
        }
    }
}

impl Call<'_> {
    /// The call's result, with a wasmtime error classified. The store (and instance) is dropped
    /// with `self`, trap or not.
    fn finish<T>(self, result: wasmtime::Result<T>) -> Result<T, CallError> {
        self.provider
            .counters
            .peak_memory
            .fetch_max(self.store.data().limiter.memory_used(), Ordering::Relaxed);
        result.map_err(|err| classify(self.provider, self.function, &self.store, err, false))
    }
}

/// A repair policy of a contract before 0.4 as the rule it always was: replace the node once the
/// condition has lasted the toleration, whatever its reason, draining as the claim says. The first
/// is the set's default (an empty expression; a set has one), the others match every reason, so
/// each applies to its own condition as before.
fn replace_rule(policy: RepairPolicy, default: bool) -> RepairRule {
    RepairRule {
        condition_type: policy.condition_type,
        condition_status: policy.condition_status,
        reason_regex: if default { String::new() } else { ".*".into() },
        toleration_seconds: policy.toleration_seconds,
        termination_grace_seconds: None,
        priority: 0,
        action: RepairAction::Replace,
    }
}

fn provider_result<T>(
    function: &'static str,
    result: Result<T, ProviderError>,
) -> Result<T, CallError> {
    result.map_err(|error| CallError::Provider { function, error })
}

fn classify(
    inner: &Inner,
    function: &'static str,
    store: &Store<CallState>,
    err: wasmtime::Error,
    instantiating: bool,
) -> CallError {
    let state = store.data();
    if state.cpu_exhausted {
        return CallError::CpuLimit {
            function,
            limit: inner.limits.cpu_time,
        };
    }
    if state.limiter.memory_refused() {
        return CallError::MemoryLimit {
            function,
            limit: inner.limits.memory_bytes,
        };
    }
    if err.is::<PoolConcurrencyLimitError>() {
        return CallError::Overloaded {
            function,
            reason: format!("{err}"),
        };
    }
    if instantiating {
        return CallError::Instantiate {
            function,
            message: format!("{err:#}"),
        };
    }
    let message = match err.downcast_ref::<Trap>() {
        Some(trap) => trap.to_string(),
        None => err.root_cause().to_string(),
    };
    let backtrace = err
        .downcast_ref::<WasmBacktrace>()
        .map(|bt| bt.to_string())
        .unwrap_or_default();
    CallError::Trap {
        function,
        message,
        backtrace,
        stderr: state.stderr.text(),
    }
}
