//! Everything a CloudStack call can fail with, and what each failure means for the contract.

use capstan_provider_sdk::ProviderError;

/// CloudStack's `errorcode` for a request that does not verify.
pub const UNAUTHORIZED: u16 = 401;
/// A bad parameter (`InvalidParameterValueException`).
pub const PARAM_ERROR: u16 = 431;
/// A command the account may not call (or that does not exist).
pub const UNSUPPORTED_ACTION: u16 = 432;
/// Throttled (API rate limit).
pub const TOO_MANY_REQUESTS: u16 = 429;
/// Insufficient capacity.
pub const INSUFFICIENT_CAPACITY: u16 = 533;
/// Resource unavailable.
pub const RESOURCE_UNAVAILABLE: u16 = 534;
/// Resource allocation (a limit of the account).
pub const RESOURCE_ALLOCATION: u16 = 535;

/// A failed CloudStack call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// The provider has no usable credentials or endpoint.
    #[error("{0}")]
    Config(String),
    /// The host refused the request: the endpoint is outside the Provider's egress grants.
    #[error("the request to {authority} was denied by the Provider's egress grants ({detail})")]
    Denied {
        /// `host:port`.
        authority: String,
        /// The host's error.
        detail: String,
    },
    /// No HTTP answer: connection refused, DNS, TLS, timeout.
    #[error("{command}: no answer from {authority}: {detail}")]
    Transport {
        /// The command.
        command: String,
        /// `host:port`.
        authority: String,
        /// What went wrong.
        detail: String,
    },
    /// A redirect (never followed: the signed request would go to another host).
    #[error(
        "{command}: the endpoint answered HTTP {status} redirecting to {location:?}; redirects are not followed, set the endpoint to the API's real URL"
    )]
    Redirect {
        /// The command.
        command: String,
        /// HTTP status.
        status: u16,
        /// `Location`.
        location: String,
    },
    /// An answer that is not CloudStack's (HTML, malformed JSON, an unexpected shape).
    #[error("{command}: HTTP {status}: not a CloudStack answer: {detail}")]
    NotCloudStack {
        /// The command.
        command: String,
        /// HTTP status.
        status: u16,
        /// What was wrong with it.
        detail: String,
    },
    /// An answer larger than the provider reads.
    #[error("{command}: the answer is larger than {limit} bytes")]
    TooLarge {
        /// The command.
        command: String,
        /// The limit.
        limit: usize,
    },
    /// CloudStack's own error document.
    #[error("{command}: CloudStack error {code}{}: {text}", cs_code.map(|c| format!(" ({c})")).unwrap_or_default())]
    CloudStack {
        /// The command.
        command: String,
        /// `errorcode` (also the HTTP status).
        code: u16,
        /// `cserrorcode`.
        cs_code: Option<u32>,
        /// `errortext`.
        text: String,
    },
    /// An async job that failed.
    #[error("{command} job {job_id} failed with CloudStack error {code}: {text}")]
    JobFailed {
        /// The command that started the job.
        command: String,
        /// The job.
        job_id: String,
        /// The job result's `errorcode`.
        code: u16,
        /// The job result's `errortext`.
        text: String,
    },
    /// An async job still pending at the deadline.
    #[error("{command} job {job_id} still pending after {waited_ms} ms")]
    JobTimeout {
        /// The command.
        command: String,
        /// The job.
        job_id: String,
        /// How long the provider waited.
        waited_ms: u64,
    },
}

/// Which export a failure happened in: each reacts differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    /// `get-instance-types`, `validate-node-class`, `is-drifted`: about a NodeClass.
    NodeClass,
    /// `create`.
    Create,
    /// `get`, `list`, `delete`: no NodeClass; the host retries.
    Instance,
}

impl ApiError {
    /// Whether CloudStack says there is no capacity (533, 534, 535).
    pub fn is_insufficient_capacity(&self) -> bool {
        matches!(
            self.code(),
            Some(INSUFFICIENT_CAPACITY | RESOURCE_UNAVAILABLE | RESOURCE_ALLOCATION)
        )
    }

    /// Whether the credentials (or the account's rights) are the problem.
    pub fn is_auth(&self) -> bool {
        matches!(self.code(), Some(UNAUTHORIZED | UNSUPPORTED_ACTION))
            && !matches!(self, ApiError::JobFailed { .. })
    }

