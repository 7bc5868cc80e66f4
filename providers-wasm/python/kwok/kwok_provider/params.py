"""The kwok NodeClass ``parameters`` (the Rust kwok provider's schema, see its README), their
validation, and the hash that detects NodeClass drift."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from capstan_provider import labels
from capstan_provider.params import Fields, ServedObject, invalid, parse, served_object
from capstan_provider.quantity import Quantity, QuantityError

DEFAULT_IMAGE_ID = "kwok-default-image"
"""Image reported when ``imageID`` is not set."""
DEFAULT_PODS = "110"
"""Pods per node when an ``instanceTypes`` entry does not say."""
KWOK_GROUP = "karpenter.kwok.sh"
"""Karpenter's group, whose ``KWOKNodeClass`` this provider serves."""
KWOK_NODE_CLASS = "KWOKNodeClass"
"""The kind."""
_UNITS = {"s": 1_000, "m": 60_000, "h": 3_600_000}


def duration_millis(text: str) -> int | None:
    """Milliseconds of a duration as Karpenter's CRD admits it (``^([0-9]+(s|m|h))+$``)."""
    total, digits = 0, ""
    for c in text:
        if c.isascii() and c.isdigit():
            digits += c
        elif c in _UNITS and digits:
            total += int(digits) * _UNITS[c]
            digits = ""
        else:
            return None
    return total if text and not digits else None


@dataclass
class OfferingSpec:
    """One offering of a replacement catalog entry."""

    zone: str
    capacity_type: str
    price: float
    available: bool = True


@dataclass
class InstanceTypeSpec:
    """One instance type of a replacement catalog (Karpenter's kwok ``instance_types.json`` shape)."""

    name: str
    resources: dict[str, str]
    offerings: list[OfferingSpec]
    architecture: str = labels.ARCH_AMD64
    operating_systems: list[str] = field(default_factory=lambda: [labels.OS_LINUX])
    family: str | None = None
    size: str | None = None
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class OfferingSelector:
    """Offerings to mark unavailable: every field given must match; ``{}`` matches all."""

    instance_type: str | None = None
    zone: str | None = None
    capacity_type: str | None = None

    def matches(self, instance_type: str, zone: str, capacity_type: str) -> bool:
        """Whether the offering ``(instance_type, zone, capacity_type)`` is selected."""
        return (
            (self.instance_type is None or self.instance_type == instance_type)
            and (self.zone is None or self.zone == zone)
            and (self.capacity_type is None or self.capacity_type == capacity_type)
        )


def _capacity_type(f: Fields, key: str, required: bool) -> str | None:
    value = f.str(key, required=required)
    if value is not None and value not in labels.CAPACITY_TYPES:
        raise invalid(f.at(key), f"unknown capacity type {json.dumps(value)} (spot, on-demand or reserved)")
    return value


def _instance_type(f: Fields) -> InstanceTypeSpec:
    name = f.str("name", required=True, non_empty=True)
    architecture = f.str("architecture", non_empty=True) or labels.ARCH_AMD64
    oses = f.str_list("operatingSystems")
    if oses is not None and not oses:
        raise invalid(f.at("operatingSystems"), "must list at least one")
    resources = f.str_map("resources", required=True) or {}
    for required in (labels.RESOURCE_CPU, labels.RESOURCE_MEMORY):
        if required not in resources:
            raise invalid(f.at("resources"), f"{required} is required")
    for rname, text in sorted(resources.items()):
        try:
            q = Quantity.parse(text)
        except QuantityError as e:
            raise invalid(f"{f.at('resources')}.{rname}", str(e)) from None
        if q.millis < 0:
            raise invalid(f"{f.at('resources')}.{rname}", f"must not be negative, got {text}")
    offerings = []
    for o in f.objects("offerings", required=True) or []:
        offerings.append(
            OfferingSpec(
                zone=o.str("zone", required=True, non_empty=True) or "",
                capacity_type=_capacity_type(o, "capacityType", True) or "",
                price=o.float("price", required=True, minimum=0) or 0.0,
                available=o.bool("available", True),
            )
        )
        o.done()
    if not offerings:
        raise invalid(f.at("offerings"), "must list at least one")
    spec = InstanceTypeSpec(
        name=name or "",
        resources=resources,
        offerings=offerings,
        architecture=architecture,
        operating_systems=oses if oses is not None else [labels.OS_LINUX],
        family=f.str("family"),
        size=f.str("size"),
        labels=f.str_map("labels") or {},
    )
    f.done()
    return spec


