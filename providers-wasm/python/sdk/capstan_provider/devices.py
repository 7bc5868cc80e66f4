"""What contract 0.5 adds: the DRA devices of instance types (Kubernetes' Dynamic Resource
Allocation), as the ResourceSlices (``resource.k8s.io/v1``) the DRA drivers of a node of the type
will publish once it runs. The host provisions for pods whose ResourceClaims ask for devices only
onto types whose templates can satisfy them.

Describe a type's slices with :class:`SliceBuilder` and :class:`DeviceBuilder`, and give them to
the type (``InstanceTypeBuilder.slices``; ``CatalogBuilder.finish_instance_types()`` then answers
with them) or collect them by catalog index in :class:`DeviceTemplates`, as the Rust SDK's
``DeviceTemplates`` does::

    from capstan_provider.devices import DeviceBuilder, SliceBuilder, Version

    gpus = SliceBuilder("gpu.example.com", "gpus")
    for i in range(8):
        gpus.device(f"gpu-{i}").attribute("type", "gpu").attribute("index", i).attribute(
            "driverVersion", Version("1.2.3")).capacity("memory", "80Gi")
    b.instance_type("g-8x").slices([gpus])          # or DeviceTemplates().add(index, [gpus])

Types with identical slices share them: each distinct slice is stored once in the answer and
indexed by every type that carries it. Under contracts before 0.5 (:data:`V0_5` is ``False``) the
devices are left out of the answer: the host treats an older component's types as carrying none.
``catalog.expand_devices`` reads a 0.5 answer's devices back, as :class:`SliceBuilder`\\ s.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from capstan_provider.types import Catalog

from . import lifecycle
from .quantity import Quantity

try:
    from wit_world.imports import devices as _wit
except ImportError:  # contracts 0.1 to 0.4
    _wit = None

V0_5 = _wit is not None
"""Whether the component is built against contract 0.5 (its bindings have ``devices``)."""

if _wit is not None:
    from wit_world.imports.devices import (  # noqa: F401 (re-exported)
        Attribute,
        AttributeValue,
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

_S64 = 1 << 63


@dataclass(frozen=True)
class Version:
    """A version attribute's value (``Version("1.2.3")``): a semantic version, compared as one by
    CEL's ``semver``. A plain ``str`` is a string attribute."""

    text: str


AttributeInput = str | int | bool | Version
"""An attribute's value: ``str`` (string), ``int`` (a signed 64-bit int), ``bool``, or
:class:`Version`."""

QuantityInput = str | int | Quantity
"""A quantity: Kubernetes quantity syntax (``"80Gi"``, checked), a whole number, or a
:class:`~capstan_provider.quantity.Quantity`."""


def _quantity(name: str, value: QuantityInput, what: str) -> str:
    """The text of a quantity named ``name``; raises ``ValueError`` on one that is not."""
    if not name:
        raise ValueError(f"{what}: a quantity needs a name")
    if isinstance(value, bool):
        raise ValueError(f"{what} {name}: {value!r} is not a quantity")
    if isinstance(value, Quantity):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        Quantity.parse(value)  # QuantityError (a ValueError) names the text
        return value
    raise ValueError(f"{what} {name}: {value!r} is not a quantity")


def _quantities(values: Mapping[str, QuantityInput], what: str) -> dict[str, str]:
    return {name: _quantity(name, q, what) for name, q in values.items()}


def _attribute(name: str, value: AttributeInput) -> AttributeInput:
    if not name:
        raise ValueError("an attribute needs a name")
    if isinstance(value, bool | str | Version):
        return value
    if isinstance(value, int):
        if not -_S64 <= value < _S64:
            raise ValueError(f"attribute {name}: {value} is not a signed 64-bit integer")
        return value
    raise ValueError(f"attribute {name}: {value!r} is not a string, int, bool or Version")


