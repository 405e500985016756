"""Traffic: the seam between placement and the two timing models.

A ``Traffic`` is a table of *flows*.  A flow is a group of flits that take the
very same path (docs/model.md, "The path of a flit") and are issued by the
same threadblock in the same step:

    src_gpu, cu        the issuing threadblock's GPU and CU (CU id within GPU)
    read_stack         local HBM stack the data is read from (on src_gpu)
    port               egress I/O port ordinal on src_gpu; the flit crosses
                       switch plane ``port`` and enters dst_gpu on the ingress
                       port of the same ordinal (rail-optimized Clos)
    dst_gpu, dst_stack destination GPU and the HBM stack written there
    flits              number of flits (float: integer-valued for hard traffic,
                       expected counts for soft traffic from a relaxed
                       placement)
    bytes              payload bytes carried (<= flits * flit_bytes)
    tb                 threadblock id, unique across the pod
    step               order of the flow inside its threadblock (flits of a
                       threadblock are issued step by step; inside one step
                       round-robin over that step's flows, row order)
    phase              global phase: no flit of phase k is issued before every
                       flit of phase k-1 is delivered (a barrier; models the
                       step dependencies of multi-step algorithms)

Only inter-GPU data is represented (``src_gpu != dst_gpu``); local copies
are not traffic.  The analytical model (``models.contention``) and the
simulator (``sim``) read the same object, so they can disagree only about how
long, never about what is sent (shared/ARCHITECTURE.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flax import struct

__all__ = ["Traffic", "make_traffic", "concat", "FIELDS", "build_traffic"]

FIELDS = ("src_gpu", "cu", "read_stack", "port", "dst_gpu", "dst_stack",
          "flits", "bytes", "tb", "step", "phase")
_INT_FIELDS = ("src_gpu", "cu", "read_stack", "port", "dst_gpu", "dst_stack", "tb", "step", "phase")


@struct.dataclass
class Traffic:
    """Flow table; every field is an array of shape ``[n_flows]`` (see module doc)."""

    src_gpu: Any
    cu: Any
    read_stack: Any
    port: Any
    dst_gpu: Any
    dst_stack: Any
    flits: Any
    bytes: Any
    tb: Any
    step: Any
    phase: Any

    @property
    def n_flows(self) -> int:
        return int(np.shape(self.flits)[0])

    @property
    def total_flits(self) -> float:
        return float(np.sum(np.asarray(self.flits)))

    @property
    def total_bytes(self) -> float:
        return float(np.sum(np.asarray(self.bytes)))

    @property
    def is_hard(self) -> bool:
        """True when every flow carries a whole number of flits (simulable)."""
        f = np.asarray(self.flits)
        return bool(np.all(f == np.round(f)))

    def numpy(self) -> "Traffic":
        return Traffic(**{k: np.asarray(getattr(self, k)) for k in FIELDS})

    def select(self, mask) -> "Traffic":
        """Rows where ``mask`` is true (numpy boolean mask or index array)."""
        return Traffic(**{k: np.asarray(getattr(self, k))[mask] for k in FIELDS})


def make_traffic(system, **cols) -> Traffic:
    """Build a validated ``Traffic`` from column arrays (numpy, concrete).

    Defaults: ``bytes = flits * flit_bytes``, ``tb = 0``, ``step = 0``,
    ``phase = 0``.  Raises ``ValueError`` naming the bad column.
    """
    missing = [k for k in ("src_gpu", "cu", "read_stack", "port", "dst_gpu", "dst_stack", "flits")
               if k not in cols]
    if missing:
        raise ValueError(f"make_traffic: missing column(s) {', '.join(missing)}")
    unknown = sorted(set(cols) - set(FIELDS))
    if unknown:
        raise ValueError(f"make_traffic: unknown column(s) {', '.join(unknown)}")
    n = np.shape(cols["flits"])[0] if np.ndim(cols["flits"]) else 1
    out = {}
    for k in FIELDS:
        if k in cols:
            v = np.asarray(cols[k])
        elif k == "bytes":
            v = np.asarray(cols["flits"], dtype=np.float64) * system.flit_bytes
        else:
            v = np.zeros(n, dtype=np.int32)
        v = np.broadcast_to(v, (n,)).copy() if v.ndim == 0 else v
        if v.shape != (n,):
            raise ValueError(f"make_traffic: column {k!r} has shape {v.shape}, expected ({n},)")
        out[k] = v.astype(np.int32) if k in _INT_FIELDS else v.astype(np.float64)
    t = Traffic(**out)
    validate(system, t)
    return t


def validate(system, t: Traffic) -> Traffic:
    """Range checks of every column against the system; ``ValueError`` if bad."""
    lim = {
        "src_gpu": system.n_gpus, "dst_gpu": system.n_gpus, "cu": system.n_cus,
        "read_stack": system.n_hbm_stacks, "dst_stack": system.n_hbm_stacks,
        "port": system.n_io_ports,
    }
    for k, hi in lim.items():
        v = np.asarray(getattr(t, k))
        if v.size and (v.min() < 0 or v.max() >= hi):
            raise ValueError(f"Traffic.{k} must lie in [0, {hi}), got range [{v.min()}, {v.max()}]")
    for k in ("tb", "step", "phase"):
        v = np.asarray(getattr(t, k))
        if v.size and v.min() < 0:
            raise ValueError(f"Traffic.{k} must be >= 0")
    f = np.asarray(t.flits)
    if f.size and (not np.all(np.isfinite(f)) or f.min() < 0):
        raise ValueError("Traffic.flits must be finite and >= 0")
    b = np.asarray(t.bytes)
    if b.size and (b.min() < 0 or np.any(b > f * system.flit_bytes + 1e-6)):
        raise ValueError("Traffic.bytes must lie in [0, flits * flit_bytes]")
    if np.any(np.asarray(t.src_gpu) == np.asarray(t.dst_gpu)):
        raise ValueError("Traffic holds inter-GPU flows only: src_gpu == dst_gpu found")
    return t


def concat(parts: list[Traffic]) -> Traffic:
    """Row-wise concatenation of several Traffic tables."""
    if not parts:
        raise ValueError("concat: need at least one Traffic")
    return Traffic(**{k: np.concatenate([np.asarray(getattr(p, k)) for p in parts]) for k in FIELDS})


# ---------------------------------------------------------------------------
# placed plan -> flows (docs/policies.md, "From a placed plan to traffic")
# ---------------------------------------------------------------------------
def build_traffic(system, plan, placement) -> Traffic:
    """The flows of a placed plan (``nuna_jax.plans.Plan`` + ``nuna_jax.placement.Placement``).

    Every step moves ``nbytes`` as ``F = ceil(nbytes / flit_bytes)`` flits;
    flit ``k`` carries bytes ``[k*flit, min(nbytes, (k+1)*flit))`` of the step.
    Flit ``k`` is read from the stack holding the page of its first source
    byte ``S + k*flit`` (on ``src_gpu``), written to the stack holding the
    page of ``D + k*flit`` (on ``dst_gpu``), and leaves through the port
    ``ports[d][((D + k*flit) // flit) mod m_d]`` of its threadblock's routing
    domain ``d`` (``nuna_jax.nar``; baseline: one domain with all ports).
    ``S``, ``D``: byte addresses of the step's ranges in the GPUs' address
    spaces (``Plan.buffer_base``).

    One row per (threadblock, step, egress port, read stack, destination
    stack) with a nonzero flit count; ``bytes`` is the exact payload (the
    step's last flit may be partial).  Rows are ordered by (threadblock,
    step), then by the position at which the row's port first comes up in
    the step's hash sequence, then stacks.  Counts are computed in closed
    form per run of flits with constant (source page, destination page): the
    cost grows with the number of pages, never with the number of flits.

    A relaxed placement produces the same columns with expected (fractional)
    ``flits`` / ``bytes``: the table's shape does not depend on hard choices.
    """
    fb, pb = int(system.flit_bytes), int(system.page_bytes)
    dom = placement.domains
    n = plan.n_steps
    if n == 0:
        z = np.zeros(0)
        return make_traffic(system, src_gpu=z, cu=z, read_stack=z, port=z, dst_gpu=z, dst_stack=z,
                            flits=z, bytes=z)
    tb = plan.step_tb
    S = plan.src_addr(pb).astype(np.int64)
    D = plan.dst_addr(pb).astype(np.int64)
    nb = plan.nbytes.astype(np.int64)
    F = -(-nb // fb)
    d = np.asarray(placement.tb_domain, np.int64)[tb]
    m = dom.size[d]
    cu = np.asarray(placement.tb_cu, np.int64)[tb]
    if np.any(cu < 0):
        raise ValueError("build_traffic: a threadblock with steps has no CU (tb_cu == -1)")

    # --- segment boundaries: flit indices where the source or destination page changes
    def page_breaks(A):
        first = A // pb
        last = (A + (F - 1) * fb) // pb
        cnt = last - first
        rows = np.repeat(np.arange(n), cnt)
        j = np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        P = first[rows] + 1 + j
        k = -(-(P * pb - A[rows]) // fb)
        return rows, k

    r1, k1 = page_breaks(S)
    r2, k2 = page_breaks(D)
    rows = np.concatenate([np.arange(n), r1, r2])
    ks = np.concatenate([np.zeros(n, np.int64), k1, k2])
    span = int(F.max()) + 1
    key = np.unique(rows * span + ks)
    seg_row, seg_k = key // span, key % span
    nxt = np.append(seg_k[1:], 0)
    last_seg = np.append(seg_row[1:] != seg_row[:-1], True)
    seg_end = np.where(last_seg, F[seg_row], nxt)
    seg_len = seg_end - seg_k

    ps = placement.page_stack
    rs = ps[plan.src_gpu[seg_row], (S[seg_row] + seg_k * fb) // pb].astype(np.int64)
    ds = ps[plan.dst_gpu[seg_row], (D[seg_row] + seg_k * fb) // pb].astype(np.int64)
    if np.any(rs < 0) or np.any(ds < 0):
        raise ValueError("build_traffic: a page touched by the plan has no stack (page_stack == -1)")

    # --- per (step, read stack, dst stack) group: flits per hash residue, closed form
    S_ST = int(system.n_hbm_stacks)
    gkey = (seg_row * S_ST + rs) * S_ST + ds
    ukey, gid = np.unique(gkey, return_inverse=True)
    gid = gid.reshape(-1)
    g_row = ukey // (S_ST * S_ST)
    g_rs = (ukey // S_ST) % S_ST
    g_ds = ukey % S_ST
    g_m = m[g_row]
    g_base = np.concatenate([[0], np.cumsum(g_m + 1)[:-1]])
    total = int((g_m + 1).sum())

    sm = m[seg_row]
    r0 = (D[seg_row] // fb + seg_k) % sm
    full = seg_len // sm
    rem = seg_len % sm
    full_g = np.bincount(gid, weights=full, minlength=len(ukey))
    b = r0 + rem
    wrap = b > sm
    base = g_base[gid]
    idx = np.concatenate([base + r0, base + np.where(wrap, sm, b), (base)[wrap], (base + b - sm)[wrap]])
    w = np.concatenate([np.ones(len(r0)), -np.ones(len(r0)), np.ones(int(wrap.sum())), -np.ones(int(wrap.sum()))])
    diff = np.bincount(idx, weights=w, minlength=total + 1)[:total]
    cnt = np.cumsum(diff)
    flat_g = np.repeat(np.arange(len(ukey)), g_m + 1)
    res = np.arange(total) - g_base[flat_g]
    cnt = cnt + full_g[flat_g]
    keep = (res < g_m[flat_g]) & (cnt > 0.5)
    og, ores, ocnt = flat_g[keep], res[keep], np.rint(cnt[keep]).astype(np.int64)
    orow = g_row[og]

    # --- bytes: full flits, minus the short tail of each step's last flit
    obytes = ocnt * fb
    last_g = gid[last_seg]                      # group of each step's last segment (rows in order)
    last_res = (D // fb + F - 1) % m
    deficit = F * fb - nb
    flat_pos = np.cumsum(keep) - 1              # position in the output of each kept flat index
    tail_flat = g_base[last_g] + last_res
    obytes[flat_pos[tail_flat]] -= deficit

    # --- order: (step row, first appearance of the residue in the hash sequence, stacks)
    rel = (ores - D[orow] // fb) % m[orow]
    order = np.lexsort((g_ds[og], g_rs[og], rel, orow))
    orow, og, ores = orow[order], og[order], ores[order]
    ocnt, obytes = ocnt[order], obytes[order]
    port = dom.flat[dom.offset[d[orow]] + ores]
    return make_traffic(
        system, src_gpu=plan.src_gpu[orow], cu=cu[orow], read_stack=g_rs[og], port=port,
        dst_gpu=plan.dst_gpu[orow], dst_stack=g_ds[og], flits=ocnt.astype(np.float64),
        bytes=obytes.astype(np.float64), tb=tb[orow], step=plan.step_idx[orow], phase=plan.phase[orow])
