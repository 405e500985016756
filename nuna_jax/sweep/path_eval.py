"""Every call of the sweep into the scenario builder, the path model and the simulator.

(One module, so that a change of ``models.contention``'s entry points is adapted
in one place.)

* :func:`traffic_for` builds plan -> placement -> traffic once per distinct
  discrete configuration (``make_scenario``) and caches it, padded to the path
  model's shape bucket (``contention.bucket_rows`` / ``pad_flows``).
* :func:`path_batch_fn` is the jitted, vmapped, sharded path-model evaluator of
  one static-shape group: a batch of points, each an index into the group's
  stacked hardware variants and an index into its stacked traffics.
* :func:`simulate_ns` runs the flit simulator on one point.
"""

from __future__ import annotations

import functools
import hashlib
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..models import contention as K
from ..models.contention.intervals import SPLIT
from ..models.contention.objective import estimate_phases, lower_bound_phases
from ..scenario import make_scenario
from ..system import System
from ..traffic import FIELDS, Traffic
from .shard import batch_sharding, replicated

__all__ = ["PaddedTraffic", "traffic_key", "traffic_for", "tbs_choices", "stack_traffic", "path_batch_fn", "simulate_ns",
           "PLACEMENT_FIELDS", "pad", "path_value_and_grad", "hw_plans", "vectorize"]

# continuous System fields the placement reads (placement.py: the HBM bandwidth-delay product
# sizes the page groups), so traffic is cached per value of these too
PLACEMENT_FIELDS = ("hbm_bw_bytes_per_ns", "hbm_latency_ns")


class PaddedTraffic(NamedTuple):
    traffic: Traffic      # numpy leaves, padded to n_rows
    n_flows: int          # real rows
    n_rows: int           # padded rows (the shape bucket)
    n_phases: int
    tbs_per_gpu: int = -1  # threadblocks per GPU of the plan (-1: not a generated plan)


def traffic_key(s: System, point: dict) -> tuple:
    """What the traffic of a point depends on: the static system, the discrete scenario
    axes and the continuous fields the placement reads."""
    from .grid import static_fields
    from .grid import continuous_fields
    statics = tuple(getattr(s, f) for f in static_fields())   # every shape / modelling switch
    # "best" threadblocks chosen inside the scenario (simulator points) reads every field
    fields = continuous_fields() if isinstance(point["tbs_per_gpu"], str) else PLACEMENT_FIELDS
    cont = tuple(float(np.asarray(getattr(s, f))) for f in fields)
    return statics + cont + (point["collective"], point["size"], point["policy"], point["algorithm"],
                             point["tbs_per_gpu"], point["nar_granularity"])


def tbs_choices(s: System, point: dict) -> tuple:
    """The threadblock counts a point is evaluated at: its own, or for ``"best"`` every count of
    :func:`scenario.tbs_candidates` (NUNA 5.1; the sweep keeps the fastest per point, on the point's
    own hardware)."""
    t = point["tbs_per_gpu"]
    if isinstance(t, str):
        from ..scenario import tbs_candidates
        return tbs_candidates(s.n_gpus, point["algorithm"])
    return (t,)


def traffic_for(s: System, point: dict, cache: dict) -> PaddedTraffic:
    """The padded traffic of a point, built once per :func:`traffic_key` (``cache`` is a dict)."""
    key = traffic_key(s, point)
    hit = cache.get(key)
    if hit is None:
        sc = make_scenario(s, collective=point["collective"], size_bytes=int(point["size"]),
                           policy=point["policy"], tbs_per_gpu=point["tbs_per_gpu"],
                           nar_granularity=point["nar_granularity"], algorithm=point["algorithm"])
        hit = pad(sc.traffic)._replace(tbs_per_gpu=int(np.max(sc.plan.tbs_per_gpu)))
        cache[key] = hit
    return hit


