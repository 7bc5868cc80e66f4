"""What contract 0.4 adds (the session's bindings are 0.5's, which keep 0.4's ``lifecycle``): the
base class's ``reboot`` and ``registered`` defaults, repair rules, registration answers, reboot
errors and volume limits; and that the SDK still answers in the older shapes under the bindings of
0.1 to 0.4."""

import os
import subprocess
import sys
import textwrap

import pytest
from capstan_provider import catalog, devices, lifecycle
from capstan_provider.kube import KubeCallError
from capstan_provider.provider import Provider, ready_repair_policies
from capstan_provider.quantity import Quantity
from capstan_provider.types import NodeClaim, RepairPolicy
from componentize_py_types import Err
from wit_world.imports.kube import KubeError_Invalid, KubeError_NotFound, KubeError_PermissionDenied, KubeError_Unavailable
from wit_world.imports.devices import InstanceTypes
from wit_world.imports.lifecycle import (
    RebootError_Failed,
    RebootError_NotFound,
    RebootError_NotImplemented,
    RebootError_Retryable,
    Registration_Ready,
    Registration_Wait,
    RegistrationWait,
    RepairAction,
    RepairRule,
)


class Bare(Provider):
    def name(self) -> str:
        return "bare"


def claim(name="c"):
    return NodeClaim(name, None, [], [], [], [], [], [], "bare://c", None, None, [], [], None)


def test_the_session_speaks_0_5_and_so_0_4():
    assert lifecycle.V0_4 and devices.V0_5


def test_a_provider_without_reboot_says_not_implemented():
    with pytest.raises(Err) as failure:
        Bare().reboot(claim(), "op-1")
    assert failure.value.value == RebootError_NotImplemented()
    assert lifecycle.reboot_error_kind(failure.value.value) == "not-implemented"


def test_a_provider_without_a_registration_hook_is_ready():
    assert Bare().registered(claim()) == Registration_Ready()


def test_a_provider_without_repair_rules_repairs_nothing():
    assert Bare().repair_policies() == []


def test_ready_repair_policies_are_replace_rules_under_0_4():
    # As the host reads an older component's policies: the first is the default.
    assert ready_repair_policies(1800) == [
        RepairRule("Ready", "False", "", 1800, None, 0, RepairAction.REPLACE),
        RepairRule("Ready", "Unknown", ".*", 1800, None, 0, RepairAction.REPLACE),
    ]
    assert lifecycle.as_repair_rules([RepairPolicy("Ready", "False", 60)]) == [
        RepairRule("Ready", "False", "", 60, None, 0, RepairAction.REPLACE)
    ]


def test_repair_rules_carry_action_priority_drain_and_toleration():
    rule = lifecycle.repair_rule("KWOKRebootRequired", "True", 30, termination_grace_seconds=60, priority=7, reboot=True)
    assert rule == RepairRule("KWOKRebootRequired", "True", ".*", 30, 60, 7, RepairAction.REBOOT)
    assert lifecycle.repair_rule("Ready", "False", 600, reason_regex="").action == RepairAction.REPLACE
    with pytest.raises(ValueError):
        lifecycle.repair_rule("Ready", "False", 600, priority=101)
    with pytest.raises(ValueError):
        lifecycle.repair_rule("Ready", "False", 600, reason_regex="", reboot=True)


def test_registration_answers():
    assert lifecycle.ready() == Registration_Ready()
    assert lifecycle.wait("agent not up", 5000) == Registration_Wait(RegistrationWait(5000, "agent not up"))
    assert lifecycle.wait("later").value.requeue_after_millis is None


def test_reboot_errors():
    assert lifecycle.reboot_failed("no").value == RebootError_Failed("no")
    assert lifecycle.reboot_not_found("gone").value == RebootError_NotFound("gone")
    assert lifecycle.reboot_retryable("busy").value == RebootError_Retryable("busy")
    assert [lifecycle.reboot_error_kind(e.value) for e in (lifecycle.reboot_failed("x"), lifecycle.reboot_not_found("x"), lifecycle.reboot_retryable("x"))] == [
        "failed",
        "not-found",
        "retryable",
    ]


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (KubeError_NotFound("gone"), RebootError_NotFound),
        (KubeError_PermissionDenied("no grant"), RebootError_Failed),
        (KubeError_Unavailable("down"), RebootError_Retryable),
        (KubeError_Invalid("test failed"), RebootError_Retryable),
        (None, RebootError_Retryable),
    ],
)
def test_kube_failures_as_reboot_errors(error, kind):
    assert isinstance(KubeCallError(error, "text").reboot_error().value, kind)


