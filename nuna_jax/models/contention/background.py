"""Background load in the path model: a concurrent kernel's on-chip flows (NUNA section 6.6,
Figure 14; docs/analytical.md, section 2.7).

A background (``sim.Background``: a GEMM's HBM reads and writes, ``sim.gemm_background``) is
given to the path model as the simulator takes it; its paths come from ``Background.stages``
(= ``sim.background_stages``, built from ``nuna_jax.path``'s terms: one definition of a flit's
path; this package may not import ``sim``, so the table brings its own paths).  Its flits are not
part of the collective's completion time; they add busy time to the resources they use (CU
issue, HBM stacks, mesh links).

The background is summarised by :class:`BackgroundLoad`, constant for a given background:

* ``busy_ns[r]``: its busy time on resource ``r`` (``sum flits * svc``, as for the traffic);
* ``duration_ns[r]``: its own path-model estimate alone, ``T_bg`` (section 2.3's estimate of
  the background as one phase: resources and CU windows), of the GPU that owns ``r``;
* ``rho[r] = busy_ns[r] / duration_ns[r]``: the share of ``r`` it takes while it runs.

The background starts with the collective (time 0) and runs at its own pace until ``T_bg``.
In phase ``k`` (starting at ``t_k``, the sum of the earlier phases' estimates), a resource
``r`` that the collective uses serves, besides the collective's term ``c_r = Lmax_r +
(B_r - svc_r)^+``, the background work that arrives during the phase:
``rho_r * min(T, D_r)`` with ``D_r = (T_bg - t_k)^+``.  The phase's term at ``r`` is the least
``T`` with ``T = c_r + rho_r min(T, D_r)`` (:func:`prorate`):

    T_r = min( c_r / (1 - rho_r),  c_r + rho_r D_r )

(the first when the phase ends while the background still runs, the second, "all of the rest",
when the phase outlasts the background).  The least fixed point of the phase (the max over resources
of these non-decreasing maps of slope <= 1) is the max of the resources' own fixed points.
With no background (``rho = 0``) ``T_r = c_r`` exactly.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ...path import resource_layout
from ...system import System
from .objective import estimate_phases, excess, segment_lmax
from .tables import BIG, Tables, resource_service_ns, window_terms_of

__all__ = ["BackgroundLoad", "background_tables", "background_load", "as_background_load", "check_background",
           "prorate", "estimate_phases_bg", "lse_phases_bg"]


class BackgroundLoad(NamedTuple):
    """A background as the path model sees it (all ``[n_resources]``, ns or a fraction)."""

    busy_ns: Any        # its busy time per resource
    duration_ns: Any    # its own estimate alone, of the resource's GPU
    rho: Any            # busy_ns / duration_ns, in [0, 1]


def background_tables(s: System, bg) -> Tables:
    """The background's resource tables, one phase (:class:`.tables.Tables`; its flows are the
    rows of ``bg``, their stages ``bg.stages(s)``)."""
    res, svc, lat = bg.stages(s)
    R = resource_layout(s).n_resources
    step = svc + lat
    L = jnp.sum(step, axis=1)
    prefix = jnp.cumsum(step, axis=1) - step
    rem = L[:, None] - prefix - svc
    ld = jnp.asarray(bg.flits, dtype=jnp.result_type(float))
    seg = jnp.where(res >= 0, res, R).ravel()
    act = (ld > 0)[:, None] & (res >= 0)
    n = R + 1
    busy = jax.ops.segment_sum((ld[:, None] * svc).ravel(), seg, num_segments=n)[:-1]
    a = jax.ops.segment_min(jnp.where(act, prefix, BIG).ravel(), seg, num_segments=n)[:-1]
    m = jax.ops.segment_min(jnp.where(act, rem, BIG).ravel(), seg, num_segments=n)[:-1]
    lr = jax.ops.segment_max(jnp.where(act, jnp.broadcast_to(L[:, None], res.shape), -BIG).ravel(), seg,
                             num_segments=n)[:-1]
    wseg = jnp.asarray(bg.gpu, jnp.int32) * s.n_cus + jnp.asarray(bg.cu, jnp.int32)
    wseg, wbusy, wflits, wlat, wfill = window_terms_of(s, wseg, ld, L, 1)
    NC = s.n_gpus * s.n_cus
    return Tables(L, ld, jnp.zeros(L.shape, jnp.int32), wseg, busy[None], a[None], m[None], lr[None],
                  resource_service_ns(s), wbusy, wflits, wlat, wfill, 1, R, NC)


def _background_load(s: System, bg) -> BackgroundLoad:
    tb = background_tables(s, bg)
    _, term_r, term_c = estimate_phases(tb)
    lay = resource_layout(s)
    per_gpu = jnp.maximum(jnp.max(term_r[0].reshape(s.n_gpus, lay.per_gpu), axis=1),
                          jnp.max(term_c[0].reshape(s.n_gpus, s.n_cus), axis=1))      # [G]
    dur = jnp.repeat(per_gpu, lay.per_gpu)
    busy = tb.busy[0]
    rho = jnp.where(dur > 0, jnp.minimum(busy / jnp.where(dur > 0, dur, 1.0), 1.0), 0.0)
    return BackgroundLoad(busy, dur, rho)


background_load = jax.jit(_background_load)
background_load.__doc__ = """:class:`BackgroundLoad` of a ``sim.Background`` on ``s`` (jitted)."""


def as_background_load(s: System, background) -> BackgroundLoad | None:
    """``None``, a :class:`BackgroundLoad` (returned as is: compute it once for many
    evaluations) or a ``sim.Background`` (converted by :func:`background_load`)."""
    if check_background(background) is None or isinstance(background, BackgroundLoad):
        return background
    return background_load(s, background)


def check_background(background):
    """``background`` if it is ``None``, a :class:`BackgroundLoad` or a ``sim.Background`` (an
    object with ``.stages(system)``), else TypeError."""
    if background is None or isinstance(background, BackgroundLoad) or hasattr(background, "stages"):
        return background
    raise TypeError("background must be a sim.Background (with .stages) or a BackgroundLoad, "
                    f"got {type(background).__name__}")


def prorate(c, rho, D):
    """Least ``T >= 0`` with ``T = c + rho * min(T, D)`` (``c >= 0``, ``0 <= rho <= 1``, ``D >= 0``):
    ``min(c / (1 - rho), c + rho * D)`` (``c + D`` at ``rho = 1``; ``c`` at ``rho = 0``)."""
    open_ = rho < 1.0
    inv = jnp.where(open_, c / jnp.where(open_, 1.0 - rho, 1.0), jnp.inf)
    return jnp.minimum(inv, c + rho * D)


def _scan_phases(term_r, used_r, other, bl: BackgroundLoad, combine):
    """Phases in order: phase ``k`` starts at ``t_k`` = the sum of the earlier phases' values;
    its resource terms are prorated with ``D = (duration - t_k)^+``; ``combine(terms_r, other_k)``
    gives the phase's value.  Returns (values [P], prorated terms [P, R])."""
    def step(t0, xs):
        c, used, o = xs
        D = jnp.maximum(bl.duration_ns - t0, 0.0)
        tr = jnp.where(used, prorate(c, bl.rho, D), 0.0)
        v = combine(tr, used, o)
        return t0 + v, (v, tr)

    _, (vals, terms) = jax.lax.scan(step, jnp.zeros((), term_r.dtype), (term_r, used_r, other))
    return vals, terms


