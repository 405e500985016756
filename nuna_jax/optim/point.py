"""Searches over the points of :class:`.space.Space`, budgeted by count.

Every search spends *path-model evaluations*: one evaluation is the analytical estimate
(``estimate_phases`` of the path model, docs/analytical.md) of one repaired point not evaluated
before by that search (:class:`Evaluator`; repeats are cached and free).  A value-and-gradient of
the straight-through loss (:func:`st_value_and_grad`) is charged :func:`vg_cost` evaluations:
``2 x`` (its rows / the rows of one evaluation), the upper end of the ratio measured on the
2-core CPU (``benchmarks/bench_optim.py --vg-cost``).  Nothing reads the clock.

The loss: the smooth estimate (docs/model.md) of a *hard* point, a
Gumbel-max sample ``x = argmax(z + G)`` of the logits, plus augmented-Lagrangian penalties on
the CU request budget and the stack page budget; its gradient is the straight-through one
(Gumbel-softmax, Jang et al. 2017): the forward pass is the discrete point, the backward pass
the softmax's.  The rows that carry the gradient (:func:`st_traffic`): every candidate of every
threadblock at the point's stacks (weight ``P[key, c]``, forward one-hot), and every candidate
stack of every page group with the point's threadblocks (forward weight ``P_MIN``); together
they give the exact gradient of the multilinear extension of the estimate at the vertex ``x``
(a row present in ``x`` differs from an alternative in one variable only).  So the loss's
minimum is a discrete point's smooth estimate: no Jensen gap between loss and argmax.

Searches: :func:`descend` (Adam on the logits, restarts in one ``vmap``), :func:`guided_search`
(the gradient at the current point ranks every single move by its first-order change; moves
are evaluated best-predicted first), :func:`local_search` (the same without the gradient:
moves in a seeded random order), :func:`random_search`, :func:`annealing`.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from ..lowering import build_traffic
from ..models.contention import smooth_estimate_ns
from .space import HardTable, Space, assemble_point, estimate_points, gather_rows, repair

P_MIN = 1e-20
EVAL_BATCH = 8          # points estimated per compiled call in the searches (one program)

__all__ = ["Evaluator", "BudgetExhausted", "vg_cost", "StTables", "st_tables", "st_loss", "move_gradient", "init_logits", "argmax_point", "sample_points",
           "descend", "guided_search", "local_search", "random_search", "annealing", "tied_local_search", "Schedule"]


class BudgetExhausted(Exception):
    """The evaluator's budget of path-model evaluations is spent."""


def unseen_within_budget(ev, xs) -> tuple[list, bool]:
    """The points of ``xs`` that evaluator ``ev`` has not estimated (each once, in order; ``ev.key``
    decides identity, ``ev.cache`` what was estimated), cut to what its budget can still pay
    (``ev.left()``), and whether any were cut.  One place for every evaluator's charging rule."""
    new, seen = [], set()
    for x in xs:
        k = ev.key(x)
        if k not in ev.cache and k not in seen:
            seen.add(k)
            new.append(x)
    short = len(new) > ev.left()
    return (new[:int(max(ev.left(), 0))] if short else new), short


def record(ev, x, estimate_ns, label: str) -> None:
    """Charge evaluator ``ev`` one evaluation: the estimate of point ``x`` (ns) cached under its key,
    with the stage that asked for it (``label``) and its place in the evaluation order."""
    k = ev.key(x)
    ev.cache[k] = float(estimate_ns)
    ev.label[k] = label
    ev.order.append(k)
    ev.n_evals += 1


