"""Closed-form alpha-beta(-gamma) costs of collectives, NUNA-aware alpha.

Hockney's model: one message of ``m`` bytes costs ``alpha + m * beta``; a
reduction of ``m`` bytes costs ``m * gamma``.  The per-algorithm formulas are
those of Thakur, Rabenseifner and Gropp, "Optimization of collective
communication operations in MPICH", IJHPCA 19(1), 2005 (see
``../shared/reference/collective-formulas.md`` and docs/analytical.md), for
``p`` GPUs and ``n`` bytes, where ``n`` is

* All-Gather: the gathered (output) buffer, ``p`` shards of ``n / p``;
* Reduce-Scatter and All-Reduce: the full vector;
* All-to-All: the data each GPU sends (and receives) in total.

``lg p`` is ``ceil(log2 p)`` (recursive algorithms on a non-power-of-two
count need an extra round; we charge the ceiling, not the exact MPICH
fix-up).  ``p = 1`` costs 0.

Algorithms (``ALGORITHMS``):

=================  =======================================================
``direct``         all-pairs in one round (NUNA section 5.1's latency-
                   optimized plans); All-Reduce is the two-shot form
                   (direct Reduce-Scatter then direct All-Gather)
``ring``           ring / pairwise exchange, ``p - 1`` rounds per pass
``recursive``      recursive doubling (All-Gather), halving (Reduce-
                   Scatter), Rabenseifner halving + doubling (All-Reduce),
                   Bruck (All-to-All)
``tree``           binomial-tree reduce + broadcast; All-Reduce only
=================  =======================================================

Unsupported pairs (``tree`` for anything but All-Reduce) cost ``+inf``.

The system gives the parameters (:func:`alpha_beta_gamma`), nothing is typed
in: ``alpha`` is the zero-load latency of one transfer (local HBM read by the
CU, then the remote store, docs/model.md "The path of a flit") taken over all
(CU, read stack, port, destination stack) combinations -- its mean, best or
worst, which is what makes it NUNA-aware -- ``beta = 1 / (n_io_ports *
port_bw)`` (per-GPU scale-up bandwidth) and ``gamma = 1 FLOP per element /
(element bytes * bf16 FLOP/ns)`` (NUNA section 5.1: reductions cost CU time
from the FLOPS rating).

Every numeric argument of :func:`cost_ns` broadcasts: one call evaluates a
grid of collectives x algorithms x GPU counts x sizes x hardware variants.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..path import path_tables, stack_mean
from ..system import System

__all__ = [
    "COLLECTIVES", "ALGORITHMS", "collective_code", "algorithm_code", "cost_ns",
    "transfer_latency_terms", "alpha_ns", "alpha_beta_gamma", "collective_time_ns", "STATS",
    "busbw_factor", "bandwidths",
]

COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")
ALGORITHMS = ("direct", "ring", "recursive", "tree")
STATS = ("best", "mean", "worst")

_COLL_ALIASES = {
    "allgather": 0, "all_gather": 0, "ag": 0,
    "reducescatter": 1, "reduce_scatter": 1, "rs": 1,
    "allreduce": 2, "all_reduce": 2, "ar": 2,
    "alltoall": 3, "all_to_all": 3, "a2a": 3, "alltoallv": 3,
}
_ALG_ALIASES = {
    "direct": 0, "allpairs": 0, "all_pairs": 0, "oneshot": 0, "twoshot": 0,
    "ring": 1, "pairwise": 1,
    "recursive": 2, "recursive_doubling": 2, "recursive_halving": 2, "halving_doubling": 2,
    "halvingdoubling": 2, "rabenseifner": 2, "bruck": 2,
    "tree": 3, "binomial_tree": 3, "double_binary_tree": 3,
}


def _norm(name: str) -> str:
    return str(name).strip().lower().replace("-", "_").replace(" ", "_")


def collective_code(name) -> int:
    """Index into ``COLLECTIVES`` of a collective name (``all-gather``, ``AllReduce``, ``a2a``, ...)."""
    if isinstance(name, (int, np.integer)):
        if 0 <= int(name) < len(COLLECTIVES):
            return int(name)
        raise ValueError(f"collective code must lie in [0, {len(COLLECTIVES)}), got {name}")
    k = _norm(name)
    k2 = k.replace("_", "")
    for key in (k, k2):
        if key in _COLL_ALIASES:
            return _COLL_ALIASES[key]
    raise ValueError(f"unknown collective {name!r}; choose one of {', '.join(COLLECTIVES)}")


def algorithm_code(name) -> int:
    """Index into ``ALGORITHMS`` of an algorithm name (``direct``, ``ring``, ``recursive``, ``tree``)."""
    if isinstance(name, (int, np.integer)):
        if 0 <= int(name) < len(ALGORITHMS):
            return int(name)
        raise ValueError(f"algorithm code must lie in [0, {len(ALGORITHMS)}), got {name}")
    k = _norm(name)
    for key in (k, k.replace("_", "")):
        if key in _ALG_ALIASES:
            return _ALG_ALIASES[key]
    raise ValueError(f"unknown algorithm {name!r}; choose one of {', '.join(ALGORITHMS)}")


def busbw_factor(collective, p: int) -> float | None:
    """nccl-tests' bus-bandwidth factor (its doc/PERFORMANCE.md): ``busbw = algbw * factor`` with
    ``algbw = size_bytes / time``; ``2 (p - 1) / p`` for All-Reduce, ``(p - 1) / p`` for All-Gather,
    Reduce-Scatter and All-to-All.  None for a collective without one (an MSCCL plan's ``custom``)."""
    try:
        c = collective_code(collective)
    except ValueError:
        return None
    p = int(p)
    return (2.0 if c == 2 else 1.0) * (p - 1) / p


def bandwidths(collective, p: int, size_bytes: int, time_ns: float) -> dict:
    """``algbw_bytes_per_ns = size_bytes / time_ns`` and ``busbw_bytes_per_ns`` (:func:`busbw_factor`;
    None without a factor), bytes/ns = GB/s.  ``size_bytes`` is the size asked for: a plan's padding
    (``Plan.pad_bytes``) is not counted."""
    alg = float(size_bytes) / float(time_ns) if time_ns > 0 else None
    f = busbw_factor(collective, p)
    return {"algbw_bytes_per_ns": alg, "busbw_bytes_per_ns": None if alg is None or f is None else alg * f}


def _lg(p):
    """ceil(log2 p) for p >= 1, exact on powers of two (integer-safe in float)."""
    return jnp.ceil(jnp.log2(jnp.maximum(p, 1.0)) - 1e-6)


def cost_ns(collective, algorithm, p, n_bytes, alpha_ns, beta_ns_per_byte, gamma_ns_per_byte=0.0):
    """Alpha-beta-gamma time of a collective, ns.  All arguments broadcast.

    collective, algorithm: integer codes (``collective_code``/``algorithm_code``)
    or, for scalars, names.  p: GPUs (>= 1).  n_bytes: see the module doc.
    alpha_ns: per-message latency; beta_ns_per_byte: 1 / per-GPU bandwidth;
    gamma_ns_per_byte: reduction time per byte.  Returns ``+inf`` for a
    (collective, algorithm) pair that does not exist (tree for non-All-Reduce).

    Formulas (f = (p-1)/p, lg = ceil log2 p, a = alpha, b = beta, g = gamma):

    ==============  ===================  ====================  =====================  ==================
    algorithm       All-Gather           Reduce-Scatter        All-Reduce             All-to-All
    ==============  ===================  ====================  =====================  ==================
    direct          a + f n b            a + f n (b+g)         2a + 2 f n b + f n g   a + f n b
    ring            (p-1)a + f n b       (p-1)a + f n (b+g)    2(p-1)a + 2fnb + fng   (p-1)a + f n b
    recursive       lg a + f n b         lg a + f n (b+g)      2 lg a + 2fnb + fng    lg a + (n/2) lg b
    tree            --                   --                    2 lg a + 2 n lg b      --
                                                               + n lg g
    ==============  ===================  ====================  =====================  ==================
    """
    if isinstance(collective, str):
        collective = collective_code(collective)
    if isinstance(algorithm, str):
        algorithm = algorithm_code(algorithm)
    c = jnp.asarray(collective)
    k = jnp.asarray(algorithm)
    p = jnp.asarray(p, dtype=jnp.result_type(float))
    n = jnp.asarray(n_bytes, dtype=jnp.result_type(float))
    a = jnp.asarray(alpha_ns, dtype=jnp.result_type(float))
    b = jnp.asarray(beta_ns_per_byte, dtype=jnp.result_type(float))
    g = jnp.asarray(gamma_ns_per_byte, dtype=jnp.result_type(float))

    multi = (p > 1.0).astype(n.dtype)          # p = 1: nothing to send
    f = (p - 1.0) / jnp.maximum(p, 1.0)
    lg = _lg(p)
    # number of alpha terms and of beta / gamma byte volumes, by (collective, algorithm)
    rounds_ag = jnp.select([k == 0, k == 1, k == 2], [multi, p - 1.0, lg], 0.0)
    rounds_ar = jnp.select([k == 0, k == 1, k == 2], [2.0 * multi, 2.0 * (p - 1.0), 2.0 * lg], 2.0 * lg)
    a2a_bytes = jnp.where(k == 2, 0.5 * n * lg, f * n)
    ar_beta = jnp.where(k == 3, 2.0 * n * lg, 2.0 * f * n)
    ar_gamma = jnp.where(k == 3, n * lg, f * n)

    t_ag = rounds_ag * a + f * n * b
    t_rs = rounds_ag * a + f * n * (b + g)
    t_ar = rounds_ar * a + ar_beta * b + ar_gamma * g
    t_a2a = rounds_ag * a + a2a_bytes * b
    t = jnp.select([c == 0, c == 1, c == 2], [t_ag, t_rs, t_ar], t_a2a)
    valid = (k != 3) | (c == 2)
    return jnp.where(valid, t, jnp.inf)


# ---------------------------------------------------------------------------
# parameters from the system
# ---------------------------------------------------------------------------
def transfer_latency_terms(s: System):
    """The zero-load transfer latency split into its three separable parts, ns:
    ``(read[router, endpoint], to_port[router, port], deliver[port, endpoint])`` from
    :func:`nuna_jax.path.path_tables` (the switch crossing is counted in
    ``to_port``; an endpoint is a stack channel); a transfer on (CU router r, read
    endpoint, port, destination endpoint) takes ``read[r, rs] + to_port[r, p] + deliver[p, ds]``."""
    tab = path_tables(s)
    return tab.read_ns, tab.to_port_ns + tab.switch_ns, tab.deliver_ns


def alpha_ns(s: System, stat: str = "mean"):
    """Zero-load latency of one transfer (read + remote store), ns, over all
    (CU, read stack, port, destination stack), a stack's latency the mean over its channels
    (:func:`nuna_jax.path.stack_mean`): ``mean`` (uniform, the UA
    baseline's expectation), ``best`` (min) or ``worst`` (max)."""
    if stat not in STATS:
        raise ValueError(f"stat must be one of {', '.join(STATS)}, got {stat!r}")
    read, to_port, deliver = transfer_latency_terms(s)
    read, deliver = stack_mean(s, read), stack_mean(s, deliver)   # a transfer spans a stack's channels
    if stat == "mean":
        return jnp.mean(read) + jnp.mean(to_port) + jnp.mean(deliver)
    red = jnp.min if stat == "best" else jnp.max
    # min/max over (cu, rs, p, ds) of read[cu,rs] + to_port[cu,p] + deliver[p,ds]
    return red(red(read, axis=1)[:, None] + to_port + red(deliver, axis=1)[None, :])


def alpha_beta_gamma(s: System, stat: str = "mean", element_bytes: int = 2):
    """``(alpha_ns, beta_ns_per_byte, gamma_ns_per_byte)`` of a system.

    beta = 1 / (n_io_ports * port_bw): the per-GPU scale-up bandwidth, one
    direction.  gamma = 1 FLOP per element / (element_bytes *
    flops_bf16_per_ns) (bf16 elements by default).
    """
    if element_bytes <= 0:
        raise ValueError(f"element_bytes must be > 0, got {element_bytes}")
    beta = 1.0 / (s.n_io_ports * s.port_bw_bytes_per_ns)
    gamma = 1.0 / (element_bytes * s.flops_bf16_per_ns)
    return alpha_ns(s, stat), beta, gamma


def collective_time_ns(s: System, collective, size_bytes, algorithm="direct", stat: str = "mean",
                       n_gpus=None):
    """Closed-form time of one collective on system ``s`` (``p = n_gpus or s.n_gpus``), ns."""
    a, b, g = alpha_beta_gamma(s, stat)
    p = s.n_gpus if n_gpus is None else n_gpus
    return cost_ns(collective_code(collective) if isinstance(collective, str) else collective,
                   algorithm_code(algorithm) if isinstance(algorithm, str) else algorithm,
                   p, size_bytes, a, b, g)


