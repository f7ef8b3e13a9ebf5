"""Numbers as a hand-written YAML file gives them.

Pydantic's lax mode reads YAML's ``true`` / ``yes`` as 1 in an integer or float field, so
``tensorParallel: true`` used to place TP1 groups and exit 0; it also reads the string "8" as 8, which the
JSON Schemas refuse. These types refuse a boolean or a string where a number is expected and keep the
other coercions (``8.0`` is still 8; ``8.5`` is still refused by pydantic)."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BeforeValidator


def _numbers_only(expected: str, strings: bool = False) -> BeforeValidator:
    """A validator that passes every value on but a boolean or a string, which it refuses as not
    ``expected``. Strings: a quoted "8" is what the JSON Schemas (and editors using them) refuse, so the
    loader refuses it too; plain 1e3, which YAML 1.1 reads as a string, is read as a number by the loader
    (placer.model.load). ``strings``: take them (a mapping key, which JSON writes as a string)."""

    def check(value: Any) -> Any:
        if isinstance(value, bool):
            word = "true" if value else "false"
            raise ValueError(f"expected {expected}, got {word}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"expected {expected}, got {value} (JSON, and so the schemas, has no such number)")
        if isinstance(value, str) and not strings:
            why = ""
            if _numeric(value) and "_" not in value:
                why = " (a string: write it without quotes)"
            elif _numeric(value.replace("_", "")):
                why = " (YAML 1.2 reads digits grouped with '_' as text: write them without the '_')"
            raise ValueError(f"expected {expected}, got {value!r}{why}")
        return value

    return BeforeValidator(check)


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


_INT, _NUMBER = _numbers_only("an integer"), _numbers_only("a number")
Int = Annotated[int, _INT]
"""An integer field that refuses ``true`` / ``false`` and strings."""
Float = Annotated[float, _NUMBER]
"""A number field that refuses ``true`` / ``false`` and strings."""
# Optional ones are annotated whole: a ``Field(ge=...)`` on ``Int | None`` would not reach the integer
# inside the union (pydantic leaves it unapplied and writes ``ge`` into the JSON Schema verbatim).
IntOrNone = Annotated[int | None, _INT]
FloatOrNone = Annotated[float | None, _NUMBER]
IntKey = Annotated[int, _numbers_only("an integer", strings=True)]
"""An integer mapping key: refuses ``true`` / ``false``, takes "1" (JSON's keys are always strings)."""


def _booleans_only(value: Any) -> Any:
    """Pydantic's lax mode reads "n", "off" and 0 as false (a node quietly unschedulable); the JSON Schemas
    take only true and false, and so does the loader (YAML 1.2 reads yes/no and on/off as text)."""
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


Bool = Annotated[bool, BeforeValidator(_booleans_only)]
"""A boolean field that takes only true and false."""
BoolOrNone = Annotated[bool | None, BeforeValidator(_booleans_only)]
