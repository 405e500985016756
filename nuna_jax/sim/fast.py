"""Driver of the fast engine (:mod:`nuna_jax.sim.kernel`): state, chunks, progress, checks."""

from __future__ import annotations

import sys
import time

import numpy as np

from . import kernel as K
from .program import Program
from .result import SimResult, SimulationError

__all__ = ["run_fast", "time_bound_ps"]

_I64_MAX = np.iinfo(np.int64).max
CAL_BUCKET_PS = 250       # calendar queue: 250 ps buckets ...
CAL_BUCKETS = 32768       # ... over an 8.192 us ring (later events wait in an overflow heap)


def id_bits(prog: Program) -> int:
    """Bits of an event key taken by the id: ``2**bits >= N + I``."""
    return max(1, int(prog.n_flits + prog.iss_start.shape[0] - 1).bit_length())


def time_bound_ps(prog: Program, max_time_ps=None) -> int:
    """Largest simulated time allowed: the user bound, capped so ``t << bits | id`` fits int64."""
    cap = (_I64_MAX >> id_bits(prog)) - 1
    return int(cap if max_time_ps is None else min(int(max_time_ps), cap))


class _Progress:
    """Plain-text progress on stderr, only when stderr is a terminal."""

    def __init__(self, total: int, enabled: bool):
        self.total = max(total, 1)
        self.on = bool(enabled) and sys.stderr.isatty()
        self.last = 0.0

    def update(self, delivered: int, now_ps: int, force=False):
        if not self.on:
            return
        t = time.perf_counter()
        if not force and t - self.last < 0.2:
            return
        self.last = t
        frac = delivered / self.total
        bar = "#" * int(30 * frac)
        sys.stderr.write(f"\rsimulate [{bar:<30}] {100 * frac:5.1f}%  {delivered}/{self.total} flits  "
                         f"t={now_ps / 1000:.0f} ns")
        sys.stderr.flush()

    def close(self):
        if self.on:
            sys.stderr.write("\n")
            sys.stderr.flush()


def pack(prog: Program):
    """The kernel's packed arrays: seg_tab [Q, W, 3], seg_info [Q, 3], flow_tab [L, 1 + 2 MAX_SEG], fstate [N, 2]."""
    seg_tab = np.stack([prog.seg_res.astype(np.int64), prog.seg_svc, prog.seg_lat], axis=2)
    seg_info = np.stack([prog.seg_len.astype(np.int64), prog.seg_mark.astype(np.int64), prog.seg_mark_off], axis=1)
    L, m = prog.flow_seg.shape
    flow_tab = np.empty((L, 1 + 2 * m), np.int32)
    flow_tab[:, 0] = prog.flow_nseg
    flow_tab[:, 1::2] = prog.flow_seg
    flow_tab[:, 2::2] = prog.flow_off
    fstate = np.zeros((prog.flit_flow.shape[0], 2), np.int64)
    fstate[:, 0] = prog.flit_flow.astype(np.int64) << 32
    if seg_tab.shape[0] == 0:
        seg_tab = np.zeros((1, 1, 3), np.int64)
        seg_info = np.zeros((1, 3), np.int64)
    return np.ascontiguousarray(seg_tab), np.ascontiguousarray(seg_info), flow_tab, fstate


def run_fast(prog: Program, *, max_time_ps=None, progress=False, chunk_events=4_000_000,
             stop_after_traffic=False) -> SimResult:
    """Run the compiled event loop to completion; raise :class:`SimulationError` if it cannot.

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
    heap = np.zeros(n + n_iss + 1, np.int64)
    scal = np.zeros(K.STATE_LEN, np.int64)
    scal[K.S_MAXT] = time_bound_ps(prog, max_time_ps)
    scal[K.S_BITS] = id_bits(prog)
    scal[K.S_NTF] = prog.n_traffic_flows
    n_traffic_flits = int(np.sum(prog.flit_flow < prog.n_traffic_flows))
    early = bool(stop_after_traffic) and n_traffic_flits < n
    scal[K.S_TSTOP] = n_traffic_flits if early and n_traffic_flits > 0 else -1
    # every issuer tries to issue at t = 0, in issuer order (a sorted array is a valid heap)
    heap[:n_iss] = np.arange(n_iss, dtype=np.int64) + n
    scal[K.S_HEAP] = n_iss
    ovf = np.zeros(n + n_iss + 1, np.int64)
    head = np.full(CAL_BUCKETS, -1, np.int64)
    qlink = np.full((n + n_iss, 2), -1, np.int64)
    scal[K.S_DW] = CAL_BUCKET_PS
    scal[K.S_NB] = CAL_BUCKETS
    seg_tab, seg_info, flow_tab, fstate = pack(prog)
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
    bar = _Progress(n, progress)
    while True:
        finished = K.run_chunk(seg_tab, seg_info, flow_tab, fstate, prog.flit_phase, prog.flit_issuer,
                               prog.iss_end, prog.iss_res, prog.phase_total, np.int64(prog.window),
                               heap, ovf, head, qlink, scal, res_state, ptr, out, wait, pdone, popen,
                               issue_ps, deliver_ps, store_ps, np.int64(chunk_events))
        bar.update(int(scal[K.S_DEL]), int(scal[K.S_NOW]))
        if finished:
            break
    bar.update(int(scal[K.S_DEL]), int(scal[K.S_NOW]), force=True)
    bar.close()
    if scal[K.S_ERR]:
        raise SimulationError(
            f"simulation could not finish within the time bound of {scal[K.S_MAXT] / 1e6:.3f} us "
            f"({int(scal[K.S_DEL])} of {n} flits delivered); raise max_time_ns")
    if early and n_traffic_flits > 0:
        tm = prog.flit_flow < prog.n_traffic_flows
        check_complete(int(np.sum(issue_ps[tm] >= 0)), int(scal[K.S_TDEL]), n_traffic_flits, deliver_ps[tm])
    else:
        check_complete(int(scal[K.S_INJ]), int(scal[K.S_DEL]), n, deliver_ps)
    return SimResult(int(deliver_ps.max()) if n else 0, issue_ps, deliver_ps, store_ps,
                     prog.flit_flow, res_state[:, 1].copy(), int(scal[K.S_INJ]), int(scal[K.S_DEL]), int(scal[K.S_HOPS]),
                     prog.n_traffic_flows, "fast-numba" if K.HAVE_NUMBA else "fast-python",
                     time.perf_counter() - t0, not early)


def check_complete(injected: int, delivered: int, n: int, deliver_ps) -> None:
    """Flit conservation: every flit injected once and delivered once, or a SimulationError."""
    if injected != n or delivered != n or (n and int(np.min(deliver_ps)) < 0):
        raise SimulationError(
            f"flit conservation violated: {n} flits in the program, {injected} injected, "
            f"{delivered} delivered")
