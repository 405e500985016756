"""Latency-vs-load sweeps for ``nuna-jax noc --sweep-rate`` (docs/noc.md)."""

from __future__ import annotations

import math

__all__ = ["parse_rate_range", "saturation_point", "sweep_figure"]


def parse_rate_range(text: str) -> list[float]:
    """``START:STOP:STEP`` (injection rates, BookSim2's unit), STOP included when on the grid."""
    parts = str(text).split(":")
    if len(parts) != 3:
        raise ValueError(f"--sweep-rate {text!r}: want START:STOP:STEP")
    try:
        a, b, s = (float(x) for x in parts)
    except ValueError:
        raise ValueError(f"--sweep-rate {text!r}: START, STOP and STEP must be numbers") from None
    if not all(math.isfinite(x) for x in (a, b, s)):
        raise ValueError(f"--sweep-rate {text!r}: the numbers must be finite")
    if not 0.0 <= a <= b <= 1.0:
        raise ValueError(f"--sweep-rate {text!r}: want 0 <= START <= STOP <= 1 (injection_rate)")
    if s <= 0:
        raise ValueError(f"--sweep-rate {text!r}: STEP must be > 0")
    n = int(math.floor((b - a) / s + 1e-9)) + 1
    from ..limits import active
    active().check("axis_values", n, f"--sweep-rate {text}")
    if n > 200:
        raise ValueError(f"--sweep-rate {text!r}: {n} rates; at most 200 simulations per sweep")
    return [round(a + i * s, 12) for i in range(n)]


def saturation_point(rows: list[dict], zero_load: float) -> dict | None:
    """Where the average packet latency crosses 3 x ``zero_load`` (linear interpolation between the
    bracketing rows; an unstable row counts as past it): injection rate and accepted flit rate."""
    thr = 3.0 * zero_load
    prev = None
    for r in rows:
        lat = r["packet_latency_avg_cycles"]
        past = r["unstable"] or (lat is not None and lat > thr)
        if past:
            if prev is None:
                return {"injection_rate": r["injection_rate"], "accepted_flit_rate": r["accepted_flit_rate"]}
            l0 = prev["packet_latency_avg_cycles"]
            l1 = max(lat if lat is not None else thr, thr)
            f = min(max((thr - l0) / (l1 - l0), 0.0), 1.0) if l1 > l0 else 1.0
            return {"injection_rate": prev["injection_rate"] + f * (r["injection_rate"] - prev["injection_rate"]),
                    "accepted_flit_rate": prev["accepted_flit_rate"]
                    + f * (r["accepted_flit_rate"] - prev["accepted_flit_rate"])}
        if lat is not None:
            prev = r
    return None


def sweep_figure(rows: list[dict], zero_load: float, sat: dict | None, title: str):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4.2))
    xs = [r["injection_rate"] for r in rows if r["packet_latency_avg_cycles"] is not None]
    ys = [r["packet_latency_avg_cycles"] for r in rows if r["packet_latency_avg_cycles"] is not None]
    ax.plot(xs, ys, "o-", label="average packet latency")
    ax.axhline(zero_load, color="grey", lw=0.7, ls=":", label=f"zero load {zero_load:.2f} cycles")
    ax.axhline(3 * zero_load, color="red", lw=0.7, ls=":", label="3 x zero load")
    if sat:
        ax.axvline(sat["injection_rate"], color="red", lw=1.0,
                   label=f"saturation: rate {sat['injection_rate']:.4g}, accepted {sat['accepted_flit_rate']:.4g} flits")
    ax.set_ylim(0, max(6 * zero_load, min(max(ys, default=1), 12 * zero_load)) * 1.05)
    ax.set_xlabel("injection rate (packets/node/cycle)")
    ax.set_ylabel("average packet latency (cycles)")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
