import pytest
from capstan_provider.catalog import expand
from componentize_py_types import Err
from kwok_provider import catalog
from kwok_provider.catalog import CPU_LABEL, FAMILY_LABEL, MEMORY_LABEL, SIZE_LABEL, build, to_catalog
from kwok_provider.params import Parameters
from capstan_provider.types import Operator


def entries(text):
    return build(Parameters.parse(text))


def test_default_catalog_has_families_sizes_and_arches():
    all_ = entries("{}")
    assert len(all_) == 3 * 12 * 2
    c4 = next(e for e in all_ if e.name == "c-4x-amd64-linux")
    assert c4.cpu() == 4
    assert c4.capacity["memory"].value() == 8 << 30
    assert c4.capacity["pods"].value() == 64
    assert c4.allocatable()["cpu"].millis == 3900
    assert len(c4.offers) == 8
    price = {(o.capacity_type, o.zone): o.price for o in c4.offers}
    assert price["spot", "test-zone-a"] < price["on-demand", "test-zone-a"]


def test_instance_types_carry_the_documented_requirements():
    (it,) = [t for t in expand(to_catalog(entries("{}"))) if t.name == "m-2x-arm64-linux"]
    get = {r.key: (r.operator, r.values) for r in it.requirements}
    assert get["node.kubernetes.io/instance-type"] == (Operator.IN, ["m-2x-arm64-linux"])
    assert get["kubernetes.io/arch"] == (Operator.IN, ["arm64"])
    assert get["kubernetes.io/os"] == (Operator.IN, ["linux"])
    assert get["topology.kubernetes.io/zone"][1] == ["test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d"]
    assert get["karpenter.sh/capacity-type"][1] == ["on-demand", "spot"]
    assert get["topology.kubernetes.io/region"][1] == ["test-region"]
    assert get[FAMILY_LABEL][1] == ["m"]
    assert get[SIZE_LABEL][1] == ["2"]
    assert get[CPU_LABEL][1] == ["2"]
    assert get[MEMORY_LABEL][1] == ["16Gi"]
    assert len(it.offerings) == 8
    assert sorted(it.capacity) == ["cpu", "ephemeral-storage", "memory", "pods"]
    assert it.capacity["memory"] == (16 << 30) * 1000
    assert it.kube_reserved == {"cpu": 100, "memory": 10 * 2**20 * 1000}


def test_filters_narrow_the_catalog():
    some = entries('{"families":["c","m"],"architectures":["amd64"],"maxCpu":4,"zones":["test-zone-b"],"capacityTypes":["on-demand"]}')
    assert len(some) == 2 * 3
    for e in some:
        assert e.family != "s" and e.arch == "amd64" and e.cpu() <= 4
        assert [(o.zone, o.capacity_type) for o in e.offers] == [("test-zone-b", "on-demand")]
    with pytest.raises(Err) as e:
        entries('{"maxCpu":0}')
    assert e.value.value.value == "parameters.maxCpu: no instance type is left to launch"


def test_unavailable_offerings_are_marked_not_dropped():
    all_ = entries('{"unavailableOfferings":[{"zone":"test-zone-a"},{"instanceType":"m-8x-amd64-linux","capacityType":"spot"}]}')
    c1 = next(e for e in all_ if e.name == "c-1x-amd64-linux")
    assert len(c1.offers) == 8
    assert all(o.available == (o.zone != "test-zone-a") for o in c1.offers)
    m8 = next(e for e in all_ if e.name == "m-8x-amd64-linux")
    assert sum(not o.available for o in m8.offers) == 5


def test_custom_catalog_replaces_the_default():
    text = '{"instanceTypes":[{"name":"g5.4xlarge","family":"g5","size":"4xlarge","resources":{"cpu":"16","memory":"64Gi","nvidia.com/gpu":"1"},"labels":{"example.com/accelerator":"a10g"},"offerings":[{"zone":"us-east-1a","capacityType":"on-demand","price":1.624}]}]}'
    (e,) = entries(text)
    assert e.capacity["pods"].value() == 110
    assert e.node_labels()["example.com/accelerator"] == "a10g"
    (t,) = expand(to_catalog([e]))
    assert t.capacity["nvidia.com/gpu"] == 1000
    assert ("example.com/accelerator", ["a10g"]) in [(r.key, r.values) for r in t.requirements]


def test_a_thousand_types_build_a_compact_catalog():
    types = [
        {"name": f"t{i}", "resources": {"cpu": str(1 + i % 64), "memory": f"{1 + i % 256}Gi"}, "offerings": [{"zone": "z1", "capacityType": "spot", "price": 0.01 * (i + 1)}]}
        for i in range(1000)
    ]
    import json

    cat = to_catalog(catalog.custom(Parameters.parse(json.dumps({"instanceTypes": types})).instance_types))
    assert len(cat.instance_types) == 1000
    assert cat.strings.count("z1") == 1
    assert len(expand(cat)) == 1000
