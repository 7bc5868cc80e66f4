"""The Node object kwok "launches": building it from a claim and a chosen offering, and reading a
claim back from it. Pure; the kube calls live in :mod:`.provider`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from capstan_provider import labels
from capstan_provider.resources import to_strings
from capstan_provider.types import KeyValue, NodeClaim, Operator, Resource, Taint, TaintEffect

from .selection import Launch

PROVIDER_ID_PREFIX = "kwok://"
"""Provider ID scheme: ``kwok://<node name>``."""
PROVIDER_LABEL = "capstan.dev/provider"
"""Label on every node this provider launched (``list`` selects on it)."""
PROVIDER_NAME = "kwok"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
NODE_VIEWER_PRICE_LABEL = "eks-node-viewer/instance-price"
"""The kwok controller marks nodes with this annotation Ready and keeps their lease."""
HASH_ANNOTATION = "kwok.capstan.dev/parameters-hash"
IMAGE_ANNOTATION = "kwok.capstan.dev/image-id"
CREATED_AT_ANNOTATION = "kwok.capstan.dev/created-at"
NODE_CLASS_ANNOTATION = "kwok.capstan.dev/node-class"
ANNOTATION_PREFIX = "kwok.capstan.dev/"

_EFFECTS = {TaintEffect.NO_SCHEDULE: "NoSchedule", TaintEffect.PREFER_NO_SCHEDULE: "PreferNoSchedule", TaintEffect.NO_EXECUTE: "NoExecute"}
_EFFECT_NAMES = {v: k for k, v in _EFFECTS.items()}


@dataclass(frozen=True)
class Provenance:
    """What the node records about the launch besides the offering."""

    node_class: str
    hash: str
    image_id: str
    created_at: int


def provider_id(name: str) -> str:
    """The provider ID of the node ``name``."""
    return PROVIDER_ID_PREFIX + name


def name_from_provider_id(pid: str) -> str | None:
    """The node name in a kwok provider ID, or ``None`` for any other ID."""
    if pid.startswith(PROVIDER_ID_PREFIX) and len(pid) > len(PROVIDER_ID_PREFIX):
        return pid[len(PROVIDER_ID_PREFIX) :]
    return None


def build(claim: NodeClaim, launch: Launch, provenance: Provenance) -> dict[str, Any]:
    """The Node to create for ``claim`` launched as ``launch``."""
    name = claim.name
    out: dict[str, str] = {}
    # Single-valued requirements first, then the claim's labels, then what was launched.
    for r in claim.requirements:
        if r.operator == Operator.IN and len(r.values) == 1:
            out[r.key] = r.values[0]
    for kv in claim.labels:
        out[kv.key] = kv.value
    out.update(launch.entry.node_labels())
    out[labels.ZONE] = launch.offer.zone
    out[labels.CAPACITY_TYPE] = launch.offer.capacity_type
    out[labels.HOSTNAME] = name
    if claim.node_pool_name is not None:
        out[labels.NODE_POOL] = claim.node_pool_name
    out[PROVIDER_LABEL] = PROVIDER_NAME
    # As Karpenter's kwok provider labels its nodes: the kwok marker, and the price for
    # eks-node-viewer (Go's ``%f``: six decimals).
    out[KWOK_ANNOTATION] = "fake"
    out[NODE_VIEWER_PRICE_LABEL] = f"{launch.offer.price:.6f}"

    taints: list[dict[str, str]] = [{"key": labels.UNREGISTERED_TAINT, "effect": "NoExecute"}]
    for t in list(claim.taints) + list(claim.startup_taints):
        effect = _EFFECTS[t.effect]
        if not any(x["key"] == t.key and x["effect"] == effect for x in taints):
            taint = {"key": t.key, "effect": effect}
            if t.value is not None:
                taint["value"] = t.value
            taints.append(taint)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": dict(sorted(out.items())),
            "annotations": {
                KWOK_ANNOTATION: "fake",
                HASH_ANNOTATION: provenance.hash,
                IMAGE_ANNOTATION: provenance.image_id,
                CREATED_AT_ANNOTATION: str(provenance.created_at),
                NODE_CLASS_ANNOTATION: provenance.node_class,
            },
        },
        "spec": {"providerID": provider_id(name), "taints": taints},
        "status": {
            "capacity": to_strings(launch.entry.capacity),
            "allocatable": to_strings(launch.entry.allocatable()),
            "nodeInfo": {"architecture": launch.entry.arch, "operatingSystem": launch.entry.os[0] if launch.entry.os else ""},
        },
    }


