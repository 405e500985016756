"""The ParallelKittens fused multi-GPU kernel cost model (arXiv:2511.13940, section 3).

    T_kernel = T_launch + max(T_comp, T_mem, T_comm) + T_non-overlap + T_sync     (PK eq. 1)

with every term "work over achieved bandwidth", ``T_x = S_x / B_x`` (PK 3.1.1).
Three design choices set the terms (PK 3.2-3.4):

* transfer mechanism (``"ce"`` copy engine, ``"tma"``, ``"reg"`` register
  ld/st): achieved bandwidth as a function of message size and of the number
  of SMs issuing (:func:`mechanism_bw`);
* scheduling (``"intra"``: all SMs compute and issue communication, per-tile
  atomics for reductions, mbarrier sync; ``"inter"``: ``comm_sms`` SMs
  communicate, the rest compute, HBM-flag sync, in-fabric reduction possible);
* design overheads (sync per tile, pipeline fill/drain, launch).

Units: time ns, sizes bytes, bandwidth bytes/ns (= GB/s), compute FLOP/ns.
Shapes are *per GPU* as in the paper: a local GEMM ``m x n x k`` on each of
``n_gpus`` GPUs.  All functions are pure jnp over a :class:`KernelHW` pytree:
shapes and hardware leaves broadcast (batch), and ``jit``/``vmap``/``grad``
work.  Validation runs only on concrete values, at the API boundary.

Modelling assumptions are listed in docs/kernel_model.md; the main ones:

* T_comp = FLOPs / (peak * gemm_eff * compute_SMs / n_sms)  (no wave quantization).
* T_mem = minimum HBM traffic (each operand read once, output written once,
  i.e. perfect L2 reuse) plus the traffic the communication adds.
* T_comm = bytes per GPU per direction / min(B_msg(message), issuing_SMs * B_peak / sat_SMs),
  with the bytes of a point-to-point reduction (TMA ``store_add`` / ``red.add``
  into peer memory) moved at ``p2p_reduce_eff`` of the plain-store bandwidth
  (PK 3.3: the atomic adds of output-tile accumulation; calibrated once, see
  ``experiments/pk_calibrate_atomic.py``).
* T_non-overlap = min(T_comp, T_comm) / W with W = tiles / compute_SMs waves:
  the fill/drain of a two-stage pipeline of W steps.
* T_sync = tiles per compute SM * (64 ns intra-SM | 832 ns inter-SM).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from ..checks import check_float_fields
from ..checks import concrete as _concrete

__all__ = [
    "KernelHW", "OPS", "FUSED_OPS", "COLLECTIVE_OPS", "SCHEDULES", "MECHANISMS",
    "mechanism_bw", "comm_pattern_bytes", "p2p_reduce_factor", "comm_time_ns", "nuna_collective_ns",
    "nuna_comm_path", "kernel_terms", "fused_terms", "baseline_terms",
    "collective_terms", "non_overlapped_share", "tile_comp_ns", "tile_comm_ns",
    "hiding_threshold_k", "best_comm_sms_search", "best_comm_sms_grad",
    "default_mechanism", "stack_hw", "tflops",
]

FUSED_OPS = ("gemm", "ag+gemm", "gemm+rs", "gemm+ar")
COLLECTIVE_OPS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")
OPS = FUSED_OPS + COLLECTIVE_OPS
SCHEDULES = ("intra", "inter")
MECHANISMS = ("ce", "tma", "reg")

_static = lambda default=None: struct.field(pytree_node=False, default=default)  # noqa: E731


@struct.dataclass
class KernelHW:
    """One GPU of an n-GPU scale-up node, as the kernel model sees it.

    Static: ``name``; ``in_fabric_reduction`` (switch can reduce, NVLS
    multimem); ``comm_model`` (``"mechanism"``: T_comm from the measured
    mechanism curves; ``"nuna"``: from the NUNA collective model of
    ``system``); ``tile_m``/``tile_n`` (output tile, elements).

    Leaves (float, batchable, differentiable):
    n_sms: streaming multiprocessors (CUs).
    peak_flops_per_ns: dense bf16 tensor peak, FLOP/ns.
    gemm_eff: sustained fraction of peak for a large GEMM main loop.
    hbm_bw_bytes_per_ns: achievable HBM bandwidth.
    link_bw_bytes_per_ns: nominal scale-up bandwidth per GPU per direction.
    {ce,tma,reg}_bw_bytes_per_ns: measured mechanism peak (all SMs, 1 GB moved; PK Fig. 2).
    {ce,tma,reg}_msg80_bytes: message size reaching 80% of that peak (PK 3.2).
    tma_max_msg_bytes: largest TMA message (227 KB); bigger transfers split.
    {tma,reg}_sat_sms: SMs needed to saturate the link (PK 3.2: ~15, ~76).
    sync_intra_ns / sync_inter_ns: mbarrier (~64 ns) / HBM flag (~832 ns) sync (PK 3.3).
    p2p_reduce_eff: achieved bandwidth of a point-to-point reduction (an atomic
        ``store_add`` / ``red.add`` into a peer's memory, PK 3.2-3.3) as a fraction
        of the same mechanism's plain store (dimensionless, (0, 1]).  PK attributes
        the residual communication near the hiding threshold to "atomic adds
        during output-tile accumulation" and the intra-SM GEMM+AR loss to the
        "serialization of concurrent peer writes" (3.3) but gives no bandwidth;
        1.0 = no atomic penalty (the model before the atomic term was added).
    launch_ns: kernel launch + setup; not given by PK (source in the preset).
    system: a ``nuna_jax.system.System`` when ``comm_model == "nuna"``, else None.
    """

    name: str = _static("custom")
    in_fabric_reduction: bool = _static(True)
    comm_model: str = _static("mechanism")
    tile_m: int = _static(128)
    tile_n: int = _static(256)

    n_sms: Any = 132.0
    peak_flops_per_ns: Any = 989e3
    gemm_eff: Any = 0.75
    hbm_bw_bytes_per_ns: Any = 3350.0
    link_bw_bytes_per_ns: Any = 450.0
    ce_bw_bytes_per_ns: Any = 368.82
    tma_bw_bytes_per_ns: Any = 350.01
    reg_bw_bytes_per_ns: Any = 342.68
    ce_msg80_bytes: Any = 256.0 * 2**20
    tma_msg80_bytes: Any = 2.0 * 2**10
    reg_msg80_bytes: Any = 128.0
    tma_max_msg_bytes: Any = 227.0 * 2**10
    tma_sat_sms: Any = 15.0
    reg_sat_sms: Any = 76.0
    sync_intra_ns: Any = 64.0
    sync_inter_ns: Any = 832.0
    launch_ns: Any = 4000.0
    p2p_reduce_eff: Any = 1.0
    system: Any = None

    def replace(self, **kw) -> "KernelHW":
        import dataclasses
        return _validate_hw(dataclasses.replace(self, **kw))


_HW_POSITIVE = (
    "n_sms", "peak_flops_per_ns", "gemm_eff", "hbm_bw_bytes_per_ns", "link_bw_bytes_per_ns",
    "ce_bw_bytes_per_ns", "tma_bw_bytes_per_ns", "reg_bw_bytes_per_ns", "ce_msg80_bytes",
    "tma_msg80_bytes", "reg_msg80_bytes", "tma_max_msg_bytes", "tma_sat_sms", "reg_sat_sms",
    "p2p_reduce_eff",
)
_HW_NONNEG = ("sync_intra_ns", "sync_inter_ns", "launch_ns")


def _validate_hw(hw: KernelHW) -> KernelHW:
    check_float_fields("KernelHW", hw, _HW_POSITIVE, _HW_NONNEG)
    g = _concrete(hw.gemm_eff)
    if g is not None and np.any(g > 1):
        raise ValueError(f"KernelHW.gemm_eff must be <= 1, got {hw.gemm_eff!r}")
    e = _concrete(hw.p2p_reduce_eff)
    if e is not None and np.any(e > 1):
        raise ValueError(f"KernelHW.p2p_reduce_eff must be in (0, 1], got {hw.p2p_reduce_eff!r}")
    if hw.comm_model not in ("mechanism", "nuna"):
        raise ValueError(f"KernelHW.comm_model must be 'mechanism' or 'nuna', got {hw.comm_model!r}")
    if hw.comm_model == "nuna" and hw.system is None:
        raise ValueError("KernelHW.system must be a nuna_jax System when comm_model='nuna'")
    for k in ("tile_m", "tile_n"):
        v = getattr(hw, k)
        if not isinstance(v, (int, np.integer)) or v <= 0:
            raise ValueError(f"KernelHW.{k} must be a positive integer, got {v!r}")
    return hw


def stack_hw(*hws: KernelHW) -> KernelHW:
    """Stack presets along a new leading axis (for ``vmap`` over hardware).

    Static fields other than ``name`` must match; the name becomes ``a|b|..``.
    """
    import dataclasses
    if not hws:
        raise ValueError("stack_hw needs at least one KernelHW")
    base = hws[0]
    for h in hws[1:]:
        for k in ("in_fabric_reduction", "comm_model", "tile_m", "tile_n"):
            if getattr(h, k) != getattr(base, k):
                raise ValueError(f"stack_hw: KernelHW.{k} differs ({getattr(h, k)!r} vs {getattr(base, k)!r})")
    renamed = [dataclasses.replace(h, name="|".join(x.name for x in hws)) for h in hws]
    return jax.tree_util.tree_map(lambda *x: jnp.stack([jnp.asarray(v, jnp.float32) for v in x]), *renamed)


# ---------------------------------------------------------------------------
# smooth max / min (exact when tau == 0); tau > 0 gives the relaxed objective
# ---------------------------------------------------------------------------
def _max(a, b, tau=0.0):
    if isinstance(tau, (int, float)) and tau == 0:
        return jnp.maximum(a, b)
    return tau * jnp.logaddexp(a / tau, b / tau)


def _min(a, b, tau=0.0):
    return -_max(-a, -b, tau)


# ---------------------------------------------------------------------------
# transfer mechanisms (PK section 3.2, Figure 2)
# ---------------------------------------------------------------------------
def _mech_fields(hw: KernelHW, mech: str):
    if mech == "ce":
        return hw.ce_bw_bytes_per_ns, hw.ce_msg80_bytes, jnp.inf, None
    if mech == "tma":
        return hw.tma_bw_bytes_per_ns, hw.tma_msg80_bytes, hw.tma_max_msg_bytes, hw.tma_sat_sms
    if mech == "reg":
        return hw.reg_bw_bytes_per_ns, hw.reg_msg80_bytes, jnp.inf, hw.reg_sat_sms
    raise ValueError(f"mechanism must be one of {MECHANISMS}, got {mech!r}")


_REF_BYTES = 1e9  # PK Figure 2 moves 1 GB with all SMs


def mechanism_bw(hw: KernelHW, mech: str, msg_bytes, n_sms=None):
    """Achieved bandwidth (bytes/ns) of a mechanism, PK 3.2 / Figure 2.

    Message-size curve ``B(m) = B_inf * m / (m + h)`` (a fixed per-message
    cost ``h / B_inf``), with ``m`` capped at the largest message
    (``tma_max_msg_bytes`` for TMA: bigger transfers are split).  The two
    constants are solved from two stated points: ``B(ref) = peak`` with
    ``ref = min(1 GB, max message)`` (the Figure-2 measurement) and
    ``B(msg80) = 0.8 peak``.  Hence ``h = 0.2 m80 ref / (0.8 ref - m80)``.

    SM limit (device-launched mechanisms only): ``n_sms`` issuing SMs give
    at most ``n_sms * peak / sat_sms``.  The copy engine is host-launched and
    ignores ``n_sms``.
    """
    bw, sm_bw = _mech_bw_parts(hw, mech, msg_bytes, n_sms)
    return bw if sm_bw is None else jnp.minimum(bw, sm_bw)


def _mech_bw_parts(hw: KernelHW, mech: str, msg_bytes, n_sms):
    """(message-size-limited bw, SM-issue-limited bw or None), bytes/ns."""
    peak, m80, max_msg, sat = _mech_fields(hw, mech)
    ref = jnp.minimum(_REF_BYTES, max_msg)
    h = 0.2 * m80 * ref / (0.8 * ref - m80)
    b_inf = peak * (ref + h) / ref
    m = jnp.minimum(jnp.asarray(msg_bytes, jnp.float32), max_msg)
    bw = b_inf * m / (m + h)
    sm_bw = None
    if sat is not None and n_sms is not None:
        sm_bw = jnp.asarray(n_sms, jnp.float32) * peak / sat
    return bw, sm_bw


# ---------------------------------------------------------------------------
# communication patterns: bytes per GPU per direction (the busier direction)
# ---------------------------------------------------------------------------
#   S is the collective's buffer: gathered size (AG), full partial size (RS,
#   AR), send buffer (A2A).  P = n_gpus.
_PATTERNS = {
    # name: (bytes(S, P), reduces?, needs in-fabric?, NUNA adapter (op, S scale),
    #        share of the bytes that are point-to-point reductions (atomic store_add))
    "ag": (lambda S, P: (P - 1) / P * S, False, False, ("all-gather", 1), 0.0),
    "a2a": (lambda S, P: (P - 1) / P * S, False, False, ("all-to-all", 1), 0.0),
    "rs": (lambda S, P: (P - 1) / P * S, True, False, ("reduce-scatter", 1), 1.0),
    # multimem.ld_reduce: the switch pulls every shard from every GPU -> S egress;
    # the switch reduces, no atomic at a peer
    "rs-fabric": (lambda S, P: S, True, True, ("reduce-scatter", 1), 0.0),
    # RS (atomic adds into the owner) then AG (plain stores), point to point
    "ar-p2p": (lambda S, P: 2 * (P - 1) / P * S, True, False, ("all-reduce", 1), 0.5),
    # ld_reduce of own shard (S egress over all shards) + multimem.st of it (S/P)
    "ar-fabric": (lambda S, P: (1 + 1 / P) * S, True, True, ("all-reduce", 1), 0.0),
    # intra-SM fused AR: every output tile atomically added into all P-1 peers
    "ar-atomic": (lambda S, P: (P - 1) * S, True, False, ("all-to-all", "P"), 1.0),
}


def p2p_reduce_factor(hw: KernelHW, pattern: str):
    """Time multiplier (>= 1) of ``pattern`` for its point-to-point reductions.

    A byte reduced into a peer's memory by an atomic ``store_add`` (PK's
    ``store_add_async``, 3.2; "atomic adds during output-tile accumulation",
    3.3) moves at ``p2p_reduce_eff`` of the plain-store bandwidth; the other
    bytes at full bandwidth: ``f / eff + (1 - f)``, ``f`` the reduced share
    of the pattern's bytes (1 for ``rs`` and ``ar-atomic``, 1/2 for
    ``ar-p2p``, 0 for gathers and in-fabric reductions).  Dimensionless.
    """
    f = _PATTERNS[pattern][4]
    if f == 0.0:
        return jnp.ones(())
    return f / jnp.asarray(hw.p2p_reduce_eff, jnp.float32) + (1.0 - f)


def comm_pattern_bytes(pattern: str, S, n_gpus):
    """Bytes one GPU moves in its busier link direction for ``pattern`` (see _PATTERNS)."""
    if pattern not in _PATTERNS:
        raise ValueError(f"unknown communication pattern {pattern!r}; known: {sorted(_PATTERNS)}")
    return _PATTERNS[pattern][0](jnp.asarray(S, jnp.float32), jnp.asarray(n_gpus, jnp.float32))


# ---------------------------------------------------------------------------
# NUNA adapter (NUNA Table-2 socket: T_comm from this library's collective model)
# ---------------------------------------------------------------------------
def nuna_collective_ns(system, op: str, n_bytes, n_gpus):
    """Time (ns) of collective ``op`` on ``n_bytes`` over ``n_gpus`` sockets of ``system``:
    :func:`nuna_jax.models.collectives.collective_time_ns` with the one-round, all-pairs
    (``direct``) plan through the switch and the NUNA mean alpha."""
    from .collectives import collective_time_ns
    return jnp.asarray(collective_time_ns(system, op, n_bytes, algorithm="direct", n_gpus=n_gpus), jnp.float32)


def nuna_comm_path() -> str:
    """Which model gives T_comm on a NUNA socket (reported by ``nuna-jax kernel``)."""
    return "nuna_jax.models.collectives.collective_time_ns (algorithm='direct', mean NUNA alpha)"


def comm_time_ns(hw: KernelHW, pattern: str, S, n_gpus, mech: str, msg_bytes, issue_sms, tau=0.0):
    """T_comm (ns) = bytes / achieved bandwidth for ``pattern`` on ``S`` bytes.

    ``comm_model == "mechanism"``: bandwidth from :func:`mechanism_bw` with
    ``issue_sms`` SMs.  ``"nuna"``: ``max(NUNA collective time, bytes /
    issue-limited bandwidth)``, the NUNA time from :func:`nuna_collective_ns`.
    Either is multiplied by :func:`p2p_reduce_factor` (atomic reductions into
    peers are slower than plain stores).  Returns ``(t_ns, bytes, bw)``.
    """
    nbytes = comm_pattern_bytes(pattern, S, n_gpus)
    red = p2p_reduce_factor(hw, pattern)
    if hw.comm_model == "nuna":
        op, scale = _PATTERNS[pattern][3]
        s_arg = S * (jnp.asarray(n_gpus, jnp.float32) if scale == "P" else 1.0)
        t_fab = nuna_collective_ns(hw.system, op, s_arg, n_gpus)
        peak, _, _, sat = _mech_fields(hw, mech)
        if sat is None:
            t = t_fab
        else:
            t = _max(t_fab, nbytes / (jnp.asarray(issue_sms, jnp.float32) * peak / sat), tau)
        t = t * red
        return t, nbytes, nbytes / t
    bw_msg, bw_sm = _mech_bw_parts(hw, mech, msg_bytes, issue_sms)
    t = nbytes / bw_msg if bw_sm is None else _max(nbytes / bw_msg, nbytes / bw_sm, tau)
    t = t * red
    return t, nbytes, nbytes / t


# ---------------------------------------------------------------------------
# validation helpers at the API boundary
# ---------------------------------------------------------------------------
def _check_positive(name, v):
    a = _concrete(v)
    if a is not None and (not np.all(np.isfinite(a)) or np.any(a <= 0)):
        raise ValueError(f"{name} must be positive and finite, got {v!r}")


def _check_divisible(name, v, d, why):
    a, b = _concrete(v), _concrete(d)
    if a is None or b is None:
        return
    if np.any(np.mod(a, b) != 0):
        raise ValueError(f"{name}={v!r} must be divisible by {d!r} ({why})")


def default_mechanism(hw: KernelHW, op: str, schedule: str) -> str:
    """PK's choices: TMA for intra-SM overlap and plain transfers; register
    ld/st (in-fabric reduction, multimem) for reductions with inter-SM
    overlap or plain All-Reduce/Reduce-Scatter when the switch can reduce."""
    reduces = op in ("gemm+rs", "gemm+ar", "all-reduce", "reduce-scatter")
    if reduces and hw.in_fabric_reduction and (schedule == "inter" or op in COLLECTIVE_OPS):
        return "reg"
    return "tma"


def _pattern_for(hw, op, schedule, mech):
    """Communication pattern a fused/plain op uses under a schedule/mechanism."""
    base = {"ag+gemm": "ag", "gemm+rs": "rs", "gemm+ar": "ar", "all-gather": "ag",
            "reduce-scatter": "rs", "all-reduce": "ar", "all-to-all": "a2a"}[op]
    if base in ("ag", "a2a"):
        return base
    if mech == "ce":
        raise ValueError(f"mechanism='ce': the copy engine cannot reduce, so it cannot run {op!r} (PK 3.2)")
    fabric = mech == "reg" and hw.in_fabric_reduction
    if op == "gemm+ar" and schedule == "intra":
        return "ar-atomic"          # per-tile atomics into every peer (PK 3.3)
    if base == "rs":
        return "rs-fabric" if (fabric and schedule == "inter") or (fabric and op == "reduce-scatter") else "rs"
    return "ar-fabric" if fabric else "ar-p2p"


# ---------------------------------------------------------------------------
# the model
# ---------------------------------------------------------------------------
def _f(x):
    return jnp.asarray(x, jnp.float32)


def fused_terms(hw: KernelHW, op: str, m, n, k, n_gpus=8, schedule: str = "intra",
                comm_sms=None, mechanism: str | None = None, elem_bytes=2,
                msg_bytes=None, tau=0.0, validate: bool = True, comm_ns=None) -> dict:
    """All terms (ns) of one fused kernel, PK eq. 1, per GPU.

    ``op``: ``gemm`` (no communication), ``ag+gemm`` (A of ``m x k`` gathered
    from ``n_gpus`` row shards, local B ``k x n``), ``gemm+rs`` (local partial
    ``m x n``, reduce-scattered by rows), ``gemm+ar`` (partial all-reduced).
    ``schedule``: ``intra`` (all SMs compute, communication issued from the
    same SMs) or ``inter`` (``comm_sms`` SMs communicate).  ``mechanism``
    defaults to :func:`default_mechanism`.  ``tau > 0`` (ns) smooths max/min
    (the relaxed objective used with ``grad``).  ``comm_ns`` (ns, optional): the
    collective's time from another model (the NUNA path model under a placement
    policy, :mod:`nuna_jax.pk_nuna`) replaces the mechanism-model T_comm; bytes
    are still the pattern's.

    Returns a dict of arrays: ``launch_ns, comp_ns, mem_ns, comm_ns,
    non_overlap_ns, sync_ns, total_ns`` and ``flops, hbm_bytes, comm_bytes,
    comm_bw_bytes_per_ns, compute_sms, comm_sms``.
    """
    if op not in FUSED_OPS:
        raise ValueError(f"op must be one of {FUSED_OPS} for a fused kernel, got {op!r}")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    mech = mechanism or default_mechanism(hw, op, schedule)
    if mech not in MECHANISMS:
        raise ValueError(f"mechanism must be one of {MECHANISMS}, got {mech!r}")
    if validate:
        _validate_hw(hw)
        for name, v in (("m", m), ("n", n), ("k", k), ("elem_bytes", elem_bytes)):
            _check_positive(name, v)
        if op != "gemm":
            _check_positive("n_gpus", n_gpus)
            a = _concrete(n_gpus)
            if a is not None and (np.any(a < 2) or np.any(a != np.round(a))):
                raise ValueError(f"n_gpus must be an integer >= 2 for {op!r}, got {n_gpus!r}")
            _check_divisible("m", m, n_gpus, f"{op} shards rows of m over n_gpus")
            if schedule == "intra":
                mp = _concrete(m)
                pp = _concrete(n_gpus)
                if mp is not None and pp is not None:
                    _check_divisible("m / n_gpus", mp / pp, hw.tile_m,
                                     "intra-SM overlap sends whole output/input tiles to their owner GPU")
                _check_divisible("n", n, hw.tile_n, "intra-SM overlap works on whole tiles")
        if schedule == "inter":
            if comm_sms is None:
                raise ValueError("comm_sms is required for schedule='inter' (see best_comm_sms_search)")
            c, ns = _concrete(comm_sms), _concrete(hw.n_sms)
            if c is not None and ns is not None and (np.any(c <= 0) or np.any(c >= ns)):
                raise ValueError(f"comm_sms must be in (0, n_sms={hw.n_sms}), got {comm_sms!r}")
    m, n, k, s, P = _f(m), _f(n), _f(k), _f(elem_bytes), _f(n_gpus)
    n_sms = _f(hw.n_sms)
    if schedule == "inter" and op != "gemm":
        c = _f(comm_sms)
        compute_sms = n_sms - c
        issue_sms = c
        sync_cost = _f(hw.sync_inter_ns)
    else:
        c = jnp.zeros(())
        compute_sms = n_sms
        issue_sms = n_sms
        sync_cost = _f(hw.sync_intra_ns)
    flops = 2.0 * m * n * k
    t_comp = flops / (_f(hw.peak_flops_per_ns) * _f(hw.gemm_eff) * compute_sms / n_sms)
    hbm = s * (m * k + k * n + m * n)  # perfect-L2-reuse lower bound
    tiles = m * n / (hw.tile_m * hw.tile_n)
    if op == "gemm":
        t_comm = jnp.zeros_like(t_comp)
        nbytes = jnp.zeros_like(t_comp)
        bw = jnp.zeros_like(t_comp)
    else:
        pattern = _pattern_for(hw, op, schedule, mech)
        S = s * (m * k if op == "ag+gemm" else m * n)
        if msg_bytes is None:
            if mech == "ce":
                msg = S / P                       # one copy per peer shard
            elif schedule == "intra":             # one tile (operand block or output tile)
                msg = s * hw.tile_m * (64.0 if op == "ag+gemm" else hw.tile_n)
            else:                                 # bulk chunks, capped by the TMA limit
                msg = S / P
        else:
            msg = _f(msg_bytes)
        t_comm, nbytes, bw = comm_time_ns(hw, pattern, S, P, mech, msg, issue_sms, tau)
        if comm_ns is not None:
            t_comm = _f(comm_ns) * jnp.ones_like(t_comm)
            bw = nbytes / t_comm
        # HBM traffic added by communication: atomic read-modify-write at the
        # destination (intra), or staging through local HBM (inter).
        hbm = hbm + nbytes * (2.0 if schedule == "intra" else 3.0)
    t_mem = hbm / _f(hw.hbm_bw_bytes_per_ns)
    waves = jnp.maximum(tiles / compute_sms, 1.0)
    body = _max(_max(t_comp, t_mem, tau), t_comm, tau)
    t_non = _min(t_comp, t_comm, tau) / waves if op != "gemm" else jnp.zeros_like(t_comp)
    t_sync = waves * sync_cost if op != "gemm" else jnp.zeros_like(t_comp)
    t_launch = _f(hw.launch_ns) * jnp.ones_like(t_comp)
    total = t_launch + body + t_non + t_sync
    return _broadcast(dict(launch_ns=t_launch, comp_ns=t_comp, mem_ns=t_mem, comm_ns=t_comm,
                           non_overlap_ns=t_non, sync_ns=t_sync, total_ns=total, flops=flops,
                           hbm_bytes=hbm, comm_bytes=nbytes, comm_bw_bytes_per_ns=bw,
                           compute_sms=compute_sms, comm_sms=c))


def _broadcast(d: dict) -> dict:
    """Broadcast every entry to the common batch shape (batching == looping)."""
    shape = jnp.broadcast_shapes(*(jnp.shape(v) for v in d.values()))
    return {k: jnp.broadcast_to(v, shape) for k, v in d.items()}


def collective_terms(hw: KernelHW, op: str, n_bytes, n_gpus=8, mechanism: str | None = None,
                     n_sms=None, msg_bytes=None, validate: bool = True) -> dict:
    """A plain collective kernel on a buffer of ``n_bytes`` (see _PATTERNS for S).

    ``T = T_launch + max(T_mem, T_comm) + T_sync`` with one inter-GPU
    handshake (``sync_inter_ns``).  All SMs issue unless ``n_sms`` is given.
    ``msg_bytes`` defaults to the per-peer shard ``n_bytes / n_gpus``.
    """
    if op not in COLLECTIVE_OPS:
        raise ValueError(f"op must be one of {COLLECTIVE_OPS}, got {op!r}")
    mech = mechanism or default_mechanism(hw, op, "inter")
    if mech not in MECHANISMS:
        raise ValueError(f"mechanism must be one of {MECHANISMS}, got {mech!r}")
    if validate:
        _validate_hw(hw)
        _check_positive("n_bytes", n_bytes)
        a = _concrete(n_gpus)
        if a is not None and (np.any(a < 2) or np.any(a != np.round(a))):
            raise ValueError(f"n_gpus must be an integer >= 2, got {n_gpus!r}")
    S, P = _f(n_bytes), _f(n_gpus)
    pattern = _pattern_for(hw, op, "inter", mech)
    sms = _f(hw.n_sms if n_sms is None else n_sms)
    msg = S / P if msg_bytes is None else _f(msg_bytes)
    t_comm, nbytes, bw = comm_time_ns(hw, pattern, S, P, mech, msg, sms)
    t_mem = 2.0 * nbytes / _f(hw.hbm_bw_bytes_per_ns)
    t_launch = _f(hw.launch_ns) * jnp.ones_like(t_comm)
    t_sync = _f(hw.sync_inter_ns) * jnp.ones_like(t_comm)
    z = jnp.zeros_like(t_comm)
    total = t_launch + jnp.maximum(t_mem, t_comm) + t_sync
    return _broadcast(dict(launch_ns=t_launch, comp_ns=z, mem_ns=t_mem, comm_ns=t_comm, non_overlap_ns=z,
                           sync_ns=t_sync, total_ns=total, flops=z, hbm_bytes=2.0 * nbytes,
                           comm_bytes=nbytes, comm_bw_bytes_per_ns=bw))


_FUSED_TO_COLL = {"ag+gemm": "all-gather", "gemm+rs": "reduce-scatter", "gemm+ar": "all-reduce"}


def baseline_terms(hw: KernelHW, op: str, m, n, k, n_gpus=8, mechanism: str | None = None,
                   elem_bytes=2, validate: bool = True) -> dict:
    """Non-overlapped baseline: the GEMM kernel, then (or, for AG, before) the
    plain collective kernel; ``total = GEMM total + collective total``.  The
    collective's whole time is reported as ``non_overlap_ns``."""
    if op not in _FUSED_TO_COLL:
        raise ValueError(f"baseline needs a fused op in {tuple(_FUSED_TO_COLL)}, got {op!r}")
    g = fused_terms(hw, "gemm", m, n, k, 1, validate=validate)
    if validate:
        _check_divisible("m", m, n_gpus, f"{op} shards rows of m over n_gpus")
    s = _f(elem_bytes)
    S = s * _f(m) * (_f(k) if op == "ag+gemm" else _f(n))
    col = collective_terms(hw, _FUSED_TO_COLL[op], S, n_gpus, mechanism, validate=validate)
    out = {key: g[key] for key in ("comp_ns", "mem_ns", "flops", "hbm_bytes")}
    out.update(launch_ns=g["launch_ns"] + col["launch_ns"], comm_ns=col["comm_ns"],
               non_overlap_ns=col["total_ns"] - col["launch_ns"] - col["sync_ns"],
               sync_ns=col["sync_ns"], comm_bytes=col["comm_bytes"],
               comm_bw_bytes_per_ns=col["comm_bw_bytes_per_ns"],
               total_ns=g["total_ns"] + col["total_ns"])
    return _broadcast(out)