class Evaluator:
    """Point -> analytical estimate (ns), cached; counts distinct evaluations against ``budget``.
    ``bl``: a concurrent kernel's ``BackgroundLoad`` every estimate takes (:mod:`.gemm`), or ``None``."""

    def __init__(self, s, plan, sp: Space, gid, ht: HardTable, budget: int | None = None, bl=None):
        self.s, self.plan, self.sp, self.gid, self.ht = s, plan, sp, gid, ht
        self.bl = bl
        self.cache: dict = {}
        self.label: dict = {}
        self.order: list = []
        self.n_evals = 0
        self.budget = budget

    @staticmethod
    def key(x) -> bytes:
        return np.asarray(x, np.int8).tobytes()

    def left(self) -> float:
        return np.inf if self.budget is None else self.budget - self.n_evals

    def many(self, xs, label: str = "?") -> list[float]:
        """Estimates of ``xs``; new points are charged; raises :class:`BudgetExhausted` (after
        evaluating as many as the budget allows) when the budget cannot pay for all."""
        xs = [np.asarray(x, np.int64) for x in xs]
        new, short = unseen_within_budget(self, xs)
        for i in range(0, len(new), EVAL_BATCH):
            chunk = new[i:i + EVAL_BATCH]
            rep = [repair(self.s, self.plan, self.sp, x) for x in chunk]
            B = EVAL_BATCH if len(chunk) > 1 else 1
            pad = B - len(chunk)
            xt = np.stack([x[:self.sp.n_tbs] for x in chunk] + [chunk[0][:self.sp.n_tbs]] * pad)
            cu = np.stack([r[0] for r in rep] + [rep[0][0]] * pad)
            st = np.stack([r[1] for r in rep] + [rep[0][1]] * pad)
            est = estimate_points(self.s, self.ht, xt, cu, st, self.bl)
            for x, e in zip(chunk, est[:len(chunk)]):
                record(self, x, e, label)
        if short:
            raise BudgetExhausted
        return [self.cache[self.key(x)] for x in xs]

    def charge(self, n: int) -> None:
        """Charge ``n`` evaluations (a value-and-gradient); :class:`BudgetExhausted` if they do not fit."""
        if n > self.left():
            raise BudgetExhausted
        self.n_evals += int(n)
        self.n_charged = getattr(self, "n_charged", 0) + int(n)

    def __call__(self, x, label: str = "?") -> float:
        return self.many([x], label)[0]

    def placement(self, x):
        return assemble_point(self.s, self.plan, self.sp, self.gid, x)

    def canonical(self, x) -> np.ndarray:
        """The point as it is keyed (every variable of a fixed count's space is active)."""
        return np.asarray(x, np.int64)

    def part(self, x):
        """(plan, space, point, count option 0): :class:`.counts.CountEvaluator`'s interface."""
        return self.plan, self.sp, np.asarray(x, np.int64), 0

    def traffic(self, x):
        """``lowering.build_traffic`` of the point's placement."""
        return build_traffic(self.s, self.plan, self.placement(x))

    def tbs_per_gpu(self, x) -> int:
        return int(self.plan.tbs_per_gpu.max(initial=0))

    def best(self, k: int):
        """The ``k`` best evaluated points (ties: first evaluated first): ``[(est, label, x)]``."""
        rank = sorted(range(len(self.order)), key=lambda i: (self.cache[self.order[i]], i))
        return [(self.cache[self.order[i]], self.label[self.order[i]],
                 np.frombuffer(self.order[i], np.int8).astype(np.int64)) for i in rank[:max(0, k)]]


# ---------------------------------------------------------------------------
# the straight-through loss
# ---------------------------------------------------------------------------
@struct.dataclass
class StTables:
    ht: HardTable
    tb_gpu: jnp.ndarray       # [n_tbs]
    demand: jnp.ndarray       # [n_tbs] CU requests (0: no steps)
    opt_tb: jnp.ndarray       # [n_tbs, C] 1 where the option exists
    grp_gpu: jnp.ndarray      # [G]
    grp_pages: jnp.ndarray    # [G]
    n_cus: int = struct.field(pytree_node=False)
    n_st: int = struct.field(pytree_node=False)
    n_gpus: int = struct.field(pytree_node=False)
    cu_cap: float = struct.field(pytree_node=False)
    st_cap: float = struct.field(pytree_node=False)
    bl: Any = None            # a concurrent kernel's BackgroundLoad (:mod:`.gemm`), or None


def st_tables(s, plan, sp: Space, ht: HardTable) -> StTables:
    C = sp.C
    opt = (np.arange(C)[None, :] < np.where(sp.cand.active, C, 1)[:, None]).astype(np.float32)
    dem = np.where(sp.cand.active, sp.demand, 0).astype(np.float32)
    return StTables(ht, jnp.asarray(plan.tb_gpu), jnp.asarray(dem), jnp.asarray(opt), jnp.asarray(sp.grp_gpu),
                    jnp.asarray(sp.grp_pages, jnp.float32), int(s.n_cus), int(s.n_hbm_stacks), int(plan.n_gpus),
                    float(s.max_outstanding_per_cu), float(sp.cap_pages))


