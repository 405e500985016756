"""The reference simulator: a plain event loop, written for obviousness, not speed.

It walks every stage of :func:`nuna_jax.path.flow_stages` (no compression),
builds the issue order with plain Python loops, keeps its events in
``heapq`` as ``(time_ps, kind, id)`` tuples (kind 0 = a flit, 1 = a CU that
may issue) and records the full per-stage trace, so that tests can check
the FCFS rule on every resource directly (:func:`check_fcfs`).  Semantics:
docs/model.md and docs/simulator.md.  Fine for a few thousand flits.
"""

from __future__ import annotations

import heapq
import time

import numpy as np

from .. import path
from ..system import System
from ..traffic import Traffic, validate
from .fast import check_complete
from .program import to_ps
from .result import SimResult, SimulationError

__all__ = ["run_reference", "reference_issue_order", "check_fcfs"]


def reference_issue_order(issuer, phase, tb, step, flits) -> list[int]:
    """Flow of every flit in global flit id order, by nested loops (docs/model.md, "Issue")."""
    rows = [r for r in range(len(flits)) if int(flits[r]) > 0]
    out: list[int] = []
    for c in sorted({int(issuer[r]) for r in rows}):
        mine = [r for r in rows if int(issuer[r]) == c]
        for ph in sorted({int(phase[r]) for r in mine}):
            seqs = []
            for b in sorted({int(tb[r]) for r in mine if int(phase[r]) == ph}):
                seq = []
                flows_b = [r for r in mine if int(phase[r]) == ph and int(tb[r]) == b]
                for s in sorted({int(step[r]) for r in flows_b}):
                    left = {r: int(flits[r]) for r in flows_b if int(step[r]) == s}
                    order = [r for r in flows_b if int(step[r]) == s]   # row order
                    while any(left.values()):
                        for r in order:                                # one flit each, round-robin
                            if left[r]:
                                seq.append(r)
                                left[r] -= 1
                seqs.append(seq)
            q = 0
            while any(q < len(sq) for sq in seqs):                     # threadblocks take turns
                for sq in seqs:
                    if q < len(sq):
                        out.append(sq[q])
                q += 1
    return out


def _tables(system: System, traffic: Traffic, background):
    st = path.flow_stages(system, traffic)
    res, svc, lat = (np.asarray(a) for a in st)
    store_col = np.full(res.shape[0], path.stage_slices(system).store_issue.start)
    if background is not None and background.n_flows:
        from .background import background_stages
        bres, bsvc, blat = (np.asarray(a) for a in background_stages(system, background))
        w = max(res.shape[1], bres.shape[1])
        padw = lambda a, fill: np.pad(a, ((0, 0), (0, w - a.shape[1])), constant_values=fill)  # noqa: E731
        res = np.concatenate([padw(res, -1), padw(bres, -1)])
        svc = np.concatenate([padw(svc, 0.0), padw(bsvc, 0.0)])
        lat = np.concatenate([padw(lat, 0.0), padw(blat, 0.0)])
        store_col = np.concatenate([store_col, np.full(bres.shape[0], -1)])
    svc_ps, lat_ps = to_ps(svc), to_ps(lat)
    svc_ps = np.where(res >= 0, np.maximum(svc_ps, 1), svc_ps)
    return res, svc_ps, lat_ps, store_col


def _flow_lists(system: System, t: Traffic, background):
    """Per flow (traffic, then background) as plain lists: flits, issuing CU (``gpu * n_cus + cu``),
    phase (renumbered 0.. over phases with flits; background -1), tb, step; and the phase count."""
    flits = [int(x) for x in np.asarray(t.flits)]
    iss = [int(g) * system.n_cus + int(c) for g, c in zip(t.src_gpu, t.cu)]
    ph_vals = sorted({int(p) for p, f in zip(t.phase, flits) if f > 0})
    phase = [ph_vals.index(int(p)) if int(p) in ph_vals else 0 for p in t.phase]
    tb, step = [int(x) for x in t.tb], [int(x) for x in t.step]
    if background is not None and background.n_flows:
        flits += [int(x) for x in background.flits]
        iss += [int(g) * system.n_cus + int(c) for g, c in zip(background.gpu, background.cu)]
        phase += [-1] * background.n_flows
        tb += [int(x) for x in background.tb]
        step += [int(x) for x in background.step]
    return flits, iss, phase, tb, step, len(ph_vals)


