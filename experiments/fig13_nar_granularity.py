"""NUNA Figure 13: NAR granularity 2 .. 12 for a 1 MB All-Gather on 8 GPUs with
7 and with 1,008 threadblocks per GPU: speedup of NAR over baseline (hashed)
routing, from the analytical path model, with the exact simulator on the same
traffic as a check, and the paper's stated findings (section 6.5).

Baseline routing keeps the placement and hashes over all ports: we show
UA+NAR over UA and NAP+NAR over NAP (the paper does not say which placement
its Figure 13 uses).  Every granularity 2 .. 12 is run: domains of a
granularity that does not divide the 144 ports differ by one port
(docs/policies.md, "NAR").
Writes results/fig13_nar_granularity/fig13_nar_granularity.{json,png} and a copy in experiments/out/.

    python experiments/fig13_nar_granularity.py [--no-sim]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from nuna_jax import preset  # noqa: E402
from nuna_jax.models.contention import evaluate  # noqa: E402
from nuna_jax.scenario import make_scenario  # noqa: E402
from nuna_jax.plots.save import save_figure  # noqa: E402
from fig9_speedup import write  # noqa: E402

NAME = "fig13_nar_granularity"
PAPER = {"claims": ["1,008 threadblocks per GPU: the finest granularity (12 NAR domains) is best (6.5)",
                    "7 threadblocks per GPU: too many domains route traffic unequally and slow it down (6.5)"],
         "best_granularity_1008_tbs": 12}


def main(argv=None) -> int:
    from nuna_jax import cache
    cache.use_scenarios(True)      # scenarios built once are read back on the next run (nuna_jax.cache)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-sim", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "results" / NAME))
    a = ap.parse_args(argv)
    s = preset("table2", n_gpus=8)
    from nuna_jax.sim import simulate
    sim = None if a.no_sim else simulate
    rows = []
    for tbs in (7, 1008):
        for base_pol in ("UA", "NAP"):
            sc0 = make_scenario(s, collective="allgather", size_bytes=10**6, policy=base_pol, tbs_per_gpu=tbs)
            b = evaluate(s, sc0.traffic)
            bsim = float(sim(s, sc0.traffic).completion_ns) if sim else None
            for g in range(2, 13):
                t0 = time.time()
                pol = base_pol + "+NAR"
                sc = make_scenario(s, collective="allgather", size_bytes=10**6, policy=pol, tbs_per_gpu=tbs,
                                   nar_granularity=g)
                r = evaluate(s, sc.traffic)
                row = {"tbs_per_gpu": tbs, "policy": pol, "granularity": g, "time_ns": r["time_ns"],
                       "lower_bound_ns": r["lower_bound_ns"], "baseline_time_ns": b["time_ns"],
                       "speedup": b["time_ns"] / r["time_ns"], "bottleneck": r["breakdown"]["bottleneck"]}
                if sim:
                    row["sim_time_ns"] = float(sim(s, sc.traffic).completion_ns)
                    row["sim_baseline_time_ns"] = bsim
                    row["sim_speedup"] = bsim / row["sim_time_ns"]
                rows.append(row)
                extra = f"  sim x{row['sim_speedup']:.3f}" if sim else ""
                print(f"tbs {tbs:5d} {pol:8s} G={g:2d}  est {r['time_ns']:9.1f} ns x{row['speedup']:.3f} "
                      f"({row['bottleneck']}){extra} [{time.time() - t0:.1f}s]", flush=True)
    out = {"figure": "NUNA Figure 13", "model": "analytical path model (estimate)", "system": "table2",
           "gpus": 8, "collective": "allgather", "size_bytes": 10**6, "rows": rows,
           "paper": PAPER, "simulator": sim is not None}
    write(out, Path(a.out), plot, NAME)
    return 0


def plot(out, png: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    for ax, tbs in zip(axes, (7, 1008)):
        for pol, col in (("UA+NAR", "tab:blue"), ("NAP+NAR", "tab:green")):
            rr = [r for r in out["rows"] if r["tbs_per_gpu"] == tbs and r["policy"] == pol]
            if not rr:
                continue
            ax.plot([r["granularity"] for r in rr], [r["speedup"] for r in rr], "o-", color=col,
                    label=f"{pol} over {pol.split('+')[0]} (ours, analytical)")
            if all("sim_speedup" in r for r in rr):
                ax.plot([r["granularity"] for r in rr], [r["sim_speedup"] for r in rr], "x--", color=col,
                        alpha=0.7, label=f"{pol} (ours, exact simulator)")
        ax.axhline(1.0, color="k", lw=0.6)
        if tbs == 1008:
            ax.axvline(12, color="tab:red", ls=":", lw=1, label="paper: 12 domains best")
        else:
            ax.text(0.02, 0.03, "paper: too many domains slow it down", transform=ax.transAxes, fontsize=7)
        ax.set_xlabel("NAR granularity (domains)")
        ax.set_title(f"All-Gather 1 MB, 8 GPUs, {tbs} threadblocks/GPU", fontsize=9)
        ax.legend(fontsize=6)
    axes[0].set_ylabel("speedup over hashed routing")
    fig.suptitle("NUNA Fig. 13 (NAR granularity)", fontsize=10)
    fig.tight_layout()
    save_figure(fig, png, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
