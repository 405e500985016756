"""The threadblock count per GPU as a searched variable (NUNA 5.1: "the
best-performing number of threadblocks"; docs/optim.md, "What is searched").

``optimize(..., tbs_per_gpu="best")`` searches the union of the spaces of the counts that
``scenario``'s ``tbs_per_gpu="best"`` tries (:func:`scenario.tbs_candidates`: ``k x (n_gpus - 1)``,
``k`` in 1, 4, 16), one factored table per count (:func:`.driver.prepare`).  A point of the union is
one integer vector::

    x = [c, x_0 ..., x_1 ..., ...]      c: the count option, x_j: the point of count j's space

Only ``(c, x_c)`` decides the placement; the other counts' variables are inactive.  Count option 0
is the *reference* count: the one NAP+NAR with ``tbs_per_gpu="best"`` picks (the smallest path-model
estimate of NAP+NAR over the counts, ties to fewer threadblocks, as :func:`scenario.make_scenario`
decides), so, as for every other variable, option 0 is NAP's choice and the all-zero vector is
NAP+NAR at its own count.  The other counts follow in ascending order.

Counting (:class:`CountEvaluator`): one evaluation per distinct ``(c, x_c)`` (the key of a point is
its *canonical* vector, the inactive variables set to 0), the same unit as a fixed count's.  The
searches see the inactive variables through :meth:`CountSpace.active_vars`: the local searches and
annealing move the count or an active variable only, and the score-function gradient of count
``j``'s logits uses only the samples whose count is ``j`` (the exact gradient of the expectation:
``f`` does not depend on count ``j``'s variables when ``c != j``).
"""

from __future__ import annotations

import numpy as np

from .point import BudgetExhausted, Evaluator, record, unseen_within_budget
from .space import Space

__all__ = ["CountSpace", "CountEvaluator", "prepare_counts", "count_plans"]


class CountSpace:
    """The union of the spaces of several threadblock counts (module docstring)."""

    def __init__(self, counts, spaces: list[Space], plans):
        self.counts = tuple(int(c) for c in counts)        # option -> threadblocks per GPU
        self.spaces = list(spaces)
        self.plans = list(plans)
        sizes = np.array([sp.n_vars for sp in self.spaces], np.int64)
        self.offsets = 1 + np.concatenate([[0], np.cumsum(sizes)])   # option j's variables: offsets[j]:offsets[j+1]
        self.n_vars = int(self.offsets[-1])
        self.var_n = np.concatenate([[len(self.counts)]] + [sp.var_n for sp in self.spaces]).astype(np.int64)
        self.n_tbs = 0           # no threadblock variable of its own (the driver reads the chosen count's)

    def part(self, x) -> tuple[int, np.ndarray]:
        """(count option, that count's point) of a union point."""
        x = np.asarray(x, np.int64)
        c = int(x[0])
        return c, x[self.offsets[c]:self.offsets[c + 1]]

    def canonical(self, x) -> np.ndarray:
        """``x`` with every inactive variable 0 (its key)."""
        x = np.asarray(x, np.int64)
        y = np.zeros_like(x)
        c = int(x[0])
        y[0] = c
        y[self.offsets[c]:self.offsets[c + 1]] = x[self.offsets[c]:self.offsets[c + 1]]
        return y

    def active_vars(self, x) -> np.ndarray:
        """``[n_vars]`` True for the count and the variables of ``x``'s count."""
        m = np.zeros(self.n_vars, bool)
        c = int(np.asarray(x)[0])
        m[0] = True
        m[self.offsets[c]:self.offsets[c + 1]] = True
        return m

    def roles(self, tb_gpus, groups: str = "rank") -> np.ndarray:
        """Roles for the score descent's tied logits (:func:`.score.roles`): the count its own role (0);
        each count's variables by their roles within their count, offset past the earlier counts'."""
        from .score import roles
        out, off = [np.zeros(1, np.int64)], 1
        for sp, tg in zip(self.spaces, tb_gpus):
            r = roles(sp, tg, groups) + off
            out.append(r)
            off = int(r.max(initial=off - 1)) + 1
        return np.concatenate(out)