def _st(p_hard, p_soft):
    """Forward ``max(p_hard, P_MIN)``, gradient that of ``p_soft``."""
    return jax.lax.stop_gradient(jnp.maximum(p_hard, P_MIN) - p_soft) + p_soft


def st_traffic(tt: StTables, xt, xg, P, Q, tb_cu=None, gstack=None):
    """Rows carrying the value and the straight-through gradient of point ``(xt, xg)``.

    ``P`` ``[n_tbs, C]`` and ``Q`` ``[G, K]``: straight-through probabilities (forward one-hot).
    ``tb_cu``, ``gstack``: the point's repaired CUs and stacks (default: its candidates', unrepaired)."""
    ht = tt.ht
    b = ht.base
    gsel = ht.grp_cand[jnp.arange(ht.grp_cand.shape[0]), xg] if gstack is None else gstack
    cu_hard = ht.cand_cu[jnp.arange(ht.cand_cu.shape[0]), xt] if tb_cu is None else tb_cu
    # set T: every (key, candidate) row at the point's stacks
    wT = P[ht.row_key, ht.row_cand]
    wT = jax.lax.stop_gradient(jnp.maximum(wT, P_MIN) - wT) + wT
    cuT = jnp.where(ht.row_own > 0, ht.cand_cu[b.tb, ht.row_cand], cu_hard[b.tb])
    T = b.replace(cu=cuT.astype(b.cu.dtype), read_stack=gsel[ht.row_sg].astype(b.cu.dtype),
                  dst_stack=gsel[ht.row_dg].astype(b.cu.dtype), weight=wT.astype(b.flits.dtype))
    # sets S and D: the point's rows with each candidate read (write) stack of their source (dest) group
    idx, valid = gather_rows(ht, xt)
    h = jax.tree_util.tree_map(lambda v: v[idx], b)
    sg, dg = ht.row_sg[idx], ht.row_dg[idx]
    K = ht.grp_cand.shape[1]
    vf = valid.astype(b.flits.dtype)
    parts = [T]
    for which in ("read", "dst"):
        for k in range(K):
            g = sg if which == "read" else dg
            q = Q[g, k]
            w = (P_MIN + q - jax.lax.stop_gradient(q)) * vf
            rs = ht.grp_cand[sg, k] if which == "read" else gsel[sg]
            ds = gsel[dg] if which == "read" else ht.grp_cand[dg, k]
            parts.append(h.replace(cu=cu_hard[h.tb].astype(b.cu.dtype), read_stack=rs.astype(b.cu.dtype),
                                   dst_stack=ds.astype(b.cu.dtype), weight=w.astype(b.flits.dtype),
                                   flits=h.flits * vf, bytes=h.bytes * vf))
    return jax.tree_util.tree_map(lambda *v: jnp.concatenate(v), *parts)


def st_rows(ht: HardTable) -> int:
    return ht.n_rows + 2 * int(ht.grp_cand.shape[1]) * ht.n_hard


def vg_cost(ht: HardTable) -> int:
    """Evaluations charged for one value-and-gradient: ``2 x`` its rows over one evaluation's."""
    return int(math.ceil(2.0 * st_rows(ht) / ht.n_hard))


def _penalties(tt: StTables, P, Q):
    cu_slot = tt.tb_gpu[:, None] * tt.n_cus + tt.ht.cand_cu
    cu_load = jax.ops.segment_sum((P * tt.demand[:, None]).ravel(), cu_slot.ravel(), num_segments=tt.n_gpus * tt.n_cus)
    st_slot = tt.grp_gpu[:, None] * tt.n_st + tt.ht.grp_cand
    st_load = jax.ops.segment_sum((Q * tt.grp_pages[:, None]).ravel(), st_slot.ravel(),
                                  num_segments=tt.n_gpus * tt.n_st)
    return jax.nn.relu(cu_load / tt.cu_cap - 1.0), jax.nn.relu(st_load / tt.st_cap - 1.0)


