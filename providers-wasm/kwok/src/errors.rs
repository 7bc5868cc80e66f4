//! Kube errors as provider errors.

use capstan_provider_sdk::ProviderError;
use capstan_provider_sdk::kube::{Error, KubeError};

/// Maps a failed kube call made by `create` (`Launch = true`) or any other export.
///
/// - `not-found` → `not-found`
/// - `conflict`, `unavailable`, `other` → `retryable` (create: `other` is `create-failed`)
/// - `permission-denied` → create: `create-failed{PermissionDenied}`; otherwise `invalid` (an admin
///   must widen the grants, retrying will not help)
/// - `invalid` → create: `create-failed{NodeRejected}`; otherwise `invalid`
/// - an answer that does not decode → `retryable`
pub fn from_kube(error: Error, launch: bool) -> ProviderError {
    let text = error.to_string();
    match error {
        Error::Kube(KubeError::NotFound(_)) => ProviderError::NotFound(text),
        Error::Kube(KubeError::Conflict(_) | KubeError::Unavailable(_)) => {
            ProviderError::Retryable(text)
        }
        Error::Kube(KubeError::PermissionDenied(_)) if launch => {
            ProviderError::create_failed("PermissionDenied", text)
        }
        Error::Kube(KubeError::Invalid(_)) if launch => {
            ProviderError::create_failed("NodeRejected", text)
        }
        Error::Kube(KubeError::Other(_)) if launch => {
            ProviderError::create_failed("KubeError", text)
        }
        Error::Kube(KubeError::PermissionDenied(_) | KubeError::Invalid(_)) => {
            ProviderError::Invalid(text)
        }
        Error::Kube(KubeError::Other(_)) | Error::Decode(_) => ProviderError::Retryable(text),
        Error::Encode(_) => ProviderError::Invalid(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kube(e: KubeError, launch: bool) -> ProviderError {
        from_kube(Error::Kube(e), launch)
    }

    #[test]
    fn mapping() {
        assert!(matches!(
            kube(KubeError::NotFound("x".into()), false),
            ProviderError::NotFound(_)
        ));
        assert!(matches!(
            kube(KubeError::Conflict("x".into()), true),
            ProviderError::Retryable(_)
        ));
        assert!(matches!(
            kube(KubeError::Unavailable("x".into()), false),
            ProviderError::Retryable(_)
        ));
        match kube(KubeError::PermissionDenied("nodes create".into()), true) {
            ProviderError::CreateFailed(f) => {
                assert_eq!(f.reason, "PermissionDenied");
                assert_eq!(f.message, "permission-denied: nodes create");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            kube(KubeError::PermissionDenied("x".into()), false),
            ProviderError::Invalid(_)
        ));
        assert!(matches!(
            kube(KubeError::Invalid("x".into()), true),
            ProviderError::CreateFailed(_)
        ));
        assert!(matches!(
            kube(KubeError::Other("x".into()), false),
            ProviderError::Retryable(_)
        ));
    }
}
