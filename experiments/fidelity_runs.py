"""Shared runner of the fidelity experiments (docs/fidelity.md): one case = one
(modelling variant, collective, GPUs, size, policy, threadblocks), built by
``scenario.make_scenario``, estimated by ``models.contention.evaluate`` and
simulated flit by flit by ``nuna_jax.sim.simulate`` (the judge).

A *variant* names one modelling choice flipped away from its default
(docs/policies.md, "Modelling choices"); ``previous`` is every choice as on
main before the modelling choices of docs/policies.md were reviewed.  Cases run in worker processes (``--jobs``), JAX on the
CPU with a shared compilation cache.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# variant -> (System overrides, PolicyOptions fields, make_scenario keywords)
VARIANTS = {
    "default": ({}, {}, {}),
    "D1 cu_sharing=requests": ({}, {"cu_sharing": "requests"}, {}),
    "D2 link 1667 B/ns (per direction)": ({"link_bw_bytes_per_ns": 10e3 / 6}, {}, {}),
    "D2b one router per HBM stack": ({"hbm_routers_per_stack": 1}, {}, {}),
    "D3 slots unaligned": ({}, {}, {"slot_align_bytes": 1}),
    "D4 NAP granularity = default rule": ({}, {"nap_granularity": "default"}, {}),
    "D5 NAR domain by threadblock": ({}, {"nar_domain_by": "threadblock"}, {}),
    "R read responses hold no mesh links": ({"read_response_links": False}, {}, {}),
    "previous (main before issue 10)": ({"hbm_routers_per_stack": 1}, {"cu_sharing": "requests", "nap_granularity": "default",
                                             "nar_domain_by": "threadblock"}, {"slot_align_bytes": 1}),
}


def _init_worker():
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    try:
        jax.config.update("jax_compilation_cache_dir", "/tmp/nuna_jax_cache")
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    except Exception:  # pragma: no cover - older jax
        pass


def run_case(case: dict) -> dict:
    """case: variant, collective, n_gpus, size, policy, tbs (None: n-1), sim (bool), latency (bool)."""
    from nuna_jax import preset
    from nuna_jax.models.contention import evaluate
    from nuna_jax.placement import PolicyOptions
    from nuna_jax.scenario import make_scenario

    sysov, optov, kw = VARIANTS[case["variant"]]
    s = preset("table2", n_gpus=case["n_gpus"], **sysov)
    t0 = time.perf_counter()
    sc = make_scenario(s, collective=case.get("collective", "allgather"), size_bytes=int(case["size"]),
                       policy=case["policy"], tbs_per_gpu=case.get("tbs"), options=PolicyOptions(**optov),
                       nar_granularity=case.get("nar_granularity"), **kw)
    t1 = time.perf_counter()
    ev = evaluate(s, sc.traffic)
    d = sc.placement.describe()
    out = dict(case)
    out.update(estimate_ns=ev["time_ns"], lower_bound_ns=ev["lower_bound_ns"],
               bottleneck=ev["breakdown"].get("bottleneck"), n_flows=sc.traffic.n_flows,
               routing_granularity=d["routing_granularity"], placement_granularity=d["placement_granularity"],
               granularity_search_ns=d["nar_granularity_search_ns"], max_tbs_per_cu=d["max_tbs_per_cu"],
               build_s=t1 - t0)
    if case.get("sim", True):
        from nuna_jax import sim
        t2 = time.perf_counter()
        r = sim.simulate(s, sc.traffic)
        out.update(sim_ns=r.completion_ns, sim_s=time.perf_counter() - t2)
        if case.get("latency"):
            out["store_latency_ns"] = sim.latency_stats_ns(r.store_latency_ps)
    return out


def _safe(case: dict) -> dict:
    try:
        return run_case(case)
    except Exception as e:  # keep the sweep going; the error is reported in the row
        return dict(case, error=f"{type(e).__name__}: {e}")


def run_all(cases: list, jobs: int, log=print, jsonl: str | None = None) -> list:
    """Run cases in ``jobs`` processes (heaviest first is the caller's job); each
    finished row is appended to ``jsonl`` at once (a sweep cut short keeps what ran)."""
    import json
    fh = open(jsonl, "a") if jsonl else None

    def keep(r):
        res.append(r)
        log(_line(r) if "error" not in r else f"ERROR {r}")
        if fh:
            fh.write(json.dumps(r, default=float) + "\n")
            fh.flush()
    res: list = []
    if jobs <= 1:
        _init_worker()
        for c in cases:
            keep(_safe(c))
    else:
        import multiprocessing as mp
        ctx = mp.get_context("spawn")
        with ctx.Pool(jobs, initializer=_init_worker) as pool:
            for r in pool.imap_unordered(_safe, cases):
                keep(r)
    if fh:
        fh.close()
    return res


def _line(r: dict) -> str:
    sim = f"sim {r['sim_ns']:9.1f}" if "sim_ns" in r else "sim     -    "
    return (f"{r['variant'][:24]:24s} {r.get('collective', 'allgather')[:9]:9s} n={r['n_gpus']:2d} "
            f"{r['size']:>10.0f} B {r['policy']:8s} tbs={r.get('tbs')} g={r['routing_granularity']}/"
            f"{r['placement_granularity']} est {r['estimate_ns']:9.1f} {sim} ({r['build_s']:.1f}+"
            f"{r.get('sim_s', 0):.1f} s)")


def speedups(rows: list, key: str = "sim_ns") -> dict:
    """{(variant, collective, n_gpus, size, tbs): {policy: UA time / policy time}}."""
    base = {}
    for r in rows:
        if r["policy"] == "UA" and key in r:
            base[(r["variant"], r.get("collective", "allgather"), r["n_gpus"], r["size"], r.get("tbs"))] = r[key]
    out = {}
    for r in rows:
        k = (r["variant"], r.get("collective", "allgather"), r["n_gpus"], r["size"], r.get("tbs"))
        if k in base and key in r:
            out.setdefault(k, {})[r["policy"]] = base[k] / r[key]
    return out
