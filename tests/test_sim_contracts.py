"""The two contracts of shared/ARCHITECTURE.md between the simulator and the analytical model.

1. Zero load: traffic whose flits never meet (one flit per phase) completes in
   exactly the analytical latency, to rounding: the simulator rounds every
   stage's service and latency *up* to whole ps (docs/simulator.md), so a
   flit is never early and late by < 1 ps per rounded quantity (2 per stage).
2. Bound: with contention, the simulated completion is never below
   ``models.contention.lower_bound_ns``.  Since no simulated stage is shorter
   than its float time, the only slack allowed is float noise: the 0.05 ps
   forgiven per rounded quantity (program.ROUNDING_SLACK_PS) and float32
   rounding of the bound itself (2e-6 relative).
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from nuna_jax import path, sim
from nuna_jax.models import contention
from nuna_jax.scenario import make_scenario
from nuna_jax.presets import preset
from nuna_jax.traffic import make_traffic

from nuna_jax.sim.program import ROUNDING_SLACK_PS as SLACK
from test_sim_property import cases


def _late_ps(s):
    """Most a lone flit can be late from rounding up: < 1 ps per rounded quantity."""
    return 2 * path.n_stages(s) * 1.0


def _early_ps(s, n_flits, ref_ps):
    """Float noise only: forgiven slack per quantity and float32 error of ``ref_ps``."""
    return SLACK * (2 * path.n_stages(s) + n_flits) + 2e-6 * abs(ref_ps) + 1.0


def test_zero_load_equals_analytical_latency():
    s = preset("table2", n_gpus=4)
    rng = np.random.default_rng(3)
    f = 10
    # one flit per phase: no two flits are ever in flight together
    t = make_traffic(s, src_gpu=rng.integers(0, 2, f), cu=rng.integers(0, 576, f),
                     read_stack=rng.integers(0, 16, f), port=rng.integers(0, 144, f),
                     dst_gpu=rng.integers(2, 4, f), dst_stack=rng.integers(0, 16, f),
                     flits=np.ones(f), phase=np.arange(f))
    r = sim.simulate(s, t)
    lat = np.asarray(contention.flow_latency_ns(s, t), np.float64)
    # each flit alone: its own latency
    per_flit = (r.deliver_ps - r.issue_ps)[np.argsort(r.flit_flow)]
    d = per_flit - lat * 1000
    assert np.all(d >= -_early_ps(s, 1, lat.max() * 1000)) and np.all(d <= _late_ps(s))
    for ref_ns in (lat.sum(), float(contention.estimate_ns(s, t)), float(contention.lower_bound_ns(s, t))):
        d = r.completion_ps - ref_ns * 1000
        assert -_early_ps(s, f, ref_ns * 1000) <= d <= f * _late_ps(s)


@pytest.mark.parametrize("policy", ["ua", "ua+nar", "nap+nar", "numa"])
@pytest.mark.parametrize("collective,size", [("allgather", 100_000), ("alltoall", 200_000)])
def test_simulated_completion_never_below_lower_bound(policy, collective, size):
    s = preset("table2", n_gpus=4)
    t = make_scenario(s, collective=collective, size_bytes=size, policy=policy).traffic
    r = sim.simulate(s, t)
    lb_ps = float(contention.lower_bound_ns(s, t)) * 1000
    assert r.completion_ps >= lb_ps - _early_ps(s, r.flits_delivered, lb_ps)


def _bound_holds(case):
    s, t, _ = case
    if t.total_flits == 0:
        return
    r = sim.simulate(s, t)
    lb_ps = float(contention.lower_bound_ns(s, t)) * 1000
    assert r.completion_ps >= lb_ps - _early_ps(s, r.flits_delivered, lb_ps)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_bound_on_random_small_cases(case):
    _bound_holds(case)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_bound_on_many_random_small_cases(case):
    _bound_holds(case)