class CountEvaluator:
    """:class:`.point.Evaluator`'s interface over a :class:`CountSpace`: one sub-evaluator per count
    (unbudgeted), one budget and one cache keyed by the canonical union point; ``bl``: every count's
    estimates take this ``BackgroundLoad`` (:mod:`.gemm`), or ``None``."""

    def __init__(self, s, cspace: CountSpace, preps: list, budget: int | None = None, bl=None):
        self.s, self.sp = s, cspace
        self.plan = cspace.plans[0]
        self.subs = [Evaluator(s, pl, P["sp"], P["gid"], P["ht"], bl=bl) for pl, P in zip(cspace.plans, preps)]
        self.cache: dict = {}
        self.label: dict = {}
        self.order: list = []
        self.n_evals = 0
        self.budget = budget

    key = staticmethod(Evaluator.key)

    def canonical(self, x) -> np.ndarray:
        return self.sp.canonical(x)

    def left(self) -> float:
        return np.inf if self.budget is None else self.budget - self.n_evals

    def many(self, xs, label: str = "?") -> list[float]:
        """As :meth:`.point.Evaluator.many`: new canonical points charged one each, in order; the
        points of one count estimated together by that count's evaluator."""
        xs = [self.sp.canonical(x) for x in xs]
        new, short = unseen_within_budget(self, xs)
        by: dict = {}
        for x in new:
            c, sub = self.sp.part(x)
            by.setdefault(c, []).append(sub)
        est = {c: iter(self.subs[c].many(subs, label)) for c, subs in sorted(by.items())}
        for x in new:
            record(self, x, next(est[int(x[0])]), label)
        if short:
            raise BudgetExhausted
        return [self.cache[self.key(x)] for x in xs]

    def __call__(self, x, label: str = "?") -> float:
        return self.many([x], label)[0]

    def charge(self, n: int) -> None:
        raise ValueError("the threadblock-count union has no value-and-gradient to charge (score descent only)")

    def best(self, k: int):
        rank = sorted(range(len(self.order)), key=lambda i: (self.cache[self.order[i]], i))
        return [(self.cache[self.order[i]], self.label[self.order[i]],
                 np.frombuffer(self.order[i], np.int8).astype(np.int64)) for i in rank[:max(0, k)]]

    def part(self, x):
        """(plan, space, that count's point, count option) of a union point."""
        c, sub = self.sp.part(x)
        return self.sp.plans[c], self.sp.spaces[c], sub, c

    def placement(self, x):
        c, sub = self.sp.part(x)
        return self.subs[c].placement(sub)

    def traffic(self, x):
        c, sub = self.sp.part(x)
        return self.subs[c].traffic(sub)

    def tbs_per_gpu(self, x) -> int:
        return self.sp.counts[int(np.asarray(x)[0])]


def count_plans(s, plan, counts=None) -> dict:
    """``{threadblocks per GPU: plan}`` for every count of ``counts`` (default
    :func:`scenario.tbs_candidates`), generated as
    ``make_scenario`` generates them (:func:`scenario.generated_plan`); ``plan`` must be one of them
    (a generated plan of this system), else ``ValueError``."""
    from ..scenario import generated_plan, tbs_candidates
    from .io import plan_digest
    if getattr(plan, "collective", None) is None or str(plan.algorithm).startswith("msccl"):
        raise ValueError("tbs_per_gpu='best' searches generated plans only (an MSCCL file fixes its threadblocks)")
    out = {t: generated_plan(s, plan.collective, int(plan.size_bytes), algorithm=plan.algorithm, tbs_per_gpu=t,
                             elem_bytes=int(plan.elem_bytes))
           for t in (tbs_candidates(s.n_gpus, plan.algorithm) if counts is None else counts)}
    if plan_digest(plan) not in {plan_digest(p) for p in out.values()}:
        raise ValueError("tbs_per_gpu='best': the plan is not one of the generated plans of its counts "
                         f"{tuple(out)} (build it with scenario.make_scenario or scenario.generated_plan)")
    return out


def prepare_counts(s, plan, counts=None, **space_kw) -> dict:
    """The union space of every count (module docstring): ``{"sp": CountSpace, "preps": [per count
    :func:`.driver.prepare`], "counts", "costs" ({count: NAP+NAR's estimate ns}), "ref" (the reference
    count), "gid", "ht" (the reference count's)}``.  ``counts``: the threadblock counts per GPU
    (default :func:`scenario.tbs_candidates`, NUNA 5.1's; others for tests).  A count whose plan the
    CUs cannot hold is left out
    (as ``make_scenario`` does)."""
    from .driver import prepare
    from .space import estimate_points, repair
    preps, costs, err = {}, {}, None
    for t, p in count_plans(s, plan, counts).items():
        try:
            P = prepare(s, p, **space_kw)
        except ValueError as e:       # more threadblocks than the CUs can hold: not a candidate
            err = e
            continue
        gs = P["sp"].nap.granularity_search
        if gs:
            costs[t] = float(min(gs.values()))
        else:                         # a granularity given: the table's estimate of NAP+NAR
            sp = P["sp"]
            x0 = np.zeros(sp.n_vars, np.int64)
            cu, st = repair(s, p, sp, x0)
            costs[t] = float(estimate_points(s, P["ht"], x0[None, :sp.n_tbs], cu[None], st[None])[0])
        preps[t] = (p, P)
    if not preps:
        raise err
    ref = None
    for t in sorted(costs):           # scenario's rule: the smallest estimate, ties to fewer threadblocks
        if ref is None or costs[t] < costs[ref]:
            ref = t
    order = [ref] + [t for t in sorted(preps) if t != ref]
    cs = CountSpace(order, [preps[t][1]["sp"] for t in order], [preps[t][0] for t in order])
    P0 = preps[ref][1]
    return {"sp": cs, "preps": [preps[t][1] for t in order], "counts": tuple(order), "costs": costs, "ref": ref,
            "gid": P0["gid"], "ht": P0["ht"], "tt": P0["tt"]}
