"""The reference engine of credit flow control: a plain event loop, written for obviousness.

Semantics (docs/simulator.md, "Credit flow control"; the buffer rules are :mod:`.flow_control`'s):

* A flit waiting for resource ``R`` is a *candidate* of ``R`` once it has arrived there and is the
  head of the virtual channel (VC) it occupies (or occupies none).  When ``R`` is free it serves,
  among its candidates whose stage's output buffer has a VC with a credit (or that need none), the
  oldest: lowest ``(arrival time, global flit id)``.  Starting that service the flit takes one
  credit of the VC with the most credits (the lowest-numbered of those; wormhole with one-flit packets: the flit is the packet),
  leaves the VC it held, whose credit reaches the sender ``credit_delay`` later, and makes the
  flit behind it in that VC a candidate of its own next resource.
* A CU issues as in docs/model.md (its issue stage free, window, phase barrier) and, when its
  flit goes straight onto the mesh, only with a credit of its injection buffer.
* Events ``(time, kind, ...)``: kind 0 (an arrival, a delivery, a credit return) only change
  state, and commute; kind 1 (``R`` may start a service; for a CU: may issue) then run in
  resource-id order.  Both engines follow this order, so they agree exactly.
"""

from __future__ import annotations

import heapq
import time
from collections import deque

import numpy as np

from .. import path
from ..system import System
from ..traffic import Traffic, validate
from .fast import check_complete
from .flow_control import (KIND_LINK, N_CLASSES, FlowControl, credit_delay_ps, link_latency_delta_ps,
                           out_buffers, resource_kinds, stage_classes)
from .reference import IssueState, _flow_lists, _tables, reference_issue_order
from .result import SimResult, SimulationError

__all__ = ["run_reference_credit"]


