//! Per-call limits of a provider, and the resource limiter that enforces the memory part.

use std::time::Duration;

use wasmtime::ResourceLimiter;

/// What one call of a provider may use. Defaults follow the `Provider` resource's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Linear memory of all the instance's memories together, in bytes (capped at the engine's
    /// memory ceiling). Default 64 MiB.
    pub memory_bytes: u64,
    /// Elements of any one table. Default 20,000.
    pub table_elements: u64,
    /// Core and component instances per call. Default 64.
    pub instances: usize,
    /// CPU time per call, measured in epoch ticks while the guest runs (time suspended in host
    /// calls like `sleep` or `kube` does not count). Default 10 s.
    pub cpu_time: Duration,
    /// Wall-clock time of every call but `create`, including waiting in host calls. Default 30 s.
    pub call_timeout: Duration,
    /// Wall-clock time of `create`, which may wait for slow infrastructure. Default 10 min.
    pub create_timeout: Duration,
    /// Calls in flight at once; more wait for a slot (within their wall-clock limit). Default 16.
    pub concurrency: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: 64 << 20,
            table_elements: 20_000,
            instances: 64,
            cpu_time: Duration::from_secs(10),
            call_timeout: Duration::from_secs(30),
            create_timeout: Duration::from_secs(600),
            concurrency: 16,
        }
    }
}

impl Limits {
    /// The wall-clock limit of `function` (a WIT function name).
    pub fn wall_limit(&self, function: &str) -> Duration {
        if function == "create" {
            self.create_timeout
        } else {
            self.call_timeout
        }
    }
}

/// Enforces a call's memory, table and instance limits, and remembers whether the memory limit
/// refused a growth (so that the trap that usually follows is reported as a memory limit).
#[derive(Debug)]
pub(crate) struct CallLimiter {
    memory_limit: usize,
    table_elements: usize,
    instances: usize,
    memory_used: usize,
    memory_refused: bool,
}

impl CallLimiter {
    pub(crate) fn new(limits: &Limits) -> Self {
        Self {
            memory_limit: usize::try_from(limits.memory_bytes).unwrap_or(usize::MAX),
            table_elements: usize::try_from(limits.table_elements).unwrap_or(usize::MAX),
            instances: limits.instances,
            memory_used: 0,
            memory_refused: false,
        }
    }

    /// Linear memory granted to the call's instance so far, in bytes.
    pub(crate) fn memory_used(&self) -> usize {
        self.memory_used
    }

    /// Whether a memory growth was refused during the call.
    pub(crate) fn memory_refused(&self) -> bool {
        self.memory_refused
    }

    /// Whether the host may hold `bytes` of buffers for an import call (a request body lifted
    /// from the guest, a response on its way in) besides the guest's memory: both count against
    /// the call's memory limit. The error says how the budget is spent.
    pub(crate) fn check_host_buffers(&self, bytes: usize) -> Result<(), String> {
        if self.memory_used.saturating_add(bytes) <= self.memory_limit {
            return Ok(());
        }
        Err(format!(
            "{bytes} bytes of host buffers with {} bytes of guest memory exceed the call's memory limit of {} bytes",
            self.memory_used, self.memory_limit
        ))
    }
}

impl ResourceLimiter for CallLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let growth = desired.saturating_sub(current);
        let total = self.memory_used.saturating_add(growth);
        if total > self.memory_limit {
            self.memory_refused = true;
            return Ok(false);
        }
        self.memory_used = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= self.table_elements)
    }

    fn instances(&self) -> usize {
        self.instances
    }

    fn tables(&self) -> usize {
        self.instances.saturating_mul(4)
    }

    fn memories(&self) -> usize {
        self.instances
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_summed_over_memories() {
        let mut limiter = CallLimiter::new(&Limits {
            memory_bytes: 100,
            ..Limits::default()
        });
        assert!(limiter.memory_growing(0, 60, None).unwrap());
        assert!(limiter.memory_growing(0, 30, None).unwrap());
        assert!(!limiter.memory_refused());
        assert!(!limiter.memory_growing(30, 50, None).unwrap());
        assert!(limiter.memory_refused());
        assert!(limiter.memory_growing(30, 40, None).unwrap());
    }

    #[test]
    fn host_buffers_count_with_guest_memory() {
        let mut limiter = CallLimiter::new(&Limits {
            memory_bytes: 100,
            ..Limits::default()
        });
        assert!(limiter.check_host_buffers(100).is_ok());
        assert!(limiter.memory_growing(0, 60, None).unwrap());
        assert!(limiter.check_host_buffers(40).is_ok());
        let err = limiter.check_host_buffers(41).unwrap_err();
        assert!(
            err.contains("41 bytes of host buffers with 60 bytes"),
            "{err}"
        );
    }

    #[test]
    fn create_gets_its_own_timeout() {
        let limits = Limits::default();
        assert_eq!(limits.wall_limit("create"), Duration::from_secs(600));
        assert_eq!(limits.wall_limit("get"), Duration::from_secs(30));
    }
}
