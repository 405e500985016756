"""Why a flit-hop costs more at 64 GPUs than at 8 (the simulator's scaling): the event loop's CPU ns per
flit-hop on cases that separate the GPU count from the number of flits.

Cases (Table 2 system, All-Gather, direct algorithm, UA unless named):

  ag8_10MB     8 GPUs, 10 MB:   273 k flits,  ~39 k in flight at once (56 issuers x window 700)
  ag8_100MB    8 GPUs, 100 MB:  2.7 M flits,  the same ~39 k in flight, the same flows and tables
  ag64_1MB     64 GPUs, 1 MB:   250 k flits,  the 64-GPU tables (resources, stages) at 8 GPUs' flit count
  ag64_10MB    64 GPUs, 10 MB:  2.46 M flits, all in flight at once
  ag64_10MB_napnar  the bench's 64-GPU row

Each case: flits, flit-hops, events (counted in chunks of 50,000), the loop's best-of-``--reps``
CPU seconds (``SimResult.loop_cpu_s``), ns per hop and per event, and the ratio to ag8_10MB's ns
per hop; cases run interleaved (every case once per repetition) so that load changes hit all alike.
The load average is recorded with every repetition.

``--baseline REV``: also run the fast engine of git revision REV (its ``sim/kernel.py`` and
``sim/fast.py``, written for the run beside the package's as ``sim/_baseline_*.py`` and removed
after), interleaved with the current one on the same programs: both see the same load; every
case's per-flit issue, delivery and store times, busy times and hop count must be identical
(``identical_to_baseline``), and each row gets the baseline's CPU seconds and ns per hop too.
Writes ``benchmarks/out/profile_sim_scale_<host>_<date>[_<tag>].json``.

    python benchmarks/profile_sim_scale.py [--reps 3] [--cases ag8_10MB,ag64_1MB,...] [--baseline REV] [--tag T]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CASES = {"ag8_10MB": (8, 10**7, "ua"), "ag8_100MB": (8, 10**8, "ua"), "ag64_1MB": (64, 10**6, "ua"),
         "ag64_10MB": (64, 10**7, "ua"), "ag64_10MB_napnar": (64, 10**7, "nap+nar")}
CHUNK = 50_000
SIM = ROOT / "nuna_jax" / "sim"


def baseline_engine(rev: str):
    """The fast engine of git revision ``rev`` as module ``nuna_jax.sim._baseline_fast`` (its kernel:
    ``_baseline_kernel``), and a function that removes both files."""
    import importlib
    src = {n: subprocess.check_output(["git", "-C", str(ROOT), "show", f"{rev}:nuna_jax/sim/{n}.py"], text=True)
           for n in ("kernel", "fast")}
    fast_src = src["fast"].replace("from . import kernel as event_loop", "from . import _baseline_kernel as event_loop")
    fast_src = fast_src.replace("from .kernel import", "from ._baseline_kernel import")
    paths = [SIM / "_baseline_kernel.py", SIM / "_baseline_fast.py"]
    paths[0].write_text(src["kernel"])
    paths[1].write_text(fast_src)

    def remove():
        for q in paths:
            q.unlink(missing_ok=True)
        for q in (SIM / "__pycache__").glob("_baseline_*"):
            q.unlink(missing_ok=True)
    try:
        return importlib.import_module("nuna_jax.sim._baseline_fast"), remove
    except Exception:
        remove()
        raise


def same_result(a, b) -> bool:
    """Every simulated time and count of two runs equal."""
    import numpy as np
    return all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ("issue_ps", "deliver_ps", "store_ps", "busy_ps")) \
        and (a.flit_hops, a.completion_ps, a.flits_delivered) == (b.flit_hops, b.completion_ps, b.flits_delivered)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out"))
    ap.add_argument("--baseline", default=None, help="git revision whose fast engine runs beside the current one")
    ap.add_argument("--tag", default="", help="suffix of the JSON file name")
    a = ap.parse_args(argv)
    remove = None
    try:
        base_fast = None
        if a.baseline:
            base_fast, remove = baseline_engine(a.baseline)
        return _run(a, base_fast)
    finally:
        if remove:
            remove()


def _run(a, base_fast) -> int:
    from nuna_jax import sim
    from nuna_jax.presets import preset
    from nuna_jax.scenario import make_scenario
    from nuna_jax.sim import fast
    names = a.cases.split(",")
    info = {"benchmark": "profile_sim_scale", "host": platform.node(), "cpu_count": os.cpu_count(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "loadavg_start": os.getloadavg(), "baseline": a.baseline,
            "head": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                   text=True).stdout.strip()}
    progs = {}
    for n in names:
        g, size, pol = CASES[n]
        s = preset("table2", n_gpus=g)
        progs[n] = sim.compile_program(s, make_scenario(s, collective="allgather", size_bytes=size, policy=pol).traffic)
    rows = {n: {"name": n, "gpus": CASES[n][0], "size_bytes": CASES[n][1], "policy": CASES[n][2],
                "flits": int(progs[n].n_flits), "flows": int(progs[n].flow_seg.shape[0]),
                "resources": int(progs[n].n_resources), "cpu_s": [], "baseline_cpu_s": []} for n in names}
    calls = [0]
    orig = fast.event_loop.run_chunk

    def counted(*args):
        calls[0] += 1
        return orig(*args)
    for n in names:                                 # events: chunks of CHUNK (the last partly filled)
        calls[0] = 0
        fast.event_loop.run_chunk = counted
        try:
            r = fast.run_fast(progs[n], chunk_events=CHUNK)
        finally:
            fast.event_loop.run_chunk = orig
        rows[n]["events_approx"] = (calls[0] - 1) * CHUNK
        rows[n]["flit_hops"] = int(r.flit_hops)
        if base_fast is not None:
            rows[n]["identical_to_baseline"] = same_result(r, base_fast.run_fast(progs[n]))
    loads = []
    for k in range(a.reps):
        for n in names:
            rows[n]["cpu_s"].append(fast.run_fast(progs[n]).loop_cpu_s)
            if base_fast is not None:
                rows[n]["baseline_cpu_s"].append(base_fast.run_fast(progs[n]).loop_cpu_s)
        loads.append(os.getloadavg()[0])
        print(f"repetition {k + 1}/{a.reps} done, load {loads[-1]:.1f}", flush=True)
    base = None
    print(f"{'case':18s} {'flits':>9s} {'flows':>9s} {'flit-hops':>11s} {'events':>11s} {'cpu s':>7s} "
          f"{'ns/hop':>7s} {'ns/event':>8s} {'x ag8_10MB':>10s}")
    for n in names:
        r = rows[n]
        best = min(r["cpu_s"])
        r["ns_per_hop"] = 1e9 * best / r["flit_hops"]
        r["ns_per_event"] = 1e9 * best / max(r["events_approx"], 1)
        if n == "ag8_10MB":
            base = r["ns_per_hop"]
        r["per_hop_over_ag8_10MB"] = None if base is None else r["ns_per_hop"] / base
        print(f"{n:18s} {r['flits']:9d} {r['flows']:9d} {r['flit_hops']:11d} {r['events_approx']:11d} {best:7.3f} "
              f"{r['ns_per_hop']:7.1f} {r['ns_per_event']:8.1f} "
              f"{'' if r['per_hop_over_ag8_10MB'] is None else format(r['per_hop_over_ag8_10MB'], '.2f'):>10s}")
    if base_fast is not None:
        print(f"baseline {a.baseline}, the same programs, interleaved:")
        print(f"{'case':18s} {'cpu s':>7s} {'ns/hop':>7s} {'x ag8_10MB':>10s} {'now/base':>8s} identical")
        b8 = None
        for n in names:
            r = rows[n]
            bb = min(r["baseline_cpu_s"])
            r["baseline_ns_per_hop"] = 1e9 * bb / r["flit_hops"]
            if n == "ag8_10MB":
                b8 = r["baseline_ns_per_hop"]
            r["baseline_per_hop_over_ag8_10MB"] = None if b8 is None else r["baseline_ns_per_hop"] / b8
            print(f"{n:18s} {bb:7.3f} {r['baseline_ns_per_hop']:7.1f} "
                  f"{'' if b8 is None else format(r['baseline_per_hop_over_ag8_10MB'], '.2f'):>10s} "
                  f"{r['ns_per_hop'] / r['baseline_ns_per_hop']:8.2f} {r['identical_to_baseline']}")
    info["loadavg_per_rep"] = loads
    Path(a.out).mkdir(parents=True, exist_ok=True)
    p = Path(a.out) / f"profile_sim_scale_{info['host'] or 'host'}_{info['date'][:10]}{'_' + a.tag if a.tag else ''}.json"
    if p.exists():                                  # never overwrite an earlier run's file
        p = p.with_name(p.stem + f"_{info['date'][11:13]}{info['date'][14:16]}.json")
    p.write_text(json.dumps({**info, "rows": list(rows.values())}, indent=1) + "\n")
    print(f"load average {min(loads):.1f}-{max(loads):.1f}; wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