def kernel_terms(hw: KernelHW, op: str, m=None, n=None, k=None, n_gpus=8, schedule="intra",
                 comm_sms=None, mechanism=None, n_bytes=None, elem_bytes=2, **kw) -> dict:
    """Dispatch: fused ops via :func:`fused_terms` (inter-SM with ``comm_sms=None``
    picks the best split by integer search), collectives via :func:`collective_terms`."""
    if op in COLLECTIVE_OPS:
        if n_bytes is None:
            if m is None or n is None:
                raise ValueError(f"{op}: give n_bytes, or m and n (buffer = m * n * elem_bytes)")
            n_bytes = _f(m) * _f(n) * elem_bytes
        return collective_terms(hw, op, n_bytes, n_gpus, mechanism, **kw)
    if op not in FUSED_OPS:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    for name, v in (("m", m), ("n", n), ("k", k)):
        if v is None:
            raise ValueError(f"{op} needs {name}")
    if schedule == "inter" and comm_sms is None and op != "gemm":
        comm_sms, _ = best_comm_sms_search(hw, op, m, n, k, n_gpus, mechanism=mechanism,
                                           elem_bytes=elem_bytes)
    return fused_terms(hw, op, m, n, k, n_gpus, schedule, comm_sms, mechanism, elem_bytes, **kw)


