"""The fast engine: a compiled discrete-event loop over a :class:`Program`.

Events are records ``(key, state, where)`` of int64: ``key = time_ps * 2**b + id``
(``2**b >= N + I``; ids ``< N`` are flits -- their next arrival, or their
delivery --, ids ``>= N`` are issuers, a CU ready to issue), and the flit's
position carried in the event itself (``state = flow << 32 | segment << 16 |
stage``, ``where = row << 32 | resource offset``, ``-1``: delivery next), so an
event never reads per-flit memory.  Popping keys in increasing order processes
events by (time, id): a resource sees its arrivals in (arrival time, global
flit id) order, which is the FCFS rule with its tie-break (docs/simulator.md),
and at one instant deliveries come before issues, so a slot freed at ``t`` can
be reused at ``t``.  Every event creates its successor strictly later
(services are >= 1 ps), so that order is total.

The queue is a calendar (docs/simulator.md, "Speed"): a ring of ``nb``
buckets of ``dw`` ps; a bucket holds its records in blocks of ``BLOCK``
contiguous records (no per-flit links to chase); when a bucket becomes
current its records are sorted once by key into the *current run*, and events
created for the current bucket meanwhile go to a small binary heap merged with
the run; events beyond the ring wait in an overflow heap.  The pop order is
exactly the order of one big heap of keys.  Since the current run is sorted, the
loop knows its next events and prefetches their memory (``_prefetch_ahead``:
hints only, no value changes).

The loop is written in the subset of Python that numba compiles; without
numba it runs as plain Python (slow, but the same code and the same answer).
It runs in chunks of at most ``budget`` events so the caller can show
progress; all state lives in the arrays passed in.
"""

from __future__ import annotations

import numpy as np


from .prefetch import prefetch
from ..numba_jit import HAVE_NUMBA, jit as _jit, jit_inline as _jit_inline, jit_loop as _jit_loop  # noqa: F401  (numba if installed; docs/simulator.md, "Engines")

__all__ = ["HAVE_NUMBA", "run_chunk", "S_HEAP", "S_INJ", "S_DEL", "S_HOPS", "S_NOW", "S_ERR", "S_MAXT", "S_BITS",
           "S_NTF", "S_TDEL", "S_TSTOP", "S_LO", "S_OVN", "S_RINGN", "S_DW", "S_NB", "S_RECN", "S_RECT",
           "flow_groups", "issue_rows", "S_CUR", "S_CURN", "S_FREE", "S_BUMP", "S_DWB", "BLOCK", "F_MERGED", "F_LAST", "F_MARK", "uncontended_rows", "STATE_LEN"]

# layout of the int64 ``scal`` state vector
S_HEAP, S_INJ, S_DEL, S_HOPS, S_NOW, S_ERR, S_MAXT, S_BITS = 0, 1, 2, 3, 4, 5, 6, 7
S_NTF, S_TDEL, S_TSTOP = 8, 9, 10      # traffic flow rows, traffic flits delivered, stop target
S_LO, S_OVN, S_RINGN, S_DW, S_NB = 11, 12, 13, 14, 15   # calendar: bucket start, overflow size, ring size, dw, nb
S_RECN, S_RECT = 16, 17   # trace: services recorded; time of the first service not recorded (-1: none)
S_CUR, S_CURN, S_FREE, S_BUMP, S_DWB = 18, 19, 20, 21, 22   # current run cursor / length, free block list,
#                                                             blocks ever used, log2 dw
STATE_LEN = 23
BLOCK = 32                # records per bucket block
PF_NEAR, PF_FAR = 8, 16   # prefetch distances, in events of the current run (docs/simulator.md, "Speed")
F_MERGED, F_LAST, F_MARK = 1, 2, 4   # stage flags (stg[e, 3])
ST_LAST = 1 << 62         # an event's state on the flit's last segment: ST_LAST | traffic << 61 | issuer << 24 | phase + 1
ISS_MASK = (1 << 37) - 1  # issuer bits of that state (phase + 1 < 2**24, checked by fast.run_fast)


