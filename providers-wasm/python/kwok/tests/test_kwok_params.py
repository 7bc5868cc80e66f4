import pytest
from componentize_py_types import Err
from kwok_provider.params import OfferingSelector, Parameters
from capstan_provider.types import ProviderError_Invalid

CUSTOM = '{"instanceTypes":[{"name":"g5","resources":{"cpu":"16","memory":"64Gi","nvidia.com/gpu":"1"},"offerings":[{"zone":"z","capacityType":"spot","price":0.61}]}]}'


def err(text):
    with pytest.raises(Err) as e:
        Parameters.parse(text)
    assert isinstance(e.value.value, ProviderError_Invalid)
    return e.value.value.value


def test_defaults():
    p = Parameters.parse("")
    assert p.image() == "kwok-default-image"
    assert p.launch_delay() == 0
    assert p.instance_types is None


def test_custom_types_get_defaults():
    (spec,) = Parameters.parse(CUSTOM).instance_types
    assert spec.architecture == "amd64"
    assert spec.operating_systems == ["linux"]
    assert spec.offerings[0].available is True


@pytest.mark.parametrize(
    "text,prefix",
    [
        ('{"maxCpu":-1}', "parameters.maxCpu: must not be negative"),
        ('{"launchDelayMillis":-5}', "parameters.launchDelayMillis:"),
        ('{"imageID":" "}', "parameters.imageID:"),
        ('{"capacityTypes":["cheap"]}', "parameters.capacityTypes[0]: unknown capacity type"),
        ('{"zones":[""]}', "parameters.zones[0]:"),
        ('{"unavailableOfferings":[{"capacityType":"x"}]}', "parameters.unavailableOfferings[0].capacityType"),
        ('{"zonez":["a"]}', "parameters.zonez: unknown field"),
        ('{"instanceTypes":[{"name":"a","resources":{"cpu":"1"},"offerings":[{"zone":"z","capacityType":"spot","price":1}]}]}', "parameters.instanceTypes[0].resources: memory is required"),
        ('{"instanceTypes":[{"name":"a","resources":{"cpu":"1","memory":"1x"},"offerings":[{"zone":"z","capacityType":"spot","price":1}]}]}', "parameters.instanceTypes[0].resources.memory:"),
        ('{"instanceTypes":[{"name":"a","resources":{"cpu":"1","memory":"1"},"offerings":[]}]}', "parameters.instanceTypes[0].offerings: must list at least one"),
        ('{"instanceTypes":[{"name":"a","resources":{"cpu":"1","memory":"1"},"offerings":[{"zone":"z","capacityType":"spot","price":-1}]}]}', "parameters.instanceTypes[0].offerings[0].price: must be finite"),
        ('{"instanceTypes":[{"name":"a","resources":{"cpu":"-1","memory":"1"},"offerings":[{"zone":"z","capacityType":"spot","price":1}]}]}', "parameters.instanceTypes[0].resources.cpu: must not be negative"),
        ('{"instanceTypes":[{"name":"a","resources":{"cpu":"1","memory":"1"},"offerings":[{"zone":"z","capacityType":"spot","price":1}]},{"name":"a","resources":{"cpu":"1","memory":"1"},"offerings":[{"zone":"z","capacityType":"spot","price":1}]}]}', "parameters.instanceTypes[1].name: duplicate"),
        ("[]", "parameters: must be a JSON object"),
    ],
)
def test_invalid_parameters_name_the_field(text, prefix):
    assert err(text).startswith(prefix)


def test_hash_tracks_node_shaping_fields_only():
    base = Parameters.parse('{"zones":["a"],"maxCpu":4}')
    same = Parameters.parse('{"zones":["a"],"maxCpu":4,"imageID":"x","launchDelayMillis":10,"unavailableOfferings":[{}]}')
    other = Parameters.parse('{"zones":["b"],"maxCpu":4}')
    assert base.hash() == same.hash()
    assert base.hash() != other.hash()
    assert len(base.hash()) == 16
    assert Parameters.parse(CUSTOM).hash() != Parameters.parse("{}").hash()


def test_selectors_match_given_fields():
    assert OfferingSelector().matches("t", "z", "spot")
    zone = OfferingSelector(zone="a")
    assert zone.matches("t", "a", "spot")
    assert not zone.matches("t", "b", "spot")


def kwok_node_class(spec: str, api_version: str = "karpenter.kwok.sh/v1alpha1", kind: str = "KWOKNodeClass") -> str:
    return f'{{"apiVersion":"{api_version}","kind":"{kind}","spec":{spec}}}'


def test_a_kwok_node_class_sets_the_registration_delay():
    assert Parameters.parse(kwok_node_class('{"nodeRegistrationDelay":"1m30s"}')).launch_delay() == 90_000
    defaults = Parameters.parse(kwok_node_class("{}"))
    assert defaults.launch_delay() == 0
    assert defaults.instance_types is None
    assert defaults.hash() == Parameters.parse("").hash()


@pytest.mark.parametrize(
    "text,prefix",
    [
        (kwok_node_class('{"nodeRegistrationDelay":"5"}'), "parameters.spec.nodeRegistrationDelay:"),
        (kwok_node_class('{"nodeRegistrationDelay":"1d"}'), "parameters.spec.nodeRegistrationDelay:"),
        (kwok_node_class('{"other":1}'), "parameters.spec.other: unknown field"),
        (kwok_node_class("{}", api_version="example.com/v1"), "parameters: the kwok provider serves KWOKNodeClass.karpenter.kwok.sh"),
    ],
)
def test_a_bad_kwok_node_class_is_invalid(text, prefix):
    assert err(text).startswith(prefix)


def test_own_parameters_with_a_fourth_field_are_not_a_served_object():
    # Exactly apiVersion, kind and spec make a served object; anything else is the NodeClass's own
    # parameters (and these are unknown fields there).
    assert err('{"apiVersion":"a/v1","kind":"K","spec":{},"maxCpu":1}').startswith("parameters.apiVersion: unknown field")
