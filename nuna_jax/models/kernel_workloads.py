"""ParallelKittens' workloads and baselines in the kernel model's form (PK, arXiv:2511.13940, section 4).

Every function returns the terms of PK eq. 1,

    T = T_launch + max(T_comp, T_mem, T_comm) + T_non-overlap + T_sync,

as a dict of ns (``launch_ns, comp_ns, mem_ns, comm_ns, non_overlap_ns, sync_ns, total_ns``)
plus the work (``flops``, ``hbm_bytes``, ``comm_bytes``).  A sequential baseline puts the whole
collective (and any reshape) in ``non_overlap_ns``: nothing of it overlaps.

* :func:`cublas_nccl_terms` -- "cuBLAS + NCCL" (PK Figs. 7-9): the plain GEMM of
  :func:`kernel.fused_terms` (same roofline and ``gemm_eff``) followed (AG: preceded) by the NCCL
  collective NCCL's tuner picks (:mod:`nuna_jax.models.nccl`), no overlap.
* :func:`ring_attention_terms` -- sequence parallel (PK Fig. 10): ``design="pk"`` one fused
  inter-SM kernel (communication SMs pull the next KV block by TMA while the others compute);
  ``design="xdit"``: NCCL send/recv and a FlashAttention kernel per ring step on two streams
  (stream-level overlap, PK 4).
* :func:`ulysses_terms` -- DeepSpeed-Ulysses (PK Fig. 11): All-to-All of Q, K, V (sequence ->
  heads), attention, All-to-All of O.  ``design="pk"``: PK's fine-grained A2A kernels (TMA, no
  reshape); ``design="yunchang"``: a reshape copy before and after each NCCL All-to-All (PK 4:
  "NCCL does not support communication along inner dimensions").
* :func:`moe_dispatch_terms` -- expert parallel (PK Fig. 12): token dispatch (All-to-All, top-k
  copies, ``imbalance`` = busiest device / mean) + first expert GEMM.  ``design="pk"``: fused
  inter-SM kernel; ``design="sequential"``: NCCL All-to-All then the grouped GEMM.

Attention FLOPs are ``4 B H Lq Lk D`` (QK^T and PV, non-causal) at the GEMM's ``gemm_eff`` (our
assumption: FlashAttention-3 class kernels reach the same fraction as a large GEMM).  Shapes per
the PK notes: ``seq_len`` is the total sequence, split evenly over ``n_gpus``.
``comm_ns`` (optional, fused PK designs): the collective's time from another model (e.g. the
NUNA path model, :mod:`nuna_jax.pk_nuna`) replaces the mechanism-model T_comm.
Units: ns, bytes, FLOP.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ..checks import concrete as _concrete
from . import kernel as K
from . import nccl as N

__all__ = ["WORKLOADS", "cublas_nccl_terms", "ring_attention_terms", "ulysses_terms",
           "moe_dispatch_terms", "moe_dispatch_bytes", "attention_flops", "workload_terms", "share_vs_compute_only",
           "nccl_for"]

WORKLOADS = ("ring-attention", "ulysses", "moe-dispatch")
_TERMS = ("launch_ns", "comp_ns", "mem_ns", "comm_ns", "non_overlap_ns", "sync_ns", "total_ns")


def _f(x):
    return jnp.asarray(x, jnp.float32)


def _pos(name, v):
    a = _concrete(v)
    if a is not None and (not np.all(np.isfinite(a)) or np.any(a <= 0)):
        raise ValueError(f"{name} must be positive and finite, got {v!r}")


def _gpus(n_gpus):
    a = _concrete(n_gpus)
    if a is not None and (np.any(a < 2) or np.any(a != np.round(a))):
        raise ValueError(f"n_gpus must be an integer >= 2, got {n_gpus!r}")


def _div(name, v, d):
    a, b = _concrete(v), _concrete(d)
    if a is not None and b is not None and np.any(np.mod(a, b) != 0):
        raise ValueError(f"{name}={v!r} must be divisible by n_gpus={d!r} (split evenly over the GPUs, PK 4)")


def nccl_for(hw: K.KernelHW, n_gpus: int, nccl=None) -> N.NcclConfig:
    """The NCCL configuration of a kernel preset (``nccl`` if given), ``n_ranks = n_gpus``."""
    if nccl is not None:
        return nccl if nccl.n_ranks == int(n_gpus) else nccl.replace(n_ranks=int(n_gpus))
    base = str(hw.name).split("|")[0]
    return N.nccl_preset(base, n_ranks=int(n_gpus))


def _pack(**d):
    shape = jnp.broadcast_shapes(*(jnp.shape(v) for v in d.values()))
    return {k: jnp.broadcast_to(jnp.asarray(v, jnp.float32), shape) for k, v in d.items()}


def _comp_ns(hw, flops, compute_sms=None):
    n = _f(hw.n_sms)
    c = n if compute_sms is None else _f(compute_sms)
    return _f(flops) / (_f(hw.peak_flops_per_ns) * _f(hw.gemm_eff) * c / n)


# --------------------------------------------------------------------------- cuBLAS + NCCL
_FUSED_TO_NCCL = {"ag+gemm": "all-gather", "gemm+rs": "reduce-scatter", "gemm+ar": "all-reduce"}


def cublas_nccl_terms(hw: K.KernelHW, op: str, m, n, k, n_gpus=8, nccl=None, elem_bytes=2) -> dict:
    """"cuBLAS + NCCL": the plain GEMM kernel (``fused_terms(hw, "gemm", ...)``: launch +
    max(comp, mem) at ``gemm_eff``) then the NCCL collective on the same buffer ``S`` as the fused
    kernel (gathered A for AG+GEMM, the partial output for GEMM+RS / GEMM+AR), timed by NCCL's
    tuner (:func:`nccl.nccl_time_ns`).  ``total = GEMM total + NCCL time``; ``non_overlap_ns`` =
    ``comm_ns`` = the NCCL time (its latency included: NCCL's ``baseLat`` covers its launch)."""
    if op not in _FUSED_TO_NCCL:
        raise ValueError(f"cuBLAS+NCCL baseline needs an op in {tuple(_FUSED_TO_NCCL)}, got {op!r}")
    _gpus(n_gpus)
    _div("m", m, n_gpus)
    g = K.fused_terms(hw, "gemm", m, n, k, 1)
    cfg = nccl_for(hw, n_gpus, nccl)
    S = _f(elem_bytes) * _f(m) * (_f(k) if op == "ag+gemm" else _f(n))
    t_nccl = N.nccl_time_ns(cfg, _FUSED_TO_NCCL[op], S)
    return _pack(launch_ns=g["launch_ns"], comp_ns=g["comp_ns"], mem_ns=g["mem_ns"], comm_ns=t_nccl,
                 non_overlap_ns=t_nccl, sync_ns=0.0, total_ns=g["total_ns"] + t_nccl, flops=g["flops"],
                 hbm_bytes=g["hbm_bytes"], comm_bytes=S)


# --------------------------------------------------------------------------- attention helpers
def attention_flops(batch, heads, lq, lk, head_dim):
    """``4 B H Lq Lk D``: QK^T and PV of non-causal attention (FLOP)."""
    return 4.0 * _f(batch) * _f(heads) * _f(lq) * _f(lk) * _f(head_dim)


def _attn_kernel(hw, batch, heads, lq, lk, d, s, compute_sms=None):
    """One attention kernel (FlashAttention-class): comp and the HBM lower bound (Q, K, V read
    once, O written once), ns."""
    fl = attention_flops(batch, heads, lq, lk, d)
    hbm = _f(s) * _f(batch) * _f(heads) * _f(d) * (2.0 * _f(lq) + 2.0 * _f(lk))
    return fl, _comp_ns(hw, fl, compute_sms), hbm


def _best_int(total_fn, n_sms):
    """Integer search over comm SMs 1..n_sms-1 (concrete, scalar shapes): (c, terms)."""
    ns = _concrete(n_sms)
    if ns is None or np.ndim(ns):
        raise ValueError("the communication-SM search needs a single, concrete KernelHW.n_sms")
    cs = jnp.arange(1, int(ns), dtype=jnp.float32)
    t = total_fn(cs)
    tot = np.asarray(t["total_ns"])
    if tot.ndim != 1:
        raise ValueError("the communication-SM search needs scalar shapes; pass comm_sms for batched inputs")
    i = int(np.argmin(tot))
    return int(cs[i]), {key: v[i] for key, v in t.items()}


# --------------------------------------------------------------------------- Ring Attention
def ring_attention_terms(hw: K.KernelHW, batch=16, heads=16, seq_len=98304, head_dim=128, n_gpus=8,
                         design="pk", comm_sms=None, elem_bytes=2, nccl=None, comm_ns=None,
                         merge_kernel=True) -> dict:
    """Ring Attention over ``n_gpus`` (P) GPUs, per GPU (PK Fig. 10: B = 16, H = 16, D = 128).

    Each GPU holds ``Lq = seq_len / P`` queries and one KV block (``2 B H Lq D s`` bytes) and, in
    P steps, attends to every KV block while passing blocks around the ring (P - 1 transfers: a
    ring All-Gather of the KV blocks).  Per step: ``c = 4 B H Lq^2 D / R_eff``; ``m`` = one block's
    transfer.

    ``design="pk"`` (inter-SM, ``comm_sms`` SMs issue TMA; best split by integer search if None):
    ``T_comp = P c`` on the compute SMs, ``T_comm = (P - 1) m`` (TMA at the block size, issue-limited
    by ``comm_sms``, or ``comm_ns``), ``T_mem`` = Q/O once + every KV block read + the incoming
    blocks staged in local HBM (written and read), ``T_non-overlap = max(P c, c + (P-1) m) -
    max(T_comp, T_comm)`` (exact for a double-buffered ring: the first step computes on the local
    block), ``T_sync = P x sync_inter_ns`` (a flag per block from the communication SMs).

    ``design="xdit"``: per step a FlashAttention kernel (its own launch) beside an NCCL send/recv
    (:func:`nccl.p2p_time_ns`) on another stream; a step lasts the longer of the two and the last
    step has no transfer.  While NCCL runs it holds ``nccl.sms`` SMs (one CTA per channel), so the
    attention's time is ``att' = min(att n/(n-k), att + t_p2p k/n)`` (work conserved).  With
    ``merge_kernel`` each step also runs one elementwise kernel that rescales and adds the partial
    output (launch + read O twice and write it, fp32; PK's fused kernel does this in registers):
    ``total = (P-1) max(launch + att', t_p2p) + launch + att + P merge``, reported as
    ``comp = P c``, ``comm = (P-1) t_p2p``, the launches, and the rest in ``non_overlap_ns``.
    ``design="sequential"``: the same kernels with no overlap at all (send/recv, then attention):
    ``total = P (launch + att) + (P-1) t_p2p + P merge``.
    """
    for nm, v in (("batch", batch), ("heads", heads), ("seq_len", seq_len), ("head_dim", head_dim),
                  ("elem_bytes", elem_bytes)):
        _pos(nm, v)
    _gpus(n_gpus)
    _div("seq_len", seq_len, n_gpus)
    if design not in ("pk", "xdit", "sequential"):
        raise ValueError(f"ring-attention design must be 'pk', 'xdit' or 'sequential', got {design!r}")
    P, s = _f(n_gpus), _f(elem_bytes)
    lq = _f(seq_len) / P
    kv_bytes = 2.0 * _f(batch) * _f(heads) * lq * _f(head_dim) * s
    fl_step, c_all, hbm_step = _attn_kernel(hw, batch, heads, lq, lq, head_dim, s)
    flops = P * fl_step
    if design == "sequential":
        cfg = nccl_for(hw, n_gpus, nccl)
        t_p2p = N.p2p_time_ns(cfg, kv_bytes)
        hbm_bw = _f(hw.hbm_bw_bytes_per_ns)
        la = _f(hw.launch_ns)
        comp, mem = P * c_all, P * hbm_step / hbm_bw
        o_bytes = 4.0 * _f(batch) * _f(heads) * lq * _f(head_dim)
        merge = (la + 3.0 * o_bytes / hbm_bw) if merge_kernel else jnp.zeros(())
        comm = (P - 1.0) * t_p2p
        launches = P * la * (2.0 if merge_kernel else 1.0)
        total = P * (la + jnp.maximum(c_all, hbm_step / hbm_bw)) + comm + P * merge
        return _pack(launch_ns=launches, comp_ns=comp, mem_ns=mem, comm_ns=comm,
                     non_overlap_ns=total - launches - jnp.maximum(comp, mem), sync_ns=0.0, total_ns=total,
                     flops=flops, hbm_bytes=P * hbm_step, comm_bytes=(P - 1.0) * kv_bytes, comm_sms=0.0)
    if design == "xdit":
        cfg = nccl_for(hw, n_gpus, nccl)
        t_p2p = N.p2p_time_ns(cfg, kv_bytes)
        hbm_bw = _f(hw.hbm_bw_bytes_per_ns)
        att = jnp.maximum(c_all, hbm_step / hbm_bw)
        la = _f(hw.launch_ns)
        # NCCL's kernel holds k SMs while it runs: attention runs on n - k of n SMs meanwhile
        n_sm, k_sm = _f(hw.n_sms), _f(min(cfg.sms, float(hw.n_sms) - 1.0))
        att_ov = jnp.minimum(att * n_sm / (n_sm - k_sm), att + t_p2p * k_sm / n_sm)
        # the partial outputs are merged (log-sum-exp rescale of O) by one elementwise kernel per
        # step: read O and the step's O, write O, fp32
        o_bytes = 4.0 * _f(batch) * _f(heads) * lq * _f(head_dim)
        merge = (la + 3.0 * o_bytes / hbm_bw) if merge_kernel else jnp.zeros(())
        total = (P - 1.0) * jnp.maximum(la + att_ov, t_p2p) + la + att + P * merge
        comp, mem, comm = P * c_all, P * hbm_step / hbm_bw, (P - 1.0) * t_p2p
        body = jnp.maximum(jnp.maximum(comp, mem), comm)
        launches = P * la * (2.0 if merge_kernel else 1.0)
        return _pack(launch_ns=launches, comp_ns=comp, mem_ns=mem, comm_ns=comm,
                     non_overlap_ns=total - launches - body, sync_ns=0.0, total_ns=total, flops=flops,
                     hbm_bytes=P * hbm_step, comm_bytes=(P - 1.0) * kv_bytes, comm_sms=0.0)

    def terms(c):
        cs = _f(c)
        comp_sms = _f(hw.n_sms) - cs
        c_step = _comp_ns(hw, fl_step, comp_sms)
        if comm_ns is None:
            # pattern "ag" on S = P blocks: (P-1)/P S = (P-1) blocks leave each GPU; one block a message
            t_comm, nbytes, _ = K.comm_time_ns(hw, "ag", P * kv_bytes, P, "tma", kv_bytes, cs)
        else:
            t_comm, nbytes = _f(comm_ns), (P - 1.0) * kv_bytes
        m_step = t_comm / (P - 1.0)
        t_comp = P * c_step
        hbm = P * hbm_step + 2.0 * nbytes
        t_mem = hbm / _f(hw.hbm_bw_bytes_per_ns)
        body = jnp.maximum(jnp.maximum(t_comp, t_mem), t_comm)
        pipe = jnp.maximum(t_comp, c_step + (P - 1.0) * m_step)
        t_non = jnp.maximum(pipe - jnp.maximum(t_comp, t_comm), 0.0)
        t_sync = P * _f(hw.sync_inter_ns)
        la = _f(hw.launch_ns)
        return _pack(launch_ns=la, comp_ns=t_comp, mem_ns=t_mem, comm_ns=t_comm, non_overlap_ns=t_non,
                     sync_ns=t_sync, total_ns=la + body + t_non + t_sync, flops=flops, hbm_bytes=hbm,
                     comm_bytes=nbytes, comm_sms=cs)

    if comm_sms is None:
        return _best_int(terms, hw.n_sms)[1]
    a = _concrete(comm_sms)
    if a is not None and (np.any(a <= 0) or np.any(a >= float(hw.n_sms))):
        raise ValueError(f"comm_sms must be in (0, n_sms={float(hw.n_sms):g}), got {comm_sms!r}")
    return terms(comm_sms)


# --------------------------------------------------------------------------- DeepSpeed-Ulysses
def ulysses_terms(hw: K.KernelHW, batch=16, heads=128, seq_len=32768, head_dim=128, n_gpus=8,
                  design="pk", elem_bytes=2, nccl=None, comm_ns=None) -> dict:
    """DeepSpeed-Ulysses attention layer over P GPUs, per GPU (PK Fig. 11: B = 16, H = 128, D = 128).

    Each GPU holds ``seq_len / P`` tokens of Q, K, V (each ``S_t = s B (L/P) H D`` bytes).  An
    All-to-All turns them into all ``L`` tokens of ``H/P`` heads; attention
    (``4 B (H/P) L^2 D``); an All-to-All of O returns to sequence sharding.  Nothing overlaps
    (attention needs every token), so ``total = launches + attention + the A2As (+ reshapes)``,
    the A2As and reshapes in ``non_overlap_ns``.

    ``design="pk"``: two A2A kernels (QKV together, then O), each the kernel model's plain
    ``all-to-all`` collective (:func:`kernel.collective_terms`: TMA, launch + max(mem, comm) +
    sync), or ``comm_ns`` (the time of one A2A of ``3 S_t``; O's scales by 1/3).
    ``design="yunchang"``: per tensor (Q, K, V, O) a reshape copy (read + write, ``2 S_t / HBM``,
    one launch), NCCL All-to-All (:func:`nccl.alltoall_time_ns`) and a reshape back.
    """
    for nm, v in (("batch", batch), ("heads", heads), ("seq_len", seq_len), ("head_dim", head_dim),
                  ("elem_bytes", elem_bytes)):
        _pos(nm, v)
    _gpus(n_gpus)
    _div("seq_len", seq_len, n_gpus)
    _div("heads", heads, n_gpus)
    if design not in ("pk", "yunchang"):
        raise ValueError(f"ulysses design must be 'pk' or 'yunchang', got {design!r}")
    P, s = _f(n_gpus), _f(elem_bytes)
    L = _f(seq_len)
    St = s * _f(batch) * (L / P) * _f(heads) * _f(head_dim)
    fl, c_att, hbm_att = _attn_kernel(hw, batch, _f(heads) / P, L, L, head_dim, s)
    la = _f(hw.launch_ns)
    hbm_bw = _f(hw.hbm_bw_bytes_per_ns)
    att_mem = hbm_att / hbm_bw
    att = la + jnp.maximum(c_att, att_mem)
    if design == "pk":
        if comm_ns is None:
            a1 = K.collective_terms(hw, "all-to-all", 3.0 * St, n_gpus, "tma")["total_ns"]
            a2 = K.collective_terms(hw, "all-to-all", St, n_gpus, "tma")["total_ns"]
        else:
            a1 = _f(comm_ns) + la
            a2 = _f(comm_ns) / 3.0 + la
        comm = a1 + a2 - 2.0 * la                      # the two A2A kernels, less their launches
        launches = 3.0 * la
        non = a1 + a2
        hbm = hbm_att + 2.0 * 4.0 * St * (P - 1.0) / P
    else:
        cfg = nccl_for(hw, n_gpus, nccl)
        t_a2a = N.alltoall_time_ns(cfg, St)
        reshape = la + 2.0 * St / hbm_bw
        comm = 4.0 * t_a2a
        non = 4.0 * (t_a2a + 2.0 * reshape)
        launches = la + 8.0 * la
        hbm = hbm_att + 8.0 * 2.0 * St
    total = att + non
    return _pack(launch_ns=launches, comp_ns=c_att, mem_ns=att_mem, comm_ns=comm,
                 non_overlap_ns=total - launches - jnp.maximum(c_att, att_mem), sync_ns=0.0,
                 total_ns=total, flops=fl, hbm_bytes=hbm, comm_bytes=4.0 * St * (P - 1.0) / P)


# --------------------------------------------------------------------------- MoE dispatch + GEMM
def moe_dispatch_bytes(tokens=16384, topk=8, hidden=7168, n_gpus=8, imbalance=1.0, elem_bytes=2):
    """Dispatch buffer of the busiest GPU (bytes): ``imbalance x tokens / P x topk`` token copies of
    ``hidden`` elements (the All-to-All's send buffer, of which ``(P-1)/P`` leaves the GPU)."""
    return _f(imbalance) * _f(tokens) / _f(n_gpus) * _f(topk) * _f(hidden) * _f(elem_bytes)


def moe_dispatch_terms(hw: K.KernelHW, tokens=16384, topk=8, n_experts=256, hidden=7168, expert_hidden=2048,
                       n_gpus=8, design="pk", imbalance=1.0, gate_up=True, comm_sms=None, elem_bytes=2,
                       nccl=None, comm_ns=None) -> dict:
    """MoE token dispatch + first expert GEMM over P GPUs, the busiest GPU (PK Fig. 12: top-k = 8,
    256 experts, H = 7168, H_expert = 2048; ``tokens`` is the total, split evenly).

    Each GPU routes its ``tokens / P`` tokens to ``topk`` experts each, uniformly over the
    ``n_experts / P`` experts of every GPU; ``(P-1)/P`` of the copies leave the GPU.  The busiest
    GPU receives ``imbalance`` (>= 1) times the mean, so its receive and its GEMM scale by it.
    GEMM: ``2 x received copies x hidden x w`` with ``w = 2 expert_hidden`` (``gate_up``: the
    fused gate and up projections of a SwiGLU expert, our reading of "the first expert MLP") or
    ``expert_hidden``.  ``T_mem``: the GPU's expert weights once, tokens in and out.

    ``design="pk"`` (inter-SM; best ``comm_sms`` by integer search if None): TMA dispatch on the
    communication SMs (or ``comm_ns``), the grouped GEMM on the rest; the pipeline runs expert by
    expert, ``W = n_experts / P`` stages: ``T_non-overlap = min(T_comp, T_comm) / W``,
    ``T_sync = W x sync_inter_ns``.  ``design="sequential"``: NCCL All-to-All
    (:func:`nccl.alltoall_time_ns` of the busiest GPU's receive) then the grouped GEMM on all SMs.
    """
    for nm, v in (("tokens", tokens), ("topk", topk), ("n_experts", n_experts), ("hidden", hidden),
                  ("expert_hidden", expert_hidden), ("elem_bytes", elem_bytes)):
        _pos(nm, v)
    _gpus(n_gpus)
    _div("tokens", tokens, n_gpus)
    _div("n_experts", n_experts, n_gpus)
    a = _concrete(imbalance)
    if a is not None and (not np.all(np.isfinite(a)) or np.any(a < 1)):
        raise ValueError(f"imbalance must be >= 1 (busiest GPU over the mean), got {imbalance!r}")
    if design not in ("pk", "sequential"):
        raise ValueError(f"moe-dispatch design must be 'pk' or 'sequential', got {design!r}")
    P, s, rho = _f(n_gpus), _f(elem_bytes), _f(imbalance)
    copies = rho * _f(tokens) / P * _f(topk)           # token copies the busiest GPU processes
    w = (2.0 if gate_up else 1.0) * _f(expert_hidden)
    flops = 2.0 * copies * _f(hidden) * w
    send = moe_dispatch_bytes(tokens, topk, hidden, n_gpus, imbalance, elem_bytes)
    hbm = s * (_f(n_experts) / P * _f(hidden) * w + copies * (_f(hidden) + w))
    la = _f(hw.launch_ns)
    W = _f(n_experts) / P
    if design == "sequential":
        cfg = nccl_for(hw, n_gpus, nccl)
        t_a2a = N.alltoall_time_ns(cfg, send)
        comp = _comp_ns(hw, flops)
        mem = hbm / _f(hw.hbm_bw_bytes_per_ns)
        total = la + jnp.maximum(comp, mem) + t_a2a
        return _pack(launch_ns=la, comp_ns=comp, mem_ns=mem, comm_ns=t_a2a, non_overlap_ns=t_a2a,
                     sync_ns=0.0, total_ns=total, flops=flops, hbm_bytes=hbm,
                     comm_bytes=send * (P - 1.0) / P, comm_sms=0.0)

    def terms(c):
        cs = _f(c)
        comp = _comp_ns(hw, flops, _f(hw.n_sms) - cs)
        if comm_ns is None:
            t_comm, nbytes, _ = K.comm_time_ns(hw, "a2a", send, P, "tma", hidden * s, cs)
        else:
            t_comm, nbytes = _f(comm_ns), send * (P - 1.0) / P
        h = hbm + 3.0 * nbytes                          # staged through local HBM (inter-SM)
        mem = h / _f(hw.hbm_bw_bytes_per_ns)
        body = jnp.maximum(jnp.maximum(comp, mem), t_comm)
        t_non = jnp.minimum(comp, t_comm) / W
        t_sync = W * _f(hw.sync_inter_ns)
        return _pack(launch_ns=la, comp_ns=comp, mem_ns=mem, comm_ns=t_comm, non_overlap_ns=t_non,
                     sync_ns=t_sync, total_ns=la + body + t_non + t_sync, flops=flops, hbm_bytes=h,
                     comm_bytes=nbytes, comm_sms=cs)

    if comm_sms is None:
        return _best_int(terms, hw.n_sms)[1]
    return terms(comm_sms)


# --------------------------------------------------------------------------- dispatch, shares
def workload_terms(hw, op, design="pk", **kw) -> dict:
    """``op`` in :data:`WORKLOADS` -> the matching function's terms."""
    fn = {"ring-attention": ring_attention_terms, "ulysses": ulysses_terms,
          "moe-dispatch": moe_dispatch_terms}.get(op)
    if fn is None:
        raise ValueError(f"workload must be one of {WORKLOADS}, got {op!r}")
    return fn(hw, design=design, **kw)


def share_vs_compute_only(hw, op, **kw):
    """PK's "non-overlapped communication" share of a fused workload, Table 3's definition:
    ``(T_fused - T_compute_only) / T_fused`` with ``T_compute_only`` the same computation on all
    SMs as one kernel with no communication (``launch + max(comp, mem)``)."""
    t = workload_terms(hw, op, "pk", **kw)
    la = _f(hw.launch_ns)
    if op == "moe-dispatch":
        seq = moe_dispatch_terms(hw, design="sequential", **{k: v for k, v in kw.items() if k != "comm_sms"})
        alone = la + jnp.maximum(seq["comp_ns"], seq["mem_ns"])
    elif op == "ring-attention":
        x = ring_attention_terms(hw, design="xdit", **{k: v for k, v in kw.items()
                                                       if k not in ("comm_sms", "comm_ns", "merge_kernel")})
        alone = la + jnp.maximum(x["comp_ns"], x["mem_ns"])
    else:
        alone = la + jnp.maximum(t["comp_ns"], t["mem_ns"])
    return (t["total_ns"] - alone) / t["total_ns"]
