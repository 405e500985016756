"""The loss of the relaxed placement.

    loss = T_smooth(expected traffic; tau)                      (docs/model.md, smooth estimate)
         + sum_cu [ lam_cu * v_cu + rho / 2 * v_cu^2 ]          (augmented Lagrangian, CU budget)
         + beta * mean_t H(p_t)                                  (entropy: pushes toward one-hot)

``v_cu = relu(E[load_cu] / R_cu - 1)`` is the relative overflow of a CU's
outstanding-request budget (Algorithm 1's ``R_max``, section 4.2.2) under
the expected placement: ``E[load_cu] = sum_t sum_c p[t, c] demand_t
[cu(t, c) = cu]``.  The HBM stack budget needs no term: pages follow the
threadblock choices by Algorithm 1's capacity-respecting rule
(:func:`nuna_jax.optim.candidates.assemble`), so every candidate slice and
every rounded placement holds it by construction.  All terms are in ns
(``lam`` and ``rho`` are ns per unit overflow, ``beta`` ns per nat).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from ..models.contention import smooth_estimate_ns
from .relaxed import ExpectedTables, expected_traffic

__all__ = ["CapacityTable", "capacity_table", "loss_terms", "entropy"]


@struct.dataclass
class CapacityTable:
    """Where each (threadblock, candidate) puts its CU demand: flat (gpu, CU) slot ``[n_tbs, C]``."""

    slot: Any
    demand: Any              # [n_tbs] requests (0 for threadblocks without steps)
    n_slots: int = struct.field(pytree_node=False)
    capacity: float = struct.field(pytree_node=False)   # requests per CU


def capacity_table(s, plan, cand, demand) -> CapacityTable:
    slot = plan.tb_gpu[:, None] * s.n_cus + cand.cu
    dem = np.where(cand.active, demand, 0).astype(np.float64)
    return CapacityTable(jnp.asarray(slot), jnp.asarray(dem), int(plan.n_gpus * s.n_cus),
                         float(s.max_outstanding_per_cu))


def entropy(p):
    """Mean entropy (nats) of the rows of ``p``."""
    return -jnp.mean(jnp.sum(p * jnp.log(jnp.clip(p, 1e-12, 1.0)), axis=-1))


def cu_overflow(p, cap: CapacityTable):
    """``[n_gpus * n_cus]`` relative overflow ``relu(E[load] / R - 1)`` of every CU."""
    load = jax.ops.segment_sum((p * cap.demand[:, None]).ravel(), cap.slot.ravel(), num_segments=cap.n_slots)
    return jax.nn.relu(load / cap.capacity - 1.0)


class LossTerms(NamedTuple):
    total: jnp.ndarray
    time_ns: jnp.ndarray
    overflow: jnp.ndarray   # [n_slots]
    entropy: jnp.ndarray


def loss_terms(s, tables: ExpectedTables, cap: CapacityTable, p, *, tau_ns, lam, rho, beta) -> LossTerms:
    """All terms of the loss for probabilities ``p`` (``[n_tbs, C]``)."""
    t = expected_traffic(tables, p)
    time_ns = smooth_estimate_ns(s, t, tau_ns, n_phases=tables.n_phases)
    v = cu_overflow(p, cap)
    h = entropy(p)
    total = time_ns + jnp.sum(lam * v + 0.5 * rho * v * v) + beta * h
    return LossTerms(total, time_ns, v, h)
