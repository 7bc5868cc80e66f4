"""What contract 0.5 adds (the session's bindings are 0.5's): slice templates built with
``SliceBuilder``/``DeviceBuilder`` as the contract's records, identical templates shared across
instance types (as the Rust SDK's ``DeviceTemplates``), the answer of ``finish_instance_types`` and
its reader ``expand_devices``. The older contracts' shapes are ``test_lifecycle``'s."""

import pytest
from capstan_provider import catalog, devices
from capstan_provider.catalog import CatalogBuilder, CatalogError, expand_devices, expand_volume_limits
from capstan_provider.devices import DeviceBuilder, DeviceTemplates, SliceBuilder, Version
from capstan_provider.quantity import Quantity, QuantityError
from wit_world.imports.devices import (
    Attribute,
    AttributeValue_Boolean,
    AttributeValue_Int,
    AttributeValue_Text,
    AttributeValue_Version,
    CounterConsumption,
    CounterSet,
    Device,
    InstanceDevices,
    InstanceTypes,
    SliceTemplate,
)
from wit_world.imports.devices import Quantity as WitQuantity

CPU = {"cpu": Quantity.parse("2"), "memory": Quantity.parse("4Gi"), "pods": Quantity.parse("110")}


def gpus(n: int, memory: str = "80Gi") -> SliceBuilder:
    s = SliceBuilder("gpu.example.com", "gpus")
    for i in range(n):
        s.device(f"gpu-{i}").attribute("type", "gpu").attribute("index", i).capacity("memory", memory)
    return s


def nics() -> SliceBuilder:
    s = SliceBuilder("nic.example.com", "nics")
    s.device("nic-0").attribute("speed", "100G")
    return s


def test_a_device_becomes_the_contracts_record():
    d = (
        DeviceBuilder("gpu-0")
        .attribute("type", "gpu")
        .attribute("gpu.example.com/index", 3)
        .attribute("healthy", True)
        .attribute("driverVersion", Version("1.2.3"))
        .capacity("memory", "80Gi")
        .capacity("cores", 128)
        .capacity("bandwidth", Quantity.parse("2000m"))
        .consumes("gpu-0-memory", {"memory-slices": 4})
        .shareable()
    )
    assert d.wit() == Device(
        "gpu-0",
        # Sorted by name, each value its own case (a bool is not an int).
        [
            Attribute("driverVersion", AttributeValue_Version("1.2.3")),
            Attribute("gpu.example.com/index", AttributeValue_Int(3)),
            Attribute("healthy", AttributeValue_Boolean(True)),
            Attribute("type", AttributeValue_Text("gpu")),
        ],
        [WitQuantity("bandwidth", "2"), WitQuantity("cores", "128"), WitQuantity("memory", "80Gi")],
        True,
        [CounterConsumption("gpu-0-memory", [WitQuantity("memory-slices", "4")])],
    )
    assert DeviceBuilder("d").wit() == Device("d", [], [], False, [])


def test_a_pools_counters_come_in_a_slice_of_their_own():
    counters = SliceBuilder("gpu.example.com", "gpus").counter_set("gpu-0", {"memory": "80Gi", "slices": 8})
    assert counters.wit() == SliceTemplate("gpu.example.com", "gpus", [], [CounterSet("gpu-0", [WitQuantity("memory", "80Gi"), WitQuantity("slices", "8")])])
    partitions = SliceBuilder("gpu.example.com", "gpus")
    partitions.device("gpu-0-half-0").consumes("gpu-0", {"memory": "40Gi", "slices": 4})
    assert partitions.wit().devices[0].consumes_counters == [CounterConsumption("gpu-0", [WitQuantity("memory", "40Gi"), WitQuantity("slices", "4")])]
    both = SliceBuilder("gpu.example.com", "gpus").counter_set("gpu-0", {"memory": "80Gi"})
    both.device("gpu-0")
    with pytest.raises(ValueError, match="not both"):
        both.wit()
    with pytest.raises(ValueError, match="not both"):
        DeviceTemplates().add(0, [both])


@pytest.mark.parametrize(
    "build",
    [
        lambda: SliceBuilder("", "gpus"),
        lambda: SliceBuilder("gpu.example.com", ""),
        lambda: SliceBuilder("gpu.example.com", "gpus").device(""),
        lambda: gpus(1).device("gpu-0"),  # a name given twice
        lambda: DeviceBuilder("d").attribute("", "x"),
        lambda: DeviceBuilder("d").attribute("ratio", 1.5),
        lambda: DeviceBuilder("d").attribute("big", 1 << 63),
        lambda: DeviceBuilder("d").capacity("memory", "80 GiB"),
        lambda: DeviceBuilder("d").capacity("memory", 1.5),
        lambda: DeviceBuilder("d").capacity("", "1"),
        lambda: DeviceBuilder("d").consumes("", {"memory": "1"}),
        lambda: SliceBuilder("gpu.example.com", "gpus").counter_set("", {"memory": "1"}),
        lambda: SliceBuilder("gpu.example.com", "gpus").counter_set("c", {"memory": True}),
    ],
)
def test_what_the_host_would_refuse_is_refused_at_once(build):
    with pytest.raises(ValueError):
        build()


