"""NodeClass parameters: the provider-owned JSON object in ``node-class.parameters``.

:func:`parse` reads the text (``""`` counts as ``{}``); :class:`Fields` reads typed fields from an
object and rejects unknown ones, every error an ``invalid`` that names the field
(``parameters.instanceTypes[2].price: expected a number, got "x"``)::

    f = Fields(parse(class_.parameters))
    zones = f.str_list("zones")          # None when absent
    max_cpu = f.int("maxCpu", minimum=0)
    f.done()                             # unknown fields are an error
"""

from __future__ import annotations

import json
import math
from typing import Any

from componentize_py_types import Err

from . import errors


def invalid(field: str, problem: str) -> Err:
    """An ``invalid`` error about one parameter field (``field`` relative to ``parameters``)."""
    return errors.invalid(f"parameters.{field}: {problem}" if field else f"parameters: {problem}")


def parse(parameters: str) -> dict[str, Any]:
    """The parameters as a dict; anything but a JSON object is ``invalid``."""
    text = parameters if parameters.strip() else "{}"
    try:
        value = json.loads(text)
    except ValueError as e:
        raise invalid("", f"not JSON: {e}") from None
    if not isinstance(value, dict):
        raise invalid("", "must be a JSON object")
    return value


class ServedObject:
    """An object of a node class kind the provider serves (its ``capstan:node-class-crds``), as the
    host hands it over in ``parameters``: ``{"apiVersion", "kind", "spec"}``."""

    def __init__(self, api_version: str, kind: str, spec: dict[str, Any]) -> None:
        self.api_version = api_version
        self.kind = kind
        self.spec = spec

    @property
    def group(self) -> str:
        """The API group of ``api_version``."""
        return self.api_version.split("/", 1)[0] if "/" in self.api_version else ""

    def fields(self) -> Fields:
        """Typed reads of ``spec`` (errors name ``parameters.spec.<field>``)."""
        return Fields(self.spec, "spec")


def served_object(parameters: str) -> ServedObject | None:
    """The served object in ``parameters``, if they hold one: an object with exactly ``apiVersion``,
    ``kind`` (strings) and ``spec`` (an object). A ``capstan.dev`` NodeClass's parameters are the
    provider's own object; a provider whose own schema has those three fields must tell them apart
    itself."""
    try:
        value = json.loads(parameters)
    except ValueError:
        return None
    if not isinstance(value, dict) or set(value) != {"apiVersion", "kind", "spec"}:
        return None
    api_version, kind, spec = value["apiVersion"], value["kind"], value["spec"]
    if not isinstance(api_version, str) or not isinstance(kind, str) or not isinstance(spec, dict):
        return None
    return ServedObject(api_version, kind, spec)


def _describe(value: Any) -> str:
    return json.dumps(value)[:60]


class Fields:
    """Typed reads of one JSON object at ``path``; remembers which fields were read."""

    def __init__(self, obj: Any, path: str = "") -> None:
        if not isinstance(obj, dict):
            raise invalid(path, f"expected an object, got {_describe(obj)}")
        self.obj = obj
        self.path = path
        self._seen: set[str] = set()

    def at(self, key: str) -> str:
        """The path of field ``key``."""
        return f"{self.path}.{key}" if self.path else key

    def _get(self, key: str, required: bool) -> Any:
        self._seen.add(key)
        value = self.obj.get(key)
        if value is None and required:
            raise invalid(self.at(key), "is required")
        return value

    def str(self, key: str, required: bool = False, non_empty: bool = False) -> str | None:
        """A string field (``non_empty``: not blank)."""
        value = self._get(key, required)
        if value is None:
            return None
        if not isinstance(value, str):
            raise invalid(self.at(key), f"expected a string, got {_describe(value)}")
        if non_empty and not value.strip():
            raise invalid(self.at(key), "must not be empty")
        return value

    def int(self, key: str, required: bool = False, minimum: int | None = None) -> int | None:
        """An integer field, optionally at least ``minimum``."""
        value = self._get(key, required)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise invalid(self.at(key), f"expected an integer, got {_describe(value)}")
        if minimum is not None and value < minimum:
            raise invalid(self.at(key), f"must not be {'negative' if minimum == 0 else f'below {minimum}'}, got {value}")
        return value

    def float(self, key: str, required: bool = False, minimum: float | None = None) -> float | None:
        """A finite number field, optionally at least ``minimum``."""
        value = self._get(key, required)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise invalid(self.at(key), f"expected a number, got {_describe(value)}")
        if not math.isfinite(value) or (minimum is not None and value < minimum):
            raise invalid(self.at(key), f"must be finite and >= {minimum}, got {value}")
        return float(value)

    def bool(self, key: str, default: bool) -> bool:
        """A boolean field."""
        value = self._get(key, False)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise invalid(self.at(key), f"expected true or false, got {_describe(value)}")
        return value

    def str_list(self, key: str, required: bool = False, non_empty: bool = True) -> list[str] | None:
        """A list of strings (``non_empty``: none blank)."""
        value = self._get(key, required)
        if value is None:
            return None
        if not isinstance(value, list):
            raise invalid(self.at(key), f"expected a list, got {_describe(value)}")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise invalid(f"{self.at(key)}[{i}]", f"expected a string, got {_describe(item)}")
            if non_empty and not item.strip():
                raise invalid(f"{self.at(key)}[{i}]", "must not be empty")
        return value

    def str_map(self, key: str, required: bool = False) -> dict[str, str] | None:
        """An object of string values."""
        value = self._get(key, required)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise invalid(self.at(key), f"expected an object, got {_describe(value)}")
        for k, v in value.items():
            if not isinstance(v, str):
                raise invalid(f"{self.at(key)}.{k}", f"expected a string, got {_describe(v)}")
        return value

    def objects(self, key: str, required: bool = False) -> list[Fields] | None:
        """A list of objects, each as :class:`Fields`."""
        value = self._get(key, required)
        if value is None:
            return None
        if not isinstance(value, list):
            raise invalid(self.at(key), f"expected a list, got {_describe(value)}")
        return [Fields(item, f"{self.at(key)}[{i}]") for i, item in enumerate(value)]

    def done(self) -> None:
        """Rejects fields that were never read (typos, unknown options)."""
        for key in self.obj:
            if key not in self._seen:
                raise invalid(self.at(key), "unknown field")