class IssueState:
    """The issue bookkeeping of docs/model.md ("Issue"), shared by the two reference loops: each CU's
    static sequence (global flit ids), its outstanding-request window and the phase barriers."""

    def __init__(self, order, iss, phase, n_ph, window):
        n = len(order)
        self.order, self.iss, self.phase, self.window = order, iss, phase, window
        self.issuers = sorted({iss[r] for r in order})
        self.seq = {c: [f for f in range(n) if iss[order[f]] == c] for c in self.issuers}
        self.phase_left = [sum(1 for f in range(n) if phase[order[f]] == p) for p in range(n_ph)]
        self.phase_open = [p == 0 for p in range(n_ph)]
        self.ptr = {c: 0 for c in self.issuers}
        self.outstanding = {c: 0 for c in self.issuers}
        self.waiting = {c: None for c in self.issuers}

    def next_flit(self, c):
        """The flit CU ``c`` issues next if it may now, else None (waiting for a phase or a window slot)."""
        if self.ptr[c] >= len(self.seq[c]):
            return None
        f = self.seq[c][self.ptr[c]]
        p = self.phase[self.order[f]]
        if p >= 0 and not self.phase_open[p]:
            self.waiting[c] = "phase"
            return None
        if self.outstanding[c] >= self.window:
            self.waiting[c] = "window"
            return None
        return f

    def issued(self, c):
        self.ptr[c] += 1
        self.outstanding[c] += 1

    def delivered(self, f) -> list:
        """Flit ``f`` is delivered: free its window slot, count its phase; the CUs that may issue again."""
        row = self.order[f]
        c = self.iss[row]
        self.outstanding[c] -= 1
        wake = []
        if self.waiting[c] == "window":
            self.waiting[c] = None
            wake.append(c)
        p = self.phase[row]
        if p >= 0:
            self.phase_left[p] -= 1
            if self.phase_left[p] == 0 and p + 1 < len(self.phase_open):
                self.phase_open[p + 1] = True
                for cj in self.issuers:
                    if self.waiting[cj] == "phase":
                        self.waiting[cj] = None
                        wake.append(cj)
        return wake


def run_reference(system: System, traffic: Traffic, background=None, *, max_time_ps=None,
                  return_trace=False, trace_services: int = 0):
    """Simulate ``traffic`` (+ background) event by event.

    Returns a :class:`SimResult`; with ``return_trace`` also a dict of
    ``start_ps [N, S]`` (service start per stage, -1 where no resource),
    ``arrive_ps [N, S]`` and the stage tables, for :func:`check_fcfs`.
    ``trace_services > 0``: ``result.trace`` holds the earliest that many services as
    :func:`nuna_jax.sim.fast.run_fast` records them (for :mod:`nuna_jax.sim.trace`).
    """
    t0 = time.perf_counter()
    t = traffic.numpy()
    validate(system, t)
    if not t.is_hard:
        raise ValueError("Traffic.flits must be whole numbers and Traffic.weight 1 to simulate")
    # one plain event loop, kept whole on purpose: it is the readable reference the compiled
    # engine is checked against (docs/simulator.md)
    res, svc, lat, store_col = _tables(system, t, background)
    n_s = res.shape[1]
    flits, iss, phase, tb, step, n_ph = _flow_lists(system, t, background)
    order = reference_issue_order(iss, phase, tb, step, flits)
    n = len(order)
    cus = IssueState(order, iss, phase, n_ph, system.max_outstanding_per_cu)
    issuers = cus.issuers
    bound = float("inf") if max_time_ps is None else int(max_time_ps)

    free: dict[int, int] = {}
    busy = np.zeros(path.resource_layout(system).n_resources, np.int64)
    start = np.full((n, n_s), -1, np.int64)
    arrive = np.full((n, n_s), -1, np.int64)
    issue = np.full(n, -1, np.int64)
    deliver = np.full(n, -1, np.int64)
    store = np.full(n, -1, np.int64)
    events = [(0, 1, k, None) for k in range(len(issuers))]
    heapq.heapify(events)
    injected = delivered = hops = 0
    t_loop = time.perf_counter()

    def advance(f, k, tarr):
        """Flit f reaches stage k at tarr: pass pure-latency stages, queue at the next resource."""
        row = order[f]
        while k < n_s and res[row, k] < 0:
            arrive[f, k] = tarr
            if k == store_col[row]:
                store[f] = tarr
            tarr = tarr + svc[row, k] + lat[row, k]
            k += 1
        if tarr > bound:
            raise SimulationError(f"simulation could not finish within the time bound ({bound} ps)")
        heapq.heappush(events, (tarr, 0, f, k))             # k == n_s: delivery

    while events:
        now, kind, ident, k = heapq.heappop(events)
        if kind == 1:                                       # CU number ident may issue
            c = issuers[ident]
            f = cus.next_flit(c)
            if f is None:
                continue
            cus.issued(c)
            injected += 1
            row = order[f]
            r = int(res[row, 0])
            assert free.get(r, 0) <= now, "a CU issues one flit at a time"
            issue[f] = arrive[f, 0] = start[f, 0] = now
            free[r] = now + svc[row, 0]
            busy[r] += svc[row, 0]
            hops += 1
            heapq.heappush(events, (now + svc[row, 0], 1, ident, None))
            advance(f, 1, now + svc[row, 0] + lat[row, 0])
            continue
        f, row = ident, order[ident]
        if k == n_s:                                        # delivered
            deliver[f] = now
            delivered += 1
            for cj in cus.delivered(f):
                heapq.heappush(events, (now, 1, issuers.index(cj), None))
            continue
        r = int(res[row, k])
        arrive[f, k] = now
        s0 = max(now, free.get(r, 0))                       # FCFS: served in pop order
        start[f, k] = s0
        free[r] = s0 + svc[row, k]
        busy[r] += svc[row, k]
        hops += 1
        advance(f, k + 1, s0 + svc[row, k] + lat[row, k])

    loop_s = time.perf_counter() - t_loop
    check_complete(injected, delivered, n, deliver)
    out = SimResult(int(deliver.max()) if n else 0, issue, deliver, store,
                    np.asarray(order, np.int32), busy, injected, delivered, hops, t.n_flows,
                    "reference", time.perf_counter() - t0, True, loop_s,
                    _services(start, res, svc, order, int(trace_services)) if trace_services > 0 else None)
    if not return_trace:
        return out
    return out, {"start_ps": start, "arrive_ps": arrive, "flow": np.asarray(order),
                 "resource": res, "service_ps": svc}


