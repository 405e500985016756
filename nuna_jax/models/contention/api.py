"""The path model's public functions: tables -> objective, jitted with explicit static arguments
(``n_phases``, ``engine``, ``chunk_flows``).  :func:`path_costs` is the pure, unjitted core
(composable under ``jit``, ``vmap`` and ``grad``); the other functions jit one quantity."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ...path import zero_load_latency_ns
from ...system import System
from ...traffic import Traffic
from .background import BackgroundLoad, as_background_load, check_background, estimate_phases_bg, lse_phases_bg
from .objective import estimate_phases, excess, lower_bound_phases, phase_max_latency, smooth_phases
from .runs_engine import smooth_log_sums_runs, tables_runs
from .stage_engine import smooth_log_sums_stages, tables_stages
from .tables import CHUNK_FLOWS, KINDS, Tables, check_engine, resolve_n_phases, resource_kind_index

TEMPERATURE_NS = 10.0
WEIGHT_TEMPERATURE_NS = 100.0
_STATIC = ("n_phases", "engine", "chunk_flows")


def resource_tables(s: System, t: Traffic, n_phases: int, engine: str = "runs",
                    chunk_flows: int = CHUNK_FLOWS, plans: dict | None = None) -> Tables:
    """The resource tables of ``t`` on ``s`` (pure; ``n_phases``, ``engine``, ``chunk_flows`` static).
    ``plans``: ``sweep_plans(s, t, n_phases)`` of this traffic (runs engine; a hardware sweep's
    hoisted structure: same numbers, gathers instead of scatters)."""
    if engine == "runs":
        return tables_runs(s, t, n_phases, plans)
    return tables_stages(s, t, n_phases, int(chunk_flows))


def _smooth(s, t, tb, tau, tau_w, engine, chunk_flows, bl: BackgroundLoad | None = None):
    if engine == "runs":
        log_sums = lambda lr, tau_, logw: smooth_log_sums_runs(s, t, tb, lr, tau_, logw)  # noqa: E731
    else:
        log_sums = lambda lr, tau_, logw: smooth_log_sums_stages(s, t, tb, lr, tau_, tau_w, int(chunk_flows))  # noqa: E731
    bg = None if bl is None else functools.partial(lse_phases_bg, bl)
    return smooth_phases(t, tb, log_sums, tau, tau_w, bg)


def _static(t: Traffic, n_phases, engine: str, chunk_flows: int) -> dict:
    check_engine(engine, chunk_flows)
    return {"n_phases": resolve_n_phases(t, n_phases), "engine": engine, "chunk_flows": int(chunk_flows)}


@jax.jit
def flow_latency_ns(s: System, t: Traffic):
    """Zero-load latency of one flit of each flow, ns, ``[n_flows]`` (= ``path.zero_load_latency_ns``)."""
    return zero_load_latency_ns(s, t)


@functools.partial(jax.jit, static_argnames=_STATIC)
def _busy_jit(s, t, n_phases, engine, chunk_flows):
    return resource_tables(s, t, n_phases, engine, chunk_flows).busy


def resource_busy_ns(s: System, t: Traffic, n_phases: int | None = None, *, engine: str = "runs",
                     chunk_flows: int = CHUNK_FLOWS):
    """Busy time of every resource per phase, ns, ``[n_phases, n_resources]``:
    ``sum weight * flits * svc`` over the stages that use it."""
    return _busy_jit(s, t, **_static(t, n_phases, engine, chunk_flows))


@functools.partial(jax.jit, static_argnames=_STATIC)
def _wbusy_jit(s, t, n_phases, engine, chunk_flows):
    return resource_tables(s, t, n_phases, engine, chunk_flows).wbusy


def window_busy_ns(s: System, t: Traffic, n_phases: int | None = None, *, engine: str = "runs",
                   chunk_flows: int = CHUNK_FLOWS):
    """Outstanding-request window 'busy time' per CU and phase, ns, ``[n_phases, n_gpus * n_cus]``
    (index ``gpu * n_cus + cu``): by Little's law ``sum load * (L_f - svc_issue) / max_outstanding``."""
    return _wbusy_jit(s, t, **_static(t, n_phases, engine, chunk_flows))


@functools.partial(jax.jit, static_argnames=_STATIC)
def _lb_jit(s, t, n_phases, engine, chunk_flows):
    return jnp.sum(lower_bound_phases(resource_tables(s, t, n_phases, engine, chunk_flows)))