def st_loss(s, tt: StTables, zt, zg, key, temp, gscale, tau, lam_cu, lam_st, rho):
    """(loss, aux) of the logits ``zt`` ``[n_tbs, C]``, ``zg`` ``[G, K]`` at one Gumbel sample."""
    k1, k2 = jax.random.split(key)
    neg = jnp.where(tt.opt_tb > 0, 0.0, -1e9)
    yt = zt + neg + gscale * jax.random.gumbel(k1, zt.shape)
    yg = zg + gscale * jax.random.gumbel(k2, zg.shape)
    xt, xg = jnp.argmax(yt, -1), jnp.argmax(yg, -1)
    pt, pg = jax.nn.softmax(yt / temp, -1), jax.nn.softmax(yg / temp, -1)
    P = jax.lax.stop_gradient(jax.nn.one_hot(xt, zt.shape[-1]) - pt) + pt
    Q = jax.lax.stop_gradient(jax.nn.one_hot(xg, zg.shape[-1]) - pg) + pg
    t = st_traffic(tt, xt, xg, P, Q)
    time_ns = smooth_estimate_ns(s, t, tau, n_phases=tt.ht.n_phases, background=tt.bl)
    vc, vs = _penalties(tt, P, Q)
    total = time_ns + jnp.sum(lam_cu * vc + 0.5 * rho * vc * vc) + jnp.sum(lam_st * vs + 0.5 * rho * vs * vs)
    return total, {"time_ns": time_ns, "vc": vc, "vs": vs, "xt": xt, "xg": xg}


@functools.partial(jax.jit, static_argnames=("tau",))
def move_gradient(s, tt: StTables, xt, xg, tau, tb_cu=None, gstack=None):
    """Gradient of the smooth estimate at the vertex ``(xt, xg)`` (with its repaired ``tb_cu`` and
    ``gstack`` when given) with respect to the one-hot probabilities: ``(value, dT/dP [n_tbs, C],
    dT/dQ [G, K])``; a single move's first-order change is ``dT/dP[t, new] - dT/dP[t, cur]``."""
    P0 = jax.nn.one_hot(xt, tt.ht.cand_cu.shape[1])
    Q0 = jax.nn.one_hot(xg, tt.ht.grp_cand.shape[1])

    def f(P, Q):
        return smooth_estimate_ns(s, st_traffic(tt, xt, xg, P, Q, tb_cu, gstack), tau, n_phases=tt.ht.n_phases,
                                  background=tt.bl)

    v, (gP, gQ) = jax.value_and_grad(f, argnums=(0, 1))(P0, Q0)
    return v, gP, gQ


class Schedule(NamedTuple):
    steps: int = 20
    learning_rate: float = 0.3
    temp0: float = 1.0
    temp1: float = 0.3
    gumbel0: float = 0.3
    gumbel1: float = 0.1
    tau0_ns: float = 20.0
    tau1_ns: float = 5.0
    rho_ns: float = 200.0


def _anneal(a, b, f):
    return a * (b / a) ** f


def descend(s, tt: StTables, zt0, zg0, key, sched: Schedule):
    """``sched.steps`` Adam steps of the straight-through loss from each restart ``[B, ...]`` (vmapped).
    Returns final logits and a history ``[K, B]`` of the loss, the sample's smooth time and its
    penalties.  Only ``steps`` is static: the other schedule values are traced (one compiled
    program serves every schedule of one shape)."""
    hp = {k: jnp.asarray(v, jnp.float32) for k, v in sched._asdict().items() if k != "steps"}
    return _descend(s, tt, zt0, zg0, key, hp, steps=int(sched.steps))


@functools.partial(jax.jit, static_argnames=("steps",))
def _descend(s, tt: StTables, zt0, zg0, key, hp, steps: int):
    K = steps
    opt = optax.adam(hp["learning_rate"])

    def one(zt, zg, key):
        def step(carry, k):
            zt, zg, st, lc, ls, key = carry
            key, sub = jax.random.split(key)
            f = k / jnp.maximum(K - 1, 1)
            args = (sub, _anneal(hp["temp0"], hp["temp1"], f), _anneal(hp["gumbel0"], hp["gumbel1"], f),
                    _anneal(hp["tau0_ns"], hp["tau1_ns"], f), lc, ls, hp["rho_ns"])
            (val, aux), (gt, gg) = jax.value_and_grad(
                lambda a, b: st_loss(s, tt, a, b, *args), argnums=(0, 1), has_aux=True)(zt, zg)
            gt = jnp.where(jnp.isfinite(gt), gt, 0.0)
            gg = jnp.where(jnp.isfinite(gg), gg, 0.0)
            upd, st = opt.update((gt, gg), st, (zt, zg))
            zt, zg = optax.apply_updates((zt, zg), upd)
            lc = lc + hp["rho_ns"] * aux["vc"]
            ls = ls + hp["rho_ns"] * aux["vs"]
            out = {"loss": val, "time_ns": aux["time_ns"], "overflow": jnp.sum(aux["vc"]) + jnp.sum(aux["vs"])}
            return (zt, zg, st, lc, ls, key), out

        c0 = (zt, zg, opt.init((zt, zg)), jnp.zeros(tt.n_gpus * tt.n_cus), jnp.zeros(tt.n_gpus * tt.n_st), key)
        (zt, zg, _, _, _, _), hist = jax.lax.scan(step, c0, jnp.arange(K))
        return zt, zg, hist

    keys = jax.random.split(key, zt0.shape[0])
    zt, zg, hist = jax.vmap(one)(zt0, zg0, keys)
    return zt, zg, {k: v.T for k, v in hist.items()}


