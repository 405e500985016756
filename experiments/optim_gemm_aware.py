"""Does the search route around the Figure 14 GEMM, or only win what it wins without it?

8-GPU 1 MB All-Gather, 7 threadblocks per GPU, beside the 100-tile GEMM of ``--gemm-mb`` MB per
GPU (``optimize(..., gemm_mb_per_gpu=X)``, optim/gemm.py).  Per seed, at one budget (path-model
evaluations) and 3 simulator calls, the search alone (no baselines) twice:

* *aware*: the search with the GEMM (every estimate and simulator call takes it);
* *blind*: the search without the GEMM (as ``optimize`` ran before), its chosen placement then
  simulated beside the same GEMM;

and each chosen placement simulated both with and without the GEMM; NAP+NAR (which ignores the
GEMM) beside it and alone as the reference.  Per placement also the path model's view: its
estimate beside the GEMM and its mesh-link busy time (ns, summed over the phases and GPUs) on the
links the GEMM takes more than ``HOT`` of (``BackgroundLoad.rho``, docs/analytical.md 2.7).  The
same GEMM (its CUs avoid every CU any point of the space can use and UA's) for every placement.

``--nap-counts``: instead, NAP+NAR at each threadblock count of the union (the counts
``optimize(..., tbs_per_gpu="best")`` searches) beside the GEMM of grid case 32 (its CUs avoid every
count's space), simulated and estimated, with and without the GEMM: how much of the count-searched
case's gain is NAP's own placement at another count.

Usage: python experiments/optim_gemm_aware.py [--gemm-mb 8] [--seeds 3] [--budget 800] [--nap-counts] [--out DIR]
  -> OUT/optim_gemm_aware_<gemm>MB.json or OUT/optim_gemm_nap_counts_<gemm>MB.json (date and machine inside)
"""

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

HOT = 0.3   # a mesh link is "hot" when the GEMM takes more than this share of it while it runs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gemm-mb", type=float, default=8.0)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--budget", type=int, default=800)
    ap.add_argument("--nap-counts", action="store_true", help="NAP+NAR at every count of the union (module docstring)")
    ap.add_argument("--out", default=str(ROOT / "experiments" / "out"))
    a = ap.parse_args(argv)
    if a.nap_counts:
        return nap_counts(a)
    from nuna_jax import sim
    from nuna_jax.lowering import build_traffic
    from nuna_jax.optim.driver import optimize, prepare
    from nuna_jax.optim.gemm import search_background
    from nuna_jax.presets import preset
    from nuna_jax.scenario import make_scenario
    s0 = preset("table2", n_gpus=8)
    sc = make_scenario(s0, collective="allgather", size_bytes=10**6, policy="nap+nar", tbs_per_gpu=7)
    s, plan = sc.system, sc.plan
    c0 = time.process_time()
    P = prepare(s, plan)
    g = search_background(s, P, plan, a.gemm_mb)
    bg = g["bg"]

    from nuna_jax.models.contention import analyze, estimate_ns
    from nuna_jax.path import resource_layout
    lay = resource_layout(s)
    rho = np.asarray(g["bl"].rho).reshape(s.n_gpus, -1)[:, lay.offset_link:lay.offset_egress]

    def sim_both(pl):
        t = build_traffic(s, plan, pl)
        r1, r0 = sim.simulate_batch(s, [t, t], backgrounds=[bg, None], stop_after_traffic=True)
        return r1.traffic_completion_ps / 1000, r0.traffic_completion_ps / 1000

    def model_view(pl):
        """(estimate beside the GEMM ns, link busy ns on hot GEMM links, link busy ns in all)."""
        t = build_traffic(s, plan, pl)
        busy = np.asarray(analyze(s, t).busy_ns).sum(0).reshape(s.n_gpus, -1)[:, lay.offset_link:lay.offset_egress]
        return float(estimate_ns(s, t, background=g["bl"])), float(busy[rho > HOT].sum()), float(busy.sum())

    from nuna_jax.optim.space import assemble_point
    nap_pl = assemble_point(s, plan, P["sp"], P["gid"], np.zeros(P["sp"].n_vars, np.int64))
    nap_with, nap_alone = sim_both(nap_pl)
    nap_view = model_view(nap_pl)
    rows = []
    for seed in range(a.seeds):
        kw = dict(budget=a.budget, seed=seed, prepared=P, baselines=False)
        aware = optimize(s, plan, gemm_mb_per_gpu=a.gemm_mb, **kw)
        blind = optimize(s, plan, **kw)
        aw, aw0 = sim_both(aware["placement"])
        bw, bw0 = sim_both(blind["placement"])
        row = {"seed": seed, "aware_with_gemm_ns": aw, "aware_alone_ns": aw0, "aware_source": aware["source"],
               "aware_estimate_ns": aware["estimate_ns"], "aware_reported_ns": aware["simulated_ns"],
               "blind_with_gemm_ns": bw, "blind_alone_ns": bw0, "blind_source": blind["source"],
               "blind_estimate_ns": blind["estimate_ns"], "blind_reported_ns": blind["simulated_ns"],
               "same_choice": aware["choice"] == blind["choice"]}
        for who, r in (("aware", aware), ("blind", blind)):
            e, hot, tot = model_view(r["placement"])
            row.update({f"{who}_estimate_beside_ns": e, f"{who}_hot_link_busy_ns": hot, f"{who}_link_busy_ns": tot})
        rows.append(row)
        print(f"seed {seed}: aware {aw:.1f} (alone {aw0:.1f}, {aware['source']})  blind {bw:.1f} "
              f"(alone {bw0:.1f}, {blind['source']})  NAP+NAR {nap_with:.1f} (alone {nap_alone:.1f}); busy on hot "
              f"GEMM links: aware {row['aware_hot_link_busy_ns']:.0f} blind {row['blind_hot_link_busy_ns']:.0f} "
              f"NAP+NAR {nap_view[1]:.0f} ns", flush=True)
    mean = {k: float(np.mean([r[k] for r in rows])) for k in ("aware_with_gemm_ns", "aware_alone_ns",
                                                               "blind_with_gemm_ns", "blind_alone_ns")}
    out = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": f"{platform.node()} {platform.machine()} cpus={os.cpu_count()}", "load_avg": os.getloadavg(),
           "case": "allgather 1MB 8g t7", "gemm": g["info"], "budget": a.budget, "seeds": a.seeds,
           "nap_nar_with_gemm_ns": nap_with, "nap_nar_alone_ns": nap_alone, "hot_rho": HOT,
           "nap_nar_estimate_beside_ns": nap_view[0], "nap_nar_hot_link_busy_ns": nap_view[1],
           "nap_nar_link_busy_ns": nap_view[2], "rows": rows, "mean": mean,
           "cpu_s": time.process_time() - c0}
    print(f"mean: aware {mean['aware_with_gemm_ns']:.1f} blind {mean['blind_with_gemm_ns']:.1f} NAP+NAR {nap_with:.1f} "
          f"(beside the GEMM); alone: aware {mean['aware_alone_ns']:.1f} blind {mean['blind_alone_ns']:.1f} "
          f"NAP+NAR {nap_alone:.1f}")
    d = Path(a.out)
    d.mkdir(parents=True, exist_ok=True)
    f = d / f"optim_gemm_aware_{a.gemm_mb:g}MB.json"
    f.write_text(json.dumps(out, indent=1))
    print("wrote", f)
    return 0


