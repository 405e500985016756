"""Compile a ``Traffic`` (plus optional on-chip background flows) into a flit program.

A *program* is everything the simulator engines need, in integer picoseconds
and plain numpy arrays (docs/simulator.md):

* the stage table of every flow, from :func:`nuna_jax.path.flow_stages` (the
  single definition of a flit's path, docs/model.md), rounded to integer ps
  and *compressed*: padding stages are dropped and every pure-latency stage
  (no resource) is folded into the latency of the resource stage before it,
  which changes no flit's timing (such a stage meets no other flit);
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

from .. import path
from ..models import mesh
from ..system import System
from ..traffic import Traffic, validate

__all__ = ["Program", "compile_program", "to_ps", "issue_order", "PS_PER_NS"]

PS_PER_NS = 1000


class Program(NamedTuple):
    """Integer-ps flit program (numpy).  ``N`` flits, ``L`` flows, ``I`` issuers.

    Flow level (rows: the traffic's flows, then background flows):
      st_res [L, K] int32   resource of each compressed stage (-1 past ``nst``)
      st_svc [L, K] int64   service time, ps (>= 1 on a resource)
      st_lat [L, K] int64   latency after service, ps (folded pure-latency stages included)
      nst    [L]    int32   number of compressed stages; stage 0 is the CU issue
      mark_stage [L] int32  compressed stage after whose service the store is issued (-1: none)
      mark_off   [L] int64  store issue = start of ``mark_stage`` + mark_off, ps
    Flit level, in global flit id order (= issue order, CU by CU):
      flit_flow  [N] int32  flow row of each flit
      flit_phase [N] int32  dense phase index, -1 for background flits (no barrier)
      flit_issuer[N] int32  issuer (CU) index of each flit
    Issuer level (one per CU that issues anything):
      iss_start, iss_end [I] int64  the issuer's flits are ids ``[start, end)``
      iss_res   [I] int32  global resource id of the CU (stage-0 resource)
    phase_total [P] int64   flits per phase
    window int              outstanding flits per issuer (max_outstanding_per_cu)
    n_resources int         global resource count (path.resource_layout)
    n_traffic_flows int     rows ``< n_traffic_flows`` come from the Traffic
    """

    st_res: Any
    st_svc: Any
    st_lat: Any
    nst: Any
    mark_stage: Any
    mark_off: Any
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


def to_ps(x_ns) -> np.ndarray:
    """ns (float) -> integer ps, rounded to nearest (ties to even), int64."""
    return np.rint(np.asarray(x_ns, dtype=np.float64) * PS_PER_NS).astype(np.int64)


def _compress(res, svc_ns, lat_ns, mark_col):
    """Drop padding / fold pure-latency stages into the resource stage before them.

    ``mark_col`` (int or None): index of the uncompressed stage whose *arrival*
    is the store issue; the returned mark points at the resource stage before it.
    """
    res = np.asarray(res, dtype=np.int32)
    svc = to_ps(svc_ns)
    lat = to_ps(lat_ns)
    f, s = res.shape
    keep = res >= 0
    if f and not np.all(keep[:, 0]):
        raise ValueError("every flow's stage 0 must be its CU issue (a resource)")
    svc = np.where(keep, np.maximum(svc, 1), svc)          # a resource is busy >= 1 ps
    idx = np.broadcast_to(np.arange(s), (f, s))
    owner = np.maximum.accumulate(np.where(keep, idx, -1), axis=1)  # resource stage owning each stage
    extra = np.where(keep, lat, svc + lat)                  # time added to the owner's latency
    tot_lat = np.zeros((f, s), np.int64)
    rows = np.broadcast_to(np.arange(f)[:, None], (f, s))
    np.add.at(tot_lat, (rows, owner), extra)
    nst = keep.sum(axis=1).astype(np.int32)
    order = np.argsort(~keep, axis=1, kind="stable")        # kept stages first, in order
    k = int(nst.max()) if f else 1
    order = order[:, :k]
    take = lambda a: np.take_along_axis(a, order, axis=1)   # noqa: E731
    valid = np.arange(k)[None, :] < nst[:, None]
    st_res = np.where(valid, take(res), -1).astype(np.int32)
    st_svc = np.where(valid, take(svc), 0).astype(np.int64)
    st_lat = np.where(valid, take(tot_lat), 0).astype(np.int64)
    if mark_col is None:
        mark_stage = np.full(f, -1, np.int32)
        mark_off = np.zeros(f, np.int64)
    else:
        own = owner[:, mark_col]                            # uncompressed owner of the mark
        mark_stage = (np.cumsum(keep, axis=1)[np.arange(f), own] - 1).astype(np.int32)
        # arrival at mark_col = start(owner) + svc(owner) + lat(owner) + pure stages in between
        between = np.where((idx > own[:, None]) & (idx < mark_col) & ~keep, svc + lat, 0).sum(axis=1)
        mark_off = (svc[np.arange(f), own] + lat[np.arange(f), own] + between).astype(np.int64)
    return st_res, st_svc, st_lat, nst, mark_stage, mark_off


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


def compile_program(system: System, traffic: Traffic, background=None) -> Program:
    """Build the integer-ps flit program of ``traffic`` (+ optional background).

    ``traffic`` must be hard (whole flits per flow).  ``background`` is a
    :class:`nuna_jax.sim.background.Background` of on-chip flows (NUNA section
    6.6's concurrent GEMM); its flits join no phase.  Raises ``ValueError``.
    """
    t = traffic.numpy()
    validate(system, t)
    if not t.is_hard:
        raise ValueError("Traffic.flits must be whole numbers to simulate (soft traffic is for the "
                         "analytical model only)")
    lay = path.resource_layout(system)
    st = path.flow_stages(system, t)
    h = mesh.max_hops(system)
    store_col = h + 2                                  # "store_issue" (path.stage_names)
    parts = [_compress(np.asarray(st.resource), np.asarray(st.service_ns), np.asarray(st.latency_ns),
                       store_col)]
    flits = np.asarray(t.flits).astype(np.int64)
    issuer = np.asarray(t.src_gpu, np.int64) * system.n_cus + np.asarray(t.cu, np.int64)
    ph_vals = np.unique(np.asarray(t.phase)[flits > 0])
    phase = np.searchsorted(ph_vals, np.asarray(t.phase)).astype(np.int64)
    tb = np.asarray(t.tb, np.int64)
    step = np.asarray(t.step, np.int64)
    n_traffic = t.n_flows
    if background is not None and background.n_flows:
        from .background import background_stages
        bres, bsvc, blat = background_stages(system, background)
        parts.append(_compress(bres, bsvc, blat, None))
        bflits = np.asarray(background.flits, np.int64)
        biss = np.asarray(background.gpu, np.int64) * system.n_cus + np.asarray(background.cu, np.int64)
        coll_iss = set(np.unique(issuer[flits > 0]).tolist())
        clash = sorted(set(np.unique(biss[bflits > 0]).tolist()) & coll_iss)
        if clash:
            raise ValueError(f"background flows share CU(s) with the traffic (global CU ids {clash[:5]}...); "
                             "put background threadblocks on CUs the collective does not use")
        flits = np.concatenate([flits, bflits])
        issuer = np.concatenate([issuer, biss])
        phase = np.concatenate([phase, np.full(bflits.shape, -1, np.int64)])
        tb = np.concatenate([tb, np.asarray(background.tb, np.int64)])
        step = np.concatenate([step, np.asarray(background.step, np.int64)])
    k = max(p[0].shape[1] for p in parts)
    st_res = np.concatenate([_pad(p[0], k, -1) for p in parts])
    st_svc = np.concatenate([_pad(p[1], k, 0) for p in parts])
    st_lat = np.concatenate([_pad(p[2], k, 0) for p in parts])
    nst = np.concatenate([p[3] for p in parts])
    mark_stage = np.concatenate([p[4] for p in parts])
    mark_off = np.concatenate([p[5] for p in parts])

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
    return Program(st_res, st_svc, st_lat, nst, mark_stage, mark_off,
                   flit_flow, flit_phase, flit_issuer, iss_start, iss_end, iss_res,
                   phase_total, int(system.max_outstanding_per_cu), int(lay.n_resources), n_traffic)
