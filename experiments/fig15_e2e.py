"""NUNA Figure 15 and section 6.7: end-to-end prefill (TTFT) and decode (TPOT) runtime
decomposition at 64 GPUs for the 12 models, UA vs NAP+NAR, and the summary over
2-64 GPUs (geometric-mean / max reductions, per-kind collective speedups) beside the
paper's stated numbers, and the paper's one stated configuration as its own rows (``anchor``:
Llama-70B, 64 GPUs, TP 8 pinned, the rest searched; examples/e2e/llama70b_64gpu_tp8.toml).
Model: ``nuna_jax.e2e.llm`` (docs/e2e.md).  The collective table must be current (it records
the model code that built it; a stale one stops this script, naming the command that rebuilds it).

    python experiments/fig15_e2e.py [--out experiments/out] [--table FILE.json]   # ~1-2 min on 2 cores
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nuna_jax.e2e.llm.collective_table import TableError, load_table  # noqa: E402
from nuna_jax.e2e.llm.layers import SPLIT_KINDS  # noqa: E402
from nuna_jax.e2e.llm.report import PAPER, load_run_config, run_all  # noqa: E402
from nuna_jax.presets import preset  # noqa: E402
from nuna_jax.plots.save import save_figure  # noqa: E402

NAME = "fig15_e2e"
ANCHOR = ROOT / "examples" / "e2e" / "llama70b_64gpu_tp8.toml"
COLORS = {"compute": "0.75", "allreduce": "tab:blue", "alltoall": "tab:orange", "allgather": "tab:green",
          "p2p": "tab:purple"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "experiments" / "out"))
    ap.add_argument("--table", default=None, help="collective table (default: the shipped Table 2 table)")
    a = ap.parse_args(argv)
    system = preset("table2")
    try:
        table = load_table(system, path=a.table)
    except TableError as e:
        print(f"fig15_e2e: {e}", file=sys.stderr)
        return 2
    r = run_all(system, table=table)
    anchor = run_all(system, table=table, config=load_run_config(ANCHOR))
    at64 = [p for p in r["points"] if p["n_gpus"] == 64]
    out = {"figure": "NUNA Figure 15 + section 6.7 summary", "system": "table2",
           "model": "roofline compute + NUNA path-model collectives (collective_table), serialized",
           "collective_table": table["status"], "run_config": r["run_config"],
           "summary": r["summary"], "paper": PAPER, "no_fit": r["no_fit"],
           "configs_evaluated": r["configs_evaluated"], "wall_s": r["wall_s"],
           "anchor": {"config_file": str(ANCHOR.relative_to(ROOT)), "run_config": anchor["run_config"],
                      "paper": {"tp": PAPER["llama70b_64gpu"]["tp"],
                                "prefill": PAPER["llama70b_64gpu"]["prefill_speedup"],
                                "decode": PAPER["llama70b_64gpu"]["decode_speedup"]},
                      "points": anchor["points"]},
           "points_64gpu": at64, "points": r["points"]}
    outdir = Path(a.out)
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / f"{NAME}.json").write_text(json.dumps(out, indent=1))
    plot(out, outdir / f"{NAME}.png")
    sm = r["summary"]
    for k in ("ttft_reduction_geomean", "ttft_reduction_max", "tpot_reduction_geomean", "tpot_reduction_max",
              "comm_speedup_prefill", "comm_speedup_decode", "allreduce_speedup", "alltoall_speedup"):
        print(f"{k:26s} ours {sm[k]:8.3f}   paper {PAPER[k]:.3f}")
    for p in anchor["points"]:
        c = p["config"]
        print(f"anchor llama-70b 64 GPUs {p['phase']:7s} TP={c['tp']} EP={c['ep']} DP={c['dp']} PP={c['pp']} "
              f"batch={c['batch']} seq_len={c['seq_len']}: reduction {p['reduction']:.3f}   "
              f"paper {out['anchor']['paper'][p['phase']]:.3f}")
    st = table["status"]
    print(f"collective table {st['path']} (model {st['model_hash']}, built {st['built']})")
    print(f"wrote {outdir / NAME}.json/.png")
    return 0


def _anchor_note(out, ph: str) -> str:
    """The paper's stated point (Llama-70B, 64 GPUs, TP 8) for the title."""
    an = out.get("anchor") or {}
    p = next((q for q in an.get("points", []) if q["phase"] == ph), None)
    if p is None:
        return ""
    c = p["config"]
    return (f"\nLlama-70B, 64 GPUs, TP 8 pinned (DP {c['dp']}, PP {c['pp']}, batch {c['batch']}, "
            f"seq {c['seq_len']}): {100 * p['reduction']:.1f}% (paper {100 * an['paper'][ph]:.0f}%)")


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
                     f"max {100 * sm[key + '_reduction_max']:.1f}% (paper {100 * P[key + '_reduction_max']:.0f}%)"
                     + _anchor_note(out, ph), fontsize=8)
        ax.axhline(1.0, color="k", lw=0.5)
        ax.legend(fontsize=7, ncol=5, loc="upper right", title="time share (ms / UA total)", title_fontsize=7)
    fig.tight_layout()
    save_figure(fig, png, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
