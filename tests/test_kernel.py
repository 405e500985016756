"""Tests of the ParallelKittens kernel cost model against hand calculations,
invariants and the paper's numbers (arXiv:2511.13940)."""

import argparse
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nuna_jax.kernel_presets import kernel_preset, kernel_preset_names, preset_sources
from nuna_jax.models import kernel as K

H100 = kernel_preset("h100")
M32 = 32768.0


def rel(a, b):
    return abs(float(a) - float(b)) / abs(float(b))


# ---------------------------------------------------------------- mechanisms
def test_mechanism_curve_hits_the_stated_points():
    # PK 3.2: peaks at 1 GB with all SMs; ~80% of peak at 256 MB (CE), 2 KB (TMA), 128 B (reg)
    assert rel(K.mechanism_bw(H100, "ce", 1e9), 368.82) < 1e-5
    assert rel(K.mechanism_bw(H100, "ce", 256 * 2**20), 0.8 * 368.82) < 1e-5
    assert rel(K.mechanism_bw(H100, "tma", 227 * 1024), 350.01) < 1e-5   # max message = reference
    assert rel(K.mechanism_bw(H100, "tma", 2048), 0.8 * 350.01) < 1e-5
    assert rel(K.mechanism_bw(H100, "reg", 128), 0.8 * 342.68) < 1e-5
    # bigger TMA transfers are split into 227 KB messages: no further gain, no loss
    assert float(K.mechanism_bw(H100, "tma", 1e9)) == pytest.approx(350.01, rel=1e-5)
    # ordering at 1 GB: CE > TMA > register (PK Fig. 2)
    bws = [float(K.mechanism_bw(H100, m, 1e9)) for m in ("ce", "tma", "reg")]
    assert bws[0] > bws[1] > bws[2]


def test_mechanism_sm_limit():
    # 5 SMs of TMA: 5/15 of the peak; 15 SMs: saturated; register needs 76
    assert rel(K.mechanism_bw(H100, "tma", 1e9, 5), 5 / 15 * 350.01) < 1e-5
    assert rel(K.mechanism_bw(H100, "tma", 1e9, 15), 350.01) < 1e-5
    assert rel(K.mechanism_bw(H100, "reg", 1e9, 38), 342.68 / 2) < 1e-4
    # copy engine is host-launched: SM count is irrelevant
    assert float(K.mechanism_bw(H100, "ce", 1e9, 1)) == float(K.mechanism_bw(H100, "ce", 1e9, 132))
    # B200: one SM of TMA ~45.7 GB/s (PK 3.2)
    b200 = kernel_preset("b200")
    assert rel(K.mechanism_bw(b200, "tma", 1e9, 1), 45.7) < 1e-4


# ---------------------------------------------------------------- terms by hand
def _hand_tma_bw(msg, peak=350.01, m80=2048.0, ref=227 * 1024.0):
    h = 0.2 * m80 * ref / (0.8 * ref - m80)
    return peak * (ref + h) / ref * msg / (msg + h)


def test_gemm_terms_by_hand():
    m, n, k = 4096.0, 8192.0, 2048.0
    t = K.fused_terms(H100, "gemm", m, n, k, 1)
    flops = 2 * m * n * k
    comp = flops / (989e3 * 0.75)
    mem = 2 * (m * k + k * n + m * n) / 3350.0
    assert rel(t["comp_ns"], comp) < 1e-6
    assert rel(t["mem_ns"], mem) < 1e-6
    assert float(t["comm_ns"]) == 0 and float(t["sync_ns"]) == 0 and float(t["non_overlap_ns"]) == 0
    assert rel(t["total_ns"], 4000 + max(comp, mem)) < 1e-6


