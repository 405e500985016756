"""``intervals.range_ext`` with ``plan=SPLIT`` (a CPU hardware sweep's two scatters) equals the one
concatenated scatter bit for bit, max and min, on the runs of real traffic (every direction, empty
and inactive runs included)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nuna_jax import preset
from nuna_jax.models.contention import intervals as IV
from nuna_jax.models.contention import runs_engine as RE
from nuna_jax.scenario import make_scenario


@pytest.mark.slow   # ~11 CPU s on the loaded 2-core CPU; the default suite covers SPLIT through
#                     test_sweep.py's bit-for-bit hardware sweep on a CPU
def test_split_equals_the_concatenated_scatter():
    s = preset("table2", n_gpus=2)
    t = make_scenario(s, collective="allreduce", size_bytes=200_000, policy="UA", tbs_per_gpu=4).traffic
    t = jax.tree_util.tree_map(jnp.asarray, t)
    P = int(np.max(np.asarray(t.phase))) + 1
    rng = np.random.default_rng(0)
    runs = lambda t: RE.runs(s, t, RE.flow_times(s, t), P)  # noqa: E731
    val = jnp.asarray(rng.normal(size=jax.eval_shape(runs, t).lo.shape).astype(np.float32) * 100)  # one per run

    @jax.jit                                  # one compilation: the runs, both plans, max and min
    def both(t, v):
        ru = runs(t)
        return ru.act & (ru.hi > ru.lo), {f"{op} {plan}": IV.range_ext(s, P, ru, v, ru.act, op, plan)
                                           for op in ("max", "min") for plan in (None, IV.SPLIT)}
    on, got = both(t, val)
    assert np.asarray(on).any() and not np.asarray(on).all()     # empty or inactive runs are in the test
    for op in ("max", "min"):
        assert len(got[f"{op} None"]) == 4
        for a, b in zip(got[f"{op} None"], got[f"{op} {IV.SPLIT}"]):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ValueError, match="unknown plan"):
        jax.eval_shape(lambda t: IV.range_ext(s, P, runs(t), val, None, "max", "nope"), t)