@_jit_inline
def _record(rec, rec_n, rec_cap, rec_t, f, r, start, svc, t):
    """Append one service ``(flit, resource, start ps, service ps)`` to the trace records ``rec`` while
    they have room; past ``rec_cap`` keep the event time ``t`` of the first service left out (``rec_t``,
    where the trace is cut; ``simulate --trace``).  Returns ``(rec_n, rec_t)``."""
    if rec_n < rec_cap:
        rec[rec_n, 0] = f
        rec[rec_n, 1] = r
        rec[rec_n, 2] = start
        rec[rec_n, 3] = svc
        return rec_n + 1, rec_t
    if rec_cap > 0 and rec_t < 0:
        return rec_n, t
    return rec_n, rec_t


@_jit_inline
def _hpush(h, n, key, s, w):
    """Push record ``(key, s, w)`` on the binary min-heap ``h[:n]`` (by key); returns ``n + 1``."""
    i = n
    while i > 0:
        p = (i - 1) >> 1
        if h[p, 0] <= key:
            break
        h[i, 0] = h[p, 0]
        h[i, 1] = h[p, 1]
        h[i, 2] = h[p, 2]
        i = p
    h[i, 0] = key
    h[i, 1] = s
    h[i, 2] = w
    return n + 1


@_jit_inline
def _hpop(h, n):
    """Remove the top record of ``h[:n]`` (read it first); returns ``n - 1``."""
    n -= 1
    lk = h[n, 0]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and h[c + 1, 0] < h[c, 0]:
            c += 1
        if h[c, 0] >= lk:
            break
        h[i, 0] = h[c, 0]
        h[i, 1] = h[c, 1]
        h[i, 2] = h[c, 2]
        i = c
    if n > 0:
        h[i, 0] = lk
        h[i, 1] = h[n, 1]
        h[i, 2] = h[n, 2]
    return n


@_jit_inline
def _ring_put(q, key, s, w, bhead, btail, bfill, bnext, brec, scal):
    """Append record ``(key, s, w)`` to ring bucket ``q`` (a list of blocks of ``BLOCK`` records;
    ``bfill[q]`` its number of records: every block but the tail is full)."""
    tb = btail[q]
    cnt = bfill[q]
    if tb < 0 or cnt & (BLOCK - 1) == 0:
        nbk = scal[S_FREE]
        if nbk >= 0:
            scal[S_FREE] = bnext[nbk]
        else:
            nbk = scal[S_BUMP]
            scal[S_BUMP] = nbk + 1
        bnext[nbk] = -1
        if tb < 0:
            bhead[q] = nbk
        else:
            bnext[tb] = nbk
        btail[q] = nbk
        tb = nbk
    j = tb * BLOCK + (cnt & (BLOCK - 1))
    brec[j, 0] = key
    brec[j, 1] = s
    brec[j, 2] = w
    bfill[q] += 1


@_jit_inline
def _insert(key, s, w, b, lo, dw, nb, heap, hn, ovf, on, ringn, bhead, btail, bfill, bnext, brec, scal):
    """Queue an event record: the current bucket's heap if ``t < lo + dw``, ring bucket
    ``(t / dw) mod nb`` (``dw``, ``nb``: powers of two) within the horizon ``lo + nb * dw``, else the overflow heap.
    Returns ``(hn, on, ringn)``."""
    t = key >> b
    if t < lo + dw:
        hn = _hpush(heap, hn, key, s, w)
    elif t < lo + nb * dw:
        _ring_put((t >> scal[S_DWB]) & (nb - 1), key, s, w, bhead, btail, bfill, bnext, brec, scal)
        ringn += 1
    else:
        on = _hpush(ovf, on, key, s, w)
    return hn, on, ringn


@_jit_inline
def _prefetch_ahead(cur, ci, cn, mask, n_fl, stg, res_state, flow_row, fiss, ptr, iss_end):
    """Ask for the memory of the events ``PF_NEAR`` and ``PF_FAR`` places ahead in the current run
    (hints only: no value changes; docs/simulator.md, "Speed").  ``PF_FAR`` ahead: the stage row
    of a flit's next stage, or the issue row of an issuer's next flit; ``PF_NEAR`` ahead (those
    now cached): the resource's state and the flow row where the event will end a segment
    (merged stages followed as the loop does), or the stage row of the flit to issue."""
    j = ci + PF_FAR
    if j < cn:
        k2 = cur[j, 0] & mask
        if k2 >= n_fl:
            prefetch(fiss, ptr[k2 - n_fl])
        elif cur[j, 2] >= 0:
            prefetch(stg, cur[j, 2] >> 32)
    j = ci + PF_NEAR
    if j < cn:
        k2 = cur[j, 0] & mask
        w2 = cur[j, 2]
        if k2 >= n_fl:
            f2 = ptr[k2 - n_fl]
            if f2 < iss_end[k2 - n_fl]:
                prefetch(stg, fiss[f2, 0])
        elif w2 >= 0:
            e2 = w2 >> 32
            prefetch(res_state, stg[e2, 0] + (w2 & 0xFFFFFFFF))
            s2 = cur[j, 1]
            if s2 & ST_LAST == 0:
                while stg[e2, 3] & F_LAST == 0 and stg[e2 + 1, 3] & F_MERGED:
                    e2 += 1
                if stg[e2, 3] & F_LAST:
                    prefetch(flow_row, s2 >> 8)


@_jit_loop
def _next_bucket(b, lo, dw, nb, ovf, on, ringn, bhead, btail, bfill, bnext, brec, cur, lk, scal):
    """Make the next non-empty bucket current: its records, sorted by key, become the current run
    ``cur[:m]``.  Returns ``(lo, m, on, ringn)``; ``m == 0`` only if the queue is empty."""
    m = 0
    while m == 0:
        if ringn == 0:
            if on == 0:
                break
            lo = ((ovf[0, 0] >> b) >> scal[S_DWB]) << scal[S_DWB]   # jump to the next overflow event
        else:
            lo += dw
        while on > 0 and (ovf[0, 0] >> b) < lo + nb * dw:  # the horizon moved: pull overflow in
            key = ovf[0, 0]
            s = ovf[0, 1]
            w = ovf[0, 2]
            on = _hpop(ovf, on)
            _ring_put(((key >> b) >> scal[S_DWB]) & (nb - 1), key, s, w, bhead, btail, bfill, bnext, brec, scal)
            ringn += 1
        q = (lo >> scal[S_DWB]) & (nb - 1)
        blk = bhead[q]
        if blk < 0:
            continue
        # a counting sort by key into c sub-buckets (c: a power of two >= the bucket's size, at most
        # lk's length - 1; a sub-bucket is a range of times and, once there are more than dw, a range
        # of ids inside one ps), then an insertion sort by key, which only has the few records of one
        # sub-bucket to order (crowded buckets at 64 GPUs hold ~20 records a ps: sub-buckets one ps
        # wide left ~8 insertion moves a record)
        size = bfill[q]                                   # records (no walk of the block list to count them)
        tailfill = ((size - 1) & (BLOCK - 1)) + 1
        for u in range(0, BLOCK, 2):                      # the blocks lie anywhere in the pool: each one's
            prefetch(brec, blk * BLOCK + u)               # lines are asked for one block ahead
        dwb = scal[S_DWB]
        cb = 0
        while cb < dwb + b and (np.int64(2) << cb) <= lk.shape[0] and (np.int64(1) << cb) < size:
            cb += 1
        c = np.int64(1) << cb
        sh = b + dwb - cb                                 # (key - lo << b) >> sh: the sub-bucket
        base = lo << b
        for u in range(c + 1):
            lk[u] = 0
        blk = bhead[q]
        while blk >= 0:
            last = bnext[blk]
            j0 = blk * BLOCK
            if last >= 0:
                prefetch(bnext, last)
                for u in range(0, BLOCK, 2):
                    prefetch(brec, last * BLOCK + u)
            for j in range(j0, j0 + (tailfill if last < 0 else BLOCK)):
                lk[((brec[j, 0] - base) >> sh) + 1] += 1
            blk = last
        for u in range(1, c + 1):
            lk[u] += lk[u - 1]
        blk = bhead[q]
        while blk >= 0:
            last = bnext[blk]
            j0 = blk * BLOCK
            for j in range(j0, j0 + (tailfill if last < 0 else BLOCK)):
                u = (brec[j, 0] - base) >> sh
                i = lk[u]
                lk[u] = i + 1
                cur[i, 0] = brec[j, 0]
                cur[i, 1] = brec[j, 1]
                cur[i, 2] = brec[j, 2]
            blk = last
        m = size
        for i in range(1, m):                             # keys are distinct (one pending event per id)
            k0 = cur[i, 0]
            if cur[i - 1, 0] < k0:
                continue
            s0 = cur[i, 1]
            w0 = cur[i, 2]
            j = i - 1
            while j >= 0 and cur[j, 0] > k0:
                cur[j + 1, 0] = cur[j, 0]
                cur[j + 1, 1] = cur[j, 1]
                cur[j + 1, 2] = cur[j, 2]
                j -= 1
            cur[j + 1, 0] = k0
            cur[j + 1, 1] = s0
            cur[j + 1, 2] = w0
        # the bucket's blocks go back to the free list
        btail_q = btail[q]
        bnext[btail_q] = scal[S_FREE]
        scal[S_FREE] = bhead[q]
        bhead[q] = -1
        btail[q] = -1
        bfill[q] = 0
        ringn -= m
    return lo, m, on, ringn


@_jit_loop
def run_chunk(stg, smark, flow_row, fiss, flit_phase,
              iss_end, iss_res, phase_total, window,
              heap, ovf, cur, lk, bhead, btail, bfill, bnext, brec, scal, res_state, ptr, out, wait, pdone, popen,
              issue_ps, deliver_ps, store_ps, rec, budget):
    """Process up to ``budget`` events.  Returns 1 when finished (or stopped), else 0.

    Packed layouts (built by ``fast.pack``): the stage table ``stg[e] = (local resource, svc,
    lat, flags)``, every segment row's stages one after the other (``flags``: ``F_MERGED``, the
    stage never waits and is done in the event of the stage before; ``F_LAST``, the row's last
    stage; ``F_MARK``, the store issue is at this stage's start + ``smark[e]``);
    ``flow_row[fl] = (n segments, e0 .. e4, side bits, src offset, dst offset, issuer, phase)``
    (first stage of each segment; bit ``q``: segment ``q`` is on the destination GPU); an event record ``(key, state, where)``: ``state = flow << 8 | segment``,
    ``where = e << 32 | offset`` (the stage the flit reaches next; ``-1``: its delivery comes
    next); ``res_state[r] = (free time, busy time)``; ``fiss[f] = (e, state, where)`` of flit ``f``'s issue
    (:func:`issue_rows`).
    Queue: ``heap`` (current bucket, ``scal[S_HEAP]`` records), ``cur`` (the current bucket's
    sorted run, ``scal[S_CUR] .. scal[S_CURN]``), ring buckets ``bhead/btail/bfill`` (first block, last block, records) over the
    block pool ``bnext/brec``, ``ovf`` (overflow heap, ``scal[S_OVN]`` records), ``lk`` (sort
    scratch).
    ``scal[S_ERR]`` is set to 1 if a time exceeds ``scal[S_MAXT]`` (the bound).
    With ``scal[S_TSTOP] > 0`` the loop ends right after that many traffic
    flits (flow rows ``< scal[S_NTF]``) are delivered.
    ``rec`` (int64 ``[cap, 4]``, ``cap = 0``: off) records every resource service as
    ``(flit, global resource, start ps, service ps)`` in processing order until it is full
    (``scal[S_RECN]`` rows used); ``scal[S_RECT]`` (start it at -1) becomes the event time at
    which the first service found it full: every service that starts before that time was recorded (events are processed in time order, and a service starts no earlier than
    the event that performs it).  A ``budget`` of 0 processes nothing (it compiles the loop).
    """
    n_fl = fiss.shape[0]
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
    ci = scal[S_CUR]
    cn = scal[S_CURN]
    rec_cap = rec.shape[0]
    rec_n = scal[S_RECN]
    rec_t = scal[S_RECT]
    stopped = 0
    err = 0
    done = 0
    while done < budget:
        if ci < cn:                                        # the current run, merged with the heap
            _prefetch_ahead(cur, ci, cn, mask, n_fl, stg, res_state, flow_row, fiss, ptr, iss_end)
            if hn > 0 and heap[0, 0] < cur[ci, 0]:
                key = heap[0, 0]
                st = heap[0, 1]
                where = heap[0, 2]
                hn = _hpop(heap, hn)
            else:
                key = cur[ci, 0]
                st = cur[ci, 1]
                where = cur[ci, 2]
                ci += 1
        elif hn > 0:
            key = heap[0, 0]
            st = heap[0, 1]
            where = heap[0, 2]
            hn = _hpop(heap, hn)
        else:
            lo, cn, on, ringn = _next_bucket(b, lo, dw, nb, ovf, on, ringn, bhead, btail, bfill, bnext, brec,
                                             cur, lk, scal)
            ci = 0
            if cn == 0:
                break
            continue
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
            e = fiss[f, 0]                                 # the flit's issue row (issue_rows): no flow read
            svc = np.int64(stg[e, 1])
            fg = stg[e, 3]
            r = iss_res[i]
            res_state[r, 0] = t + svc
            res_state[r, 1] += svc
            issue_ps[f] = t
            rec_n, rec_t = _record(rec, rec_n, rec_cap, rec_t, f, r, t, svc, t)
            out[i] += 1
            ptr[i] = f + 1
            inj += 1
            hops += 1
            if fg & F_MARK:
                store_ps[f] = t + smark[e]
            nst = fiss[f, 1]
            nwh = fiss[f, 2]
            nxt = t + svc + stg[e, 2]
            if nxt > maxt:
                err = 1
                break
            hn, on, ringn = _insert((nxt << b) + f, nst, nwh, b, lo, dw, nb, heap, hn, ovf, on, ringn,
                                    bhead, btail, bfill, bnext, brec, scal)
            hn, on, ringn = _insert(((t + svc) << b) + ident, 0, 0, b, lo, dw, nb, heap, hn, ovf, on, ringn,
                                    bhead, btail, bfill, bnext, brec, scal)
            continue
        f = ident
        fl = st >> 8
        if where < 0:                                      # delivery (st: ST_LAST | traffic | issuer | phase + 1)
            deliver_ps[f] = t
            dlv += 1
            i = (st >> 24) & ISS_MASK
            out[i] -= 1
            if wait[i] == 2:
                wait[i] = 0
                hn, on, ringn = _insert((t << b) + n_fl + i, 0, 0, b, lo, dw, nb, heap, hn, ovf, on, ringn,
                                        bhead, btail, bfill, bnext, brec, scal)
            ph = (st & 0xFFFFFF) - 1
            if ph >= 0:
                pdone[ph] += 1
                if pdone[ph] == phase_total[ph] and ph + 1 < phase_total.shape[0]:
                    popen[ph + 1] = 1
                    for j in range(n_iss):
                        if wait[j] == 1:
                            wait[j] = 0
                            hn, on, ringn = _insert((t << b) + n_fl + j, 0, 0, b, lo, dw, nb, heap, hn, ovf, on,
                                                    ringn, bhead, btail, bfill, bnext, brec, scal)
            if (st >> 61) & 1:
                tdel += 1
                if tdel == tstop:                          # optional early stop (background left)
                    stopped = 1
                    break
            continue
        e = where >> 32
        off = where & low32
        r = stg[e, 0] + off
        svc = np.int64(stg[e, 1])
        fg = stg[e, 3]
        start = t
        fr = res_state[r, 0]
        if fr > start:
            start = fr
        res_state[r, 0] = start + svc
        res_state[r, 1] += svc
        hops += 1
        rec_n, rec_t = _record(rec, rec_n, rec_cap, rec_t, f, r, start, svc, t)
        if fg & F_MARK:
            store_ps[f] = start + smark[e]
        nxt = start + svc + stg[e, 2]
        while fg & F_LAST == 0 and stg[e + 1, 3] & F_MERGED:   # provably uncontended: same event
            e += 1                                         # (fast.uncontended_stages)
            r = stg[e, 0] + off
            svc = np.int64(stg[e, 1])
            fg = stg[e, 3]
            start = nxt                                    # proven: never waits, whatever the event order
            res_state[r, 1] += svc                         # free time untouched: another flit may visit r
            #                                                as a real event, in its own (later) time order
            hops += 1
            rec_n, rec_t = _record(rec, rec_n, rec_cap, rec_t, f, r, start, svc, t)
            if fg & F_MARK:
                store_ps[f] = start + smark[e]
            nxt = start + svc + stg[e, 2]
        if nxt > maxt:
            err = 1
            break
        if fg & F_LAST == 0:
            nst = st
            nwh = ((e + 1) << 32) | off
        elif st & ST_LAST:                                 # last segment done: delivery next
            nst = st
            nwh = np.int64(-1)
        else:                                              # segment done: load the next one
            q = (st & 0xFF) + 1
            nwh = (np.int64(flow_row[fl, 1 + q]) << 32) | flow_row[fl, 7 + ((flow_row[fl, 6] >> q) & 1)]
            if q + 1 == flow_row[fl, 0]:                   # entering the last segment
                nst = ST_LAST | (np.int64(fl < ntf) << 61) | (np.int64(flow_row[fl, 9]) << 24) | \
                    (flow_row[fl, 10] + 1)
            else:
                nst = (fl << 8) | q
        hn, on, ringn = _insert((nxt << b) + f, nst, nwh, b, lo, dw, nb, heap, hn, ovf, on, ringn,
                                bhead, btail, bfill, bnext, brec, scal)
    scal[S_HEAP] = hn
    scal[S_LO] = lo
    scal[S_OVN] = on
    scal[S_RINGN] = ringn
    scal[S_CUR] = ci
    scal[S_CURN] = cn
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
    return 1 if (hn == 0 and on == 0 and ringn == 0 and ci >= cn) else 0


@_jit
def issue_rows(flit_flow, flit_phase, iss_start, iss_end, flow_row, stg, ntf):
    """Per flit ``f`` (global id) what its issue needs, read in issue order instead of from its flow's
    row: ``fiss[f] = (e, state, where)``, its first stage ``e`` and the record of its next event
    (the rules of ``run_chunk``'s issue: stage 1 of segment 0, else segment 1, else its delivery; on
    its last segment the state is ``ST_LAST | traffic << 61 | issuer << 24 | phase + 1``).  An
    issuer's flits are consecutive, so its issues read this table sequentially (24 B a flit)
    where a flow row (64 B) was read for every issue."""
    fiss = np.zeros((flit_flow.shape[0], 3), np.int64)
    for i in range(iss_start.shape[0]):
        for f in range(iss_start[i], iss_end[i]):
            fl = np.int64(flit_flow[f])
            ph = np.int64(flit_phase[f])
            e = np.int64(flow_row[fl, 1])
            sides = flow_row[fl, 6]
            nseg = flow_row[fl, 0]
            last = ST_LAST | (np.int64(fl < ntf) << 61) | (np.int64(i) << 24) | (ph + 1)
            if stg[e, 3] & F_LAST == 0:                    # next: stage 1 of segment 0
                nst = last if nseg == 1 else fl << 8
                nwh = ((e + 1) << 32) | flow_row[fl, 7 + (sides & 1)]
            elif nseg > 1:                                 # next: segment 1
                nst = last if nseg == 2 else (fl << 8) | 1
                nwh = (np.int64(flow_row[fl, 2]) << 32) | flow_row[fl, 7 + ((sides >> 1) & 1)]
            else:                                          # next: delivery
                nst = last
                nwh = np.int64(-1)
            fiss[f, 0] = e
            fiss[f, 1] = nst
            fiss[f, 2] = nwh
    return fiss


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


@_jit
def flow_groups(flow_seg, flow_off, flow_nseg, q_n, join):
    """Segments of every flow grouped for ``fast.pack``: segment 0 alone, then (``join``) each run of
    consecutive segments with one resource offset.  A group is identified by (its position, its
    first row) where that row always starts the same list of rows at that position, else by (its
    position, its last row) likewise; where neither holds, ``ok`` is 0 (call again with ``join``
    0: every segment its own group).  Returns ``(tup, g_id, g_off, g_n, ok)``: ``tup[u]`` the rows
    of group ``u`` (-1 padded), ``g_id [L, m]`` / ``g_off [L, m]`` each flow's groups and their
    resource offsets (-1 / 0 past ``g_n [L]``)."""
    n_fl, m = flow_seg.shape
    q1 = max(q_n, 1)
    tf = np.full((m, q1, m), -2, np.int64)     # by (position, first row): its row list
    tl = np.full((m, q1, m), -2, np.int64)     # by (position, last row)
    bad_f = np.zeros(m, np.int64)
    bad_l = np.zeros(m, np.int64)
    cur = np.empty(m, np.int64)
    for sweep in range(2):
        if sweep == 1:
            mode = np.zeros(m, np.int64)
            for g in range(m):
                if bad_f[g] == 0:
                    mode[g] = 0
                elif bad_l[g] == 0:
                    mode[g] = 1
                else:
                    return tf[0], np.full((n_fl, m), -1, np.int64), np.zeros((n_fl, m), np.int64), \
                        np.zeros(n_fl, np.int64), 0
            sid = np.full((m, q1), -1, np.int64)
            tup = np.full((n_fl * m + 1, m), -1, np.int64)
            n_u = 0
            g_id = np.full((n_fl, m), -1, np.int64)
            g_off = np.zeros((n_fl, m), np.int64)
            g_n = np.zeros(n_fl, np.int64)
        for fl in range(n_fl):
            ns = flow_nseg[fl]
            q = 0
            g = 0
            while q < ns:
                cur[0] = flow_seg[fl, q]
                n_in = 1
                if join and q > 0:
                    while q + n_in < ns and flow_off[fl, q + n_in] == flow_off[fl, q]:
                        cur[n_in] = flow_seg[fl, q + n_in]
                        n_in += 1
                for p in range(n_in, m):
                    cur[p] = -1
                rf = cur[0]
                rl = cur[n_in - 1]
                if sweep == 0:
                    if tf[g, rf, 0] == -2:
                        tf[g, rf, :] = cur
                    else:
                        for p in range(m):
                            if tf[g, rf, p] != cur[p]:
                                bad_f[g] = 1
                    if tl[g, rl, 0] == -2:
                        tl[g, rl, :] = cur
                    else:
                        for p in range(m):
                            if tl[g, rl, p] != cur[p]:
                                bad_l[g] = 1
                else:
                    r = rf if mode[g] == 0 else rl
                    u = sid[g, r]
                    if u < 0:
                        u = n_u
                        sid[g, r] = u
                        tup[u, :] = cur
                        n_u += 1
                    g_id[fl, g] = u
                    g_off[fl, g] = flow_off[fl, q]
                g += 1
                q += n_in
            if sweep == 1:
                g_n[fl] = g
    return tup[:n_u], g_id, g_off, g_n, 1
