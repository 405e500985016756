"""NUNA Figure 15 and section 6.7: end-to-end prefill (TTFT) and decode (TPOT) runtime
decomposition at 64 GPUs for the 12 models, UA vs NAP+NAR, and the summary over
2-64 GPUs (geometric-mean / max reductions, per-kind collective speedups) beside the
paper's stated numbers.  Model: ``nuna_jax.models.llm`` (docs/e2e.md).

    python experiments/fig15_e2e.py [--out experiments/out]      # ~40 s on 2 cores
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nuna_jax.models.llm.layers import SPLIT_KINDS  # noqa: E402
from nuna_jax.models.llm.report import PAPER, run_all  # noqa: E402
from nuna_jax.presets import preset  # noqa: E402
from nuna_jax.plots.save import save_figure  # noqa: E402

NAME = "fig15_e2e"
COLORS = {"compute": "0.75", "allreduce": "tab:blue", "alltoall": "tab:orange", "allgather": "tab:green",
          "p2p": "tab:purple"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "experiments" / "out"))
    a = ap.parse_args(argv)
    r = run_all(preset("table2"))
    at64 = [p for p in r["points"] if p["n_gpus"] == 64]
    out = {"figure": "NUNA Figure 15 + section 6.7 summary", "system": "table2",
           "model": "roofline compute + NUNA path-model collectives (collective_table), serialized",
           "summary": r["summary"], "paper": PAPER, "no_fit": r["no_fit"],
           "configs_evaluated": r["configs_evaluated"], "wall_s": r["wall_s"],
           "points_64gpu": at64, "points": r["points"]}
    outdir = Path(a.out)
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / f"{NAME}.json").write_text(json.dumps(out, indent=1))
    plot(out, outdir / f"{NAME}.png")
    sm = r["summary"]
    for k in ("ttft_reduction_geomean", "ttft_reduction_max", "tpot_reduction_geomean", "tpot_reduction_max",
              "comm_speedup_prefill", "comm_speedup_decode", "allreduce_speedup", "alltoall_speedup"):
        print(f"{k:26s} ours {sm[k]:8.3f}   paper {PAPER[k]:.3f}")
    print(f"wrote {outdir / NAME}.json/.png")
    return 0


def plot(out, png: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    fig, axes = plt.subplots(2, 1, figsize=(11, 7.5))
    for ax, ph, metric in zip(axes, ("prefill", "decode"), ("TTFT", "TPOT")):
        pts = [p for p in out["points_64gpu"] if p["phase"] == ph]
        x = np.arange(len(pts))
        for j, (pol, off, hatch) in enumerate((("ua", -0.2, ""), ("nap_nar", 0.2, "//"))):
            bottom = np.zeros(len(pts))
            for k in ("compute", *SPLIT_KINDS):
                v = np.array([p["split_ms"][pol][k] / p["time_ms"]["ua"] for p in pts])
                ax.bar(x + off, v, 0.38, bottom=bottom, color=COLORS[k], hatch=hatch, edgecolor="k", lw=0.3,
                       label=(k if pol == "ua" else None))
                bottom += v
        for i, p in enumerate(pts):
            c = p["config"]
            ax.text(i, max(1.0, p["time_ms"]["nap_nar"] / p["time_ms"]["ua"]) + 0.03, f"TP{c['tp']} EP{c['ep']}\nDP{c['dp']} PP{c['pp']}\n{100 * p['reduction']:+.0f}%",
                    ha="center", va="bottom", fontsize=6)
        ax.set_xticks(x)
        ax.set_xticklabels([p["model"] for p in pts], rotation=20, fontsize=7, ha="right")
        ax.set_ylim(0, max(1.45, max(p["time_ms"]["nap_nar"] / p["time_ms"]["ua"] for p in pts) + 0.45))
        ax.set_ylabel(f"{metric} / UA {metric}")
        key = "ttft" if ph == "prefill" else "tpot"
        sm, P = out["summary"], out["paper"]
        ax.set_title(f"NUNA Fig. 15({'a' if ph == 'prefill' else 'b'}) {ph}, 64 GPUs: left bar UA, right "
                     f"(hatched) NAP+NAR.  Over 2-64 GPUs: {metric} reduction geomean "
                     f"{100 * sm[key + '_reduction_geomean']:.1f}% (paper {100 * P[key + '_reduction_geomean']:.0f}%), "
                     f"max {100 * sm[key + '_reduction_max']:.1f}% (paper {100 * P[key + '_reduction_max']:.0f}%)",
                     fontsize=8)
        ax.axhline(1.0, color="k", lw=0.5)
        ax.legend(fontsize=7, ncol=5, loc="upper right", title="time share (ms / UA total)", title_fontsize=7)
    fig.tight_layout()
    save_figure(fig, png, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
