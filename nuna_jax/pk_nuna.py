"""NUNA meets ParallelKittens: PK's fused kernels on the NUNA Table-2 socket, T_comm from the
NUNA path model under a placement policy (UA vs NAP+NAR, NUNA sections 4-5).

The kernel model (:mod:`nuna_jax.models.kernel`, :mod:`nuna_jax.models.kernel_workloads`) keeps
its compute, memory, non-overlap and sync terms; only ``T_comm`` changes: it is the analytical
path model's completion time (``nuna_jax.estimate``: :func:`nuna_jax.models.contention.evaluate`
at its default temperature) of the collective the kernel performs, built by
:func:`nuna_jax.scenario.make_scenario` for that policy:

=================  ===========================  ==============================================
kernel             collective (plan algorithm)  ``size_bytes`` (plans' convention)
=================  ===========================  ==============================================
ag+gemm            allgather (direct)           ``s m k``: the gathered A
gemm+rs            reducescatter (direct)       ``s m n``: the partial output
gemm+ar            allreduce (direct)           ``s m n``
ring-attention     allgather (ring)             ``P x`` one KV block: the P - 1 ring steps
ulysses            alltoall (direct)            ``3 S_t``: Q, K, V of the GPU (O's A2A: a third)
moe-dispatch       alltoall (direct)            the busiest GPU's dispatched tokens
=================  ===========================  ==============================================

For the inter-SM designs (Ring Attention, MoE dispatch, ``schedule="inter"``) the communication
CUs are the CUs the scenario's threadblocks sit on (the busiest GPU's count, ``comm_cus``), unless
``comm_sms`` is given: the path model's T_comm is for those threadblocks.
Units: ns, bytes.  The NUNA scenario is rounded to whole elements (``elem_bytes``).
"""

from __future__ import annotations

import numpy as np

from .models import kernel as K
from .models import kernel_workloads as W

__all__ = ["POLICY_OPS", "policy_comm_ns", "comm_collective", "nuna_policy_terms", "compare_policies"]

#: op -> (NUNA collective, plan algorithm)
POLICY_OPS = {"ag+gemm": ("allgather", "direct"), "gemm+rs": ("reducescatter", "direct"),
              "gemm+ar": ("allreduce", "direct"), "ring-attention": ("allgather", "ring"),
              "ulysses": ("alltoall", "direct"), "moe-dispatch": ("alltoall", "direct")}


def policy_comm_ns(system, collective: str, size_bytes, policy: str, algorithm: str = "direct",
                   tbs_per_gpu=None, elem_bytes: int = 2) -> tuple[float, dict]:
    """Path-model time (ns) of ``collective`` on ``size_bytes`` under ``policy``; returns
    ``(time_ns, info)``, ``info`` naming the scenario (policy, algorithm, tbs, bottleneck)."""
    from .models.contention import evaluate
    from .models.contention.api import TEMPERATURE_NS
    from .scenario import make_scenario
    e = int(elem_bytes)
    size = max(e, int(round(float(size_bytes) / e)) * e)
    sc = make_scenario(system, collective=collective, size_bytes=size, policy=policy,
                       algorithm=algorithm, tbs_per_gpu=tbs_per_gpu, elem_bytes=e)
    r = evaluate(system, sc.traffic, TEMPERATURE_NS)
    pl = sc.placement
    tb_gpu = np.asarray(pl.tb_gpu if pl.tb_gpu is not None else sc.plan.tb_gpu)
    tb_cu = np.asarray(pl.tb_cu)
    cus = max((len(np.unique(tb_cu[(tb_gpu == g) & (tb_cu >= 0)])) for g in np.unique(tb_gpu)), default=0)
    info = {"policy": sc.placement.policy, "collective": collective, "algorithm": algorithm,
            "size_bytes": size, "tbs_per_gpu": int(sc.plan.tbs_per_gpu.max(initial=0)), "comm_cus": int(cus),
            "bottleneck": r["breakdown"].get("bottleneck"), "time_ns": float(r["time_ns"]),
            "model": "nuna_jax.estimate (analytical path model) of make_scenario(...)"}
    return float(r["time_ns"]), info


