"""Typed access to the host's ``kube`` import: JSON in, dicts out, errors as :class:`KubeCallError`.

Every call is checked by the host against the Provider's grants; a call outside them fails with
``permission-denied``. :meth:`KubeCallError.provider_error` maps a failure onto the contract's
errors the way the Rust SDK does, so an export can write::

    try:
        node = kube.get(NODES.object(name))
    except kube.KubeCallError as e:
        raise e.provider_error(launch=False)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from componentize_py_types import Err
from wit_world.imports import kube as _kube
from wit_world.imports.kube import (
    Cluster,
    KubeError,
    KubeError_Conflict,
    KubeError_Invalid,
    KubeError_NotFound,
    KubeError_Other,
    KubeError_PermissionDenied,
    KubeError_Unavailable,
    ListOptions,
    ObjectRef,
    PatchType,
)
from wit_world.imports.kube import Target as _Target

from . import errors, lifecycle

_KINDS = {
    KubeError_PermissionDenied: "permission-denied",
    KubeError_NotFound: "not-found",
    KubeError_Conflict: "conflict",
    KubeError_Invalid: "invalid",
    KubeError_Unavailable: "unavailable",
    KubeError_Other: "other",
}


class KubeCallError(Exception):
    """A failed kube call: the host's or the API server's ``kube-error``, or an answer that is not
    the JSON object expected (``error`` is then ``None``)."""

    def __init__(self, error: KubeError | None, text: str) -> None:
        super().__init__(text)
        self.error = error

    @property
    def kind(self) -> str:
        """``permission-denied``, ``not-found``, ``conflict``, ``invalid``, ``unavailable``,
        ``other``, or ``decode`` for an undecodable answer."""
        return "decode" if self.error is None else _KINDS[type(self.error)]

    def is_not_found(self) -> bool:
        """Whether the object does not exist."""
        return isinstance(self.error, KubeError_NotFound)

    def is_conflict(self) -> bool:
        """Whether the object exists already or changed underneath."""
        return isinstance(self.error, KubeError_Conflict)

    def provider_error(self, launch: bool) -> Err:
        """The provider error this failure becomes in ``create`` (``launch=True``) or any other
        export: not-found → not-found; conflict, unavailable → retryable; permission-denied →
        create-failed{PermissionDenied} / invalid; invalid → create-failed{ObjectRejected} /
        invalid; other → create-failed{KubeError} / retryable; an undecodable answer →
        retryable."""
        text = str(self)
        e = self.error
        if isinstance(e, KubeError_NotFound):
            return errors.not_found(text)
        if isinstance(e, (KubeError_Conflict, KubeError_Unavailable)) or e is None:
            return errors.retryable(text)
        if launch:
            reason = {
                KubeError_PermissionDenied: "PermissionDenied",
                KubeError_Invalid: "ObjectRejected",
                KubeError_Other: "KubeError",
            }[type(e)]
            return errors.create_failed(reason, text)
        if isinstance(e, KubeError_Other):
            return errors.retryable(text)
        return errors.invalid(text)

    def reboot_error(self) -> Err:
        """The ``reboot-error`` (contract 0.4) this failure becomes in ``reboot``: not-found →
        not-found; permission-denied (no retry gets past it) → failed; anything else →
        retryable."""
        text = str(self)
        if isinstance(self.error, KubeError_NotFound):
            return lifecycle.reboot_not_found(text)
        if isinstance(self.error, KubeError_PermissionDenied):
            return lifecycle.reboot_failed(text)
        return lifecycle.reboot_retryable(text)


def _failure(err: Err) -> KubeCallError:
    e = err.value
    return KubeCallError(e, f"{_KINDS[type(e)]}: {e.value}")


def _decode(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as e:
        raise KubeCallError(None, f"decoding the answer: {e}") from None
    if not isinstance(value, dict):
        raise KubeCallError(None, "decoding the answer: not a JSON object")
    return value


@dataclass(frozen=True)
class Target:
    """A kind of object: ``Target.workload("v1", "Node")``, ``.namespaced("ns")``."""

    cluster: Cluster
    api_version: str
    kind: str
    namespace: str | None = None

    @staticmethod
    def workload(api_version: str, kind: str) -> Target:
        """A kind in the cluster whose nodes Capstan manages."""
        return Target(Cluster.WORKLOAD, api_version, kind)

    @staticmethod
    def management(api_version: str, kind: str) -> Target:
        """A kind in the management cluster."""
        return Target(Cluster.MANAGEMENT, api_version, kind)

    def namespaced(self, namespace: str) -> Target:
        """The same kind in ``namespace``."""
        return replace(self, namespace=namespace)

    def object(self, name: str, subresource: str | None = None) -> ObjectRef:
        """The object ``name`` (optionally its subresource, e.g. ``status``)."""
        return ObjectRef(self.wit(), name, subresource)

    def wit(self) -> _Target:
        """The contract's ``target``."""
        return _Target(self.cluster, self.api_version, self.kind, self.namespace)


