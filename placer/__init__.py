"""placer: topology-aware gang placement of LLM serving topologies on GPU clusters.

The pipeline, one folder per stage (docs/DESIGN.md has the table)::

    model (load) -> topology (+ cost) -> solver (problem -> CP-SAT) -> check -> emit / explain

``pipeline`` strings the stages together; ``cli`` is one file per command. OR-Tools is imported only inside
the solver's functions so that ``placer --help`` stays fast.
"""

from placer.model import API_VERSION

__version__ = "0.1.0"
__all__ = ["API_VERSION", "__version__"]
