"""PK 3.2 transfer mechanisms: achieved bandwidth vs message size and vs SMs.

Curves of ``models.kernel.mechanism_bw`` for the H100 and B200 presets with
the paper's stated points beside them: peaks at 1 GB (H100 368.82 / 350.01 /
342.68, B200 726.13 / 669.12 / 628.35 GB/s), ~80% of peak at 256 MB (copy
engine), ~2 KB (TMA), 128 B (register), ~15 and ~76 SMs to saturate.  The
curves pass through these points by construction (two constants per
mechanism are solved from them); the plot shows the shape between them.

Usage: python experiments/pk_mechanisms.py -> results/pk/mechanisms.{json,png},
experiments/data/pk_mechanisms.json
"""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from nuna_jax.kernel_presets import kernel_preset  # noqa: E402
from nuna_jax.models import kernel as K  # noqa: E402

PAPER_PEAK = {"h100": {"ce": 368.82, "tma": 350.01, "reg": 342.68},
              "b200": {"ce": 726.13, "tma": 669.12, "reg": 628.35}}
PAPER_MSG80 = {"ce": 256 * 2**20, "tma": 2 * 2**10, "reg": 128}
PAPER_SAT = {"tma": 15, "reg": 76}


def main(out_dir=None):
    sizes = np.logspace(np.log2(64), np.log2(2**30), 49, base=2.0)
    sms = np.arange(1, 133, dtype=float)
    res = {"msg_bytes": sizes.tolist(), "sms": sms.tolist(), "curves": {}, "paper_peak": PAPER_PEAK}
    for name in ("h100", "b200"):
        hw = kernel_preset(name)
        res["curves"][name] = {}
        for mech in ("ce", "tma", "reg"):
            bw = np.asarray(K.mechanism_bw(hw, mech, sizes, hw.n_sms))
            bw_sm = np.asarray(K.mechanism_bw(hw, mech, 1e9, sms))
            res["curves"][name][mech] = {"bw_vs_msg": bw.tolist(), "bw_vs_sms_1GB": bw_sm.tolist(),
                                         "at_1GB": float(K.mechanism_bw(hw, mech, 1e9, hw.n_sms)),
                                         "at_msg80": float(K.mechanism_bw(hw, mech, PAPER_MSG80[mech], hw.n_sms))}
    for name in ("h100", "b200"):
        print(f"[{name}] at 1 GB, all SMs (paper):  " + "  ".join(
            f"{m} {res['curves'][name][m]['at_1GB']:.2f} ({PAPER_PEAK[name][m]})" for m in ("ce", "tma", "reg")))
        print(f"[{name}] at the stated 80% message size: " + "  ".join(
            f"{m} {res['curves'][name][m]['at_msg80']:.2f} = {res['curves'][name][m]['at_msg80'] / PAPER_PEAK[name][m]:.2f} x peak"
            for m in ("ce", "tma", "reg")))
    data = ROOT / "experiments" / "data" if out_dir is None else out_dir
    data.mkdir(parents=True, exist_ok=True)
    if out_dir is None:
        out = ROOT / "results" / "pk"
        out.mkdir(parents=True, exist_ok=True)
        (out / "mechanisms.json").write_text(json.dumps(res))
    else:
        (data / "mechanisms_curves.json").write_text(json.dumps(res))
    small = {k: v for k, v in res.items() if k != "curves"}
    small["summary"] = {n: {m: {k: v for k, v in c.items() if k.startswith("at_")} for m, c in d.items()}
                        for n, d in res["curves"].items()}
    (data / "pk_mechanisms.json").write_text(json.dumps(small, indent=1))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(1, 2, figsize=(11, 4))
        colors = {"ce": "C0", "tma": "C1", "reg": "C2"}
        for name, ls in (("h100", "-"), ("b200", "--")):
            for mech in ("ce", "tma", "reg"):
                c = res["curves"][name][mech]
                ax[0].plot(sizes, c["bw_vs_msg"], ls, color=colors[mech], label=f"{name} {mech}")
                ax[0].plot([1e9], [PAPER_PEAK[name][mech]], "*", color=colors[mech], ms=10)
                ax[0].plot([PAPER_MSG80[mech]], [0.8 * PAPER_PEAK[name][mech]], "x", color=colors[mech], ms=9)
                if mech != "ce":
                    ax[1].plot(sms, c["bw_vs_sms_1GB"], ls, color=colors[mech], label=f"{name} {mech}")
        for mech, s in PAPER_SAT.items():
            ax[1].axvline(s, color=colors[mech], ls=":", label=f"PK: ~{s} SMs saturate ({mech})")
        ax[0].axvline(227 * 1024, color="gray", ls=":", label="TMA max message 227 KB")
        ax[0].set(xscale="log", xlabel="message size (bytes)", ylabel="GB/s",
                  title="stars: PK peaks at 1 GB; x: stated 80% points")
        ax[0].legend(fontsize=6)
        ax[1].set(xlabel="SMs issuing", ylabel="GB/s (1 GB transfer)")
        ax[1].legend(fontsize=6)
        fig.tight_layout()
        from nuna_jax.plots.save import save_figure; save_figure(fig, data / "pk_mechanisms", dpi=120)  # noqa: E702
    except Exception as e:
        print("plot skipped:", e)
    return res


if __name__ == "__main__":
    from script_args import out_dir
    main(out_dir(__doc__, "results/pk/ and experiments/data/"))
