//! Each provider's health, from the outcomes of the calls the controllers make to it.
//!
//! A call fails the provider's health when the provider did not do its job: it trapped, ran out
//! of CPU time or memory, did not answer in time, found no free slot, could not be instantiated,
//! or answered `retryable` or `create-failed` (its cloud said no). The answers that are part of
//! the contract's normal course (`not-found`, `insufficient-capacity`,
//! `node-class-not-ready`, `invalid`) and successes count as working.
//!
//! Health is kept per WIT function: a provider whose `create` traps while its
//! `get-instance-types` answers is unhealthy, and one good catalog does not hide the failing
//! launches. A function turns the provider [`Verdict::Unhealthy`] after [`UNHEALTHY_AFTER`]
//! failures in a row; its next working call clears it. The verdict feeds
//! `capstan_provider_healthy` and the Provider's `Healthy` condition (with an Event on each
//! change); [`HealthBook::subscribe`] wakes whoever writes them.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use crate::api::ConditionStatus;
use crate::runtime::CallError;
use crate::runtime::bindings::types::ProviderError;

/// Failures in a row of one function before the provider is unhealthy (as many as a launch gets
/// before its claim falls back to another pool).
pub const UNHEALTHY_AFTER: u32 = 3;

/// How a call failed the provider's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Failure {
    /// The guest trapped.
    Trap,
    /// The call used up its CPU time.
    CpuLimit,
    /// The call tried to grow past its memory limit.
    MemoryLimit,
    /// The call did not answer within its wall-clock limit.
    Timeout,
    /// No slot for the call (its concurrency limit or the engine's pool was full).
    Overloaded,
    /// No instance of the component could be created.
    Instantiate,
    /// The provider answered `retryable` (its API throttled, a dependency was down).
    Retryable,
    /// The provider answered `create-failed` (its cloud refused the launch).
    CreateFailed,
}

impl Failure {
    /// The failure of `err`, or none when the answer is part of the contract's normal course.
    pub fn of(err: &CallError) -> Option<Self> {
        Some(match err {
            CallError::Trap { .. } => Self::Trap,
            CallError::CpuLimit { .. } => Self::CpuLimit,
            CallError::MemoryLimit { .. } => Self::MemoryLimit,
            CallError::WallTimeout { .. } => Self::Timeout,
            CallError::Overloaded { .. } => Self::Overloaded,
            CallError::Instantiate { .. } => Self::Instantiate,
            CallError::Provider { error, .. } => match error {
                ProviderError::Retryable(_) => Self::Retryable,
                ProviderError::CreateFailed(_) => Self::CreateFailed,
                ProviderError::NotFound(_)
                | ProviderError::InsufficientCapacity(_)
                | ProviderError::NodeClassNotReady(_)
                | ProviderError::Invalid(_) => return None,
            },
        })
    }

    /// The metric label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Trap => "trap",
            Self::CpuLimit => "cpu_limit",
            Self::MemoryLimit => "memory_limit",
            Self::Timeout => "timeout",
            Self::Overloaded => "overloaded",
            Self::Instantiate => "instantiate",
            Self::Retryable => "retryable",
            Self::CreateFailed => "create_failed",
        }
    }

    /// The condition and Event reason.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Trap => "Trapped",
            Self::CpuLimit => "CPULimitExceeded",
            Self::MemoryLimit => "MemoryLimitExceeded",
            Self::Timeout => "TimedOut",
            Self::Overloaded => "Overloaded",
            Self::Instantiate => "InstantiationFailed",
            Self::Retryable => "Retrying",
            Self::CreateFailed => "CreateFailed",
        }
    }
}

/// A provider's health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// No call has ended yet.
    Unknown,
    /// No function has failed [`UNHEALTHY_AFTER`] times in a row.
    Healthy,
    /// `function` failed `consecutive` times in a row, the last time with `failure`.
    Unhealthy {
        /// The WIT function.
        function: &'static str,
        /// How its last call failed.
        failure: Failure,
        /// Failures in a row.
        consecutive: u32,
        /// The last call's error.
        message: String,
    },
}

