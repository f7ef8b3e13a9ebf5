"""The independent checker: re-verifies every hard constraint and recomputes the cost from the inputs alone.

It imports nothing from ``placer.solver`` or OR-Tools (tests/test_layout.py keeps it so), so a solver bug
cannot hide itself.
"""
