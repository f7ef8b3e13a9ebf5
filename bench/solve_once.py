"""One `placer solve` as the CLI runs it (load, build, solve, verify, emit manifests, write the record),
timed by part; prints one JSON line for bench/run.py. Usage: solve_once.py SPEC CLUSTER TIME_LIMIT RECORD"""

from __future__ import annotations

import gc
import json
import os
import resource
import sys
from pathlib import Path

from placer.cli.deferred import defer_pandas

defer_pandas()  # as placer's CLI process does (placer.cli.run), before anything imports ortools

from placer.emit.files import write_atomic  # noqa: E402
from placer.emit.manifests import placement_text  # noqa: E402
from placer.model.errors import InfeasibleError, PlacerError  # noqa: E402
from placer.pipeline import SolveOptions, run_solve  # noqa: E402


def main() -> None:
    gc.disable()  # as placer's CLI runs a command (placer.cli.run)
    spec, cluster, limit, record = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3]), Path(sys.argv[4])
    try:
        result = run_solve(spec, cluster, SolveOptions(time_limit_s=limit))
        result.yaml()
        write_atomic(record, placement_text(result.placement, record, result.spec))
        st = result.placement.stats
        out = {"status": st.status, "objective": st.objective, "bound": st.bound, "gap": st.gap}
        # "work": the time limit decided the answer (the same on any machine); "clock": the wall guard did
        out["limited_by"] = "clock" if any("wall-clock guard" in n for n in st.notes) else "work"
        out["seconds"] = st.seconds
        out["work"] = st.seconds.get("work")  # deterministic seconds the solve spent
    except InfeasibleError as exc:  # proven: no placement exists; else: none found within the limit
        out = {"status": "infeasible" if exc.proven else "timeout", "seconds": {}}
    except PlacerError as exc:
        out = {"status": type(exc).__name__, "seconds": {}}
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out["rss_mb"] = usage.ru_maxrss / 1024
    out["cpu_s"] = usage.ru_utime + usage.ru_stime  # beside wall time: comparable on a busy machine
    print(json.dumps(out), flush=True)
    os._exit(0)  # as placer's CLI ends (placer.cli.run): no interpreter teardown, which it no longer pays


if __name__ == "__main__":
    main()
