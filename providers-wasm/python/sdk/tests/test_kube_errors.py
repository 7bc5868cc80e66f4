import pytest
from capstan_provider.kube import KubeCallError, Target
from wit_world.imports.kube import (
    Cluster,
    KubeError_Conflict,
    KubeError_Invalid,
    KubeError_NotFound,
    KubeError_Other,
    KubeError_PermissionDenied,
    KubeError_Unavailable,
)
from capstan_provider.types import (
    ProviderError_CreateFailed,
    ProviderError_Invalid,
    ProviderError_NotFound,
    ProviderError_Retryable,
)


@pytest.mark.parametrize(
    "error,launch,expected,reason",
    [
        (KubeError_NotFound("x"), False, ProviderError_NotFound, None),
        (KubeError_Conflict("x"), True, ProviderError_Retryable, None),
        (KubeError_Unavailable("x"), False, ProviderError_Retryable, None),
        (KubeError_PermissionDenied("nodes create"), True, ProviderError_CreateFailed, "PermissionDenied"),
        (KubeError_PermissionDenied("x"), False, ProviderError_Invalid, None),
        (KubeError_Invalid("x"), True, ProviderError_CreateFailed, "ObjectRejected"),
        (KubeError_Invalid("x"), False, ProviderError_Invalid, None),
        (KubeError_Other("x"), True, ProviderError_CreateFailed, "KubeError"),
        (KubeError_Other("x"), False, ProviderError_Retryable, None),
        (None, False, ProviderError_Retryable, None),
    ],
)
def test_kube_errors_map_onto_provider_errors(error, launch, expected, reason):
    mapped = KubeCallError(error, "text").provider_error(launch).value
    assert isinstance(mapped, expected)
    if reason is not None:
        assert mapped.value.reason == reason
        assert mapped.value.message == "text"


def test_targets():
    t = Target.workload("v1", "ConfigMap").namespaced("ns")
    ref = t.object("cm", "status")
    assert ref.target.cluster == Cluster.WORKLOAD
    assert (ref.target.api_version, ref.target.kind, ref.target.namespace, ref.name, ref.subresource) == ("v1", "ConfigMap", "ns", "cm", "status")
    assert KubeCallError(KubeError_Conflict("c"), "conflict: c").kind == "conflict"
