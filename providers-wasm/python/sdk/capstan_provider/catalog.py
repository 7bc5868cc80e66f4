"""Instance types as the contract's flat ``catalog``: build one with :class:`CatalogBuilder`, read
one back with :func:`expand`.

The catalog keeps every string once in a table and lists as spans of shared flat lists; the
builder interns strings, requirements, value lists, requirement lists and resource lists, so a
provider just describes each instance type::

    b = CatalogBuilder()
    t = b.instance_type("small")
    t.requirement(in_("node.kubernetes.io/instance-type", ["small"]))
    t.offering("zone-a", "on-demand", 0.05)
    t.capacity({"cpu": Quantity.parse("2"), "memory": Quantity.parse("4Gi"), "pods": Quantity.parse("110")})
    t.volume_limit("ebs.csi.aws.com", 25)          # contract 0.4
    t.slices([gpus])                               # contract 0.5: devices.SliceBuilder
    catalog = b.finish()                           # the catalog alone
    answer = b.finish_instance_types()             # get-instance-types' answer, any contract

Amounts are in thousandths of the resource's unit, as ``Quantity.milli_value()`` gives them.
:func:`expand_volume_limits` and :func:`expand_devices` read back what 0.4 and 0.5 add.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from capstan_provider.types import (
    Amount,
    Catalog,
    CatalogInstanceType,
    CatalogOffering,
    CatalogOverhead,
    CatalogRequirement,
    Requirement,
    Span,
)

from . import devices, lifecycle
from .quantity import Quantity

_EMPTY = Span(0, 0)


@dataclass
class _Offering:
    zone: str
    capacity_type: str
    price: float
    available: bool
    requirements: list[Requirement]


@dataclass
class InstanceTypeBuilder:
    """One instance type of a :class:`CatalogBuilder`; its methods return it, for chaining."""

    name: str
    requirements: list[Requirement] = field(default_factory=list)
    offerings: list[_Offering] = field(default_factory=list)
    capacity_amounts: dict[str, Quantity] = field(default_factory=dict)
    overhead: tuple[dict[str, Quantity], dict[str, Quantity], dict[str, Quantity]] = field(default_factory=lambda: ({}, {}, {}))
    volume_limits: dict[str, int] = field(default_factory=dict)
    device_slices: list[devices.SliceBuilder] = field(default_factory=list)

    def requirement(self, requirement: Requirement) -> InstanceTypeBuilder:
        """A requirement every node of this type meets."""
        self.requirements.append(requirement)
        return self

    def requirements_of(self, requirements: Iterable[Requirement]) -> InstanceTypeBuilder:
        """Several requirements."""
        self.requirements.extend(requirements)
        return self

    def offering(self, zone: str, capacity_type: str, price: float, available: bool = True, requirements: Iterable[Requirement] = ()) -> InstanceTypeBuilder:
        """A way to buy the type: zone, capacity type, price per hour (finite, >= 0), whether it
        can be launched now, and further requirements its nodes meet (rarely any)."""
        self.offerings.append(_Offering(zone, capacity_type, float(price), available, list(requirements)))
        return self

    def capacity(self, resources: Mapping[str, Quantity]) -> InstanceTypeBuilder:
        """Capacity (must include ``cpu``, ``memory`` and ``pods``)."""
        self.capacity_amounts.update(resources)
        return self

    def kube_reserved(self, resources: Mapping[str, Quantity]) -> InstanceTypeBuilder:
        """What the kubelet reserves for Kubernetes."""
        self.overhead[0].update(resources)
        return self

    def system_reserved(self, resources: Mapping[str, Quantity]) -> InstanceTypeBuilder:
        """What the kubelet reserves for the system."""
        self.overhead[1].update(resources)
        return self

    def eviction_threshold(self, resources: Mapping[str, Quantity]) -> InstanceTypeBuilder:
        """The kubelet's hard eviction thresholds."""
        self.overhead[2].update(resources)
        return self

    def volume_limit(self, driver: str, limit: int) -> InstanceTypeBuilder:
        """How many volumes of the CSI driver ``driver`` a node of this type can attach (contract
        0.4; a driver not given is not limited by the catalog)."""
        if not driver:
            raise ValueError("a volume limit needs a CSI driver name")
        if not 0 <= limit < 2**32:
            raise ValueError(f"volume limit {limit} for {driver} is not a u32")
        self.volume_limits[driver] = limit
        return self

    def slices(self, templates: Iterable[devices.SliceBuilder]) -> InstanceTypeBuilder:
        """DRA devices a node of this type carries: the ResourceSlices its drivers will publish
        (contract 0.5; types with identical slices share them in the answer). Adds to those given
        before."""
        self.device_slices.extend(templates)
        return self