def stack_traffic(items, n_rows: int | None = None) -> Traffic:
    """Padded traffics stacked on a new leading axis (numpy), each first padded to ``n_rows``
    (default: their common row count) with zero-flit rows (as ``contention.pad_flows``): one array a
    column, written once (no padded copy of each traffic first), of the dtype ``jnp.asarray`` gives
    the columns together."""
    n_rows = max(p.n_rows for p in items) if n_rows is None else int(n_rows)
    out = {}
    for k in FIELDS:
        cols = [np.asarray(getattr(p.traffic, k)) for p in items]
        if any(len(c) > n_rows for c in cols):
            raise ValueError(f"stack_traffic: a traffic has more than n_rows={n_rows} rows")
        a = np.zeros((len(cols), n_rows), jax.dtypes.canonicalize_dtype(np.result_type(*cols)))
        for i, c in enumerate(cols):
            a[i, :len(c)] = c
        out[k] = a
    return Traffic(**out)


#: a hardware sweep on a CPU maps over its variants this many at a time (``lax.map(batch_size=)``): each
#: step's tables stay in cache.  CPU ms per variant, 8-GPU 1 MB All-Gather, 1,008 threadblocks per GPU
#: (2-core VM, load 11-13, side by side): vmap of 64 30, map 1 at a time 5.1-5.2, 2: 3.8-4.1, 4: 4.1-4.3, 8: 5.5-5.6.
#: With the range reductions as two scatters (:data:`CPU_PLANS`; 2026-12-02, load 12-13, two runs side by
#: side): 1 at a time 6.2-8.0, 2: 6.0-6.8, 4: 5.0-6.3, 8: 7.9-8.4
MAP_BATCH = 4
#: a CPU's map: the range reductions' two sparse-table updates as two scatters (``intervals.SPLIT``); every
#: other reduction a scatter as outside a sweep.  Same numbers (tests/test_sweep.py, "bit_for_bit").
CPU_PLANS = {"ext": SPLIT}
#: accelerators: the traffic's segment structure hoisted out of the vmap (``contention.sweep_plans``):
#: gathers instead of scatters, same numbers.  (On a CPU's map it saves nothing: 5.2-5.7 vs 5.1-5.2 ms.)
HOIST_PLANS = True


def vectorize(mesh) -> bool:
    """A hardware sweep's batch as one ``vmap`` (accelerators), or :data:`MAP_BATCH` variants at a
    time (``lax.map``, CPUs: the vmap's per-variant tables of a whole batch do not stay in cache)."""
    return mesh.devices.flat[0].platform != "cpu"


@functools.lru_cache(maxsize=64)
def path_batch_fn(n_phases: int, mesh) -> callable:
    """``f(systems, traffics, plans, hw_idx, t_idx) -> (estimate_ns, lower_bound_ns)``, each ``[B]``.

    ``systems``: a System with continuous leaves stacked ``[H]``; ``traffics``:
    a Traffic stacked ``[T, n_rows]``; ``plans``: for one traffic (``T = 1``, a
    hardware sweep) its hoisted structure (:func:`hw_plans`), else ``None``;
    ``hw_idx``, ``t_idx``: ``[B]`` indices, split over the mesh (``B`` a multiple
    of its size).  Point ``b`` is ``analyze(systems[hw_idx[b]], traffics[t_idx[b]])``'s
    estimate and lower bound (docs/analytical.md), without the smooth estimate and
    per-kind terms that the sweep does not write.
    """
    rep, bat = replicated(mesh), batch_sharding(mesh)
    vec = vectorize(mesh)

    def costs(s, t, plans=None):
        tb = K.resource_tables(s, t, n_phases, plans=plans)
        return jnp.sum(estimate_phases(tb)[0]), jnp.sum(lower_bound_phases(tb))

    def f(systems, traffics, plans, h, k):
        pick = lambda i: lambda v: v[i]  # noqa: E731
        if traffics.flits.shape[0] == 1:
            # one traffic (a hardware sweep): left out of the vmap, so everything that depends
            # on the traffic alone is computed once per batch; its segment structure (plans,
            # built on the host once, accelerators) turns every per-variant scatter into gathers
            t = jax.tree_util.tree_map(pick(0), traffics)
            one = lambda hh: costs(jax.tree_util.tree_map(pick(hh), systems), t, plans)  # noqa: E731
            if vec:
                return jax.vmap(one)(h)
            # a CPU: each device maps over its share of the batch, MAP_BATCH variants at a time, the
            # sparse tables' updates as two scatters (intervals.SPLIT)
            one = lambda hh: costs(jax.tree_util.tree_map(pick(hh), systems), t, CPU_PLANS)  # noqa: E731
            spec = jax.sharding.PartitionSpec("d")
            return jax.shard_map(lambda hh: jax.lax.map(one, hh, batch_size=MAP_BATCH), mesh=mesh, in_specs=spec,
                                 out_specs=(spec, spec), check_vma=False)(h)
        return jax.vmap(lambda hh, kk: costs(jax.tree_util.tree_map(pick(hh), systems),
                                             jax.tree_util.tree_map(pick(kk), traffics)))(h, k)

    return jax.jit(f, in_shardings=(rep, rep, rep, bat, bat), out_shardings=(bat, bat))


