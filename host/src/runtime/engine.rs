//! The one wasmtime [`Engine`] of the process.
//!
//! Every provider component is compiled for, and runs in, this engine. It enables the component
//! model, async host calls (guests run on fibers, so a provider waiting for the API server never
//! blocks a host thread) and epoch interruption, which a ticker thread drives so that each call can
//! be given a CPU deadline.
//!
//! The pooling instance allocator makes fresh instances cheap (one per call), but it reserves
//! address space for every slot up front. [`EngineBuilder::build`] tries it first when asked for
//! [`AllocatorChoice::Auto`] and falls back to on-demand allocation, with a warning, where the
//! reservation fails (e.g. under a `ulimit -v`).

use std::fmt;
use std::thread;
use std::time::Duration;

use wasmtime::{
    Config, Engine, EngineWeak, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig,
    Strategy,
};

/// The default period of the epoch ticker: CPU deadlines are measured in these ticks.
pub const DEFAULT_EPOCH_TICK: Duration = Duration::from_millis(5);
/// By default the pooling allocator has room for this many live component instances.
pub const DEFAULT_MAX_INSTANCES: u32 = 256;
/// Core instances reserved per component instance in the pooling allocator: enough for a Python
/// (componentize-py) component's 14.
pub const CORE_INSTANCES_PER_COMPONENT: u32 = 16;
/// By default no instance may have more linear memory than this (the per-provider memory limit is
/// capped here).
pub const DEFAULT_MEMORY_CEILING: u64 = 1 << 30;

/// Which instance allocator to ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AllocatorChoice {
    /// The pooling allocator if the address space allows it, else on-demand.
    #[default]
    Auto,
    /// The pooling allocator, or fail.
    Pooling,
    /// Plain `mmap` per instance.
    OnDemand,
}

/// The instance allocator an engine actually uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allocator {
    /// Pre-reserved slots, recycled between instances.
    Pooling,
    /// Memory mapped and unmapped per instance.
    OnDemand,
}

impl fmt::Display for Allocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Allocator::Pooling => "pooling",
            Allocator::OnDemand => "on-demand",
        })
    }
}

/// Failure to create the engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Wasmtime refused the configuration (or could not reserve the pool).
    #[error("cannot create the wasm engine with the {allocator} allocator: {message}")]
    Create {
        /// The allocator that was tried last.
        allocator: Allocator,
        /// Wasmtime's explanation.
        message: String,
    },
    /// The epoch ticker thread could not be started.
    #[error("cannot start the epoch ticker thread: {0}")]
    Ticker(#[source] std::io::Error),
    /// A setting is out of range.
    #[error("invalid engine setting: {0}")]
    Setting(String),
}

/// Builder for [`CapstanEngine`].
#[derive(Debug, Clone)]
pub struct EngineBuilder {
    allocator: AllocatorChoice,
    max_instances: u32,
    memory_ceiling: u64,
    epoch_tick: Duration,
    keep_resident: usize,
}

impl Default for EngineBuilder {
    fn default() -> Self {
        Self {
            allocator: AllocatorChoice::Auto,
            max_instances: DEFAULT_MAX_INSTANCES,
            memory_ceiling: DEFAULT_MEMORY_CEILING,
            epoch_tick: DEFAULT_EPOCH_TICK,
            keep_resident: 0,
        }
    }
}

impl EngineBuilder {
    /// Which allocator to use (default [`AllocatorChoice::Auto`]).
    pub fn allocator(mut self, choice: AllocatorChoice) -> Self {
        self.allocator = choice;
        self
    }

    /// How many component instances may be alive at once with the pooling allocator (the sum of
    /// all providers' concurrency limits should stay below it). Default
    /// [`DEFAULT_MAX_INSTANCES`].
    pub fn max_instances(mut self, count: u32) -> Self {
        self.max_instances = count;
        self
    }

