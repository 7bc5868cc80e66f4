"""What contract 0.4 (Karpenter v1.15's contract) adds: the ``lifecycle`` interface's repair rules,
reboot errors, registration answers and volume limits, and helpers that answer in the shape of the
contract the component is built against, so one provider speaks 0.4 and the older contracts alike.
Contract 0.5 keeps all of it; its ``get-instance-types`` answer, with devices, is
:mod:`capstan_provider.devices`'.

Under 0.4 (``wit/since_v0.4.0/provider.wit``) ``repair-policies`` returns :class:`RepairRule`\\ s,
``get-instance-types`` an :class:`InstanceTypes` (the catalog with :class:`VolumeLimit`\\ s), and
the export gains ``reboot(claim, operation_id)`` and ``registered(claim)``. Under 0.1 to 0.3 the
bindings have no ``lifecycle`` module (:data:`V0_4` is ``False``): ``repair-policies`` returns the
``types.RepairPolicy`` shape, ``get-instance-types`` the bare catalog, and the host never calls
``reboot`` or ``registered``::

    from capstan_provider import lifecycle

    def repair_policies(self):
        return [lifecycle.repair_rule("Ready", "False", 600), ...]

    def reboot(self, claim, operation_id):
        raise lifecycle.reboot_retryable("the API is busy")   # or return None once accepted

    def registered(self, claim):
        return lifecycle.wait("the agent has not reported yet", requeue_after_millis=5_000)
"""

from __future__ import annotations

from collections.abc import Iterable

from componentize_py_types import Err
from capstan_provider.types import Catalog, RepairPolicy

try:
    from wit_world.imports import lifecycle as _wit
except ImportError:  # contracts 0.1 to 0.3
    _wit = None

try:
    from wit_world.imports import devices as _devices
except ImportError:  # contracts 0.1 to 0.4
    _devices = None

V0_4 = _wit is not None
"""Whether the component is built against contract 0.4 or later (its bindings have
``lifecycle``)."""

if _wit is not None:
    from wit_world.imports.lifecycle import (  # noqa: F401 (re-exported)
        InstanceTypes,
        RebootError,
        RebootError_Failed,
        RebootError_NotFound,
        RebootError_NotImplemented,
        RebootError_Retryable,
        Registration,
        Registration_Ready,
        Registration_Wait,
        RegistrationWait,
        RepairAction,
        RepairRule,
        VolumeLimit,
    )


class ContractError(RuntimeError):
    """A 0.4 answer asked for in a component built against an older contract."""


def _lifecycle():
    if _wit is None:
        raise ContractError("this needs contract 0.4: the component is built against an older one")
    return _wit


def repair_rule(
    condition_type: str,
    condition_status: str,
    toleration_seconds: int,
    *,
    reason_regex: str = ".*",
    termination_grace_seconds: int | None = None,
    priority: int = 0,
    reboot: bool = False,
):
    """A 0.4 repair rule: a node whose condition ``condition_type`` has had ``condition_status``
    (with a reason ``reason_regex`` matches; ``""`` makes it the set's default, of which a set has
    exactly one, and it replaces) for ``toleration_seconds`` is replaced, or rebooted in place with
    ``reboot=True``; ``termination_grace_seconds`` bounds the drain (``None``: the claim's own,
    ``0``: none); ``priority`` (0 to 100) orders repairs."""
    wit = _lifecycle()
    if not 0 <= priority <= 100:
        raise ValueError(f"priority {priority} is not within 0 to 100")
    if reboot and reason_regex == "":
        raise ValueError("the default rule (an empty reason_regex) replaces; it cannot reboot")
    action = wit.RepairAction.REBOOT if reboot else wit.RepairAction.REPLACE
    return wit.RepairRule(condition_type, condition_status, reason_regex, toleration_seconds, termination_grace_seconds, priority, action)


def as_repair_rules(policies: Iterable[RepairPolicy]) -> list:
    """Repair policies of the older shape as the 0.4 rules the host reads them as: each replaces
    after its toleration whatever the reason, draining as the claim says; the first is the set's
    default."""
    return [
        repair_rule(p.condition_type, p.condition_status, p.toleration_seconds, reason_regex="" if i == 0 else ".*")
        for i, p in enumerate(policies)
    ]


def repair_answer(policies: Iterable[RepairPolicy]) -> list:
    """``repair-policies``' answer from policies of the older shape, for the contract the component
    is built against: the policies themselves before 0.4, :func:`as_repair_rules` of them under
    0.4."""
    policies = list(policies)
    return as_repair_rules(policies) if V0_4 else policies


def instance_types(catalog: Catalog, volume_limits: Iterable = ()):
    """``get-instance-types``' answer for the contract the component is built against: under 0.4
    an :class:`InstanceTypes` of the catalog and ``volume_limits`` (:class:`VolumeLimit`\\ s, as
    :meth:`~capstan_provider.catalog.CatalogBuilder.finish_instance_types` makes them); under 0.5
    ``devices.InstanceTypes`` of them and no devices (:class:`~capstan_provider.devices.DeviceTemplates`
    answers with devices); before 0.4 the catalog itself (older contracts carry no volume limits:
    none may be given)."""
    limits = list(volume_limits)
    if _wit is None:
        if limits:
            raise ContractError("volume limits need contract 0.4: the component is built against an older one")
        return catalog
    if _devices is not None:
        return _devices.InstanceTypes(catalog, limits, [], [])
    return _wit.InstanceTypes(catalog, limits)


def catalog_of(answer) -> Catalog:
    """The catalog of a ``get-instance-types`` answer of any contract."""
    answers = tuple(m.InstanceTypes for m in (_wit, _devices) if m is not None)
    return answer.catalog if answers and isinstance(answer, answers) else answer


def ready():
    """``registered``' answer: register the node."""
    return _lifecycle().Registration_Ready()


def wait(message: str, requeue_after_millis: int | None = None):
    """``registered``' answer: not yet; the host asks again after ``requeue_after_millis`` (``None``:
    with backoff) and shows ``message`` on the claim's ``Registered`` condition meanwhile."""
    wit = _lifecycle()
    return wit.Registration_Wait(wit.RegistrationWait(requeue_after_millis, message))


def reboot_not_implemented() -> Err:
    """``reboot``'s error (raise it): this provider cannot reboot in place; the host replaces the
    node."""
    return Err(_lifecycle().RebootError_NotImplemented())


def reboot_failed(message: str) -> Err:
    """``reboot``'s error: it cannot succeed however often it is asked; the host replaces the node."""
    return Err(_lifecycle().RebootError_Failed(message))


def reboot_not_found(message: str) -> Err:
    """``reboot``'s error: the instance does not exist (any more)."""
    return Err(_lifecycle().RebootError_NotFound(message))


def reboot_retryable(message: str) -> Err:
    """``reboot``'s error: a transient failure; the host asks again with the same operation ID."""
    return Err(_lifecycle().RebootError_Retryable(message))


def reboot_error_kind(error) -> str:
    """The kebab-case case name of a ``reboot-error`` (``not-implemented``, ``failed``, ...)."""
    wit = _lifecycle()
    return {
        wit.RebootError_NotImplemented: "not-implemented",
        wit.RebootError_Failed: "failed",
        wit.RebootError_NotFound: "not-found",
        wit.RebootError_Retryable: "retryable",
    }[type(error)]
