"""Property tests: the fast engine equals the reference, flit by flit, on random small cases.

Random small systems (mesh shape, die count, stacks, ports, GPUs, window)
with round-number timings, so that exact ties at a resource are common and
the FCFS tie-break is exercised; random flows (threadblocks, steps, phases)
and optional on-chip background flows.  The reference trace is also checked
against the FCFS rule directly (`check_fcfs`).
"""

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nuna_jax import sim
from nuna_jax.sim.program import issue_order
from nuna_jax.sim.reference import reference_issue_order
from nuna_jax.presets import from_params
from nuna_jax.traffic import make_traffic

MESHES = [(2, 1, 1), (2, 1, 2), (3, 2, 1), (4, 2, 2), (4, 3, 4), (6, 2, 3)]  # cols, rows, dies


@st.composite
def cases(draw):
    cols, rows, dies = draw(st.sampled_from(MESHES))
    stacks = draw(st.sampled_from([s for s in (2, 4) if s // 2 <= cols]))
    ports = 2 * rows * draw(st.integers(1, 2))
    gpus = draw(st.integers(2, 3))
    s = from_params(
        mesh_cols=cols, mesh_rows=rows, n_dies=dies, cus_per_router=draw(st.integers(1, 2)),
        n_hbm_stacks=stacks, n_io_ports=ports, n_gpus=gpus, noc_clock_ghz=1.0,
        hop_cycles=float(draw(st.sampled_from([1, 2, 10]))),
        die_crossing_ns=float(draw(st.sampled_from([0, 3]))),
        cu_to_noc_ns=float(draw(st.sampled_from([0, 5, 100]))),
        link_bw_bytes_per_ns=float(draw(st.sampled_from([64, 128, 256]))),
        hbm_bw_bytes_per_ns=float(draw(st.sampled_from([64, 256]))),
        hbm_latency_ns=float(draw(st.sampled_from([0, 20]))),
        port_bw_bytes_per_ns=float(draw(st.sampled_from([32, 64, 256]))),
        switch_latency_ns=float(draw(st.sampled_from([0, 50]))),
        max_outstanding_per_cu=draw(st.integers(1, 4)))
    f = draw(st.integers(1, 7))
    ints = lambda hi: np.asarray(draw(st.lists(st.integers(0, hi - 1), min_size=f, max_size=f)))  # noqa: E731
    src = ints(gpus)
    dst = (src + 1 + ints(gpus - 1)) % gpus
    crowd = draw(st.booleans())       # every flow on the same stack and port: exact ties are common
    rstack, port = (np.zeros(f, int), np.zeros(f, int)) if crowd else (ints(stacks), ints(ports))
    t = make_traffic(s, src_gpu=src, cu=ints(min(s.n_cus, 4)), read_stack=rstack, port=port,
                     dst_gpu=dst, dst_stack=ints(stacks), flits=ints(6), tb=ints(3), step=ints(3),
                     phase=ints(3))
    bg = None
    if draw(st.booleans()):
        b = draw(st.integers(1, 4))
        bi = lambda hi: np.asarray(draw(st.lists(st.integers(0, hi - 1), min_size=b, max_size=b)))  # noqa: E731
        bcu = 4 + bi(max(s.n_cus - 4, 1)) if s.n_cus > 4 else None
        if bcu is not None:
            bg = sim.make_background(s, gpu=bi(gpus), cu=np.minimum(bcu, s.n_cus - 1), stack=bi(stacks),
                                     kind=bi(2), flits=bi(5), tb=bi(2), step=bi(2))
    return s, t, bg


# 5 generated cases by default (each random system compiles its own stage tables, about 2.5 CPU s a
# case), 100 in the slow run (test_fast_equals_reference_on_many_cases); NUNA_SIM_EXAMPLES=200 for more
@settings(max_examples=int(os.environ.get("NUNA_SIM_EXAMPLES", "5")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_fast_equals_reference_flit_by_flit(case):
    _fast_equals_reference(case)


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_fast_equals_reference_on_many_cases(case):
    _fast_equals_reference(case)


def _fast_equals_reference(case):
    s, t, bg = case
    ref, trace = sim.run_reference(s, t, bg, return_trace=True)
    sim.check_fcfs(trace)
    fast = sim.simulate(s, t, background=bg)
    assert np.array_equal(fast.flit_flow, ref.flit_flow)
    for k in ("issue_ps", "deliver_ps", "store_ps", "busy_ps"):
        assert np.array_equal(getattr(fast, k), getattr(ref, k)), k
    assert (fast.completion_ps, fast.flits_injected, fast.flits_delivered, fast.flit_hops) == \
        (ref.completion_ps, ref.flits_injected, ref.flits_delivered, ref.flit_hops)
    # the same with a tiny calendar (2 buckets of 4 ps): exercises bucket wrap and the overflow heap
    from nuna_jax.sim import fast as F
    saved = (F.CAL_BUCKET_PS, F.CAL_BUCKETS)
    try:
        F.CAL_BUCKET_PS, F.CAL_BUCKETS = 4, 2
        tiny = sim.simulate(s, t, background=bg)
    finally:
        F.CAL_BUCKET_PS, F.CAL_BUCKETS = saved
    assert np.array_equal(tiny.deliver_ps, ref.deliver_ps) and np.array_equal(tiny.busy_ps, ref.busy_ps)
    total = int(np.asarray(t.flits).sum()) + (0 if bg is None else bg.total_flits)
    assert fast.flits_injected == fast.flits_delivered == total
    # the window holds: at no issue instant has a CU more than `window` flits in flight
    for c in np.unique(trace["resource"][fast.flit_flow, 0]):
        mine = trace["resource"][fast.flit_flow, 0] == c
        iss, dl = fast.issue_ps[mine], fast.deliver_ps[mine]
        for t0 in iss:
            assert np.sum((iss <= t0) & (dl > t0)) <= s.max_outstanding_per_cu


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 3), st.integers(0, 2),
                          st.integers(0, 4)), min_size=1, max_size=12))
def test_vectorized_issue_order_equals_nested_loops(rows):
    issuer, phase, tb, step, flits = (np.asarray(c) for c in zip(*rows))
    assert issue_order(issuer, phase, tb, step, flits).tolist() == \
        reference_issue_order(issuer, phase, tb, step, flits)
