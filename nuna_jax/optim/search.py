"""Discrete searches over candidate choices, budgeted by count.

Every search here spends *path-model evaluations*: one evaluation is the
analytical estimate (``models.contention.estimate_ns``) of one assembled
discrete placement that the search has not evaluated before (a repeat is
read from the :class:`Evaluator`'s cache and costs nothing).  No search looks
at the clock, so a fixed seed gives the same placement on any machine.

* :func:`round_choices`: argmax of probabilities, plus samples.
* :func:`local_search`: first-improvement moves of one threadblock to another
  of its candidates (threadblocks on the most loaded ports first); when no
  single move improves, moves of two threadblocks at once; stops when a full
  pass of both finds nothing or the evaluations run out.
* :func:`random_search`: uniformly random choice vectors.
* :func:`annealing`: simulated annealing from a start, single-threadblock moves,
  Metropolis acceptance at a geometric temperature schedule.

Each evaluated choice keeps the label of the stage that first produced it
(``Evaluator.label``), so the winner's ``source`` is the stage that found it.
"""

from __future__ import annotations

import itertools
from typing import Callable

import numpy as np

from ..lowering import build_traffic
from ..models.contention import bucket_rows, estimate_ns, resolve_n_phases
from ..traffic import FIELDS, Traffic
from .candidates import Candidates, assemble

__all__ = ["Evaluator", "BudgetExhausted", "round_choices", "local_search", "random_search", "annealing",
           "port_pressure", "pad_np"]


class BudgetExhausted(Exception):
    """The evaluator's budget of path-model evaluations is spent."""


def pad_np(t: Traffic, n_rows: int) -> Traffic:
    """``t`` with zero rows appended up to ``n_rows``, in numpy (``pad_flows`` without eager jnp ops)."""
    cols = {k: np.asarray(getattr(t, k)) for k in FIELDS}
    F = cols["flits"].shape[0]
    if n_rows < F:
        raise ValueError(f"pad_np: n_rows={n_rows} < n_flows={F}")
    return Traffic(**{k: np.concatenate([v, np.zeros(n_rows - F, v.dtype)]) for k, v in cols.items()})


class Evaluator:
    """Choice vector -> (placement, traffic, analytical estimate ns), cached by choice.

    ``budget``: the most distinct evaluations it performs (``None``: unlimited);
    one more raises :class:`BudgetExhausted`.  ``label``: choice key -> the stage
    that first evaluated it; ``order``: the keys in evaluation order.
    """

    def __init__(self, s, plan, cand: Candidates, min_rows: int = 0, budget: int | None = None):
        self.s, self.plan, self.cand = s, plan, cand
        self.min_rows = int(min_rows)   # pad at least this far: one compiled shape for most placements
        self.cache: dict = {}
        self.label: dict = {}
        self.order: list = []
        self.n_evals = 0
        self.budget = budget

    @staticmethod
    def key(choice) -> bytes:
        return np.asarray(choice, np.int8).tobytes()

    def left(self) -> float:
        return np.inf if self.budget is None else self.budget - self.n_evals

    def __call__(self, choice, label: str = "?"):
        key = self.key(choice)
        if key not in self.cache:
            if self.left() <= 0:
                raise BudgetExhausted
            pl = assemble(self.s, self.plan, self.cand, choice)
            t = build_traffic(self.s, self.plan, pl)
            rows = bucket_rows(max(t.n_flows, self.min_rows))
            est = float(estimate_ns(self.s, pad_np(t, rows), n_phases=resolve_n_phases(t)))
            self.cache[key] = (pl, t, est)
            self.label[key] = label
            self.order.append(key)
            self.n_evals += 1
        return self.cache[key]

    def best(self, k: int):
        """The ``k`` best evaluated choices by estimate (ties: first evaluated first): ``[(est, label, choice)]``."""
        rank = sorted(range(len(self.order)), key=lambda i: (self.cache[self.order[i]][2], i))
        out = []
        for i in rank[:max(0, k)]:
            key = self.order[i]
            out.append((self.cache[key][2], self.label[key], np.frombuffer(key, np.int8).astype(np.int64)))
        return out


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


def _moves(cur, order, C, pairs: bool):
    """Single moves ``[(tb, c)]`` in ``order``; with ``pairs``, two-threadblock moves of the first ones."""
    if not pairs:
        for tb in order:
            for c in range(C):
                if c != cur[tb]:
                    yield ((tb, c),)
        return
    for a, b in itertools.combinations(order, 2):
        for ca in range(C):
            if ca == cur[a]:
                continue
            for cb in range(C):
                if cb != cur[b]:
                    yield ((a, ca), (b, cb))