def get(obj: ObjectRef) -> dict[str, Any]:
    """The object; raises :class:`KubeCallError`."""
    try:
        return _decode(_kube.get(obj))
    except Err as e:
        raise _failure(e) from None


def get_opt(obj: ObjectRef) -> dict[str, Any] | None:
    """The object, or ``None`` when it does not exist."""
    try:
        return get(obj)
    except KubeCallError as e:
        if e.is_not_found():
            return None
        raise


# Contract 0.3 pages lists (``list-options`` has ``continue_token``); 0.1 and 0.2 do not.
_PAGED = "continue_token" in getattr(ListOptions, "__dataclass_fields__", {})

#: Items a page when :func:`list_items` pages a list for the caller (contract 0.3).
PAGE_SIZE = 500


def _list_page(target: Target, label_selector: str | None, field_selector: str | None, limit: int | None, token: str | None) -> dict[str, Any]:
    options = ListOptions(label_selector, field_selector, limit, token) if _PAGED else ListOptions(label_selector, field_selector, limit)
    try:
        return _decode(_kube.list(target.wit(), options))
    except Err as e:
        raise _failure(e) from None


def _items(answer: dict[str, Any]) -> list[dict[str, Any]]:
    items = answer.get("items") or []
    if not isinstance(items, list):
        raise KubeCallError(None, "decoding the answer: items is not a list")
    return items


def list_items(target: Target, label_selector: str | None = None, field_selector: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
    """The ``items`` of a list of ``target``: at most ``limit`` of them when it is given, else all
    of them (under contract 0.3 read :data:`PAGE_SIZE` at a time, so no single answer is large)."""
    if limit is not None or not _PAGED:
        return _items(_list_page(target, label_selector, field_selector, limit, None))
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        answer = _list_page(target, label_selector, field_selector, PAGE_SIZE, token)
        items.extend(_items(answer))
        metadata = answer.get("metadata")
        token = metadata.get("continue") if isinstance(metadata, dict) else None
        if not token:
            return items


def create(target: Target, body: dict[str, Any]) -> dict[str, Any]:
    """Creates ``body`` and returns what the server stored."""
    try:
        return _decode(_kube.create(target.wit(), json.dumps(body, separators=(",", ":"))))
    except Err as e:
        raise _failure(e) from None


def patch_merge(obj: ObjectRef, patch: dict[str, Any]) -> dict[str, Any]:
    """An RFC 7386 merge patch; returns the patched object."""
    try:
        return _decode(_kube.patch(obj, PatchType.MERGE, json.dumps(patch, separators=(",", ":")), None))
    except Err as e:
        raise _failure(e) from None


def patch_json(obj: ObjectRef, ops: list[dict[str, Any]]) -> dict[str, Any]:
    """An RFC 6902 JSON patch (a list of operations; a failed ``test`` operation fails all of it);
    returns the patched object."""
    try:
        return _decode(_kube.patch(obj, PatchType.JSON, json.dumps(ops, separators=(",", ":")), None))
    except Err as e:
        raise _failure(e) from None


def apply(obj: ObjectRef, body: dict[str, Any], field_manager: str) -> dict[str, Any]:
    """Server-side apply of ``body`` as ``field_manager``."""
    try:
        return _decode(_kube.patch(obj, PatchType.APPLY, json.dumps(body, separators=(",", ":")), field_manager))
    except Err as e:
        raise _failure(e) from None


def delete(obj: ObjectRef) -> None:
    """Deletes the object (``not-found`` when it is gone already)."""
    try:
        _kube.delete(obj)
    except Err as e:
        raise _failure(e) from None
