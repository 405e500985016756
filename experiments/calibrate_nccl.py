"""Fit the closed form's alpha and beta to measured collectives (docs/multi_gpu.md).

Input: a JSON of ``benchmarks/bench_collectives.py`` (rows ``collective, n_devices, size_bytes,
time_us``; ``size_bytes`` is nccl-tests' S, which is also the closed form's ``n``: the gathered
output for All-Gather, the full vector for Reduce-Scatter and All-Reduce, what one device sends
for All-to-All -- nuna_jax/models/collectives.py).

Model: ``models.collectives.cost_ns(collective, algorithm, p, n, alpha, beta, gamma=0)``, the
closed form of Thakur, Rabenseifner and Gropp (../shared/reference/collective-formulas.md), not
re-derived here: it is linear in (alpha, beta), so its two unit responses
``u = cost_ns(.., alpha=1, beta=0)`` (rounds) and ``v = cost_ns(.., alpha=0, beta=1)`` (bytes on
the bottleneck) are the columns of a linear fit ``t = alpha u + beta v``.  The reduction term
gamma multiplies the same bytes as beta for Reduce-Scatter and ring All-Reduce, so a fit over
sizes cannot separate them: beta of RS / AR is an effective one (gamma folded in), gamma = 0.

Fit: per (collective, device count) and pooled per device count (one alpha, beta for all four
collectives), least squares on the *relative* residual ``(alpha u + beta v - t) / t`` (sizes span
six decades; every size weighs alike), alpha, beta >= 0 (exact 2-variable NNLS).  Sizes sorted;
the even-indexed ones (1st, 3rd, ...) fit, the odd-indexed ones (alternate sizes) are held out.
Errors on the held-out sizes: ``geomean`` = geometric mean of ``|t_model / t_measured - 1|``
(floored at 1e-6), ``mean`` and ``worst`` (max) of the same; the target: geomean <= 8%.

    python experiments/calibrate_nccl.py RESULTS.json [--algorithm ring | all_reduce=tree,...]
        [--out experiments/data/nccl_calibration.json] [--plot PNG]
    python experiments/calibrate_nccl.py --synthetic OUT.json [--alpha-ns 8000] [--bw-GBps 360]
        [--noise 0.02] [--devices 2,4,8] [--seed 0]       # a test input from known alpha, beta

Output JSON: per-group fits (``alpha_ns``, ``beta_ns_per_byte``, ``bw_GBps = 1/beta``,
``latency_ns`` = alpha x rounds, train / held-out errors), the overall held-out error, and
``preset_proposal``: the System overrides that make the closed form of a preset reproduce the
pooled fit at the largest device count (:func:`preset_proposal`; docs/multi_gpu.md says how it
becomes a preset in nuna_jax/presets.py).  The plot: time against size per collective, measured
(fitted: filled, held out: open) and modelled (lines), one colour per device count.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")
DEFAULT_ALGORITHM = "ring"   # NCCL's default on one NVLink node for AG / RS / AR; All-to-All is pairwise (= ring here)
ERROR_FLOOR = 1e-6
TARGET_GEOMEAN = 0.08

__all__ = ["load_results", "unit_terms", "fit_alpha_beta", "split_alternate", "errors", "calibrate",
           "preset_proposal", "synthetic_results", "plot", "main"]


# ---------------------------------------------------------------------------------------------
def load_results(path) -> dict:
    """The JSON of bench_collectives.py, rows checked (``ValueError`` naming the row and field)."""
    p = Path(path)
    try:
        d = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{p}: cannot read a JSON file ({e})") from None
    rows = d.get("results") if isinstance(d, dict) else None
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{p}: no 'results' list (expected the JSON of benchmarks/bench_collectives.py)")
    for i, r in enumerate(rows):
        for key in ("collective", "n_devices", "size_bytes", "time_us"):
            if not isinstance(r, dict) or key not in r:
                raise ValueError(f"{p}: results[{i}] has no {key!r}")
        if r["collective"] not in COLLECTIVES:
            raise ValueError(f"{p}: results[{i}].collective {r['collective']!r} is not one of {', '.join(COLLECTIVES)}")
        if not (isinstance(r["n_devices"], int) and r["n_devices"] >= 1):
            raise ValueError(f"{p}: results[{i}].n_devices must be an integer >= 1, got {r['n_devices']!r}")
        for key in ("size_bytes", "time_us"):
            v = r[key]
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"{p}: results[{i}].{key} must be a positive finite number, got {v!r}")
    return d


def parse_algorithms(text: str | None) -> dict:
    """``ring`` (every collective) or ``all_reduce=tree,all_gather=ring`` (the rest: the default)."""
    from nuna_jax.models.collectives import ALGORITHMS, algorithm_code
    out = dict.fromkeys(COLLECTIVES, DEFAULT_ALGORITHM)
    if not text:
        return out
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        coll, eq, alg = part.partition("=")
        if not eq:
            coll, alg = None, part
        try:
            alg = ALGORITHMS[algorithm_code(alg.strip())]
        except ValueError as e:
            raise ValueError(f"--algorithm: {e}") from None
        if coll is None:
            out = dict.fromkeys(COLLECTIVES, alg)
        elif coll.strip() in out:
            out[coll.strip()] = alg
        else:
            raise ValueError(f"--algorithm: unknown collective {coll!r}; one of {', '.join(COLLECTIVES)}")
    for c, alg in out.items():
        if alg == "tree" and c != "all_reduce":
            raise ValueError(f"--algorithm: tree exists for all_reduce only, not {c}")
    return out


def unit_terms(collective: str, algorithm: str, p: int, sizes) -> tuple[np.ndarray, np.ndarray]:
    """``(u, v)``: the closed form's time per unit alpha (rounds) and per unit beta (bytes), float64."""
    from nuna_jax.models.collectives import cost_ns
    n = np.asarray(sizes, np.float64)
    u = np.asarray(cost_ns(collective, algorithm, p, n, 1.0, 0.0, 0.0), np.float64)
    v = np.asarray(cost_ns(collective, algorithm, p, n, 0.0, 1.0, 0.0), np.float64)
    return u, v


