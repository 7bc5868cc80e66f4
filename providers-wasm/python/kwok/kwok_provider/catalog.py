"""The instance types kwok can "launch": a generated default catalog shaped like Karpenter's kwok
one, or the NodeClass's own ``instanceTypes``, narrowed by the NodeClass filters."""

from __future__ import annotations

from dataclasses import dataclass, field

from capstan_provider import labels
from capstan_provider.catalog import CatalogBuilder
from capstan_provider.params import invalid
from capstan_provider.quantity import Quantity
from capstan_provider.requirements import Requirements, ValueSet, in_
from capstan_provider.resources import ResourceList, parse_map, saturating_sub
from capstan_provider.types import Catalog, Requirement

from .params import DEFAULT_PODS, InstanceTypeSpec, Parameters

REGION = "test-region"
"""Region every kwok node reports."""
FAMILY_LABEL = "karpenter.kwok.sh/instance-family"
SIZE_LABEL = "karpenter.kwok.sh/instance-size"
CPU_LABEL = "karpenter.kwok.sh/instance-cpu"
MEMORY_LABEL = "karpenter.kwok.sh/instance-memory"

FAMILIES = (("c", 2), ("s", 4), ("m", 8))
SIZES = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256)
ARCHES = (labels.ARCH_AMD64, labels.ARCH_ARM64)
ZONES = ("test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d")
CPU_PRICE = 0.025
GIB_PRICE = 0.001
SPOT_DISCOUNT = 0.7
PODS_PER_CPU = 16
MAX_PODS = 1024
KUBE_RESERVED = {labels.RESOURCE_CPU: Quantity.parse("100m"), labels.RESOURCE_MEMORY: Quantity.parse("10Mi")}


@dataclass
class Offer:
    """One offering of an instance type."""

    zone: str
    capacity_type: str
    price: float
    available: bool = True


@dataclass
class Entry:
    """One instance type."""

    name: str
    arch: str
    os: list[str]
    capacity: ResourceList
    offers: list[Offer]
    family: str | None = None
    size: str | None = None
    kube_reserved: ResourceList = field(default_factory=lambda: dict(KUBE_RESERVED))
    labels: dict[str, str] = field(default_factory=dict)

    def cpu(self) -> int:
        """Whole vCPUs (rounded up)."""
        return self.capacity.get(labels.RESOURCE_CPU, Quantity(0)).value()

    def allocatable(self) -> ResourceList:
        """Capacity minus overhead."""
        return saturating_sub(self.capacity, self.kube_reserved)

    def node_labels(self) -> dict[str, str]:
        """Labels every node of this type carries, whatever the offering."""
        out = dict(self.labels)
        out[labels.INSTANCE_TYPE] = self.name
        out[labels.ARCH] = self.arch
        if self.os:
            out[labels.OS] = self.os[0]
        out[labels.REGION] = REGION
        if self.family is not None:
            out[FAMILY_LABEL] = self.family
        if self.size is not None:
            out[SIZE_LABEL] = self.size
        out[CPU_LABEL] = str(self.cpu())
        # A quantity (``16Gi``), as Karpenter's kwok provider writes it.
        out[MEMORY_LABEL] = str(self.capacity.get(labels.RESOURCE_MEMORY, Quantity(0)))
        return out

    def requirements(self) -> list[Requirement]:
        """Requirements describing every node of this type (zones and capacity types across all
        its offerings)."""
        out = [in_(k, [v]) for k, v in sorted(self.node_labels().items()) if k != labels.OS]
        out.append(in_(labels.OS, self.os))
        out.append(in_(labels.ZONE, sorted({o.zone for o in self.offers})))
        out.append(in_(labels.CAPACITY_TYPE, sorted({o.capacity_type for o in self.offers})))
        return out

    def offer_requirements(self, offer: Offer) -> Requirements:
        """The requirements a node launched from ``offer`` meets."""
        reqs = Requirements.from_labels({k: v for k, v in self.node_labels().items() if k != labels.OS})
        reqs.add(labels.OS, ValueSet(False, frozenset(self.os)))
        reqs.add(labels.ZONE, ValueSet(False, frozenset((offer.zone,))))
        reqs.add(labels.CAPACITY_TYPE, ValueSet(False, frozenset((offer.capacity_type,))))
        return reqs

    def add_to(self, catalog: CatalogBuilder) -> None:
        """Adds this entry to a catalog."""
        t = catalog.instance_type(self.name).requirements_of(self.requirements())
        for o in self.offers:
            t.offering(o.zone, o.capacity_type, o.price, o.available)
        t.capacity(self.capacity).kube_reserved(self.kube_reserved)


