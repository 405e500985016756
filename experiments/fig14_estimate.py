"""The path model's estimate beside a concurrent GEMM, against the simulator (NUNA Figure 14).

Figure 14's sweep (experiments/fig14_gemm_interference.py): 8-GPU 1 MB All-Gather, NAP+NAR and
UA (threadblocks "best"), beside a naively placed 100-tile GEMM moving 0.25-64 MB of HBM traffic
per GPU (``sim.gemm_background``).  Per size: the simulated completion with the GEMM
(``stop_after_traffic``), the path model's estimate with the GEMM as background load
(``estimate_ns(..., background=bg)``, docs/analytical.md 2.7) and its lower bound; the slowdowns
(with / alone) of both; and the GEMM's own duration, simulated alone on one GPU, beside the
model's ``T_bg``.  ``--extra`` adds cases where the GEMM outlasts the collective (100 kB
All-Gather, 1 MB All-Reduce, 7 threadblocks), where the proration matters.

Usage: python experiments/fig14_estimate.py [--quick] [--extra] [--out DIR]
  -> experiments/out/fig14_estimate.{json,png}
"""
import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from nuna_jax import sim  # noqa: E402
from nuna_jax.models import contention as C  # noqa: E402
from nuna_jax.presets import preset  # noqa: E402
from nuna_jax.scenario import make_scenario  # noqa: E402
from nuna_jax.traffic import make_traffic  # noqa: E402

SIZES_MB = [0.25, 0.5, 1, 2, 4, 8, 16, 32, 64]
POLICIES = ("ua", "nap+nar")
EXTRA = [("allgather", 100_000, 7), ("allreduce", 1_000_000, 7)]
EXTRA_MB = [2, 8, 32]


def gemm_alone_ns(s, avoid, mb):
    """The GEMM alone on GPU 0 (every GPU's GEMM is the same and independent), simulated, ns."""
    bg = sim.gemm_background(s, gemm_bytes=int(mb * 1e6), n_tiles=100, avoid_cus=avoid, gpus=[0])
    nothing = make_traffic(s, src_gpu=[1], cu=[0], read_stack=[0], port=[0], dst_gpu=[2], dst_stack=[0], flits=[0])
    return sim.simulate(s, nothing, background=bg).completion_ns


