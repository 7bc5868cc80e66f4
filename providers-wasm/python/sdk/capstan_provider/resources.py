"""Resource lists (``capacity``, ``allocatable``, ``requests``) as :class:`Quantity` maps."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from capstan_provider.types import Resource

from .quantity import Quantity

ResourceList = dict[str, Quantity]
"""Resource name to quantity (``{"cpu": Quantity.parse("4")}``)."""


def parse_resources(resources: Iterable[Resource]) -> ResourceList:
    """The contract's ``list<resource>`` as quantities (later entries win); raises
    :class:`~capstan_provider.quantity.QuantityError` naming the resource."""
    out: ResourceList = {}
    for r in resources:
        out[r.name] = Quantity.parse(r.quantity)
    return out


def parse_map(resources: Mapping[str, str]) -> ResourceList:
    """A ``{name: quantity text}`` map (a NodeClass parameter, a Node's ``status.capacity``)."""
    return {name: Quantity.parse(text) for name, text in resources.items()}


def to_resources(resources: Mapping[str, Quantity]) -> list[Resource]:
    """Quantities as the contract's ``list<resource>``, in name order."""
    return [Resource(name, str(q)) for name, q in sorted(resources.items())]


def to_strings(resources: Mapping[str, Quantity]) -> dict[str, str]:
    """Quantities as a ``{name: text}`` map (a Node's ``status.capacity``), in name order."""
    return {name: str(q) for name, q in sorted(resources.items())}


def shortfall(available: Mapping[str, Quantity], requests: Mapping[str, Quantity]) -> str | None:
    """``None`` when every request fits in ``available`` (absent resources count as zero), else
    which one does not."""
    for name, requested in sorted(requests.items()):
        have = available.get(name, Quantity(0))
        if requested > have:
            return f"{name}: requested {requested}, available {have}"
    return None


def saturating_sub(resources: Mapping[str, Quantity], minus: Mapping[str, Quantity]) -> ResourceList:
    """``resources - minus`` per resource, never below zero; resources only in ``minus`` are
    ignored (capacity minus overhead gives allocatable)."""
    out: ResourceList = {}
    for name, q in resources.items():
        less = minus.get(name)
        out[name] = q if less is None else Quantity(max(q.millis - less.millis, 0), q.notation)
    return out
