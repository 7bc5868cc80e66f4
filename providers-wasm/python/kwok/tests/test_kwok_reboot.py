"""Contract 0.4 in the kwok provider: the reboot's Node patch (as the Rust kwok's ``reboot.rs``
tests it), ``reboot`` against a fake ``kube`` (a new boot ID, once per operation ID), and the
repair rules (the Rust kwok's)."""

import pytest
from capstan_provider import host, kube
from capstan_provider.types import NodeClaim
from componentize_py_types import Err
from kwok_provider import node, reboot, repair
from kwok_provider.provider import Kwok
from wit_world.imports.kube import KubeError_PermissionDenied, KubeError_Unavailable
from wit_world.imports.lifecycle import (
    RebootError_Failed,
    RebootError_NotFound,
    RebootError_Retryable,
    Registration_Ready,
    RepairAction,
    RepairRule,
)

NOW = "2026-12-02T13:00:00Z"


def test_a_running_node_gets_a_new_boot_and_goes_not_ready():
    found = {
        "status": {
            "nodeInfo": {"bootID": "", "architecture": "amd64"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True", "reason": "KubeletReady"},
            ],
        }
    }
    assert reboot.patch(found, "uid-1-abc", NOW) == [
        {"op": "add", "path": "/status/nodeInfo/bootID", "value": "kwok-uid-1-abc"},
        {"op": "test", "path": "/status/conditions/1/type", "value": "Ready"},
        {
            "op": "replace",
            "path": "/status/conditions/1",
            "value": {
                "type": "Ready",
                "status": "False",
                "reason": "KubeletNotReady",
                "message": "kwok provider: rebooting (operation uid-1-abc)",
                "lastHeartbeatTime": NOW,
                "lastTransitionTime": NOW,
            },
        },
    ]


def test_the_same_operation_reboots_once():
    found = {"status": {"nodeInfo": {"bootID": "kwok-op"}, "conditions": []}}
    assert reboot.patch(found, "op", NOW) is None
    # Another operation reboots again; a Node without Ready gets one.
    assert reboot.patch(found, "op2", NOW)[-1]["path"] == "/status/conditions/-"


def test_a_node_without_status_gets_one():
    ops = reboot.patch({"metadata": {"name": "n"}}, "op", NOW)
    assert ops[0] == {"op": "add", "path": "/status", "value": {}}
    assert ops[1] == {"op": "add", "path": "/status/nodeInfo", "value": {"bootID": "kwok-op"}}
    assert ops[2]["path"] == "/status/conditions"


def test_timestamps_are_whole_seconds_utc():
    assert node.format_timestamp_millis(0) == "1970-01-01T00:00:00Z"
    assert node.format_timestamp_millis(1_732_576_865_500) == "2024-11-25T23:21:05Z"


def test_repair_rules_are_the_rust_kwoks():
    assert repair.rules() == [
        RepairRule("Ready", "False", "", 600, 0, 0, RepairAction.REPLACE),
        RepairRule("Ready", "Unknown", ".*", 600, 0, 0, RepairAction.REPLACE),
        RepairRule("KWOKUnhealthy", "True", ".*", 30, 45, 0, RepairAction.REPLACE),
        RepairRule("KWOKRebootRequired", "True", ".*", 30, 60, 0, RepairAction.REBOOT),
    ]
    assert Kwok().repair_policies() == repair.rules()


def claim(provider_id="kwok://n1"):
    return NodeClaim("c1", None, [], [], [], [], [], [], provider_id, None, "n1", [], [], None)


class FakeNodes:
    """``kube.get_opt`` and ``kube.patch_json`` over one Node, applying the patch's bootID."""

    def __init__(self, found):
        self.found = found
        self.patches = []
        self.fail = None

    def get_opt(self, obj):
        if self.fail is not None:
            raise self.fail
        return self.found

    def patch_json(self, obj, ops):
        assert (obj.name, obj.subresource) == ("n1", "status")
        self.patches.append(ops)
        assert ops[0]["path"] == "/status/nodeInfo/bootID"
        self.found["status"]["nodeInfo"]["bootID"] = ops[0]["value"]
        return self.found


@pytest.fixture
def nodes(monkeypatch):
    fake = FakeNodes(
        {
            "metadata": {"name": "n1", "labels": {node.PROVIDER_LABEL: "kwok"}},
            "status": {"nodeInfo": {"bootID": "b0"}, "conditions": [{"type": "Ready", "status": "True"}]},
        }
    )
    monkeypatch.setattr(kube, "get_opt", fake.get_opt)
    monkeypatch.setattr(kube, "patch_json", fake.patch_json)
    monkeypatch.setattr(host, "now_millis", lambda: 0)
    monkeypatch.setattr(host, "info", lambda message: None)
    return fake


def test_reboot_is_idempotent_per_operation(nodes):
    Kwok().reboot(claim(), "op-1")
    Kwok().reboot(claim(), "op-1")
    assert len(nodes.patches) == 1
    assert nodes.found["status"]["nodeInfo"]["bootID"] == "kwok-op-1"
    Kwok().reboot(claim(), "op-2")
    assert len(nodes.patches) == 2


def reboot_error(c=None):
    with pytest.raises(Err) as failure:
        Kwok().reboot(c or claim(), "op")
    return failure.value.value


def test_reboot_of_what_is_not_a_kwok_node(nodes):
    assert isinstance(reboot_error(claim(provider_id=None)), RebootError_NotFound)
    assert isinstance(reboot_error(claim(provider_id="aws:///i-1")), RebootError_NotFound)
    nodes.found["metadata"]["deletionTimestamp"] = NOW
    assert isinstance(reboot_error(), RebootError_NotFound)
    nodes.found = None
    assert isinstance(reboot_error(), RebootError_NotFound)
    assert nodes.patches == []


def test_reboot_failures(nodes):
    nodes.fail = kube.KubeCallError(KubeError_Unavailable("down"), "unavailable: down")
    assert isinstance(reboot_error(), RebootError_Retryable)
    nodes.fail = kube.KubeCallError(KubeError_PermissionDenied("no grant"), "permission-denied: no grant")
    assert isinstance(reboot_error(), RebootError_Failed)
    # Another provider's Node (an `owned` grant refuses it) is not found.
    nodes.fail = kube.KubeCallError(KubeError_PermissionDenied("capstan.dev/provider"), "permission-denied: capstan.dev/provider")
    assert isinstance(reboot_error(), RebootError_NotFound)


def test_registration_is_ready():
    assert Kwok().registered(claim()) == Registration_Ready()
