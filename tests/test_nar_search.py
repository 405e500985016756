"""NAP's NAR granularity search through one compiled call (issue 23, item 1): the batched
estimate (``contention.estimate_many``) gives the one-at-a-time numbers and choice, and a sweep
of scenarios compiles nothing after the first of each shape."""

import dataclasses

import jax
import numpy as np
import pytest

from nuna_jax.lowering import build_traffic
from nuna_jax.models import contention as K
from nuna_jax.nar import max_useful_granularity
from nuna_jax.placement import PolicyOptions, place
from nuna_jax.presets import preset
from nuna_jax.scenario import generated_plan, make_scenario, search_nar_granularity

ULP = 2.0 ** -23   # float32 rounding, relative


def _one_at_a_time(s, plan, policy="nap+nar"):
    """The search as it was: every candidate placed, lowered and estimated by itself."""
    costs, best = {}, None
    for g in range(1, min(max_useful_granularity(s), s.n_io_ports) + 1):
        t = build_traffic(s, plan, place(s, plan, policy, PolicyOptions(nar_granularity=g)))
        costs[g] = float(K.estimate_ns(s, K.pad_flows(t, K.bucket_rows(t.n_flows)),
                                       n_phases=K.resolve_n_phases(t)))
        if best is None or costs[g] < costs[best]:
            best = g
    return costs, best


@pytest.mark.parametrize("coll,n,size", [("allgather", 2, 10**5), ("allreduce", 2, 10**5),
                                         ("alltoall", 2, 10**6)])
def test_batched_search_equals_one_at_a_time(coll, n, size):
    s = preset("table2", n_gpus=n)
    plan = generated_plan(s, coll, size)
    ref, ref_g = _one_at_a_time(s, plan)
    pl, t = search_nar_granularity(s, plan, "nap+nar")
    assert sorted(pl.granularity_search) == sorted(ref)
    for g, v in ref.items():   # equal to float32 rounding (XLA fuses the two programs differently)
        assert abs(pl.granularity_search[g] - v) <= 2 * ULP * abs(v), (g, pl.granularity_search[g], v)
    assert pl.routing_granularity == ref_g
    forced = build_traffic(s, plan, place(s, plan, "nap+nar", PolicyOptions(nar_granularity=ref_g)))
    assert all(np.array_equal(getattr(t, k), getattr(forced, k)) for k in ("flits", "port", "cu", "bytes"))


def test_estimate_many_keeps_order_and_groups_by_phases():
    s = preset("table2", n_gpus=2)
    ts = [make_scenario(s, collective=c, size_bytes=z, policy=p).traffic
          for c, z, p in [("allgather", 10**5, "nap"), ("allreduce", 10**5, "ua"), ("allgather", 3 * 10**6, "ua"),
                          ("allgather", 10**5, "ua+nar")]]
    assert len({K.resolve_n_phases(t) for t in ts}) == 2
    assert len({K.bucket_rows(t.n_flows) for t in ts}) >= 2
    one = np.array([float(K.estimate_ns(s, K.pad_flows(t, K.bucket_rows(t.n_flows)))) for t in ts])
    many = K.estimate_many(s, ts)
    np.testing.assert_allclose(many, one, rtol=2 * ULP, atol=0)
    # one table per call (a small row budget) through vmap instead of lax.map: the same numbers
    np.testing.assert_allclose(K.estimate_many(s, ts, max_batch_rows=256, vectorize=True), many, rtol=2 * ULP,
                               atol=0)
    assert K.estimate_many(s, []).shape == (0,)


def test_batch_bucket_few_shapes():
    assert [K.batch_bucket(n) for n in (1, 2, 3, 4, 5, 7, 9, 12, 13, 17, 25)] == [1, 2, 3, 4, 6, 8, 12, 12, 16, 24,
                                                                                   32]
    assert all(n <= K.batch_bucket(n) < 1.5 * n + 1 for n in range(1, 300))   # under a third wasted
    # rows: the path model's buckets up to one chunk, then two shapes per doubling
    assert [K.batch_rows(n) for n in (1, 300, 5000, 32768, 32769, 50000, 10**6)] == [
        K.MIN_BATCH_ROWS, K.MIN_BATCH_ROWS, 8192, 32768, 49152, 65536, 1 << 20]
    assert len({K.batch_rows(n) for n in range((1 << 20) + 1, 1 << 21, 997)}) == 2