def tflops(terms: dict) -> jnp.ndarray:
    """Achieved local throughput in TFLOP/s (FLOP/ns / 1e3), as the paper reports."""
    return terms["flops"] / terms["total_ns"] / 1e3


def non_overlapped_share(hw: KernelHW, m, n, k, n_gpus=8, op="gemm+rs", schedule="intra",
                         comm_sms=None, **kw):
    """PK Table 3's share: ``(T_fused - T_gemm) / T_fused``, where ``T_gemm`` is
    the same GEMM with no communication.  (Checked: the paper's column equals
    this expression of its own GEMM and GEMM+RS times to 0.1 percent.)"""
    fused = kernel_terms(hw, op, m, n, k, n_gpus, schedule, comm_sms, **kw)
    gemm = fused_terms(hw, "gemm", m, n, k, 1)
    return (fused["total_ns"] - gemm["total_ns"]) / fused["total_ns"]


# ---------------------------------------------------------------------------
# hiding condition (PK 3.3): GEMM+RS, intra-SM, per output tile
# ---------------------------------------------------------------------------
def tile_comp_ns(hw: KernelHW, K, achieved=False):
    """Time to produce one ``tile_m x tile_n`` output tile: ``2 m n K / R``."""
    R = _f(hw.peak_flops_per_ns) * (_f(hw.gemm_eff) if achieved else 1.0)
    return 2.0 * hw.tile_m * hw.tile_n * _f(K) / R