def hw_plans(s: System, traffics: Traffic, n_phases: int, mesh):
    """The hoisted structure (``contention.sweep_plans``) of a group's traffic when it has one
    (``traffics`` stacked ``[1, n_rows]``, numpy) and the mesh vectorizes (:data:`HOIST_PLANS`),
    else ``None``."""
    if np.shape(traffics.flits)[0] != 1 or not (HOIST_PLANS and vectorize(mesh)):
        return None
    t = jax.tree_util.tree_map(lambda v: np.asarray(v[0]), traffics)
    from .grid import static_fields
    h = hashlib.sha256()
    for k in FIELDS:          # the traffic's content: a second sweep of it reuses its plans
        v = getattr(t, k)
        h.update(f"{k}:{v.dtype}:{v.shape}".encode())
        h.update(np.ascontiguousarray(v).tobytes())
    key = (tuple(getattr(s, f) for f in static_fields()), int(n_phases), h.hexdigest())
    if key not in _PLANS:
        if len(_PLANS) >= 8:
            _PLANS.pop(next(iter(_PLANS)))
        _PLANS[key] = K.sweep_plans(s, t, n_phases)
    return _PLANS[key]


_PLANS: dict = {}    # hw_plans by (static system, phases, traffic digest); the 8 latest


def simulate_ns(s: System, pt: PaddedTraffic) -> float:
    """Exact completion time of a point's traffic, ns (``sim.simulate``, padding rows dropped)."""
    from ..sim import simulate
    n = pt.n_flows
    t = Traffic(**{k: np.asarray(getattr(pt.traffic, k))[:n] for k in FIELDS})
    return float(simulate(s, t).completion_ns)


def pad(t: Traffic) -> PaddedTraffic:
    """A concrete traffic padded to its shape bucket (``contention.bucket_rows``)."""
    rows = K.bucket_rows(t.n_flows)
    return PaddedTraffic(K.pad_flows(t, rows), int(t.n_flows), int(rows), int(K.resolve_n_phases(t)))


def path_value_and_grad(s: System, pt: PaddedTraffic):
    """``(estimate_ns, d estimate / d System)`` at fixed traffic: ``jax.value_and_grad`` of
    ``analyze(s, t).estimate_ns`` over every continuous System leaf (docs/analytical.md)."""
    return _value_and_grad(s, jax.tree_util.tree_map(jnp.asarray, pt.traffic), pt.n_phases)


@functools.partial(jax.jit, static_argnames="n_phases")
def _value_and_grad(s, t, n_phases):
    return jax.value_and_grad(lambda s_: K.analyze(s_, t, n_phases=n_phases).estimate_ns)(s)