def init_logits(key, sp: Space, n_restarts: int, warm_logit: float = 1.0, noise: float = 1.0):
    """Restart 0 a warm start on the all-zero point (NAP+NAR), the others random normal."""
    k1, k2 = jax.random.split(key)
    zt = noise * jax.random.normal(k1, (n_restarts, sp.n_tbs, sp.C))
    zg = noise * jax.random.normal(k2, (n_restarts, sp.n_grp, sp.K))
    zt = zt.at[0].set(jnp.zeros((sp.n_tbs, sp.C)).at[:, 0].set(warm_logit))
    zg = zg.at[0].set(jnp.zeros((sp.n_grp, sp.K)).at[:, 0].set(warm_logit))
    return zt, zg


def argmax_point(sp: Space, zt, zg) -> np.ndarray:
    zt = np.where(np.arange(sp.C)[None, :] < np.where(sp.cand.active, sp.C, 1)[:, None], np.asarray(zt), -np.inf)
    return np.concatenate([np.argmax(zt, 1), np.argmax(np.asarray(zg), 1)]).astype(np.int64)


def sample_points(sp: Space, zt, zg, temp, n, rng) -> list[np.ndarray]:
    """``n`` samples of the categorical distributions ``softmax(z / temp)`` (Gumbel-max, numpy rng)."""
    zt = np.where(np.arange(sp.C)[None, :] < np.where(sp.cand.active, sp.C, 1)[:, None], np.asarray(zt), -np.inf)
    zg = np.asarray(zg)
    out = []
    for _ in range(n):
        a = np.argmax(zt / temp + rng.gumbel(size=zt.shape), 1)
        b = np.argmax(zg / temp + rng.gumbel(size=zg.shape), 1) if zg.size else np.zeros(0, np.int64)
        out.append(np.concatenate([a, b]).astype(np.int64))
    return out


# ---------------------------------------------------------------------------
# discrete searches
# ---------------------------------------------------------------------------
def _active(sp, x) -> np.ndarray | None:
    """The variables that decide point ``x`` (``None``: all, a fixed count's space; a
    :class:`.counts.CountSpace`: the count and that count's variables)."""
    f = getattr(sp, "active_vars", None)
    return None if f is None else f(x)


def _moves(sp: Space, x):
    """Every single move ``(var, option)`` away from ``x`` (of the active variables)."""
    v = np.repeat(np.arange(sp.n_vars), sp.var_n)
    o = np.arange(int(sp.var_n.sum())) - np.repeat(np.cumsum(sp.var_n) - sp.var_n, sp.var_n)
    keep = o != x[v]
    act = _active(sp, x)
    if act is not None:
        keep &= act[v]
    return v[keep], o[keep]


def _apply(x, v, o):
    y = x.copy()
    y[v] = o
    return y


def _descend_moves(ev: Evaluator, x, cur, mv_v, mv_o, label, max_evals, n0):
    """Evaluate moves in the given order, ``EVAL_BATCH`` at a time; the best improving move of the
    first batch that has one is taken.  Returns (new x, new est) or None."""
    for i in range(0, len(mv_v), EVAL_BATCH):
        if max_evals is not None and ev.n_evals - n0 >= max_evals:
            raise BudgetExhausted
        room = EVAL_BATCH if max_evals is None else min(EVAL_BATCH, max_evals - (ev.n_evals - n0))
        ys = [_apply(x, v, o) for v, o in zip(mv_v[i:i + room], mv_o[i:i + room])]
        ests = ev.many(ys, label)
        j = int(np.argmin(ests))
        if ests[j] < cur * (1 - 1e-9):
            return ys[j], ests[j]
    return None


