"""The DRA devices of kwok's instance types, read from the ``DRAConfig``\\ s of Karpenter's DRA KWOK
driver (``test.karpenter.sh/v1alpha1``, cluster-scoped), as the Rust kwok's ``devices.rs`` reads
them: the driver publishes a pool's ResourceSlices on every node its ``nodeSelectorTerms`` select,
so a node of an instance type whose labels a pool selects will carry that pool's devices. One truth
for both sides: the same object the driver publishes from is what the provider describes its
instance types with.

A term selects a type when each of its ``matchExpressions`` holds for the labels every node of the
type carries (instance type, architecture, OS, family, size and the type's own labels). A term on a
label the type leaves open (the zone, the capacity type) does not select it: the host must not
count on devices a node may lack. ``matchFields`` terms select nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from capstan_provider.devices import DeviceBuilder, SliceBuilder, Version

API_VERSION = "test.karpenter.sh/v1alpha1"
"""The API version of the driver's configuration."""
KIND = "DRAConfig"
"""Its kind."""


class DraConfigError(ValueError):
    """A ``DRAConfig`` that does not decode (a field of the wrong type, a required one missing, a
    malformed quantity)."""


@dataclass
class Expression:
    """A node selector requirement."""

    key: str
    operator: str
    values: list[str] = field(default_factory=list)


@dataclass
class Term:
    """A node selector term (``matchExpressions`` ANDed)."""

    match_expressions: list[Expression] = field(default_factory=list)
    match_fields: list[Expression] = field(default_factory=list)


@dataclass
class Pool:
    """A pool: the nodes it applies to and the slices each of them gets (named by the config's
    driver and the pool's name)."""

    name: str
    node_selector_terms: list[Term] = field(default_factory=list)
    resource_slices: list[SliceBuilder] = field(default_factory=list)


@dataclass
class DraConfig:
    """A ``DRAConfig``, as much of its spec as the provider reads: one driver and its pools."""

    driver: str = ""
    pools: list[Pool] = field(default_factory=list)

    @staticmethod
    def parse(obj: Any) -> DraConfig:
        """Decodes a ``DRAConfig`` object (unknown fields ignored, absent ones empty, as the Rust
        kwok decodes it); raises :class:`DraConfigError`, also for a slice the host would refuse
        (an empty driver or pool name, which the CRD forbids; a device name given twice in a slice;
        a malformed quantity)."""
        spec = _field(_object(obj, "a DRAConfig"), "spec", dict, {}, "DRAConfig")
        driver = _field(spec, "driver", str, "", "spec")
        pools = []
        for i, p in enumerate(_field(spec, "pools", list, [], "spec")):
            at = f"spec.pools[{i}]"
            p = _object(p, at)
            name = _field(p, "name", str, "", at)
            pools.append(
                Pool(
                    name,
                    [_term(t, f"{at}.nodeSelectorTerms[{j}]") for j, t in enumerate(_field(p, "nodeSelectorTerms", list, [], at))],
                    [_slice(driver, name, s, f"{at}.resourceSlices[{j}]") for j, s in enumerate(_field(p, "resourceSlices", list, [], at))],
                )
            )
        return DraConfig(driver, pools)


_JSON_TYPES = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer"}


