"""Contract 0.5 in the kwok provider: the DRA KWOK driver's ``DRAConfig``\\ s as the slice templates
of the instance types their pools select (the Rust kwok's ``devices.rs`` tests, and the decoding),
and ``get-instance-types`` against a fake ``kube`` and ``host`` cache: the devices in the answer,
the list cached, and no devices (cached, or this time only) when the CRD or the grant is missing
or the list fails, as the Rust kwok's ``provider.rs`` does."""

import copy
import json

import pytest
from capstan_provider import host, kube
from capstan_provider.catalog import expand, expand_devices
from capstan_provider.devices import DeviceBuilder, SliceBuilder, Version
from capstan_provider.types import NodeClass, NodePool
from kwok_provider import catalog, devices
from kwok_provider.devices import DraConfig, DraConfigError, Expression, Term, templates
from kwok_provider.provider import DRA_CONFIGS_CACHE_KEY, DRA_CONFIGS_TTL_MILLIS, Kwok
from wit_world.imports.kube import KubeError_NotFound, KubeError_PermissionDenied, KubeError_Unavailable

CONFIG = {
    "apiVersion": devices.API_VERSION,
    "kind": devices.KIND,
    "metadata": {"name": "gpus"},
    "spec": {
        "driver": "gpu.example.com",
        "pools": [
            {
                "name": "big",
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["g-8x-amd64-linux"]}]}],
                "resourceSlices": [
                    {
                        "devices": [
                            {
                                "name": "gpu-0",
                                "attributes": {"type": {"string": "gpu"}, "index": {"int": 0}, "driverVersion": {"version": "1.2.3"}, "healthy": {"bool": True}},
                                "capacity": {"memory": {"value": "80Gi"}},
                            },
                            {"name": "gpu-1", "attributes": {"type": {"string": "gpu"}}},
                        ]
                    }
                ],
            },
            {
                "name": "zonal",
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-a"]}]}],
                "resourceSlices": [{"devices": [{"name": "nic-0"}]}],
            },
        ],
    },
}


def config(obj=CONFIG) -> DraConfig:
    return DraConfig.parse(copy.deepcopy(obj))


def labels(instance_type: str) -> dict[str, str]:
    return {"node.kubernetes.io/instance-type": instance_type, "kubernetes.io/arch": "amd64"}


def test_a_selected_type_gets_the_pools_devices():
    (t,) = templates([config()], labels("g-8x-amd64-linux"))
    expected = SliceBuilder("gpu.example.com", "big")
    expected.device("gpu-0").attribute("type", "gpu").attribute("index", 0).attribute("driverVersion", Version("1.2.3")).attribute("healthy", True).capacity("memory", "80Gi")
    expected.device("gpu-1").attribute("type", "gpu")
    assert t == expected
    assert [d.name for d in t.devices] == ["gpu-0", "gpu-1"]
    # The bool stays a bool, the int an int.
    assert t.wit().devices[0].attributes[1].value.value is True


def test_other_types_and_open_labels_get_nothing():
    assert templates([config()], labels("c-4x-amd64-linux")) == []
    # The zone is not a label every node of a type carries: the zonal pool selects no type.
    zonal = config()
    del zonal.pools[0]
    entries = catalog.generated()
    assert all(templates([zonal], e.node_labels()) == [] for e in entries)
    # ... though it would select a node in that zone.
    assert len(templates([zonal], {**entries[0].node_labels(), "topology.kubernetes.io/zone": "test-zone-a"})) == 1


def test_terms_are_ored_and_expressions_anded():
    c = config()
    c.pools[0].node_selector_terms = [
        Term([Expression("kubernetes.io/arch", "In", ["arm64"]), Expression("node.kubernetes.io/instance-type", "Exists")]),
        Term([Expression("node.kubernetes.io/instance-type", "In", ["m-8x-amd64-linux"])]),
    ]
    assert templates([c], labels("c-4x-amd64-linux")) == []
    assert len(templates([c], labels("m-8x-amd64-linux"))) == 1
    arm = {**labels("c-4x-arm64-linux"), "kubernetes.io/arch": "arm64"}
    assert len(templates([c], arm)) == 1


