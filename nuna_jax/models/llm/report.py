"""Every model x GPU count x phase (NUNA section 6.7) and the summary beside the paper's numbers."""

from __future__ import annotations

import math
import time

from .collective_table import load_table
from .configs import model_names
from .layers import SPLIT_KINDS
from .search import PHASES, search

__all__ = ["run_all", "summarize", "PAPER", "GPU_COUNTS"]

GPU_COUNTS = (2, 4, 8, 16, 32, 64)
# NUNA section 6.7
PAPER = {"ttft_reduction_geomean": 0.06, "ttft_reduction_max": 0.11, "tpot_reduction_geomean": 0.07,
         "tpot_reduction_max": 0.28, "comm_speedup_prefill": 1.32, "comm_speedup_decode": 1.56,
         "allreduce_speedup": 1.54, "alltoall_speedup": 1.48,
         "llama70b_64gpu": {"tp": 8, "prefill_speedup": 0.08, "decode_speedup": 0.16}}


def _geo(xs):
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def run_all(system, models=None, gpu_counts=GPU_COUNTS, progress=None, jobs: int = 1) -> dict:
    """Search every point; points where nothing fits are listed, not searched further."""
    t0 = time.time()
    table = load_table(system, groups=gpu_counts, jobs=jobs)
    models = list(models or model_names())
    pad = 0
    for n in gpu_counts:      # one padded size: two compilations (prefill, decode) in all
        d = sum(1 for k in range(1, n + 1) if n % k == 0)
        pad = max(pad, d ** 4 * n.bit_length())
    points, no_fit, n_cfg = [], [], 0
    for m in models:
        for n in gpu_counts:
            for ph in PHASES:
                try:
                    r = search(m, n, ph, system, table=table, pad_to=pad)
                except ValueError as e:
                    if "fits" not in str(e):
                        raise
                    no_fit.append({"model": m, "n_gpus": n, "phase": ph})
                    continue
                n_cfg += r["configs_evaluated"]
                points.append(r)
                if progress:
                    progress(r)
    wall = time.time() - t0
    return {"system": system.name, "points": points, "no_fit": no_fit, "configs_evaluated": n_cfg,
            "wall_s": wall, "configs_per_s": n_cfg / wall, "summary": summarize(points)}


def summarize(points: list[dict]) -> dict:
    """Geometric-mean / max reductions and per-kind geometric-mean collective speedups."""
    out = {}
    for ph, key in (("prefill", "ttft"), ("decode", "tpot")):
        pts = [p for p in points if p["phase"] == ph]
        sp = [p["time_ms"]["ua"] / p["time_ms"]["nap_nar"] for p in pts]
        out[f"{key}_reduction_geomean"] = 1 - 1 / _geo(sp) if sp else float("nan")
        out[f"{key}_reduction_max"] = max((p["reduction"] for p in pts), default=float("nan"))
        comm = lambda s: sum(s[k] for k in SPLIT_KINDS)
        cs = [comm(p["split_ms"]["ua"]) / comm(p["split_ms"]["nap_nar"]) for p in pts
              if comm(p["split_ms"]["nap_nar"]) > 0]
        out[f"comm_speedup_{ph}"] = _geo(cs)
        ratio = [p["split_ms"]["ua"]["compute"] / comm(p["split_ms"]["ua"]) for p in pts
                 if comm(p["split_ms"]["ua"]) > 0]
        out[f"compute_to_comm_{ph}"] = _geo(ratio)
        out[f"points_{ph}"] = len(pts)
        out[f"points_with_comm_{ph}"] = len(cs)
    for k in SPLIT_KINDS:
        xs = [p["split_ms"]["ua"][k] / p["split_ms"]["nap_nar"][k] for p in points
              if p["split_ms"]["nap_nar"][k] > 0]
        out[f"{k}_speedup"] = _geo(xs)
    for p in points:
        if p["model"] == "llama-70b" and p["n_gpus"] == 64:
            out.setdefault("llama70b_64gpu", {})[p["phase"]] = {"config": p["config"],
                                                                 "reduction": p["reduction"]}
    return out