def fit_alpha_beta(t, u, v) -> tuple[float, float]:
    """``argmin_{alpha, beta >= 0} sum(((alpha u + beta v) - t) / t)^2`` (exact: the unconstrained
    2x2 solution if it is non-negative, else the better of the two one-variable fits)."""
    t, u, v = (np.asarray(x, np.float64) for x in (t, u, v))
    A = np.stack([u / t, v / t], axis=1)
    y = np.ones_like(t)

    def loss(x):
        return float(np.sum((A @ x - y) ** 2))

    cands = []
    x, *_ = np.linalg.lstsq(A, y, rcond=None)
    if (x >= 0).all():
        cands.append(x)
    for j in (0, 1):
        col = A[:, j]
        den = float(col @ col)
        x1 = np.zeros(2)
        x1[j] = max(0.0, float(col @ y) / den) if den > 0 else 0.0
        cands.append(x1)
    best = min(cands, key=loss)
    return float(best[0]), float(best[1])


def split_alternate(sizes) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the fitted (even rank in size order) and held-out (odd rank) sizes."""
    order = np.argsort(np.asarray(sizes), kind="stable")
    return order[0::2], order[1::2]


def errors(pred, meas) -> dict:
    """``|pred / meas - 1|``: geometric mean (floored at 1e-6), mean, worst; and the count."""
    e = np.abs(np.asarray(pred, np.float64) / np.asarray(meas, np.float64) - 1.0)
    if e.size == 0:
        return {"n": 0, "geomean": None, "mean": None, "worst": None}
    return {"n": int(e.size), "geomean": float(np.exp(np.mean(np.log(np.maximum(e, ERROR_FLOOR))))),
            "mean": float(e.mean()), "worst": float(e.max())}


def _fit_group(rows: list, algs: dict) -> dict:
    """One (alpha, beta) for ``rows`` (one device count; one or several collectives)."""
    p = rows[0]["n_devices"]
    t = np.asarray([r["time_us"] * 1e3 for r in rows])
    n = np.asarray([r["size_bytes"] for r in rows], np.float64)
    u, v = np.zeros_like(t), np.zeros_like(t)
    colls = sorted({r["collective"] for r in rows})
    tr_i, te_i = [], []
    for c in colls:
        idx = np.asarray([i for i, r in enumerate(rows) if r["collective"] == c])
        u[idx], v[idx] = unit_terms(c, algs[c], p, n[idx])
        a, b = split_alternate(n[idx])
        tr_i.append(idx[a])
        te_i.append(idx[b])
    tr, te = np.concatenate(tr_i), np.concatenate(te_i)
    alpha, beta = fit_alpha_beta(t[tr], u[tr], v[tr])
    pred = alpha * u + beta * v
    return {"n_devices": p, "collectives": colls, "algorithm": {c: algs[c] for c in colls},
            "alpha_ns": alpha, "beta_ns_per_byte": beta, "bw_GBps": (1.0 / beta) if beta > 0 else None,
            "latency_ns": {c: alpha * float(unit_terms(c, algs[c], p, [1.0])[0][0]) for c in colls},
            "train": errors(pred[tr], t[tr]), "held_out": errors(pred[te], t[te]),
            "_pred": pred, "_t": t, "_te": te}


def calibrate(d: dict, algs: dict | None = None) -> dict:
    """Fits per (collective, device count) and pooled per device count; held-out errors."""
    algs = algs or parse_algorithms(None)
    rows = [r for r in d["results"] if r["n_devices"] >= 2]     # one device: nothing moves, nothing to fit
    counts = sorted({r["n_devices"] for r in rows})
    per, pooled, held_pred, held_meas = [], [], [], []
    for p in counts:
        rp = [r for r in rows if r["n_devices"] == p]
        for c in COLLECTIVES:
            rc = [r for r in rp if r["collective"] == c]
            if len(rc) < 3:
                continue                       # 2 parameters: at least 2 fitted + 1 held-out size
            g = _fit_group(rc, algs)
            held_pred.append(g["_pred"][g["_te"]])
            held_meas.append(g["_t"][g["_te"]])
            per.append(g)
        if len({r["collective"] for r in rp}) > 1:
            pooled.append(_fit_group(rp, algs))
    if not per:
        raise ValueError("no (collective, device count) with at least 3 sizes to fit")
    overall = errors(np.concatenate(held_pred), np.concatenate(held_meas))
    out = {"algorithm": algs, "per_collective": per, "pooled": pooled, "held_out_overall": overall,
           "target_geomean": TARGET_GEOMEAN,
           "meets_target": overall["geomean"] is not None and overall["geomean"] <= TARGET_GEOMEAN}
    return out


def _public(g: dict) -> dict:
    return {k: v for k, v in g.items() if not k.startswith("_")}


# ---------------------------------------------------------------------------------------------
def preset_proposal(alpha_ns: float, beta_ns_per_byte: float, n_gpus: int, base: str = "mono",
                    n_io_ports: int | None = None) -> dict:
    """System overrides of preset ``base`` whose closed form has this alpha (stat "mean") and beta.

    beta = 1 / (n_io_ports * port_bw) (``collectives.alpha_beta_gamma``), so ``port_bw =
    1 / (n_io_ports * beta)``; alpha = the mean zero-load transfer latency, which adds the switch
    crossing once, so ``switch_latency_ns = alpha - alpha_ns(system with switch_latency_ns = 0)``:
    the fitted alpha's software share (NCCL launch, synchronisation) lands in the switch term.
    ``ValueError`` if the fitted alpha is below the socket's own path latency."""
    from nuna_jax.models.collectives import alpha_beta_gamma, alpha_ns as alpha_of
    from nuna_jax.presets import preset
    if not (alpha_ns > 0 and beta_ns_per_byte > 0):
        raise ValueError(f"alpha_ns and beta_ns_per_byte must be > 0, got {alpha_ns}, {beta_ns_per_byte}")
    s0 = preset(base, n_gpus=int(n_gpus))
    ports = int(n_io_ports or s0.n_io_ports)
    port_bw = 1.0 / (ports * float(beta_ns_per_byte))
    on_chip = float(alpha_of(preset(base, n_gpus=int(n_gpus), n_io_ports=ports, port_bw_bytes_per_ns=port_bw,
                                    switch_latency_ns=0.0), "mean"))
    sw = float(alpha_ns) - on_chip
    if sw < 0:
        raise ValueError(f"fitted alpha {alpha_ns:.1f} ns is below the {base} socket's on-chip path latency "
                         f"{on_chip:.1f} ns: no switch latency >= 0 reproduces it")
    over = {"n_gpus": int(n_gpus), "n_io_ports": ports, "port_bw_bytes_per_ns": port_bw, "switch_latency_ns": sw}
    s = preset(base, **over)
    a, b, _ = alpha_beta_gamma(s, "mean")
    return {"base": base, "overrides": over, "on_chip_alpha_ns": on_chip,
            "check": {"alpha_ns": float(a), "beta_ns_per_byte": float(b)}}


