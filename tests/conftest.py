"""Shared by every test module."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def _no_process_exit_in_the_test_process():
    """``placer.cli.run`` (the ``placer`` script) ends its process with os._exit. Called in pytest's own
    process by mistake, it would end the run at once with exit 0 and no report, and CI would pass. Here it
    raises instead, and the test that called it fails. (Subprocesses are other interpreters: untouched.)"""
    real = os._exit

    def refuse(code: int) -> None:
        raise AssertionError(f"os._exit({code}) called in the test process (placer.cli.run in-process?)")

    os._exit = refuse  # type: ignore[assignment]
    yield
    os._exit = real