def _services(start, res, svc, order, cap: int) -> dict:
    """Every service of the run as ``(flit, resource, start_ps, service_ps)``, earliest first, at most ``cap``
    (the trace layout of :func:`nuna_jax.sim.fast.run_fast`)."""
    rows = np.asarray(order, np.int64)
    r_all = np.asarray(res)[rows]                               # [N, S] global resource of each stage
    f_idx, k_idx = np.nonzero((r_all >= 0) & (start >= 0))
    st = start[f_idx, k_idx]
    o = np.argsort(st, kind="stable")
    f_idx, k_idx, st = f_idx[o], k_idx[o], st[o]
    cut = None
    if st.shape[0] > cap:
        cut = int(st[cap])
        keep = st < cut
        f_idx, k_idx, st = f_idx[keep], k_idx[keep], st[keep]
    return {"flit": f_idx.astype(np.int64), "resource": r_all[f_idx, k_idx].astype(np.int64),
            "start_ps": st.astype(np.int64), "service_ps": np.asarray(svc)[rows][f_idx, k_idx].astype(np.int64),
            "complete_before_ps": cut}


def check_fcfs(trace) -> None:
    """Assert the FCFS rule on every resource of a reference trace (AssertionError if not).

    For each resource, order its services by (arrival, global flit id); then
    every service must start at ``max(arrival, previous end)``: no overlap,
    no idle time while a flit waits, and the stated tie-break.
    """
    start, arrive, flow = trace["start_ps"], trace["arrive_ps"], trace["flow"]
    res, svc = trace["resource"], trace["service_ps"]
    rec = {}
    n, s = start.shape
    for f in range(n):
        for k in range(s):
            r = int(res[flow[f], k])
            if r < 0:
                continue
            # the CU stage is the issue: its "arrival" is the issue itself
            rec.setdefault(r, []).append((int(arrive[f, k]), f, int(start[f, k]), int(svc[flow[f], k])))
    for r, lst in rec.items():
        lst.sort()
        end = None
        for a, f, st, sv in lst:
            expect = a if end is None else max(a, end)
            assert st == expect, f"resource {r}: flit {f} arrived {a} started {st}, FCFS expects {expect}"
            end = st + sv
