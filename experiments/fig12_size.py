"""NUNA Figure 12: NAP+NAR speedup over UA versus collective size (8-GPU
All-Gather, 100 kB .. 1 GB) from the analytical path model, with the paper's
stated numbers (section 6.7: "collectives up to 1 MB speed up 1.5-1.9x,
decaying to 1.1x by 64 MB"; abstract: up to 1.8x).

Each point keeps the best of 7, 28, 112 threadblocks per GPU per policy (NUNA 5.1).
Writes results/fig12_size/fig12_size.{json,png} and a copy in experiments/out/.

    python experiments/fig12_size.py
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
from nuna_jax.plots.save import save_figure  # noqa: E402
from fig9_speedup import best_over_tbs, tbs_candidates, write  # noqa: E402
from nuna_jax.scenario import TBS_BEST_MULTIPLES  # noqa: E402

NAME = "fig12_size"
PAPER = {"up_to_1MB_range": [1.5, 1.9], "at_64MB": 1.1, "max": 1.8}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tbs-mults", default=",".join(str(m) for m in TBS_BEST_MULTIPLES))
    ap.add_argument("--out", default=str(ROOT / "results" / NAME))
    a = ap.parse_args(argv)
    s = preset("table2", n_gpus=8)
    cands = tbs_candidates(8, [int(x) for x in a.tbs_mults.split(",")])
    sizes = [10**5, 3 * 10**5, 10**6, 3 * 10**6, 10**7, 3 * 10**7, 64 * 10**6, 10**8, 3 * 10**8, 10**9]
    rows = []
    for n in sizes:
        t0 = time.time()
        ua = best_over_tbs(s, "allgather", n, "UA", cands)
        nn = best_over_tbs(s, "allgather", n, "NAP+NAR", cands)
        rows.append({"size_bytes": n, "ua_time_ns": ua["time_ns"], "nap_nar_time_ns": nn["time_ns"],
                     "ua_tbs": ua["tbs_per_gpu"], "nap_nar_tbs": nn["tbs_per_gpu"],
                     "ua_bottleneck": ua["breakdown"]["bottleneck"],
                     "nap_nar_bottleneck": nn["breakdown"]["bottleneck"],
                     "ua_lower_bound_ns": ua["lower_bound_ns"], "nap_nar_lower_bound_ns": nn["lower_bound_ns"],
                     "speedup": ua["time_ns"] / nn["time_ns"]})
        print(f"{n:>13,d} B  UA {ua['time_ns']:12.1f} ns (tbs {ua['tbs_per_gpu']}, {ua['breakdown']['bottleneck']})  "
              f"NAP+NAR {nn['time_ns']:12.1f} ns (tbs {nn['tbs_per_gpu']}, {nn['breakdown']['bottleneck']})  "
              f"x{rows[-1]['speedup']:.3f} [{time.time() - t0:.1f}s]", flush=True)
    out = {"figure": "NUNA Figure 12", "model": "analytical path model (estimate)", "system": "table2",
           "gpus": 8, "collective": "allgather", "algorithm": "direct",
           "tbs_per_gpu": f"best of {cands} per point and policy", "rows": rows, "paper": PAPER}
    write(out, Path(a.out), plot, NAME)
    return 0


def plot(out, png: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = out["rows"]
    fig, ax = plt.subplots(figsize=(6, 3.8))
    ax.plot([r["size_bytes"] for r in rows], [r["speedup"] for r in rows], "o-", color="tab:green",
            label="NAP+NAR over UA (ours, analytical)")
    P = out["paper"]
    ax.fill_between([1e5, 1e6], *P["up_to_1MB_range"], color="tab:green", alpha=0.15,
                    label="paper: up to 1 MB, 1.5-1.9x (6.7)")
    ax.plot([64e6], [P["at_64MB"]], "k*", ms=11, label="paper: ~1.1x by 64 MB (6.7)")
    ax.axhline(P["max"], color="tab:green", ls="--", lw=0.8, label="paper: up to 1.8x")
    ax.axhline(1.0, color="k", lw=0.6)
    ax.set_xscale("log")
    ax.set_xlabel("All-Gather size (bytes), 8 GPUs")
    ax.set_ylabel("speedup over UA")
    ax.set_title("NUNA Fig. 12 (sensitivity to size)", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, png, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
