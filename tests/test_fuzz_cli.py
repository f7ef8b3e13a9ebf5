"""Property test over every input format through the real CLI entry point (a CI-sized sample of
bench/fuzz.py): a structure-aware mutation of a real file (spec, cluster, placement record, each importer
format) ends in exit 0, 1 or 2, prints nothing on stdout unless it exits 0, never shows a traceback or an
internal error, and answers within a generous bound (which only catches hangs)."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent


def _fuzz():
    spec = importlib.util.spec_from_file_location("bench_fuzz", ROOT / "bench" / "fuzz.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_fuzz"] = module
    spec.loader.exec_module(module)
    return module


fuzz = _fuzz()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory):
    workdir = tmp_path_factory.mktemp("fuzz")
    return workdir, fuzz.seeds(workdir)


FORMATS = ["spec", "cluster", "record", "import"]


@pytest.mark.parametrize("family", FORMATS)
@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(rng=st.randoms(use_true_random=False))
def test_mutated_input_keeps_the_exit_contract(family: str, rng: random.Random, corpus) -> None:
    workdir, seeds = corpus
    seed = rng.choice([s for s in seeds if s.name.startswith(family)])
    raw, what = fuzz.make_case(seed, rng)
    outcome = fuzz.run_case(seed, raw, workdir)
    assert outcome.problems() == [], (seed.name, what, outcome.stderr[-2000:])


def test_seeds_are_good_inputs(corpus) -> None:
    """Unmutated, every seed is accepted (exit 0): so a mutation is what any failure is about."""
    workdir, seeds = corpus
    for seed in seeds:
        outcome = fuzz.run_case(seed, seed.path.read_bytes(), workdir)
        assert outcome.code == 0, (seed.name, outcome.stderr[-2000:])