def test_pad_traffic_on_the_host_is_numpy_and_equal():
    s = preset("table2", n_gpus=2)
    t = make_scenario(s, collective="allgather", size_bytes=10**5, policy="ua").traffic
    host = K.pad_traffic(t, t.n_flows + 44)
    dev = K.pad_traffic(jax.tree_util.tree_map(jax.numpy.asarray, t), t.n_flows + 44)
    for k in ("flits", "port", "weight", "phase"):
        assert isinstance(getattr(host, k), np.ndarray)
        assert getattr(host, k).dtype == getattr(dev, k).dtype
        np.testing.assert_array_equal(getattr(host, k), np.asarray(getattr(dev, k)))




def test_no_compilation_after_the_first_of_each_shape(count_compiles):
    s = preset("table2", n_gpus=2)
    # All-Gather at several sizes: every candidate below 256 flows -> one (phases, rows, batch) shape;
    # All-Reduce: more phases -> a second shape
    grid = [("allgather", z) for z in (10**5, 2 * 10**5, 3 * 10**5)] + [("allreduce", z) for z in (10**5, 2 * 10**5)]
    programs = lambda: K.api.estimate_batch_jit._cache_size() + K.api.estimate_batch_quick_jit._cache_size()  # noqa: E731
    with count_compiles() as cnt:
        per_point = []
        for coll, z in grid:
            n0, c0 = cnt.n, programs()
            make_scenario(s, collective=coll, size_bytes=z, policy="nap+nar")
            per_point.append((cnt.n - n0, programs() - c0))
        for compiles, new_programs in per_point[1:]:
            assert new_programs in (0, 1)
            assert compiles <= new_programs, per_point   # at most the new shape's one program
        assert per_point[1] == (0, 0) and per_point[2] == (0, 0) and per_point[4] == (0, 0), per_point
        n0 = cnt.n
        for coll, z in grid:   # the same grid again: nothing to compile
            make_scenario(s, collective=coll, size_bytes=z, policy="nap+nar")
        assert cnt.n == n0


def test_streamed_search_estimates_each_candidate_alone(monkeypatch):
    """Where estimate_many would estimate one table per call (here forced with a small
    MAX_BATCH_ROWS), the search estimates each candidate alone as it is built (estimate_many of the
    one table, the value the sweep's build workers compute) and builds each candidate once; its
    choice and traffic are those of the fastest.  Checked against estimate_many called here, also
    where the longest table comes mid-search (granularity 5's table padded with zero rows)."""
    s = preset("table2", n_gpus=8)
    plan = generated_plan(s, "allgather", 10**6, tbs_per_gpu=28)
    real = build_traffic
    built = []

    def lowering(system, plan, pl, **kw):
        built.append(pl.routing_granularity)
        t = real(system, plan, pl, **kw)
        return K.pad_flows(t, 3 * t.n_flows) if pl.routing_granularity == 5 else t

    cands = {g: lowering(s, plan, place(s, plan, "nap+nar", PolicyOptions(nar_granularity=g)))
             for g in range(1, min(max_useful_granularity(s), s.n_io_ports) + 1)}
    rows = [K.batch_rows(t.n_flows) for t in cands.values()]
    assert rows.index(max(rows)) == 4 and rows[0] < max(rows)    # the longest table comes at g = 5
    small = rows[0]                       # one table per call at every row count of the search
    ref = {g: float(K.estimate_many(s, [t], max_batch_rows=small)[0]) for g, t in cands.items()}
    ref_g = min(ref, key=lambda g: (ref[g], g))
    monkeypatch.setattr(K.report, "MAX_BATCH_ROWS", small)
    monkeypatch.setattr("nuna_jax.scenario.build_traffic", lowering)
    built.clear()
    pl, t = search_nar_granularity(s, plan, "nap+nar")
    assert pl.granularity_search == ref                   # bit for bit
    assert pl.routing_granularity == ref_g
    assert built == list(cands)                           # each candidate built once
    for f in ("flits", "port", "dst_stack", "tb"):
        np.testing.assert_array_equal(getattr(t, f), getattr(cands[ref_g], f))
    # the sweep's split search (one task per granularity) computes the same values
    from nuna_jax.sweep import trafficpool
    pt = {"collective": "allgather", "size": 10**6, "policy": "nap+nar", "tbs_per_gpu": 28, "algorithm": "direct"}
    monkeypatch.setattr("nuna_jax.scenario.build_traffic", real)
    for g in (1, 2):
        k, gg, st, v = trafficpool.nap_candidate((0, s, pt, g))
        assert st == "ok" and v == float(K.estimate_many(s, [cands[g]])[0])
