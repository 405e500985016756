"""Which hardware knob buys the most time: d(time)/d(parameter) and elasticities by ``jax.grad``.

For one collective (its traffic fixed: plan, placement and routing as built
for the given system), the path model's estimate ``T`` (docs/analytical.md)
is differentiated with respect to every continuous ``System`` field ``x``.
The elasticity ``e = (dT/dx) * x / T`` is the relative change of the time per
relative change of the knob: ``e = -0.3`` means 1 % more of ``x`` makes the
collective 0.3 % faster.  The table is ranked by ``|e|``.

The estimate is piecewise smooth (a max over resources and flows); the
gradient is that of the active piece.  The placement reads two continuous
fields (``path_eval.PLACEMENT_FIELDS``); their derivative is at the fixed
placement (a discrete placement has no derivative).
"""

from __future__ import annotations

import numpy as np

from ..system import System
from ..traffic import Traffic
from . import path_eval
from .grid import continuous_fields

__all__ = ["sensitivity", "plot_sensitivity"]


def sensitivity(s: System, traffic: Traffic) -> dict:
    """``{"time_ns", "rows": [{field, value, d_time_ns_per_unit, elasticity}, ...]}``, ranked by
    ``|elasticity|`` (largest first)."""
    pt = path_eval.pad(traffic)
    s = s.replace(**{f: float(np.asarray(getattr(s, f))) for f in continuous_fields()})
    t_ns, g = path_eval.path_value_and_grad(s, pt)
    t_ns = float(t_ns)
    rows = []
    for f in continuous_fields():
        x = float(np.asarray(getattr(s, f)))
        d = float(np.asarray(getattr(g, f)))
        e = d * x / t_ns if t_ns else 0.0
        rows.append({"field": f, "value": x, "d_time_ns_per_unit": d, "elasticity": e,
                     "ns_per_1pct": e * t_ns / 100.0,
                     "placement_fixed": f in path_eval.PLACEMENT_FIELDS})
    rows.sort(key=lambda r: -abs(r["elasticity"]))
    return {"time_ns": t_ns, "n_flows": pt.n_flows, "rows": rows}


def plot_sensitivity(result: dict, path: str, title: str = "") -> None:
    """Horizontal bars of the elasticities (ranked), written to ``path`` (PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = result["rows"][::-1]
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(rows) + 1.2))
    e = [r["elasticity"] for r in rows]
    ax.barh([r["field"] for r in rows], e, color=["tab:green" if v < 0 else "tab:red" for v in e])
    ax.axvline(0, color="k", lw=0.8)
    ax.set_xlabel("elasticity  (dT/T) / (dx/x)")
    ax.set_title(title or f"sensitivity of T = {result['time_ns']:.0f} ns")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