# ---------------------------------------------------------------------------------------------
def synthetic_results(alpha_ns, bw_GBps, counts=(2, 4, 8), sizes=None, noise: float = 0.02, seed: int = 0,
                      algorithm: str = DEFAULT_ALGORITHM) -> dict:
    """A bench_collectives-shaped JSON from known parameters: ``time = cost_ns(.., alpha, 1/bw) x
    exp(noise N(0, 1))``.  ``alpha_ns`` / ``bw_GBps``: a number or a dict per collective."""
    from nuna_jax.models.collectives import cost_ns
    rng = np.random.default_rng(seed)
    sizes = [2**k for k in range(10, 31)] if sizes is None else list(sizes)
    rows = []
    for p in counts:
        for c in COLLECTIVES:
            a = alpha_ns[c] if isinstance(alpha_ns, dict) else alpha_ns
            bw = bw_GBps[c] if isinstance(bw_GBps, dict) else bw_GBps
            t_ns = np.asarray(cost_ns(c, algorithm, p, np.asarray(sizes, np.float64), float(a), 1.0 / float(bw), 0.0),
                              np.float64) * np.exp(noise * rng.standard_normal(len(sizes)))
            rows += [{"collective": c, "n_devices": int(p), "size_bytes": int(S), "time_us": float(t) / 1e3}
                     for S, t in zip(sizes, t_ns)]
    return {"info": {"synthetic": True, "device_kind": "synthetic", "generator": {
        "alpha_ns": alpha_ns, "bw_GBps": bw_GBps, "noise": noise, "seed": seed, "algorithm": algorithm,
        "counts": list(counts)}}, "results": rows}