def lower_bound_ns(s: System, t: Traffic, n_phases: int | None = None, *, engine: str = "runs",
                   chunk_flows: int = CHUNK_FLOWS, background=None):
    """A lower bound on the completion time, ns (docs/analytical.md, "Lower bound"): per phase the
    max of the longest zero-load latency, every resource's earliest arrival + busy time + least
    remaining latency, and every CU's window busy time; phases add.  Valid for hard traffic.
    ``background`` (a ``sim.Background`` or :class:`.background.BackgroundLoad`) is checked and
    changes nothing: the bound holds beside any background on other CUs, and no background work
    can be proved to precede the traffic's (docs/analytical.md 2.7)."""
    check_background(background)
    return _lb_jit(s, t, **_static(t, n_phases, engine, chunk_flows))


def _estimate(s, t, n_phases, engine, chunk_flows):
    return jnp.sum(estimate_phases(resource_tables(s, t, n_phases, engine, chunk_flows))[0])


_est_jit = jax.jit(_estimate, static_argnames=_STATIC)


@functools.partial(jax.jit, static_argnames=_STATIC)
def _est_bg_jit(s, t, bl, n_phases, engine, chunk_flows):
    return jnp.sum(estimate_phases_bg(resource_tables(s, t, n_phases, engine, chunk_flows), bl)[0])


def _estimate_batch(s, t, n_phases, engine, chunk_flows, vectorize: bool = True):
    one = lambda tt: _estimate(s, tt, n_phases, engine, chunk_flows)  # noqa: E731
    return jax.vmap(one)(t) if vectorize else jax.lax.map(one, t)


#: XLA CPU options that halve the compile time of the estimate (8-GPU Table 2, 12 x 16,384 rows:
#: 7.7 s -> 3.5 s) and make the program about 2.5 times slower (0.34 s -> 0.82 s for 262,144 rows):
#: worth it for small batches, whose run takes milliseconds (same numbers on the cases checked)
QUICK_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}

estimate_batch_jit = jax.jit(_estimate_batch, static_argnames=_STATIC + ("vectorize",))
estimate_batch_jit.__doc__ = """:func:`estimate_ns` of every traffic of a batch stacked ``[B, n_rows]``, ``[B]``:
    one compiled program per (system statics, ``B``, ``n_rows``, static arguments); see
    ``report.estimate_many``.  ``vectorize``: ``jax.vmap`` over the batch (an accelerator), else
    ``jax.lax.map``, one table after another in the one program (on a CPU: about half the compile
    time and run time of the vmap, measured on 12 tables of 16,384 rows)."""
#: the same program compiled with :data:`QUICK_COMPILE` (CPU only)
estimate_batch_quick_jit = jax.jit(_estimate_batch, static_argnames=_STATIC + ("vectorize",),
                                   compiler_options=QUICK_COMPILE)


def estimate_ns(s: System, t: Traffic, n_phases: int | None = None, *, engine: str = "runs",
                chunk_flows: int = CHUNK_FLOWS, background=None):
    """Best estimate of the completion time, ns (docs/analytical.md, "Estimate"):
    per phase ``max( max_r Lmax_r + (B_r - svc_r)^+, max_cu Lmax_cu + (B_cu - Lbar_cu)^+ )``;
    phases add.  Never below :func:`lower_bound_ns`.  ``background``: a concurrent kernel's
    on-chip flows (``sim.Background``, or its :class:`.background.BackgroundLoad` computed once),
    whose work is prorated into the resource terms (docs/analytical.md 2.7); ``None``: none."""
    bl = as_background_load(s, background)
    if bl is None:
        return _est_jit(s, t, **_static(t, n_phases, engine, chunk_flows))
    return _est_bg_jit(s, t, bl, **_static(t, n_phases, engine, chunk_flows))


@functools.partial(jax.jit, static_argnames=_STATIC)
def _smooth_jit(s, t, temperature_ns, weight_temperature_ns, n_phases, engine, chunk_flows):
    tb = resource_tables(s, t, n_phases, engine, chunk_flows)
    return jnp.sum(_smooth(s, t, tb, temperature_ns, weight_temperature_ns, engine, chunk_flows))


@functools.partial(jax.jit, static_argnames=_STATIC)
def _smooth_bg_jit(s, t, temperature_ns, weight_temperature_ns, bl, n_phases, engine, chunk_flows):
    tb = resource_tables(s, t, n_phases, engine, chunk_flows)
    return jnp.sum(_smooth(s, t, tb, temperature_ns, weight_temperature_ns, engine, chunk_flows, bl))