def local_search(ev: Evaluator, x0, rng: np.random.Generator, *, max_evals: int | None = None,
                 label: str = "local_search"):
    """Single moves in a seeded random order (reshuffled after every accepted move), the best of the
    first improving batch taken; stops at a local optimum or when the evaluations run out.
    Returns ``(x, est, trace)``."""
    x = np.asarray(x0, np.int64).copy()
    n0 = ev.n_evals
    cur = ev(x, label)
    trace = [(0, cur)]
    try:
        while True:
            mv_v, mv_o = _moves(ev.sp, x)
            p = rng.permutation(len(mv_v))
            r = _descend_moves(ev, x, cur, mv_v[p], mv_o[p], label, max_evals, n0)
            if r is None:
                break
            x, cur = r
            trace.append((ev.n_evals - n0, cur))
    except BudgetExhausted:
        pass
    return x, cur, trace


def guided_search(ev: Evaluator, s, tt: StTables, x0, *, max_evals: int | None = None, tau_ns: float = 5.0,
                  label: str = "guided_search"):
    """The gradient's local search: at the current point, :func:`move_gradient` predicts every single
    move's change; moves are evaluated best-predicted first (the best of the first improving batch is
    taken), then the gradient is recomputed; each gradient is charged :func:`vg_cost` evaluations
    (``Evaluator.charge``).  Stops at a local optimum or when the evaluations run out."""
    sp = ev.sp
    x = np.asarray(x0, np.int64).copy()
    n0 = ev.n_evals
    cur = ev(x, label)
    trace = [(0, cur)]
    cost = vg_cost(tt.ht)
    try:
        while True:
            if max_evals is not None and ev.n_evals - n0 + cost > max_evals:
                break
            ev.charge(cost)
            cu, st = repair(ev.s, ev.plan, sp, x)
            _, gP, gQ = move_gradient(s, tt, jnp.asarray(x[:sp.n_tbs]), jnp.asarray(x[sp.n_tbs:]), tau_ns,
                                      jnp.asarray(cu), jnp.asarray(st))
            gP, gQ = np.asarray(gP, np.float64), np.asarray(gQ, np.float64)
            mv_v, mv_o = _moves(sp, x)
            tb = mv_v < sp.n_tbs
            pred = np.empty(len(mv_v))
            pred[tb] = gP[mv_v[tb], mv_o[tb]] - gP[mv_v[tb], x[mv_v[tb]]]
            g = mv_v[~tb] - sp.n_tbs
            pred[~tb] = gQ[g, mv_o[~tb]] - gQ[g, x[mv_v[~tb]]]
            p = np.argsort(pred, kind="stable")
            mv_v, mv_o, pred = mv_v[p], mv_o[p], pred[p]
            # the step: the k best-predicted moves on distinct variables at once, k = 1, 2, 4, ...
            # (a line search along the gradient's ranking: a symmetric bottleneck, one per GPU, moves
            # only when every copy moves); then single moves, best predicted first
            first = np.unique(mv_v, return_index=True)[1]
            first = np.sort(first[pred[first] < 0])
            ks = sorted({min(len(first), 2 ** j) for j in range(int(np.log2(max(len(first), 1))) + 2)} - {0, 1})
            ys = []
            for k in ks:
                y = x.copy()
                y[mv_v[first[:k]]] = mv_o[first[:k]]
                ys.append(y)
            r = None
            if ys:
                if max_evals is not None and ev.n_evals - n0 + len(ys) > max_evals:
                    break
                ests = ev.many(ys, label)
                j = int(np.argmin(ests))
                if ests[j] < cur * (1 - 1e-9):
                    r = ys[j], ests[j]
            if r is None:
                r = _descend_moves(ev, x, cur, mv_v, mv_o, label, max_evals, n0)
            if r is None:
                break
            x, cur = r
            trace.append((ev.n_evals - n0, cur))
    except BudgetExhausted:
        pass
    return x, cur, trace


def random_search(ev: Evaluator, rng: np.random.Generator, *, label: str = "random"):
    """Uniformly random points until the budget is spent; returns the best ``(x, est)``."""
    sp = ev.sp
    best, bx = np.inf, None
    tries = 0
    while ev.left() > 0 and tries < 20 * max(1, int(ev.budget or 1000)):
        xs = [np.where(sp.var_n > 1, rng.integers(0, sp.var_n), 0) for _ in range(EVAL_BATCH)]
        tries += EVAL_BATCH
        try:
            ests = ev.many(xs, label)
        except BudgetExhausted:
            break
        j = int(np.argmin(ests))
        if ests[j] < best:
            best, bx = ests[j], xs[j]
    return bx, best


