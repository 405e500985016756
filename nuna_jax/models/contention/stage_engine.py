"""The ``stages`` engine: the resource tables straight from the [flows, stages] table of
:func:`nuna_jax.path.flow_stages`, reduced per (phase, resource) with segment ops.  The
reference for the ``runs`` engine; huge flow tables are scanned in chunks of ``chunk`` flows
(memory O(chunk x stages))."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ...path import flow_stages, resource_layout
from ...system import System
from ...traffic import Traffic
from .tables import BIG, Tables, active, assemble, chunked, load, phase_of, smooth_log_weight


def _stage_view(s: System, t: Traffic, P: int):
    """(L [F], arrival prefix [F, S], remaining after service [F, S], segment id [F, S], svc [F, S])."""
    st = flow_stages(s, t)
    R = resource_layout(s).n_resources
    step_t = st.service_ns + st.latency_ns
    L = jnp.sum(step_t, axis=1)
    prefix = jnp.cumsum(step_t, axis=1) - step_t
    rem = L[:, None] - prefix - st.service_ns
    seg = jnp.where(st.resource >= 0, phase_of(t, P)[:, None] * R + st.resource, P * R)
    return L, prefix, rem, seg, st.service_ns


def _reduce_chunk(s: System, t: Traffic, P: int):
    R = resource_layout(s).n_resources
    L, prefix, rem, seg, svc = _stage_view(s, t, P)
    n = P * R + 1
    sg = seg.ravel()
    act = active(t)[:, None] & (seg < P * R)
    busy = jax.ops.segment_sum((load(t)[:, None] * svc).ravel(), sg, num_segments=n)
    a = jax.ops.segment_min(jnp.where(act, prefix, BIG).ravel(), sg, num_segments=n)
    m = jax.ops.segment_min(jnp.where(act, rem, BIG).ravel(), sg, num_segments=n)
    lr = jax.ops.segment_max(jnp.where(act, L[:, None], -BIG).ravel(), sg, num_segments=n)
    return L, busy, a, m, lr


def tables_stages(s: System, t: Traffic, P: int, chunk: int) -> Tables:
    R = resource_layout(s).n_resources
    F = int(np.shape(t.flits)[0])
    if F <= chunk:
        L, busy, a, m, lr = _reduce_chunk(s, t, P)
    else:  # scan over chunks: memory O(chunk * n_stages), not O(F * n_stages)
        n = P * R + 1
        init = (jnp.zeros(n), jnp.full(n, BIG), jnp.full(n, BIG), jnp.full(n, -BIG))

        def body(carry, tch):
            L_, b_, a_, m_, l_ = _reduce_chunk(s, tch, P)
            cb, ca, cm, cl = carry
            return (cb + b_, jnp.minimum(ca, a_), jnp.minimum(cm, m_), jnp.maximum(cl, l_)), L_

        (busy, a, m, lr), Ls = jax.lax.scan(body, init, chunked(t, chunk))
        L = Ls.reshape(-1)[:F]
    shp = lambda v: v[:-1].reshape(P, R)  # noqa: E731
    return assemble(s, t, P, L, shp(busy), shp(a), shp(m), shp(lr))


def smooth_log_sums_stages(s: System, t: Traffic, tb: Tables, lr, tau, tau_w, chunk: int):
    """``log sum`` over active (flow, stage) on r of ``exp((L_f - lr_r) / tau + logw_f)``, ``[P, R]``
    (0 where the sum is empty: the caller masks unused resources)."""
    P, R = tb.n_phases, tb.n_res
    lr_pad = jnp.concatenate([jnp.where(lr > -BIG / 2, lr, 0.0).ravel(), jnp.zeros(1, lr.dtype)])

    def part(tch):
        L, _, _, seg, _ = _stage_view(s, tch, P)
        # z <= 0 by construction; no clamp (a min() tie at 0 would halve the gradient)
        on = (seg < P * R) & active(tch)[:, None]
        z = jnp.where(on, (L[:, None] - lr_pad[seg]) / tau + smooth_log_weight(tch, tau, tau_w)[:, None], -1e4)
        e = jnp.where(on, jnp.exp(z), 0.0)
        return jax.ops.segment_sum(e.ravel(), seg.ravel(), num_segments=P * R + 1)

    if int(np.shape(t.flits)[0]) <= chunk:
        sr = part(t)
    else:
        sr, _ = jax.lax.scan(lambda c, tch: (c + part(tch), None), jnp.zeros(P * R + 1), chunked(t, chunk))
    sr = sr[:-1].reshape(P, R)
    return jnp.log(jnp.where(sr > 0, sr, 1.0))