    /// The most linear memory one instance may ever have, in bytes. Per-provider memory limits
    /// above it are capped to it. Default [`DEFAULT_MEMORY_CEILING`].
    pub fn memory_ceiling(mut self, bytes: u64) -> Self {
        self.memory_ceiling = bytes;
        self
    }

    /// The period of the epoch ticker (default [`DEFAULT_EPOCH_TICK`]). CPU limits are rounded up
    /// to whole ticks.
    pub fn epoch_tick(mut self, tick: Duration) -> Self {
        self.epoch_tick = tick;
        self
    }

    /// With the pooling allocator, how many bytes of each linear memory to keep resident (reset with
    /// `memset`) when an instance is freed, instead of returning them to the kernel. Saves page
    /// faults for guests that use the same memory call after call, at the cost of resident memory
    /// per slot. Default 0 (wasmtime's default: `madvise` everything).
    pub fn keep_resident(mut self, bytes: usize) -> Self {
        self.keep_resident = bytes;
        self
    }

    /// Creates the engine and starts its epoch ticker.
    pub fn build(self) -> Result<CapstanEngine, EngineError> {
        if self.max_instances == 0 {
            return Err(EngineError::Setting(
                "max_instances must be at least 1".into(),
            ));
        }
        if self.epoch_tick.is_zero() {
            return Err(EngineError::Setting("epoch_tick must be positive".into()));
        }
        let memory_ceiling = usize::try_from(self.memory_ceiling)
            .map_err(|_| EngineError::Setting("memory_ceiling does not fit in usize".into()))?;

        let (engine, allocator) = match self.allocator {
            AllocatorChoice::OnDemand => (self.create(None)?, Allocator::OnDemand),
            AllocatorChoice::Pooling => (
                self.create(Some(self.pooling_config(memory_ceiling)))?,
                Allocator::Pooling,
            ),
            AllocatorChoice::Auto => match self.create(Some(self.pooling_config(memory_ceiling))) {
                Ok(engine) => (engine, Allocator::Pooling),
                Err(err) => {
                    tracing::warn!(
                        error = %err,
                        "pooling allocator unavailable, falling back to on-demand allocation"
                    );
                    (self.create(None)?, Allocator::OnDemand)
                }
            },
        };
        start_epoch_ticker(engine.weak(), self.epoch_tick)?;
        tracing::info!(%allocator, tick = ?self.epoch_tick, "wasm engine ready");
        Ok(CapstanEngine {
            engine,
            allocator,
            epoch_tick: self.epoch_tick,
            memory_ceiling: self.memory_ceiling,
        })
    }

    fn pooling_config(&self, memory_ceiling: usize) -> PoolingAllocationConfig {
        let instances = self.max_instances;
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(instances)
            // A Rust wasm32-wasip2 component holds a handful of core instances (the program, the
            // WASI glue and shims), one or two memories and a few tables; a componentize-py
            // (Python) component holds 14 (CPython, libc, the WASI adapter and their shims), so
            // 16 per component keeps every instance slot usable whatever the providers' language
            // (address space mostly: slots are reserved up front, committed when used).
            .total_core_instances(instances.saturating_mul(CORE_INSTANCES_PER_COMPONENT))
            .total_memories(instances.saturating_mul(2))
            .total_tables(instances.saturating_mul(4))
            .total_stacks(instances)
            .max_memory_size(memory_ceiling)
            .linear_memory_keep_resident(self.keep_resident);
        pool
    }

    fn create(&self, pooling: Option<PoolingAllocationConfig>) -> Result<Engine, EngineError> {
        let allocator = if pooling.is_some() {
            Allocator::Pooling
        } else {
            Allocator::OnDemand
        };
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            // Guests run on fibers so async host calls (kube, sleep) suspend them; the
            // component-model-async machinery (`run_concurrent`) is not used.
            .concurrency_support(false)
            .epoch_interruption(true)
            .strategy(Strategy::Cranelift)
            .cranelift_opt_level(OptLevel::Speed);
        if let Some(pool) = pooling {
            config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        }
        Engine::new(&config).map_err(|err| EngineError::Create {
            allocator,
            message: format!("{err:#}"),
        })
    }
}

