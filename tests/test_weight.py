"""The flow weight (docs/model.md, "Flow weight"): busy times count weight x flits; the smooth
estimate is a smooth function of the weights whose gradient keeps the sign of a near/far latency
difference and does not vanish in the middle of the range."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nuna_jax.models import contention as C
from nuna_jax.presets import preset
from nuna_jax.traffic import make_traffic

S2 = preset("table2", n_gpus=2)
# one threadblock's 4 flits, leaving either through port 0 (next to CU 0: near) or port 143 (far edge)
PAIR = dict(src_gpu=[0, 0], cu=[0, 0], read_stack=[0, 0], port=[0, 143], dst_gpu=[1, 1], dst_stack=[0, 0],
            flits=[4.0, 4.0])


@pytest.fixture(params=["runs", "stages"])
def engine(request, monkeypatch):
    monkeypatch.setattr(C, "ENGINE", request.param)
    return request.param


def _pair(p_far):
    return make_traffic(S2, weight=[1.0 - p_far, p_far], **PAIR)


def test_near_far_gradient_sign_and_magnitude(engine):
    t = _pair(0.5)
    lat = np.asarray(C.flow_latency_ns(S2, t))
    gap = lat[1] - lat[0]
    assert gap > 300  # the far port is really far: 23 extra hops each way

    def f(p):
        return C.smooth_estimate_ns(S2, t.replace(weight=jnp.stack([1.0 - p, p])), n_phases=1)

    for p in (0.01, 0.1, 0.5, 0.9, 0.99):
        v, g = jax.value_and_grad(f)(jnp.float32(p))
        assert np.isfinite(float(v)) and np.isfinite(float(g))
        assert float(g) > 0.05 * gap, (p, float(g), gap)     # more weight on the far path: slower
    # the ends are the two discrete placements' smooth estimates
    near = C.smooth_estimate_ns(S2, make_traffic(S2, **{k: v[:1] for k, v in PAIR.items()}), n_phases=1)
    far = C.smooth_estimate_ns(S2, make_traffic(S2, **{k: v[1:] for k, v in PAIR.items()}), n_phases=1)
    assert float(f(jnp.float32(1.0))) == pytest.approx(float(far), rel=1e-5)
    assert float(f(jnp.float32(0.0))) == pytest.approx(float(near), rel=1e-5)


def test_busy_counts_weight_times_flits(engine):
    t = _pair(0.25)
    busy = np.asarray(C.resource_busy_ns(S2, t, n_phases=1))[0]
    svc_port = S2.flit_bytes / S2.port_bw_bytes_per_ns
    from nuna_jax.path import resource_layout
    lay = resource_layout(S2)
    assert busy[lay.offset_egress + 0] == pytest.approx(0.75 * 4 * svc_port, rel=1e-6)
    assert busy[lay.offset_egress + 143] == pytest.approx(0.25 * 4 * svc_port, rel=1e-6)
    # the CU issues the expected 4 flits, one NoC cycle each, whichever port is chosen
    assert busy[lay.offset_cu + 0] == pytest.approx(4 / S2.noc_clock_ghz, rel=1e-6)


def test_zero_weight_row_is_absent(engine):
    t = make_traffic(S2, weight=[1.0, 0.0], **PAIR)
    alone = make_traffic(S2, **{k: v[:1] for k, v in PAIR.items()})
    a = C.analyze(S2, t, n_phases=1)
    b = C.analyze(S2, alone, n_phases=1)
    for name in ("estimate_ns", "lower_bound_ns", "smooth_estimate_ns"):
        assert float(getattr(a, name)) == pytest.approx(float(getattr(b, name)), rel=1e-6)
    g = jax.grad(lambda w: C.smooth_estimate_ns(S2, t.replace(weight=w), n_phases=1))(jnp.array([1.0, 0.0]))
    assert np.all(np.isfinite(np.asarray(g)))


def test_weight_one_changes_nothing(engine):
    """Weight 1 written out equals the default column: same estimate, bound and smooth estimate."""
    t1 = make_traffic(S2, **PAIR)
    t2 = make_traffic(S2, weight=[1.0, 1.0], **PAIR)
    a, b = C.analyze(S2, t1, n_phases=1), C.analyze(S2, t2, n_phases=1)
    assert float(a.smooth_estimate_ns) == float(b.smooth_estimate_ns)
    assert float(a.estimate_ns) == float(b.estimate_ns)
