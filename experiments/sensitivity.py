"""Sensitivity of the seven configurations to each modelling choice.

For every variant of :data:`fidelity_runs.VARIANTS` (the defaults, each choice
flipped alone, and all choices as before their review): the seven configurations,
8 GPUs, All-Gather 100 kB / 1 MB / 10 MB, 7 threadblocks per GPU (the paper's
low-parallelism count, 6.5), simulated completion (the judge) and estimate;
plus the headline at 64 MB (UA, NAP, NAP+NAR) and Figure 10's store latencies
(1 MB, UA and NAP+NAR) for ``default`` and ``previous``.

    python experiments/sensitivity.py [--jobs 16] [--quick] [--out DIR]
      -> DIR/sensitivity.json (default experiments/out/)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fidelity_runs import ROOT, VARIANTS, run_all, speedups  # noqa: E402

POLICIES = ("UA", "UA+NAR", "NUMA", "NUMA+NAR", "NAP*", "NAP", "NAP+NAR")


def cases(quick: bool) -> list:
    sizes = (10**5,) if quick else (10**5, 10**6, 10**7)
    out = []
    for v in VARIANTS:
        for n in sizes:
            for p in POLICIES:
                lat = n == 10**6 and p in ("UA", "NAP+NAR") and v in ("default", "previous (main before issue 10)")
                out.append(dict(variant=v, n_gpus=8, size=n, policy=p, tbs=None, latency=lat))
        if v in ("default", "previous (main before issue 10)") and not quick:
            for p in ("UA", "NAP", "NAP+NAR"):
                out.append(dict(variant=v, n_gpus=8, size=64 * 10**6, policy=p, tbs=None))
    # heaviest first: big sizes, NAP (granularity search)
    out.sort(key=lambda c: (-c["size"], c["policy"].startswith("NAP") is False))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "experiments" / "out"))
    a = ap.parse_args(argv)
    t0 = time.time()
    rows = run_all(cases(a.quick), a.jobs, log=lambda s: print(s, flush=True))
    sp = speedups(rows)
    out = {"what": __doc__.splitlines()[0], "policies": POLICIES, "variants": list(VARIANTS),
           "rows": rows, "speedup_sim": [{"variant": k[0], "size": k[3], **v} for k, v in sp.items()],
           "speedup_estimate": [{"variant": k[0], "size": k[3], **v}
                                for k, v in speedups(rows, "estimate_ns").items()],
           "wall_s": time.time() - t0}
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "sensitivity.json").write_text(json.dumps(out, indent=1, default=float))
    print(f"wrote {a.out}/sensitivity.json in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