class CatalogBuilder:
    """Fills a flat ``catalog``, interning everything it can."""

    def __init__(self) -> None:
        self._types: list[InstanceTypeBuilder] = []
        self._strings: list[str] = []
        self._string_ids: dict[str, int] = {}
        self._values: list[int] = []
        self._value_spans: dict[tuple[int, ...], Span] = {}
        self._requirements: list[CatalogRequirement] = []
        self._requirement_ids: dict[tuple[object, ...], int] = {}
        self._requirement_lists: list[int] = []
        self._list_spans: dict[tuple[int, ...], Span] = {}
        self._amounts: list[Amount] = []
        self._amount_spans: dict[tuple[tuple[int, int], ...], Span] = {}

    def instance_type(self, name: str) -> InstanceTypeBuilder:
        """Adds an instance type (names must be unique) and returns its builder."""
        t = InstanceTypeBuilder(name)
        self._types.append(t)
        return t

    def string(self, text: str) -> int:
        """The index of ``text`` in the string table (added once)."""
        index = self._string_ids.get(text)
        if index is None:
            index = len(self._strings)
            self._strings.append(text)
            self._string_ids[text] = index
        return index

    @staticmethod
    def _intern_span(ids: tuple[int, ...], flat: list[int], spans: dict[tuple[int, ...], Span]) -> Span:
        """The span of ``flat`` holding ``ids``, appended the first time this run of ids is seen."""
        if not ids:
            return _EMPTY
        span = spans.get(ids)
        if span is None:
            span = Span(len(flat), len(ids))
            flat.extend(ids)
            spans[ids] = span
        return span

    def _value_span(self, values: list[str]) -> Span:
        ids = tuple(self.string(v) for v in values)
        return self._intern_span(ids, self._values, self._value_spans)

    def _requirement(self, r: Requirement) -> int:
        key = (r.key, r.operator, tuple(r.values), r.min_values)
        index = self._requirement_ids.get(key)
        if index is None:
            index = len(self._requirements)
            self._requirements.append(CatalogRequirement(self.string(r.key), r.operator, self._value_span(list(r.values)), r.min_values))
            self._requirement_ids[key] = index
        return index

    def _requirement_list(self, requirements: list[Requirement]) -> Span:
        ids = tuple(self._requirement(r) for r in requirements)
        return self._intern_span(ids, self._requirement_lists, self._list_spans)

    def _amount_list(self, resources: Mapping[str, Quantity]) -> Span:
        key = tuple((self.string(name), q.milli_value()) for name, q in sorted(resources.items()))
        if not key:
            return _EMPTY
        span = self._amount_spans.get(key)
        if span is None:
            span = Span(len(self._amounts), len(key))
            self._amounts.extend(Amount(name, milli) for name, milli in key)
            self._amount_spans[key] = span
        return span

    def finish(self) -> Catalog:
        """The catalog of every instance type added so far."""
        offerings: list[CatalogOffering] = []
        instance_types: list[CatalogInstanceType] = []
        for t in self._types:
            start = len(offerings)
            for o in t.offerings:
                offerings.append(CatalogOffering(self.string(o.zone), self.string(o.capacity_type), o.price, o.available, self._requirement_list(o.requirements)))
            instance_types.append(
                CatalogInstanceType(
                    self.string(t.name),
                    self._requirement_list(t.requirements),
                    Span(start, len(offerings) - start),
                    self._amount_list(t.capacity_amounts),
                    CatalogOverhead(*(self._amount_list(o) for o in t.overhead)),
                )
            )
        return Catalog(list(self._strings), list(self._values), list(self._requirements), list(self._requirement_lists), list(self._amounts), offerings, instance_types)

    def finish_instance_types(self):
        """``get-instance-types``' answer for the contract the component is built against: under
        0.5 the catalog with each type's volume limits and devices (``devices.InstanceTypes``);
        under 0.4 the catalog with the volume limits (``lifecycle.InstanceTypes``); before 0.4 the
        catalog alone. What an older contract cannot carry (devices before 0.5, volume limits
        before 0.4) is left out. Raises ``ValueError`` for a slice with both devices and shared
        counters."""
        if not lifecycle.V0_4:
            return self.finish()
        # The drivers' names go into the string table before the catalog copies it.
        limits = [
            lifecycle.VolumeLimit(index, self.string(driver), limit)
            for index, t in enumerate(self._types)
            for driver, limit in sorted(t.volume_limits.items())
        ]
        if not devices.V0_5:
            return lifecycle.instance_types(self.finish(), limits)
        templates = devices.DeviceTemplates()
        for index, t in enumerate(self._types):
            templates.add(index, t.device_slices)
        return templates.answer(self.finish(), limits)


