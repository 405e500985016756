"""Benchmark of the exact flit simulator: flit-hops per wall-second and wall time per scenario.

Self-contained (puts the repo root on sys.path).  Scenarios (Table 2 system,
All-Gather, direct algorithm):

  ag8_1MB_ua        8 GPUs, 1 MB, UA          (target: < 10 s, >= 1e7 flit-hops/s on 2 CPU cores)
  ag8_1MB_napnar    8 GPUs, 1 MB, NAP+NAR
  ag8_10MB_ua       8 GPUs, 10 MB, UA
  ag64_10MB_napnar  64 GPUs, 10 MB, NAP+NAR   (target: within minutes)
  ag64_10MB_ua      64 GPUs, 10 MB, UA        (only with --full)
  reference         2 GPUs, 100 kB, UA, reference (plain Python) engine, for comparison
  batch             the 7 policies of 8 GPUs 1 MB in one simulate_batch call (threads = cores)

For each: wall time to build the scenario, compile the program, run the
event loop (warm: numba compiled once beforehand), flit-hops and
flit-hops/s of the run.  The simulator's event loop runs on the host CPU
(numba, one core per scenario; simulate_batch uses several); it does not
use a GPU.  The script records which JAX devices exist so that a run on a
GPU host is labelled as such.  A time guard skips the remaining big
scenarios once 180 s have passed, to stay under 4 minutes.

Usage: python benchmarks/bench_sim.py [--out DIR] [--quick] [--full]
  -> DIR/sim_bench.json (default DIR: benchmarks/out)
"""
import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402

from nuna_jax import sim  # noqa: E402
from nuna_jax.placement import POLICIES  # noqa: E402
from nuna_jax.scenario import make_scenario  # noqa: E402
from nuna_jax.presets import preset  # noqa: E402

GUARD_S = 180.0


def one(name, n_gpus, size, policy, engine="fast"):
    s = preset("table2", n_gpus=n_gpus)
    t0 = time.perf_counter()
    sc = make_scenario(s, collective="allgather", size_bytes=size, policy=policy)
    t1 = time.perf_counter()
    if engine == "fast":
        prog = sim.compile_program(s, sc.traffic)
        t2 = time.perf_counter()
        r = sim.fast.run_fast(prog)
    else:
        t2 = time.perf_counter()
        r = sim.run_reference(s, sc.traffic)
    t3 = time.perf_counter()
    row = {"name": name, "gpus": n_gpus, "size_bytes": size, "policy": policy, "engine": r.engine,
           "flits": r.flits_delivered, "flit_hops": r.flit_hops, "completion_ns": r.completion_ns,
           "scenario_s": t1 - t0, "compile_s": t2 - t1, "run_s": t3 - t2, "total_s": t3 - t0,
           "flit_hops_per_s": r.flit_hops / (t3 - t2)}
    print(f"{name:18s} {r.flits_delivered:9d} flits {r.flit_hops:11d} hops  scenario {t1 - t0:6.2f} s  "
          f"compile {t2 - t1:6.2f} s  run {t3 - t2:7.2f} s  total {t3 - t0:7.2f} s  "
          f"{row['flit_hops_per_s']:.3g} flit-hops/s  [{r.engine}]", flush=True)
    return row


