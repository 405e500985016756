"""NUNA Figure 11: the seven configurations (UA, UA+NAR, NUMA, NUMA+NAR, NAP*,
NAP, NAP+NAR) for a 100 kB and a 10 MB All-Gather on 8 GPUs -- speedup over UA
from the analytical path model (best of 7, 28, 112 threadblocks per GPU, NUNA
5.1); the exact simulator (nuna_jax.sim) on the same traffic beside it as a
check of the model, and the paper's stated numbers.

Writes results/fig11_isolation/fig11_isolation.{json,png} and a copy in experiments/out/.

    python experiments/fig11_isolation.py [--no-sim]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nuna_jax import preset  # noqa: E402
from nuna_jax.models.contention import evaluate  # noqa: E402
from nuna_jax.placement import FIGURE11_ORDER  # noqa: E402
from nuna_jax.scenario import make_scenario  # noqa: E402
from nuna_jax.plots.save import save_figure  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fig9_speedup import best_over_tbs, tbs_candidates, write  # noqa: E402
from nuna_jax.scenario import TBS_BEST_MULTIPLES  # noqa: E402

NAME = "fig11_isolation"
POLICIES = FIGURE11_ORDER
PAPER = {
    "nap_nar_max_speedup": 1.8,     # abstract / section 8
    "nap_max_speedup": 1.5,         # abstract: NAP optimizations alone up to 1.5x
    "nar_alone_max_speedup": 1.35,  # section 1: NAR alone up to 35%
    "claims": [
        "for every placement (UA, NUMA, NAP*, NAP), adding NAR improves performance (6.3)",
        "at 10 MB, NUMA, NAP* and NAP without NAR are slower than UA (6.3)",
        "NAP without NAR is not beneficial; NAR helps NAP the most (6.3)",
    ],
}


def main(argv=None) -> int:
    from nuna_jax import cache
    cache.use_scenarios(True)      # scenarios built once are read back on the next run (nuna_jax.cache)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-sim", action="store_true", help="skip the exact simulator column")
    ap.add_argument("--tbs-mults", default=",".join(str(m) for m in TBS_BEST_MULTIPLES),
                    help="threadblocks per GPU tried, as multiples of 7 (the best one is kept, NUNA 5.1)")
    ap.add_argument("--out", default=str(ROOT / "results" / NAME))
    a = ap.parse_args(argv)
    s = preset("table2", n_gpus=8)
    sim = None
    if not a.no_sim:
        try:
            from nuna_jax.sim.api import simulate as sim
        except ImportError:
            sim = None
    rows = []
    cands = tbs_candidates(8, [int(x) for x in a.tbs_mults.split(",")])
    for n in (10**5, 10**7):
        base = base_sim = None
        for pol in POLICIES:
            t0 = time.time()
            r = best_over_tbs(s, "allgather", n, pol, cands)
            row = {"size_bytes": n, "policy": pol, "time_ns": r["time_ns"], "lower_bound_ns": r["lower_bound_ns"],
                   "tbs_per_gpu": r["tbs_per_gpu"], "tried_tbs": {str(k): v for k, v in r["tried"].items()},
                   "bottleneck": r["breakdown"]["bottleneck"], "breakdown": r["breakdown"], "n_flows": r["n_flows"]}
            if pol == "UA":
                base = r["time_ns"]
            row["speedup_over_ua"] = base / r["time_ns"]
            if sim is not None:
                ts = time.time()
                sc = make_scenario(s, collective="allgather", size_bytes=n, policy=pol, tbs_per_gpu=r["tbs_per_gpu"])
                row["sim_time_ns"] = float(sim(s, sc.traffic).completion_ns)
                row["sim_seconds"] = time.time() - ts
                if pol == "UA":
                    base_sim = row["sim_time_ns"]
                row["sim_speedup_over_ua"] = base_sim / row["sim_time_ns"]
            rows.append(row)
            extra = f" sim {row['sim_time_ns']:.1f} ns x{row['sim_speedup_over_ua']:.3f}" if "sim_time_ns" in row else ""
            print(f"{n:>9,d} B {pol:9s} est {r['time_ns']:10.1f} ns x{row['speedup_over_ua']:.3f} "
                  f"(tbs {r['tbs_per_gpu']}, bound {r['lower_bound_ns']:.1f}, {row['bottleneck']}){extra} "
                  f"[{time.time() - t0:.1f}s]", flush=True)
    out = {"figure": "NUNA Figure 11", "model": "analytical path model (estimate)", "system": "table2",
           "gpus": 8, "collective": "allgather", "algorithm": "direct",
           "tbs_per_gpu": "best of " + str(cands) + " per point (estimate); the simulator runs that count",
           "rows": rows,
           "paper": PAPER, "simulator": sim is not None}
    write(out, Path(a.out), plot, NAME)
    return 0


def plot(out, png: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    P = out["paper"]
    for ax, n in zip(axes, (10**5, 10**7)):
        rows = [r for r in out["rows"] if r["size_bytes"] == n]
        x = np.arange(len(rows))
        ax.bar(x - 0.2, [r["speedup_over_ua"] for r in rows], 0.4, label="analytical estimate (ours)")
        if all("sim_speedup_over_ua" in r for r in rows):
            ax.bar(x + 0.2, [r["sim_speedup_over_ua"] for r in rows], 0.4, label="exact simulator (ours)")
        ax.axhline(1.0, color="k", lw=0.6)
        ax.axhline(P["nap_nar_max_speedup"], color="tab:green", ls="--", lw=0.8, label="paper: NAP+NAR up to 1.8x")
        ax.axhline(P["nap_max_speedup"], color="tab:purple", ls="-.", lw=0.8, label="paper: NAP up to 1.5x")
        ax.axhline(P["nar_alone_max_speedup"], color="tab:blue", ls=":", lw=0.8, label="paper: NAR alone up to 1.35x")
        ax.set_xticks(x, [r["policy"] for r in rows], rotation=30, fontsize=8)
        ax.set_title(f"All-Gather {n / 1e6:g} MB, 8 GPUs", fontsize=9)
    axes[0].set_ylabel("speedup over UA")
    axes[0].legend(fontsize=7)
    if out["rows"] and any(r["size_bytes"] == 10**7 for r in out["rows"]):
        axes[1].text(0.02, 0.97, "paper: NUMA, NAP*, NAP < 1 at 10 MB", transform=axes[1].transAxes,
                     fontsize=7, va="top")
    fig.suptitle("NUNA Fig. 11 (isolation of techniques)", fontsize=10)
    fig.tight_layout()
    save_figure(fig, png, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