def to_catalog(entries: list[Entry]) -> Catalog:
    """The contract catalog of ``entries``."""
    b = CatalogBuilder()
    for e in entries:
        e.add_to(b)
    return b.finish()


def generated() -> list[Entry]:
    """The default catalog: families × sizes × architectures, 8 offerings each (72 types)."""
    out = []
    for family, gib_per_cpu in FAMILIES:
        for cpu in SIZES:
            for arch in ARCHES:
                gib = cpu * gib_per_cpu
                on_demand = CPU_PRICE * cpu + GIB_PRICE * gib
                offers = [
                    Offer(zone, ct, price)
                    for zone in ZONES
                    for ct, price in ((labels.CAPACITY_TYPE_SPOT, on_demand * SPOT_DISCOUNT), (labels.CAPACITY_TYPE_ON_DEMAND, on_demand))
                ]
                out.append(
                    Entry(
                        name=f"{family}-{cpu}x-{arch}-{labels.OS_LINUX}",
                        family=family,
                        size=str(cpu),
                        arch=arch,
                        os=[labels.OS_LINUX],
                        capacity={
                            labels.RESOURCE_CPU: Quantity.from_units(cpu),
                            labels.RESOURCE_MEMORY: Quantity.from_bytes(gib << 30),
                            labels.RESOURCE_PODS: Quantity.from_units(min(cpu * PODS_PER_CPU, MAX_PODS)),
                            labels.RESOURCE_EPHEMERAL_STORAGE: Quantity.from_bytes(20 << 30),
                        },
                        offers=offers,
                    )
                )
    return out


def custom(specs: list[InstanceTypeSpec]) -> list[Entry]:
    """Entries from ``instanceTypes`` (already validated)."""
    out = []
    for spec in specs:
        capacity = parse_map(spec.resources)
        capacity.setdefault(labels.RESOURCE_PODS, Quantity.parse(DEFAULT_PODS))
        out.append(
            Entry(
                name=spec.name,
                family=spec.family,
                size=spec.size,
                arch=spec.architecture,
                os=list(spec.operating_systems),
                capacity=capacity,
                labels=dict(spec.labels),
                offers=[Offer(o.zone, o.capacity_type, o.price, o.available) for o in spec.offerings],
            )
        )
    return out


def build(params: Parameters) -> list[Entry]:
    """The catalog for these parameters: generated or ``instanceTypes``, filtered, with
    ``unavailableOfferings`` marked; types left without offerings are dropped, and an empty result
    is ``invalid``."""
    entries = custom(params.instance_types) if params.instance_types is not None else generated()

    def keep(allowed: list[str] | None, value: str | None) -> bool:
        return allowed is None or (value is not None and value in allowed)

    entries = [
        e
        for e in entries
        if keep(params.families, e.family) and keep(params.architectures, e.arch) and (params.max_cpu is None or e.cpu() <= params.max_cpu)
    ]
    for e in entries:
        e.offers = [o for o in e.offers if keep(params.zones, o.zone) and keep(params.capacity_types, o.capacity_type)]
        for o in e.offers:
            if any(s.matches(e.name, o.zone, o.capacity_type) for s in params.unavailable_offerings):
                o.available = False
    entries = [e for e in entries if e.offers]
    if not entries:
        fields = [
            name
            for name, value in (
                ("instanceTypes", params.instance_types),
                ("families", params.families),
                ("architectures", params.architectures),
                ("zones", params.zones),
                ("capacityTypes", params.capacity_types),
                ("maxCpu", params.max_cpu),
            )
            if value is not None
        ]
        raise invalid(", parameters.".join(fields), "no instance type is left to launch")
    return entries
