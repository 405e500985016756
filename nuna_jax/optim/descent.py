"""The Optax loop: ``lax.scan`` over steps under ``jit``,
restarts in one ``vmap``.

Schedules over the run (step ``k`` of ``K``, ``f = k / (K - 1)``):

* softmax temperature ``T = T0 (T1 / T0)^f`` (annealing toward one-hot);
* smooth-estimate temperature ``tau = tau0 (tau1 / tau0)^f`` ns;
* entropy weight ``beta = beta_max * max(0, 2 f - 1)`` (zero in the first half);
* Gumbel noise on the logits in the last third (a sampled phase: the Jensen gap
  between the time of the expected traffic and the expected time of sampled
  placements shrinks as the samples become the placements the loss sees).

Dual ascent on the CU budget after every step: ``lam <- lam + rho * v``.

``straight_through_from`` (off by default, 1.0 or more): from that fraction of
the run on, the loss is evaluated at a *hard* placement, a Gumbel-max sample
``one_hot(argmax(logits + G))`` (every restart-step one sample), and the gradient is the
softmax's (straight-through Gumbel-softmax): the loss then is the smooth time of a discrete
placement's traffic, not of the expected traffic, so its minimum is a discrete placement's.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from .loss import CapacityTable, loss_terms
from .relaxed import ExpectedTables, Relaxed, probabilities

__all__ = ["Schedule", "descend"]


class Schedule(NamedTuple):
    steps: int = 60
    learning_rate: float = 0.15
    temp0: float = 1.0
    temp1: float = 0.25
    tau0_ns: float = 40.0
    tau1_ns: float = 5.0
    beta_max_ns: float = 20.0
    gumbel_scale: float = 0.5
    rho_ns: float = 200.0
    straight_through_from: float = 2.0   # fraction of the run from which the hard sample is evaluated (>= 1: never)


def _anneal(a, b, f):
    return a * (b / a) ** f


@functools.partial(jax.jit, static_argnames=("sched",))
def descend(s, tables: ExpectedTables, cap: CapacityTable, logits0, key, sched: Schedule):
    """Run ``sched.steps`` Adam steps from each of ``logits0`` ``[B, n_tbs, C]`` (vmapped).

    Returns ``(final logits [B, n_tbs, C], history)``; ``history`` holds
    ``[K, B]`` arrays ``loss``, ``time_ns`` (smooth time of the expected traffic
    at that step's temperatures), ``overflow`` (sum of CU overflows) and
    ``entropy``.
    """
    opt = optax.adam(sched.learning_rate)
    K = sched.steps

    def one(logits, key):
        def step(carry, k):
            z, st, lam, key = carry
            key, sub = jax.random.split(key)
            f = k / jnp.maximum(K - 1, 1)
            temp = _anneal(sched.temp0, sched.temp1, f)
            tau = _anneal(sched.tau0_ns, sched.tau1_ns, f)
            beta = sched.beta_max_ns * jnp.maximum(0.0, 2.0 * f - 1.0)
            gs = jnp.where(f > 2.0 / 3.0, sched.gumbel_scale, 0.0)

            st_on = f >= sched.straight_through_from
            gkey, _ = jax.random.split(sub)

            def lf(zz):
                p = probabilities(Relaxed(zz), temp, sub, gs)
                hard = jax.nn.one_hot(jnp.argmax(zz + jax.random.gumbel(gkey, zz.shape), axis=-1), zz.shape[-1],
                                      dtype=p.dtype)
                p = jnp.where(st_on, hard + p - jax.lax.stop_gradient(p), p)
                lt = loss_terms(s, tables, cap, p, tau_ns=tau, lam=lam, rho=sched.rho_ns, beta=beta)
                return lt.total, lt

            (val, lt), g = jax.value_and_grad(lf, has_aux=True)(z)
            g = jnp.where(jnp.isfinite(g), g, 0.0)
            upd, st = opt.update(g, st, z)
            z = optax.apply_updates(z, upd)
            lam = lam + sched.rho_ns * lt.overflow
            out = {"loss": val, "time_ns": lt.time_ns, "overflow": jnp.sum(lt.overflow), "entropy": lt.entropy}
            return (z, st, lam, key), out

        lam0 = jnp.zeros(cap.n_slots)
        (z, _, _, _), hist = jax.lax.scan(step, (logits, opt.init(logits), lam0, key), jnp.arange(K))
        return z, hist

    keys = jax.random.split(key, logits0.shape[0])
    z, hist = jax.vmap(one)(logits0, keys)
    return z, {k: v.T for k, v in hist.items()}
