import pytest
from capstan_provider.requirements import Requirements, does_not_exist, exists, gt, in_, lt, not_in
from capstan_provider.resources import parse_map
from kwok_provider import drift, node
from kwok_provider.catalog import CPU_LABEL, build
from kwok_provider.params import Parameters
from kwok_provider.selection import NoLaunch, cheapest
from capstan_provider.types import KeyValue, NodeClaim, Resource, Taint, TaintEffect


def pick(params, reqs=(), requests=None):
    launch = cheapest(build(Parameters.parse(params)), Requirements.of(reqs), parse_map(requests or {}))
    return launch.entry.name, launch.offer.zone, launch.offer.capacity_type


def test_picks_the_cheapest_fitting_offering():
    assert pick("{}", requests={"cpu": "500m"}) == ("c-1x-amd64-linux", "test-zone-a", "spot")
    assert pick("{}", requests={"cpu": "1", "memory": "1Gi"})[0] == "c-2x-amd64-linux"
    assert pick("{}", requests={"memory": "30Gi"})[0] == "m-4x-amd64-linux"
    assert pick("{}", requests={"pods": "100"})[0] == "c-8x-amd64-linux"


def test_honours_every_operator():
    chosen = pick(
        "{}",
        [
            in_("karpenter.sh/capacity-type", ["on-demand"]),
            not_in("topology.kubernetes.io/zone", ["test-zone-a", "test-zone-b"]),
            in_("kubernetes.io/arch", ["arm64"]),
            exists("node.kubernetes.io/instance-type"),
            does_not_exist("example.com/gpu"),
            gt(CPU_LABEL, 2),
            lt(CPU_LABEL, 8),
        ],
    )
    assert chosen == ("c-4x-arm64-linux", "test-zone-c", "on-demand")


def test_no_launch_tells_unavailable_from_incompatible():
    with pytest.raises(NoLaunch) as e:
        pick('{"unavailableOfferings":[{}]}')
    assert e.value.unavailable
    with pytest.raises(NoLaunch) as e:
        pick("{}", requests={"cpu": "1000"})
    assert not e.value.unavailable
    assert "144 too small" not in str(e.value) and "72 too small" in str(e.value)


def claim():
    return NodeClaim(
        name="pool-abc",
        node_pool_name="pool",
        labels=[KeyValue("team", "a")],
        annotations=[KeyValue("x", "y")],
        taints=[Taint("dedicated", "gpu", TaintEffect.NO_SCHEDULE)],
        startup_taints=[Taint("dedicated", "gpu", TaintEffect.NO_SCHEDULE), Taint("init", None, TaintEffect.NO_EXECUTE)],
        requirements=[in_("example.com/tier", ["gold"]), in_("kubernetes.io/arch", ["amd64", "arm64"])],
        requests=[Resource("cpu", "1")],
        provider_id=None,
        image_id=None,
        node_name=None,
        capacity=[],
        allocatable=[],
        created_at=None,
    )


def test_node_round_trips_to_a_claim():
    entries = build(Parameters.parse("{}"))
    launch = cheapest(entries, Requirements(), {})
    body = node.build(claim(), launch, node.Provenance("nc", "h", "img", 1234))
    labels = body["metadata"]["labels"]
    assert labels["example.com/tier"] == "gold" and "kubernetes.io/arch" in labels and labels["team"] == "a"
    assert labels["karpenter.sh/nodepool"] == "pool" and labels["capstan.dev/provider"] == "kwok"
    assert labels["kubernetes.io/hostname"] == "pool-abc"
    assert labels["kwok.x-k8s.io/node"] == "fake", "as Karpenter's kwok provider labels its nodes"
    assert labels["eks-node-viewer/instance-price"] == f"{launch.offer.price:.6f}"
    assert [t["key"] for t in body["spec"]["taints"]] == ["karpenter.sh/unregistered", "dedicated", "init"]
    assert body["spec"]["providerID"] == "kwok://pool-abc"
    assert body["status"]["allocatable"]["cpu"] == "900m"
    assert node.is_managed(body) and not node.is_deleting(body)

    out = node.launched_claim(body, claim())
    assert out.provider_id == "kwok://pool-abc" and out.node_name == "pool-abc" and out.image_id == "img"
    assert out.created_at == 1234
    assert [kv.key for kv in out.annotations][0] == "x"
    assert {kv.key for kv in out.annotations} >= {node.HASH_ANNOTATION, node.IMAGE_ANNOTATION}
    assert out.requests == [Resource("cpu", "1")]
    plain = node.to_claim(body)
    assert [t.key for t in plain.taints] == ["dedicated", "init"]


def test_provider_ids_and_timestamps():
    assert node.name_from_provider_id("kwok://a") == "a"
    assert node.name_from_provider_id("kwok://") is None
    assert node.name_from_provider_id("aws:///a") is None
    assert node.parse_timestamp_millis("1970-01-01T00:00:01Z") == 1000
    assert node.parse_timestamp_millis("yesterday") is None


def test_drift_reasons():
    assert drift.reason("h1", "i1", "h1", "i1") is None
    assert drift.reason("h1", "i1", "h1", "i2") == drift.IMAGE_DRIFTED
    assert drift.reason("h1", "i1", "h2", "i2") == drift.IMAGE_DRIFTED
    assert drift.reason("h1", "i1", "h2", "i1") == drift.NODE_CLASS_DRIFTED
    assert drift.reason(None, None, "h2", "i2") is None
