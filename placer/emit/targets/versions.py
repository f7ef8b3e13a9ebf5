"""Release numbers for ``--target-version``: their order, and the oldest release each target's output fits
(each target module's ``REQUIRES``), checked before anything is solved."""

from __future__ import annotations

import importlib
import re

from placer.model.errors import InputError


def require_version(version: str | None, product: str, oldest: str, why: str) -> None:
    """Refuse (bad input, exit 2) a --target-version older than ``oldest``, the first release placer's output
    fits (each target's ``REQUIRES``)."""
    if version is not None and version_key(version) < version_key(oldest):
        raise InputError(
            f"--target-version {version}: {product} before {oldest} {why}; placer supports {product} {oldest} and later"
        )


def version_key(release: str) -> tuple[int, ...]:
    """Release order by its numbers: v1.13.0 < 1.14; v0.1.0-alpha.9 < v0.1.0-alpha.10 (pre-releases only)."""
    numbers = tuple(int(n) for n in re.findall(r"\d+", release))
    if not numbers:
        raise InputError(f"--target-version {release!r}: expected a release such as 1.14 or v0.1.0-alpha.10")
    return numbers + (0,) * (4 - len(numbers))  # 1.12 == 1.12.0


def check_version(target: str, version: str | None) -> None:
    """``--target-version`` before any solving: a release number, and not older than the oldest release the
    target's output fits (its module's ``REQUIRES``; dynamo has no release to compare with)."""
    if version is None:
        return
    version_key(version)
    requires = getattr(importlib.import_module(f"placer.emit.targets.{target}"), "REQUIRES", None)
    if requires is not None:
        require_version(version, *requires)