def tile_comm_ns(hw: KernelHW, elem_bytes=2, achieved=False):
    """Time to send one output tile to its owner: ``s m n / B``; ``B`` is the
    nominal link (``achieved=False``, PK 3.3) or the atomic ``store_add`` of one
    tile message: TMA at the tile size times ``p2p_reduce_eff``."""
    tile_bytes = _f(elem_bytes) * hw.tile_m * hw.tile_n
    if achieved:
        B = mechanism_bw(hw, "tma", tile_bytes, hw.n_sms) * _f(hw.p2p_reduce_eff)
    else:
        B = _f(hw.link_bw_bytes_per_ns)
    return tile_bytes / B


def hiding_threshold_k(hw: KernelHW, elem_bytes=2, achieved=False, level="tile", n_gpus=8):
    """Smallest K at which GEMM+RS communication hides behind compute.

    ``level="tile"`` (PK 3.3): solves ``tile_comp_ns(K) = tile_comm_ns``; as
    ``tile_comp_ns`` is linear in K through 0, ``K* = tile_comm / (d tile_comp
    / dK)`` with the slope from ``jax.grad`` -- the model's terms, not a typed
    formula.  The closed form is ``K* = s R / (2 B)`` (2197 on H100, bf16,
    nominal R and B).  ``level="kernel"``: bisection on the whole-kernel terms
    of :func:`fused_terms` (intra-SM GEMM+RS, M = N = 32768), where only
    ``(P-1)/P`` of the output crosses the link.
    """
    if level == "tile":
        slope = jax.grad(lambda kk: tile_comp_ns(hw, kk, achieved))(1.0)
        return tile_comm_ns(hw, elem_bytes, achieved) / slope
    if level != "kernel":
        raise ValueError(f"level must be 'tile' or 'kernel', got {level!r}")
    hw2 = hw if achieved else hw.replace(gemm_eff=1.0, tma_bw_bytes_per_ns=hw.link_bw_bytes_per_ns,
                                         tma_msg80_bytes=1e-3, p2p_reduce_eff=1.0)
    lo, hi = 1.0, 1e6
    mm = 32768.0

    def gap(kk):
        t = fused_terms(hw2, "gemm+rs", mm, mm, kk, n_gpus, "intra", elem_bytes=elem_bytes, validate=False)
        return float(t["comm_ns"] - t["comp_ns"])

    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if gap(mid) > 0 else (lo, mid)
    return 0.5 * (lo + hi)