/// The process's wasm engine, with its epoch ticker.
///
/// Cloning is cheap and shares the engine. The epoch ticker runs until the last clone of the
/// wasmtime engine (including the ones inside compiled components) is dropped.
#[derive(Clone)]
pub struct CapstanEngine {
    engine: Engine,
    allocator: Allocator,
    epoch_tick: Duration,
    memory_ceiling: u64,
}

impl fmt::Debug for CapstanEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CapstanEngine")
            .field("allocator", &self.allocator)
            .field("epoch_tick", &self.epoch_tick)
            .field("memory_ceiling", &self.memory_ceiling)
            .finish_non_exhaustive()
    }
}

impl CapstanEngine {
    /// A builder with the defaults.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// The wasmtime engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The allocator in use.
    pub fn allocator(&self) -> Allocator {
        self.allocator
    }

    /// The epoch ticker's period.
    pub fn epoch_tick(&self) -> Duration {
        self.epoch_tick
    }

    /// The most linear memory one instance may have.
    pub fn memory_ceiling(&self) -> u64 {
        self.memory_ceiling
    }

    /// `duration` in epoch ticks, rounded up, at least one.
    pub fn ticks(&self, duration: Duration) -> u64 {
        let tick = self.epoch_tick.as_nanos().max(1);
        let ticks = duration.as_nanos().div_ceil(tick);
        u64::try_from(ticks).unwrap_or(u64::MAX).max(1)
    }
}

/// Starts a thread that increments the engine's epoch every tick until the last clone of the
/// engine is dropped.
fn start_epoch_ticker(engine: EngineWeak, tick: Duration) -> Result<(), EngineError> {
    thread::Builder::new()
        .name("capstan-epoch".into())
        .spawn(move || {
            loop {
                thread::sleep(tick);
                match engine.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => break,
                }
            }
        })
        .map_err(EngineError::Ticker)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_demand_engine_builds() {
        let engine = CapstanEngine::builder()
            .allocator(AllocatorChoice::OnDemand)
            .build()
            .unwrap();
        assert_eq!(engine.allocator(), Allocator::OnDemand);
    }

    #[test]
    fn auto_prefers_pooling_on_64_bit() {
        let engine = CapstanEngine::builder().max_instances(8).build().unwrap();
        assert_eq!(engine.allocator(), Allocator::Pooling);
    }

    #[test]
    fn falls_back_to_on_demand_when_the_pool_cannot_be_reserved() {
        // 200,000 memory slots of several GiB each is far beyond a 47-bit address space.
        let engine = CapstanEngine::builder()
            .max_instances(100_000)
            .build()
            .unwrap();
        assert_eq!(engine.allocator(), Allocator::OnDemand);
        let forced = CapstanEngine::builder()
            .allocator(AllocatorChoice::Pooling)
            .max_instances(100_000)
            .build();
        assert!(
            matches!(
                forced,
                Err(EngineError::Create {
                    allocator: Allocator::Pooling,
                    ..
                })
            ),
            "{forced:?}"
        );
    }

    #[test]
    fn ticks_round_up() {
        let engine = CapstanEngine::builder()
            .allocator(AllocatorChoice::OnDemand)
            .epoch_tick(Duration::from_millis(5))
            .build()
            .unwrap();
        assert_eq!(engine.ticks(Duration::ZERO), 1);
        assert_eq!(engine.ticks(Duration::from_millis(5)), 1);
        assert_eq!(engine.ticks(Duration::from_millis(6)), 2);
        assert_eq!(engine.ticks(Duration::from_secs(1)), 200);
    }

    #[test]
    fn rejects_bad_settings() {
        assert!(matches!(
            CapstanEngine::builder().max_instances(0).build(),
            Err(EngineError::Setting(_))
        ));
        assert!(matches!(
            CapstanEngine::builder().epoch_tick(Duration::ZERO).build(),
            Err(EngineError::Setting(_))
        ));
    }
}
