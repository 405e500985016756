"""The fast engine of credit flow control: the semantics of :mod:`.reference_credit`, compiled.

It reads the compressed program (:class:`.program.Program`, expanded to one stage row per flow:
credit mode keeps per-flow rows, so it is meant for cases of up to a few million flit-hops)
and the buffer rules of :mod:`.flow_control`.  Events are int64 keys ``((time << 1 | kind) << b) | id``
in one binary heap (the unbounded engine's, :func:`.kernel._hpush`; records ``(key, stage, 0)``):
kind 0 ``id < N`` a flit's arrival (its stage in the record), ``id >= N`` a credit returning to
buffer VC ``id - N``; kind 1 ``id`` a resource that may start a service.
Kind-0 events commute, so equal keys need no tie-break; kind-1 events run in resource-id order,
as in the reference.  A resource's candidates are kept in one list per buffer they need a credit of
(and one for those needing none), each sorted by ``(arrival, flit id)``: the oldest eligible
candidate is the oldest of the heads of the lists whose buffer has a credit.
"""

from __future__ import annotations

import time

import numpy as np

from .. import path
from ..numba_jit import HAVE_NUMBA, jit_inline as _jit_inline, jit_loop as _jit_loop
from .kernel import _hpop, _hpush
from .flow_control import (KIND_CU, KIND_EGRESS, KIND_HBM, KIND_INGRESS, KIND_LINK, N_CLASSES, FlowControl,
                           credit_delay_ps, link_latency_delta_ps, out_buffers, resource_kinds, stage_classes)
from .program import Program
from .result import SimResult, SimulationError

__all__ = ["credit_tables", "run_credit_fast", "MAX_ROW_BYTES"]

#: bound on the per-flow stage rows credit mode builds (about eight int64 [flows, stages] tables)
MAX_ROW_BYTES = 4 * 10**9


def credit_tables(prog: Program, system, fc: FlowControl):
    """Per-flow stage rows for the credit kernel: ``(res, svc, lat, nst, nvc, cls, mark, mark_off)``
    (``[L, K]`` / ``[L]``); link latencies carry :func:`.flow_control.link_latency_delta_ps`."""
    lay = path.resource_layout(system)
    res, svc, lat, nst = prog.expand()
    kinds = resource_kinds(lay, res)
    delta = link_latency_delta_ps(system, fc)
    lat = lat + np.where(kinds == KIND_LINK, delta, 0)
    L, K = res.shape
    mark = np.full(L, -1, np.int64)
    moff = np.zeros(L, np.int64)
    tr = np.flatnonzero((prog.flow_nseg > 0) & (np.arange(L) < prog.n_traffic_flows))
    row0 = prog.flow_seg[tr, 0]
    mark[tr] = prog.seg_mark[row0]
    ok = mark[tr] >= 0
    tr, row0 = tr[ok], row0[ok]
    moff[tr] = prog.seg_mark_off[row0] + np.where(kinds[tr, mark[tr]] == KIND_LINK, delta, 0)
    nvc = np.zeros((L, K), np.int64)
    cls = np.zeros((L, K), np.int64)
    memo = {}
    for fl in range(L):
        key = (tuple(kinds[fl, :nst[fl]].tolist()), int(mark[fl]))
        if key not in memo:
            c = stage_classes(key[0], key[1])
            b = out_buffers(key[0], fc)
            memo[key] = (c, [x[0] for x in b])
        c, v = memo[key]
        cls[fl, :nst[fl]] = c
        nvc[fl, :nst[fl]] = v
    return res, svc, lat, nst.astype(np.int64), nvc, cls, mark, moff


def _initial_credits(system, fc: FlowControl, n_res: int, max_v: int) -> np.ndarray:
    """Credits of every buffer VC ``(resource * N_CLASSES + class) * max_v + vc``: its depth."""
    lay = path.resource_layout(system)
    depth_of = {KIND_CU: fc.inj_buf_flits, KIND_HBM: fc.vc_buf_flits, KIND_LINK: fc.vc_buf_flits,
                KIND_EGRESS: fc.port_buf_flits, KIND_INGRESS: fc.port_buf_flits}
    kinds = resource_kinds(lay, np.arange(n_res))
    d = np.array([depth_of[int(k)] for k in range(5)], np.int64)[kinds]
    return np.repeat(d, N_CLASSES * max_v).astype(np.int64)


@_jit_inline
def _wake(heap, hn, try_at, r, t, b):
    """Queue "resource ``r`` may start a service at ``t``" unless that event is already pending."""
    if try_at[r] != t:
        try_at[r] = t
        hn = _hpush(heap, hn, (((t << 1) | 1) << b) | r, 0, 0)
    return hn