@dataclass
class ExpandedOffering:
    """One offering of an expanded catalog."""

    zone: str
    capacity_type: str
    price: float
    available: bool
    requirements: list[Requirement]


@dataclass
class ExpandedInstanceType:
    """One instance type of a catalog, with every index resolved."""

    name: str
    requirements: list[Requirement]
    offerings: list[ExpandedOffering]
    capacity: dict[str, int]
    """Resource name to milli-value."""
    kube_reserved: dict[str, int]
    system_reserved: dict[str, int]
    eviction_threshold: dict[str, int]


class CatalogError(ValueError):
    """A catalog index or span outside its list."""


def _slice(items: list, span: Span, what: str) -> list:
    if span.len == 0:
        return []
    if span.start + span.len > len(items):
        raise CatalogError(f"{what} span {span.start}+{span.len} is past the end ({len(items)})")
    return items[span.start : span.start + span.len]


def expand(catalog: Catalog) -> list[ExpandedInstanceType]:
    """The catalog's instance types with strings, requirements and amounts resolved (what the host
    reads); raises :class:`CatalogError` on an index out of range."""

    def s(i: int) -> str:
        if i >= len(catalog.strings):
            raise CatalogError(f"string index {i} out of range ({len(catalog.strings)})")
        return catalog.strings[i]

    def reqs(span: Span) -> list[Requirement]:
        out = []
        for i in _slice(catalog.requirement_lists, span, "requirement-lists"):
            if i >= len(catalog.requirements):
                raise CatalogError(f"requirement index {i} out of range")
            r = catalog.requirements[i]
            out.append(Requirement(s(r.key), r.operator, [s(v) for v in _slice(catalog.values, r.values, "values")], r.min_values))
        return out

    def amounts(span: Span) -> dict[str, int]:
        return {s(a.name): a.milli_value for a in _slice(catalog.amounts, span, "amounts")}

    return [
        ExpandedInstanceType(
            s(t.name),
            reqs(t.requirements),
            [ExpandedOffering(s(o.zone), s(o.capacity_type), o.price, o.available, reqs(o.requirements)) for o in _slice(catalog.offerings, t.offerings, "offerings")],
            amounts(t.capacity),
            amounts(t.overhead.kube_reserved),
            amounts(t.overhead.system_reserved),
            amounts(t.overhead.eviction_threshold),
        )
        for t in catalog.instance_types
    ]


def expand_volume_limits(answer: lifecycle.InstanceTypes) -> dict[str, dict[str, int]]:
    """A 0.4 ``get-instance-types`` answer's volume limits by instance type name, then CSI driver;
    raises :class:`CatalogError` on an index out of range."""
    catalog = answer.catalog
    out: dict[str, dict[str, int]] = {}
    for v in answer.volume_limits:
        if v.instance_type >= len(catalog.instance_types):
            raise CatalogError(f"volume limit of instance type {v.instance_type}: out of range ({len(catalog.instance_types)})")
        name = catalog.instance_types[v.instance_type].name
        if v.driver >= len(catalog.strings) or name >= len(catalog.strings):
            raise CatalogError(f"volume limit driver {v.driver}: string index out of range ({len(catalog.strings)})")
        out.setdefault(catalog.strings[name], {})[catalog.strings[v.driver]] = v.limit
    return out


def expand_devices(answer) -> dict[str, list[devices.SliceBuilder]]:
    """A 0.5 ``get-instance-types`` answer's devices by instance type name, each type's slices in
    order as :class:`~capstan_provider.devices.SliceBuilder`\\ s (types without devices are
    absent); raises :class:`CatalogError` on an index out of range or a slice the host refuses."""
    catalog = answer.catalog
    converted: dict[int, devices.SliceBuilder] = {}
    out: dict[str, list[devices.SliceBuilder]] = {}
    for entry in answer.devices:
        if entry.instance_type >= len(catalog.instance_types):
            raise CatalogError(f"devices of instance type {entry.instance_type}: out of range ({len(catalog.instance_types)})")
        name = catalog.instance_types[entry.instance_type].name
        if name >= len(catalog.strings):
            raise CatalogError(f"instance type name {name}: string index out of range ({len(catalog.strings)})")
        slices = out.setdefault(catalog.strings[name], [])
        for i in entry.slices:
            if i >= len(answer.slices):
                raise CatalogError(f"slice {i} out of range ({len(answer.slices)})")
            if i not in converted:
                try:
                    converted[i] = devices.SliceBuilder.of(answer.slices[i])
                except ValueError as e:
                    raise CatalogError(f"slice {i}: {e}") from None
            slices.append(converted[i])
    return out