@pytest.mark.parametrize(
    ("expression", "selected"),
    [
        (Expression("karpenter.kwok.sh/instance-cpu", "Gt", ["4"]), True),
        (Expression("karpenter.kwok.sh/instance-cpu", "Gt", ["8"]), False),
        (Expression("karpenter.kwok.sh/instance-cpu", "Lt", ["16"]), True),
        (Expression("karpenter.kwok.sh/instance-cpu", "Gt", ["4", "5"]), False),
        (Expression("karpenter.kwok.sh/instance-cpu", "Gt", ["four"]), False),
        (Expression("karpenter.kwok.sh/instance-family", "Gt", ["1"]), False),
        (Expression("karpenter.kwok.sh/instance-family", "NotIn", ["c"]), False),
        (Expression("karpenter.kwok.sh/instance-family", "NotIn", ["g"]), True),
        (Expression("karpenter.kwok.sh/instance-size", "NotIn", ["8"]), True),  # absent
        (Expression("karpenter.kwok.sh/instance-size", "DoesNotExist"), True),
        (Expression("karpenter.kwok.sh/instance-family", "DoesNotExist"), False),
        (Expression("karpenter.kwok.sh/instance-family", "Like", ["c"]), False),
    ],
)
def test_operators_as_the_host_reads_them(expression, selected):
    c = config()
    c.pools[0].node_selector_terms = [Term([expression])]
    node = {**labels("c-8x-amd64-linux"), "karpenter.kwok.sh/instance-cpu": "8", "karpenter.kwok.sh/instance-family": "c"}
    assert bool(templates([c], node)) == selected


def test_empty_and_field_terms_select_nothing():
    c = config()
    c.pools[0].node_selector_terms = [Term([]), Term([Expression("node.kubernetes.io/instance-type", "Exists")], [Expression("metadata.name", "In", ["n"])])]
    assert templates([c], labels("g-8x-amd64-linux")) == []


def test_decoding_follows_the_api():
    obj = copy.deepcopy(CONFIG)
    device = obj["spec"]["pools"][0]["resourceSlices"][0]["devices"][0]
    device["capacity"]["cores"] = {"value": 128}  # int-or-string
    device["attributes"]["empty"] = {}  # no value: left out
    device["attributes"]["both"] = {"int": 1, "string": "one"}  # the int wins, as in the Rust kwok
    device["allowMultipleAllocations"] = True
    device["consumesCounters"] = [{"counterSet": "gpu-0", "counters": {"memory": {"value": "40Gi"}}}]
    device["bindsToNode"] = True  # unknown to the provider: ignored
    gpu = config(obj).pools[0].resource_slices[0].devices[0]
    assert gpu == (
        DeviceBuilder("gpu-0")
        .attributes_of({"type": "gpu", "index": 0, "driverVersion": Version("1.2.3"), "healthy": True, "both": 1})
        .capacity_of({"memory": "80Gi", "cores": "128"})
        .shareable()
        .consumes("gpu-0", {"memory": "40Gi"})
    )
    assert DraConfig.parse({"metadata": {"name": "empty"}}) == DraConfig()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda o: o["spec"].update(pools={}), "spec.pools: not a list"),
        (lambda o: o["spec"]["pools"][0]["nodeSelectorTerms"][0]["matchExpressions"][0].pop("operator"), "operator: missing"),
        (lambda o: o["spec"]["pools"][0]["nodeSelectorTerms"][0]["matchExpressions"][0].update(values=[1]), "values: not a list of strings"),
        (lambda o: o["spec"]["pools"][0]["resourceSlices"][0]["devices"][1].pop("name"), r"devices\[1\].name: missing"),
        (lambda o: o["spec"]["pools"][0]["resourceSlices"][0]["devices"][0]["attributes"]["index"].update(int=True), "index.int: not an integer"),
        (lambda o: o["spec"]["pools"][0]["resourceSlices"][0]["devices"][0]["attributes"]["index"].update(string=3), "index.string: not a string"),
        (lambda o: o["spec"]["pools"][0]["resourceSlices"][0]["devices"][0]["capacity"].update(memory={}), "memory.value: missing"),
        (lambda o: o["spec"]["pools"][0]["resourceSlices"][0]["devices"][0]["capacity"].update(memory={"value": "lots"}), "lots"),
        (lambda o: o["spec"]["pools"][0]["resourceSlices"][0]["devices"][1].update(name="gpu-0"), "gpu-0 given twice"),
        (lambda o: o["spec"].update(driver=""), "driver"),
    ],
)
def test_what_does_not_decode_is_refused(change, message):
    obj = copy.deepcopy(CONFIG)
    change(obj)
    with pytest.raises(DraConfigError, match=message):
        devices.parse_list([obj])


def test_the_list_error_names_the_config():
    bad = copy.deepcopy(CONFIG)
    bad["metadata"]["name"] = "broken"
    bad["spec"]["driver"] = 7
    with pytest.raises(DraConfigError, match="DRAConfig broken: spec.driver"):
        devices.parse_list([CONFIG, bad])


class Cluster:
    """A fake ``kube.list_items`` serving DRAConfigs (or failing), and the host cache and log."""

    def __init__(self, items=None, fail=None):
        self.items = items or []
        self.fail = fail
        self.lists = 0
        self.cache = {}
        self.ttls = {}
        self.logs = []

    def list_items(self, target, **_):
        assert (target.api_version, target.kind, target.namespace) == (devices.API_VERSION, devices.KIND, None)
        self.lists += 1
        if self.fail is not None:
            raise self.fail
        return copy.deepcopy(self.items)

    def cache_set(self, key, value, ttl):
        self.cache[key] = json.dumps(value)
        self.ttls[key] = ttl

    def cache_get(self, key):
        return json.loads(self.cache[key]) if key in self.cache else None


