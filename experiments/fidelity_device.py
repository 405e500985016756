"""Every simulator-judged case of the fidelity study (docs/fidelity.md) in one worker
pool (run on a many-core host), each row appended to a JSON-lines file as it
finishes.  Studies (``--only`` picks some):

* ``sensitivity``: experiments/sensitivity.py's cases (item 2, headline, Figure 10);
* ``validation``: the enlarged validation study (item 5): seven configurations,
  All-Gather / All-Reduce / All-to-All, 100 kB .. 64 MB at 2 and 8 GPUs,
  100 kB and 1 MB at 64 GPUs (All-Gather), and 1 MB All-Gather at 8 GPUs with
  1,008 threadblocks per GPU;
* ``headline``: UA, UA+NAR, NUMA+NAR, NAP, NAP+NAR, 8 GPUs, All-Gather 100 kB .. 64 MB, 7 / 28 / 112
  threadblocks per GPU (the best is kept, NUNA 5.1), defaults and ``previous``;
* ``fig13``: NAR granularity 1 .. 12 forced, UA+NAR and NAP+NAR, 1 MB All-Gather,
  8 GPUs, 7 and 1,008 threadblocks per GPU (plus UA / NAP baselines);
* ``fig9``: NUNA Figure 9 with the simulator as the judge: UA, UA+NAR, NUMA+NAR,
  NAP+NAR for All-Gather, All-Reduce and All-to-All, 100 kB .. 10 MB at 2 and 8 GPUs
  and 100 kB, 1 MB at 64 GPUs, each at 1, 4, 16 x (n - 1) threadblocks per GPU
  (1 and 4 x at 64 GPUs); the best count per configuration is kept when tabulated.

    python experiments/fidelity_device.py --jobs 16 --out DIR [--only sensitivity,validation]
      -> DIR/<study>.jsonl
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fidelity_runs import ROOT, run_all  # noqa: E402
import sensitivity  # noqa: E402

POLICIES = sensitivity.POLICIES


def validation_cases() -> list:
    out = []
    for coll in ("allgather", "allreduce", "alltoall"):
        for n in (2, 8):
            for size in (10**5, 10**6, 10**7, 64 * 10**6):
                for p in POLICIES:
                    out.append(dict(variant="default", collective=coll, n_gpus=n, size=size, policy=p, tbs=None))
    for size in (10**5, 10**6):
        for p in POLICIES:
            out.append(dict(variant="default", collective="allgather", n_gpus=64, size=size, policy=p, tbs=None))
    for p in POLICIES:
        out.append(dict(variant="default", collective="allgather", n_gpus=8, size=10**6, policy=p, tbs=1008))
    return out


def fig13_cases() -> list:
    out = []
    for tbs in (7, 1008):
        for p in ("UA", "NAP"):
            out.append(dict(variant="default", n_gpus=8, size=10**6, policy=p, tbs=tbs, nar_granularity=1))
        for p in ("UA+NAR", "NAP+NAR"):
            for g in range(1, 13):
                out.append(dict(variant="default", n_gpus=8, size=10**6, policy=p, tbs=tbs, nar_granularity=g))
    return out


def headline_cases() -> list:
    """NAP+NAR and the NAR configurations over UA at the best threadblock count (NUNA 5.1: "the
    best-performing number of threadblocks"): 7, 28, 112 per GPU, with the modelling choices before and after their review."""
    out = []
    for v in ("default", "previous (main before issue 10)"):
        for size in (10**5, 10**6, 10**7, 64 * 10**6):
            for p in ("UA", "UA+NAR", "NUMA+NAR", "NAP", "NAP+NAR"):
                for tbs in (7, 28, 112):
                    out.append(dict(variant=v, n_gpus=8, size=size, policy=p, tbs=tbs))
    return out


def fig9_cases() -> list:
    out = []
    for coll in ("allgather", "allreduce", "alltoall"):
        for n, sizes, mults in ((2, (10**5, 10**6, 10**7), (1, 4, 16)), (8, (10**5, 10**6, 10**7), (1, 4, 16)),
                                (64, (10**5, 10**6), (1, 4))):
            for size in sizes:
                for p in ("UA", "UA+NAR", "NUMA+NAR", "NAP+NAR"):
                    for m in mults:
                        out.append(dict(variant="default", collective=coll, n_gpus=n, size=size, policy=p,
                                        tbs=m * (n - 1)))
    return out


def _weight(c: dict) -> float:
    w = c["size"] * c["n_gpus"] * (2 if c.get("collective") == "allreduce" else 1)
    if c["n_gpus"] >= 64:
        w *= 50
    if c["policy"].startswith("NAP") and c.get("nar_granularity") is None:
        w *= 3
    return -w


def main(argv=None) -> int:
    from nuna_jax import cache
    cache.use_scenarios(True)      # scenarios built once are read back on the next run (nuna_jax.cache)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--out", default=str(ROOT / "experiments" / "out"))
    ap.add_argument("--only", default="sensitivity,validation,fig13")
    ap.add_argument("--light-first", action="store_true", help="smallest cases first (few cores)")
    ap.add_argument("--max-size", type=float, default=None, help="skip cases above this size (bytes)")
    ap.add_argument("--max-gpus", type=int, default=None, help="skip cases above this GPU count")
    ap.add_argument("--max-tbs", type=int, default=None, help="skip cases above this threadblock count")
    ap.add_argument("--policies", default=None, help="only these configurations (comma-separated)")
    ap.add_argument("--exclude-variants", default="", help="skip variants whose name contains one of these (comma-separated)")
    a = ap.parse_args(argv)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    studies = {"sensitivity": sensitivity.cases(False), "validation": validation_cases(), "fig13": fig13_cases(),
               "headline": headline_cases(), "fig9": fig9_cases()}
    cases = []
    for name in a.only.split(","):
        for c in studies[name]:
            if a.max_size and c["size"] > a.max_size or a.max_gpus and c["n_gpus"] > a.max_gpus:
                continue
            if a.max_tbs and (c.get("tbs") or 0) > a.max_tbs:
                continue
            if a.policies and c["policy"] not in a.policies.split(","):
                continue
            if any(x and x in c["variant"] for x in a.exclude_variants.split(",")):
                continue
            cases.append(dict(c, study=name))
    cases.sort(key=_weight, reverse=a.light_first)
    t0 = time.time()
    print(f"{len(cases)} cases on {a.jobs} processes", flush=True)
    import os
    os.environ["JAX_PLATFORMS"] = "cpu"
    # one file per study: the pool writes every row to all.jsonl; split at the end
    rows = run_all(cases, a.jobs, log=lambda s: print(f"[{time.time() - t0:6.0f} s] {s}", flush=True),
                   jsonl=str(Path(a.out) / "all.jsonl"))
    import json
    for name in a.only.split(","):
        with open(Path(a.out) / f"{name}.jsonl", "w") as fh:   # this run replaces the study
            for r in rows:
                if r.get("study") == name:
                    fh.write(json.dumps(r, default=float) + "\n")
    import platform
    import subprocess
    git = lambda *a: subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()  # noqa: E731
    prov = {"studies": a.only.split(","), "host": f"{platform.node()} ({os.cpu_count()} CPUs)", "jobs": a.jobs,
            "wall_s": time.time() - t0, "date": time.strftime("%Y-%m-%d"), "commit": git("rev-parse", "--short", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}
    (Path(a.out) / "provenance.json").write_text(json.dumps(prov, indent=1) + "\n")
    print(f"done in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
