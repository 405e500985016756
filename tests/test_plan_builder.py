"""The vectorized plan builder (``plans._Builder.add_streams``, ``plans._chunk_ids``) against a
per-stream reference written from the docstrings: threadblock split, piece sizes, offsets, row
order and chunk ids, on every collective and algorithm and uneven sizes."""

import itertools

import numpy as np
import pytest

from nuna_jax import plans
from nuna_jax.plans import _STEP_FIELDS, make_plan, split_elems


class _ReferenceBuilder(plans._Builder):
    """One stream at a time, as the docstring of ``add_streams`` says."""

    def add_streams(self, g, streams, phase, elem):
        streams = [tuple(int(x) for x in r) for r in np.asarray(streams, np.int64).reshape(-1, 6)]
        m, T = len(streams), self.tbs
        for j, (sb, so, dg, db, do, nb) in enumerate(streams):
            if nb <= 0:
                continue
            if T >= m:
                tbs = list(range(j, T, m))
                el = split_elems(nb // elem, len(tbs)) * elem
                off = 0
                for t, e in zip(tbs, el):
                    if e > 0:
                        self.rows.append(np.array([[g, t, sb, so + off, dg, db, do + off, e, phase]], np.int64))
                    off += int(e)
            else:
                self.rows.append(np.array([[g, j % T, sb, so, dg, db, do, nb, phase]], np.int64))


def _reference_chunk_ids(gpu, buf, off, nb):
    out = np.zeros(len(gpu), np.int64)
    for key in set(zip(gpu.tolist(), buf.tolist())):
        sel = [i for i in range(len(gpu)) if (gpu[i], buf[i]) == key]
        ranges = sorted(set((int(off[i]), int(nb[i])) for i in sel))
        for i in sel:
            out[i] = ranges.index((int(off[i]), int(nb[i])))
    return out


@pytest.mark.parametrize("coll,alg", list(itertools.product(plans.COLLECTIVES, plans.ALGORITHMS)))
def test_builder_matches_reference(monkeypatch, coll, alg):
    for n, size, tbs, align in itertools.product([2, 3, 5], [7, 999, 100_001], [None, 1, 2, 7, 9], [1, 4096]):
        new = make_plan(coll, n, size, algorithm=alg, tbs_per_gpu=tbs, slot_align_bytes=align)
        with monkeypatch.context() as mp:
            mp.setattr(plans, "_Builder", _ReferenceBuilder)
            ref = make_plan(coll, n, size, algorithm=alg, tbs_per_gpu=tbs, slot_align_bytes=align)
        for k in _STEP_FIELDS + ("tb_gpu", "tb_local"):
            a, b = getattr(new, k), getattr(ref, k)
            assert a.dtype == b.dtype and np.array_equal(a, b), (n, size, tbs, align, k)


def test_chunk_ids_match_reference():
    rng = np.random.default_rng(0)
    for _ in range(20):
        k = int(rng.integers(1, 60))
        cols = [rng.integers(0, 3, k), rng.integers(0, 3, k), rng.integers(0, 5, k) * 100, rng.integers(1, 4, k)]
        np.testing.assert_array_equal(plans._chunk_ids(*cols), _reference_chunk_ids(*cols))
