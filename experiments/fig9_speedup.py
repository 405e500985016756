"""NUNA Figure 9: speedup over UA of UA+NAR, NUMA+NAR and NAP+NAR for All-Gather,
All-Reduce and All-to-All, 100 kB .. 1 GB, 2 .. 64 GPUs -- from the analytical
path model (nuna_jax.models.contention, docs/analytical.md).

Writes results/fig9_speedup/fig9_speedup.{json,png} and a copy in experiments/out/.
The paper's stated numbers (text, sections 1, 6.1, 6.7) are drawn beside ours.
Each point keeps the best of a few threadblock counts (NUNA 5.1 evaluates "the
best-performing number of threadblocks"), per policy.  64 GPUs x sizes above
--max-size-64 are skipped (UA traffic there has 10^6-10^7 flows per try; too
slow on 2 cores for this sweep) and listed under "skipped" in the JSON.

    python experiments/fig9_speedup.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nuna_jax import preset  # noqa: E402
from nuna_jax.models.contention import evaluate  # noqa: E402
from nuna_jax.scenario import TBS_BEST_MULTIPLES, make_scenario  # noqa: E402
from nuna_jax.scenario import tbs_candidates as _library_tbs_candidates  # noqa: E402
from nuna_jax.plots.save import save_figure  # noqa: E402

NAME = "fig9_speedup"
POLICIES = ("UA", "UA+NAR", "NUMA+NAR", "NAP+NAR")
PAPER = {
    "nap_nar_max_speedup": 1.8,   # abstract, sections 1 and 8: "up to 1.8x"
    "nap_max_speedup": 1.5,       # abstract: "NAP optimizations alone offer up to 1.5x"
    "nar_alone_max_speedup": 1.35,  # section 1: "NAR alone can improve collective performance by up to 35%"
    "small_collectives_speedup_range": [1.5, 1.9],  # section 6.7: "collectives up to 1 MB speed up 1.5-1.9x"
    "speedup_at_64MB": 1.1,       # section 6.7: "decaying to 1.1x by 64 MB"
}


def tbs_candidates(g: int, mults) -> list[int]:
    """The library's ``--tbs best`` set (``scenario.tbs_candidates``) for these multiples of n - 1."""
    return list(_library_tbs_candidates(g, multiples=tuple(int(m) for m in mults)))


def best_over_tbs(s, collective: str, size: int, policy: str, cands) -> dict | None:
    """Estimate at each threadblock count in ``cands`` (NUNA 5.1: "the best-performing number of
    threadblocks"); the fastest one, with every tried count.  None if none can be placed."""
    best, tried = None, {}
    for tbs in cands:
        try:
            sc = make_scenario(s, collective=collective, size_bytes=size, policy=policy, tbs_per_gpu=tbs)
        except ValueError as e:  # e.g. more threadblocks than the CUs can hold
            tried[tbs] = f"not placeable: {str(e)[:80]}"
            continue
        r = evaluate(s, sc.traffic)
        tried[tbs] = r["time_ns"]
        if best is None or r["time_ns"] < best["time_ns"]:
            best = {**r, "tbs_per_gpu": tbs}
    if best is not None:
        best["tried"] = tried
    return best


def _case(case) -> tuple[list, list]:
    """Rows of one (collective, GPUs, size) point, every policy at its best count in ``cands``."""
    c, g, n, cands = case
    s = preset("table2", n_gpus=g)
    rows, skipped, base = [], [], None
    for pol in POLICIES:
        t0 = time.time()
        r = best_over_tbs(s, c, n, pol, cands)
        if r is None:
            skipped.append({"collective": c, "gpus": g, "size_bytes": n, "policy": pol,
                            "why": "no threadblock count could be placed"})
            continue
        if pol == "UA":
            base = r["time_ns"]
        if base is None:
            continue
        rows.append({"collective": c, "gpus": g, "size_bytes": n, "policy": pol,
                     "time_ns": r["time_ns"], "lower_bound_ns": r["lower_bound_ns"],
                     "speedup_over_ua": base / r["time_ns"], "tbs_per_gpu": r["tbs_per_gpu"],
                     "tried_tbs": {str(k): v for k, v in r["tried"].items()},
                     "bottleneck": r["breakdown"]["bottleneck"], "n_flows": r["n_flows"],
                     "seconds": time.time() - t0})
        print(f"{c:10s} {g:3d} GPUs {n:>11,d} B {pol:9s} {r['time_ns']:12.1f} ns "
              f"x{base / r['time_ns']:.3f} (tbs {r['tbs_per_gpu']}, {r['breakdown']['bottleneck']}, "
              f"{time.time() - t0:.1f}s)", flush=True)
    return rows, skipped


