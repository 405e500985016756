"""Bit-identity of the scenario builder across speed work: digests of the plan, the placement, the
traffic and the path-model estimates of a fixed set of scenarios (2 / 8 / 64 GPUs; All-Gather,
All-Reduce, All-to-All; 100 kB - 10 MB; UA, UA+NAR, NUMA+NAR, NAP, NAP+NAR; threadblocks "best" and
fixed; direct and ring; MSCCL plans from ``shared/data/msccl``).

    python benchmarks/check_scenario_digests.py --record   # write benchmarks/data/scenario_digests.json
    python benchmarks/check_scenario_digests.py            # compare with it; exit 1 on any difference

The recorded file was written by the code before the speed changes (see its ``commit``); every
later change must reproduce every digest bit for bit (arrays hashed with dtype and shape, floats
exactly).  The scenario store is off (each case is built).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

MSCCL = Path("/work/shared/data/msccl")
DIGESTS = ROOT / "benchmarks" / "data" / "scenario_digests.json"

#: (name, gpus, collective or MSCCL file, size, policy, tbs, algorithm)
CASES = [
    ("ag2-100k-ua-best", 2, "allgather", 100_000, "UA", "best", "direct"),
    ("ag2-100k-nap-best", 2, "allgather", 100_000, "NAP", "best", "direct"),
    ("ag2-1M-napnar-best", 2, "allgather", 1_000_000, "NAP+NAR", "best", "direct"),
    ("ar2-1M-napnar-fixed", 2, "allreduce", 1_000_000, "NAP+NAR", None, "direct"),
    ("a2a2-10M-ua-fixed", 2, "alltoall", 10_000_000, "UA", 4, "direct"),
    ("ag8-1M-ua-best", 8, "allgather", 1_000_000, "UA", "best", "direct"),
    ("ag8-1M-uanar-best", 8, "allgather", 1_000_000, "UA+NAR", "best", "direct"),
    ("ag8-1M-numanar-best", 8, "allgather", 1_000_000, "NUMA+NAR", "best", "direct"),
    ("ag8-1M-nap-fixed", 8, "allgather", 1_000_000, "NAP", 28, "direct"),
    ("ag8-1M-napnar-best", 8, "allgather", 1_000_000, "NAP+NAR", "best", "direct"),
    ("ag8-10M-napnar-fixed", 8, "allgather", 10_000_000, "NAP+NAR", 112, "direct"),
    ("ar8-100k-napnar-best", 8, "allreduce", 100_000, "NAP+NAR", "best", "direct"),
    ("a2a8-1M-napnar-fixed", 8, "alltoall", 1_000_000, "NAP+NAR", None, "direct"),
    ("ag8-1M-ring-napnar", 8, "allgather", 1_000_000, "NAP+NAR", None, "ring"),
    ("ar8-10M-ring-ua", 8, "allreduce", 10_000_000, "UA", 7, "ring"),
    ("ag64-100k-ua-best", 64, "allgather", 100_000, "UA", "best", "direct"),
    ("ag64-100k-napnar-fixed", 64, "allgather", 100_000, "NAP+NAR", None, "direct"),
    ("ag64-1M-numanar-fixed", 64, "allgather", 1_000_000, "NUMA+NAR", 252, "direct"),
    ("msccl-ag8-1M-napnar", 8, MSCCL / "ndv4_ag-1m.xml", 1 << 20, "NAP+NAR", None, "direct"),
    ("msccl-a2a8-32k-ua", 8, MSCCL / "ndv4_a2a2ll.xml", 32768, "UA", None, "direct"),
    ("msccl-ag4-512k-nap", 4, MSCCL / "ncv4_ag_hier_4_LL.xml", 1 << 19, "NAP", None, "direct"),
]


def _h(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, np.ndarray) or hasattr(p, "shape"):
            a = np.ascontiguousarray(np.asarray(p))
            h.update(f"{a.dtype.str}{a.shape}".encode())
            h.update(a.tobytes())
        elif isinstance(p, float):
            h.update(p.hex().encode())
        else:
            h.update(repr(p).encode())
        h.update(b"|")
    return h.hexdigest()[:24]


def _floats(d) -> list:
    return None if d is None else [[str(k), float(v).hex()] for k, v in sorted(d.items(), key=lambda x: int(x[0]))]


def digest(sc) -> dict:
    from nuna_jax.plans import _STEP_FIELDS
    from nuna_jax.scenario import _estimate
    from nuna_jax.traffic import FIELDS
    p, pl, t = sc.plan, sc.placement, sc.traffic
    plan = _h(p.collective, p.algorithm, p.n_gpus, p.size_bytes, p.buffer_bytes, p.pad_bytes, p.tb_gpu, p.tb_local,
              *(getattr(p, k) for k in _STEP_FIELDS))
    place = _h(pl.policy, pl.tb_cu, pl.tb_domain, pl.page_stack, pl.domains.granularity, pl.placement_granularity,
               pl.cu_demand, pl.stack_capacity_pages, pl.group_domain,
               None if pl.page_domain is None else pl.page_domain, pl.stack_windows,
               None if pl.groups is None else [np.asarray(g) for g in pl.groups])
    traffic = _h(*(getattr(t, k) for k in FIELDS))
    return {"plan": plan, "placement": place, "traffic": traffic, "n_flows": t.n_flows,
            "granularity": int(pl.routing_granularity), "granularity_search": _floats(pl.granularity_search),
            "tbs_search": _floats(sc.tbs_search), "tbs_chosen_by": sc.tbs_chosen_by,
            "estimate_ns": float(_estimate(sc.system, t)).hex()}


def build(case):
    from nuna_jax.presets import preset
    from nuna_jax.scenario import make_scenario
    name, n, what, size, policy, tbs, alg = case
    s = preset("table2", n_gpus=n)
    if isinstance(what, Path):
        return make_scenario(s, plan_file=str(what), size_bytes=size, policy=policy)
    return make_scenario(s, collective=what, size_bytes=size, policy=policy, tbs_per_gpu=tbs, algorithm=alg)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--record", action="store_true", help="write the digests instead of comparing")
    ap.add_argument("--only", default=None, help="comma-separated case names (default: all)")
    ap.add_argument("--file", default=str(DIGESTS))
    a = ap.parse_args(argv)
    from nuna_jax import cache
    cache.use_scenarios(False)
    only = None if a.only is None else set(a.only.split(","))
    ref = None if a.record else json.loads(Path(a.file).read_text())["cases"]
    got, bad = {}, []
    for case in CASES:
        if only is not None and case[0] not in only:
            continue
        t0, c0 = time.perf_counter(), time.process_time()
        d = digest(build(case))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        got[case[0]] = d
        status = ""
        if ref is not None:
            diff = [k for k in d if ref[case[0]].get(k) != d[k]]
            status = "same" if not diff else "DIFFERENT: " + ", ".join(diff)
            if diff:
                bad.append(case[0])
        print(f"{case[0]:26s} {d['n_flows']:>9d} flows  g {d['granularity']:2d}  {wall:6.2f} s ({cpu:6.2f} CPU s)  "
              f"{status}", flush=True)
    if a.record:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        out = {"written": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "commit": commit, "cases": got}
        Path(a.file).parent.mkdir(parents=True, exist_ok=True)
        Path(a.file).write_text(json.dumps(out, indent=1) + "\n")
        print(f"recorded {len(got)} cases in {a.file}")
        return 0
    print(f"{len(got) - len(bad)} of {len(got)} cases bit-identical" + (f"; different: {bad}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