LISTS = N_CLASSES + 1      # candidate lists per resource: one per class of the buffer they need, one needing none


@_jit_inline
def _list_of(r, fl, k, nvc, cls):
    """Candidate list of a flit of flow ``fl`` waiting at stage ``k`` on resource ``r``: every flit of one
    list needs a credit of the same buffer (or none), so only each list's oldest can be the next served."""
    return r * LISTS + (N_CLASSES if nvc[fl, k] == 0 else cls[fl, k])


@_jit_inline
def _waiting(chead, r):
    """Whether resource ``r`` has a candidate."""
    for q in range(LISTS):
        if chead[r * LISTS + q] >= 0:
            return True
    return False


@_jit_inline
def _cand_insert(r, f, a, chead, ctail, cnext, cprev, carr):
    """Insert flit ``f`` (arrival ``a``) into candidate list ``r``, sorted by (arrival, id)."""
    carr[f] = a
    p = ctail[r]
    while p >= 0 and (carr[p] > a or (carr[p] == a and p > f)):
        p = cprev[p]
    if p < 0:
        nx = chead[r]
        chead[r] = f
    else:
        nx = cnext[p]
        cnext[p] = f
    cprev[f] = p
    cnext[f] = nx
    if nx < 0:
        ctail[r] = f
    else:
        cprev[nx] = f


@_jit_inline
def _cand_remove(r, f, chead, ctail, cnext, cprev):
    p = cprev[f]
    nx = cnext[f]
    if p < 0:
        chead[r] = nx
    else:
        cnext[p] = nx
    if nx < 0:
        ctail[r] = p
    else:
        cprev[nx] = p
    cnext[f] = -1
    cprev[f] = -1


@_jit_inline
def _best_vc(credits, base, nv):
    """VC with the most credits (lowest index among ties) of the buffer at ``base``; -2 if none has one."""
    best = -2
    most = 0
    for v in range(nv):
        c = credits[base + v]
        if c > most:
            most = c
            best = v
    return best