def comm_collective(hw, op: str, n_gpus=8, elem_bytes=2, **shape) -> tuple[str, str, float]:
    """(collective, algorithm, size_bytes) the kernel ``op`` performs (table in the module doc)."""
    if op not in POLICY_OPS:
        raise ValueError(f"op must be one of {tuple(POLICY_OPS)} for a NUNA policy comparison, got {op!r}")
    coll, alg = POLICY_OPS[op]
    s = float(elem_bytes)
    P = float(n_gpus)
    if op in ("ag+gemm", "gemm+rs", "gemm+ar"):
        m, n, k = (float(shape[x]) for x in ("m", "n", "k"))
        return coll, alg, s * m * (k if op == "ag+gemm" else n)
    if op == "ring-attention":
        lq = float(shape.get("seq_len", 98304)) / P
        kv = 2.0 * float(shape.get("batch", 16)) * float(shape.get("heads", 16)) * lq * float(shape.get("head_dim", 128)) * s
        return coll, alg, P * kv
    if op == "ulysses":
        st = s * float(shape.get("batch", 16)) * float(shape.get("seq_len", 32768)) / P * \
            float(shape.get("heads", 128)) * float(shape.get("head_dim", 128))
        return coll, alg, 3.0 * st
    keys = ("tokens", "topk", "hidden", "imbalance")
    return coll, alg, float(W.moe_dispatch_bytes(n_gpus=n_gpus, elem_bytes=elem_bytes,
                                                 **{k: shape[k] for k in keys if k in shape}))


def nuna_policy_terms(hw, op: str, policy: str, n_gpus=8, elem_bytes=2, schedule="intra", comm_sms=None,
                      tbs_per_gpu=None, **shape) -> dict:
    """The fused PK kernel ``op`` on ``hw`` (a ``nuna-table2`` KernelHW) with T_comm from the path
    model under ``policy``.  Returns the terms (floats, ns) plus ``"nuna"`` (the scenario info)."""
    if getattr(hw, "system", None) is None:
        raise ValueError("nuna_policy_terms needs a KernelHW with a NUNA System (kernel preset 'nuna-table2')")
    coll, alg, size = comm_collective(hw, op, n_gpus, elem_bytes, **shape)
    t_comm, info = policy_comm_ns(hw.system, coll, size, policy, alg, tbs_per_gpu, int(elem_bytes))
    inter = op in ("ring-attention", "moe-dispatch") or (op in ("ag+gemm", "gemm+rs", "gemm+ar") and schedule == "inter")
    if inter and comm_sms is None:
        # the path model's T_comm is for the scenario's threadblocks on these CUs: they communicate,
        # the others compute (a T_comm that no longer depends on the split would otherwise pick 1)
        comm_sms = float(min(max(info["comm_cus"], 1), float(hw.n_sms) - 1))
    info["comm_sms_used"] = None if not inter else float(comm_sms)
    if op in ("ag+gemm", "gemm+rs", "gemm+ar"):
        t = K.fused_terms(hw, op, shape["m"], shape["n"], shape["k"], n_gpus, schedule, comm_sms,
                          elem_bytes=elem_bytes, comm_ns=t_comm)
    elif op == "ulysses":
        t = W.ulysses_terms(hw, n_gpus=n_gpus, design="pk", elem_bytes=elem_bytes, comm_ns=t_comm, **shape)
    else:
        t = W.workload_terms(hw, op, "pk", n_gpus=n_gpus, elem_bytes=elem_bytes, comm_sms=comm_sms,
                             comm_ns=t_comm, **shape)
    out = {k: float(v) for k, v in t.items()}
    out["nuna"] = info
    return out


def compare_policies(hw, op: str, policies=("ua", "nap+nar"), **kw) -> dict:
    """:func:`nuna_policy_terms` for each policy, and ``ratio`` = first policy's total over the
    last's (UA / NAP+NAR: what NUNA-aware placement buys the kernel)."""
    res = {p: nuna_policy_terms(hw, op, p, **kw) for p in policies}
    first, last = res[policies[0]]["total_ns"], res[policies[-1]]["total_ns"]
    return {"policies": res, "ratio": first / last, "ratio_of": f"{policies[0]} / {policies[-1]}"}
