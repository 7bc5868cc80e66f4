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