impl Verdict {
    /// Whether the verdict is [`Verdict::Unhealthy`].
    pub fn is_unhealthy(&self) -> bool {
        matches!(self, Self::Unhealthy { .. })
    }

    /// The `Healthy` condition's `(status, reason, message)`.
    pub fn condition(&self) -> (ConditionStatus, &'static str, String) {
        match self {
            Self::Unknown => (
                ConditionStatus::Unknown,
                "NoCalls",
                "no call has ended yet".to_owned(),
            ),
            Self::Healthy => (
                ConditionStatus::True,
                "Healthy",
                format!("no function failed {UNHEALTHY_AFTER} times in a row"),
            ),
            Self::Unhealthy {
                function,
                failure,
                consecutive,
                message,
            } => (
                ConditionStatus::False,
                failure.reason(),
                format!("{function} failed {consecutive} times in a row; last: {message}"),
            ),
        }
    }
}

/// One function's run of failures.
#[derive(Debug, Clone)]
struct Run {
    consecutive: u32,
    last: Option<(Failure, String)>,
}

/// One provider's calls.
#[derive(Debug, Default, Clone)]
struct Health {
    functions: BTreeMap<&'static str, Run>,
}

impl Health {
    fn verdict(&self) -> Verdict {
        if self.functions.is_empty() {
            return Verdict::Unknown;
        }
        // The function failing longest names the verdict.
        self.functions
            .iter()
            .filter(|(_, run)| run.consecutive >= UNHEALTHY_AFTER)
            .max_by_key(|(_, run)| run.consecutive)
            .and_then(|(function, run)| {
                let (failure, message) = run.last.clone()?;
                Some(Verdict::Unhealthy {
                    function,
                    failure,
                    consecutive: run.consecutive,
                    message,
                })
            })
            .unwrap_or(Verdict::Healthy)
    }
}

/// The health of every provider called so far.
#[derive(Debug)]
pub struct HealthBook {
    providers: Mutex<BTreeMap<String, Health>>,
    changes: tokio::sync::watch::Sender<u64>,
}

impl Default for HealthBook {
    fn default() -> Self {
        Self {
            providers: Mutex::default(),
            changes: tokio::sync::watch::Sender::new(0),
        }
    }
}

/// What one recorded call changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// How the call failed the provider's health, if it did.
    pub failure: Option<Failure>,
    /// The provider's verdict afterwards, when the call changed its status (healthy, unhealthy
    /// or unknown).
    pub changed: Option<Verdict>,
}

impl HealthBook {
    /// Records a call of `function` of `provider` that ended with `result`.
    pub fn record<T>(
        &self,
        provider: &str,
        function: &'static str,
        result: &Result<T, CallError>,
    ) -> Recorded {
        let failure = result.as_ref().err().and_then(Failure::of);
        let mut providers = self.lock();
        let health = providers.entry(provider.to_owned()).or_default();
        let before = health.verdict();
        let run = health.functions.entry(function).or_insert(Run {
            consecutive: 0,
            last: None,
        });
        match (failure, result) {
            (Some(failure), Err(err)) => {
                run.consecutive = run.consecutive.saturating_add(1);
                run.last = Some((failure, err.to_string()));
            }
            _ => {
                run.consecutive = 0;
                run.last = None;
            }
        }
        let after = health.verdict();
        drop(providers);
        // Only a change of status wakes the writers (not a longer run of the same failure).
        let changed =
            (std::mem::discriminant(&before) != std::mem::discriminant(&after)).then_some(after);
        if changed.is_some() {
            self.changes.send_modify(|n| *n += 1);
        }
        Recorded { failure, changed }
    }

    /// `provider`'s verdict.
    pub fn verdict(&self, provider: &str) -> Verdict {
        self.lock()
            .get(provider)
            .map_or(Verdict::Unknown, Health::verdict)
    }

