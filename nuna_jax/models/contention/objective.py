"""The objective: lower bound, estimate and smooth estimate as pure functions of the resource
tables (docs/analytical.md, sections 2.2-2.4).  Per phase ``k`` (phases are barriers; their
times add):

Lower bound (no schedule can beat it)::

    T_k >= max( max_f L_f,  max_r a_r + B_r + m_r,  max_cu B_cu )

Estimate (latency + bottleneck backlog; Hockney's alpha-beta / LogGP's ``L + (k-1) G``, exact
for one pipelined flow)::

    T_k ~= max( max_r Lmax_r + (B_r - svc_r)^+,  max_cu Lmax_cu + (B_cu - Lbar_cu)^+ )

Smooth estimate: every max a log-sum-exp at temperature ``tau`` (ns), each flow weighted by
``min(1, flits) * weight^(tau_w / tau)`` (docs/model.md, "Flow weight").
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .segplan import segment_reduce
from .tables import BIG, Tables, active, smooth_log_weight


def _plan(tb: Tables, name: str):
    return None if tb.plans is None else tb.plans.get(name)


def phase_max_latency(tb: Tables):
    """Longest zero-load latency of an active flow, per phase, ``[P]``."""
    v = jnp.where(tb.load > 0, tb.L, -BIG)
    return jnp.maximum(segment_reduce("max", v, tb.phase, tb.n_phases, _plan(tb, "ph")), 0.0)


def lower_bound_phases(tb: Tables):
    used = tb.a < BIG / 2
    lb_res = jnp.max(jnp.where(used, tb.a + tb.busy + tb.m, 0.0), axis=1)
    lb_win = jnp.max(tb.wbusy, axis=1)
    return jnp.maximum(jnp.maximum(phase_max_latency(tb), lb_res), lb_win)


def segment_lmax(tb: Tables):
    """Longest zero-load latency among active flows, per (phase, resource) and per (phase, CU)."""
    lc = segment_reduce("max", jnp.where(tb.load > 0, tb.L, -BIG), tb.wseg, tb.n_phases * tb.n_cu, _plan(tb, "w"))
    return tb.lr, lc.reshape(tb.n_phases, tb.n_cu)


def excess(tb: Tables):
    """Backlog beyond one flit: ``(B_r - svc_r)^+`` per resource; per CU window
    ``(B_cu - Lbar_cu)^+`` plus, where the CU's flits exceed its window ``W``, the first
    window's issue time ``W * svc_issue`` (docs/analytical.md 2.3)."""
    ex_r = jnp.maximum(tb.busy - tb.svc_r[None, :], 0.0)
    lbar = tb.wlat / jnp.where(tb.wflits > 0, tb.wflits, 1.0)
    return ex_r, jnp.maximum(tb.wbusy - lbar, 0.0) + tb.wfill


def estimate_phases(tb: Tables):
    """(estimate per phase [P], resource terms [P, R], CU window terms [P, NC])."""
    lr, lc = segment_lmax(tb)
    ex_r, ex_w = excess(tb)
    term_r = jnp.where(lr > -BIG / 2, lr + ex_r, 0.0)
    term_c = jnp.where(lc > -BIG / 2, lc + ex_w, 0.0)
    return jnp.maximum(jnp.max(term_r, axis=1), jnp.max(term_c, axis=1)), term_r, term_c


def smooth_phases(t, tb: Tables, resource_log_sums, tau, tau_w, background_phases=None):
    """Smooth estimate per phase, ``[P]``.  ``resource_log_sums(lr, tau, logw)`` is the engine's
    ``log sum_f exp((L_f - lr_r) / tau + logw_f)`` per (phase, resource).  ``background_phases``
    (``None``: no background): ``f(res_terms, used_r, cu_terms, used_c, lse_row) -> [P]``, the
    phases with a background's load (``.background.lse_phases_bg``)."""
    P = tb.n_phases
    tau = jnp.asarray(tau, dtype=tb.L.dtype)
    lr, lc = segment_lmax(tb)
    lr, lc = jax.lax.stop_gradient(lr), jax.lax.stop_gradient(lc)
    logw = smooth_log_weight(t, tau, tau_w)
    used_r = lr > -BIG / 2
    used_c = lc > -BIG / 2
    # per-segment log-sum-exp of L_f with weights, stabilized by the hard segment max
    lse_r = jnp.where(used_r, lr + tau * resource_log_sums(lr, tau, logw), 0.0)
    lc_safe = jnp.where(used_c, lc, 0.0)
    zc = jnp.where(active(t), (tb.L - lc_safe.ravel()[tb.wseg]) / tau + logw, -1e4)
    sc = jax.ops.segment_sum(jnp.exp(zc), tb.wseg, num_segments=P * tb.n_cu).reshape(P, tb.n_cu)
    lse_c = jnp.where(used_c, lc_safe + tau * jnp.log(jnp.where(used_c & (sc > 0), sc, 1.0)), 0.0)
    ex_r, ex_w = excess(tb)
    lse_row = lambda allt, mask: smooth_max(allt, mask, tau)  # noqa: E731
    if background_phases is not None:
        return background_phases(lse_r + ex_r, used_r, lse_c + ex_w, used_c, lse_row)
    allt = jnp.concatenate([lse_r + ex_r, lse_c + ex_w], axis=1)
    mask = jnp.concatenate([used_r, used_c], axis=1)
    return lse_row(allt, mask)


def smooth_max(allt, mask, tau):
    """Log-sum-exp at temperature ``tau`` over the last axis of the terms ``allt`` where ``mask``
    (stabilised by the hard maximum, without gradient); 0 where no term is used."""
    mx = jax.lax.stop_gradient(jnp.max(jnp.where(mask, allt, -BIG), axis=-1, keepdims=True))
    mx = jnp.where(mx > -BIG / 2, mx, 0.0)
    za = jnp.where(mask, (allt - mx) / tau, -1e4)
    ssum = jnp.sum(jnp.where(mask, jnp.exp(za), 0.0), axis=-1)
    any_used = jnp.any(mask, axis=-1)
    return jnp.where(any_used, mx[..., 0] + tau * jnp.log(jnp.where(any_used, ssum, 1.0)), 0.0)
