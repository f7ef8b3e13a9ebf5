"""Router placeholders (``{prefill_urls}`` ...) in ``router.command`` / ``router.args``: found at load time
(placer.model.spec refuses unknown ones) and expanded per replica when the router is written
(placer.emit.targets.router)."""

from __future__ import annotations

import re

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def placeholders(text: str) -> list[str]:
    return _PLACEHOLDER.findall(text)


def expand(args: list[str], values: dict[str, list[str]]) -> list[str]:
    """Expand ``{name}`` placeholders: an arg that is exactly one list placeholder becomes one arg per item
    (none when the list is empty); inside a longer arg the items are joined with commas."""
    out: list[str] = []
    for arg in args:
        whole = _PLACEHOLDER.fullmatch(arg)
        if whole:
            out += values[whole.group(1)]
            continue
        out.append(_PLACEHOLDER.sub(lambda m: ",".join(values[m.group(1)]), arg))
    return out