def estimate_phases_bg(tb: Tables, bl: BackgroundLoad):
    """:func:`.objective.estimate_phases` with the background's work prorated into the resource
    terms (module docstring): (estimate per phase [P], resource terms [P, R], CU window terms [P, NC]).
    The CU window terms are the collective's own (the background uses other CUs)."""
    lr, lc = segment_lmax(tb)
    ex_r, ex_w = excess(tb)
    used = lr > -BIG / 2
    term_r = jnp.where(used, lr + ex_r, 0.0)
    term_c = jnp.where(lc > -BIG / 2, lc + ex_w, 0.0)
    vals, terms = _scan_phases(term_r, used, jnp.max(term_c, axis=1), bl,
                               lambda tr, u, o: jnp.maximum(jnp.max(tr), o))
    return vals, terms, term_c


def lse_phases_bg(bl: BackgroundLoad, res_terms, used_r, cu_terms, used_c, lse_row):
    """The smooth estimate's phases with the background: ``res_terms`` ``[P, R]`` (smooth
    ``Lmax_r`` + backlog) prorated phase by phase (start times = the earlier phases' smooth
    values), then ``lse_row(terms [X], mask [X])`` -> the phase's smooth maximum over the
    resource and CU terms."""
    def combine(tr, u, o):
        ct, uc = o
        return lse_row(jnp.concatenate([tr, ct]), jnp.concatenate([u, uc]))

    vals, _ = _scan_phases(res_terms, used_r, (cu_terms, used_c), bl, combine)
    return vals
