"""Choosing what to launch for a claim: the cheapest available offering whose instance type and
place meet the claim's requirements and whose allocatable resources cover its requests."""

from __future__ import annotations

from dataclasses import dataclass

from capstan_provider.requirements import Requirements
from capstan_provider.resources import ResourceList, shortfall

from .catalog import Entry, Offer


@dataclass(frozen=True)
class Launch:
    """What to launch: an instance type and one of its offerings."""

    entry: Entry
    offer: Offer


class NoLaunch(Exception):
    """Nothing can be launched; ``unavailable`` when compatible offerings exist but none is
    available."""

    def __init__(self, message: str, unavailable: bool) -> None:
        super().__init__(message)
        self.unavailable = unavailable


def cheapest(catalog: list[Entry], claim: Requirements, requests: ResourceList) -> Launch:
    """The cheapest available compatible offering; ties go to the instance type name, then zone,
    then capacity type. Raises :class:`NoLaunch`."""
    best: Launch | None = None
    best_key: tuple[float, str, str, str] | None = None
    unavailable = too_small = 0
    for entry in catalog:
        if shortfall(entry.allocatable(), requests) is not None:
            too_small += 1
            continue
        for offer in entry.offers:
            if entry.offer_requirements(offer).intersects(claim) is not None:
                continue
            if not offer.available:
                unavailable += 1
                continue
            key = (offer.price, entry.name, offer.zone, offer.capacity_type)
            if best_key is None or key < best_key:
                best, best_key = Launch(entry, offer), key
    if best is not None:
        return best
    if unavailable:
        raise NoLaunch(f"all {unavailable} offerings compatible with the claim are unavailable", True)
    raise NoLaunch(
        f"no offering among {len(catalog)} instance types meets the claim's requirements and requests ({too_small} too small for the requests)",
        False,
    )
