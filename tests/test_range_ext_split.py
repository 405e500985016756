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


def test_split_equals_the_concatenated_scatter():
    s = preset("table2", n_gpus=2)
    t = make_scenario(s, collective="allreduce", size_bytes=200_000, policy="UA", tbs_per_gpu=4).traffic
    t = jax.tree_util.tree_map(jnp.asarray, t)
    P = int(np.max(np.asarray(t.phase))) + 1
    ru = RE.runs(s, t, RE.flow_times(s, t), P)
    on = np.asarray(ru.act & (ru.hi > ru.lo))
    assert on.any() and not on.all()                 # empty or inactive runs are in the test
    rng = np.random.default_rng(0)
    val = jnp.asarray(rng.normal(size=ru.lo.shape[0]).astype(np.float32) * 100)
    for op in ("max", "min"):
        both = jax.jit(lambda v, op=op: (IV.range_ext(s, P, ru, v, ru.act, op, None),
                                         IV.range_ext(s, P, ru, v, ru.act, op, IV.SPLIT)))
        want, got = both(val)
        assert len(want) == 4
        for a, b in zip(want, got):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ValueError, match="unknown plan"):
        IV.range_ext(s, P, ru, val, ru.act, "max", "nope")