def _meta(node: dict[str, Any]) -> dict[str, Any]:
    return node.get("metadata") or {}


def is_managed(node: dict[str, Any]) -> bool:
    """Whether this provider launched the node: it carries an ownership mark (the host stamps it
    with the Provider's name, and under an ``owned`` grant shows only Nodes carrying its own)."""
    return PROVIDER_LABEL in (_meta(node).get("labels") or {})


def is_deleting(node: dict[str, Any]) -> bool:
    """Whether deletion has started."""
    return _meta(node).get("deletionTimestamp") is not None


def annotation(node: dict[str, Any], key: str) -> str | None:
    """The annotation ``key``."""
    return (_meta(node).get("annotations") or {}).get(key)


def has_status(node: dict[str, Any]) -> bool:
    """Whether the node carries a capacity."""
    return bool((node.get("status") or {}).get("capacity"))


def parse_timestamp_millis(text: str) -> int | None:
    """An RFC 3339 timestamp (``2024-05-01T10:00:00Z``) in milliseconds since the epoch."""
    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def format_timestamp_millis(millis: int) -> str:
    """``millis`` since the epoch as Kubernetes writes a timestamp: ``YYYY-MM-DDTHH:MM:SSZ``
    (whole seconds, UTC)."""
    return datetime.fromtimestamp(millis // 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def to_claim(node: dict[str, Any]) -> NodeClaim:
    """The node as a claim: labels, provider ID, image, capacity, allocatable, creation time and
    this provider's annotations; taints without ``karpenter.sh/unregistered``."""
    meta = _meta(node)
    name = meta.get("name", "")
    node_labels: dict[str, str] = meta.get("labels") or {}
    annotations: dict[str, str] = meta.get("annotations") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    created_at = None
    text = annotations.get(CREATED_AT_ANNOTATION)
    if text is not None and text.isdigit():
        created_at = int(text)
    elif meta.get("creationTimestamp"):
        created_at = parse_timestamp_millis(meta["creationTimestamp"])
    taints = [
        Taint(t.get("key", ""), t.get("value"), _EFFECT_NAMES[t.get("effect")])
        for t in spec.get("taints") or []
        if t.get("key") != labels.UNREGISTERED_TAINT and t.get("effect") in _EFFECT_NAMES
    ]
    return NodeClaim(
        name=name,
        node_pool_name=node_labels.get(labels.NODE_POOL),
        labels=[KeyValue(k, v) for k, v in sorted(node_labels.items())],
        annotations=[KeyValue(k, v) for k, v in sorted(annotations.items()) if k.startswith(ANNOTATION_PREFIX)],
        taints=taints,
        startup_taints=[],
        requirements=[],
        requests=[],
        provider_id=spec.get("providerID") or provider_id(name),
        image_id=annotations.get(IMAGE_ANNOTATION),
        node_name=name,
        capacity=[Resource(k, v) for k, v in sorted((status.get("capacity") or {}).items())],
        allocatable=[Resource(k, v) for k, v in sorted((status.get("allocatable") or {}).items())],
        created_at=created_at,
    )


def launched_claim(node: dict[str, Any], claim: NodeClaim) -> NodeClaim:
    """The claim ``create`` returns: what the node says, plus the input claim's requirements,
    requests, taints and startup taints, and its annotations under the node's."""
    out = to_claim(node)
    node_keys = {kv.key for kv in out.annotations}
    out.annotations = [kv for kv in claim.annotations if kv.key not in node_keys] + out.annotations
    if out.node_pool_name is None:
        out.node_pool_name = claim.node_pool_name
    out.taints = list(claim.taints)
    out.startup_taints = list(claim.startup_taints)
    out.requirements = list(claim.requirements)
    out.requests = list(claim.requests)
    return out