def test_gemm_rs_intra_terms_by_hand():
    m = n = M32
    k, P = 512.0, 8
    t = K.fused_terms(H100, "gemm+rs", m, n, k, P, "intra")
    S = 2 * m * n
    nbytes = (P - 1) / P * S
    bw = _hand_tma_bw(2 * 128 * 256)        # one 64 KB output tile per message
    comm = nbytes / (bw * 0.847)            # atomic store_add at 0.847 of a plain store (H100 preset)
    comp = 2 * m * n * k / (989e3 * 0.75)
    mem = (2 * (m * k + k * n + m * n) + 2 * nbytes) / 3350.0
    waves = m * n / (128 * 256) / 132
    assert rel(t["comm_bytes"], nbytes) < 1e-6
    assert rel(t["comm_ns"], comm) < 1e-5
    assert rel(t["mem_ns"], mem) < 1e-5
    assert rel(t["non_overlap_ns"], min(comp, comm) / waves) < 1e-5
    assert rel(t["sync_ns"], waves * 64.0) < 1e-5
    assert rel(t["total_ns"], 4000 + max(comp, comm, mem) + min(comp, comm) / waves + waves * 64) < 1e-5


def test_pattern_bytes_by_hand():
    S, P = 1e9, 8
    assert rel(K.comm_pattern_bytes("ag", S, P), 7 / 8 * S) < 1e-6
    assert rel(K.comm_pattern_bytes("ar-p2p", S, P), 2 * 7 / 8 * S) < 1e-6
    assert rel(K.comm_pattern_bytes("ar-fabric", S, P), 9 / 8 * S) < 1e-6
    assert rel(K.comm_pattern_bytes("ar-atomic", S, P), 7 * S) < 1e-6
    # intra-SM GEMM+AR uses atomics into every peer: ~P x the in-fabric bytes (PK 3.3)
    t_i = K.fused_terms(H100, "gemm+ar", M32, M32, 4096, P, "intra")
    t_o = K.fused_terms(H100, "gemm+ar", M32, M32, 4096, P, "inter", 40)
    assert rel(t_i["comm_bytes"], 7 * 2 * M32 * M32) < 1e-6
    assert rel(t_o["comm_bytes"], 9 / 8 * 2 * M32 * M32) < 1e-6


def test_inter_terms_by_hand():
    c = 20.0
    t = K.fused_terms(H100, "gemm+ar", M32, M32, 4096, 8, "inter", c)
    comp = 2 * M32 * M32 * 4096 / (989e3 * 0.75 * (132 - c) / 132)
    nbytes = 9 / 8 * 2 * M32 * M32
    comm = nbytes / (c * 342.68 / 76)       # issue-limited: 20 SMs of register ops
    waves = M32 * M32 / (128 * 256) / (132 - c)
    assert rel(t["comp_ns"], comp) < 1e-5
    assert rel(t["comm_ns"], comm) < 1e-5
    assert rel(t["sync_ns"], waves * 832.0) < 1e-5


def test_collective_and_baseline_by_hand():
    S, P = 2 * M32 * M32, 8
    c = K.collective_terms(H100, "reduce-scatter", S, P, mechanism="tma")
    nbytes = 7 / 8 * S
    comm = nbytes / (_hand_tma_bw(min(S / P, 227 * 1024)) * 0.847)   # max-size messages, atomic adds
    assert rel(c["comm_ns"], comm) < 1e-5
    assert rel(c["total_ns"], 4000 + comm + 832) < 1e-5
    b = K.baseline_terms(H100, "gemm+rs", M32, M32, 4096, P, mechanism="tma")
    g = K.fused_terms(H100, "gemm", M32, M32, 4096, 1)
    assert rel(b["total_ns"], float(g["total_ns"]) + float(c["total_ns"])) < 1e-6
    # overlap never loses to the non-overlapped baseline here
    assert float(K.fused_terms(H100, "gemm+rs", M32, M32, 4096, P)["total_ns"]) < float(b["total_ns"])


