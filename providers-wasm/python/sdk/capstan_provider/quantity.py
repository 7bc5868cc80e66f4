"""Kubernetes resource quantities (``"500m"``, ``"16Gi"``, ``"1.5"``, ``"2e3"``) as exact integers.

A :class:`Quantity` holds its value in milli-units (thousandths: ``"500m"`` is 500, ``"2"`` is
2000, ``"1Ki"`` is 1,024,000). Parsing rounds anything finer than a milli-unit up, as Kubernetes'
``MilliValue()`` does; :meth:`Quantity.value` rounds whole units up like ``Value()``. Formatting
gives the canonical Kubernetes spelling in the notation the quantity was written in. The rules are
the host's (``capstan-model``), so a provider and the scheduler agree on every value::

    quantity ::= [+|-] number [suffix]
    number   ::= digits | digits "." | digits "." digits | "." digits
    suffix   ::= Ki|Mi|Gi|Ti|Pi|Ei | n|u|m|k|M|G|T|P|E | (e|E) [+|-] digits
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

DECIMAL_SI = "decimal-si"
"""Notation ``m``, (none), ``k``, ``M``, ... (and ``n``, ``u`` when parsing)."""
BINARY_SI = "binary-si"
"""Notation ``Ki``, ``Mi``, ``Gi``, ..."""
DECIMAL_EXPONENT = "decimal-exponent"
"""Notation ``e3``, ``E-3``, ..."""

# The host keeps milli-units in an i128.
_MAX_MILLIS = (1 << 127) - 1
_MAX_POW10 = 38
_SYNTAX = re.compile(r"^([+-]?)([0-9]*)(?:\.([0-9]*))?(.*)$")
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIXES = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
_SI_SUFFIXES = {-3: "m", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}


class QuantityError(ValueError):
    """A string that is not Kubernetes quantity syntax, or a value out of range."""


def _suffix_scale(suffix: str) -> tuple[str, int, int] | None:
    if suffix in _BINARY:
        return BINARY_SI, _BINARY[suffix], 0
    if suffix in _DECIMAL:
        return DECIMAL_SI, 0, _DECIMAL[suffix]
    if suffix[:1] in ("e", "E"):
        exponent = suffix[1:]
        negative = exponent.startswith("-")
        digits = exponent[1:] if exponent[:1] in ("+", "-") else exponent
        if not digits or not digits.isdigit() or not digits.isascii():
            return None
        magnitude = min(int(digits), 1 << 40)
        return DECIMAL_EXPONENT, 0, -magnitude if negative else magnitude
    return None


@total_ordering
@dataclass(frozen=True, eq=False)
class Quantity:
    """A Kubernetes quantity, exact to the milli-unit. Equality and order compare values only."""

    millis: int
    """The value in thousandths of the unit."""
    notation: str = DECIMAL_SI
    """How it is written: :data:`DECIMAL_SI`, :data:`BINARY_SI` or :data:`DECIMAL_EXPONENT`."""

    @staticmethod
    def parse(text: str) -> Quantity:
        """Parses Kubernetes quantity syntax; raises :class:`QuantityError`."""
        match = _SYNTAX.match(text) if isinstance(text, str) else None
        if match is None:
            raise QuantityError(f"{text!r} is not a Kubernetes quantity (expected e.g. \"500m\", \"2\", \"16Gi\", \"1e3\")")
        sign, whole, frac, suffix = match.groups()
        frac = frac or ""
        if not whole and not frac or not whole.isascii() or not frac.isascii():
            raise QuantityError(f"{text!r} is not a Kubernetes quantity (expected e.g. \"500m\", \"2\", \"16Gi\", \"1e3\")")
        scale = _suffix_scale(suffix)
        if scale is None:
            raise QuantityError(f"{text!r} is not a Kubernetes quantity (expected e.g. \"500m\", \"2\", \"16Gi\", \"1e3\")")
        notation, pow2, pow10 = scale
        frac = frac.rstrip("0")
        mantissa = int((whole + frac) or "0")
        millis = _scale(mantissa, pow2, pow10, len(frac))
        if millis is None or millis > _MAX_MILLIS:
            raise QuantityError(f"quantity {text!r} is out of range")
        return Quantity(-millis if sign == "-" else millis, notation)

    @staticmethod
    def from_units(units: int) -> Quantity:
        """A whole number in decimal notation (``Quantity.from_units(4)`` is ``"4"``)."""
        return Quantity(units * 1000, DECIMAL_SI)

    @staticmethod
    def from_bytes(count: int) -> Quantity:
        """A byte count in binary notation (``Quantity.from_bytes(1 << 30)`` is ``"1Gi"``)."""
        return Quantity(count * 1000, BINARY_SI)

    def value(self) -> int:
        """The value in whole units, rounded up (away from zero) like Kubernetes' ``Value()``."""
        whole, rest = divmod(abs(self.millis), 1000)
        whole += 1 if rest else 0
        return -whole if self.millis < 0 else whole

    def milli_value(self) -> int:
        """The value as the contract's ``amount.milli-value``: milli-units, clamped to 0..2^64-1."""
        return min(max(self.millis, 0), (1 << 64) - 1)

    def __sub__(self, other: Quantity) -> Quantity:
        return Quantity(self.millis - other.millis, self.notation)

    def __add__(self, other: Quantity) -> Quantity:
        return Quantity(self.millis + other.millis, self.notation)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.millis == other.millis

    def __lt__(self, other: Quantity) -> bool:
        return self.millis < other.millis

    def __hash__(self) -> int:
        return hash(self.millis)

    def __str__(self) -> str:
        return _canonical(self.millis, self.notation)


def _scale(mantissa: int, pow2: int, pow10: int, frac_len: int) -> int | None:
    if mantissa == 0:
        return 0
    value = mantissa << pow2
    exp10 = pow10 + 3 - frac_len
    if exp10 >= 0:
        return None if exp10 > _MAX_POW10 else value * 10**exp10
    if -exp10 > _MAX_POW10:
        return 1
    quotient, rest = divmod(value, 10**-exp10)
    return quotient + (1 if rest else 0)


def _canonical(millis: int, notation: str) -> str:
    if millis == 0:
        return "0"
    sign = "-" if millis < 0 else ""
    magnitude = abs(millis)
    if notation == BINARY_SI and (magnitude % 1000 or magnitude < 1024 * 1000):
        notation = DECIMAL_SI
    if notation == BINARY_SI:
        mantissa, power = magnitude // 1000, 0
        while power < len(_BINARY_SUFFIXES) - 1 and mantissa % 1024 == 0:
            mantissa //= 1024
            power += 1
        return f"{sign}{mantissa}{_BINARY_SUFFIXES[power]}"
    mantissa, exponent = magnitude, -3
    while mantissa % 1000 == 0 and (notation == DECIMAL_EXPONENT or exponent < 18):
        mantissa //= 1000
        exponent += 3
    if exponent == 0:
        suffix = ""
    elif notation == DECIMAL_EXPONENT:
        suffix = f"e{exponent}"
    else:
        suffix = _SI_SUFFIXES.get(exponent, "E")
    return f"{sign}{mantissa}{suffix}"


def parse_millis(text: str) -> int:
    """The value of ``text`` in milli-units (``"1"`` is 1000, ``"100m"`` is 100), rounded up."""
    return Quantity.parse(text).millis


def parse_units(text: str) -> int:
    """The value of ``text`` in whole units (``"16Gi"`` is 17179869184), rounded up."""
    return Quantity.parse(text).value()