def main(argv=None) -> int:
    from nuna_jax import cache
    cache.use_scenarios(True)      # scenarios built once are read back on the next run (nuna_jax.cache)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a small grid (for smoke tests)")
    ap.add_argument("--max-size-64", type=float, default=1e6, help="largest size run at 64 GPUs (bytes)")
    ap.add_argument("--tbs-mults", default=",".join(str(m) for m in TBS_BEST_MULTIPLES),
                    help="threadblocks per GPU tried, as multiples of n_gpus - 1 (best one kept)")
    ap.add_argument("--jobs", type=int, default=1, help="points computed at once (processes)")
    ap.add_argument("--out", default=str(ROOT / "results" / NAME))
    a = ap.parse_args(argv)
    mults = [int(x) for x in a.tbs_mults.split(",")]
    colls = ("allgather", "allreduce", "alltoall")
    sizes = [10**5, 10**6, 10**7, 10**8, 10**9]
    gpus = [2, 8, 64]
    if a.quick:
        colls, sizes, gpus, mults = ("allgather",), [10**5, 10**7], [2, 8], [1]
    rows, skipped = [], []
    t_all = time.time()
    cases = []
    for g in gpus:
        cands = tbs_candidates(g, mults if g < 64 else mults[:2])
        for c in colls:
            for n in sizes:
                if g >= 64 and n > a.max_size_64:
                    skipped.append({"collective": c, "gpus": g, "size_bytes": n,
                                    "why": "64 GPUs above --max-size-64: 10^6-10^7 UA flows per try, "
                                           "too slow on 2 cores for this sweep"})
                    continue
                cases.append((c, g, n, tuple(cands)))
    cases.sort(key=lambda k: -k[1] * k[2])          # the largest first: the pool finishes together
    if a.jobs > 1:
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(a.jobs) as ex:
            done = list(ex.map(_case, cases))
    else:
        done = [_case(k) for k in cases]
    for r, sk in done:
        rows += r
        skipped += sk
    rows.sort(key=lambda r: (r["gpus"], r["collective"], r["size_bytes"], POLICIES.index(r["policy"])))
    out = {"figure": "NUNA Figure 9", "model": "analytical path model (estimate)", "system": "table2",
           "algorithm": "direct",
           "tbs_per_gpu": f"best of {{{', '.join(str(m) for m in mults)}}} x (n_gpus - 1) per point "
                          "(first two at 64 GPUs), as NUNA 5.1 uses the best-performing count",
           "policies": POLICIES, "rows": rows, "skipped": skipped, "paper": PAPER,
           "seconds": time.time() - t_all}
    write(out, Path(a.out), plot, NAME)
    return 0


def plot(out, png: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = out["rows"]
    colls = sorted({r["collective"] for r in rows}, key=["allgather", "allreduce", "alltoall"].index)
    gpus = sorted({r["gpus"] for r in rows})
    fig, axes = plt.subplots(len(colls), len(gpus), figsize=(4.2 * len(gpus), 3.2 * len(colls)),
                             squeeze=False, sharey=True)
    colors = {"UA+NAR": "tab:blue", "NUMA+NAR": "tab:orange", "NAP+NAR": "tab:green"}
    P = out["paper"]
    for i, c in enumerate(colls):
        for j, g in enumerate(gpus):
            ax = axes[i][j]
            for pol, col in colors.items():
                pts = sorted((r["size_bytes"], r["speedup_over_ua"]) for r in rows
                             if r["collective"] == c and r["gpus"] == g and r["policy"] == pol)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=col, label=f"{pol} (ours)")
            ax.axhline(1.0, color="k", lw=0.6)
            ax.axhline(P["nap_nar_max_speedup"], color="tab:green", ls="--", lw=0.8,
                       label="paper: NAP+NAR up to 1.8x")
            ax.axhline(P["nar_alone_max_speedup"], color="tab:blue", ls=":", lw=0.8,
                       label="paper: NAR alone up to 1.35x")
            ax.fill_between([1e5, 1e6], *P["small_collectives_speedup_range"], color="tab:green", alpha=0.12,
                            label="paper: <=1 MB 1.5-1.9x (6.7)")
            ax.plot([64e6], [P["speedup_at_64MB"]], "g*", ms=10, label="paper: ~1.1x by 64 MB (6.7)")
            ax.set_xscale("log")
            ax.set_title(f"{c}, {g} GPUs", fontsize=9)
            if i == len(colls) - 1:
                ax.set_xlabel("collective size (bytes)")
            if j == 0:
                ax.set_ylabel("speedup over UA")
    axes[0][0].legend(fontsize=6, loc="upper right")
    fig.suptitle("NUNA Fig. 9 (analytical model): speedup over UA", fontsize=10)
    fig.tight_layout()
    save_figure(fig, png, dpi=110)
    plt.close(fig)


def write(out: dict, outdir: Path, plotter, name: str) -> None:
    """JSON + PNG into ``outdir`` and copies into experiments/out/."""
    outdir.mkdir(parents=True, exist_ok=True)
    js, png = outdir / f"{name}.json", outdir / f"{name}.png"
    js.write_text(json.dumps(out, indent=1))
    plotter(out, png)
    copy = ROOT / "experiments" / "out"
    copy.mkdir(parents=True, exist_ok=True)
    shutil.copy(js, copy / js.name)
    shutil.copy(png, copy / png.name)
    print(f"wrote {js} and {png} (copies in {copy})")


if __name__ == "__main__":
    sys.exit(main())
