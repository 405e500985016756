"""Speed of the analytical model: closed-form evaluations per second on a
batch of >= 10^6 configurations; path-model evaluations per second and the jitted
``value_and_grad`` step for an 8-GPU 1 MB All-Gather with 1,008 threadblocks per GPU.

Self-contained (puts the repo root on sys.path); reports ``jax.devices()``; runs on
CPU or GPU as JAX finds them; writes ``analytical_<backend>.json`` to ``--out``
(default benchmarks/out).  About a minute on a 2-core CPU.

    python benchmarks/bench_analytical.py [--out DIR] [--reps N]
"""

from __future__ import annotations

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
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from nuna_jax import preset  # noqa: E402
from nuna_jax.models import collectives as C  # noqa: E402
from nuna_jax.models import contention as K  # noqa: E402
from nuna_jax.path import n_stages  # noqa: E402


def timeit(fn, reps: int, min_seconds: float = 1.0):
    """(best seconds per call, mean seconds per call) after one warm-up call; at least ``reps``
    calls and ``min_seconds`` of timing."""
    jax.block_until_ready(fn())
    times = []
    t_start = time.perf_counter()
    while len(times) < reps or time.perf_counter() - t_start < min_seconds:
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
        if len(times) >= 50 * reps:
            break
    return min(times), float(np.mean(times)), len(times)