def test_a_malformed_quantity_says_which():
    with pytest.raises(QuantityError, match="80 GiB"):
        DeviceBuilder("d").capacity("memory", "80 GiB")
    assert DeviceBuilder("d").attribute("lowest", -(1 << 63)).attributes["lowest"] == -(1 << 63)


def test_types_with_the_same_devices_share_their_templates():
    # The Rust SDK's test, and a slice shared between different sets of slices.
    t = DeviceTemplates()
    t.add(0, [gpus(1)])
    t.add(1, [gpus(8)])
    t.add(2, [gpus(1)])
    t.add(3, [])
    t.add(4, [gpus(8), nics()])
    assert not t.is_empty()
    answer = t.answer(CatalogBuilder().finish())
    assert len(answer.slices) == 3
    assert answer.devices == [InstanceDevices(0, [0]), InstanceDevices(1, [1]), InstanceDevices(2, [0]), InstanceDevices(4, [1, 2])]
    assert len(answer.slices[1].devices) == 8
    assert answer.slices[2].driver == "nic.example.com"


def test_sharing_needs_equal_slices():
    # Attribute order does not matter; a value's kind does (true is not 1), as do the pool and
    # the capacities.
    a = SliceBuilder("d.example.com", "p")
    a.device("x").attribute("one", 1).attribute("two", "2")
    b = SliceBuilder("d.example.com", "p")
    b.device("x").attribute("two", "2").attribute("one", 1)
    c = SliceBuilder("d.example.com", "p")
    c.device("x").attribute("two", "2").attribute("one", True)
    assert a == b and a != c
    t = DeviceTemplates()
    for i, s in enumerate([a, b, c, gpus(1), gpus(1, "40Gi"), SliceBuilder("d.example.com", "q")]):
        t.add(i, [s])
    answer = t.answer(CatalogBuilder().finish())
    assert [d.slices for d in answer.devices] == [[0], [0], [1], [2], [3], [4]]


def test_adding_again_adds_and_later_changes_to_a_builder_are_not_seen():
    t = DeviceTemplates()
    s = gpus(1)
    t.add(0, [s])
    s.device("gpu-1")
    t.add(0, [nics()])
    answer = t.answer(CatalogBuilder().finish())
    assert answer.devices == [InstanceDevices(0, [0, 1])]
    assert [d.name for d in answer.slices[0].devices] == ["gpu-0"]
    assert DeviceTemplates().is_empty()
    with pytest.raises(ValueError):
        DeviceTemplates().add(-1, [gpus(1)])


def test_the_answer_carries_catalog_volume_limits_and_devices_and_reads_back():
    b = CatalogBuilder()
    counters = SliceBuilder("gpu.example.com", "gpus").counter_set("gpu-0", {"memory": "80Gi"})
    given = {
        "g-1x": [gpus(1)],
        "g-8x": [gpus(8), nics()],
        "g-1x-b": [gpus(1)],
        "parts": [counters, SliceBuilder("gpu.example.com", "gpus").add(DeviceBuilder("half").consumes("gpu-0", {"memory": "40Gi"}).shareable())],
    }
    for name, slices in given.items():
        b.instance_type(name).capacity(CPU).slices(slices)
    b.instance_type("c-4x").capacity(CPU).volume_limit("ebs.csi.aws.com", 25)
    answer = b.finish_instance_types()
    assert isinstance(answer, InstanceTypes)
    assert [t.name for t in catalog.expand(answer.catalog)] == ["g-1x", "g-8x", "g-1x-b", "parts", "c-4x"]
    assert expand_volume_limits(answer) == {"c-4x": {"ebs.csi.aws.com": 25}}
    assert expand_devices(answer) == given
    assert len(answer.slices) == 5  # g-1x-b's slice is g-1x's
    assert "c-4x" not in expand_devices(answer)
    version = SliceBuilder("d.example.com", "p")
    version.device("x").attribute("v", Version("1.0.0")).attribute("s", "1.0.0")
    b.instance_type("v").capacity(CPU).slices([version])
    assert expand_devices(b.finish_instance_types())["v"] == [version]


def answer_with(slices, devices_):
    b = CatalogBuilder()
    b.instance_type("t").capacity(CPU)
    return InstanceTypes(b.finish(), [], slices, devices_)


@pytest.mark.parametrize(
    ("slices", "devices_", "message"),
    [
        ([], [InstanceDevices(1, [])], "instance type 1"),
        ([], [InstanceDevices(0, [0])], "slice 0 out of range"),
        ([SliceTemplate("d", "p", [Device("x", [Attribute("a", AttributeValue_Int(1))] * 2, [], False, [])], [])], [InstanceDevices(0, [0])], "attribute a given twice"),
        ([SliceTemplate("d", "p", [Device("x", [], [WitQuantity("m", "lots")], False, [])], [])], [InstanceDevices(0, [0])], "lots"),
        ([SliceTemplate("", "p", [], [])], [InstanceDevices(0, [0])], "driver"),
    ],
)
def test_the_reader_refuses_what_the_host_refuses(slices, devices_, message):
    with pytest.raises(CatalogError, match=message):
        expand_devices(answer_with(slices, devices_))


def test_a_slice_no_type_names_is_not_read():
    answer = answer_with([SliceTemplate("", "p", [], [])], [])
    assert expand_devices(answer) == {}
    assert devices.V0_5
