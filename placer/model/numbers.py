"""Numbers as a hand-written YAML file gives them.

Pydantic's lax mode reads YAML's ``true`` / ``yes`` as 1 in an integer or float field, so
``tensorParallel: true`` used to place TP1 groups and exit 0. These types refuse a boolean where a number
is expected and keep every other coercion (``8.0`` is still 8; ``8.5`` is still refused by pydantic)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator


def _refusing_bools(expected: str) -> BeforeValidator:
    """A validator that passes every value on but a boolean, which it refuses as not ``expected``."""

    def check(value: Any) -> Any:
        if isinstance(value, bool):
            word = "true" if value else "false"
            raise ValueError(f"expected {expected}, got {word} (YAML reads true/false, yes/no and on/off as booleans)")
        return value

    return BeforeValidator(check)


_INT, _NUMBER = _refusing_bools("an integer"), _refusing_bools("a number")
Int = Annotated[int, _INT]
"""An integer field that refuses ``true`` / ``false``."""
Float = Annotated[float, _NUMBER]
"""A number field that refuses ``true`` / ``false``."""
# Optional ones are annotated whole: a ``Field(ge=...)`` on ``Int | None`` would not reach the integer
# inside the union (pydantic leaves it unapplied and writes ``ge`` into the JSON Schema verbatim).
IntOrNone = Annotated[int | None, _INT]
FloatOrNone = Annotated[float | None, _NUMBER]
