"""How much of a latency gap to BookSim2 is seed noise: both tools at one validation point over many
seeds (docs/noc.md "Validation against BookSim2").

Runs ``nuna-jax noc`` and BookSim2 on ``mesh88_lat.cfg`` (transpose) at the given injection rate
and VC buffer depths for seeds ``0 .. N-1`` and writes, per buffer depth, each tool's per-seed
average packet latency, their mean, standard deviation and standard error, and the relative gap
of the means with its standard error (the two tools' seeds are independent: se of the difference
= sqrt(se_a^2 + se_b^2)).  BookSim2's runs are cached in experiments/out/booksim_raw.json (the
validation's cache, same keys), so seeds the validation already ran are not rerun.

    python experiments/booksim_seed_noise.py [--rate 0.007] [--seeds 64] [--buffers 8,4]

Without the binary it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

from validate_booksim import RAW, find_booksim, run_booksim, run_nuna  # noqa: E402

OUT = ROOT / "experiments" / "out" / "booksim_seed_noise.json"


def summary(xs: list[float]) -> dict:
    m = statistics.fmean(xs)
    sd = statistics.stdev(xs) if len(xs) > 1 else math.nan
    return {"n": len(xs), "mean": m, "sd": sd, "se": sd / math.sqrt(len(xs))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=0.007)
    ap.add_argument("--seeds", type=int, default=64)
    ap.add_argument("--buffers", default="8,4")
    ap.add_argument("--config", default="mesh88_lat.cfg")
    ap.add_argument("--out", default=str(OUT))
    a = ap.parse_args(argv)
    binary = find_booksim()
    if binary is None:
        print("booksim_seed_noise: BookSim2 binary not found; nothing to run")
        return 0
    cfg = binary.parent / "configs" / a.config
    raw = json.loads(RAW.read_text()) if RAW.exists() else {}
    doc = {"config": a.config, "injection_rate": a.rate, "seeds": a.seeds, "results": []}
    for buf in (int(b) for b in a.buffers.split(",")):
        ov = [f"vc_buf_size={buf}", f"injection_rate={a.rate}"]
        bs, nj = [], []
        for seed in range(a.seeds):
            key = f"{a.config}|{' '.join(ov)}|seed={seed}"
            if key not in raw:
                raw[key] = run_booksim(binary, cfg, ov + [f"seed={seed}"])
                RAW.write_text(json.dumps(raw, indent=1, sort_keys=True))
            bs.append(raw[key]["packet_latency_avg_cycles"])
            nj.append(run_nuna(cfg, ov, seed)["packet_latency_avg_cycles"])
        sb, sn = summary(bs), summary(nj)
        gap = (sn["mean"] - sb["mean"]) / sb["mean"]
        gap_se = math.hypot(sb["se"], sn["se"]) / sb["mean"]
        first24 = (statistics.fmean(nj[:24]) - statistics.fmean(bs[:24])) / statistics.fmean(bs[:24])
        doc["results"].append({"vc_buf_size": buf, "booksim": {**sb, "per_seed": bs}, "nuna_jax": {**sn, "per_seed": nj},
                               "gap": gap, "gap_se": gap_se, "gap_first_24_seeds": first24})
        print(f"{a.config} buf={buf} rate={a.rate}: BookSim2 {sb['mean']:.2f} +- {sb['se']:.2f} (sd {sb['sd']:.1f}), "
              f"nuna-jax {sn['mean']:.2f} +- {sn['se']:.2f} (sd {sn['sd']:.1f}) over {a.seeds} seeds: gap "
              f"{100 * gap:+.1f} % +- {100 * gap_se:.1f} % (seeds 0-23 alone: {100 * first24:+.1f} %)", flush=True)
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
