"""The host's small services: logging, sleep, the clock and the per-provider cache.

Every call of a provider runs in a fresh instance; what should outlive a call goes in the cache
(bounded by the host and evicted early when it must: a value read back is a hint).
"""

from __future__ import annotations

import json
from typing import Any

from wit_world.imports import host as _host
from wit_world.imports.host import LogLevel


def log(level: LogLevel, message: str) -> None:
    """A log line, attributed by the host to this provider."""
    _host.log(level, message)


def debug(message: str) -> None:
    """Logs at debug level."""
    _host.log(LogLevel.DEBUG, message)


def info(message: str) -> None:
    """Logs at info level."""
    _host.log(LogLevel.INFO, message)


def warn(message: str) -> None:
    """Logs at warn level."""
    _host.log(LogLevel.WARN, message)


def error(message: str) -> None:
    """Logs at error level."""
    _host.log(LogLevel.ERROR, message)


def sleep_millis(millis: int) -> None:
    """Suspends the call without blocking a host thread (counts against the wall-clock limit)."""
    _host.sleep(millis)


def now_millis() -> int:
    """Wall-clock time in milliseconds since the Unix epoch."""
    return _host.now()


def cache_get(key: str) -> Any | None:
    """The JSON value under ``key``, or ``None`` when absent or not JSON (then it is dropped)."""
    raw = _host.cache_get(key)
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        _host.cache_delete(key)
        return None


def cache_set(key: str, value: Any, ttl_millis: int) -> None:
    """Stores ``value`` as JSON under ``key`` for ``ttl_millis``."""
    _host.cache_set(key, json.dumps(value, separators=(",", ":")).encode(), ttl_millis)


def cache_delete(key: str) -> None:
    """Removes ``key``."""
    _host.cache_delete(key)
