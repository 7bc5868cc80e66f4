"""Drift: whether a node launched earlier still matches its NodeClass."""

from __future__ import annotations

IMAGE_DRIFTED = "ImageDrifted"
"""The image changed."""
NODE_CLASS_DRIFTED = "NodeClassDrifted"
"""Other node-shaping parameters changed."""


def reason(recorded_hash: str | None, recorded_image: str | None, current_hash: str, current_image: str) -> str | None:
    """The drift reason, if any: an image change wins over other parameter changes; what was not
    recorded (``None``) cannot drift."""
    if recorded_image is not None and recorded_image != current_image:
        return IMAGE_DRIFTED
    if recorded_hash is not None and recorded_hash != current_hash:
        return NODE_CLASS_DRIFTED
    return None
