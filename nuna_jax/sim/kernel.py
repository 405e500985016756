"""The fast engine: a compiled discrete-event loop over a :class:`Program`.

A calendar queue (250 ps buckets over a ring, a small binary heap for the
current bucket, an overflow heap beyond the ring) of int64 keys
``time_ps * 2**b + id`` (``2**b >= N + I``): ids
``< N`` are flits (their next arrival, or their delivery), ids ``>= N`` are
issuers (a CU ready to issue).  Popping keys in increasing order processes
events by (time, id): a resource sees its arrivals in (arrival time, global
flit id) order, which is the FCFS rule with its tie-break
(docs/simulator.md), and at one instant deliveries come before issues, so a
slot freed at ``t`` can be reused at ``t``.  Every event creates its
successor strictly later (services are >= 1 ps), so that order is total.

The loop is written in the subset of Python that numba compiles; without
numba it runs as plain Python (slow, but the same code and the same answer).
It runs in chunks of at most ``budget`` events so the caller can show
progress; all state lives in the arrays passed in.
"""

from __future__ import annotations

import numpy as np


from ..numba_jit import HAVE_NUMBA, jit as _jit  # noqa: F401  (numba if installed; docs/simulator.md, "Engines")

__all__ = ["HAVE_NUMBA", "run_chunk", "S_HEAP", "S_INJ", "S_DEL", "S_HOPS", "S_NOW", "S_ERR", "S_MAXT", "S_BITS", "S_NTF", "S_TDEL", "S_TSTOP", "S_LO", "S_OVN", "S_RINGN", "S_DW", "S_NB",
           "S_RECN", "S_RECT", "uncontended_rows",
           "STATE_LEN"]

# layout of the int64 ``scal`` state vector
S_HEAP, S_INJ, S_DEL, S_HOPS, S_NOW, S_ERR, S_MAXT, S_BITS = 0, 1, 2, 3, 4, 5, 6, 7
S_NTF, S_TDEL, S_TSTOP = 8, 9, 10      # traffic flow rows, traffic flits delivered, stop target
S_LO, S_OVN, S_RINGN, S_DW, S_NB = 11, 12, 13, 14, 15   # calendar queue: see _cal_insert
S_RECN, S_RECT = 16, 17   # trace: services recorded; time of the first service not recorded (-1: none)
STATE_LEN = 18


@_jit
def _push(heap, n, key):
    i = n
    heap[i] = key
    while i > 0:
        p = (i - 1) >> 1
        if heap[p] <= key:
            break
        heap[i] = heap[p]
        i = p
    heap[i] = key
    return n + 1


@_jit
def _pop(heap, n):
    top = heap[0]
    n -= 1
    last = heap[n]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and heap[c + 1] < heap[c]:
            c += 1
        if heap[c] >= last:
            break
        heap[i] = heap[c]
        i = c
    if n > 0:
        heap[i] = last
    return top, n