def plot(d: dict, cal: dict, path) -> tuple:
    """Measured (fitted: filled circles, held out: open squares) and modelled (lines) time against
    size, one panel per collective, one colour per device count; PNG + PDF (plots.save)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from nuna_jax.plots.save import save_figure
    fig, axes = plt.subplots(2, 2, figsize=(11, 8), sharex=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fits = {(g["collectives"][0], g["n_devices"]): g for g in cal["per_collective"]}
    counts = sorted({r["n_devices"] for r in d["results"] if r["n_devices"] >= 2})
    for ax, c in zip(axes.ravel(), COLLECTIVES):
        for j, p in enumerate(counts):
            g = fits.get((c, p))
            rows = [r for r in d["results"] if r["collective"] == c and r["n_devices"] == p]
            if not rows or g is None:
                continue
            col = colours[j % len(colours)]
            n = np.asarray([r["size_bytes"] for r in rows], np.float64)
            t = np.asarray([r["time_us"] for r in rows])
            tr, te = split_alternate(n)
            ax.loglog(n[tr], t[tr], "o", color=col, ms=4)
            ax.loglog(n[te], t[te], "s", color=col, ms=5, mfc="none")
            grid = np.geomspace(n.min(), n.max(), 200)
            u, v = unit_terms(c, g["algorithm"][c], p, grid)
            he = g["held_out"]["geomean"]
            ax.loglog(grid, (g["alpha_ns"] * u + g["beta_ns_per_byte"] * v) / 1e3, "-", color=col, lw=1,
                      label=f"p={p}: a={g['alpha_ns'] / 1e3:.2f} us, 1/b={g['bw_GBps'] or 0:.0f} GB/s, "
                            f"held-out {100 * he:.1f}%")
        ax.set_title(f"{c} ({cal['algorithm'][c]})")
        ax.set_ylabel("time per collective (us)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes[1]:
        ax.set_xlabel("size S (bytes, nccl-tests convention)")
    info = d.get("info", {})
    o = cal["held_out_overall"]
    fig.suptitle(f"{'SYNTHETIC input' if info.get('synthetic') else info.get('device_kind', '?')}: measured "
                 f"(o fitted, [] held out) vs closed form; held-out geomean {100 * o['geomean']:.2f}%, "
                 f"worst {100 * o['worst']:.1f}%", fontsize=10)
    fig.tight_layout()
    out = save_figure(fig, path, dpi=110)
    plt.close(fig)
    return out


# ---------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="?", help="JSON of benchmarks/bench_collectives.py")
    ap.add_argument("--algorithm", default=None, help="closed-form algorithm: one name or collective=name,... (default ring)")
    ap.add_argument("--out", default=str(ROOT / "experiments" / "data" / "nccl_calibration.json"))
    ap.add_argument("--plot", default=None, help="PNG path (default: --out with .png)")
    ap.add_argument("--base", default="mono", help="preset whose socket the proposal keeps (default mono)")
    ap.add_argument("--synthetic", default=None, metavar="OUT.json", help="write a synthetic input and exit")
    ap.add_argument("--alpha-ns", type=float, default=8000.0)
    ap.add_argument("--bw-GBps", type=float, default=360.0)
    ap.add_argument("--noise", type=float, default=0.02)
    ap.add_argument("--devices", default="2,4,8")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    try:
        if a.synthetic:
            counts = [int(v) for v in a.devices.split(",") if v.strip()]
            if not counts or min(counts) < 2 or a.alpha_ns <= 0 or a.bw_GBps <= 0 or a.noise < 0:
                raise ValueError("--synthetic needs --devices >= 2, --alpha-ns > 0, --bw-GBps > 0, --noise >= 0")
            d = synthetic_results(a.alpha_ns, a.bw_GBps, counts, noise=a.noise, seed=a.seed)
            Path(a.synthetic).parent.mkdir(parents=True, exist_ok=True)
            Path(a.synthetic).write_text(json.dumps(d, indent=1))
            print(f"wrote {a.synthetic} (synthetic: alpha {a.alpha_ns} ns, {a.bw_GBps} GB/s, noise {a.noise})")
            return 0
        if not a.results:
            raise ValueError("give the JSON of benchmarks/bench_collectives.py (or --synthetic OUT.json)")
        d = load_results(a.results)
        algs = parse_algorithms(a.algorithm)
        cal = calibrate(d, algs)
    except ValueError as e:
        print(f"calibrate_nccl: {e}", file=sys.stderr)
        return 2
    info = d.get("info", {})
    res = {"source": str(a.results), "info": info, "synthetic": bool(info.get("synthetic")),
           "algorithm": cal["algorithm"], "per_collective": [_public(g) for g in cal["per_collective"]],
           "pooled": [_public(g) for g in cal["pooled"]], "held_out_overall": cal["held_out_overall"],
           "target_geomean": cal["target_geomean"], "meets_target": cal["meets_target"],
           "split": "sizes sorted; even ranks fitted, odd ranks held out"}
    pool = max(cal["pooled"], key=lambda g: g["n_devices"]) if cal["pooled"] else None
    if pool is not None:
        try:
            res["preset_proposal"] = {"from": f"pooled fit, {pool['n_devices']} devices",
                                      **preset_proposal(pool["alpha_ns"], pool["beta_ns_per_byte"],
                                                        pool["n_devices"], base=a.base)}
        except ValueError as e:
            res["preset_proposal"] = {"error": str(e)}
        if res["synthetic"]:
            res["preset_proposal"]["warning"] = "SYNTHETIC input: not a measurement, never a preset"
    print(f"{'collective':>15s} {'p':>3s} {'alpha (ns)':>11s} {'1/beta (GB/s)':>14s} {'held-out geomean':>17s} {'worst':>7s}")
    for g in cal["per_collective"] + cal["pooled"]:
        name = g["collectives"][0] if len(g["collectives"]) == 1 else "pooled"
        h = g["held_out"]
        print(f"{name:>15s} {g['n_devices']:3d} {g['alpha_ns']:11.1f} {g['bw_GBps'] or 0:14.1f} "
              f"{100 * h['geomean']:16.2f}% {100 * h['worst']:6.1f}%")
    o = cal["held_out_overall"]
    print(f"held out, all per-collective fits: geomean {100 * o['geomean']:.2f}%, worst {100 * o['worst']:.1f}% "
          f"({o['n']} sizes; target geomean <= {100 * TARGET_GEOMEAN:.0f}%)")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    figs = plot(d, cal, a.plot or out.with_suffix(".png"))
    res["plot"] = [str(f) for f in figs]
    out.write_text(json.dumps(res, indent=1))
    print(f"wrote {out} and {', '.join(res['plot'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