def _object(value: Any, at: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DraConfigError(f"{at}: not an object")
    return value


_ABSENT = object()
"""The default of an optional field with no value of its own."""


def _field(obj: dict[str, Any], key: str, kind: type, default: Any, at: str) -> Any:
    """``obj[key]`` of type ``kind``; ``default`` when absent or null (``None``: required)."""
    value = obj.get(key)
    if value is None:
        if default is None:
            raise DraConfigError(f"{at}.{key}: missing")
        return default
    # A bool is an int in Python, not in JSON.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise DraConfigError(f"{at}.{key}: not {_JSON_TYPES[kind]}")
    return value


def _expression(e: Any, at: str) -> Expression:
    e = _object(e, at)
    values = _field(e, "values", list, [], at)
    if not all(isinstance(v, str) for v in values):
        raise DraConfigError(f"{at}.values: not a list of strings")
    return Expression(_field(e, "key", str, None, at), _field(e, "operator", str, None, at), values)


def _term(t: Any, at: str) -> Term:
    t = _object(t, at)
    return Term(
        [_expression(e, f"{at}.matchExpressions[{i}]") for i, e in enumerate(_field(t, "matchExpressions", list, [], at))],
        [_expression(e, f"{at}.matchFields[{i}]") for i, e in enumerate(_field(t, "matchFields", list, [], at))],
    )


def _quantity_text(value: Any) -> str:
    """A quantity's ``value`` (int-or-string) as text, as the Rust kwok writes it."""
    return value if isinstance(value, str) else json.dumps(value)


def _quantities(obj: dict[str, Any], key: str, at: str) -> dict[str, str]:
    out = {}
    for name, q in _field(obj, key, dict, {}, at).items():
        q = _object(q, f"{at}.{key}.{name}")
        if "value" not in q:
            raise DraConfigError(f"{at}.{key}.{name}.value: missing")
        out[name] = _quantity_text(q["value"])
    return out


def _attribute(a: Any, at: str) -> str | int | bool | Version | None:
    """A ``DeviceAttribute``'s value: its int, bool, string or version, the first set in that
    order (none: the attribute is left out)."""
    a = _object(a, at)
    given = [_field(a, key, kind, _ABSENT, at) for key, kind in (("int", int), ("bool", bool), ("string", str), ("version", str))]
    if given[3] is not _ABSENT:
        given[3] = Version(given[3])
    return next((v for v in given if v is not _ABSENT), None)


def _device(d: Any, at: str) -> DeviceBuilder:
    d = _object(d, at)
    device = DeviceBuilder(_field(d, "name", str, None, at))
    for name, a in _field(d, "attributes", dict, {}, at).items():
        value = _attribute(a, f"{at}.attributes.{name}")
        if value is not None:
            device.attribute(name, value)
    device.capacity_of(_quantities(d, "capacity", at))
    device.shareable(_field(d, "allowMultipleAllocations", bool, False, at))
    for i, c in enumerate(_field(d, "consumesCounters", list, [], at)):
        c_at = f"{at}.consumesCounters[{i}]"
        c = _object(c, c_at)
        device.consumes(_field(c, "counterSet", str, None, c_at), _quantities(c, "counters", c_at))
    return device


def _slice(driver: str, pool: str, s: Any, at: str) -> SliceBuilder:
    """One entry of a pool's ``resourceSlices``: the slice template of its devices."""
    s = _object(s, at)
    try:
        out = SliceBuilder(driver, pool)
        for i, d in enumerate(_field(s, "devices", list, [], at)):
            out.add(_device(d, f"{at}.devices[{i}]"))
    except DraConfigError:
        raise
    except ValueError as e:
        raise DraConfigError(f"{at}: {e}") from None
    return out


def selector_matches(operator: str, values: list[str], label: str | None) -> bool:
    """Whether a node whose label is ``label`` (``None``: absent) meets ``operator`` ``values``
    (the host's rule; an unknown operator meets nothing)."""
    if operator == "In":
        return label is not None and label in values
    if operator == "NotIn":
        return label is None or label not in values
    if operator == "Exists":
        return label is not None
    if operator == "DoesNotExist":
        return label is None
    if operator in ("Gt", "Lt"):
        if label is None or len(values) != 1:
            return False
        try:
            v, bound = _i64(label), _i64(values[0])
        except ValueError:
            return False
        return v > bound if operator == "Gt" else v < bound
    return False


def _i64(text: str) -> int:
    """An integer as Rust's ``i64::from_str`` reads it (an optional sign, ASCII digits)."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not (digits.isascii() and digits.isdigit()):
        raise ValueError(text)
    n = int(text)
    if not -(1 << 63) <= n < 1 << 63:
        raise ValueError(text)
    return n


def selects(term: Term, labels: Mapping[str, str]) -> bool:
    """Whether ``term`` selects every node carrying ``labels`` (see the module docs)."""
    return (
        not term.match_fields
        and bool(term.match_expressions)
        and all(selector_matches(e.operator, e.values, labels.get(e.key)) for e in term.match_expressions)
    )


def templates(configs: list[DraConfig], labels: Mapping[str, str]) -> list[SliceBuilder]:
    """The slices a node with ``labels`` gets from ``configs``: each slice of each pool one of whose
    terms selects it, named by its driver and its pool (the driver names the pool
    ``<driver>/<node>``; a template stands for any node, so the pool's own name stands in)."""
    out = []
    for config in configs:
        for pool in config.pools:
            if any(selects(t, labels) for t in pool.node_selector_terms):
                out.extend(pool.resource_slices)
    return out


def parse_list(items: list[Any]) -> list[DraConfig]:
    """The configs of a list's items; raises :class:`DraConfigError` naming the one that does not
    decode."""
    out = []
    for i, item in enumerate(items):
        try:
            out.append(DraConfig.parse(item))
        except DraConfigError as e:
            name = item.get("metadata", {}).get("name") if isinstance(item, dict) and isinstance(item.get("metadata"), dict) else None
            raise DraConfigError(f"DRAConfig {name or f'#{i}'}: {e}") from None
    return out
