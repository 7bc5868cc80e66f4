//! Kube errors as provider errors.

use capstan_provider_sdk::ProviderError;
use capstan_provider_sdk::kube::Error;
#[cfg(test)]
use capstan_provider_sdk::kube::KubeError;

/// Maps a failed kube call made by `create` (`launch = true`) or any other export (the SDK's
/// mapping: see [`Error::into_provider_error`]).
pub fn from_kube(error: Error, launch: bool) -> ProviderError {
    error.into_provider_error(launch)
}

/// Whether the host refused a call because the object is not this provider's (an `owned` grant):
/// `permission-denied` naming the ownership mark.
pub fn not_owned(error: &Error) -> bool {
    matches!(
        error.kube_error(),
        Some(capstan_provider_sdk::kube::KubeError::PermissionDenied(message))
            if message.contains("capstan.dev/provider")
    )
}

/// Whether the API server refused to admit a Node (a ValidatingAdmissionPolicy or an admission
/// webhook denied it): the node's registration failed, not the launch. The host's own grant
/// denials are not admission.
pub fn registration_refused(error: &Error) -> bool {
    match error.kube_error() {
        Some(
            capstan_provider_sdk::kube::KubeError::Invalid(message)
            | capstan_provider_sdk::kube::KubeError::Other(message),
        ) => {
            let message = message.to_ascii_lowercase();
            message.contains("admission") && message.contains("denied")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ownership_refusals_are_recognized() {
        assert!(not_owned(&Error::Kube(KubeError::PermissionDenied(
            "provider kwok may not Node n: it carries no ownership mark; an owned grant reaches only objects labelled capstan.dev/provider=kwok".into()
        ))));
        assert!(!not_owned(&Error::Kube(KubeError::PermissionDenied(
            "the grants of provider kwok do not allow get v1 Node".into()
        ))));
        assert!(!not_owned(&Error::Kube(KubeError::NotFound("x".into()))));
    }

    #[test]
    fn admission_denials_are_refused_registrations() {
        let denied = Error::Kube(KubeError::Invalid(
            "nodes \"n\" is forbidden: ValidatingAdmissionPolicy 'admission-policy' with binding \
             'b' denied request: failed expression"
                .into(),
        ));
        assert!(registration_refused(&denied));
        assert!(!registration_refused(&Error::Kube(KubeError::Invalid(
            "spec.taints: invalid".into()
        ))));
        assert!(!registration_refused(&Error::Kube(
            KubeError::PermissionDenied("admission denied by grants".into())
        )));
    }

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
