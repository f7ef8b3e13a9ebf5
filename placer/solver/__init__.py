"""Compile and solve: spec + topology → ``Problem`` (``problem``) → CP-SAT (``cpsat/``) → ``Placement``.

``solve.solve`` is the entry point for one spec; ``fleet`` places a batch, ``keep`` pins what runs and
``plan`` finds the fewest moves. OR-Tools is imported only inside functions so ``placer --help`` stays fast.
"""