def local_search(ev: Evaluator, choice, *, max_evals: int | None = None, label: str = "local_search",
                 progress: Callable | None = None):
    """First-improvement search from ``choice``; returns ``(choice, estimate_ns, trace)``.

    Single-threadblock moves first; when a full pass finds nothing, two-threadblock
    moves (threadblocks by port pressure, so the most loaded pairs come first).
    Stops at a pass of both without improvement, after ``max_evals`` new evaluations,
    or when the evaluator's budget is spent.  ``trace``: ``(evaluations used, best ns)``
    after every accepted move.
    """
    cur = np.asarray(choice, np.int64).copy()
    _, t, best = ev(cur, label)
    n0 = ev.n_evals
    trace = [(0, best)]
    C = ev.cand.n_candidates
    active = np.flatnonzero(ev.cand.active)
    pairs = False
    try:
        while C > 1:
            improved = False
            order = active[np.argsort(-port_pressure(ev.s, t, ev.plan.n_tbs)[active], kind="stable")].tolist()
            for mv in _moves(cur, order, C, pairs):
                if max_evals is not None and ev.n_evals - n0 >= max_evals:
                    return cur, best, trace
                trial = cur.copy()
                for tb, c in mv:
                    trial[tb] = c
                _, tt, est = ev(trial, label)
                if est < best * (1 - 1e-9):
                    cur, best, t = trial, est, tt
                    trace.append((ev.n_evals - n0, best))
                    improved = True
                    if progress:
                        progress(best)
                    break
            if improved:
                pairs = False
            elif not pairs:
                pairs = True
            else:
                break
    except BudgetExhausted:
        pass
    return cur, best, trace


def random_search(ev: Evaluator, rng: np.random.Generator, *, label: str = "random", max_tries: int | None = None):
    """Uniformly random choice vectors until the evaluator's budget is spent; returns the best ``(choice, ns)``."""
    C, n = ev.cand.n_candidates, ev.plan.n_tbs
    best, best_ch = np.inf, None
    tries = 0
    limit = max_tries if max_tries is not None else (10 * ev.budget if ev.budget is not None else 1000)
    while ev.left() > 0 and tries < limit:   # repeats are free, so bound the tries
        tries += 1
        ch = np.where(ev.cand.active, rng.integers(0, C, n), 0)
        try:
            est = ev(ch, label)[2]
        except BudgetExhausted:
            break
        if est < best:
            best, best_ch = est, ch
    return best_ch, best


def annealing(ev: Evaluator, start, rng: np.random.Generator, *, n_evals: int, t0_rel: float = 0.02,
              t1_rel: float = 0.0005, label: str = "annealing"):
    """Simulated annealing from ``start``: a random single-threadblock move per step, accepted with
    probability ``exp(-(new - cur) / T)``, ``T = T0 (T1 / T0)^f`` with ``f`` the fraction of the
    ``n_evals`` evaluations spent and ``T0``, ``T1`` fractions of the start's estimate.  Returns the
    best ``(choice, ns)`` seen."""
    cur = np.asarray(start, np.int64).copy()
    cur_ns = ev(cur, label)[2]
    best, best_ch = cur_ns, cur.copy()
    C = ev.cand.n_candidates
    active = np.flatnonzero(ev.cand.active)
    if C < 2 or active.size == 0:
        return best_ch, best
    T0, T1 = t0_rel * cur_ns, t1_rel * cur_ns
    n0, steps = ev.n_evals, 0
    while ev.n_evals - n0 < n_evals and steps < 20 * max(n_evals, 1):
        steps += 1
        f = (ev.n_evals - n0) / max(n_evals, 1)
        T = T0 * (T1 / T0) ** f
        tb = int(active[rng.integers(active.size)])
        c = int(rng.integers(C - 1))
        trial = cur.copy()
        trial[tb] = c if c < cur[tb] else c + 1
        try:
            est = ev(trial, label)[2]
        except BudgetExhausted:
            break
        if est <= cur_ns or rng.random() < np.exp(-(est - cur_ns) / T):
            cur, cur_ns = trial, est
            if est < best:
                best, best_ch = est, trial.copy()
    return best_ch, best
