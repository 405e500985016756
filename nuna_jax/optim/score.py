"""The score-function descent: REINFORCE with a baseline (Williams 1992) over batches of sampled
placements, with logits tied across GPUs (docs/optim.md, "Score-function descent").

The distribution: every variable ``v`` of :class:`.space.Space` (a threadblock's candidate, a page
group's stack) is categorical with logits ``z_own[v] + z_tie[cls[v]]``; ``cls[v]`` is the variable's
*role*: its rank among the threadblocks (page groups) of its GPU, so the same threadblock of every
GPU shares one tied logit vector.  Candidate ``c`` is defined relative to NAP's own choice on every
GPU (:mod:`.candidates`, ``space.make_space``), so a tied logit moves "the same move on every GPU":
the estimate is a maximum over GPUs that run the same plan, and a single-variable move on one GPU
usually changes nothing.

One step: ``batch`` points sampled (Gumbel-max, numpy rng), their exact hard estimates
(:class:`.point.Evaluator`, one compiled call, charged one evaluation per new point: no smoothing,
no bias from a relaxation), the advantage ``(f_i - mean f) / std f`` and the score-function
gradient ``mean_i A_i (onehot(x_i) - p)`` of the expected estimate, summed into the tied logits by
role; Adam (by hand, numpy) steps against it.  Nothing reads the clock.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .point import EVAL_BATCH, BudgetExhausted, Evaluator
from .space import Space

__all__ = ["ScoreSchedule", "roles", "init_score_logits", "score_probs", "score_sample", "score_argmax", "score_gradient",
           "score_descent"]


class ScoreSchedule(NamedTuple):
    learning_rate: float = 0.3
    warm_logit: float = 4.0      # candidate 0 (NAP+NAR's) at the start; 4: p(stay) = 0.95 with 4 options
    batch: int = EVAL_BATCH      # samples per step (one compiled estimate call)
    max_steps_factor: int = 4    # at most factor x (evaluations / batch) steps (repeats are free)
    tied: bool = True            # False: the tied logits stay 0 (every variable on its own; an ablation)
    group_roles: str = "rank"    # how page groups are tied across GPUs (:func:`roles`)


def roles(sp: Space, tb_gpu: np.ndarray, groups: str = "rank") -> np.ndarray:
    """Role of every variable ``[n_vars]``: threadblocks by their rank among their GPU's threadblocks;
    page groups (offset past every threadblock role) by ``groups``:

    * ``"rank"``: their rank among their GPU's groups (address order);
    * ``"key"``: by their first-touching threadblock (``Space.grp_key``): the pair (that
      threadblock's role, whether it runs on the group's own GPU), then the group's rank among its
      GPU's groups with the same pair.  In a collective every GPU runs the same plan rotated by its
      rank (threadblock ``k`` of GPU ``j`` serves peer ``j + k + 1`` in the direct All-Gather), so a
      destination group is tied to the same-offset peer's group on every GPU, not to the group at
      the same address (which holds a different peer's data on every GPU)."""
    def rank_in(keys):
        keys = [tuple(k) for k in np.asarray(keys, np.int64).reshape(len(keys), -1)]
        out, seen = np.zeros(len(keys), np.int64), {}
        for i, k in enumerate(keys):
            out[i] = seen.get(k, 0)
            seen[k] = out[i] + 1
        return out
    tb_gpu = np.asarray(tb_gpu, np.int64)
    rt = rank_in(tb_gpu[:, None])
    gg = np.asarray(sp.grp_gpu, np.int64)
    if groups == "rank":
        rg = rank_in(gg[:, None])
    elif groups == "key":
        key = np.asarray(sp.grp_key, np.int64)
        pair = np.stack([rt[key], (tb_gpu[key] == gg).astype(np.int64)], 1) if len(key) else np.zeros((0, 2), np.int64)
        within = rank_in(np.concatenate([gg[:, None], pair], 1))
        _, rg = np.unique(np.concatenate([pair, within[:, None]], 1), axis=0, return_inverse=True)
        rg = np.asarray(rg, np.int64).reshape(-1)
    else:
        raise ValueError(f"groups must be 'rank' or 'key', got {groups!r}")
    return np.concatenate([rt, (rt.max(initial=-1) + 1) + rg]).astype(np.int64)


def _mask(sp: Space, width: int) -> np.ndarray:
    return np.arange(width)[None, :] < sp.var_n[:, None]


def init_score_logits(sp: Space, cls: np.ndarray, warm_logit: float):
    """``(z_own [n_vars, W], z_tie [n_roles, W])``: ``warm_logit`` on candidate 0, 0 elsewhere, tied 0."""
    W = int(sp.var_n.max(initial=1))
    z_own = np.zeros((sp.n_vars, W))
    z_own[:, 0] = warm_logit
    return z_own, np.zeros((int(cls.max(initial=-1)) + 1, W))


def _logits(sp, cls, z_own, z_tie):
    return np.where(_mask(sp, z_own.shape[1]), z_own + z_tie[cls], -np.inf)


def score_probs(sp: Space, cls, z_own, z_tie) -> np.ndarray:
    z = _logits(sp, cls, z_own, z_tie)
    z = z - z.max(1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(1, keepdims=True)


def score_sample(sp: Space, cls, z_own, z_tie, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` samples ``[n, n_vars]`` (Gumbel-max)."""
    z = _logits(sp, cls, z_own, z_tie)
    return np.argmax(z[None] + rng.gumbel(size=(n,) + z.shape), -1).astype(np.int64)


def score_argmax(sp: Space, cls, z_own, z_tie) -> np.ndarray:
    return np.argmax(_logits(sp, cls, z_own, z_tie), 1).astype(np.int64)


def score_gradient(sp: Space, cls, z_own, z_tie, xs, adv):
    """Score-function estimate of the gradient of ``E[f]`` with respect to ``(z_own, z_tie)`` from
    samples ``xs [B, n_vars]`` and their advantages ``adv [B]`` (``f - baseline``):
    ``mean_i adv_i (onehot(x_i) - p)`` per variable (d log softmax / d logits), summed by role into
    the tied logits.  Over a union of threadblock counts (:class:`.counts.CountSpace`) a sample's
    term for a variable its count does not use is 0 (the estimate does not depend on it: the exact
    gradient of the expectation, with less variance)."""
    p = score_probs(sp, cls, z_own, z_tie)
    onehot = np.zeros((len(xs),) + p.shape)
    np.put_along_axis(onehot, np.asarray(xs)[..., None], 1.0, axis=-1)
    active = getattr(sp, "active_vars", None)
    if active is None:
        g_own = np.einsum("b,bvk->vk", np.asarray(adv, float), onehot - p[None])
    else:
        w = np.asarray(adv, float)[:, None] * np.stack([active(x) for x in xs]).astype(float)
        g_own = np.einsum("bv,bvk->vk", w, onehot - p[None])
    g_own = np.where(_mask(sp, p.shape[1]), g_own / len(xs), 0.0)
    g_tie = np.zeros_like(z_tie)
    np.add.at(g_tie, cls, g_own)
    return g_own, g_tie


def score_descent(ev: Evaluator, cls: np.ndarray, rng: np.random.Generator, *, n_evals: int,
                  sched: ScoreSchedule = ScoreSchedule(), label: str = "descent_sample"):
    """Adam on ``(z_own, z_tie)`` against the score-function gradient of the expected estimate until
    ``n_evals`` new evaluations are spent (or ``max_steps_factor x n_evals / batch`` steps, since
    repeated samples are free).  Returns ``(z_own, z_tie, history)``; history: per step the batch's
    mean and best estimate and the evaluations spent."""
    sp = ev.sp
    z_own, z_tie = init_score_logits(sp, cls, sched.warm_logit)
    params = [z_own, z_tie]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    b1, b2, eps = 0.9, 0.999, 1e-8
    n0 = ev.n_evals
    hist = {"mean_ns": [], "best_ns": [], "evals": []}
    max_steps = max(1, sched.max_steps_factor * int(n_evals) // max(1, sched.batch))
    for step in range(1, max_steps + 1):
        if ev.n_evals - n0 >= n_evals:
            break
        xs = score_sample(sp, cls, z_own, z_tie, sched.batch, rng)
        try:
            f = np.asarray(ev.many(list(xs), label))
        except BudgetExhausted:
            break
        hist["mean_ns"].append(float(f.mean()))
        hist["best_ns"].append(float(f.min()))
        hist["evals"].append(int(ev.n_evals - n0))
        sd = f.std()
        if not sd > 1e-9 * abs(f.mean()):
            continue            # every sample the same estimate: no signal
        g_own, g_tie = score_gradient(sp, cls, z_own, z_tie, xs, (f - f.mean()) / sd)
        for i, g in enumerate((g_own, g_tie) if sched.tied else (g_own,)):
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            mh, vh = m[i] / (1 - b1 ** step), v[i] / (1 - b2 ** step)
            params[i] -= sched.learning_rate * mh / (np.sqrt(vh) + eps)
        z_own, z_tie = params
    return z_own, z_tie, hist
