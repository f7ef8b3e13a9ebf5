"""What the ``placer`` process imports only when something uses it.

OR-Tools' ``cp_model`` imports pandas at its top for the ``*_series`` helpers (variables indexed by a
``pandas.Index``), which placer never calls; the import is about a fifth of a small solve's whole process
(bench/NOTES.md, sixth session of 2026-11-28). The command's process (``placer.cli.run``, never a library
caller's) puts a stand-in in ``sys.modules`` first. While ``cp_model`` loads, it reads only
``pandas.Index`` and ``pandas.Series`` (for type aliases), and the stand-in gives it two empty classes;
any other read, or those two names read by anyone at any other time (``cp_model``'s own helpers when
called), loads the real pandas on the spot and hands its attribute over, as does a submodule import. The
real module then replaces the stand-in in ``sys.modules``."""

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
    @property
    def Index(self):  # noqa: N802 (pandas' name)
        return _Placeholder if _cp_model_loading() else self.__getattr__("Index")

    @property
    def Series(self):  # noqa: N802
        return _Placeholder if _cp_model_loading() else self.__getattr__("Series")

    def __getattr__(self, name: str):
        if sys.modules.get("pandas") is self:
            del sys.modules["pandas"]
        return getattr(importlib.import_module("pandas"), name)


class _Placeholder:
    """What ``cp_model``'s type aliases hold for pandas.Index / pandas.Series; nothing else sees it."""


def _cp_model_loading() -> bool:
    """Whether ``cp_model``'s module body is running: the import system marks a module's spec as
    initialising until its body has run (Python 3.11, as placer requires)."""
    module = sys.modules.get("ortools.sat.python.cp_model")
    return module is not None and bool(getattr(module.__spec__, "_initializing", False))
