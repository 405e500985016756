"""Rounding, repair and local search (issue 12, item 4).

* :func:`round_choices`: argmax of every restart's probabilities, plus
  samples; each choice vector becomes a feasible placement through
  :func:`nuna_jax.optim.candidates.assemble` (the repair).
* :func:`local_search`: moves one threadblock at a time to another of its
  candidates, threadblocks on the most loaded ports first (egress load of
  its GPU's port plus ingress load of the destination's port, flit-weighted),
  keeping a move when the analytical estimate falls; stops at a time budget,
  an evaluation budget, or when a full pass finds nothing.

Placements are compared by the analytical estimate
(``models.contention.estimate_ns``) on padded traffic (one compile per
padded shape).
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from ..lowering import build_traffic
from ..models.contention import bucket_rows, estimate_ns, pad_flows, resolve_n_phases
from .candidates import Candidates, assemble

__all__ = ["Evaluator", "round_choices", "local_search", "port_pressure"]


class Evaluator:
    """Choice vector -> (placement, traffic, analytical estimate ns), cached by choice."""

    def __init__(self, s, plan, cand: Candidates, min_rows: int = 0):
        self.s, self.plan, self.cand = s, plan, cand
        self.min_rows = int(min_rows)   # pad at least this far: one compiled shape for most placements
        self.cache: dict = {}
        self.n_evals = 0

    def __call__(self, choice):
        key = np.asarray(choice, np.int8).tobytes()
        if key not in self.cache:
            pl = assemble(self.s, self.plan, self.cand, choice)
            t = build_traffic(self.s, self.plan, pl)
            rows = bucket_rows(max(t.n_flows, self.min_rows))
            est = float(estimate_ns(self.s, pad_flows(t, rows), n_phases=resolve_n_phases(t)))
            self.cache[key] = (pl, t, est)
            self.n_evals += 1
        return self.cache[key]


def round_choices(p, n_samples: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Argmax of ``p`` (``[n_tbs, C]``) followed by ``n_samples`` independent samples."""
    p = np.asarray(p, np.float64)
    out = [np.argmax(p, axis=1)]
    cdf = np.cumsum(p, axis=1)
    cdf /= cdf[:, -1:]
    for _ in range(n_samples):
        u = rng.random((p.shape[0], 1))
        out.append(np.minimum((u > cdf).sum(axis=1), p.shape[1] - 1))
    return out


def port_pressure(s, t, n_tbs: int) -> np.ndarray:
    """Per threadblock: flit-weighted mean load (flits) of the egress and ingress ports it uses."""
    P = s.n_io_ports
    f = np.asarray(t.flits)
    eg = np.bincount(np.asarray(t.src_gpu) * P + np.asarray(t.port), weights=f, minlength=s.n_gpus * P)
    ig = np.bincount(np.asarray(t.dst_gpu) * P + np.asarray(t.port), weights=f, minlength=s.n_gpus * P)
    load = eg[np.asarray(t.src_gpu) * P + np.asarray(t.port)] + ig[np.asarray(t.dst_gpu) * P + np.asarray(t.port)]
    tb = np.asarray(t.tb)
    num = np.bincount(tb, weights=f * load, minlength=n_tbs)
    den = np.bincount(tb, weights=f, minlength=n_tbs)
    return num / np.maximum(den, 1e-9)


def local_search(ev: Evaluator, choice, *, budget_s: float, max_evals: int = 10_000,
                 progress: Callable | None = None):
    """First-improvement search over single-threadblock moves; returns ``(choice, estimate_ns, trace)``.

    ``trace``: list of ``(seconds since start, best estimate ns)`` after every accepted move.
    """
    t0 = time.perf_counter()
    cur = np.asarray(choice, np.int64).copy()
    _, t, best = ev(cur)
    trace = [(0.0, best)]
    C = ev.cand.n_candidates
    active = np.flatnonzero(ev.cand.active)
    evals = 0
    improved = True
    while improved and C > 1:
        improved = False
        order = active[np.argsort(-port_pressure(ev.s, t, ev.plan.n_tbs)[active], kind="stable")]
        for tb in order.tolist():
            for c in range(C):
                if c == cur[tb]:
                    continue
                if time.perf_counter() - t0 > budget_s or evals >= max_evals:
                    return cur, best, trace
                trial = cur.copy()
                trial[tb] = c
                _, tt, est = ev(trial)
                evals += 1
                if est < best * (1 - 1e-9):
                    cur, best, t = trial, est, tt
                    trace.append((time.perf_counter() - t0, best))
                    improved = True
                    if progress:
                        progress(best)
                    break
            if improved:
                break
    return cur, best, trace
