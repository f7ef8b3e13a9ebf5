"""How fast this shared machine ran a benchmark, so tables measured on different days can be compared."""

from __future__ import annotations

import time


def machine_speed() -> float:
    """CPU seconds of a fixed loop of 10 M steps inside a Python function: lower is faster. Work budgets and
    outcomes do not depend on it; wall and CPU seconds do."""
    started, x = time.process_time(), 0
    for i in range(10_000_000):
        x += i
    return time.process_time() - started
