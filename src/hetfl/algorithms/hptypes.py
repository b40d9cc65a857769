"""The types a hyperparameter may have, read from a dataclass field's annotation (a string under postponed
evaluation, else a type or typing object): bool, int, float or str; any of them or None (``float | None``,
``Optional[float]``); or a tuple of one of them (``tuple[float, ...]``, a YAML list in a config)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

SCALARS = ("bool", "int", "float", "str")
ALLOWED_TYPES = "bool, int, float or str; one of them | None (or Optional[...]); or tuple[<one of them>, ...]"

_OPTIONAL = re.compile(r"Optional\[(?P<a>.+)\]|(?P<b>.+?)\s*\|\s*None|None\s*\|\s*(?P<c>.+)")
_TUPLE = re.compile(r"(?:tuple|Tuple)\[\s*(?P<t>\w+)\s*,\s*\.\.\.\s*\]")


@dataclass(frozen=True)
class HyperType:
    """``scalar`` (one of SCALARS), ``nullable`` (None allowed), ``sequence`` (a tuple of scalars)."""

    scalar: str
    nullable: bool = False
    sequence: bool = False

    def __str__(self) -> str:
        text = f"a list of {self.scalar}" if self.sequence else f"a value of type {self.scalar}"
        return text + (" or null" if self.nullable else "")


def annotation_text(f: dataclasses.Field) -> str:
    """The field's annotation as written: 'float', 'float | None', 'tuple[int, ...]'."""
    if isinstance(f.type, str):
        return f.type.strip()
    if isinstance(f.type, type):
        return f.type.__name__
    return str(f.type).replace("typing.", "").replace("NoneType", "None")


def hyper_type(f: dataclasses.Field) -> HyperType:
    """The field's HyperType; ValueError naming the field, its annotation and ALLOWED_TYPES otherwise."""
    text = annotation_text(f)
    inner, nullable = text, False
    if m := _OPTIONAL.fullmatch(text):
        inner, nullable = next(g for g in m.groups() if g is not None).strip(), True
    sequence = False
    if m := _TUPLE.fullmatch(inner):
        inner, sequence = m.group("t"), True
    if inner not in SCALARS:
        raise ValueError(f"hyperparameter '{f.name}' has type {text!r}, which is not allowed; allowed: "
                         f"{ALLOWED_TYPES}")
    return HyperType(inner, nullable, sequence)