@_jit
def _cal_insert(key, b, mask, lo, dw, nb, heap, hn, ovf, on, head, qlink, ringn):
    """Calendar queue insert.  Events with time in ``[lo, lo + dw)`` go to the
    binary heap of the current bucket, those within the horizon ``lo + nb*dw``
    to bucket ``(t // dw) % nb`` (a linked list through ``qlink[id] = (key,
    next id)``; every id has at most one pending event), the rest to the
    overflow heap.  Returns ``(hn, on, ringn)``."""
    t = key >> b
    if t < lo + dw:
        hn = _push(heap, hn, key)
    elif t < lo + nb * dw:
        ident = key & mask
        q = (t // dw) % nb
        qlink[ident, 0] = key
        qlink[ident, 1] = head[q]
        head[q] = ident
        ringn += 1
    else:
        on = _push(ovf, on, key)
    return hn, on, ringn


@_jit
def _cal_refill(b, mask, lo, dw, nb, heap, hn, ovf, on, head, qlink, ringn):
    """Advance the current bucket until the heap holds events (or nothing is left).

    Returns ``(lo, hn, on, ringn)``; ``hn == 0`` only if the queue is empty."""
    while hn == 0:
        if ringn == 0:
            if on == 0:
                break
            lo = ((ovf[0] >> b) // dw) * dw               # jump to the next overflow event
        else:
            lo += dw
            q = (lo // dw) % nb
            ident = head[q]
            while ident >= 0:                             # the bucket becomes current
                hn = _push(heap, hn, qlink[ident, 0])
                ringn -= 1
                ident = qlink[ident, 1]
            head[q] = -1
        while on > 0 and (ovf[0] >> b) < lo + nb * dw:   # the horizon moved: pull overflow in
            key, on = _pop(ovf, on)
            hn, on, ringn = _cal_insert(key, b, mask, lo, dw, nb, heap, hn, ovf, on, head, qlink, ringn)
    return lo, hn, on, ringn


@_jit
def run_chunk(seg_tab, seg_info, flow_tab, fstate, flit_phase, flit_issuer,
              iss_end, iss_res, phase_total, window,
              heap, ovf, head, qlink, scal, res_state, ptr, out, wait, pdone, popen,
              issue_ps, deliver_ps, store_ps, rec, budget):
    """Process up to ``budget`` events.  Returns 1 when finished (or stopped), else 0.

    Packed layouts (built by ``fast.run_fast``): ``seg_tab[row, k] = (local
    resource, svc, lat, merged)`` (``merged``: the stage never waits and is
    done in the event of the stage before; a zero column ends every row); ``seg_info[row] = (len, mark stage, mark offset)``;
    ``flow_tab[fl] = (n segments, row0, off0, row1, off1, ...)``;
    ``fstate[f] = (flow << 32 | segment << 16 | stage, row << 32 | offset)``:
    the stage the flit reaches next and its segment row and resource offset
    (``-1``: its delivery comes next);
    ``res_state[r] = (free time, busy time)``.
    ``scal[S_ERR]`` is set to 1 if a time exceeds ``scal[S_MAXT]`` (the bound).
    With ``scal[S_TSTOP] > 0`` the loop ends right after that many traffic
    flits (flow rows ``< scal[S_NTF]``) are delivered.
    ``rec`` (int64 ``[cap, 4]``, ``cap = 0``: off) records every resource service as
    ``(flit, global resource, start ps, service ps)`` in processing order until it is full
    (``scal[S_RECN]`` rows used); ``scal[S_RECT]`` (start it at -1) becomes the event time at
    which the first service found it full: every service that starts before that time was recorded (events are processed in time order, and a service starts no earlier than
    the event that performs it).  A ``budget`` of 0 processes nothing (it compiles the loop).
    """
    n_fl = fstate.shape[0]
    n_iss = iss_end.shape[0]
    b = scal[S_BITS]
    mask = (np.int64(1) << b) - 1
    low32 = (np.int64(1) << 32) - 1
    hn = scal[S_HEAP]
    maxt = scal[S_MAXT]
    hops = scal[S_HOPS]
    inj = scal[S_INJ]
    dlv = scal[S_DEL]
    t = scal[S_NOW]
    ntf = scal[S_NTF]
    tdel = scal[S_TDEL]
    tstop = scal[S_TSTOP]
    lo = scal[S_LO]
    on = scal[S_OVN]
    ringn = scal[S_RINGN]
    dw = scal[S_DW]
    nb = scal[S_NB]
    rec_cap = rec.shape[0]
    rec_n = scal[S_RECN]
    rec_t = scal[S_RECT]
    stopped = 0
    err = 0
    done = 0
    while done < budget:
        if hn == 0:
            lo, hn, on, ringn = _cal_refill(b, mask, lo, dw, nb, heap, hn, ovf, on, head, qlink, ringn)
            if hn == 0:
                break
        key, hn = _pop(heap, hn)
        t = key >> b
        ident = key & mask
        done += 1
        if ident >= n_fl:                                  # an issuer may issue
            i = ident - n_fl
            f = ptr[i]
            if f >= iss_end[i]:
                continue
            ph = flit_phase[f]
            if ph >= 0 and popen[ph] == 0:
                wait[i] = 1                                # barrier
                continue
            if out[i] >= window:
                wait[i] = 2                                # window full
                continue
            fl = fstate[f, 0] >> 32
            row = flow_tab[fl, 1]
            svc = seg_tab[row, 0, 1]
            r = iss_res[i]
            res_state[r, 0] = t + svc
            res_state[r, 1] += svc
            issue_ps[f] = t
            if rec_n < rec_cap:
                rec[rec_n, 0] = f
                rec[rec_n, 1] = r
                rec[rec_n, 2] = t
                rec[rec_n, 3] = svc
                rec_n += 1
            elif rec_cap > 0 and rec_t < 0:
                rec_t = t
            out[i] += 1
            ptr[i] = f + 1
            inj += 1
            hops += 1
            if seg_info[row, 1] == 0:
                store_ps[f] = t + seg_info[row, 2]
            if seg_info[row, 0] > 1:                       # next: stage 1 of segment 0
                fstate[f, 0] = (fl << 32) | 1
                fstate[f, 1] = (np.int64(row) << 32) | flow_tab[fl, 2]
            elif flow_tab[fl, 0] > 1:                      # next: segment 1
                fstate[f, 0] = (fl << 32) | (1 << 16)
                fstate[f, 1] = (np.int64(flow_tab[fl, 3]) << 32) | flow_tab[fl, 4]
            else:                                          # next: delivery
                fstate[f, 0] = (fl << 32) | (1 << 16)
                fstate[f, 1] = -1
            nxt = t + svc + seg_tab[row, 0, 2]
            if nxt > maxt:
                err = 1
                break
            hn, on, ringn = _cal_insert((nxt << b) + f, b, mask, lo, dw, nb, heap, hn, ovf, on, head, qlink,
                                        ringn)
            hn, on, ringn = _cal_insert(((t + svc) << b) + ident, b, mask, lo, dw, nb, heap, hn, ovf, on, head,
                                        qlink, ringn)
            continue
        f = ident
        st = fstate[f, 0]
        where = fstate[f, 1]
        fl = st >> 32
        if where < 0:                                      # delivery
            deliver_ps[f] = t
            dlv += 1
            i = flit_issuer[f]
            out[i] -= 1
            if wait[i] == 2:
                wait[i] = 0
                hn, on, ringn = _cal_insert((t << b) + n_fl + i, b, mask, lo, dw, nb, heap, hn, ovf, on, head,
                                            qlink, ringn)
            ph = flit_phase[f]
            if ph >= 0:
                pdone[ph] += 1
                if pdone[ph] == phase_total[ph] and ph + 1 < phase_total.shape[0]:
                    popen[ph + 1] = 1
                    for j in range(n_iss):
                        if wait[j] == 1:
                            wait[j] = 0
                            hn, on, ringn = _cal_insert((t << b) + n_fl + j, b, mask, lo, dw, nb, heap, hn, ovf,
                                                        on, head, qlink, ringn)
            if fl < ntf:
                tdel += 1
                if tdel == tstop:                          # optional early stop (background left)
                    stopped = 1
                    break
            continue
        k = st & 0xFFFF
        row = where >> 32
        r = seg_tab[row, k, 0] + (where & low32)
        svc = seg_tab[row, k, 1]
        start = t
        fr = res_state[r, 0]
        if fr > start:
            start = fr
        res_state[r, 0] = start + svc
        res_state[r, 1] += svc
        hops += 1
        if rec_n < rec_cap:
            rec[rec_n, 0] = f
            rec[rec_n, 1] = r
            rec[rec_n, 2] = start
            rec[rec_n, 3] = svc
            rec_n += 1
        elif rec_cap > 0 and rec_t < 0:
            rec_t = t
        if seg_info[row, 1] == k:
            store_ps[f] = start + seg_info[row, 2]
        nxt = start + svc + seg_tab[row, k, 2]
        while seg_tab[row, k + 1, 3] != 0:                 # provably uncontended: same event (fast.uncontended_stages)
            k += 1
            r = seg_tab[row, k, 0] + (where & low32)
            svc = seg_tab[row, k, 1]
            start = nxt                                    # proven: never waits, whatever the event order
            res_state[r, 1] += svc                         # free time untouched: another flit may visit r
            #                                                as a real event, in its own (later) time order
            hops += 1
            if rec_n < rec_cap:
                rec[rec_n, 0] = f
                rec[rec_n, 1] = r
                rec[rec_n, 2] = start
                rec[rec_n, 3] = svc
                rec_n += 1
            elif rec_cap > 0 and rec_t < 0:
                rec_t = t
            if seg_info[row, 1] == k:
                store_ps[f] = start + seg_info[row, 2]
            nxt = start + svc + seg_tab[row, k, 2]
        if nxt > maxt:
            err = 1
            break
        if k + 1 < seg_info[row, 0]:
            fstate[f, 0] = (st & ~np.int64(0xFFFF)) | (k + 1)
        else:                                              # segment done: load the next one
            q = ((st & low32) >> 16) + 1
            fstate[f, 0] = (fl << 32) | (q << 16)
            if q < flow_tab[fl, 0]:
                fstate[f, 1] = (np.int64(flow_tab[fl, 1 + 2 * q]) << 32) | flow_tab[fl, 2 + 2 * q]
            else:
                fstate[f, 1] = -1
        hn, on, ringn = _cal_insert((nxt << b) + f, b, mask, lo, dw, nb, heap, hn, ovf, on, head, qlink, ringn)
    scal[S_HEAP] = hn
    scal[S_LO] = lo
    scal[S_OVN] = on
    scal[S_RINGN] = ringn
    scal[S_HOPS] = hops
    scal[S_INJ] = inj
    scal[S_DEL] = dlv
    scal[S_NOW] = t
    scal[S_TDEL] = tdel
    scal[S_RECN] = rec_n
    scal[S_RECT] = rec_t
    if stopped:
        return 1
    if err:
        scal[S_ERR] = 1
        return 1
    return 1 if (hn == 0 and on == 0 and ringn == 0) else 0


@_jit
def uncontended_rows(seg_res, seg_svc, seg_lat, seg_len, flow_seg, flow_off, flow_nseg, used, n_res):
    """Compiled form of ``fast.uncontended_stages`` (same rule, one pass over the used flows'
    stages, no sorting): ``merge[row, k]`` for stage ``k >= 1`` of a row that never waits."""
    q_n, w = seg_res.shape
    pred = np.full(n_res, -2, np.int64)                  # -2: unseen, -1: entered from outside
    plat = np.zeros(n_res, np.int64)
    psvc = np.zeros(n_res, np.int64)
    msvc = np.zeros(n_res, np.int64)
    bad = np.zeros(n_res, np.int8)
    for fl in range(flow_seg.shape[0]):
        if not used[fl]:
            continue
        p, pl, ps = np.int64(-1), np.int64(-1), np.int64(-1)
        for q in range(flow_nseg[fl]):
            row = flow_seg[fl, q]
            off = np.int64(flow_off[fl, q])
            for k in range(seg_len[row]):
                r = np.int64(seg_res[row, k]) + off
                if pred[r] == -2:
                    pred[r], plat[r], psvc[r] = p, pl, ps
                elif pred[r] != p or plat[r] != pl or psvc[r] != ps:
                    bad[r] = 1
                if seg_svc[row, k] > msvc[r]:
                    msvc[r] = seg_svc[row, k]
                p, pl, ps = r, seg_lat[row, k], seg_svc[row, k]
    merge = np.zeros((q_n, w), np.bool_)
    seen = np.zeros(q_n, np.int8)
    for fl in range(flow_seg.shape[0]):
        if not used[fl]:
            continue
        for q in range(flow_nseg[fl]):
            row = flow_seg[fl, q]
            off = np.int64(flow_off[fl, q])
            if seen[row] == 0:
                seen[row] = 1
                for k in range(1, seg_len[row]):
                    merge[row, k] = True
            for k in range(1, seg_len[row]):
                r = np.int64(seg_res[row, k]) + off
                if bad[r] or pred[r] < 0 or msvc[r] > psvc[r]:
                    merge[row, k] = False
    if w > 1:
        for fl in range(flow_seg.shape[0]):
            if used[fl] and flow_nseg[fl] > 0:
                merge[flow_seg[fl, 0], 1] = False        # stage 1 of a first segment follows the issue event
    return merge
