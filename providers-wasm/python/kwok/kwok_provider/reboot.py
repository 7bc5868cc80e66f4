"""A reboot, as kwok can play one: the Node gets a new boot ID (``kwok-<operation ID>``, so the same
operation asked twice reboots once) and goes ``Ready=False`` (``KubeletNotReady``); kwok's
``node-initialize`` stage then brings it back Ready, as a kubelet that has booted again would, with
its default conditions (a simulated fault such as ``KWOKUnhealthy`` is gone with the reboot).

:func:`patch` is pure: from the Node as read to the JSON patch that reboots it (the Rust kwok
provider's ``reboot.rs``).
"""

from __future__ import annotations

from typing import Any


def boot_id(operation_id: str) -> str:
    """The boot ID a Node gets from the reboot of ``operation_id``."""
    return f"kwok-{operation_id}"


def patch(node: dict[str, Any], operation_id: str, now: str) -> list[dict[str, Any]] | None:
    """The JSON patch (RFC 6902) of ``node``'s status that reboots it for ``operation_id`` at
    ``now`` (RFC 3339); ``None`` when this operation already rebooted it. The patch tests the
    condition it replaces, so a Node whose conditions moved in between is not patched blindly."""
    boot = boot_id(operation_id)
    status = node.get("status")
    info = status.get("nodeInfo") if isinstance(status, dict) else None
    if isinstance(info, dict) and info.get("bootID") == boot:
        return None
    ops: list[dict[str, Any]] = []
    if status is None:
        ops.append({"op": "add", "path": "/status", "value": {}})
    if info is not None:
        ops.append({"op": "add", "path": "/status/nodeInfo/bootID", "value": boot})
    else:
        ops.append({"op": "add", "path": "/status/nodeInfo", "value": {"bootID": boot}})
    not_ready = {
        "type": "Ready",
        "status": "False",
        "reason": "KubeletNotReady",
        "message": f"kwok provider: rebooting (operation {operation_id})",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    conditions = status.get("conditions") if isinstance(status, dict) else None
    if not isinstance(conditions, list):
        ops.append({"op": "add", "path": "/status/conditions", "value": [not_ready]})
        return ops
    ready = next((i for i, c in enumerate(conditions) if isinstance(c, dict) and c.get("type") == "Ready"), None)
    if ready is None:
        ops.append({"op": "add", "path": "/status/conditions/-", "value": not_ready})
    else:
        ops.append({"op": "test", "path": f"/status/conditions/{ready}/type", "value": "Ready"})
        ops.append({"op": "replace", "path": f"/status/conditions/{ready}", "value": not_ready})
    return ops