def bench_closed_form(reps: int) -> list[dict]:
    s = preset()
    a0, b0, g0 = (float(v) for v in C.alpha_beta_gamma(s, "mean"))
    out = []
    # (1) a broadcast grid: 4 collectives x 4 algorithms x 64 GPU counts x 256 sizes x 16 alphas x 4 betas
    c = jnp.arange(4).reshape(4, 1, 1, 1, 1, 1)
    k = jnp.arange(4).reshape(1, 4, 1, 1, 1, 1)
    p = jnp.arange(1, 65, dtype=jnp.float32).reshape(1, 1, 64, 1, 1, 1)
    n = jnp.logspace(3, 10, 256, dtype=jnp.float32).reshape(1, 1, 1, 256, 1, 1)
    al = (a0 * jnp.linspace(0.5, 2.0, 16, dtype=jnp.float32)).reshape(1, 1, 1, 1, 16, 1)
    be = (b0 * jnp.array([0.5, 1.0, 2.0, 4.0], dtype=jnp.float32)).reshape(1, 1, 1, 1, 1, 4)
    f = jax.jit(lambda c, k, p, n, al, be: C.cost_ns(c, k, p, n, al, be, g0))
    size = 4 * 4 * 64 * 256 * 16 * 4
    best, mean, calls = timeit(lambda: f(c, k, p, n, al, be), reps)
    out.append({"case": "grid collectives x algorithms x p x sizes x alpha x beta", "batch": size,
                "best_s": best, "mean_s": mean, "calls": calls, "evals_per_s": size / best,
                "evals_per_s_mean": size / mean})
    # (2) a flat batch of random configurations (no structure to exploit)
    m = 1 << 22
    rng = np.random.default_rng(0)
    cols = [jnp.asarray(rng.integers(0, 4, m), jnp.int32), jnp.asarray(rng.integers(0, 4, m), jnp.int32),
            jnp.asarray(rng.integers(2, 65, m).astype(np.float32)),
            jnp.asarray(10 ** rng.uniform(3, 10, m).astype(np.float32)),
            jnp.asarray((a0 * rng.uniform(0.5, 2, m)).astype(np.float32)),
            jnp.asarray((b0 * rng.uniform(0.5, 4, m)).astype(np.float32))]
    best, mean, calls = timeit(lambda: f(*cols), reps)
    out.append({"case": "flat random batch", "batch": m, "best_s": best, "mean_s": mean, "calls": calls,
                "evals_per_s": m / best, "evals_per_s_mean": m / mean})
    # (3) hardware variants derived from the system: vmap alpha/beta/gamma over 64 switch latencies,
    # then the grid (alpha from the path model, so it includes the NUNA statistics)
    sws = jnp.linspace(100.0, 1000.0, 64)
    abg = jax.jit(jax.vmap(lambda sw: jnp.stack(C.alpha_beta_gamma(s.replace(switch_latency_ns=sw)))))
    best, mean, calls = timeit(lambda: abg(sws), max(3, reps // 2))
    out.append({"case": "alpha_beta_gamma from the system, vmapped over 64 hardware variants", "batch": 64,
                "best_s": best, "mean_s": mean, "calls": calls, "evals_per_s": 64 / best})
    return out


def bench_path_model(reps: int, policies=("UA", "NAP+NAR")) -> list[dict]:
    from nuna_jax.scenario import make_scenario
    s = preset("table2", n_gpus=8)
    out = []
    for pol in policies:
        sc = make_scenario(s, collective="allgather", size_bytes=10**6, policy=pol, tbs_per_gpu=1008)
        t = K.pad_flows(sc.traffic, K.bucket_rows(sc.traffic.n_flows))
        tj = jax.tree_util.tree_map(jnp.asarray, t)
        est = jax.jit(lambda s_, t_: K.estimate_ns(s_, t_, n_phases=1))
        lb = jax.jit(lambda s_, t_: K.lower_bound_ns(s_, t_, n_phases=1))
        allq = jax.jit(lambda s_, t_: K.analyze(s_, t_, n_phases=1))
        nb = 16  # a batch of flit vectors on one flow structure (as in a sweep or an optimizer step)
        scales = jnp.linspace(0.5, 2.0, nb)[:, None]
        est_b = jax.jit(jax.vmap(lambda fl, s_=s, t_=tj: K.estimate_ns(s_, t_.replace(flits=fl), n_phases=1)))

        def loss(flits, sw, t_=tj):
            s2 = s.replace(switch_latency_ns=sw)
            return K.smooth_estimate_ns(s2, t_.replace(flits=flits), 10.0, n_phases=1)

        vg = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
        fl = tj.flits
        t0 = time.perf_counter()
        jax.block_until_ready(vg(fl, 500.0))
        compile_vg = time.perf_counter() - t0
        row = {"case": f"8-GPU 1 MB All-Gather, 1,008 threadblocks/GPU, {pol}", "n_flows": sc.traffic.n_flows,
               "padded_rows": t.n_flows, "n_stages": n_stages(s),
               "estimate_ns": float(est(s, tj)), "lower_bound_ns": float(lb(s, tj))}
        best, mean, calls = timeit(lambda: est_b(scales * tj.flits[None, :]), reps)
        row["estimate_batched"] = {"batch": nb, "best_ms": best * 1e3, "mean_ms": mean * 1e3,
                                   "evals_per_s": nb / best, "calls": calls}
        for name, fn in (("estimate", lambda: est(s, tj)), ("lower_bound", lambda: lb(s, tj)),
                         ("analyze_all", lambda: allq(s, tj)), ("value_and_grad_smooth", lambda: vg(fl, 500.0))):
            best, mean, calls = timeit(fn, reps)
            row[f"{name}_best_ms"] = best * 1e3
            row[f"{name}_mean_ms"] = mean * 1e3
            row[f"{name}_per_s"] = 1.0 / best
            row[f"{name}_calls"] = calls
        row["value_and_grad_compile_s"] = compile_vg
        out.append(row)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out"))
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args(argv)
    devs = jax.devices()
    backend = jax.default_backend()
    info = {"devices": [str(d) for d in devs], "backend": backend, "jax": jax.__version__,
            "python": platform.python_version(), "cpu_count": os.cpu_count(), "machine": platform.machine(),
            "x64": bool(jax.config.jax_enable_x64)}
    print(f"JAX {jax.__version__} on {backend}: {devs}")
    t0 = time.time()
    cf = bench_closed_form(a.reps)
    for r in cf:
        print(f"closed form  {r['case'][:60]:60s} batch {r['batch']:>9d}  {r['best_s'] * 1e3:9.3f} ms  "
              f"{r['evals_per_s']:.3e} evals/s")
    pm = bench_path_model(a.reps)
    for r in pm:
        print(f"path model   {r['case']}: {r['n_flows']} flows (padded {r['padded_rows']}), estimate "
              f"{r['estimate_ns']:.1f} ns, bound {r['lower_bound_ns']:.1f} ns")
        print(f"   estimate {r['estimate_best_ms']:.2f} ms ({r['estimate_per_s']:.1f}/s), lower bound "
              f"{r['lower_bound_best_ms']:.2f} ms, analyze (all) {r['analyze_all_best_ms']:.2f} ms, "
              f"value_and_grad(smooth) {r['value_and_grad_smooth_best_ms']:.2f} ms "
              f"(compile {r['value_and_grad_compile_s']:.1f} s)")
        eb = r["estimate_batched"]
        print(f"   estimate, vmapped over {eb['batch']} flit vectors: {eb['best_ms']:.2f} ms per batch "
              f"= {eb['evals_per_s']:.1f} evaluations/s")
    res = {"info": info, "closed_form": cf, "path_model": pm, "seconds": time.time() - t0,
           "targets_2core_cpu": {"closed_form_evals_per_s": 1e8, "path_model_evals_per_s": 100,
                                 "value_and_grad_ms": 50}}
    outdir = Path(a.out)
    outdir.mkdir(parents=True, exist_ok=True)
    path = outdir / f"analytical_{backend}.json"
    path.write_text(json.dumps(res, indent=1))
    print(f"wrote {path} ({res['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
