"""Node-selector requirements and Karpenter's matching rules (the host's ``capstan-model`` rules).

Build contract requirements with :func:`in_`, :func:`not_in`, :func:`exists`,
:func:`does_not_exist`, :func:`gt`, :func:`lt`; merge a list of them into :class:`Requirements`
(requirements on one key intersect) and ask :meth:`Requirements.intersects` whether two sets can
describe the same node, as Karpenter's ``Intersects`` does::

    claim = Requirements.of(claim.requirements)
    offer = Requirements.from_labels({"topology.kubernetes.io/zone": "zone-a"})
    if offer.intersects(claim) is None: ...  # compatible
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from capstan_provider.types import Operator, Requirement


class RequirementError(ValueError):
    """A malformed requirement (``Gt``/``Lt`` without exactly one integer value)."""


def in_(key: str, values: Iterable[str], min_values: int | None = None) -> Requirement:
    """``key In [values]``."""
    return Requirement(key, Operator.IN, list(values), min_values)


def not_in(key: str, values: Iterable[str]) -> Requirement:
    """``key NotIn [values]``."""
    return Requirement(key, Operator.NOT_IN, list(values), None)


def exists(key: str) -> Requirement:
    """``key Exists``."""
    return Requirement(key, Operator.EXISTS, [], None)


def does_not_exist(key: str) -> Requirement:
    """``key DoesNotExist``."""
    return Requirement(key, Operator.DOES_NOT_EXIST, [], None)


def gt(key: str, n: int) -> Requirement:
    """``key Gt n`` (the label's integer value is greater than ``n``)."""
    return Requirement(key, Operator.GT, [str(n)], None)


def lt(key: str, n: int) -> Requirement:
    """``key Lt n``."""
    return Requirement(key, Operator.LT, [str(n)], None)


def _within(value: str, greater_than: int | None, less_than: int | None) -> bool:
    if greater_than is None and less_than is None:
        return True
    try:
        n = int(value, 10)
    except ValueError:
        return False
    return (greater_than is None or n > greater_than) and (less_than is None or n < less_than)


def _empty_range(greater_than: int | None, less_than: int | None) -> bool:
    return greater_than is not None and less_than is not None and less_than - greater_than <= 1


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _min(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


@dataclass(frozen=True)
class ValueSet:
    """The values a requirement allows: a set (``In``) or a complement (``NotIn``, ``Exists``),
    optionally bounded by ``Gt``/``Lt``."""

    complement: bool
    values: frozenset[str] = frozenset()
    greater_than: int | None = None
    less_than: int | None = None

    @staticmethod
    def of(requirement: Requirement) -> ValueSet:
        """The set a contract requirement allows; raises :class:`RequirementError`."""
        op = requirement.operator
        if op == Operator.IN:
            return ValueSet(False, frozenset(requirement.values))
        if op == Operator.NOT_IN:
            return ValueSet(True, frozenset(requirement.values))
        if op == Operator.EXISTS:
            return ValueSet(True)
        if op == Operator.DOES_NOT_EXIST:
            return ValueSet(False)
        if len(requirement.values) != 1:
            raise RequirementError(f"{requirement.key}: {op.name} needs exactly one integer value, got {requirement.values}")
        try:
            n = int(requirement.values[0], 10)
        except ValueError:
            raise RequirementError(f"{requirement.key}: {op.name} needs an integer, got {requirement.values[0]!r}") from None
        return ValueSet(True, greater_than=n) if op == Operator.GT else ValueSet(True, less_than=n)

    def allows_absent(self) -> bool:
        """Whether a node without the label meets it (``NotIn``, ``DoesNotExist``)."""
        return self.complement == bool(self.values)

    def contains(self, value: str) -> bool:
        """Whether ``value`` is allowed."""
        if self.complement:
            return value not in self.values and _within(value, self.greater_than, self.less_than)
        return value in self.values

    def intersection(self, other: ValueSet) -> ValueSet:
        """The values both allow."""
        greater_than = _max(self.greater_than, other.greater_than)
        less_than = _min(self.less_than, other.less_than)
        if _empty_range(greater_than, less_than):
            return ValueSet(False)
        if self.complement and other.complement:
            return ValueSet(True, self.values | other.values, greater_than, less_than)
        base, test = (other, self) if self.complement else (self, other)
        return ValueSet(False, frozenset(v for v in base.values if test.contains(v) and _within(v, greater_than, less_than)))

    def overlaps(self, other: ValueSet) -> bool:
        """Whether some value is allowed by both."""
        greater_than = _max(self.greater_than, other.greater_than)
        less_than = _min(self.less_than, other.less_than)
        if _empty_range(greater_than, less_than):
            return False
        if self.complement and other.complement:
            return True
        base, test = (other, self) if self.complement else (self, other)
        return any(test.contains(v) and _within(v, greater_than, less_than) for v in base.values)

    def compatible_with(self, other: ValueSet) -> bool:
        """Karpenter's per-key rule: they overlap, or both allow the label to be absent."""
        return self.overlaps(other) or (self.allows_absent() and other.allows_absent())


class Requirements:
    """Requirements keyed by label; requirements on the same key intersect."""

    def __init__(self) -> None:
        self.sets: dict[str, ValueSet] = {}

    @staticmethod
    def of(requirements: Iterable[Requirement]) -> Requirements:
        """Merges contract requirements; raises :class:`RequirementError` on a malformed one."""
        out = Requirements()
        for r in requirements:
            out.add(r.key, ValueSet.of(r))
        return out

    @staticmethod
    def from_labels(labels: Mapping[str, str]) -> Requirements:
        """``key In [value]`` for every label."""
        out = Requirements()
        for key, value in labels.items():
            out.add(key, ValueSet(False, frozenset((value,))))
        return out

    def add(self, key: str, values: ValueSet) -> None:
        """Adds a set, intersecting with any existing one on ``key``."""
        existing = self.sets.get(key)
        self.sets[key] = values if existing is None else existing.intersection(values)

    def intersects(self, incoming: Requirements) -> str | None:
        """Karpenter's ``Intersects``: ``None`` when every key both constrain overlaps (or both
        allow it absent), else a message naming the first conflicting key (in key order)."""
        for key in sorted(self.sets.keys() & incoming.sets.keys()):
            if not self.sets[key].compatible_with(incoming.sets[key]):
                return f"{key}: no value meets both requirements"
        return None


def labels_satisfy(labels: Mapping[str, str], requirements: Iterable[Requirement]) -> bool:
    """Whether a node with ``labels`` meets every requirement (absent labels meet only ``NotIn``
    and ``DoesNotExist``)."""
    for r in requirements:
        value = labels.get(r.key)
        allowed = ValueSet.of(r)
        if value is None:
            if not allowed.allows_absent():
                return False
        elif not allowed.contains(value):
            return False
    return True