def nap_counts(a):
    """NAP+NAR at every threadblock count of the union beside grid case 32's GEMM (module docstring)."""
    from nuna_jax import sim
    from nuna_jax.models.contention import estimate_ns
    from nuna_jax.optim.counts import CountEvaluator, prepare_counts
    from nuna_jax.optim.gemm import search_background
    from nuna_jax.presets import preset
    from nuna_jax.scenario import make_scenario
    s = preset("table2", n_gpus=8)
    sc = make_scenario(s, collective="allgather", size_bytes=10**6, policy="nap+nar", tbs_per_gpu="best")
    c0 = time.process_time()
    P = prepare_counts(sc.system, sc.plan)
    g = search_background(s, P, P["sp"].plans[0], a.gemm_mb)
    ev = CountEvaluator(s, P["sp"], P["preps"], bl=g["bl"])
    rows = []
    for c, cnt in enumerate(P["counts"]):
        x = np.zeros(P["sp"].n_vars, np.int64)
        x[0] = c
        t = ev.traffic(x)
        r1, r0 = sim.simulate_batch(s, [t, t], backgrounds=[g["bg"], None], stop_after_traffic=True)
        row = {"tbs_per_gpu": int(cnt), "nap_nar_reference_count": c == 0,
               "sim_beside_ns": r1.traffic_completion_ps / 1000, "sim_alone_ns": r0.traffic_completion_ps / 1000,
               "estimate_beside_ns": float(ev(x)), "estimate_alone_ns": float(estimate_ns(s, t))}
        rows.append(row)
        print(f"NAP+NAR at {cnt:3d} threadblocks/GPU: simulated beside {row['sim_beside_ns']:.1f} alone "
              f"{row['sim_alone_ns']:.1f}; estimated beside {row['estimate_beside_ns']:.1f} alone "
              f"{row['estimate_alone_ns']:.1f}", flush=True)
    out = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": f"{platform.node()} {platform.machine()} cpus={os.cpu_count()}", "load_avg": os.getloadavg(),
           "case": "allgather 1MB 8g tbest + GEMM (grid case 32)", "gemm": g["info"], "rows": rows,
           "cpu_s": time.process_time() - c0}
    d = Path(a.out)
    d.mkdir(parents=True, exist_ok=True)
    f = d / f"optim_gemm_nap_counts_{a.gemm_mb:g}MB.json"
    f.write_text(json.dumps(out, indent=1))
    print("wrote", f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
