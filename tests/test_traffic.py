"""build_traffic: per-flit slow reference, byte conservation, flit counts."""

from collections import defaultdict

import numpy as np
import pytest

from nuna_jax.placement import NAR_DOMAIN_BY, POLICIES, PolicyOptions, place
from nuna_jax.plans import COLLECTIVES, make_plan
from nuna_jax.presets import preset
from nuna_jax.lowering import build_traffic
from nuna_jax.traffic import Traffic, FIELDS, make_traffic


def reference_rows(s, plan, pl):
    """Walk every flit: (tb, step, port, read stack, read channel, dst stack, dst channel) -> [flits, bytes].
    A flit at byte address a of a stack uses channel (a // 256) mod hbm_routers_per_stack."""
    K = s.hbm_routers_per_stack
    out = defaultdict(lambda: [0, 0])
    base = plan.buffer_base(s.page_bytes)
    for r in range(plan.n_steps):
        tb = int(plan.step_tb[r])
        S = base[plan.src_buf[r]] + plan.src_off[r]
        D = base[plan.dst_buf[r]] + plan.dst_off[r]
        nb = int(plan.nbytes[r])
        for k in range(-(-nb // 256)):
            if pl.page_domain is None:  # the threadblock's domain
                d = int(pl.tb_domain[tb])
            else:                       # the destination page's address segment
                d = int(pl.page_domain[plan.dst_gpu[r], (D + 256 * k) // 4096])
            ports = pl.domains.ports[d]
            port = int(ports[((D + 256 * k) // 256) % len(ports)])
            rs = int(pl.page_stack[plan.src_gpu[r], (S + 256 * k) // 4096])
            ds = int(pl.page_stack[plan.dst_gpu[r], (D + 256 * k) // 4096])
            rc, dc = ((S + 256 * k) // 256) % K, ((D + 256 * k) // 256) % K
            e = out[(tb, int(plan.step_idx[r]), port, rs, int(rc), ds, int(dc))]
            e[0] += 1
            e[1] += min(256, nb - 256 * k)
    return dict(out)


def table_rows(t):
    out = {}
    for i in range(t.n_flows):
        key = (int(t.tb[i]), int(t.step[i]), int(t.port[i]), int(t.read_stack[i]), int(t.read_channel[i]),
               int(t.dst_stack[i]), int(t.dst_channel[i]))
        assert key not in out, "duplicate row"
        out[key] = [t.flits[i], t.bytes[i]]
    return out


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("coll,n,size,tbs,alg,g", [
    ("allgather", 4, 4 * 3 * 4096 + 4 * 70, 5, "direct", 3),   # unaligned, sub-flit tails
    ("allreduce", 3, 3 * 10000, 2, "ring", 3),
    ("alltoall", 5, 5 * 2 * 9000, 3, "direct", 5),   # 29/28-port domains: lcm(m, 3 channels) > m
])
@pytest.mark.parametrize("domain_by", NAR_DOMAIN_BY)
def test_matches_per_flit_reference(policy, coll, n, size, tbs, alg, g, domain_by):
    s = preset("table2", n_gpus=n)
    plan = make_plan(coll, n, size, tbs_per_gpu=tbs, algorithm=alg)
    pl = place(s, plan, policy, PolicyOptions(nar_domain_by=domain_by), nar_granularity=g)
    t = build_traffic(s, plan, pl)
    assert table_rows(t) == reference_rows(s, plan, pl)
    # columns that the reference keys do not cover
    assert np.array_equal(t.cu, pl.tb_cu[t.tb])
    assert np.array_equal(t.src_gpu, plan.tb_gpu[t.tb])


@pytest.mark.parametrize("coll", COLLECTIVES)
@pytest.mark.parametrize("n,size", [(2, 2 * 10**5), (8, 10**6), (16, 16 * 10**4 + 32)])
def test_byte_conservation(coll, n, size):
    s = preset("table2", n_gpus=n)
    plan = make_plan(coll, n, size)
    for policy in ("UA", "NAP+NAR"):
        t = build_traffic(s, plan, place(s, plan, policy))
        assert t.total_bytes == plan.total_bytes
        # flits = sum over steps of ceil(bytes / 256)
        assert t.total_flits == np.sum(-(-plan.nbytes // 256))
        assert np.all(t.src_gpu != t.dst_gpu)
        per_tb = np.bincount(t.tb, weights=t.bytes, minlength=plan.n_tbs)
        assert np.array_equal(per_tb, plan.tb_bytes())


def test_large_size_is_closed_form():
    """1 GB All-Gather on 8 GPUs: 27 M flits, built from ~2 M pages without a row per flit.  Rows follow
    runs of pages on one stack; Algorithm 1's served budget switches stack at least once per window
    (<= 91 pages of 4 KiB = 1,456 flits), so a row averages well over 100 flits but not thousands."""
    s = preset("table2")
    plan = make_plan("allgather", 8, 10**9)
    t = build_traffic(s, plan, place(s, plan, "nap+nar"))
    assert t.total_bytes == 7 * 10**9
    assert t.total_flits == 56 * -(-125_000_000 // 256)
    assert t.n_flows * 100 < t.total_flits


def test_traffic_fields_unchanged():
    assert FIELDS == ("src_gpu", "cu", "read_stack", "read_channel", "port", "dst_gpu", "dst_stack", "dst_channel",
                      "flits", "bytes", "tb", "step", "phase", "weight")
    assert Traffic.__dataclass_fields__.keys() >= set(FIELDS)


def test_weight_defaults_to_one_and_is_validated():
    s = preset("table2", n_gpus=2)
    cols = dict(src_gpu=[0, 0], cu=[0, 1], read_stack=[0, 0], port=[0, 1], dst_gpu=[1, 1], dst_stack=[0, 0],
                flits=[2.0, 3.0])
    t = make_traffic(s, **cols)
    assert np.all(t.weight == 1.0) and t.is_hard
    assert not make_traffic(s, weight=[1.0, 0.5], **cols).is_hard
    for bad in ([1.0, 1.5], [1.0, -0.1], [1.0, np.nan]):
        with pytest.raises(ValueError, match="weight"):
            make_traffic(s, weight=bad, **cols)


def test_phase_and_step_columns():
    s = preset("table2", n_gpus=4)
    plan = make_plan("allreduce", 4, 4 * 4096, tbs_per_gpu=3)
    t = build_traffic(s, plan, place(s, plan, "ua"))
    assert set(t.phase) == {0, 1}
    # the two-shot All-Reduce's second (All-Gather) step of each threadblock is phase 1
    assert np.all(t.phase[t.step == 1] == 1) and np.all(t.phase[t.step == 0] == 0)


def reference_order(s, plan, pl):
    """The row order of ``build_traffic`` from a per-flit walk: by step row, then the position in the
    step's hash sequence at which the row first comes up modulo its residue modulus
    ``lcm(domain ports, channels)``, then read stack, destination stack, domain."""
    K = s.hbm_routers_per_stack
    base = plan.buffer_base(s.page_bytes)
    first = {}
    for r in range(plan.n_steps):
        tb = int(plan.step_tb[r])
        S = base[plan.src_buf[r]] + plan.src_off[r]
        D = base[plan.dst_buf[r]] + plan.dst_off[r]
        for k in range(-(-int(plan.nbytes[r]) // 256)):
            if pl.page_domain is None:
                d = int(pl.tb_domain[tb])
            else:
                d = int(pl.page_domain[plan.dst_gpu[r], (D + 256 * k) // 4096])
            ports = pl.domains.ports[d]
            port = int(ports[((D + 256 * k) // 256) % len(ports)])
            rs = int(pl.page_stack[plan.src_gpu[r], (S + 256 * k) // 4096])
            ds = int(pl.page_stack[plan.dst_gpu[r], (D + 256 * k) // 4096])
            key = (tb, int(plan.step_idx[r]), port, rs, int(((S + 256 * k) // 256) % K), ds,
                   int(((D + 256 * k) // 256) % K))
            if key not in first:
                first[key] = (r, k % np.lcm(len(ports), K), rs, ds, d)
    return sorted(first, key=first.get)


@pytest.mark.parametrize("policy", ["UA", "NUMA+NAR", "NAP+NAR"])
@pytest.mark.parametrize("coll,n,size,tbs,alg,g", [
    ("allgather", 4, 4 * 3 * 4096 + 4 * 70, 5, "direct", 3),
    ("alltoall", 5, 5 * 2 * 9000, 3, "direct", 5),
    ("allgather", 3, 3 * 40 * 4096 + 3 * 300, 2, "direct", 1),   # long steps: dense residue counts
])
def test_row_order_and_dtypes(policy, coll, n, size, tbs, alg, g):
    """Rows in the documented order (an independent per-flit walk), columns int32 / float64 as
    ``make_traffic`` makes them."""
    s = preset("table2", n_gpus=n)
    plan = make_plan(coll, n, size, tbs_per_gpu=tbs, algorithm=alg)
    pl = place(s, plan, policy, nar_granularity=g)
    t = build_traffic(s, plan, pl)
    got = [(int(t.tb[i]), int(t.step[i]), int(t.port[i]), int(t.read_stack[i]), int(t.read_channel[i]),
            int(t.dst_stack[i]), int(t.dst_channel[i])) for i in range(t.n_flows)]
    assert got == reference_order(s, plan, pl)
    ref = make_traffic(s, **{k: getattr(t, k) for k in FIELDS})
    for k in FIELDS:
        assert getattr(t, k).dtype == getattr(ref, k).dtype, k


def test_residue_counts_dense_sparse_mixed():
    """``lowering._residue_counts`` (groups counted densely or sparsely, the two parts merged) against
    counting flit by flit, on random runs."""
    from nuna_jax.lowering import _Segments, _residue_counts
    rng = np.random.default_rng(7)
    n_groups = 60
    m_of = rng.choice([3, 6, 48, 144], n_groups)
    group = np.sort(rng.integers(0, n_groups, 400))
    length = np.where(group % 2 == 0, rng.integers(1, 3, 400), rng.integers(1, 700, 400))   # even groups: sparse
    m = m_of[group]
    r0 = rng.integers(0, 10**6, 400) % m
    seg = _Segments(np.zeros(400, np.int64), np.zeros(400, np.int64), length, np.zeros(400, bool))
    g, r, c = _residue_counts(seg, group, n_groups, r0, m)
    ref = defaultdict(int)
    for gg, L, a, mm in zip(group, length, r0, m):
        for i in range(int(L)):
            ref[(int(gg), int((a + i) % mm))] += 1
    assert list(zip(g.tolist(), r.tolist())) == sorted(ref)
    assert c.tolist() == [ref[k] for k in sorted(ref)]
    sparse = np.bincount(group, weights=np.minimum(length, m), minlength=n_groups) <= m_of + 1
    assert sparse[group].any() and (~sparse[group]).any()      # both parts were used