# ---------------------------------------------------------------- hiding condition
def test_hiding_threshold_2197():
    # PK 3.3: K >= s R / (2 B), s = 2, R = 989e12 FLOP/s, B = 450e9 B/s
    hand = 2 * 989e12 / (2 * 450e9)
    k = float(K.hiding_threshold_k(H100))
    assert k == pytest.approx(hand, rel=1e-5)
    assert math.floor(k) == 2197
    # kernel level: only (P-1)/P of the output crosses the link
    kk = K.hiding_threshold_k(H100, level="kernel", n_gpus=8)
    assert kk == pytest.approx(7 / 8 * hand, rel=1e-3)
    # achieved rates: s R eff / (2 B_tma(64 KB) p2p_reduce_eff), the tile sent by atomic store_add
    ka = float(K.hiding_threshold_k(H100, achieved=True))
    assert ka == pytest.approx(2 * 989e12 * 0.75 / (2 * _hand_tma_bw(65536) * 0.847 * 1e9), rel=1e-5)


def test_hiding_threshold_matches_model_transition():
    # below the (kernel-level) threshold the intra-SM GEMM+RS is comm-bound, above compute-bound
    kk = K.hiding_threshold_k(H100, level="kernel", achieved=True)
    lo = K.fused_terms(H100, "gemm+rs", M32, M32, 0.9 * kk, 8)
    hi = K.fused_terms(H100, "gemm+rs", M32, M32, 1.1 * kk, 8)
    assert float(lo["comm_ns"]) > float(lo["comp_ns"])
    assert float(hi["comm_ns"]) < float(hi["comp_ns"])


# ---------------------------------------------------------------- SM split
@pytest.mark.parametrize("op,m,n,k,mech", [
    ("gemm+ar", M32, M32, 4096, None),
    ("gemm+rs", M32, M32, 4096, None),
    ("gemm+rs", M32, M32, 4096, "tma"),
    ("ag+gemm", 8192, 1024, 8192, None),
    ("ag+gemm", 65536, 8192, 65536, None),
])
def test_integer_search_and_gradient_agree(op, m, n, k, mech):
    c_int, t_int = K.best_comm_sms_search(H100, op, m, n, k, 8, mechanism=mech)
    c_star, c_round = K.best_comm_sms_grad(H100, op, m, n, k, 8, mechanism=mech)
    assert abs(c_star - c_int) <= 1.0
    assert c_round == c_int
    # and the search really is the minimum over all integers (brute force)
    ts = [float(K.fused_terms(H100, op, m, n, k, 8, "inter", c, mech)["total_ns"]) for c in range(1, 132)]
    assert int(np.argmin(ts)) + 1 == c_int and min(ts) == pytest.approx(t_int, rel=1e-6)


# ---------------------------------------------------------------- batching, jit, grad
def test_batching_equals_looping_shapes_and_hardware():
    ks = jnp.array([512.0, 1024.0, 2048.0, 4096.0, 8192.0])
    batched = K.fused_terms(H100, "gemm+rs", M32, M32, ks, 8)["total_ns"]
    looped = [float(K.fused_terms(H100, "gemm+rs", M32, M32, float(k), 8)["total_ns"]) for k in ks]
    np.testing.assert_allclose(np.asarray(batched), looped, rtol=1e-6)

    b200 = kernel_preset("b200")
    both = K.stack_hw(H100, b200)
    f = jax.jit(lambda hw, k: K.fused_terms(hw, "gemm+ar", M32, M32, k, 8, "inter", 30.0,
                                            validate=False)["total_ns"])
    vm = jax.vmap(jax.vmap(f, in_axes=(None, 0)), in_axes=(0, None))(both, ks)
    for i, hw in enumerate((H100, b200)):
        for j, k in enumerate(ks):
            ref = float(K.fused_terms(hw, "gemm+ar", M32, M32, float(k), 8, "inter", 30.0)["total_ns"])
            assert float(vm[i, j]) == pytest.approx(ref, rel=1e-5)


