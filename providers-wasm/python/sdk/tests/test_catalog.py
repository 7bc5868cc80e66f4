import math

import pytest
from capstan_provider.catalog import CatalogBuilder, CatalogError, expand
from capstan_provider.quantity import Quantity
from capstan_provider.requirements import in_
from capstan_provider.types import Span


def build(n):
    b = CatalogBuilder()
    for i in range(n):
        t = b.instance_type(f"t{i}")
        t.requirement(in_("node.kubernetes.io/instance-type", [f"t{i}"]))
        t.requirement(in_("kubernetes.io/arch", ["amd64"]))
        t.offering("zone-a", "spot", 0.1 * (i + 1))
        t.offering("zone-b", "on-demand", 0.2 * (i + 1), available=False)
        t.capacity({"cpu": Quantity.parse("2"), "memory": Quantity.parse("4Gi"), "pods": Quantity.parse("110")})
        t.kube_reserved({"cpu": Quantity.parse("100m")})
    return b.finish()


def test_round_trips_through_expand():
    types = expand(build(3))
    assert [t.name for t in types] == ["t0", "t1", "t2"]
    t1 = types[1]
    assert [(r.key, r.values) for r in t1.requirements] == [("node.kubernetes.io/instance-type", ["t1"]), ("kubernetes.io/arch", ["amd64"])]
    assert [(o.zone, o.capacity_type, o.available) for o in t1.offerings] == [("zone-a", "spot", True), ("zone-b", "on-demand", False)]
    assert math.isclose(t1.offerings[0].price, 0.2)
    assert t1.capacity == {"cpu": 2000, "memory": 4 * 2**30 * 1000, "pods": 110_000}
    assert t1.kube_reserved == {"cpu": 100}
    assert t1.system_reserved == {}


def test_interns_shared_strings_requirements_and_lists():
    catalog = build(50)
    assert catalog.strings.count("amd64") == 1
    assert catalog.strings.count("zone-a") == 1
    # One arch requirement shared by all, one per type for the name.
    assert len(catalog.requirements) == 51
    # Every type's capacity is the same list: stored once.
    assert len({(t.capacity.start, t.capacity.len) for t in catalog.instance_types}) == 1
    assert len(catalog.amounts) == 4


def test_offerings_are_consecutive_per_type():
    catalog = build(4)
    assert [(t.offerings.start, t.offerings.len) for t in catalog.instance_types] == [(0, 2), (2, 2), (4, 2), (6, 2)]


def test_expand_rejects_spans_past_the_end():
    catalog = build(1)
    catalog.instance_types[0].offerings = Span(1, 5)
    with pytest.raises(CatalogError):
        expand(catalog)