def smooth_estimate_ns(s: System, t: Traffic, temperature_ns=TEMPERATURE_NS, n_phases: int | None = None,
                       weight_temperature_ns=WEIGHT_TEMPERATURE_NS, *, engine: str = "runs",
                       chunk_flows: int = CHUNK_FLOWS, background=None):
    """Smooth (differentiable) estimate, ns: :func:`estimate_ns` with every max a log-sum-exp at
    temperature ``temperature_ns``, each flow weighted by ``min(1, flits) * weight ** (tau_w / tau)``
    (docs/model.md, "Flow weight").  Tends to the estimate as the temperature falls to 0.
    ``background``: as for :func:`estimate_ns`."""
    bl = as_background_load(s, background)
    if bl is None:
        return _smooth_jit(s, t, temperature_ns, weight_temperature_ns, **_static(t, n_phases, engine, chunk_flows))
    return _smooth_bg_jit(s, t, temperature_ns, weight_temperature_ns, bl,
                          **_static(t, n_phases, engine, chunk_flows))


class PathCosts(NamedTuple):
    """Result of :func:`path_costs` / :func:`analyze` (all ns; per-phase arrays of length ``n_phases``)."""

    flow_latency_ns: Any         # [F]
    busy_ns: Any                 # [P, R]
    window_busy_ns: Any          # [P, n_gpus * n_cus]
    phase_lower_bound_ns: Any    # [P]
    phase_estimate_ns: Any       # [P]
    phase_latency_ns: Any        # [P] longest zero-load flow latency
    kind_excess_ns: Any          # [P, 6] max backlog (B - svc)^+ per kind: cu, hbm, link, egress, ingress, window
    kind_term_ns: Any            # [P, 6] max (Lmax + backlog) per kind
    kind_busy_ns: Any            # [P, 6] max busy per kind
    lower_bound_ns: Any          # scalar
    estimate_ns: Any             # scalar
    smooth_estimate_ns: Any      # scalar (nan-free; at temperature_ns)


def path_costs(s: System, t: Traffic, *, n_phases: int, temperature_ns=TEMPERATURE_NS,
               weight_temperature_ns=WEIGHT_TEMPERATURE_NS, engine: str = "runs",
               chunk_flows: int = CHUNK_FLOWS, background: BackgroundLoad | None = None) -> PathCosts:
    """All the path model's quantities in one pass: pure, no host conversion, so it composes under
    ``jit``, ``vmap`` (over stacked Systems, see ``system.stack_systems``, and over same-shape
    Traffic batches, see :func:`stack_traffic`) and ``grad``.  ``background``: a
    :class:`.background.BackgroundLoad` (estimate, terms and smooth estimate with its load; the
    bound, busy and window tables are the traffic's own)."""
    tb = resource_tables(s, t, n_phases, engine, chunk_flows)
    lb = lower_bound_phases(tb)
    est, term_r, term_c = estimate_phases(tb) if background is None else estimate_phases_bg(tb, background)
    ex_r, ex_w = excess(tb)
    kind = jnp.asarray(resource_kind_index(s))
    nk = len(KINDS)

    def per_kind(v):  # [P, R] -> [P, nk] max over each kind
        return jax.vmap(lambda row: jax.ops.segment_max(row, kind, num_segments=nk))(v)

    def with_window(v_r, v_w):
        return jnp.concatenate([jnp.maximum(per_kind(v_r), 0.0), jnp.max(v_w, axis=1, keepdims=True)], axis=1)

    sm = _smooth(s, t, tb, temperature_ns, weight_temperature_ns, engine, chunk_flows, background)
    return PathCosts(tb.L, tb.busy, tb.wbusy, lb, est, phase_max_latency(tb), with_window(ex_r, ex_w),
                     with_window(term_r, term_c), with_window(tb.busy, tb.wbusy),
                     jnp.sum(lb), jnp.sum(est), jnp.sum(sm))


_path_costs_jit = jax.jit(path_costs, static_argnames=_STATIC)


def analyze(s: System, t: Traffic, n_phases: int | None = None, temperature_ns=TEMPERATURE_NS,
            weight_temperature_ns=WEIGHT_TEMPERATURE_NS, *, engine: str = "runs",
            chunk_flows: int = CHUNK_FLOWS, background=None) -> PathCosts:
    """:func:`path_costs`, jitted (``n_phases`` read from concrete traffic when not given);
    ``background``: as for :func:`estimate_ns`."""
    return _path_costs_jit(s, t, temperature_ns=temperature_ns, weight_temperature_ns=weight_temperature_ns,
                           background=as_background_load(s, background), **_static(t, n_phases, engine, chunk_flows))