def jax_heap_event_us(n_heap=32768, steps=20000):
    """Cost of the core of a JAX event loop: one heap pop + push per lax iteration, us/event.

    Why there is no JAX engine (docs/simulator.md): this alone, jitted, is
    compared with the compiled loop's whole cost per event.
    """
    import jax.numpy as jnp
    import numpy as np

    def sift(heap, key):
        def cond(c):
            return 2 * c[0] + 1 < n_heap

        def body(c):
            i, h = c
            l = 2 * i + 1
            r = l + 1
            c_ = jnp.where((r < n_heap) & (h[jnp.minimum(r, n_heap - 1)] < h[l]), r, l)
            swap = h[c_] < h[i]
            hi, hc = h[i], h[c_]
            h = h.at[i].set(jnp.where(swap, hc, hi)).at[c_].set(jnp.where(swap, hi, hc))
            return jnp.where(swap, c_, n_heap), h
        return jax.lax.while_loop(cond, body, (jnp.int32(0), heap.at[0].set(key)))[1]

    @jax.jit
    def run(heap, k):
        def body(j, c):
            h, acc = c
            top = h[0]
            return sift(h, top + 8333 + (j * 7919) % 1000), acc + top
        return jax.lax.fori_loop(0, k, body, (heap, jnp.int32(0)))

    h = jnp.asarray(np.sort(np.random.default_rng(0).integers(0, 10**6, n_heap)).astype(np.int32))
    run(h, 10)[1].block_until_ready()
    t = time.perf_counter()
    run(h, steps)[1].block_until_ready()
    return (time.perf_counter() - t) / steps * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out"))
    ap.add_argument("--quick", action="store_true", help="skip the 64-GPU scenarios")
    ap.add_argument("--full", action="store_true", help="also 64 GPUs, 10 MB under UA")
    a = ap.parse_args()
    start = time.perf_counter()
    devs = [f"{d.platform}:{d.device_kind}" for d in jax.devices()]
    info = {"host": platform.node(), "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "jax_devices": devs, "numba": sim.HAVE_NUMBA,
            "note": "the event loop runs on the host CPU (numba); the GPU is not used by the simulator"}
    print(json.dumps(info))
    # warm-up: compile (or load from cache) the numba kernel once
    t0 = time.perf_counter()
    one("warmup", 2, 20_000, "ua")
    info["warmup_s"] = time.perf_counter() - t0
    rows = []
    plan = [("ag8_1MB_ua", 8, 10**6, "ua"), ("ag8_1MB_napnar", 8, 10**6, "nap+nar"),
            ("ag8_10MB_ua", 8, 10**7, "ua")]
    if not sim.HAVE_NUMBA:   # the pure-Python fallback of the same loop: keep to the small cases
        print("numba not installed: running the fast engine's pure-Python fallback, small cases only")
        plan = plan[:2]
    elif not a.quick:
        plan.append(("ag64_10MB_napnar", 64, 10**7, "nap+nar"))
        if a.full:
            plan.append(("ag64_10MB_ua", 64, 10**7, "ua"))
    for p in plan:
        if time.perf_counter() - start > GUARD_S:
            print(f"skipping {p[0]}: time guard ({GUARD_S:.0f} s) reached")
            rows.append({"name": p[0], "skipped": "time guard"})
            continue
        rows.append(one(*p))
    rows.append(one("reference", 2, 100_000, "ua", engine="reference"))
    # a batch of candidate placements in one call
    s = preset("table2", n_gpus=8)
    ts = [make_scenario(s, collective="allgather", size_bytes=10**6, policy=pol).traffic for pol in POLICIES]
    t0 = time.perf_counter()
    res = sim.simulate_batch(s, ts)
    wall = time.perf_counter() - t0
    hops = sum(r.flit_hops for r in res)
    rows.append({"name": "batch_7_policies_ag8_1MB", "candidates": len(ts), "threads": min(len(ts), os.cpu_count()),
                 "total_s": wall, "flit_hops": hops, "flit_hops_per_s": hops / wall,
                 "completion_ns": {pol: r.completion_ns for pol, r in zip(POLICIES, res)}})
    print(f"batch of {len(ts)} placements (8 GPUs, 1 MB): {wall:.2f} s, {hops / wall:.3g} flit-hops/s overall")
    info["jax_heap_pop_push_us_per_event"] = jax_heap_event_us()
    print(f"JAX lax.while_loop heap pop+push alone: {info['jax_heap_pop_push_us_per_event']:.1f} us/event "
          f"(jax default device {jax.devices()[0].platform})")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    kind = "gpu" if any(d.startswith(("gpu", "cuda")) for d in devs) else "cpu"
    payload = {"info": info, "rows": rows, "wall_s": time.perf_counter() - start}
    (out / f"sim_bench_{kind}.json").write_text(json.dumps(payload, indent=1))
    print(f"wrote {out / f'sim_bench_{kind}.json'} ({payload['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
