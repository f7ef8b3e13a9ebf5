"""placer: topology-aware gang placement of LLM serving topologies on GPU clusters.

The pipeline, one module per stage::

    load -> topology -> cost -> problem -> cpsat/ (via solve) -> verify -> emit / explain

Import OR-Tools only inside :mod:`placer.solver.solve` so that ``placer --help`` stays fast.
"""

__version__ = "0.1.0"
API_VERSION = "placer.dev/v1alpha1"
