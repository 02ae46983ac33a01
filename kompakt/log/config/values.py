"""Config values as text and back, the way Kafka's ``ConfigDef`` does it, and the
validators (Kafka's ``ConfigDef.Range`` / ``ValidString`` / ``ValidList``).

Java's number grammar and ``Double.toString`` rather than Python's, so the text a client
sends and the text DescribeConfigs answers are those Kafka would give.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kompakt.errors import InvalidConfigError

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

Validator = Callable[[str, Any], None]


def java_double(v: float) -> str:
    """``Double.toString``: plain between 1e-3 and 1e7, else ``d.dddE±n``."""
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "Infinity" if v > 0 else "-Infinity"
    if v == 0:
        return "-0.0" if str(v).startswith("-") else "0.0"
    if 1e-3 <= abs(v) < 1e7:
        s = repr(v)
        return s if "." in s else s + ".0"
    sign, digits, exp = Decimal(repr(v)).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    point = len(digits) - 1 + int(exp)
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{point}"


def to_string(value: Any) -> str | None:
    """A parsed value as Kafka prints it (``ConfigDef.convertToString``)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return java_double(value)
    if isinstance(value, tuple | list):
        return ",".join(value)
    return str(value)


def to_raw(value: Any) -> str:
    """Accept typed values from the embedded API by turning them into config text."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float | tuple | list):
        return to_string(value)  # type: ignore[return-value]
    raise InvalidConfigError(f"Config values must be strings, not {type(value).__name__}")


def invalid_value(name: str, value: Any, message: str) -> InvalidConfigError:
    shown = to_string(value) if not isinstance(value, str) else value
    return InvalidConfigError(f"Invalid value {shown} for configuration {name}: {message}")


def _java_trim(s: str) -> str:
    """``String.trim()``: strips every char <= ' ', not Unicode whitespace."""
    start, end = 0, len(s)
    while start < end and s[start] <= " ":
        start += 1
    while end > start and s[end - 1] <= " ":
        end -= 1
    return s[start:end]


_INTEGER = re.compile(r"[+-]?[0-9]+")
_DOUBLE = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)"
)
_LIST_SEPARATOR = re.compile(r"\s*,\s*")
_BOUNDS = {"int": (INT_MIN, INT_MAX), "long": (LONG_MIN, LONG_MAX)}


def parse_type(name: str, raw: str, type_: str) -> Any:
    """Kafka's ``ConfigDef.parseType`` for a string value (Java's number grammar, not Python's)."""
    s = _java_trim(raw)
    if type_ in _BOUNDS:
        lo, hi = _BOUNDS[type_]
        if _INTEGER.fullmatch(s) and lo <= int(s) <= hi:
            return int(s)
        raise invalid_value(name, raw, f"Not a number of type {type_.upper()}")
    if type_ == "double":
        if _DOUBLE.fullmatch(s):
            return float(s.rstrip("fFdD"))
        raise invalid_value(name, raw, "Not a number of type DOUBLE")
    if type_ == "boolean":
        if s.lower() in ("true", "false"):
            return s.lower() == "true"
        raise invalid_value(name, raw, "Expected value to be either true or false")
    if type_ == "list":
        return () if s == "" else tuple(_LIST_SEPARATOR.split(s))
    return s


# -- validators (Kafka's ConfigDef.Range / ValidString / ValidList) ---------------------------


@dataclass(frozen=True)
class Range:
    """Inclusive bounds; ``str()`` is Kafka's "Valid Values" column."""

    min: int | float | None = None
    max: int | float | None = None

    def __call__(self, name: str, value: Any) -> None:
        if self.min is not None and not value >= self.min:  # `not >=` also rejects NaN
            raise invalid_value(name, value, f"Value must be at least {self.min}")
        if self.max is not None and value > self.max:
            raise invalid_value(name, value, f"Value must be no more than {self.max}")

    def __str__(self) -> str:
        if self.max is None:
            return f"[{self.min},...]"
        return f"[{self.min},...,{self.max}]"


def at_least(n: int | float) -> Range:
    return Range(n, None)


def between(lo: int | float, hi: int | float) -> Range:
    return Range(lo, hi)


@dataclass(frozen=True)
class OneOf:
    """Case-sensitive choice, like ``ValidString.in``."""

    values: tuple[str, ...]

    def __call__(self, name: str, value: Any) -> None:
        if value not in self.values:
            raise invalid_value(name, value, "String must be one of: " + ", ".join(self.values))

    def __str__(self) -> str:
        return "[" + ", ".join(self.values) + "]"


@dataclass(frozen=True)
class ListOf:
    """Each entry one of ``values``, no duplicates, no empty entries (KIP-1161's ValidList).

    An empty list is allowed: for ``cleanup.policy`` it means neither delete nor compact,
    i.e. infinite retention, as in Kafka 4.2.
    """

    values: tuple[str, ...]

    def __call__(self, name: str, value: Any) -> None:
        if len(set(value)) != len(value):
            raise InvalidConfigError(f"Configuration '{name}' values must not be duplicated.")
        for item in value:
            if item == "":
                raise InvalidConfigError(f"Configuration '{name}' values must not be empty.")
            OneOf(self.values)(name, item)

    def __str__(self) -> str:
        return "[" + ", ".join(self.values) + "]"


@dataclass(frozen=True)
class GzipLevel:
    """1..9, or -1 for zlib's default (Kafka's ``CompressionType.GZIP.levelValidator``)."""

    def __call__(self, name: str, value: Any) -> None:
        if value > 9 or (value < 1 and value != -1):
            raise invalid_value(name, value, "Value must be between 1 and 9 or equal to -1")

    def __str__(self) -> str:
        return "[1,...,9] or -1"