@_jit_loop
def credit_loop(res, svc, lat, nst, nvc, cls, mark, moff, flit_flow, flit_phase, flit_issuer, iss_start, iss_end, iss_res,
                iss_of_res, phase_total, window, credits, max_v, cd, maxt, b, cap,
                issue_ps, deliver_ps, store_ps, busy, counts, heap, free, try_at, chead, ctail, cnext, cprev, carr,
                fhead, ftail, fnext, held, at, ptr, out, wait, pdone, popen):
    """Run the credit-mode event loop to the end.  ``counts`` receives (injected, delivered, hops,
    error: 0 ok, 1 time bound, 2 event heap full).  The state arrays after ``counts`` come from
    :func:`_state` (the loop allocates nothing: numba's reference counting off, as in ``kernel``)."""
    n = flit_flow.shape[0]
    n_res = iss_of_res.shape[0]
    n_iss = iss_start.shape[0]
    mask = (np.int64(1) << b) - 1
    hn = 0
    if phase_total.shape[0] > 0:
        popen[0] = 1
    inj = 0
    dlv = 0
    hops = 0
    err = 0
    for i in range(n_iss):
        hn = _wake(heap, hn, try_at, iss_res[i], 0, b)
    while hn > 0:
        if hn > cap - n_iss - 8:                          # an event pushes at most n_iss + 4 records
            err = 2
            break
        key = heap[0, 0]
        pay = heap[0, 1]
        hn = _hpop(heap, hn)
        t = key >> (b + 1)
        kind = (key >> b) & 1
        ident = key & mask
        if kind == 0 and ident >= n:                      # a credit returns
            bv = ident - n
            credits[bv] += 1
            r = bv // (N_CLASSES * max_v)
            hn = _wake(heap, hn, try_at, r, t, b)
            continue
        if kind == 0:                                     # flit ident arrives at stage pay
            f = ident
            fl = flit_flow[f]
            if pay == nst[fl]:                            # delivered
                deliver_ps[f] = t
                dlv += 1
                i = flit_issuer[f]
                out[i] -= 1
                if wait[i] == 2:
                    wait[i] = 0
                    r = iss_res[i]
                    hn = _wake(heap, hn, try_at, r, t, b)
                ph = flit_phase[f]
                if ph >= 0:
                    pdone[ph] += 1
                    if pdone[ph] == phase_total[ph] and ph + 1 < phase_total.shape[0]:
                        popen[ph + 1] = 1
                        for j in range(n_iss):
                            if wait[j] == 1:
                                wait[j] = 0
                                r = iss_res[j]
                                hn = _wake(heap, hn, try_at, r, t, b)
                continue
            at[f] = pay
            carr[f] = t
            hb = held[f]
            if hb < 0 or fhead[hb] == f:
                r = res[fl, pay]
                _cand_insert(_list_of(r, fl, pay, nvc, cls), f, t, chead, ctail, cnext, cprev, carr)
                hn = _wake(heap, hn, try_at, r, t, b)
            continue
        # kind 1: resource ident may start a service
        r = ident
        if try_at[r] == t:
            try_at[r] = -1                                # processed: a later trigger at t pushes again
        if free[r] > t:                                   # busy: look again when it is free, if anyone waits
            if iss_of_res[r] < 0 and _waiting(chead, r):
                hn = _wake(heap, hn, try_at, r, free[r], b)
            continue
        f = -1
        k = 0
        v = -1
        i = iss_of_res[r]
        if i >= 0:                                        # a CU: issue
            f = ptr[i]
            if f >= iss_end[i]:
                continue
            ph = flit_phase[f]
            if ph >= 0 and popen[ph] == 0:
                wait[i] = 1
                continue
            if out[i] >= window:
                wait[i] = 2
                continue
            fl = flit_flow[f]
            nv = nvc[fl, 0]
            if nv > 0:
                v = _best_vc(credits, (r * N_CLASSES + cls[fl, 0]) * max_v, nv)
                if v == -2:
                    continue                              # injection buffer full: a credit wakes it
            ptr[i] = f + 1
            out[i] += 1
            inj += 1
            issue_ps[f] = t
        else:
            for q in range(LISTS):                        # the oldest head among the lists that may go
                g = chead[r * LISTS + q]
                if g < 0 or (f >= 0 and (carr[g] > carr[f] or (carr[g] == carr[f] and g > f))):
                    continue
                vq = -1
                if q < N_CLASSES:
                    vq = _best_vc(credits, (r * N_CLASSES + q) * max_v, nvc[flit_flow[g], at[g]])
                    if vq < 0:
                        continue
                f = g
                v = vq
            if f < 0:
                continue
            k = at[f]
            _cand_remove(_list_of(r, flit_flow[f], k, nvc, cls), f, chead, ctail, cnext, cprev)
        # flit f starts service at stage k of resource r, taking output VC v
        fl = flit_flow[f]
        hb = held[f]
        if hb >= 0:                                       # leave the VC held
            fhead[hb] = fnext[f]
            if fnext[f] < 0:
                ftail[hb] = -1
            fnext[f] = -1
            hn = _hpush(heap, hn, ((t + cd) << (b + 1)) | (n + hb), 0, 0)
            h = fhead[hb]
            if h >= 0 and at[h] >= 0:
                rh = res[flit_flow[h], at[h]]
                _cand_insert(_list_of(rh, flit_flow[h], at[h], nvc, cls), h, carr[h], chead, ctail, cnext, cprev, carr)
                hn = _wake(heap, hn, try_at, rh, t, b)
            held[f] = -1
        if v >= 0:
            bv = (r * N_CLASSES + cls[fl, k]) * max_v + v
            credits[bv] -= 1
            if ftail[bv] < 0:
                fhead[bv] = f
            else:
                fnext[ftail[bv]] = f
            ftail[bv] = f
            held[f] = bv
        at[f] = -1
        s = svc[fl, k]
        free[r] = t + s
        busy[r] += s
        hops += 1
        if k == mark[fl]:
            store_ps[f] = t + moff[fl]
        nxt = t + s + lat[fl, k]
        if nxt > maxt:
            err = 1
            break
        if iss_of_res[r] >= 0 or _waiting(chead, r):     # else the next candidate's arrival wakes r
            hn = _wake(heap, hn, try_at, r, t + s, b)
        hn = _hpush(heap, hn, (nxt << (b + 1)) | f, k + 1, 0)
    counts[0] = inj
    counts[1] = dlv
    counts[2] = hops
    counts[3] = err
    return 0


def _state(n, n_res, n_bv, iss_start, n_ph, cap):
    """Fresh state arrays of :func:`credit_loop` (from ``heap`` on)."""
    full = lambda m: np.full(m, -1, np.int64)  # noqa: E731
    return (np.empty((cap, 3), np.int64), np.zeros(n_res, np.int64), full(n_res),
            full(n_res * LISTS), full(n_res * LISTS), full(n), full(n), np.zeros(n, np.int64),
            full(n_bv), full(n_bv), full(n), full(n), full(n), iss_start.astype(np.int64).copy(),
            np.zeros(iss_start.shape[0], np.int64), np.zeros(iss_start.shape[0], np.int64),
            np.zeros(n_ph, np.int64), np.zeros(n_ph, np.int64))