def _attribute_key(value: AttributeInput) -> tuple[str, object]:
    """The value tagged with its kind (``True == 1`` in Python; not as attributes)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, Version):
        return ("version", value.text)
    return ("string", value)


def _sorted_map(values: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(values.items()))


@dataclass(eq=False)
class DeviceBuilder:
    """One device of a slice (``resource.k8s.io/v1`` ``Device``); its methods return it, for
    chaining. Attributes, capacities and counters are keyed by name (a name given again replaces
    its value) and go out sorted by name. Equal when the devices they describe are."""

    name: str
    attributes: dict[str, AttributeInput] = field(default_factory=dict)
    capacities: dict[str, str] = field(default_factory=dict)
    """Capacity name to quantity text."""
    allow_multiple_allocations: bool = False
    consumes_counters: dict[str, dict[str, str]] = field(default_factory=dict)
    """Counter set name to what allocating the device takes from it (counter name to quantity)."""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a device needs a name")

    def attribute(self, name: str, value: AttributeInput) -> DeviceBuilder:
        """An attribute: ``name`` qualified (``gpu.example.com/model``) or bare (in the driver's
        domain); ``value`` a ``str``, ``int``, ``bool`` or :class:`Version`."""
        self.attributes[name] = _attribute(name, value)
        return self

    def attributes_of(self, attributes: Mapping[str, AttributeInput]) -> DeviceBuilder:
        """Several attributes."""
        for name, value in attributes.items():
            self.attribute(name, value)
        return self

    def capacity(self, name: str, quantity: QuantityInput) -> DeviceBuilder:
        """A capacity of the device (``memory``: ``80Gi``)."""
        self.capacities[name] = _quantity(name, quantity, f"device {self.name} capacity")
        return self

    def capacity_of(self, capacities: Mapping[str, QuantityInput]) -> DeviceBuilder:
        """Several capacities."""
        for name, quantity in capacities.items():
            self.capacity(name, quantity)
        return self

    def shareable(self, allow: bool = True) -> DeviceBuilder:
        """The device may be allocated to several requests at once (``allowMultipleAllocations``)."""
        self.allow_multiple_allocations = allow
        return self

    def consumes(self, counter_set: str, counters: Mapping[str, QuantityInput]) -> DeviceBuilder:
        """Allocating the device takes ``counters`` from the slice pool's counter set
        ``counter_set`` (``DeviceCounterConsumption``): a GPU partition takes its share of the
        GPU's memory. Given again for a set, adds to (replaces by name) its counters."""
        if not counter_set:
            raise ValueError(f"device {self.name}: a counter consumption needs a counter set")
        taken = _quantities(counters, f"device {self.name} counter set {counter_set}")
        self.consumes_counters.setdefault(counter_set, {}).update(taken)
        return self

    def key(self) -> tuple:
        """What the device is, hashable: equal devices have equal keys."""
        return (
            self.name,
            tuple(sorted((name, _attribute_key(value)) for name, value in self.attributes.items())),
            _sorted_map(self.capacities),
            self.allow_multiple_allocations,
            tuple(sorted((name, _sorted_map(c)) for name, c in self.consumes_counters.items())),
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DeviceBuilder) and self.key() == other.key()

    __hash__ = None  # mutable

    def wit(self):
        """The contract's ``devices.device`` (contract 0.5)."""
        wit = _devices()

        def value(v: AttributeInput):
            if isinstance(v, bool):
                return wit.AttributeValue_Boolean(v)
            if isinstance(v, int):
                return wit.AttributeValue_Int(v)
            if isinstance(v, Version):
                return wit.AttributeValue_Version(v.text)
            return wit.AttributeValue_Text(v)

        return wit.Device(
            self.name,
            [wit.Attribute(name, value(v)) for name, v in sorted(self.attributes.items())],
            _wit_quantities(self.capacities),
            self.allow_multiple_allocations,
            [wit.CounterConsumption(name, _wit_quantities(c)) for name, c in sorted(self.consumes_counters.items())],
        )