    /// CloudStack's `errorcode`, for its own errors and failed jobs.
    pub fn code(&self) -> Option<u16> {
        match self {
            ApiError::CloudStack { code, .. } | ApiError::JobFailed { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// A short reason for a condition (`CloudStackAuthFailed`, `EgressDenied`, ...).
    pub fn reason(&self) -> &'static str {
        match self {
            _ if self.is_auth() => "CloudStackAuthFailed",
            _ if self.is_insufficient_capacity() => "InsufficientCapacity",
            ApiError::Config(_) => "CloudStackConfigMissing",
            ApiError::Denied { .. } => "EgressDenied",
            ApiError::Transport { .. } => "CloudStackUnreachable",
            ApiError::Redirect { .. } => "CloudStackRedirect",
            ApiError::NotCloudStack { .. } => "CloudStackBadResponse",
            ApiError::TooLarge { .. } => "CloudStackResponseTooLarge",
            ApiError::CloudStack {
                code: PARAM_ERROR, ..
            } => "CloudStackInvalidParameter",
            ApiError::CloudStack { .. } => "CloudStackError",
            ApiError::JobFailed { .. } => "CloudStackJobFailed",
            ApiError::JobTimeout { .. } => "CloudStackJobTimeout",
        }
    }

    /// The contract's error for this failure in `context`:
    ///
    /// - no capacity (533/534/535) is `insufficient-capacity` in `create`;
    /// - throttling (429) and job timeouts are `retryable`;
    /// - about a NodeClass, rejected credentials (401, 432), a bad parameter (431), missing
    ///   configuration and an endpoint that is denied, unreachable or not CloudStack make it
    ///   `node-class-not-ready` with the reason (the NodeClass shows it), other CloudStack errors
    ///   are `retryable`;
    /// - in `create` everything else is `create-failed` with [`ApiError::reason`] (the
    ///   NodeClaim shows it; the host retries with backoff);
    /// - in `get`, `list`, `delete` everything else is `retryable`.
    pub fn into_provider_error(self, context: Context) -> ProviderError {
        let message = self.to_string();
        if self.code() == Some(TOO_MANY_REQUESTS) || matches!(self, ApiError::JobTimeout { .. }) {
            return match context {
                Context::Create => ProviderError::create_failed(self.reason(), message),
                _ => ProviderError::Retryable(message),
            };
        }
        match context {
            Context::Create if self.is_insufficient_capacity() => {
                ProviderError::InsufficientCapacity(message)
            }
            Context::Create => ProviderError::create_failed(self.reason(), message),
            Context::NodeClass => match self {
                ApiError::CloudStack { code, .. } if code != PARAM_ERROR && !self.is_auth() => {
                    ProviderError::Retryable(message)
                }
                ApiError::JobFailed { .. } => ProviderError::Retryable(message),
                _ => ProviderError::NodeClassNotReady(format!("{}: {message}", self.reason())),
            },
            Context::Instance => ProviderError::Retryable(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cs(code: u16) -> ApiError {
        ApiError::CloudStack {
            command: "deployVirtualMachine".into(),
            code,
            cs_code: Some(4350),
            text: "t".into(),
        }
    }

    fn job(code: u16) -> ApiError {
        ApiError::JobFailed {
            command: "deployVirtualMachine".into(),
            job_id: "j".into(),
            code,
            text: "Unable to create a deployment".into(),
        }
    }

    #[test]
    fn capacity_errors_are_insufficient_capacity_in_create() {
        for code in [533, 534, 535] {
            assert!(matches!(
                job(code).into_provider_error(Context::Create),
                ProviderError::InsufficientCapacity(_)
            ));
            assert!(matches!(
                cs(code).into_provider_error(Context::Create),
                ProviderError::InsufficientCapacity(_)
            ));
            assert!(matches!(
                cs(code).into_provider_error(Context::Instance),
                ProviderError::Retryable(_)
            ));
        }
    }

    #[test]
    fn auth_errors_are_clear() {
        let e = cs(401).into_provider_error(Context::NodeClass);
        match e {
            ProviderError::NodeClassNotReady(m) => {
                assert!(m.starts_with("CloudStackAuthFailed: "), "{m}")
            }
            other => panic!("{other:?}"),
        }
        match cs(432).into_provider_error(Context::Create) {
            ProviderError::CreateFailed(f) => assert_eq!(f.reason, "CloudStackAuthFailed"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            cs(401).into_provider_error(Context::Instance),
            ProviderError::Retryable(_)
        ));
    }

    #[test]
    fn other_errors() {
        assert!(matches!(
            cs(431).into_provider_error(Context::NodeClass),
            ProviderError::NodeClassNotReady(_)
        ));
        match cs(431).into_provider_error(Context::Create) {
            ProviderError::CreateFailed(f) => {
                assert_eq!(f.reason, "CloudStackInvalidParameter");
                assert!(
                    f.message.contains("CloudStack error 431 (4350): t"),
                    "{}",
                    f.message
                );
            }
            other => panic!("{other:?}"),
        }
        match job(530).into_provider_error(Context::Create) {
            ProviderError::CreateFailed(f) => {
                assert_eq!(f.reason, "CloudStackJobFailed");
                assert!(f.message.contains("Unable to create a deployment"));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            cs(530).into_provider_error(Context::NodeClass),
            ProviderError::Retryable(_)
        ));
        assert!(matches!(
            cs(429).into_provider_error(Context::NodeClass),
            ProviderError::Retryable(_)
        ));
        let denied = ApiError::Denied {
            authority: "evil:443".into(),
            detail: "HTTP-request-denied".into(),
        };
        match denied.clone().into_provider_error(Context::NodeClass) {
            ProviderError::NodeClassNotReady(m) => assert!(m.starts_with("EgressDenied: "), "{m}"),
            other => panic!("{other:?}"),
        }
        match denied.into_provider_error(Context::Create) {
            ProviderError::CreateFailed(f) => assert_eq!(f.reason, "EgressDenied"),
            other => panic!("{other:?}"),
        }
        let timeout = ApiError::JobTimeout {
            command: "destroyVirtualMachine".into(),
            job_id: "j".into(),
            waited_ms: 5,
        };
        assert!(matches!(
            timeout.into_provider_error(Context::Instance),
            ProviderError::Retryable(_)
        ));
    }
}