@dataclass
class Parameters:
    """The NodeClass parameters (see the README's table)."""

    instance_types: list[InstanceTypeSpec] | None = None
    families: list[str] | None = None
    architectures: list[str] | None = None
    zones: list[str] | None = None
    capacity_types: list[str] | None = None
    max_cpu: int | None = None
    image_id: str | None = None
    launch_delay_millis: int | None = None
    unavailable_offerings: list[OfferingSelector] = field(default_factory=list)

    @staticmethod
    def parse(text: str) -> Parameters:
        """Parses and validates the parameters — a ``capstan.dev`` NodeClass's ``parameters``, or a
        Karpenter ``KWOKNodeClass`` as the host hands it over (its ``nodeRegistrationDelay`` becomes
        the delay before the node registers; the default catalog otherwise); raises ``invalid``
        naming the field."""
        served = served_object(text)
        if served is not None:
            return Parameters._from_kwok_node_class(served)
        f = Fields(parse(text))
        specs = None
        if (items := f.objects("instanceTypes")) is not None:
            specs = [_instance_type(item) for item in items]
            seen: set[str] = set()
            for i, spec in enumerate(specs):
                if spec.name in seen:
                    raise invalid(f"instanceTypes[{i}].name", f"duplicate instance type {json.dumps(spec.name)}")
                seen.add(spec.name)
        capacity_types = f.str_list("capacityTypes")
        for i, ct in enumerate(capacity_types or []):
            if ct not in labels.CAPACITY_TYPES:
                raise invalid(f"capacityTypes[{i}]", f"unknown capacity type {json.dumps(ct)} (spot, on-demand or reserved)")
        selectors = []
        for s in f.objects("unavailableOfferings") or []:
            selectors.append(OfferingSelector(s.str("instanceType"), s.str("zone"), _capacity_type(s, "capacityType", False)))
            s.done()
        params = Parameters(
            instance_types=specs,
            families=f.str_list("families"),
            architectures=f.str_list("architectures"),
            zones=f.str_list("zones"),
            capacity_types=capacity_types,
            max_cpu=f.int("maxCpu", minimum=0),
            image_id=f.str("imageID", non_empty=True),
            launch_delay_millis=f.int("launchDelayMillis", minimum=0),
            unavailable_offerings=selectors,
        )
        f.done()
        return params

    @staticmethod
    def _from_kwok_node_class(served: ServedObject) -> Parameters:
        if served.group != KWOK_GROUP or served.kind != KWOK_NODE_CLASS:
            raise invalid("", f"the kwok provider serves {KWOK_NODE_CLASS}.{KWOK_GROUP}, not {served.kind}.{served.group}")
        f = served.fields()
        text = f.str("nodeRegistrationDelay")
        f.done()
        delay = None
        if text is not None:
            delay = duration_millis(text)
            if delay is None:
                raise invalid(f.at("nodeRegistrationDelay"), f"{json.dumps(text)} is not a duration like 30s, 1m or 1h30m")
        return Parameters(launch_delay_millis=delay)

    def image(self) -> str:
        """The image nodes launched now report."""
        return self.image_id or DEFAULT_IMAGE_ID

    def launch_delay(self) -> int:
        """How long ``create`` sleeps before creating the Node, in milliseconds."""
        return self.launch_delay_millis or 0

    def hash(self) -> str:
        """A stable hash (16 hex digits, FNV-1a) of the fields that shape nodes: everything but
        ``imageID`` (which drifts on its own), ``launchDelayMillis`` and
        ``unavailableOfferings``."""
        fields = {
            "instanceTypes": [asdict(s) for s in self.instance_types] if self.instance_types is not None else None,
            "families": self.families,
            "architectures": self.architectures,
            "zones": self.zones,
            "capacityTypes": self.capacity_types,
            "maxCpu": self.max_cpu,
        }
        return f"{fnv1a(json.dumps(fields, sort_keys=True, separators=(',', ':')).encode()):016x}"


def fnv1a(data: bytes) -> int:
    """64-bit FNV-1a."""
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h
