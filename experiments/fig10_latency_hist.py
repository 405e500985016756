"""NUNA Figure 10: one-way off-chip store latency histograms, 8 GPUs, 1 MB All-Gather, UA vs NAP+NAR.

Every flit of the collective goes through the exact simulator (nuna_jax.sim,
docs/simulator.md); a flit's store latency runs from its store issue (stage 3
of docs/model.md) to its HBM write at the destination.  Table 2 parameters,
nothing calibrated: our numbers are predictions beside the paper's
(section 6.2: UA mean 920 ns, max 1,320 ns; NAP+NAR mean 780 ns, max 1,180 ns).

Usage: python experiments/fig10_latency_hist.py
  -> results/fig10_latency_hist/fig10.{json,png} and experiments/out/fig10_latency_hist.{json,png}
"""
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from nuna_jax import path, sim  # noqa: E402
from nuna_jax.scenario import make_scenario  # noqa: E402
from nuna_jax.presets import preset  # noqa: E402
from nuna_jax.plots.save import save_figure  # noqa: E402

PAPER = {"ua": {"mean": 920.0, "max": 1320.0}, "nap+nar": {"mean": 780.0, "max": 1180.0}}
BIN_NS = 20.0


def zero_load_store_ns(s, t):
    """Store latency of each flow with no other flit in the system (docs/model.md), ns."""
    st = path.flow_stages(s, t)
    col = path.stage_names(s).index("store_issue")
    return np.asarray(np.sum((st.service_ns + st.latency_ns)[:, col:], axis=1), np.float64)


def main(out_dir=None):
    from nuna_jax import cache
    cache.use_scenarios(True)      # scenarios built once are read back on the next run (nuna_jax.cache)
    s = preset("table2", n_gpus=8)
    out = {"system": "table2", "n_gpus": 8, "collective": "allgather", "size_bytes": 10**6,
           "bin_ns": BIN_NS, "paper": PAPER, "policies": {}}
    for pol in ("ua", "nap+nar"):
        sc = make_scenario(s, collective="allgather", size_bytes=10**6, policy=pol, tbs_per_gpu="best")
        t0 = time.perf_counter()
        r = sim.simulate(s, sc.traffic)
        lat_ns = r.store_latency_ps / 1000.0
        zl = zero_load_store_ns(s, sc.traffic)[r.flit_flow[r.traffic_mask]]
        edges = np.arange(0.0, 1600.0 + BIN_NS, BIN_NS)
        hist, _ = np.histogram(lat_ns, bins=edges)
        stats = sim.latency_stats_ns(r.store_latency_ps)
        out["policies"][pol] = {
            "tbs_per_gpu": sc.describe()["tbs_per_gpu"], "tbs_chosen_by": sc.tbs_chosen_by,
            "store_latency_ns": stats, "completion_ns": r.traffic_completion_ps / 1000,
            "zero_load_store_ns": {"mean": float(zl.mean()), "max": float(zl.max()), "min": float(zl.min())},
            "queueing_ns_mean": float(lat_ns.mean() - zl.mean()),
            "hist_edges_ns": edges.tolist(), "hist_counts": hist.tolist(),
            "flits": int(r.flits_delivered), "wall_s": time.perf_counter() - t0}
        print(f"{pol:8s} store latency mean {stats['mean']:7.1f} ns (paper {PAPER[pol]['mean']:.0f})  "
              f"max {stats['max']:7.1f} ns (paper {PAPER[pol]['max']:.0f})  p50 {stats['p50']:.1f}  "
              f"p99 {stats['p99']:.1f}  zero-load mean {zl.mean():.1f}  completion {r.traffic_completion_ps/1000:.1f} ns")
    u, n = out["policies"]["ua"]["store_latency_ns"], out["policies"]["nap+nar"]["store_latency_ns"]
    out["reduction"] = {"mean_ns": u["mean"] - n["mean"], "max_ns": u["max"] - n["max"],
                        "paper_mean_ns": 140.0, "paper_max_ns": 140.0,
                        "max_rel": 1 - n["max"] / u["max"], "paper_max_rel": 1 - 1180 / 1320}
    if out_dir is not None:                 # --out DIR: everything there, nothing in the clone
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "fig10_latency_hist.json").write_text(json.dumps(out, indent=1))
        plot(out, out_dir / "fig10_latency_hist.png")
        print(f"wrote {out_dir}/fig10_latency_hist.{{json,png}}")
        return
    res = ROOT / "results" / "fig10_latency_hist"
    res.mkdir(parents=True, exist_ok=True)
    (res / "fig10.json").write_text(json.dumps(out, indent=1))
    plot(out, res / "fig10.png")
    dst = ROOT / "experiments" / "out"
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copy(res / "fig10.json", dst / "fig10_latency_hist.json")
    shutil.copy(res / "fig10.png", dst / "fig10_latency_hist.png")
    print(f"wrote {res}/fig10.{{json,png}} and experiments/out/fig10_latency_hist.{{json,png}}")


def plot(out, fname):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, pol, title in zip(axes, ("ua", "nap+nar"), ("(a) UA", "(b) NAP+NAR")):
        d = out["policies"][pol]
        e = np.asarray(d["hist_edges_ns"])
        c = np.asarray(d["hist_counts"])
        ax.bar(e[:-1], c / c.sum() * 100, width=out["bin_ns"], align="edge", color="tab:blue", alpha=0.75,
               label="nuna_jax sim")
        st = d["store_latency_ns"]
        ax.axvline(st["mean"], color="tab:blue", ls="-", lw=1.5, label=f"our mean {st['mean']:.0f} ns")
        ax.axvline(st["max"], color="tab:blue", ls="--", lw=1.5, label=f"our max {st['max']:.0f} ns")
        ax.axvline(PAPER[pol]["mean"], color="tab:red", ls="-", lw=1.5, label=f"paper mean {PAPER[pol]['mean']:.0f} ns")
        ax.axvline(PAPER[pol]["max"], color="tab:red", ls="--", lw=1.5, label=f"paper max {PAPER[pol]['max']:.0f} ns")
        ax.set_title(f"{title}: 8 GPUs, 1 MB All-Gather")
        ax.set_xlabel("one-way store latency (ns)")
        ax.set_xlim(400, 1600)
        ax.legend(fontsize=8, loc="upper left")
    axes[0].set_ylabel("flits (%)")
    fig.suptitle("NUNA Figure 10 (prediction from Table 2; no calibration)")
    fig.tight_layout()
    save_figure(fig, fname, dpi=110)


if __name__ == "__main__":
    from script_args import out_dir
    main(out_dir(__doc__, "results/ and experiments/out/"))
