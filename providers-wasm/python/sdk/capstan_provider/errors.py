"""The contract's ``provider-error`` as Python exceptions.

componentize-py returns an error from an export when the export raises
``componentize_py_types.Err(provider_error)``; these helpers build such exceptions, so a provider
writes ``raise invalid("parameters.zones[0]: must not be empty")``. Each case is one reaction of
the host (see ``wit/since_v0.1.0/provider.wit``).
"""

from __future__ import annotations

from componentize_py_types import Err
from capstan_provider.types import (
    CreateFailure,
    ProviderError,
    ProviderError_CreateFailed,
    ProviderError_InsufficientCapacity,
    ProviderError_Invalid,
    ProviderError_NodeClassNotReady,
    ProviderError_NotFound,
    ProviderError_Retryable,
)

ProviderFailure = Err
"""The exception type an export raises to return a ``provider-error`` (its ``value``)."""


def not_found(message: str) -> Err:
    """The instance does not exist (any more): ``delete`` is done, ``get`` knows no such ID."""
    return Err(ProviderError_NotFound(message))


def insufficient_capacity(message: str) -> Err:
    """No capacity for any requested offering: the host marks them unavailable for a while."""
    return Err(ProviderError_InsufficientCapacity(message))


def node_class_not_ready(message: str) -> Err:
    """The NodeClass is valid but not usable yet."""
    return Err(ProviderError_NodeClassNotReady(message))


def create_failed(reason: str, message: str) -> Err:
    """Launch failed for a reason the provider names (the claim's ``Launched`` reason)."""
    return Err(ProviderError_CreateFailed(CreateFailure(reason, message)))


def retryable(message: str) -> Err:
    """A transient failure: the host retries with backoff."""
    return Err(ProviderError_Retryable(message))


def invalid(message: str) -> Err:
    """The input is wrong: not retried until it changes."""
    return Err(ProviderError_Invalid(message))


def not_implemented(function: str) -> Err:
    """``invalid("not implemented: <function>")``, for exports a provider has not written yet
    (``capstan provider test`` reports such answers as work to do, not as failures)."""
    return invalid(f"not implemented: {function}")


def kind(error: ProviderError) -> str:
    """The kebab-case case name (``not-found``, ``create-failed``, ...)."""
    return {
        ProviderError_NotFound: "not-found",
        ProviderError_InsufficientCapacity: "insufficient-capacity",
        ProviderError_NodeClassNotReady: "node-class-not-ready",
        ProviderError_CreateFailed: "create-failed",
        ProviderError_Retryable: "retryable",
        ProviderError_Invalid: "invalid",
    }[type(error)]


def message(error: ProviderError) -> str:
    """The error's message (a ``create-failed`` gives ``reason: message``)."""
    if isinstance(error, ProviderError_CreateFailed):
        return f"{error.value.reason}: {error.value.message}"
    return error.value
