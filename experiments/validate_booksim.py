"""Validate ``nuna-jax noc`` against BookSim2 (docs/noc.md "Validation").

Runs both tools on the same BookSim2 configuration files -- the two shipped beside the binary
(``mesh88_uniform.cfg``: 8x8 mesh, uniform, 1-flit packets, BookSim2 defaults; ``mesh88_lat.cfg``:
transpose, 20-flit packets, 8 VCs, credit delay 2, input speedup 2, wait for tail credit) -- at
injection rates up to and past saturation, at two VC buffer depths, each point averaged over
the seeds given (``seed=S`` for both tools).  Writes experiments/out/validate_booksim.json and
docs/img/noc_validate_booksim.png.  BookSim2's raw numbers are cached in
experiments/out/booksim_raw.json (keyed by configuration, overrides and seed), so a rerun after
a change to the model only reruns nuna-jax; ``--fresh`` ignores the cache.

    python experiments/validate_booksim.py [--booksim PATH] [--seeds 0,1,2,3] [--quick]

Without the binary (CI) it says so and exits 0, leaving the committed JSON as the record.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "experiments" / "out" / "validate_booksim.json"
RAW = ROOT / "experiments" / "out" / "booksim_raw.json"
PLOT = ROOT / "docs" / "img" / "noc_validate_booksim.png"

#: configuration file -> injection rates (BookSim2's unit: packets per node per cycle)
SWEEPS = {
    "mesh88_uniform.cfg": [0.05, 0.15, 0.25, 0.32, 0.38, 0.42, 0.46],
    "mesh88_lat.cfg": [0.001, 0.003, 0.005, 0.006, 0.007, 0.008, 0.010],
}
BUFFERS = (8, 4)
#: seeds per configuration (each point is the mean over them, for both tools).  The transpose
#: configuration's latency close to saturation varies far more from seed to seed (BookSim2 alone:
#: 72-93 cycles over 8 seeds at 0.006; the realized offered load of a run varies by ~2 %, and 84 %
#: of saturation turns that into ~10 % of latency), so it gets 24 seeds; its BookSim2 runs are short.
SEEDS = {"mesh88_uniform.cfg": list(range(4)), "mesh88_lat.cfg": list(range(24))}


def find_booksim() -> Path | None:
    env = os.environ.get("NUNA_JAX_BOOKSIM")
    cands = [Path(env)] if env else []
    cands += [ROOT / "shared" / "tools" / "booksim2" / "booksim", ROOT.parent / "shared" / "tools" / "booksim2" / "booksim",
              Path("/work/shared/tools/booksim2/booksim")]
    for c in cands:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    return None


_KEYS = {"packet_latency_avg_cycles": "Packet latency average", "network_latency_avg_cycles": "Network latency average",
         "accepted_flit_rate": "Accepted flit rate average", "hops_avg": "Hops average"}


def parse_booksim(text: str) -> dict:
    """The last value of each statistic BookSim2 printed (the overall one after a stable run,
    the last sample period's after "Simulation unstable")."""
    out = {}
    for k, label in _KEYS.items():
        vals = re.findall(re.escape(label) + r" ?= ([-+0-9.eE]+|nan|-?inf)", text)
        out[k] = float(vals[-1]) if vals else float("nan")
    m = re.findall(r"Time taken is (\d+) cycles", text)
    m2 = re.findall(r"Time used is (\d+) cycles", text)
    out["cycles"] = int(m[-1]) if m else (int(m2[-1]) if m2 else 0)
    mins = re.findall(r"Packet latency average ?= [^\n]*\n\s*minimum = ([-+0-9.eE]+)", text)
    out["packet_latency_min_cycles"] = float(mins[-1]) if mins else float("nan")
    out["unstable"] = "unstable" in text.lower() or "Aborting simulation" in text
    return out


def run_booksim(binary: Path, cfg: Path, overrides: list[str]) -> dict:
    t0 = time.perf_counter()
    r = subprocess.run([str(binary), str(cfg), *overrides], capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    if r.returncode not in (0, 255):
        raise RuntimeError(f"booksim {cfg.name} {' '.join(overrides)} exited {r.returncode}: {r.stderr[-300:]}")
    out = parse_booksim(r.stdout)
    out["wall_s"] = wall
    from nuna_jax.noc import load_config
    nodes = load_config(cfg, overrides).nodes
    out["flit_hops"] = out["cycles"] * nodes * out["accepted_flit_rate"] * out["hops_avg"] if out["cycles"] else 0.0
    return out


def run_nuna(cfg: Path, overrides: list[str], seed: int) -> dict:
    from nuna_jax.noc.sim import simulate_noc
    return dict(simulate_noc(path=cfg, overrides=overrides, seed=seed))


def _mean(rows, key):
    vals = [r[key] for r in rows]
    return sum(vals) / len(vals)


def saturation(points: list[dict], tool: str, t0: float) -> dict:
    """Injection rate and accepted flit rate where the average packet latency crosses 3 x the
    zero-load latency (linear interpolation between the bracketing sweep points; an unstable
    point counts as past it)."""
    thr = 3.0 * t0
    prev = None
    for p in points:
        lat = p[tool]["packet_latency_avg_cycles"]
        past = p[tool]["unstable"] or lat > thr
        if past:
            if prev is None:
                return {"injection_rate": p["injection_rate"], "accepted_flit_rate": p[tool]["accepted_flit_rate"],
                        "bracket": [p["injection_rate"], p["injection_rate"]]}
            l0, l1 = prev[tool]["packet_latency_avg_cycles"], (lat if not p[tool]["unstable"] else max(lat, thr))
            f = (thr - l0) / (l1 - l0) if l1 > l0 else 1.0
            f = min(max(f, 0.0), 1.0)
            a0, a1 = prev[tool]["accepted_flit_rate"], p[tool]["accepted_flit_rate"]
            r0, r1 = prev["injection_rate"], p["injection_rate"]
            return {"injection_rate": r0 + f * (r1 - r0), "accepted_flit_rate": a0 + f * (a1 - a0),
                    "bracket": [r0, r1]}
        prev = p
    return {"injection_rate": None, "accepted_flit_rate": None, "bracket": None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--booksim", default=None, help="the BookSim2 binary (default: ../shared/tools/booksim2/booksim)")
    ap.add_argument("--seeds", default=None, help="comma-separated seeds for every configuration (default: SEEDS)")
    ap.add_argument("--quick", action="store_true", help="one seed, first buffer depth, 3 rates per config")
    ap.add_argument("--fresh", action="store_true", help="rerun BookSim2 even where its cached numbers exist")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--table", action="store_true", help="print the committed JSON as the docs' markdown table")
    a = ap.parse_args(argv)
    if a.table:
        print(markdown_table(json.loads(Path(a.out).read_text())))
        return 0
    binary = Path(a.booksim) if a.booksim else find_booksim()
    if binary is None or not binary.is_file():
        print("validate_booksim: BookSim2 binary not found (../shared/tools/booksim2/booksim); "
              f"the committed {OUT.relative_to(ROOT)} is the record")
        return 0
    cfgdir = binary.parent / "configs"
    seeds_of = {k: ([int(s) for s in a.seeds.split(",")] if a.seeds else v) for k, v in SEEDS.items()}
    bufs = BUFFERS
    sweeps = SWEEPS
    if a.quick:
        seeds_of, bufs = {k: v[:1] for k, v in seeds_of.items()}, BUFFERS[:1]
        sweeps = {k: v[::3] for k, v in SWEEPS.items()}
    raw = {} if a.fresh or not RAW.exists() else json.loads(RAW.read_text())
    from nuna_jax.noc import load_config, zero_load_latency
    results = []
    for cfgname, rates in sweeps.items():
        cfg = cfgdir / cfgname
        seeds = seeds_of[cfgname]
        for buf in bufs:
            base = [f"vc_buf_size={buf}"]
            t_model = zero_load_latency(load_config(cfg, base))
            points = []
            for rate in rates:
                ov = base + [f"injection_rate={rate}"]
                bs_rows, nj_rows = [], []
                for seed in seeds:
                    key = f"{cfgname}|{' '.join(ov)}|seed={seed}"
                    if key not in raw:
                        raw[key] = run_booksim(binary, cfg, ov + [f"seed={seed}"])
                        RAW.write_text(json.dumps(raw, indent=1, sort_keys=True))
                    bs_rows.append(raw[key])
                    nj_rows.append(run_nuna(cfg, ov, seed))
                pt = {"injection_rate": rate}
                for tool, rows in (("booksim", bs_rows), ("nuna_jax", nj_rows)):
                    pt[tool] = {k: _mean(rows, k) for k in ("packet_latency_avg_cycles", "network_latency_avg_cycles",
                                                            "accepted_flit_rate", "hops_avg", "cycles", "wall_s")}
                    pt[tool]["unstable"] = any(r["unstable"] for r in rows)
                    pt[tool]["per_seed_latency"] = [r["packet_latency_avg_cycles"] for r in rows]
                    pt[tool]["packet_latency_min_cycles"] = min(r.get("packet_latency_min_cycles", float("nan"))
                                                                for r in rows)
                bl, nl = pt["booksim"]["packet_latency_avg_cycles"], pt["nuna_jax"]["packet_latency_avg_cycles"]
                pt["latency_rel_err"] = (nl - bl) / bl
                ba, na = pt["booksim"]["accepted_flit_rate"], pt["nuna_jax"]["accepted_flit_rate"]
                pt["accepted_rel_err"] = (na - ba) / ba if ba else None
                pt["below_saturation_raw"] = bool(not pt["booksim"]["unstable"] and not pt["nuna_jax"]["unstable"])
                print(f"{cfgname} buf={buf} rate={rate}: latency booksim {bl:.2f} nuna-jax {nl:.2f} "
                      f"({100 * pt['latency_rel_err']:+.1f}%), accepted {ba:.4f} / {na:.4f}", flush=True)
                points.append(pt)
            # the latency of an uncontended packet (its minimum at the lowest rate) must be equal in cycles;
            # the saturation threshold is 3 x BookSim2's average latency at the lowest rate, for both tools
            t0 = points[0]["booksim"]["packet_latency_avg_cycles"]
            for p in points:
                p["below_saturation"] = bool(p["below_saturation_raw"] and max(
                    p["booksim"]["packet_latency_avg_cycles"], p["nuna_jax"]["packet_latency_avg_cycles"]) <= 3 * t0)
                del p["below_saturation_raw"]
            sat = {tool: saturation(points, tool, t0) for tool in ("booksim", "nuna_jax")}
            bsat, nsat = sat["booksim"]["accepted_flit_rate"], sat["nuna_jax"]["accepted_flit_rate"]
            low = points[0]
            results.append({
                "config": cfgname, "vc_buf_size": buf, "seeds": seeds,
                "zero_load_latency_cycles": t0, "zero_load_definition": "BookSim2's average latency at the lowest rate",
                "model_pipeline_zero_load_cycles": t_model,
                "uncontended_packet_latency_cycles": {"booksim": low["booksim"]["packet_latency_min_cycles"],
                                                      "nuna_jax": low["nuna_jax"]["packet_latency_min_cycles"]},
                "lowest_rate_latency": {"booksim": low["booksim"]["packet_latency_avg_cycles"],
                                        "nuna_jax": low["nuna_jax"]["packet_latency_avg_cycles"]},
                "points": points, "saturation": sat,
                "saturation_rel_err": (nsat - bsat) / bsat if bsat and nsat else None,
                "max_latency_rel_err_below_saturation": max(
                    (abs(p["latency_rel_err"]) for p in points if p["below_saturation"]), default=None),
            })
    doc = {"booksim": str(binary), "booksim_commit": "28f4329", "criteria": {
        "latency_below_saturation": 0.05, "saturation_throughput": 0.05,
        "saturation_definition": "accepted flit rate where the average packet latency crosses 3 x zero-load "
                                 "(linear interpolation between sweep points)"},
        "results": results}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {a.out}")
    if not a.no_plot:
        plot(doc, PLOT)
        print(f"wrote {PLOT}")
    return 0


def markdown_table(doc: dict) -> str:
    """The docs' table (docs/noc.md "Validation against BookSim2")."""
    lines = ["| configuration | buffer | rate (pkt/node/cycle) | BookSim2 latency | nuna-jax latency | error | "
             "BookSim2 accepted | nuna-jax accepted | error |", "|---|---|---|---|---|---|---|---|---|"]
    for r in doc["results"]:
        for p in r["points"]:
            b, n = p["booksim"], p["nuna_jax"]
            mark = "" if p["below_saturation"] else " (past saturation)"
            acc = f"{100 * p['accepted_rel_err']:+.1f} %" if p["accepted_rel_err"] is not None else "-"
            lines.append(f"| {r['config']} | {r['vc_buf_size']} | {p['injection_rate']:g}{mark} | "
                         f"{b['packet_latency_avg_cycles']:.2f}{' U' if b['unstable'] else ''} | "
                         f"{n['packet_latency_avg_cycles']:.2f}{' U' if n['unstable'] else ''} | "
                         f"{100 * p['latency_rel_err']:+.1f} % | {b['accepted_flit_rate']:.4f} | "
                         f"{n['accepted_flit_rate']:.4f} | {acc} |")
    lines += ["", "| configuration | buffer | uncontended packet BookSim2 / nuna-jax (cycles) | average at the lowest rate "
              "BookSim2 / nuna-jax | "
              "saturation throughput BookSim2 | nuna-jax | error | worst latency error below saturation |",
              "|---|---|---|---|---|---|---|---|"]
    for r in doc["results"]:
        s = r["saturation"]
        bs, ns = s["booksim"]["accepted_flit_rate"], s["nuna_jax"]["accepted_flit_rate"]
        err = f"{100 * r['saturation_rel_err']:+.1f} %" if r["saturation_rel_err"] is not None else "-"
        worst = r["max_latency_rel_err_below_saturation"]
        u = r["uncontended_packet_latency_cycles"]
        lines.append(f"| {r['config']} | {r['vc_buf_size']} | {u['booksim']:g} / {u['nuna_jax']:g} | "
                     f"{r['lowest_rate_latency']['booksim']:.2f} / {r['lowest_rate_latency']['nuna_jax']:.2f} | "
                     f"{bs if bs is None else f'{bs:.4f}'} | {ns if ns is None else f'{ns:.4f}'} | {err} | "
                     f"{'-' if worst is None else f'{100 * worst:.1f} %'} |")
    return "\n".join(lines)


def plot(doc: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    res = doc["results"]
    cfgs = sorted({r["config"] for r in res})
    fig, axes = plt.subplots(1, len(cfgs), figsize=(6 * len(cfgs), 4.2), squeeze=False)
    for ax, cfgname in zip(axes[0], cfgs):
        for r in (x for x in res if x["config"] == cfgname):
            xs = [p["booksim"]["accepted_flit_rate"] for p in r["points"]]
            for tool, style in (("booksim", "o-"), ("nuna_jax", "x--")):
                xs = [p[tool]["accepted_flit_rate"] for p in r["points"]]
                ys = [p[tool]["packet_latency_avg_cycles"] for p in r["points"]]
                ax.plot(xs, ys, style, label=f"{tool.replace('_', '-')} buf {r['vc_buf_size']}")
                s = r["saturation"][tool]["accepted_flit_rate"]
                if s:
                    ax.axvline(s, color="grey", lw=0.6, ls=":")
            ax.axhline(3 * r["zero_load_latency_cycles"], color="red", lw=0.6, ls=":")
        ax.set_ylim(0, 6 * max(x["zero_load_latency_cycles"] for x in res if x["config"] == cfgname))
        ax.set_title(cfgname)
        ax.set_xlabel("accepted flit rate (flits/node/cycle)")
        ax.set_ylabel("average packet latency (cycles)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
