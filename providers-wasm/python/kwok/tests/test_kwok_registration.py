from capstan_provider.kube import KubeCallError
from kwok_provider.provider import registration_refused
from wit_world.imports.kube import KubeError_Conflict, KubeError_Invalid

DENIED = (
    'nodes "n" is forbidden: ValidatingAdmissionPolicy \'admission-policy\' with binding '
    "'b' denied request: failed expression"
)


def test_an_admission_denial_is_a_refused_registration():
    assert registration_refused(KubeCallError(KubeError_Invalid(DENIED), DENIED))


def test_other_failures_are_not():
    assert not registration_refused(KubeCallError(KubeError_Invalid("spec.x: bad"), "spec.x: bad"))
    assert not registration_refused(KubeCallError(KubeError_Conflict(DENIED), DENIED))
    assert not registration_refused(KubeCallError(None, "not JSON"))