# ---------------------------------------------------------------------------
# the communication-SM split for inter-SM overlap (PK 3.3, Figure 5)
# ---------------------------------------------------------------------------
def best_comm_sms_search(hw: KernelHW, op: str, m, n, k, n_gpus=8, mechanism=None,
                         elem_bytes=2, **kw):
    """Exhaustive integer search over ``comm_sms = 1 .. n_sms-1`` (exact model).

    Returns ``(best_comm_sms: int, best_total_ns: float)``; concrete inputs only.
    """
    ns = _concrete(hw.n_sms)
    if ns is None or ns.ndim:
        raise ValueError("best_comm_sms_search needs a single, concrete KernelHW.n_sms")
    cs = jnp.arange(1, int(ns), dtype=jnp.float32)
    t = fused_terms(hw, op, m, n, k, n_gpus, "inter", cs, mechanism, elem_bytes, **kw)["total_ns"]
    i = int(jnp.argmin(t))
    return int(cs[i]), float(t[i])


def best_comm_sms_grad(hw: KernelHW, op: str, m, n, k, n_gpus=8, mechanism=None, elem_bytes=2,
                       tau_rel=1e-3, steps=400, lr=0.05, c0=None):
    """Descend a relaxed, continuous split with ``jax.grad``.

    The split is ``c = 1 + (n_sms - 2) * sigmoid(u)``; the objective is
    ``log total_ns`` of :func:`fused_terms` with max/min smoothed at
    ``tau = tau_rel * T_scale`` (``T_scale``: the all-SM compute time).  Adam
    (optax) for ``steps`` steps.  Returns ``(c_star, c_int)``: the continuous
    optimum and the better of its floor/ceil under the exact model.
    """
    import optax
    fused_terms(hw, op, m, n, k, n_gpus, "inter", 1.0, mechanism, elem_bytes)  # validate once
    ns = float(hw.n_sms)
    scale = float(fused_terms(hw, "gemm", m, n, k, 1, validate=False)["total_ns"])
    tau = tau_rel * scale

    def c_of(u):
        return 1.0 + (ns - 2.0) * jax.nn.sigmoid(u)

    def loss(u):
        t = fused_terms(hw, op, m, n, k, n_gpus, "inter", c_of(u), mechanism, elem_bytes,
                        tau=tau, validate=False)["total_ns"]
        return jnp.log(t)

    start = 0.25 * ns if c0 is None else float(c0)
    u0 = jnp.asarray(math.log((start - 1.0) / (ns - 1.0 - start)), jnp.float32)
    opt = optax.adam(lr)

    def step(carry, _):
        u, st = carry
        g = jax.grad(loss)(u)
        upd, st = opt.update(g, st)
        return (optax.apply_updates(u, upd), st), None

    (u, _), _ = jax.lax.scan(step, (u0, opt.init(u0)), None, length=steps)
    c_star = float(c_of(u))
    cands = sorted({min(max(math.floor(c_star), 1), int(ns) - 1), min(max(math.ceil(c_star), 1), int(ns) - 1)})
    t = [float(fused_terms(hw, op, m, n, k, n_gpus, "inter", c, mechanism, elem_bytes,
                           validate=False)["total_ns"]) for c in cands]
    return c_star, cands[int(np.argmin(t))]