def test_grad_finite_everywhere():
    def total(hw, k):
        return K.fused_terms(hw, "gemm+rs", M32, M32, k, 8, "intra", validate=False)["total_ns"]
    for k in (256.0, 2197.0, 8192.0):
        g = jax.grad(total)(H100, k)
        leaves = [x for x in jax.tree_util.tree_leaves(g)]
        assert all(np.all(np.isfinite(np.asarray(x))) for x in leaves)
        # more compute throughput can only help
        assert float(g.peak_flops_per_ns) <= 0 and float(g.tma_bw_bytes_per_ns) <= 0
    gk = jax.grad(total, argnums=1)(H100, 8192.0)
    assert float(gk) == pytest.approx(2 * M32 * M32 / (989e3 * 0.75), rel=1e-3)


# ---------------------------------------------------------------- bad inputs
@pytest.mark.parametrize("kw,field", [
    (dict(m=0.0), "m"), (dict(n=-4.0), "n"), (dict(k=float("nan")), "k"),
    (dict(m=32768.0 + 8), "m / n_gpus"),           # 4097 rows per GPU: not whole 128-row tiles
    (dict(m=100.0), "m="),                         # not divisible by 8 GPUs
    (dict(n=1000.0), "n="),                        # intra-SM needs whole 256-column tiles
    (dict(n_gpus=1), "n_gpus"),
])
def test_bad_shapes_fail_clearly(kw, field):
    args = dict(m=M32, n=M32, k=4096.0, n_gpus=8)
    args.update(kw)
    with pytest.raises(ValueError, match=field.replace("/", "/").replace("(", r"\(")):
        K.fused_terms(H100, "gemm+rs", **args)


def test_bad_options_fail_clearly():
    with pytest.raises(ValueError, match="comm_sms"):
        K.fused_terms(H100, "gemm+rs", M32, M32, 4096, 8, "inter", 132)
    with pytest.raises(ValueError, match="comm_sms is required"):
        K.fused_terms(H100, "gemm+rs", M32, M32, 4096, 8, "inter")
    with pytest.raises(ValueError, match="copy engine cannot reduce"):
        K.fused_terms(H100, "gemm+rs", M32, M32, 4096, 8, mechanism="ce")
    with pytest.raises(ValueError, match="op must be"):
        K.fused_terms(H100, "gemm+xx", M32, M32, 4096, 8)
    with pytest.raises(ValueError, match="KernelHW.link_bw_bytes_per_ns"):
        kernel_preset("h100", link_bw_bytes_per_ns=-1.0)
    with pytest.raises(ValueError, match="KernelHW.gemm_eff"):
        kernel_preset("h100", gemm_eff=1.5)
    with pytest.raises(ValueError, match="unknown kernel preset"):
        kernel_preset("h999")
    # inter-SM handles tile/shard mismatch: only divisibility by n_gpus is needed
    K.fused_terms(H100, "gemm+rs", 32768.0 + 8, M32, 4096, 8, "inter", 20)


# ---------------------------------------------------------------- paper-level checks
def test_table3_share_definition_matches_paper_column():
    # the paper's share column equals (T_fused - T_gemm) / T_fused of its own times
    paper = [(2.071, 6.483, 0.68), (2.918, 6.613, 0.56), (5.567, 7.531, 0.26), (23.285, 25.325, 0.08)]
    for g, f, s in paper:
        assert (f - g) / f == pytest.approx(s, abs=0.005)
    # and ours is that expression of our own GEMM and GEMM+RS totals
    f = K.fused_terms(H100, "gemm+rs", M32, M32, 1024, 8)["total_ns"]
    g = K.fused_terms(H100, "gemm", M32, M32, 1024, 1)["total_ns"]
    assert float(K.non_overlapped_share(H100, M32, M32, 1024)) == pytest.approx(float((f - g) / f), rel=1e-6)


