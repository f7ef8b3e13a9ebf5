"""Numbers as a hand-written YAML file gives them.

Pydantic's lax mode reads YAML's ``true`` / ``yes`` as 1 in an integer or float field, so
``tensorParallel: true`` used to place TP1 groups and exit 0. These types refuse a boolean where a number
is expected and keep every other coercion (``8.0`` is still 8; ``8.5`` is still refused by pydantic)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator


def _yaml_word(value: bool) -> str:
    return f"{'true' if value else 'false'} (YAML reads true/false, yes/no and on/off as booleans)"


def _no_bool_int(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got {_yaml_word(value)}")
    return value


def _no_bool_number(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {_yaml_word(value)}")
    return value


Int = Annotated[int, BeforeValidator(_no_bool_int)]
"""An integer field that refuses ``true`` / ``false``."""
Float = Annotated[float, BeforeValidator(_no_bool_number)]
"""A number field that refuses ``true`` / ``false``."""
# Optional ones are annotated whole: a ``Field(ge=...)`` on ``Int | None`` would not reach the integer
# inside the union (pydantic leaves it unapplied and writes ``ge`` into the JSON Schema verbatim).
IntOrNone = Annotated[int | None, BeforeValidator(_no_bool_int)]
FloatOrNone = Annotated[float | None, BeforeValidator(_no_bool_number)]