@pytest.fixture
def cluster(monkeypatch):
    fake = Cluster()
    monkeypatch.setattr(kube, "list_items", fake.list_items)
    monkeypatch.setattr(host, "cache_get", fake.cache_get)
    monkeypatch.setattr(host, "cache_set", fake.cache_set)
    monkeypatch.setattr(host, "debug", lambda m: fake.logs.append(("debug", m)))
    monkeypatch.setattr(host, "warn", lambda m: fake.logs.append(("warn", m)))
    return fake


POOL = NodePool("default", [], [], [], [])
CLASS = NodeClass("default", "{}")


def by_family(family: str, arch: str = "amd64") -> dict:
    obj = copy.deepcopy(CONFIG)
    obj["spec"]["pools"][0]["nodeSelectorTerms"] = [
        {
            "matchExpressions": [
                {"key": "karpenter.kwok.sh/instance-family", "operator": "In", "values": [family]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": [arch]},
                {"key": "karpenter.kwok.sh/instance-cpu", "operator": "Gt", "values": ["32"]},
            ]
        }
    ]
    return obj


def test_instance_types_carry_the_devices_their_pools_select(cluster):
    cluster.items = [by_family("m")]
    answer = Kwok().get_instance_types(POOL, CLASS)
    found = expand_devices(answer)
    assert sorted(found) == sorted(f"m-{n}x-amd64-linux" for n in (48, 64, 96, 128, 192, 256))
    # One template, shared by every type that carries it.
    assert len(answer.slices) == 1
    assert [d.name for d in found["m-48x-amd64-linux"][0].devices] == ["gpu-0", "gpu-1"]
    assert found["m-48x-amd64-linux"][0].pool == "big"
    # The catalog is the one kwok answers without devices.
    assert len(expand(answer.catalog)) == 72


def test_the_list_is_cached_for_a_while(cluster):
    cluster.items = [by_family("m"), by_family("c", "arm64")]
    first = expand_devices(Kwok().get_instance_types(POOL, CLASS))
    second = expand_devices(Kwok().get_instance_types(POOL, CLASS))
    assert cluster.lists == 1
    assert first == second and len(first) == 12
    assert cluster.ttls[DRA_CONFIGS_CACHE_KEY] == DRA_CONFIGS_TTL_MILLIS == 10_000
    # What is cached is what was read, the specs.
    assert json.loads(cluster.cache[DRA_CONFIGS_CACHE_KEY]) == [{"spec": c["spec"]} for c in cluster.items]


@pytest.mark.parametrize("error", [KubeError_NotFound("no DRAConfig kind"), KubeError_PermissionDenied("no grant")])
def test_without_the_crd_or_the_grant_there_are_no_devices_for_a_while(cluster, error):
    cluster.fail = kube.KubeCallError(error, f"list: {error.value}")
    answer = Kwok().get_instance_types(POOL, CLASS)
    assert answer.slices == [] and answer.devices == []
    assert len(expand(answer.catalog)) == 72
    Kwok().get_instance_types(POOL, CLASS)
    assert cluster.lists == 1
    assert cluster.cache[DRA_CONFIGS_CACHE_KEY] == "[]"
    assert [level for level, _ in cluster.logs] == ["debug"]


@pytest.mark.parametrize(
    "fail",
    [kube.KubeCallError(KubeError_Unavailable("down"), "unavailable: down"), kube.KubeCallError(None, "decoding the answer: not a JSON object")],
)
def test_a_failed_list_means_no_devices_this_time(cluster, fail):
    cluster.fail = fail
    assert Kwok().get_instance_types(POOL, CLASS).devices == []
    assert cluster.logs[0][0] == "warn" and "no devices this time" in cluster.logs[0][1]
    # Not cached: the next call lists again, and now it works.
    cluster.fail = None
    cluster.items = [by_family("m")]
    assert len(Kwok().get_instance_types(POOL, CLASS).devices) == 6
    assert cluster.lists == 2


def test_a_config_that_does_not_decode_means_no_devices_this_time(cluster):
    bad = by_family("m")
    bad["spec"]["pools"][0]["resourceSlices"][0]["devices"][0]["capacity"]["memory"] = {"value": "lots"}
    cluster.items = [by_family("c"), bad]
    assert Kwok().get_instance_types(POOL, CLASS).devices == []
    assert DRA_CONFIGS_CACHE_KEY not in cluster.cache
    assert cluster.logs[0][0] == "warn" and "DRAConfig gpus" in cluster.logs[0][1]


def test_a_cached_list_that_does_not_decode_is_listed_again(cluster):
    cluster.cache[DRA_CONFIGS_CACHE_KEY] = json.dumps([{"spec": {"driver": 7}}])
    cluster.items = [by_family("m")]
    assert len(Kwok().get_instance_types(POOL, CLASS).devices) == 6
    assert cluster.lists == 1