    /// Forgets `provider` (unloaded).
    pub fn forget(&self, provider: &str) {
        if self.lock().remove(provider).is_some() {
            self.changes.send_modify(|n| *n += 1);
        }
    }

    /// A receiver that sees a new value after every change of a provider's status.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Health>> {
        self.providers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::bindings::types::CreateFailure;

    fn trap() -> Result<(), CallError> {
        Err(CallError::Trap {
            function: "create",
            message: "unreachable".into(),
            backtrace: String::new(),
            stderr: String::new(),
        })
    }

    fn provider(error: ProviderError) -> Result<(), CallError> {
        Err(CallError::Provider {
            function: "create",
            error,
        })
    }

    #[test]
    fn normal_answers_are_not_failures() {
        for error in [
            ProviderError::NotFound("x".into()),
            ProviderError::InsufficientCapacity("x".into()),
            ProviderError::NodeClassNotReady("x".into()),
            ProviderError::Invalid("x".into()),
        ] {
            let book = HealthBook::default();
            for _ in 0..5 {
                assert_eq!(
                    book.record("p", "create", &provider(error.clone())).failure,
                    None
                );
            }
            assert_eq!(book.verdict("p"), Verdict::Healthy);
        }
        let book = HealthBook::default();
        for _ in 0..UNHEALTHY_AFTER {
            book.record(
                "p",
                "create",
                &provider(ProviderError::CreateFailed(CreateFailure {
                    reason: "Quota".into(),
                    message: "no quota".into(),
                })),
            );
        }
        assert!(matches!(
            book.verdict("p"),
            Verdict::Unhealthy {
                failure: Failure::CreateFailed,
                ..
            }
        ));
    }

    #[test]
    fn three_failures_in_a_row_turn_unhealthy_and_one_success_clears() {
        let book = HealthBook::default();
        assert_eq!(book.verdict("p"), Verdict::Unknown);
        let mut rx = book.subscribe();
        assert_eq!(
            book.record("p", "create", &trap()).changed,
            Some(Verdict::Healthy)
        );
        assert!(rx.has_changed().unwrap());
        rx.mark_unchanged();
        assert_eq!(book.record("p", "create", &trap()).changed, None);
        let third = book.record("p", "create", &trap());
        assert_eq!(third.failure, Some(Failure::Trap));
        let Some(Verdict::Unhealthy {
            function,
            consecutive,
            message,
            ..
        }) = third.changed
        else {
            panic!("{third:?}")
        };
        assert_eq!((function, consecutive), ("create", 3));
        assert!(message.contains("trapped"), "{message}");
        assert!(rx.has_changed().unwrap());
        rx.mark_unchanged();
        // A fourth failure changes nothing worth a write.
        assert_eq!(book.record("p", "create", &trap()).changed, None);
        assert!(!rx.has_changed().unwrap());
        let (status, reason, message) = book.verdict("p").condition();
        assert_eq!((status, reason), (ConditionStatus::False, "Trapped"));
        assert!(
            message.starts_with("create failed 4 times in a row"),
            "{message}"
        );
        assert_eq!(
            book.record("p", "create", &Ok::<(), CallError>(())).changed,
            Some(Verdict::Healthy)
        );
    }

    #[test]
    fn another_functions_success_does_not_hide_failing_launches() {
        let book = HealthBook::default();
        for _ in 0..UNHEALTHY_AFTER {
            book.record("p", "create", &trap());
            book.record("p", "get-instance-types", &Ok::<(), CallError>(()));
        }
        assert!(book.verdict("p").is_unhealthy());
        // Providers are apart.
        book.record("q", "create", &Ok::<(), CallError>(()));
        assert_eq!(book.verdict("q"), Verdict::Healthy);
        book.forget("p");
        assert_eq!(book.verdict("p"), Verdict::Unknown);
    }
}
