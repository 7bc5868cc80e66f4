"""A base class for providers: every export but ``name`` answers ``invalid("not implemented:
<export>")`` until overridden (``capstan provider test`` lists those as not implemented yet),
``repair_policies`` is empty, and the exports contract 0.4 adds answer as a provider without the
feature: ``reboot`` is ``not-implemented`` (the host replaces the node instead) and ``registered``
is ``ready``. Under an older contract the host never calls those two.

The component's entry module (``app.py``, the one componentize-py builds) exports a class named
``CloudProvider`` implementing the contract's ``cloud-provider`` interface::

    from capstan_provider.provider import Provider

    class CloudProvider(Provider):
        def name(self) -> str:
            return "mycloud"
"""

from __future__ import annotations

from wit_world import exports
from capstan_provider.types import Catalog, NodeClaim, NodeClass, NodePool, RepairPolicy

from . import devices, lifecycle
from .errors import not_implemented


def ready_repair_policies(toleration_seconds: int) -> list:
    """Karpenter's usual node auto-repair: replace a node whose ``Ready`` condition has been
    ``False`` or ``Unknown`` for ``toleration_seconds``, in the contract's shape (``RepairPolicy``
    before 0.4; under 0.4 replace rules draining as the claim says, ``False`` the default)."""
    return lifecycle.repair_answer(RepairPolicy("Ready", status, toleration_seconds) for status in ("False", "Unknown"))


def lookup(pairs: list, key: str) -> str | None:
    """The value of the last ``key-value`` with ``key`` (labels, annotations), or ``None``."""
    for kv in reversed(pairs):
        if kv.key == key:
            return kv.value
    return None


class Provider(exports.CloudProvider):
    """The contract's ``cloud-provider`` export with every function stubbed."""

    def name(self) -> str:
        raise NotImplementedError("a provider must name itself")

    def get_instance_types(self, pool: NodePool, class_: NodeClass) -> Catalog | lifecycle.InstanceTypes | devices.InstanceTypes:
        raise not_implemented("get-instance-types")

    def create(self, claim: NodeClaim, class_: NodeClass) -> NodeClaim:
        raise not_implemented("create")

    def delete(self, claim: NodeClaim) -> None:
        raise not_implemented("delete")

    def get(self, provider_id: str) -> NodeClaim:
        raise not_implemented("get")

    def list(self) -> list[NodeClaim]:
        raise not_implemented("list")

    def is_drifted(self, claim: NodeClaim, class_: NodeClass) -> str | None:
        raise not_implemented("is-drifted")

    def repair_policies(self) -> list[RepairPolicy] | list[lifecycle.RepairRule]:
        return []

    def reboot(self, claim: NodeClaim, operation_id: str) -> None:
        raise lifecycle.reboot_not_implemented()

    def registered(self, claim: NodeClaim) -> lifecycle.Registration:
        return lifecycle.ready()

    def validate_node_class(self, class_: NodeClass) -> None:
        raise not_implemented("validate-node-class")