def annealing(ev: Evaluator, x0, rng: np.random.Generator, *, n_evals: int, t0_rel: float = 0.02,
              t1_rel: float = 0.0005, label: str = "annealing"):
    """Simulated annealing from ``x0``: a random single move per step, Metropolis acceptance,
    ``T = T0 (T1 / T0)^f`` (``f`` the fraction of ``n_evals`` spent; ``T0``, ``T1`` fractions of
    the start's estimate).  Returns the best ``(x, est)``."""
    sp = ev.sp
    x = np.asarray(x0, np.int64).copy()
    cur = ev(x, label)
    best, bx = cur, x.copy()

    def free_of(x):
        act = _active(sp, x)
        return np.flatnonzero(sp.var_n > 1) if act is None else np.flatnonzero((sp.var_n > 1) & act)

    free = free_of(x)
    if free.size == 0:
        return bx, best
    T0, T1 = t0_rel * cur, t1_rel * cur
    n0, steps = ev.n_evals, 0
    while ev.n_evals - n0 < n_evals and steps < 20 * max(n_evals, 1):
        steps += 1
        T = T0 * (T1 / T0) ** ((ev.n_evals - n0) / max(n_evals, 1))
        v = int(free[rng.integers(free.size)])
        o = int(rng.integers(sp.var_n[v] - 1))
        y = x.copy()
        y[v] = o if o < x[v] else o + 1
        try:
            e = ev(y, label)
        except BudgetExhausted:
            break
        if e <= cur or rng.random() < np.exp(-(e - cur) / T):
            if v == 0 and _active(sp, x) is not None:   # the count moved: other variables are active now
                free = free_of(y)
            x, cur = y, e
            if e < best:
                best, bx = e, y.copy()
    return bx, best


def tied_local_search(ev: Evaluator, cls: np.ndarray, x0, rng: np.random.Generator, *,
                      max_evals: int | None = None, label: str = "tied_local_search"):
    """Local search over *tied* moves and single moves (docs/optim.md, "Headroom"; gradient-free):
    a tied move ``(r, o)`` sets every (active) variable of role ``r`` (``cls``, :func:`.score.roles`:
    the same threadblock or page group of every GPU) that has option ``o`` to ``o``, the move a tied
    logit of the score descent makes; a single move sets one variable.  All moves in a seeded random
    order (reshuffled after every accepted move), evaluated ``EVAL_BATCH`` at a time; the best
    improving move of the first batch that has one is taken.  Stops at a local optimum, after
    ``max_evals`` new evaluations or when the budget is spent.  Returns ``(x, est)``."""
    sp = ev.sp
    x = np.asarray(x0, np.int64).copy()
    n0 = ev.n_evals
    cur = ev(x, label)
    roles_ = np.unique(cls)
    W = int(sp.var_n.max())
    try:
        while True:
            act = _active(sp, x)
            act = np.ones(sp.n_vars, bool) if act is None else act
            moves = [("r", r, o) for r in roles_ for o in range(W)] + \
                    [("v", v, o) for v in np.flatnonzero(act).tolist() for o in range(int(sp.var_n[v])) if o != x[v]]
            def points(x=x, act=act):      # the moves' points, built as they are evaluated (memory)
                for kind, a, o in (moves[i] for i in rng.permutation(len(moves))):
                    y = x.copy()
                    if kind == "r":
                        m = (cls == a) & (sp.var_n > o) & act
                        if not m.any() or np.all(y[m] == o):
                            continue
                        y[m] = o
                    else:
                        y[a] = o
                    yield y

            took = False
            it = points()
            while True:
                batch = list(itertools.islice(it, EVAL_BATCH))
                if not batch:
                    break
                if max_evals is not None and ev.n_evals - n0 >= max_evals:
                    raise BudgetExhausted
                est = ev.many(batch, label)
                j = int(np.argmin(est))
                if est[j] < cur * (1 - 1e-9):
                    x, cur, took = batch[j], est[j], True
                    break
            if not took:
                break
    except BudgetExhausted:
        pass
    return x, cur