def run_credit_fast(prog: Program, system, fc: FlowControl, *, max_time_ps=None) -> SimResult:
    """Run the compiled credit-mode loop on ``prog``; :class:`SimulationError` on a bound or a deadlock."""
    t0 = time.perf_counter()
    fs = prog.flow_seg
    k_max = int(np.where(fs >= 0, prog.seg_len[np.maximum(fs, 0)], 0).sum(axis=1).max(initial=0)) if fs.size else 0
    need = 8 * 8 * fs.shape[0] * k_max
    if need > MAX_ROW_BYTES:
        raise ValueError(f"credit mode keeps per-flow stage rows: about {need / 1e9:.1f} GB for "
                         f"{prog.flow_seg.shape[0]:,d} flows (at most {MAX_ROW_BYTES / 1e9:.0f} GB); "
                         "simulate fewer GPUs or threadblocks")
    res, svc, lat, nst, nvc, cls, mark, moff = credit_tables(prog, system, fc)
    n = prog.n_flits
    n_res = prog.n_resources
    max_v = max(int(fc.num_vcs), 1)
    credits = _initial_credits(system, fc, n_res, max_v)
    iss_of_res = np.full(n_res, -1, np.int64)
    iss_of_res[prog.iss_res] = np.arange(prog.iss_res.shape[0])
    b = max(1, int(max(n + credits.shape[0], n_res)).bit_length())
    cap_t = (np.iinfo(np.int64).max >> (b + 1)) - 1
    maxt = cap_t if max_time_ps is None else min(int(max_time_ps), cap_t)
    cap = 4 * n + 4 * n_res + 2 * prog.iss_start.shape[0] + 1024
    loop_s = cpu_s = 0.0
    first = True
    while True:
        issue_ps = np.full(n, -1, np.int64)
        deliver_ps = np.full(n, -1, np.int64)
        store_ps = np.full(n, -1, np.int64)
        busy = np.zeros(n_res, np.int64)
        counts = np.zeros(4, np.int64)
        cred = credits.copy()
        args = (res, svc, lat, nst, nvc, cls, mark, moff, np.ascontiguousarray(prog.flit_flow, np.int64),
                prog.flit_phase.astype(np.int64), prog.flit_issuer.astype(np.int64))
        if first:                          # no issuer, no event: loads (or compiles) the loop outside loop_s
            none = np.zeros(0, np.int64)
            credit_loop(*args, none, none, none, iss_of_res, none, np.int64(1), credits.copy(), np.int64(max_v),
                        np.int64(0), np.int64(0), np.int64(b), np.int64(0), issue_ps, deliver_ps, store_ps, busy,
                        counts, *_state(0, n_res, credits.shape[0], none, 0, 0))
            first = False
        t1, c1 = time.perf_counter(), time.thread_time()
        credit_loop(*args, prog.iss_start.astype(np.int64), prog.iss_end.astype(np.int64), prog.iss_res.astype(np.int64), iss_of_res, prog.phase_total.astype(np.int64), np.int64(prog.window),
                    cred, np.int64(max_v), np.int64(credit_delay_ps(system, fc)), np.int64(maxt),
                    np.int64(b), np.int64(cap), issue_ps, deliver_ps, store_ps, busy, counts,
                    *_state(n, n_res, credits.shape[0], prog.iss_start, prog.phase_total.shape[0], cap))
        loop_s, cpu_s = time.perf_counter() - t1, time.thread_time() - c1
        if counts[3] != 2:
            break
        cap *= 4                                          # the heap was full: again, with room
    inj, dlv, hops, err = (int(x) for x in counts)
    if err == 0 and dlv == n and not np.array_equal(cred, credits):
        raise SimulationError("credit conservation violated: some buffer did not get all its credits back")
    if err == 1:
        raise SimulationError(f"simulation could not finish within the time bound of {maxt / 1e6:.3f} us "
                              f"({dlv} of {n} flits delivered); raise max_time_ns")
    if dlv < n:
        raise SimulationError(f"deadlock: no event left with {n - dlv} of {n} flits undelivered "
                              f"({n - inj} not issued)")
    return SimResult(int(deliver_ps.max()) if n else 0, issue_ps, deliver_ps, store_ps, prog.flit_flow, busy,
                     inj, dlv, hops, prog.n_traffic_flows, "fast-credit" + ("-numba" if HAVE_NUMBA else "-python"),
                     time.perf_counter() - t0, True, loop_s, None, cpu_s)
