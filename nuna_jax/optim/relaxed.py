"""The relaxed placement and its expected traffic (see
shared/ARCHITECTURE.md, "How a relaxed placement crosses the seam").

A relaxed placement is a plain pytree of logits ``[n_tbs, C]``: threadblock
``t`` takes candidate ``c`` (a NAR domain and a CU near its ports,
:mod:`nuna_jax.optim.candidates`) with probability
``softmax(logits[t] / temperature)[c]`` (optionally with Gumbel noise).

The expected traffic is one Traffic that stacks the ``C`` candidate
lowerings: slice ``c`` is the ordinary lowering (``lowering.build_traffic``)
of the placement in which every threadblock takes its candidate ``c``, and
each of its rows carries ``weight = p[tb, c]``.  Busy times, which count
``weight x flits``, are then the exact expectation over independent
per-threadblock choices whenever a threadblock's rows depend only on its own
choice (they do for its CU, ports and destination pages; source pages
shared by several threadblocks are placed first come, first served, which
couples them: an approximation).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from ..lowering import build_traffic
from ..models.contention import bucket_rows, pad_flows, resolve_n_phases
from ..plans import Plan
from ..system import System
from ..traffic import FIELDS, Traffic
from .candidates import Candidates, assemble

P_MIN = 1e-20   # smallest probability handed to the model (float32-safe)

__all__ = ["Relaxed", "ExpectedTables", "expected_tables", "probabilities", "expected_traffic",
           "init_logits"]


@struct.dataclass
class Relaxed:
    """Logits of the relaxed placement: ``tb[t, c]`` for threadblock ``t``, candidate ``c``."""

    tb: Any


@struct.dataclass
class ExpectedTables:
    """The stacked candidate lowerings (padded, jnp) and where each row's weight comes from."""

    traffic: Traffic       # [R] rows of all C slices, weight 1 (replaced by the probabilities)
    row_tb: Any            # [R] threadblock of the row (0 on padding)
    row_cand: Any          # [R] candidate slice of the row
    row_valid: Any         # [R] 1 for real rows, 0 for padding
    n_phases: int = struct.field(pytree_node=False)
    n_rows: int = struct.field(pytree_node=False)   # real rows
    max_slice_rows: int = struct.field(pytree_node=False)   # rows of the largest candidate slice


def expected_tables(s: System, plan: Plan, cand: Candidates) -> ExpectedTables:
    """Lower every candidate slice once and stack them (concrete, numpy -> jnp)."""
    parts, cands = [], []
    for c in range(cand.n_candidates):
        t = build_traffic(s, plan, assemble(s, plan, cand, np.full(plan.n_tbs, c)))
        parts.append(t)
        cands.append(np.full(t.n_flows, c, np.int32))
    cols = {k: np.concatenate([np.asarray(getattr(t, k)) for t in parts]) for k in FIELDS}
    full = Traffic(**cols)
    n = full.n_flows
    n_phases = resolve_n_phases(full)
    padded = pad_flows(full, bucket_rows(n))
    R = padded.n_flows
    row_cand = np.concatenate([np.concatenate(cands), np.zeros(R - n, np.int32)])
    valid = np.concatenate([np.ones(n), np.zeros(R - n)])
    tr = jax.tree_util.tree_map(jnp.asarray, padded)
    return ExpectedTables(tr, jnp.asarray(np.asarray(padded.tb)), jnp.asarray(row_cand),
                          jnp.asarray(valid), n_phases, n, max(t.n_flows for t in parts))


def probabilities(r: Relaxed, temperature=1.0, key=None, gumbel_scale=0.0):
    """``softmax((logits + gumbel_scale * G) / temperature)`` per threadblock, ``[n_tbs, C]``."""
    z = r.tb
    if key is not None:
        z = z + gumbel_scale * jax.random.gumbel(key, z.shape)
    return jax.nn.softmax(z / temperature, axis=-1)


def expected_traffic(tables: ExpectedTables, p) -> Traffic:
    """The expected traffic: every row weighted by its threadblock's probability of its candidate."""
    # floor at P_MIN: the model's gradient is defined for weights in (0, 1] (docs/model.md, "Flow weight");
    # a softmax at a low temperature underflows to exactly 0
    w = jnp.maximum(p, P_MIN)[tables.row_tb, tables.row_cand] * tables.row_valid
    return tables.traffic.replace(weight=w.astype(tables.traffic.flits.dtype))


def init_logits(key, n_tbs: int, n_cand: int, n_restarts: int, warm_logit: float = 2.0,
                noise: float = 1.0):
    """``[B, n_tbs, C]`` starting logits: restart 0 is a warm start on candidate 0
    (Algorithm 1), the others random normal."""
    z = noise * jax.random.normal(key, (n_restarts, n_tbs, n_cand))
    warm = jnp.zeros((n_tbs, n_cand)).at[:, 0].set(warm_logit)
    return z.at[0].set(warm)