def case(s, coll, size, pol, tbs, sizes, gemm_alone=False):
    sc = make_scenario(s, collective=coll, size_bytes=size, policy=pol, tbs_per_gpu=tbs)
    t = sc.traffic
    avoid = np.unique(np.asarray(t.cu))
    alone = sim.simulate(s, t).traffic_completion_ps / 1000
    est0 = float(C.estimate_ns(s, t))
    lb0 = float(C.lower_bound_ns(s, t))
    rows = []
    for mb in sizes:
        bg = sim.gemm_background(s, gemm_bytes=int(mb * 1e6), n_tiles=100, avoid_cus=avoid)
        c0 = time.process_time()
        bl = C.background_load(s, bg)
        est = float(C.estimate_ns(s, t, background=bl))
        lb = float(C.lower_bound_ns(s, t, background=bl))
        model_cpu = time.process_time() - c0
        c0 = time.process_time()
        simulated = sim.simulate(s, t, background=bg, stop_after_traffic=True).traffic_completion_ps / 1000
        sim_cpu = time.process_time() - c0
        row = {"gemm_mb": mb, "sim_ns": simulated, "estimate_ns": est, "lower_bound_ns": lb,
               "gemm_estimate_ns": float(np.asarray(bl.duration_ns)[0]),
               "sim_slowdown": simulated / alone, "est_slowdown": est / est0,
               "est_over_sim": est / simulated, "lb_holds": lb <= simulated * (1 + 1e-9),
               "model_cpu_s": model_cpu, "sim_cpu_s": sim_cpu}
        if gemm_alone:
            row["gemm_sim_alone_ns"] = gemm_alone_ns(s, avoid, mb)
        rows.append(row)
        print(f"{coll} {size // 1000} kB {pol:8s} GEMM {mb:6.2f} MB: sim {simulated:8.1f} est {est:8.1f} "
              f"({est / simulated:.3f})  slowdown sim {simulated / alone:.3f} est {est / est0:.3f}  "
              f"lb {lb:7.1f}  T_bg {row['gemm_estimate_ns']:8.1f}"
              + (f" (sim alone {row['gemm_sim_alone_ns']:8.1f})" if gemm_alone else "")
              + f"  [{sim_cpu:.1f} CPU s]", flush=True)
    return {"collective": coll, "size_bytes": size, "policy": pol, "tbs_per_gpu": sc.describe()["tbs_per_gpu"],
            "alone_sim_ns": alone, "alone_estimate_ns": est0, "alone_lower_bound_ns": lb0, "rows": rows}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="four GEMM sizes (0.5, 2, 8, 32 MB) instead of nine")
    ap.add_argument("--extra", action="store_true", help="also 100 kB All-Gather and 1 MB All-Reduce (7 TBs)")
    ap.add_argument("--out", default=str(ROOT / "experiments" / "out"), metavar="DIR")
    args = ap.parse_args(argv)
    from nuna_jax import cache
    cache.use_scenarios(True)
    sizes = [0.5, 2, 8, 32] if args.quick else SIZES_MB
    s = preset("table2", n_gpus=8)
    out = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": f"{platform.node()} {platform.machine()} {platform.processor() or ''}".strip(),
           "system": "table2", "n_gpus": 8, "gemm_tiles": 100, "gemm_mb_per_gpu": sizes,
           "model": "docs/analytical.md 2.7: background work prorated into the resource terms",
           "fig14": [], "extra": []}
    c0 = time.process_time()
    for pol in POLICIES:
        out["fig14"].append(case(s, "allgather", 10**6, pol, "best", sizes, gemm_alone=(pol == "nap+nar")))
    if args.extra:
        for coll, size, tbs in EXTRA:
            for pol in POLICIES:
                out["extra"].append(case(s, coll, size, pol, tbs, EXTRA_MB))
    # the paper's reading of Figure 14: the GEMM size at which the collective's speed (alone / with)
    # first drops below 0.95, per policy, by the simulator and by the estimate
    for c in out["fig14"]:
        for who in ("sim", "est"):
            c[f"threshold_mb_0.95_{who}"] = next((r["gemm_mb"] for r in c["rows"] if r[f"{who}_slowdown"] > 1 / 0.95),
                                                 None)
    allrows = [r for c in out["fig14"] + out["extra"] for r in c["rows"]]
    out["lower_bound_holds_everywhere"] = all(r["lb_holds"] for r in allrows)
    out["cpu_s"] = time.process_time() - c0
    d = Path(args.out)
    d.mkdir(parents=True, exist_ok=True)
    (d / "fig14_estimate.json").write_text(json.dumps(out, indent=1))
    plot(out, d / "fig14_estimate.png")
    print(f"lower bound <= simulated everywhere: {out['lower_bound_holds_everywhere']}; "
          f"wrote {d / 'fig14_estimate.json'}")


def plot(out, fname):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nuna_jax.plots.save import save_figure
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
    for c, col in zip(out["fig14"], ("tab:gray", "tab:green")):
        x = [r["gemm_mb"] for r in c["rows"]]
        lab = c["policy"].upper()
        ax.plot(x, [r["sim_slowdown"] for r in c["rows"]], "o-", color=col, label=f"{lab} simulated")
        ax.plot(x, [r["est_slowdown"] for r in c["rows"]], "s--", color=col, mfc="none", label=f"{lab} estimate")
        bx.plot(x, [r["est_over_sim"] for r in c["rows"]], "s--", color=col, mfc="none", label=f"{lab} estimate / sim")
        bx.plot(x, [r["lower_bound_ns"] / r["sim_ns"] for r in c["rows"]], "v:", color=col,
                label=f"{lab} lower bound / sim")
    for a in (ax, bx):
        a.set_xscale("log", base=2)
        a.set_xlabel("concurrent GEMM HBM traffic per GPU (MB), 100 tiles")
        a.legend(fontsize=7)
    ax.set_yscale("log", base=2)
    ax.set_ylabel("All-Gather slowdown (with GEMM / alone)")
    ax.set_title("8 GPUs, 1 MB All-Gather + GEMM: slowdown", fontsize=10)
    bx.axhline(1.0, color="k", lw=0.6)
    bx.set_ylabel("ratio to the simulated completion")
    bx.set_title("estimate and bound vs the simulator", fontsize=10)
    fig.tight_layout()
    save_figure(fig, fname, dpi=110)


if __name__ == "__main__":
    main()