@dataclass(eq=False)
class SliceBuilder:
    """One ResourceSlice a DRA driver will publish on a node of the type: its ``driver``
    (``gpu.example.com``), its ``pool`` (the name it will carry; the host identifies a device by
    driver, pool and device name), and either devices or shared counters, as Kubernetes asks of a
    slice (a pool's counters and the devices consuming them come in separate slices of the same
    pool). Equal when the slices they describe are."""

    driver: str
    pool: str
    devices: list[DeviceBuilder] = field(default_factory=list)
    shared_counters: dict[str, dict[str, str]] = field(default_factory=dict)
    """Counter set name to its counters (counter name to quantity)."""

    def __post_init__(self) -> None:
        if not self.driver or not self.pool:
            raise ValueError(f"a slice template needs a driver and a pool (driver {self.driver!r}, pool {self.pool!r})")

    def device(self, name: str) -> DeviceBuilder:
        """Adds a device (names are unique within the slice) and returns its builder."""
        d = DeviceBuilder(name)
        self.add(d)
        return d

    def add(self, device: DeviceBuilder) -> SliceBuilder:
        """Adds a device built on its own."""
        if any(d.name == device.name for d in self.devices):
            raise ValueError(f"driver {self.driver} pool {self.pool}: device {device.name} given twice")
        self.devices.append(device)
        return self

    def counter_set(self, name: str, counters: Mapping[str, QuantityInput]) -> SliceBuilder:
        """A set of counters the pool's devices share (``CounterSet``), in a slice without
        devices; given again, adds to (replaces by name) its counters."""
        if not name:
            raise ValueError(f"driver {self.driver} pool {self.pool}: a counter set needs a name")
        taken = _quantities(counters, f"driver {self.driver} pool {self.pool} counter set {name}")
        self.shared_counters.setdefault(name, {}).update(taken)
        return self

    def key(self) -> tuple:
        """What the slice is, hashable: equal slices have equal keys."""
        return (
            self.driver,
            self.pool,
            tuple(d.key() for d in self.devices),
            tuple(sorted((name, _sorted_map(c)) for name, c in self.shared_counters.items())),
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SliceBuilder) and self.key() == other.key()

    __hash__ = None  # mutable

    def check(self) -> None:
        """Raises ``ValueError`` unless the slice has devices or shared counters, not both."""
        if self.devices and self.shared_counters:
            raise ValueError(f"driver {self.driver} pool {self.pool}: a slice has devices or shared counters, not both")

    def wit(self):
        """The contract's ``devices.slice-template`` (contract 0.5); raises ``ValueError`` as
        :meth:`check` does."""
        self.check()
        wit = _devices()
        return wit.SliceTemplate(
            self.driver,
            self.pool,
            [d.wit() for d in self.devices],
            [wit.CounterSet(name, _wit_quantities(c)) for name, c in sorted(self.shared_counters.items())],
        )

    @staticmethod
    def of(template) -> SliceBuilder:
        """The builder of a contract ``slice-template`` (what a reader compares); raises
        ``ValueError`` on what the host refuses (an empty driver, pool or device name, a name given
        twice, a malformed quantity)."""

        def quantities(list_, what: str) -> dict[str, str]:
            out: dict[str, str] = {}
            for q in list_:
                if q.name in out:
                    raise ValueError(f"{what}: {q.name} given twice")
                out[q.name] = _quantity(q.name, q.value, what)
            return out

        s = SliceBuilder(template.driver, template.pool)
        at = f"driver {s.driver} pool {s.pool}"
        for d in template.devices:
            device = DeviceBuilder(d.name)
            for a in d.attributes:
                if a.name in device.attributes:
                    raise ValueError(f"{at} device {d.name}: attribute {a.name} given twice")
                v = a.value
                device.attribute(a.name, Version(v.value) if isinstance(v, _devices().AttributeValue_Version) else v.value)
            device.capacities = quantities(d.capacity, f"{at} device {d.name}")
            device.allow_multiple_allocations = d.allow_multiple_allocations
            for c in d.consumes_counters:
                if c.counter_set in device.consumes_counters:
                    raise ValueError(f"{at} device {d.name}: counter set {c.counter_set} given twice")
                device.consumes_counters[c.counter_set] = quantities(c.counters, f"{at} device {d.name} counter set {c.counter_set}")
            s.add(device)
        for c in template.shared_counters:
            if c.name in s.shared_counters:
                raise ValueError(f"{at}: counter set {c.name} given twice")
            s.shared_counters[c.name] = quantities(c.counters, f"{at} counter set {c.name}")
        return s


def _devices():
    if _wit is None:
        raise lifecycle.ContractError("this needs contract 0.5: the component is built against an older one")
    return _wit


def _wit_quantities(values: Mapping[str, str]) -> list:
    return [_devices().Quantity(name, q) for name, q in sorted(values.items())]


class DeviceTemplates:
    """The devices half of a 0.5 ``get-instance-types`` answer: the slice templates of each
    instance type, by the type's index in the catalog (the order ``CatalogBuilder.instance_type``
    was called in). Each distinct slice is kept once, however many types carry it."""

    def __init__(self) -> None:
        self._slices: list[SliceBuilder] = []
        self._slice_ids: dict[tuple, int] = {}
        self._devices: dict[int, list[int]] = {}

    def add(self, instance_type: int, slices: Iterable[SliceBuilder]) -> None:
        """Instance type ``instance_type`` (its catalog index) carries the devices of ``slices``.
        A type given no slices carries none; calling again for a type adds to its slices. Raises
        ``ValueError`` for a slice with both devices and shared counters."""
        if not 0 <= instance_type < 2**32:
            raise ValueError(f"instance type index {instance_type} is not a u32")
        indices = []
        for s in slices:
            s.check()
            key = s.key()
            index = self._slice_ids.get(key)
            if index is None:
                index = len(self._slices)
                # A copy: the caller may go on changing its builder.
                self._slices.append(copy.deepcopy(s))
                self._slice_ids[key] = index
            indices.append(index)
        if indices:
            self._devices.setdefault(instance_type, []).extend(indices)

    def is_empty(self) -> bool:
        """Whether no instance type carries devices."""
        return not self._devices

    def answer(self, catalog: Catalog, volume_limits: Iterable = ()):
        """``get-instance-types``' answer: under 0.5 an :class:`InstanceTypes` of ``catalog``, its
        volume limits and these devices; before 0.5 ``lifecycle.instance_types(catalog,
        volume_limits)`` (the devices left out)."""
        if _wit is None:
            return lifecycle.instance_types(catalog, volume_limits)
        return _wit.InstanceTypes(
            catalog,
            list(volume_limits),
            [s.wit() for s in self._slices],
            [_wit.InstanceDevices(t, list(indices)) for t, indices in self._devices.items()],
        )