def builder_with_limits():
    b = catalog.CatalogBuilder()
    cpu = {"cpu": Quantity.parse("2")}
    b.instance_type("small").capacity(cpu).volume_limit("ebs.csi.aws.com", 16).volume_limit("efs.csi.aws.com", 8)
    b.instance_type("large").capacity(cpu).volume_limit("ebs.csi.aws.com", 32)
    b.instance_type("bare").capacity(cpu)
    return b


def test_instance_types_carry_volume_limits():
    answer = builder_with_limits().finish_instance_types()
    # 0.5's answer: 0.4's, and no devices when no type was given any.
    assert isinstance(answer, InstanceTypes)
    assert answer.slices == [] and answer.devices == []
    assert catalog.expand_volume_limits(answer) == {
        "small": {"ebs.csi.aws.com": 16, "efs.csi.aws.com": 8},
        "large": {"ebs.csi.aws.com": 32},
    }
    # The catalog is the one `finish` builds, with the drivers' names in its string table.
    assert [t.name for t in catalog.expand(answer.catalog)] == ["small", "large", "bare"]
    assert lifecycle.catalog_of(answer) is answer.catalog
    with pytest.raises(ValueError):
        catalog.CatalogBuilder().instance_type("x").volume_limit("ebs.csi.aws.com", -1)


def test_a_catalog_alone_is_an_answer_without_limits():
    built = builder_with_limits().finish()
    answer = lifecycle.instance_types(built)
    assert answer == InstanceTypes(built, [], [], [])
    assert lifecycle.catalog_of(built) is built


# Run under an older contract's bindings: the same SDK answers in that contract's shapes.
OLDER = textwrap.dedent(
    """
    from capstan_provider import catalog, kube, lifecycle, params, requirements, resources
    from capstan_provider.provider import Provider, ready_repair_policies
    from capstan_provider.quantity import Quantity
    from capstan_provider.types import Catalog, RepairPolicy

    class Bare(Provider):
        def name(self):
            return "bare"

    assert not lifecycle.V0_4
    assert ready_repair_policies(60) == [RepairPolicy("Ready", "False", 60), RepairPolicy("Ready", "Unknown", 60)]
    assert Bare().repair_policies() == []
    from capstan_provider import devices

    assert not devices.V0_5
    b = catalog.CatalogBuilder()
    gpus = devices.SliceBuilder("gpu.example.com", "gpus")
    gpus.device("gpu-0").attribute("type", "gpu")
    b.instance_type("small").capacity({"cpu": Quantity.parse("1")}).volume_limit("ebs.csi.aws.com", 16).slices([gpus])
    answer = b.finish_instance_types()
    assert isinstance(answer, Catalog) and "ebs.csi.aws.com" not in answer.strings, answer
    assert lifecycle.catalog_of(answer) is answer
    try:
        lifecycle.ready()
    except lifecycle.ContractError:
        pass
    else:
        raise AssertionError("ready() under an older contract")
    print("ok")
    """
)


@pytest.mark.parametrize("contract", ["0.1", "0.2", "0.3"])
def test_older_contracts_keep_their_shapes(contract, older_path):
    env = {**os.environ, "PYTHONPATH": older_path(contract)}
    run = subprocess.run([sys.executable, "-c", OLDER], env=env, capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr


# Run under 0.4's bindings: volume limits as before, devices left out.
V0_4 = textwrap.dedent(
    """
    from capstan_provider import catalog, devices, lifecycle
    from capstan_provider.quantity import Quantity
    from wit_world.imports.lifecycle import InstanceTypes, VolumeLimit

    assert lifecycle.V0_4 and not devices.V0_5
    b = catalog.CatalogBuilder()
    gpus = devices.SliceBuilder("gpu.example.com", "gpus")
    gpus.device("gpu-0").attribute("type", "gpu")
    b.instance_type("small").capacity({"cpu": Quantity.parse("1")}).volume_limit("ebs.csi.aws.com", 16).slices([gpus])
    answer = b.finish_instance_types()
    assert type(answer) is InstanceTypes, answer
    assert answer.volume_limits == [VolumeLimit(0, answer.catalog.strings.index("ebs.csi.aws.com"), 16)]
    assert "gpu.example.com" not in answer.catalog.strings
    built = b.finish()
    assert lifecycle.instance_types(built) == InstanceTypes(built, [])
    templates = devices.DeviceTemplates()
    templates.add(0, [gpus])
    assert templates.answer(built) == InstanceTypes(built, [])
    assert lifecycle.catalog_of(answer) is answer.catalog
    try:
        gpus.wit()
    except lifecycle.ContractError:
        pass
    else:
        raise AssertionError("a slice template under 0.4")
    print("ok")
    """
)


def test_0_4_keeps_its_shape(older_path):
    env = {**os.environ, "PYTHONPATH": older_path("0.4")}
    run = subprocess.run([sys.executable, "-c", V0_4], env=env, capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr
