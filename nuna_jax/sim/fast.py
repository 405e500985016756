"""Driver of the fast engine (:mod:`nuna_jax.sim.kernel`): state, chunks, progress, checks."""

from __future__ import annotations

import time

import numpy as np

from . import kernel as event_loop
from .program import Program
from .result import SimResult, SimulationError

__all__ = ["run_fast", "time_bound_ps"]

_I64_MAX = np.iinfo(np.int64).max
CAL_BUCKET_PS = 256       # calendar queue: 256 ps buckets ...
CAL_BUCKETS = 32768       # ... over an 8.389 us ring (later events wait in an overflow heap); both powers of two
LK_LEN = (1 << 16) + 1    # sorting a bucket: up to 65,536 sub-buckets (512 kB of scratch, the touched part ~ its size)


def id_bits(prog: Program) -> int:
    """Bits of an event key taken by the id: ``2**bits >= N + I``."""
    return max(1, int(prog.n_flits + prog.iss_start.shape[0] - 1).bit_length())


def time_bound_ps(prog: Program, max_time_ps=None) -> int:
    """Largest simulated time allowed: the user bound, capped so ``t << bits | id`` fits int64."""
    cap = (_I64_MAX >> id_bits(prog)) - 1
    return int(cap if max_time_ps is None else min(int(max_time_ps), cap))


class _Progress:
    """The simulator's progress bar (:class:`nuna_jax.progress.Progress`): flits delivered, simulated time."""

    def __init__(self, total: int, enabled: bool):
        from ..progress import Progress
        self.bar = Progress(total, "simulate", unit="flits", enabled=enabled)

    def update(self, delivered: int, now_ps: int, force=False):
        self.bar.update(delivered, note=f"t={now_ps / 1000:.0f} ns", force=force)

    def close(self):
        self.bar.close()


def uncontended_stages(prog: Program, numpy_only=False) -> np.ndarray:
    """``merge[row, k]`` (bool ``[Q, W]``): stage ``k >= 1`` of segment row ``row`` provably never waits.

    Exact event merging (docs/simulator.md, "Speed").  A resource ``R`` never
    makes a flit wait if every flit that reaches it comes straight from the
    same resource ``U`` with the same latency ``lat_U`` and the same service
    ``svc_U >= svc_R`` of any flit at ``R``: ``U`` is a FCFS server, so
    consecutive ends of service at ``U`` are at least ``svc_U`` apart, hence
    so are the arrivals at ``R`` (``end + lat_U``), and by induction each
    arrival finds ``R`` free (``arrival >= previous start + svc_R``).  Such a
    stage's start equals its arrival whatever else happens, so the kernel
    performs it in the same event as the stage before (same times, same busy
    time, same hop count, one event less).  A merged stage does not write the
    resource's free time: the same resource may be visited by other flows as
    a real event (e.g. as the first stage of a segment), processed later in
    time order, and an early write would make those wait; since no visit ever
    waits, the free time seen by the real events only must never exceed their
    arrival either.  Checked over every (row, GPU
    offset) pair that some flit uses, and across segment boundaries and the
    issue stage (a resource entered first by some flow is never merged).
    Only stages after the first of their row are merged.
    """
    q_n, w = prog.seg_res.shape
    merge = np.zeros((q_n, w), bool)
    if q_n == 0 or prog.n_flits == 0:
        return merge
    used = np.bincount(prog.flit_flow, minlength=prog.flow_seg.shape[0]) > 0
    if event_loop.HAVE_NUMBA and not numpy_only:
        return event_loop.uncontended_rows(prog.seg_res, prog.seg_svc, prog.seg_lat, prog.seg_len, prog.flow_seg,
                                  prog.flow_off, prog.flow_nseg, used, np.int64(prog.n_resources))
    return _uncontended_numpy(prog, used)


def _entries(prog: Program, used):
    """Every way a flit enters a resource, as parallel int64 arrays ``(resource, predecessor resource,
    predecessor latency, predecessor service, service here)`` (predecessor -1: entered from outside),
    plus the row stages in use ``(pr, po, inrow, R_in)`` and each used flow's first segment row."""
    q_n, w = prog.seg_res.shape
    fseg = prog.flow_seg[used].astype(np.int64)
    foff = prog.flow_off[used].astype(np.int64)
    nseg = prog.flow_nseg[used].astype(np.int64)
    m = fseg.shape[1]
    seg_res, seg_svc, seg_lat, seg_len = (a.astype(np.int64) for a in
                                          (prog.seg_res, prog.seg_svc, prog.seg_lat, prog.seg_len))
    valid = np.arange(m)[None, :] < nseg[:, None]
    pkey = foff * q_n + fseg                                 # (row, offset) as one int64
    ukeys = np.unique(pkey[valid])                           # the (row, offset) pairs in use
    pr, po = ukeys % q_n, ukeys // q_n
    kk = np.arange(w)[None, :]
    inrow = (kk >= 1) & (kk < seg_len[pr][:, None])
    R_in = seg_res[pr] + po[:, None]
    prev = np.concatenate([np.full((pr.shape[0], 1), -1, np.int64), R_in[:, :-1]], axis=1)
    plat = np.concatenate([np.zeros((pr.shape[0], 1), np.int64), seg_lat[pr][:, :-1]], axis=1)
    psvc = np.concatenate([np.zeros((pr.shape[0], 1), np.int64), seg_svc[pr][:, :-1]], axis=1)
    cols = [[R_in[inrow]], [prev[inrow]], [plat[inrow]], [psvc[inrow]], [seg_svc[pr][inrow]]]

    def add(*xs):
        for c, x in zip(cols, xs):
            c.append(x)
    # first stage of a flow's first segment: entered from outside (never merged)
    first = ukeys[np.searchsorted(ukeys, np.unique(pkey[:, 0]))]
    f_r, f_o = first % q_n, first // q_n
    neg = np.full(first.shape, -1, np.int64)
    add(seg_res[f_r, 0] + f_o, neg, neg, neg, seg_svc[f_r, 0])
    # first stage of a later segment: entered from the last stage of the segment before
    n_p = np.int64(ukeys.shape[0])
    for q in range(1, m):
        sel = q < nseg
        if not np.any(sel):
            continue
        i1 = np.searchsorted(ukeys, pkey[sel, q - 1])
        i2 = np.searchsorted(ukeys, pkey[sel, q])
        tr = np.unique(i1 * n_p + i2)
        ka, kb = ukeys[tr // n_p], ukeys[tr % n_p]
        a_r, a_o, b_r, b_o = ka % q_n, ka // q_n, kb % q_n, kb // q_n
        last = seg_len[a_r] - 1
        add(seg_res[b_r, 0] + b_o, seg_res[a_r, last] + a_o, seg_lat[a_r, last], seg_svc[a_r, last],
            seg_svc[b_r, 0])
    return tuple(np.concatenate(c) for c in cols), (pr, inrow, R_in), fseg[:, 0]


def _never_waiting(n_resources: int, R, pred, p_lat, p_svc, svc_r) -> np.ndarray:
    """Resources every entry of which comes from one FCFS predecessor with one latency and a
    service at least this resource's (so no flit ever waits there): bool ``[n_resources]``."""
    order = np.argsort(R, kind="stable")
    R, pred, p_lat, p_svc, svc_r = R[order], pred[order], p_lat[order], p_svc[order], svc_r[order]
    starts = np.flatnonzero(np.r_[True, R[1:] != R[:-1]])
    same = np.ones(starts.shape, bool)
    for x in (pred, p_lat, p_svc):                           # exactly one (pred, lat, svc) per resource
        same &= np.minimum.reduceat(x, starts) == np.maximum.reduceat(x, starts)
    ok = same & (np.minimum.reduceat(pred, starts) >= 0) & \
        (np.maximum.reduceat(svc_r, starts) <= np.minimum.reduceat(p_svc, starts))
    good = np.zeros(n_resources, bool)
    good[R[starts][ok]] = True
    return good


def _uncontended_numpy(prog: Program, used) -> np.ndarray:
    """The numpy version of :func:`uncontended_stages` (the compiled one is ``event_loop.uncontended_rows``)."""
    q_n, w = prog.seg_res.shape
    entries, (pr, inrow, R_in), first_rows = _entries(prog, used)
    good = _never_waiting(prog.n_resources, *entries)
    # a row stage is merged only if it is good for every offset the row is used with
    kk = np.arange(w)[None, :]
    rr = np.broadcast_to(pr[:, None], inrow.shape)[inrow]
    cc = np.broadcast_to(kk, inrow.shape)[inrow]
    nbad = np.bincount(rr * w + cc, weights=~good[R_in[inrow]], minlength=q_n * w).reshape(q_n, w)
    merge = np.zeros((q_n, w), bool)
    merge[:, 1:] = (np.arange(1, w)[None, :] < prog.seg_len.astype(np.int64)[:, None])
    merge &= ~(nbad > 0)
    merge[np.setdiff1d(np.arange(q_n), pr), :] = False
    merge[np.unique(first_rows), 1] = False                  # stage 1 of a first segment follows the issue event
    return merge


def pack(prog: Program, merge=True):
    """The kernel's packed tables ``(stg, smark, flow_row)``.

    ``stg [E + 1, 4]`` (int32 when every value fits, else int64): the stages of every segment
    row one after the other, ``(local resource, svc ps, lat ps, flags)``, flags
    ``F_MERGED`` (the stage is done in the event of the stage before,
    :func:`uncontended_stages`), ``F_LAST`` (the row's last stage), ``F_MARK`` (the store is
    issued at this stage's start + ``smark[e]`` ps); one zero row at the end.
    ``flow_row [L, 16]`` int32, one 64 B cache line per flow (the only per-flow memory an event
    reads, at issue and at each segment change): ``(n segments, e0 .. e4, side bits, src offset,
    dst offset, issuer, phase, 0 ...)``: the first stage ``e`` of each segment, bit ``q`` set when
    segment ``q`` uses the destination GPU's resource offset, the issuer index and the flow's
    phase (-1: background).  Segments here are the program's segment rows joined while on one
    GPU after the read leg (read leg; store leg + egress port; ingress port + delivery leg).  A flat table of ~16 B per stage
    keeps an event's stage reads in cache (a padded ``[Q, W]`` table of 32 B cells was 10 MB
    at 64 GPUs)."""
    from .kernel import F_LAST, F_MARK, F_MERGED
    q_n, w = prog.seg_res.shape
    lens = prog.seg_len.astype(np.int64)
    start = np.cumsum(lens) - lens
    e_n = int(lens.sum())
    kk = np.arange(w)[None, :]
    valid = kk < lens[:, None]
    flags = np.where(kk == lens[:, None] - 1, F_LAST, 0) | np.where(kk == prog.seg_mark.astype(np.int64)[:, None],
                                                                   F_MARK, 0)
    if merge:
        flags = flags | np.where(uncontended_stages(prog), F_MERGED, 0)
    cols = [prog.seg_res.astype(np.int64), prog.seg_svc.astype(np.int64), prog.seg_lat.astype(np.int64), flags]
    old = np.stack([c[valid] for c in cols], axis=1)        # [e_n, 4]: every row's stages, row after row
    old_mark = np.zeros(e_n, np.int64)
    mk = np.flatnonzero(prog.seg_mark >= 0)
    old_mark[start[mk] + prog.seg_mark[mk].astype(np.int64)] = prog.seg_mark_off[mk]
    L, m = prog.flow_seg.shape
    # super rows: segment 0 (the read leg) alone, then consecutive segments on the same GPU joined
    # (store leg + egress port; ingress port + delivery leg): two segment changes a flit, not four,
    # and no more rows (the egress row follows from the to-port row, the ingress row from the
    # delivery row; if some row did not determine its group, segments stay apart)
    fs = np.ascontiguousarray(prog.flow_seg, np.int64)
    fo = np.ascontiguousarray(prog.flow_off, np.int64)
    nseg = np.ascontiguousarray(prog.flow_nseg, np.int64)
    uk, g_first, g_off, g_n, ok = event_loop.flow_groups(fs, fo, nseg, np.int64(q_n), np.int64(1))
    if not ok:
        uk, g_first, g_off, g_n, ok = event_loop.flow_groups(fs, fo, nseg, np.int64(q_n), np.int64(0))
    n_g = int(g_n.max(initial=0))
    if n_g > 5:
        raise ValueError(f"flow_row holds at most 5 segments, a flow has {n_g}")
    part_len = np.where(uk >= 0, lens[np.maximum(uk, 0)], 0)          # [U, m]
    part_start = start[np.maximum(uk, 0)]
    row_len = part_len.sum(axis=1)
    new_start = np.cumsum(row_len) - row_len
    e_new = int(row_len.sum())
    pl = part_len.reshape(-1)
    src0 = np.repeat(part_start.reshape(-1), pl)
    within = np.arange(e_new) - np.repeat(np.cumsum(pl) - pl, pl)
    idx = src0 + within                                               # old stage of each new stage
    big = any(int(np.abs(old[:, j]).max(initial=0)) >= 2**31 for j in range(3))
    stg = np.zeros((e_new + 1, 4), np.int64 if big else np.int32)
    stg[:e_new] = old[idx]
    stg[:e_new, 3] &= ~F_LAST
    stg[new_start + row_len - 1, 3] |= F_LAST
    smark = np.zeros(e_new + 1, np.int64)
    smark[:e_new] = old_mark[idx]
    head_start = new_start
    buf = np.zeros(L * 16 + 16, np.int32)                 # rows aligned to 64 B
    a0 = (-buf.ctypes.data % 64) // 4
    flow_row = buf[a0:a0 + L * 16].reshape(L, 16)
    g_first, g_off = g_first[:, :n_g], g_off[:, :n_g]
    o_src = fo[:, 0]
    o_dst = g_off[np.arange(L), np.maximum(g_n - 1, 0)] if n_g else o_src
    g_in = g_first >= 0
    side = g_in & (g_off != o_src[:, None])
    if np.any(side & (g_off != o_dst[:, None])):
        raise ValueError("a flow's segment offsets are not its source's or destination's")
    flow_row[:, 0] = g_n
    flow_row[:, 1:1 + n_g] = np.where(g_in, head_start[np.maximum(g_first, 0)] if uk.shape[0] else 0, -1)
    flow_row[:, 6] = (side * (1 << np.arange(n_g))[None, :]).sum(axis=1)
    flow_row[:, 7] = o_src
    flow_row[:, 8] = o_dst
    flow_row[:, 9] = -1
    flow_row[:, 10] = -1
    flow_row[prog.flit_flow, 9] = prog.flit_issuer          # a flow's flits share its issuer and phase
    flow_row[prog.flit_flow, 10] = prog.flit_phase
    return stg, smark, flow_row


def run_fast(prog: Program, *, max_time_ps=None, progress=False, chunk_events=4_000_000,
             stop_after_traffic=False, merge=True, trace_services: int = 0) -> SimResult:
    """Run the compiled event loop to completion; raise :class:`SimulationError` if it cannot.

    ``trace_services``: record up to that many resource services (flit, resource, start) for a
    timeline (:mod:`nuna_jax.sim.trace`); 32 bytes each; they come back as ``result.trace``.
    ``result.loop_s`` is the event loop's own time (s), without packing the program or loading
    the compiled loop; ``result.wall_s`` all of this call.

    ``stop_after_traffic``: stop as soon as the last *traffic* flit is
    delivered, leaving background flits unfinished (their deliver_ps stay
    -1).  The traffic's timing is exact (later events cannot change earlier
    ones); the result says ``background_complete=False`` and the flit counts
    cover what was injected/delivered by then.
    """
    t0 = time.perf_counter()
    n = prog.n_flits
    n_iss = prog.iss_start.shape[0]
    n_ph = prog.phase_total.shape[0]
    if n_ph + 1 >= 1 << 24:
        raise ValueError(f"the fast engine takes at most {2**24 - 2} phases, the program has {n_ph}")
    p_max = n + n_iss + 1                  # pending events at once: one per flit and per issuer at most
    nb, dw = int(CAL_BUCKETS), int(CAL_BUCKET_PS)
    if nb < 1 or dw < 1 or nb & (nb - 1) or dw & (dw - 1):
        raise ValueError(f"calendar: CAL_BUCKETS ({nb}) and CAL_BUCKET_PS ({dw}) must be powers of two")
    scal = np.zeros(event_loop.STATE_LEN, np.int64)
    scal[event_loop.S_MAXT] = time_bound_ps(prog, max_time_ps)
    scal[event_loop.S_BITS] = id_bits(prog)
    scal[event_loop.S_NTF] = prog.n_traffic_flows
    n_traffic_flits = int(np.sum(prog.flit_flow < prog.n_traffic_flows))
    early = bool(stop_after_traffic) and n_traffic_flits < n
    scal[event_loop.S_TSTOP] = n_traffic_flits if early and n_traffic_flits > 0 else -1
    # event records (key, state, where); np.empty: only what the run uses is ever touched
    heap = np.empty((p_max, 3), np.int64)      # the current bucket's heap
    ovf = np.empty((p_max, 3), np.int64)       # overflow heap (beyond the ring)
    cur = np.empty((p_max, 3), np.int64)       # the current bucket's sorted run
    lk = np.empty(LK_LEN, np.int64)            # counting-sort scratch: at most LK_LEN - 1 sub-buckets
    # ring of nb buckets, each a list of blocks of BLOCK records: at most one partly filled block a bucket
    n_blocks = (p_max + event_loop.BLOCK - 1) // event_loop.BLOCK + nb + 1
    bhead = np.full(nb, -1, np.int64)
    btail = np.full(nb, -1, np.int64)
    bfill = np.zeros(nb, np.int64)
    bnext = np.empty(n_blocks, np.int64)
    brec = np.empty((n_blocks * event_loop.BLOCK, 3), np.int64)
    # every issuer tries to issue at t = 0, in issuer order: the first current run
    cur[:n_iss, 0] = np.arange(n_iss, dtype=np.int64) + n
    cur[:n_iss, 1:] = 0
    scal[event_loop.S_CUR] = 0
    scal[event_loop.S_CURN] = n_iss
    scal[event_loop.S_FREE] = -1
    scal[event_loop.S_DW] = dw
    scal[event_loop.S_NB] = nb
    scal[event_loop.S_DWB] = dw.bit_length() - 1
    scal[event_loop.S_RECT] = -1
    rec = np.zeros((max(0, int(trace_services)), 4), np.int64)
    stg, smark, flow_row = pack(prog, merge)
    res_state = np.zeros((prog.n_resources, 2), np.int64)
    ptr = prog.iss_start.astype(np.int64).copy()
    out = np.zeros(n_iss, np.int64)
    wait = np.zeros(n_iss, np.int8)
    pdone = np.zeros(n_ph, np.int64)
    popen = np.zeros(n_ph, np.int8)
    if n_ph:
        popen[0] = 1
    issue_ps = np.full(n, -1, np.int64)
    deliver_ps = np.full(n, -1, np.int64)
    store_ps = np.full(n, -1, np.int64)
    fiss = event_loop.issue_rows(np.ascontiguousarray(prog.flit_flow, np.int32), prog.flit_phase,
                                 prog.iss_start.astype(np.int64), prog.iss_end.astype(np.int64), flow_row, stg,
                                 np.int64(prog.n_traffic_flows))
    bar = _Progress(n, progress)

    def chunk(budget):
        return event_loop.run_chunk(stg, smark, flow_row, fiss, prog.flit_phase,
                                    prog.iss_end, prog.iss_res, prog.phase_total, np.int64(prog.window),
                                    heap, ovf, cur, lk, bhead, btail, bfill, bnext, brec, scal, res_state,
                                    ptr, out, wait, pdone, popen, issue_ps, deliver_ps, store_ps, rec,
                                    np.int64(budget))
    chunk(0)                       # processes no event: loads (or compiles) the loop outside loop_s
    t_loop = time.perf_counter()
    c_loop = time.thread_time()
    while True:
        finished = chunk(chunk_events)
        bar.update(int(scal[event_loop.S_DEL]), int(scal[event_loop.S_NOW]))
        if finished:
            break
    loop_s = time.perf_counter() - t_loop
    loop_cpu_s = time.thread_time() - c_loop
    bar.update(int(scal[event_loop.S_DEL]), int(scal[event_loop.S_NOW]), force=True)
    bar.close()
    if scal[event_loop.S_ERR]:
        raise SimulationError(
            f"simulation could not finish within the time bound of {scal[event_loop.S_MAXT] / 1e6:.3f} us "
            f"({int(scal[event_loop.S_DEL])} of {n} flits delivered); raise max_time_ns")
    trace = None
    if rec.shape[0]:
        m = int(scal[event_loop.S_RECN])
        cut = int(scal[event_loop.S_RECT])
        trace = {"flit": rec[:m, 0], "resource": rec[:m, 1], "start_ps": rec[:m, 2], "service_ps": rec[:m, 3],
                 "complete_before_ps": None if cut < 0 else cut}
    if early and n_traffic_flits > 0:
        tm = prog.flit_flow < prog.n_traffic_flows
        check_complete(int(np.sum(issue_ps[tm] >= 0)), int(scal[event_loop.S_TDEL]), n_traffic_flits, deliver_ps[tm])
    else:
        check_complete(int(scal[event_loop.S_INJ]), int(scal[event_loop.S_DEL]), n, deliver_ps)
    return SimResult(int(deliver_ps.max()) if n else 0, issue_ps, deliver_ps, store_ps,
                     prog.flit_flow, res_state[:, 1].copy(), int(scal[event_loop.S_INJ]), int(scal[event_loop.S_DEL]), int(scal[event_loop.S_HOPS]),
                     prog.n_traffic_flows, "fast-numba" if event_loop.HAVE_NUMBA else "fast-python",
                     time.perf_counter() - t0, not early, loop_s, trace, loop_cpu_s)


def check_complete(injected: int, delivered: int, n: int, deliver_ps) -> None:
    """Flit conservation: every flit injected once and delivered once, or a SimulationError."""
    if injected != n or delivered != n or (n and int(np.min(deliver_ps)) < 0):
        raise SimulationError(
            f"flit conservation violated: {n} flits in the program, {injected} injected, "
            f"{delivered} delivered")
