"""Compile a ``Traffic`` (plus optional on-chip background flows) into a flit program.

A *program* is everything the simulator engines need, in integer picoseconds
and plain numpy arrays (docs/simulator.md):

* the stage list of every flow, from :func:`nuna_jax.path.flow_stages` (the
  single definition of a flit's path, docs/model.md), rounded to integer ps
  and *compressed*: padding stages are dropped and every pure-latency stage
  (no resource) is folded into the latency of the resource stage before it,
  which changes no flit's timing (such a stage meets no other flit).  It is
  stored *factored* into path segments (read leg, to-port leg, egress,
  ingress, delivery leg), each a row of a small shared table of GPU-local
  resource ids, so memory does not grow with flows x stages;
* the static issue order of every CU (docs/model.md, "Issue and the
  outstanding-request window"): step order inside a threadblock, round-robin
  over the flows of one step, round-robin over the threadblocks of one CU,
  phases in order.  The position in this order is the *global flit id*, the
  deterministic FCFS tie-break;
* the phase of every flit (barriers) and where the store issue happens, to
  measure the one-way store latency of NUNA Figure 10.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .. import geometry as geo
from .. import path
from ..system import System
from ..traffic import Traffic, make_traffic, validate

__all__ = ["Program", "compile_program", "to_ps", "issue_order", "PS_PER_NS", "MAX_SEG",
           "ROUNDING_SLACK_PS"]

PS_PER_NS = 1000


class Program(NamedTuple):
    """Integer-ps flit program (numpy), factored into *segments* (docs/simulator.md).

    A flow's compressed stage list is the concatenation of up to ``MAX_SEG``
    segments; each segment is a row of one shared segment table holding
    GPU-local resource ids, so the table stays small however many flows there
    are.  ``N`` flits, ``L`` flows, ``I`` issuers, ``Q`` segment rows.

    Segment table:
      seg_res [Q, W] int32   GPU-local resource id of each stage (-1 past seg_len)
      seg_svc [Q, W] int64   service time, ps (>= 1)
      seg_lat [Q, W] int64   latency after service, ps (folded pure-latency stages included)
      seg_len [Q]    int32
      seg_mark [Q]   int32   stage after whose service the store is issued (-1: none)
      seg_mark_off [Q] int64 store issue = start of that stage + seg_mark_off, ps
    Flow level:
      flow_seg [L, MAX_SEG] int32  segment rows in order (-1 padding)
      flow_off [L, MAX_SEG] int32  global resource offset of each segment (gpu * per_gpu)
      flow_nseg [L] int32
    Flit level, in global flit id order (= issue order, CU by CU):
      flit_flow [N] int32, flit_phase [N] int32 (-1: background, no barrier), flit_issuer [N] int32
    Issuer level: iss_start, iss_end [I] int64 (flit id ranges), iss_res [I] int32 (the CU)
    phase_total [P] int64, window, n_resources, n_traffic_flows (rows below are the Traffic's)
    """

    seg_res: Any
    seg_svc: Any
    seg_lat: Any
    seg_len: Any
    seg_mark: Any
    seg_mark_off: Any
    flow_seg: Any
    flow_off: Any
    flow_nseg: Any
    flit_flow: Any
    flit_phase: Any
    flit_issuer: Any
    iss_start: Any
    iss_end: Any
    iss_res: Any
    phase_total: Any
    window: int
    n_resources: int
    n_traffic_flows: int

    @property
    def n_flits(self) -> int:
        return int(self.flit_flow.shape[0])

    def expand(self):
        """Full per-flow compressed stage table ``(res, svc, lat, nst)`` with global ids (tests)."""
        rows = []
        for fl in range(self.flow_seg.shape[0]):
            r, sv, la = [], [], []
            for q in range(int(self.flow_nseg[fl])):
                row, off = int(self.flow_seg[fl, q]), int(self.flow_off[fl, q])
                n = int(self.seg_len[row])
                r += (self.seg_res[row, :n] + off).tolist()
                sv += self.seg_svc[row, :n].tolist()
                la += self.seg_lat[row, :n].tolist()
            rows.append((r, sv, la))
        k = max([len(x[0]) for x in rows] + [1])
        res = np.full((len(rows), k), -1, np.int64)
        svc = np.zeros((len(rows), k), np.int64)
        lat = np.zeros((len(rows), k), np.int64)
        for i, (r, sv, la) in enumerate(rows):
            res[i, :len(r)], svc[i, :len(r)], lat[i, :len(r)] = r, sv, la
        return res, svc, lat, np.array([len(x[0]) for x in rows])


MAX_SEG = 5


ROUNDING_SLACK_PS = 0.05


def to_ps(x_ns) -> np.ndarray:
    """ns (float) -> integer ps, rounded *up*, int64.

    Rounding every service and latency up makes each simulated stage at least
    as long as the float model's, so the analytical lower bound (which only
    assumes each stage takes at least its float time) holds for the
    simulator too.  ``ROUNDING_SLACK_PS`` (0.05 ps) of float32 noise is
    forgiven first, so that e.g. 5.12 ns stored as 5.1199998 still maps to
    5120 ps, and 120 ns stored as 120.0000076 to 120000 ps.
    """
    ps = np.asarray(x_ns, dtype=np.float64) * PS_PER_NS
    return np.maximum(np.ceil(ps - ROUNDING_SLACK_PS), 0).astype(np.int64)


def _compress(res, svc_ns, lat_ns, mark_col=None):
    """Drop padding and fold pure-latency stages into the resource stage before them.

    Rows are blocks of stage columns of one kind of path segment.  Leading
    columns without a resource must take no time (padding of an empty leg).
    ``mark_col``: index of the column whose *arrival* is the store issue; the
    returned mark points at the resource stage before it.  Returns
    ``(res, svc_ps, lat_ps, n, mark, mark_off)`` with ``res`` padded by -1.
    """
    res = np.asarray(res, dtype=np.int64)
    svc = to_ps(svc_ns)
    lat = to_ps(lat_ns)
    f, s = res.shape
    keep = res >= 0
    svc = np.where(keep, np.maximum(svc, 1), svc)          # a resource is busy >= 1 ps
    idx = np.broadcast_to(np.arange(s), (f, s))
    owner = np.maximum.accumulate(np.where(keep, idx, -1), axis=1)  # resource stage owning each stage
    extra = np.where(keep, lat, svc + lat)                  # time added to the owner's latency
    lead = owner < 0
    if np.any(extra[lead] != 0):
        raise ValueError("a path segment starts with a pure-latency stage that takes time")
    tot_lat = np.zeros((f, s), np.int64)
    rows = np.broadcast_to(np.arange(f)[:, None], (f, s))
    np.add.at(tot_lat, (rows[~lead], owner[~lead]), extra[~lead])
    nst = keep.sum(axis=1).astype(np.int32)
    order = np.argsort(~keep, axis=1, kind="stable")        # kept stages first, in order
    k = max(int(nst.max()) if f else 1, 1)
    order = order[:, :k]
    take = lambda a: np.take_along_axis(a, order, axis=1)   # noqa: E731
    valid = np.arange(k)[None, :] < nst[:, None]
    st_res = np.where(valid, take(res), -1)
    st_svc = np.where(valid, take(svc), 0).astype(np.int64)
    st_lat = np.where(valid, take(tot_lat), 0).astype(np.int64)
    if mark_col is None:
        mark = np.full(f, -1, np.int32)
        mark_off = np.zeros(f, np.int64)
    else:
        own = owner[:, mark_col]
        if np.any(own < 0):
            raise ValueError("store issue before any resource stage")
        mark = (np.cumsum(keep, axis=1)[np.arange(f), own] - 1).astype(np.int32)
        # arrival at mark_col = start(owner) + svc(owner) + lat(owner) + pure stages in between
        between = np.where((idx > own[:, None]) & (idx < mark_col) & ~keep, svc + lat, 0).sum(axis=1)
        mark_off = (svc[np.arange(f), own] + lat[np.arange(f), own] + between).astype(np.int64)
    return st_res, st_svc, st_lat, nst, mark, mark_off


def _pad(a, k, fill):
    if a.shape[1] >= k:
        return a
    return np.concatenate([a, np.full((a.shape[0], k - a.shape[1]), fill, a.dtype)], axis=1)


def issue_order(issuer, phase, tb, step, flits):
    """Global flit order (docs/model.md, "Issue"), vectorized.

    Inputs are per flow (``[L]``); returns ``(flit_flow [N], order keys)``
    where ``flit_flow`` lists the flow of every flit in global flit id order:
    sorted by issuer, then phase, then round-robin over the issuer's
    threadblocks (by tb id) of each threadblock's own sequence, which is step
    order and, inside a step, round-robin over the step's flows in row order.
    """
    flits = np.asarray(flits, dtype=np.int64)
    n = int(flits.sum())
    flow = np.repeat(np.arange(flits.shape[0], dtype=np.int64), flits)
    start = np.cumsum(flits) - flits
    j = np.arange(n, dtype=np.int64) - start[flow]                 # flit index inside its flow
    issuer, phase, tb, step = (np.asarray(a, dtype=np.int64)[flow] for a in (issuer, phase, tb, step))
    pos = flow                                                     # row order breaks RR ties
    # threadblock sequence: (issuer, phase, tb) groups ordered by (step, j, row)
    o1 = np.lexsort((pos, j, step, tb, phase, issuer))
    g_key = np.stack([issuer[o1], phase[o1], tb[o1]], axis=1)
    new = np.ones(n, bool)
    if n > 1:
        new[1:] = np.any(g_key[1:] != g_key[:-1], axis=1)
    grp_start = np.maximum.accumulate(np.where(new, np.arange(n), 0))
    q = np.empty(n, np.int64)
    q[o1] = np.arange(n) - grp_start                               # position in the tb sequence
    o2 = np.lexsort((tb, q, phase, issuer))
    return flow[o2].astype(np.int32)


def _dummy(system, **cols):
    """Representative flows (GPU 0 -> GPU 1) whose stage rows give the segment rows."""
    n = np.shape(next(iter(cols.values())))[0]
    base = dict(src_gpu=np.zeros(n, np.int32), dst_gpu=np.ones(n, np.int32), cu=np.zeros(n, np.int32),
                read_stack=np.zeros(n, np.int32), port=np.zeros(n, np.int32),
                dst_stack=np.zeros(n, np.int32), flits=np.ones(n))
    base.update(cols)
    return make_traffic(system, **base)


_flow_stages_jit = None


def _stage_rows(system: System, cols: dict):
    """``path.flow_stages`` of representative flows, jitted and padded to a power-of-two
    row count so that repeated compiles reuse a handful of shapes."""
    global _flow_stages_jit
    if _flow_stages_jit is None:
        import jax
        _flow_stages_jit = jax.jit(path.flow_stages)
    n = np.shape(next(iter(cols.values())))[0]
    m = 1 << max(4, int(n - 1).bit_length())
    padded = {k: np.concatenate([np.asarray(v), np.zeros(m - n, np.asarray(v).dtype)]) for k, v in cols.items()}
    st = _flow_stages_jit(system, _dummy(system, **padded))
    return tuple(np.asarray(a)[:n] for a in st)


def _segments_of_traffic(system: System, t: Traffic):
    """Segment rows (A read, B to-port, C egress, D ingress, E delivery) and each flow's rows.

    Rows come from :func:`nuna_jax.path.flow_stages` of representative flows
    (GPU 0 -> GPU 1, one per distinct key), cut at the leg boundaries of
    docs/model.md, so they are the path's own numbers; a flow's stage list is
    A + B + C + D + E (B empty when its CU sits on its port's router).
    """
    sl = path.stage_slices(system)
    lay = path.resource_layout(system)
    # stacks enter as endpoints (stack channel: its router), e = stack * k + channel
    k = system.hbm_routers_per_stack
    ns, npt = geo.n_hbm_endpoints(system), system.n_io_ports
    cu = np.asarray(t.cu, np.int64)
    rs = geo.hbm_endpoint(system, np.asarray(t.read_stack, np.int64), np.asarray(t.read_channel, np.int64))
    pt = np.asarray(t.port, np.int64)
    ds = geo.hbm_endpoint(system, np.asarray(t.dst_stack, np.int64), np.asarray(t.dst_channel, np.int64))
    ua, inv_a = np.unique(cu * ns + rs, return_inverse=True)
    ub, inv_b = np.unique(cu * npt + pt, return_inverse=True)
    uc, inv_c = np.unique(pt, return_inverse=True)
    ue, inv_e = np.unique(pt * ns + ds, return_inverse=True)
    # one table of representative flows: the A keys, then B, then C (= D), then E
    z = lambda u: np.zeros(u.shape[0], np.int64)  # noqa: E731
    cols = {"cu": np.concatenate([ua // ns, ub // npt, z(uc), z(ue)]),
            "read_stack": np.concatenate([ua % ns // k, z(ub), z(uc), z(ue)]),
            "read_channel": np.concatenate([ua % ns % k, z(ub), z(uc), z(ue)]),
            "port": np.concatenate([z(ua), ub % npt, uc, ue // ns]),
            "dst_stack": np.concatenate([z(ua), z(ub), z(uc), ue % ns // k]),
            "dst_channel": np.concatenate([z(ua), z(ub), z(uc), ue % ns % k])}
    res_all, svc_all, lat_all = _stage_rows(system, cols)
    r0 = np.cumsum([0, ua.shape[0], ub.shape[0], uc.shape[0], ue.shape[0]])
    blocks = []

    def block(k, c0, c1, dst_side, mark_col=None):
        rows = slice(r0[k], r0[k + 1])
        res = res_all[rows, c0:c1].astype(np.int64)
        if dst_side:
            res = np.where(res >= 0, res - lay.per_gpu, -1)
        blocks.append(_compress(res, svc_all[rows, c0:c1], lat_all[rows, c0:c1],
                                None if mark_col is None else mark_col - c0))

    block(0, sl.read_side.start, sl.read_side.stop, False, sl.store_issue.start)  # A: issue .. store issue
    block(1, sl.store.start, sl.store.stop, False)                                # B: store links CU -> port
    block(2, sl.egress.start, sl.egress.stop, False)                              # C: egress port (src GPU)
    block(2, sl.ingress.start, sl.ingress.stop, True)                             # D: ingress port (dst GPU)
    block(3, sl.deliver_side.start, sl.deliver_side.stop, True)                   # E: delivery + HBM write
    invs = [inv_a.reshape(-1), inv_b.reshape(-1), inv_c.reshape(-1), inv_c.reshape(-1), inv_e.reshape(-1)]
    src = np.asarray(t.src_gpu, np.int64) * lay.per_gpu
    dst = np.asarray(t.dst_gpu, np.int64) * lay.per_gpu
    return blocks, invs, [src, src, src, dst, dst]


def _background_part(system: System, background, traffic_issuers, lay):
    """Segment rows of the background flows (one per distinct (kind, CU, stack)), each flow's row
    and GPU offset, and its (flits, issuer, phase -1, tb, step) columns.  ``ValueError`` if a
    background flow shares a CU with the traffic."""
    from .background import Background, background_stages
    bflits = np.asarray(background.flits, np.int64)
    biss = np.asarray(background.gpu, np.int64) * system.n_cus + np.asarray(background.cu, np.int64)
    clash = sorted(set(np.unique(biss[bflits > 0]).tolist()) & set(np.unique(traffic_issuers).tolist()))
    if clash:
        raise ValueError(f"background flows share CU(s) with the traffic (global CU ids {clash[:5]}...); "
                         "put background threadblocks on CUs the collective does not use")
    n_ch, n_ep = system.hbm_routers_per_stack, geo.n_hbm_endpoints(system)
    ep = geo.hbm_endpoint(system, np.asarray(background.stack, np.int64), np.asarray(background.channel, np.int64))
    key = (np.asarray(background.kind, np.int64) * system.n_cus + np.asarray(background.cu, np.int64)) * n_ep + ep
    u, bg_inv = np.unique(key, return_inverse=True)
    z = np.zeros(u.shape[0], np.int64)
    rep = Background(gpu=z, cu=(u // n_ep) % system.n_cus, stack=u % n_ep // n_ch, channel=u % n_ch,
                     kind=u // (n_ep * system.n_cus), flits=z + 1, tb=z, step=z)
    bres, bsvc, blat = (np.asarray(a) for a in background_stages(system, rep))
    cols = (bflits, biss, np.full(bflits.shape, -1, np.int64), np.asarray(background.tb, np.int64),
            np.asarray(background.step, np.int64))
    return (_compress(bres, bsvc, blat, None), bg_inv.reshape(-1),
            np.asarray(background.gpu, np.int64) * lay.per_gpu, cols)


def compile_program(system: System, traffic: Traffic, background=None) -> Program:
    """Build the integer-ps flit program of ``traffic`` (+ optional background).

    ``traffic`` must be hard (whole flits per flow).  ``background`` is a
    :class:`nuna_jax.sim.background.Background` of on-chip flows (NUNA section
    6.6's concurrent GEMM); its flits join no phase.  Raises ``ValueError``.
    """
    t = traffic.numpy()
    validate(system, t)
    if not t.is_hard:
        raise ValueError("Traffic.flits must be whole numbers and Traffic.weight 1 to simulate (soft "
                         "traffic is for the analytical model only)")
    lay = path.resource_layout(system)
    blocks, invs, offs = [], [], []
    if t.n_flows:
        blocks, invs, offs = _segments_of_traffic(system, t)
    flits = np.asarray(t.flits).astype(np.int64)
    issuer = np.asarray(t.src_gpu, np.int64) * system.n_cus + np.asarray(t.cu, np.int64)
    ph_vals = np.unique(np.asarray(t.phase)[flits > 0])
    phase = np.searchsorted(ph_vals, np.asarray(t.phase)).astype(np.int64)
    tb = np.asarray(t.tb, np.int64)
    step = np.asarray(t.step, np.int64)
    n_traffic = t.n_flows
    bg_inv = bg_off = None
    if background is not None and background.n_flows:
        block, bg_inv, bg_off, cols = _background_part(system, background, issuer[flits > 0], lay)
        blocks.append(block)
        flits, issuer, phase, tb, step = (np.concatenate([a, b]) for a, b in
                                          zip((flits, issuer, phase, tb, step), cols))

    # one segment table
    w = max([b[0].shape[1] for b in blocks] + [1])
    padw = lambda a, fill: np.pad(a, ((0, 0), (0, w - a.shape[1])), constant_values=fill)  # noqa: E731
    starts = np.cumsum([0] + [b[0].shape[0] for b in blocks])
    seg_res = np.concatenate([padw(b[0], -1) for b in blocks] or [np.full((0, w), -1)]).astype(np.int32)
    seg_svc = np.concatenate([padw(b[1], 0) for b in blocks] or [np.zeros((0, w))]).astype(np.int64)
    seg_lat = np.concatenate([padw(b[2], 0) for b in blocks] or [np.zeros((0, w))]).astype(np.int64)
    seg_len = np.concatenate([b[3] for b in blocks] or [np.zeros(0)]).astype(np.int32)
    seg_mark = np.concatenate([b[4] for b in blocks] or [np.zeros(0)]).astype(np.int32)
    seg_mark_off = np.concatenate([b[5] for b in blocks] or [np.zeros(0)]).astype(np.int64)

    n_all = flits.shape[0]
    flow_seg = np.full((n_all, MAX_SEG), -1, np.int64)
    flow_off = np.zeros((n_all, MAX_SEG), np.int64)
    if n_traffic:
        for q in range(5):
            flow_seg[:n_traffic, q] = starts[q] + invs[q]
            flow_off[:n_traffic, q] = offs[q]
    if bg_inv is not None:
        flow_seg[n_traffic:, 0] = starts[len(blocks) - 1] + bg_inv
        flow_off[n_traffic:, 0] = bg_off
    valid = flow_seg >= 0
    valid[valid] = seg_len[flow_seg[valid]] > 0                      # an empty leg is skipped
    order = np.argsort(~valid, axis=1, kind="stable")
    flow_seg = np.where(np.take_along_axis(valid, order, 1), np.take_along_axis(flow_seg, order, 1), -1)
    flow_off = np.where(flow_seg >= 0, np.take_along_axis(flow_off, order, 1), 0)
    flow_nseg = valid.sum(axis=1).astype(np.int32)

    flit_flow = issue_order(issuer, phase, tb, step, flits)
    flit_issuer_g = issuer[flit_flow]
    uniq, first = np.unique(flit_issuer_g, return_index=True)
    n = flit_flow.shape[0]
    iss_start = first.astype(np.int64)
    iss_end = np.append(first[1:], n).astype(np.int64)
    flit_issuer = np.repeat(np.arange(uniq.shape[0], dtype=np.int32), iss_end - iss_start)
    gpu, cu = uniq // system.n_cus, uniq % system.n_cus
    iss_res = (gpu * lay.per_gpu + lay.offset_cu + cu).astype(np.int32)
    flit_phase = phase[flit_flow].astype(np.int32)
    phase_total = np.bincount(flit_phase[flit_phase >= 0], minlength=ph_vals.shape[0]).astype(np.int64)
    if seg_len.size and int(seg_len.max()) >= 1 << 16:
        raise ValueError("a path segment longer than 65535 stages")
    return Program(seg_res, seg_svc, seg_lat, seg_len, seg_mark, seg_mark_off,
                   flow_seg.astype(np.int32), flow_off.astype(np.int32), flow_nseg,
                   flit_flow, flit_phase, flit_issuer, iss_start, iss_end, iss_res,
                   phase_total, int(system.max_outstanding_per_cu), int(lay.n_resources), n_traffic)
