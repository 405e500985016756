"""Lowering: a placed plan becomes a flow table (docs/policies.md, "From a placed plan to traffic").

``plans.Plan`` says what is sent (steps: threadblock, source and destination
byte ranges); ``placement.Placement`` says where (threadblock -> CU, page ->
HBM stack, threadblock -> NAR domain).  :func:`build_traffic` joins the two
into a :class:`~nuna_jax.traffic.Traffic`, the seam both timing models read.

Every step moves ``nbytes`` as ``F = ceil(nbytes / flit_bytes)`` flits; flit
``k`` carries bytes ``[k*flit, min(nbytes, (k+1)*flit))`` of the step.  Flit
``k`` is read from the stack holding the page of its first source byte
``S + k*flit`` (on ``src_gpu``), written to the stack holding the page of
``D + k*flit`` (on ``dst_gpu``), and leaves through the port that the NAR
hash (:func:`nuna_jax.nar.port_of_flit`) gives for the destination address in
its routing domain: the threadblock's domain, or, when the placement routes by
address (``Placement.page_domain``, section 4.1.2), the domain of the
destination page's address segment.  Inside a stack, flit address ``a`` uses
channel ``(a // flit_bytes) mod k`` (``k = hbm_routers_per_stack``,
:func:`nuna_jax.geometry.hbm_channel`): both the port hash and the channel are
functions of the flit index, so one residue modulo ``lcm(m_d, k)`` fixes both.

The counts are computed in closed form per *segment*, a run of flits with one
(source page, destination page): the cost grows with the number of pages,
never with the number of flits.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .nar import hash_residue, port_of_residue
from .traffic import Traffic, make_traffic, validate

__all__ = ["build_traffic"]


class _Segments(NamedTuple):
    """Runs of flits of one step with constant (source page, destination page)."""

    row: np.ndarray     # step row of each segment
    first: np.ndarray   # index of the segment's first flit within its step
    length: np.ndarray  # flits in the segment
    last: np.ndarray    # bool: the step's last segment


def _page_breaks(addr, n_flits, flit_bytes: int, page_bytes: int):
    """(step row, flit index) of every flit that starts a new page, for start addresses ``addr``."""
    first = addr // page_bytes
    last = (addr + (n_flits - 1) * flit_bytes) // page_bytes
    cnt = last - first
    rows = np.repeat(np.arange(len(addr)), cnt)
    j = np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    page = first[rows] + 1 + j
    return rows, -(-(page * page_bytes - addr[rows]) // flit_bytes)


def _sorted_unique(x):
    """``np.unique(x)`` for an int array made of a few sorted runs (timsort merges them in linear time)."""
    x = np.sort(x, kind="stable")
    return x[np.append(True, x[1:] != x[:-1])] if len(x) else x


def _order(keys, bounds):
    """The stable order of rows by ``keys`` (most significant first; key ``i`` lies in
    ``[0, bounds[i])``), as ``np.lexsort(keys[::-1])`` gives it: one argsort of a mixed-radix int64
    key when it fits (several times faster on millions of rows), else lexsort."""
    if math.prod(int(b) for b in bounds) < 2 ** 62:
        key = np.zeros(len(keys[0]), np.int64)
        for v, b in zip(keys, bounds):
            key = key * int(b) + v
        return np.argsort(key, kind="stable")
    return np.lexsort(keys[::-1])


def _segments(src_addr, dst_addr, n_flits, flit_bytes: int, page_bytes: int) -> _Segments:
    n = len(n_flits)
    r1, k1 = _page_breaks(src_addr, n_flits, flit_bytes, page_bytes)
    r2, k2 = _page_breaks(dst_addr, n_flits, flit_bytes, page_bytes)
    rows = np.concatenate([np.arange(n), r1, r2])
    ks = np.concatenate([np.zeros(n, np.int64), k1, k2])
    span = int(n_flits.max()) + 1
    key = _sorted_unique(rows * span + ks)   # three runs, each sorted: one merge, not np.unique's hash
    row, first = key // span, key % span
    last = np.append(row[1:] != row[:-1], True)
    end = np.where(last, n_flits[row], np.append(first[1:], 0))
    return _Segments(row, first, end - first, last)


def _residue_counts_dense(seg: _Segments, group, n_groups: int, residue0, m):
    """Flits per (group, hash residue), one dense row of ``m + 1`` slots per group: a segment of
    ``L`` flits starting at residue ``r0`` adds ``L // m`` to every residue and 1 to the
    ``L mod m`` residues after ``r0`` (cyclically; slot ``m`` is scratch).  Returns the
    (group, residue, count) of every nonzero count, by group then residue.

    One difference array (``+`` where a run starts, ``-`` where it ends, two ``bincount``; the full
    turns ``L // m`` enter at slot 0 and leave at the scratch slot), summed in place: every group's
    scratch slot sums to zero, so the nonzero slots are the counts.  (On these VMs fresh memory
    costs more than arithmetic: two arrays of the dense size, not six.)"""
    g_m = np.zeros(n_groups, np.int64)
    g_m[group] = m
    base_of = np.concatenate([[0], np.cumsum(g_m + 1)[:-1]])
    total = int((g_m + 1).sum())
    full = np.bincount(group, weights=seg.length // m, minlength=n_groups).astype(np.int64)
    rem = seg.length % m
    b = residue0 + rem
    wrap = b > m
    base = base_of[group]
    # a run of rem flits from r0: +1 at r0, -1 at its end (wrapping past m: -1 at m, +1 at 0, -1 at b - m)
    cnt = np.bincount(np.concatenate([base + residue0, base[wrap]]), minlength=total + 1)
    cnt -= np.bincount(np.concatenate([base + np.where(wrap, m, b), (base + b - m)[wrap]]), minlength=total + 1)
    cnt[base_of] += full
    cnt[base_of + g_m] -= full
    np.cumsum(cnt, out=cnt)
    nz = np.flatnonzero(cnt[:total])
    per = np.add.reduceat(cnt[:total] != 0, base_of, dtype=np.int64) if total else np.zeros(n_groups, np.int64)
    g = np.repeat(np.arange(n_groups), per)
    return g, nz - base_of[g], cnt[nz].astype(np.int64)


def _residue_counts_sparse(seg: _Segments, group, residue0, m):
    """:func:`_residue_counts_dense`'s result from one entry per (segment, residue it touches):
    ``min(L, m)`` entries a segment, summed per (group, residue)."""
    L = seg.length
    e = np.minimum(L, m)
    sid = np.repeat(np.arange(len(L)), e)
    i = np.arange(len(sid)) - np.repeat(np.cumsum(e) - e, e)
    ms, Ls = m[sid], L[sid]
    key = group[sid] * (int(m.max()) + 1) + (residue0[sid] + i) % ms
    cnt = Ls // ms + (i < Ls % ms)
    del sid, i, ms, Ls
    order = np.argsort(key, kind="stable")
    key, cnt = key[order], cnt[order]
    start = np.flatnonzero(np.append(True, key[1:] != key[:-1]))
    key, cnt = key[start], np.add.reduceat(cnt, start) if len(start) else cnt[:0]
    return key // (int(m.max()) + 1), key % (int(m.max()) + 1), cnt


def _residue_counts(seg: _Segments, group, n_groups: int, residue0, m):
    """Flits per (group, hash residue) with flits: ``(group, residue, count)``, by group then residue.
    Each group is counted densely (``m + 1`` slots) or sparsely (``min(L, m)`` entries a segment),
    whichever holds fewer entries (a 1-flit step on 1,024 GPUs: 1 instead of 145)."""
    g_m = np.zeros(n_groups, np.int64)
    g_m[group] = m
    sparse_cost = np.bincount(group, weights=np.minimum(seg.length, m), minlength=n_groups)
    sparse = (sparse_cost <= g_m + 1)[group]
    parts = []
    for sel, fn in ((sparse, _residue_counts_sparse), (~sparse, None)):
        if not sel.any():
            continue
        sub = _Segments(*(v[sel] for v in seg))
        if fn is not None:
            parts.append(fn(sub, group[sel], residue0[sel], m[sel]))
        else:
            parts.append(_residue_counts_dense(sub, group[sel], n_groups, residue0[sel], m[sel]))
    if len(parts) == 1:
        return parts[0]
    # each part is sorted by (group, residue) and a group lies in one part: merged by group counts
    pos = []
    cnt = [np.bincount(p[0], minlength=n_groups) for p in parts]
    start = np.cumsum(cnt[0] + cnt[1]) - (cnt[0] + cnt[1])
    for p, c in zip(parts, cnt):
        pos.append(np.arange(len(p[0])) + np.repeat(start - (np.cumsum(c) - c), c))
    out = []
    for a, b in zip(parts[0], parts[1]):
        v = np.empty(len(a) + len(b), np.result_type(a, b))
        v[pos[0]] = a
        v[pos[1]] = b
        out.append(v)
    return tuple(out)


def build_traffic(system, plan, placement, *, limits=None) -> Traffic:
    """The flows of a placed plan (``nuna_jax.plans.Plan`` + ``nuna_jax.placement.Placement``).

    One row per (threadblock, step, egress port, read stack and channel,
    destination stack and channel) with a nonzero flit count; ``bytes`` is the exact payload (the
    step's last flit may be partial).  Rows are ordered by (threadblock,
    step), then by the position at which the row's port first comes up in the
    step's hash sequence, then stacks.

    ``limits`` (default :func:`limits.active`): the plan's threadblocks, steps and pages
    (the segments built here) are checked first (``WorkLimitError``).
    """
    from .limits import active, check_traffic_work, plan_work
    check_traffic_work(active(limits), plan_work(plan), system, f"build_traffic (plan {plan.name!r})", flits=False)
    fb, pb = int(system.flit_bytes), int(system.page_bytes)
    dom = placement.domains
    if plan.n_steps == 0:
        z = np.zeros(0)
        return make_traffic(system, src_gpu=z, cu=z, read_stack=z, port=z, dst_gpu=z, dst_stack=z,
                            flits=z, bytes=z)
    k = int(system.hbm_routers_per_stack)
    tb = plan.step_tb
    S = plan.src_addr(pb).astype(np.int64)
    D = plan.dst_addr(pb).astype(np.int64)
    nb = plan.nbytes.astype(np.int64)
    F = -(-nb // fb)
    cu = np.asarray(placement.tb_cu, np.int64)[tb]
    if np.any(cu < 0):
        raise ValueError("build_traffic: a threadblock with steps has no CU (tb_cu == -1)")

    seg = _segments(S, D, F, fb, pb)
    ps = placement.page_stack
    dpage = (D[seg.row] + seg.first * fb) // pb
    rs = ps[plan.src_gpu[seg.row], (S[seg.row] + seg.first * fb) // pb].astype(np.int64)
    ds = ps[plan.dst_gpu[seg.row], dpage].astype(np.int64)
    if np.any(rs < 0) or np.any(ds < 0):
        raise ValueError("build_traffic: a page touched by the plan has no stack (page_stack == -1)")
    pdom = getattr(placement, "page_domain", None)
    if pdom is None:  # the threadblock's domain
        dseg = np.asarray(placement.tb_domain, np.int64)[tb][seg.row]
    else:             # the destination page's address segment
        dseg = np.asarray(pdom, np.int64)[plan.dst_gpu[seg.row], dpage]
    mseg = np.lcm(dom.size[dseg], k)   # residue modulus: fixes the port (mod m_d) and both channels (mod k)

    # --- group segments by (step, read stack, dst stack, domain); count flits per hash residue
    n_st, n_d = int(system.n_hbm_stacks), int(dom.granularity)
    ukey, gid = np.unique(((seg.row * n_st + rs) * n_st + ds) * n_d + dseg, return_inverse=True)
    gid = gid.reshape(-1)
    g_dom = ukey % n_d
    g_row, g_rs, g_ds = ukey // (n_st * n_st * n_d), (ukey // (n_st * n_d)) % n_st, (ukey // n_d) % n_st
    g_mm = np.lcm(dom.size[g_dom], k)
    r0 = hash_residue(D[seg.row] + seg.first * fb, fb, mseg)
    og, ores, ocnt = _residue_counts(seg, gid, len(ukey), r0, mseg)
    return _columns(system, plan, dom, tb, cu, S, D, F, nb, seg, gid, mseg,
                    (g_row, g_rs, g_ds, g_dom, g_mm), og, ores, ocnt)


def _columns(system, plan, dom, tb, cu, S, D, F, nb, seg, gid, mseg, groups, og, ores, ocnt) -> Traffic:
    """The flow table from the (group, residue, count) triples of :func:`_residue_counts` (``og``
    ascending, residues ascending inside a group; groups numbered in (step row, read stack, dst
    stack, domain) order): bytes, row order and columns.

    Every column is written once in its final dtype (int32 / float64, as ``make_traffic`` makes
    them): step-level values are repeated per row (rows stay grouped by step row: the order only
    permutes rows inside a step), group-level ones repeated per group and then permuted.  On the
    VMs this runs on, first-touching fresh memory costs more than the arithmetic (a 64-GPU 64 MB
    All-Gather: 10.7 M rows), so no column is built twice and few full-length temporaries are.
    Equal, column for column, to the former ``build_traffic`` (tests/test_lowering_columns.py keeps
    it as the reference)."""
    g_row, g_rs, g_ds, g_dom, g_mm = groups
    fb = int(system.flit_bytes)
    k = int(system.hbm_routers_per_stack)
    n_groups = len(g_row)
    g_cnt = np.bincount(og, minlength=n_groups)              # rows per group
    row_cnt = np.bincount(g_row, weights=g_cnt, minlength=plan.n_steps).astype(np.int64)   # rows per step row
    i32 = lambda v: np.asarray(v).astype(np.int32)  # noqa: E731

    # --- bytes: full flits, minus the short tail of each step's last flit
    obytes = ocnt * fb
    lastseg = np.flatnonzero(seg.last)
    span = int(mseg.max()) + 1
    tail = gid[lastseg] * span + hash_residue(D + (F - 1) * fb, fb, mseg[lastseg])
    pos = og * span
    pos += ores
    obytes[np.searchsorted(pos, tail)] -= F * fb - nb
    del pos, tail

    # --- order: (step row, first appearance of the residue in the hash sequence, stacks, domain).
    # Rows come by (group, residue) and groups by (row, read stack, dst stack, domain), so a stable
    # sort by (row, position in the step's hash sequence) breaks its ties by stacks and domain.
    r_first = hash_residue(D[g_row], fb, g_mm)              # per group: residue of the step's first flit
    rel = ores - np.repeat(r_first, g_cnt)
    rel += np.repeat(g_mm, g_cnt) * (rel < 0)                # (ores - r_first) mod m
    key = np.repeat(g_row * int(g_mm.max(initial=1)), g_cnt)
    key += rel
    del rel
    order = np.argsort(key, kind="stable")
    del key

    ogo = og.astype(np.int32)[order]

    def per_group(v):                                        # group-level value of every row, final order
        return i32(v)[ogo]

    def per_step(v):                                         # step-level value of every row (order keeps it)
        return np.repeat(i32(v), row_cnt)

    ores = ores.astype(np.int32)[order]
    shift = (S // fb - D // fb) % k                          # read channel = destination flit index + shift
    g_size = dom.size[g_dom]
    port_pos = per_group(dom.offset[g_dom]) + ores % per_group(g_size)
    cols = dict(
        src_gpu=per_step(plan.src_gpu), cu=per_step(cu), read_stack=per_group(g_rs),
        read_channel=((ores + per_step(shift)) % k).astype(np.int32),
        port=i32(dom.flat)[port_pos], dst_gpu=per_step(plan.dst_gpu),
        dst_stack=per_group(g_ds), dst_channel=(ores % k).astype(np.int32),
        flits=ocnt.astype(np.float64)[order], bytes=obytes.astype(np.float64)[order],
        tb=per_step(tb), step=per_step(plan.step_idx), phase=per_step(plan.phase),
        weight=np.ones(len(order)))
    t = Traffic(**cols)
    validate(system, t)
    return t
