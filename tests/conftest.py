"""Shared by every test module."""

from __future__ import annotations

import pytest

import placer.cli


@pytest.fixture(autouse=True, scope="session")
def _no_process_exit_in_the_test_process():
    """``placer.cli.run`` (the ``placer`` script) ends its process at once (os._exit, through
    ``placer.cli._end_process``). Called in pytest's own process by mistake, it would end the run with exit 0
    and no report, and CI would pass. Here it raises instead, and the test that called it fails."""
    real = placer.cli._end_process

    def refuse(code: int) -> None:
        raise AssertionError(f"placer.cli.run ended the process with {code} inside the test process")

    placer.cli._end_process = refuse
    yield
    placer.cli._end_process = real
