"""Numbers as a hand-written YAML file gives them.

Pydantic's lax mode reads YAML's ``true`` / ``yes`` as 1 in an integer or float field, so
``tensorParallel: true`` used to place TP1 groups and exit 0; it also reads the string "8" as 8, which the
JSON Schemas refuse. These types refuse a boolean or a string where a number is expected and keep the
other coercions (``8.0`` is still 8; ``8.5`` is still refused by pydantic)."""

from __future__ import annotations

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
            raise ValueError(f"expected {expected}, got {word} (YAML reads true/false, yes/no and on/off as booleans)")
        if isinstance(value, str) and not strings:
            raise ValueError(
                f"expected {expected}, got {value!r}"
                + (" (a string: write it without quotes)" if _numeric(value) else "")
            )
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