def test_table3_trend_is_a_prediction():
    # not fitted: the share falls from comm-bound (large) to hidden (< 1%) across the threshold
    shares = [float(K.non_overlapped_share(H100, M32, M32, k)) for k in (512, 1024, 2048, 4096, 8192)]
    assert shares[0] > 0.5 and shares[1] > 0.3
    assert all(a > b for a, b in zip(shares[:3], shares[1:4]))
    assert shares[3] < 0.01


def test_schedules_order_as_in_paper():
    # GEMM+AR: inter-SM (in-fabric) beats intra-SM (atomics); GEMM+RS: intra beats inter
    ar_i = K.fused_terms(H100, "gemm+ar", M32, M32, 4096, 8, "intra")["total_ns"]
    ar_o = K.kernel_terms(H100, "gemm+ar", M32, M32, 4096, 8, "inter")["total_ns"]
    rs_i = K.fused_terms(H100, "gemm+rs", M32, M32, 4096, 8, "intra")["total_ns"]
    rs_o = K.kernel_terms(H100, "gemm+rs", M32, M32, 4096, 8, "inter")["total_ns"]
    assert float(ar_i) / float(ar_o) > 2.0
    assert float(rs_o) / float(rs_i) > 1.0


# ---------------------------------------------------------------- presets and NUNA
def test_presets_have_sources():
    for name in ("h100", "h200", "b200", "nuna-table2"):
        src = preset_sources(name)
        assert src and all(isinstance(v, str) and v for v in src.values())
    assert {"h100", "h200", "b200", "nuna-table2", "h200-measured"} <= set(kernel_preset_names())


def test_nuna_comm_is_the_closed_form_direct_plan():
    """T_comm on the NUNA socket is the closed-form direct all-pairs plan: alpha (mean
    transfer latency) + (P-1)/P * S / scale-up bandwidth, by hand."""
    from nuna_jax.models import collectives as Cf
    s = kernel_preset("nuna-table2").system
    S, P = 1e8, 8
    alpha = float(Cf.alpha_ns(s, "mean"))
    assert float(K.nuna_collective_ns(s, "all-gather", S, P)) == pytest.approx(alpha + 7 / 8 * S / 7200.0, rel=1e-5)


def test_nuna_preset_runs_and_reports_path():
    hw = kernel_preset("nuna-table2")
    # T_comm is finite and differentiable in the System's port bandwidth
    f = lambda h: K.fused_terms(h, "gemm+rs", M32, M32, 512, 8, validate=False)["comm_ns"]  # noqa: E731
    t, g = jax.jit(jax.value_and_grad(f))(hw)
    assert np.isfinite(float(t)) and float(t) > 0
    assert K.nuna_comm_path() is not None
    assert float(g.system.port_bw_bytes_per_ns) < 0
    # bandwidth-dominated at 1.9 GB: close to bytes / scale-up bandwidth (7.2 TB/s)
    assert float(t) == pytest.approx(7 / 8 * 2 * M32 * M32 / 7200.0, rel=0.05)


# ---------------------------------------------------------------- CLI
def _cli(argv):
    from nuna_jax.cli import kernel as cli_kernel
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="command")
    cli_kernel.add_parser(sub)
    return cli_kernel.run(p.parse_args(["kernel"] + argv))


def test_cli_json_terms_sum(capsys):
    rc = _cli(["--op", "gemm+rs", "--m", "32768", "--n", "32768", "--k", "4096", "--gpus", "8",
               "--system", "h100", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    t = out["terms_ns"]
    body = max(t["comp_ns"], t["mem_ns"], t["comm_ns"])
    assert t["total_ns"] == pytest.approx(t["launch_ns"] + body + t["non_overlap_ns"] + t["sync_ns"], rel=1e-6)


def test_cli_inter_text(capsys):
    assert _cli(["--op", "gemm+ar", "--m", "32768", "--n", "32768", "--k", "4096",
                 "--schedule", "inter", "--comm-sms", "30"]) == 0
    text = capsys.readouterr().out
    for word in ("launch", "comp", "mem", "comm", "non_overlap", "sync", "total"):
        assert word in text
