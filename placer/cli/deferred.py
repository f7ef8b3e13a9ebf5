"""What the ``placer`` process imports only when something uses it.

OR-Tools' ``cp_model`` imports pandas at its top for the ``*_series`` helpers (variables indexed by a
``pandas.Index``), which placer never calls; the import is a quarter of a small solve's whole process
(0.26 of ~1 s; bench/NOTES.md). The command's process (``placer.cli.run``, never a library caller's) puts a
stand-in in ``sys.modules`` first: ``cp_model`` reads only ``pandas.Index`` and ``pandas.Series`` while it
loads, and the stand-in gives it two classes nothing in placer makes. Any other name, or a submodule, loads
the real pandas on the spot and hands that over, so code that does use pandas still gets it (and a later
``import pandas`` gets the real module)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types


def defer_pandas() -> None:
    """Put the stand-in in place, unless pandas is loaded already or not installed."""
    if "pandas" in sys.modules:
        return
    spec = importlib.util.find_spec("pandas")  # where it lives; finding it imports nothing
    if spec is None:
        return
    stand_in = _DeferredPandas("pandas")
    stand_in.__spec__ = spec
    sys.modules["pandas"] = stand_in


class _DeferredPandas(types.ModuleType):
    class Index:
        """What ``cp_model`` names in its type aliases; placer never builds an indexed variable set."""

    class Series:
        """As ``Index``."""

    def __getattr__(self, name: str):
        if sys.modules.get("pandas") is self:
            del sys.modules["pandas"]
        return getattr(importlib.import_module("pandas"), name)