def run_reference_credit(system: System, traffic: Traffic, background=None, fc: FlowControl | None = None, *,
                         max_time_ps=None) -> SimResult:
    """Simulate ``traffic`` (+ background) with credit flow control ``fc``, event by event."""
    t0 = time.perf_counter()
    fc = fc or FlowControl(mode="credit")
    t = traffic.numpy()
    validate(system, t)
    if not t.is_hard:
        raise ValueError("Traffic.flits must be whole numbers and Traffic.weight 1 to simulate")
    lay = path.resource_layout(system)
    res, svc, lat, store_col = _tables(system, t, background)
    n_s = res.shape[1]
    kind_tab = resource_kinds(lay, res)
    lat = lat + np.where(kind_tab == KIND_LINK, link_latency_delta_ps(system, fc), 0)
    cd = credit_delay_ps(system, fc)
    # per flow row: class and output buffer of every column holding a resource
    cls_tab, buf_tab = {}, {}
    for row in range(res.shape[0]):
        cols = [k for k in range(n_s) if res[row, k] >= 0]
        kinds = [int(kind_tab[row, k]) for k in cols]
        mark = sum(1 for k in cols if k < store_col[row]) - 1 if store_col[row] >= 0 else -1
        for k, c, b in zip(cols, stage_classes(kinds, mark), out_buffers(kinds, fc)):
            cls_tab[row, k], buf_tab[row, k] = c, b
    flits, iss, phase, tb, step, n_ph = _flow_lists(system, t, background)
    order = reference_issue_order(iss, phase, tb, step, flits)
    n = len(order)
    cus = IssueState(order, iss, phase, n_ph, system.max_outstanding_per_cu)
    cu_res = {c: (c // system.n_cus) * lay.per_gpu + lay.offset_cu + c % system.n_cus for c in cus.issuers}
    issuer_of = {r: c for c, r in cu_res.items()}
    bound = float("inf") if max_time_ps is None else int(max_time_ps)

    free: dict[int, int] = {}
    busy = np.zeros(lay.n_resources, np.int64)
    issue = np.full(n, -1, np.int64)
    deliver = np.full(n, -1, np.int64)
    store = np.full(n, -1, np.int64)
    cand: dict[int, list] = {}              # resource -> [(arrival, flit)]: its candidates
    credits: dict[tuple, int] = {}          # (buffer, vc) -> credits at the sender
    depth_of: dict[tuple, int] = {}         # (buffer, vc) -> its depth
    fifo: dict[tuple, deque] = {}           # (buffer, vc) -> flits in it, in the order they took credits
    held = [None] * n                       # (buffer, vc) each flit occupies
    at = [-1] * n                           # column each flit waits at (-1: in transit)
    arrived = [-1] * n                      # its arrival time there
    injected = delivered = hops = 0
    events = [(0, 1, cu_res[c]) for c in cus.issuers]
    heapq.heapify(events)

    def may_start(r):
        heapq.heappush(events, (now, 1, r))

    def free_vc(f, k):
        """Output VC flit ``f`` would take at column ``k``: -1 none needed, -2 none free."""
        nv, depth = buf_tab[order[f], k]
        if nv == 0:
            return -1
        b = int(res[order[f], k]) * N_CLASSES + cls_tab[order[f], k]
        for v in range(nv):
            depth_of.setdefault((b, v), depth)
        most = max(range(nv), key=lambda v: (credits.setdefault((b, v), depth), -v))
        return most if credits[b, most] > 0 else -2

    def start(f, k, v):
        """Flit ``f`` starts service at column ``k`` (taking output VC ``v``) at ``now``."""
        nonlocal hops
        row = order[f]
        r = int(res[row, k])
        if held[f] is not None:                          # leave the VC held: credit back, next head
            q = fifo[held[f]]
            assert q[0] == f, "only a VC's head flit leaves it"
            q.popleft()
            heapq.heappush(events, (now + cd, 0, 1, *held[f]))
            if q and at[q[0]] >= 0:
                h = q[0]
                rh = int(res[order[h], at[h]])
                cand.setdefault(rh, []).append((arrived[h], h))
                may_start(rh)
            held[f] = None
        if v >= 0:
            key = (r * N_CLASSES + cls_tab[row, k], v)
            credits[key] -= 1
            assert credits[key] >= 0, "a buffer holds more flits than its depth"
            fifo.setdefault(key, deque()).append(f)
            held[f] = key
        at[f] = -1
        free[r] = now + svc[row, k]
        busy[r] += svc[row, k]
        hops += 1
        heapq.heappush(events, (now + svc[row, k], 1, r))
        tarr, j = now + svc[row, k] + lat[row, k], k + 1
        while j < n_s and res[row, j] < 0:               # pure-latency stages
            if j == store_col[row]:
                store[f] = tarr
            tarr += svc[row, j] + lat[row, j]
            j += 1
        if tarr > bound:
            raise SimulationError(f"simulation could not finish within the time bound ({bound} ps)")
        heapq.heappush(events, (tarr, 0, 0, f, j))        # j == n_s: delivery

    t_loop = time.perf_counter()
    while events:
        ev = heapq.heappop(events)
        now = ev[0]
        if ev[1] == 0 and ev[2] == 1:                    # a credit returns
            b, v = ev[3], ev[4]
            credits[b, v] += 1
            may_start(b // N_CLASSES)
        elif ev[1] == 0:                                 # a flit arrives at column k
            f, k = ev[3], ev[4]
            row = order[f]
            if k == n_s:                                 # delivered
                deliver[f] = now
                delivered += 1
                for c in cus.delivered(f):
                    may_start(cu_res[c])
                continue
            at[f], arrived[f] = k, now
            if held[f] is None or fifo[held[f]][0] == f:
                r = int(res[row, k])
                cand.setdefault(r, []).append((now, f))
                may_start(r)
        else:                                            # resource ev[2] may start a service
            r = ev[2]
            if free.get(r, 0) > now:
                continue
            if r in issuer_of:                           # a CU: issue
                c = issuer_of[r]
                f = cus.next_flit(c)
                if f is None:
                    continue
                v = free_vc(f, 0)
                if v == -2:                              # injection buffer full: a credit wakes it
                    continue
                cus.issued(c)
                injected += 1
                issue[f] = now
                start(f, 0, v)
                continue
            best = None
            for a, f in cand.get(r, []):
                if best is not None and (a, f) >= best[:2]:
                    continue
                v = free_vc(f, at[f])
                if v != -2:
                    best = (a, f, v)
            if best is not None:
                cand[r].remove(best[:2])
                start(best[1], at[best[1]], best[2])

    loop_s = time.perf_counter() - t_loop
    if delivered < n:
        raise SimulationError(f"deadlock: no event left with {n - delivered} of {n} flits undelivered "
                              f"({n - injected} not issued)")
    check_complete(injected, delivered, n, deliver)
    return SimResult(int(deliver.max()) if n else 0, issue, deliver, store, np.asarray(order, np.int32), busy,
                     injected, delivered, hops, t.n_flows, "reference-credit", time.perf_counter() - t0, True,
                     loop_s)
