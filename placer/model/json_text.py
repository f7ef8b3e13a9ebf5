"""Reading a cluster file written as JSON with the json module, where that gives exactly the data the YAML
reading would (placer.model.load.load_cluster): a 100k-GPU file in a tenth of a second instead of seconds.

JSON is YAML, but not every JSON text reads the same as YAML: YAML refuses characters JSON takes (DEL, C1
controls, U+FFFE, surrogate escapes), folds others (a raw NEL or line separator inside a string is a line
break to YAML), limits an implicit key to 1,024 characters and to one line, and placer refuses integers of
more than 4,300 characters. A text with any of these is left to the YAML reading, which then says what is
wrong with it, with its line; every other JSON object gives the same data both ways
(tests/test_cluster_json.py)."""

from __future__ import annotations

import json
import re
from typing import Any

_JSON_START = re.compile(r"\s*\{")
# Raw characters outside YAML's printable set, and NEL / line and paragraph separators (breaks to YAML)
_NOT_YAML_TEXT = re.compile("[^\t\n\r\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_KEY_BROKEN_FROM_COLON = re.compile(r'"\s*[\r\n]\s*:')  # a key, a line break, then its colon
MAX_INT_CHARS = 4300  # placer.model.yaml_text.MAX_INT_DIGITS (the sign counts there; in Python's own limit it does not)
MAX_KEY = 1024  # libyaml's limit for an implicit key


def json_object(text: str) -> dict | None:
    """The object ``text`` is, if it is one JSON object the YAML reading would give the same data for; None
    otherwise, and the YAML reading decides."""
    if not _JSON_START.match(text) or _yaml_reads_it_otherwise(text):
        return None
    try:
        data = json.loads(text, object_pairs_hook=_unique_short_keys, parse_constant=_not_json, parse_int=_int)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _yaml_reads_it_otherwise(text: str) -> bool:
    """Whether the text holds a character or a key YAML refuses or reads differently (module docstring): a
    few scans in C, milliseconds for a 100k-GPU file. In ASCII text only DEL can be one of those characters
    (JSON refuses the other controls itself)."""
    odd = "\x7f" in text if text.isascii() else _NOT_YAML_TEXT.search(text) is not None
    return odd or _SURROGATE_ESCAPE.search(text) is not None or _KEY_BROKEN_FROM_COLON.search(text) is not None


def _int(token: str) -> int:
    if len(token) > MAX_INT_CHARS:
        raise ValueError("an integer longer than placer reads")
    return int(token)


def _unique_short_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs) or any(len(key) > MAX_KEY for key in found):
        raise ValueError("a duplicate or an over-long key")
    return found


def _not_json(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")
