"""End-to-end LLM model (issue 13): hand-calculated layers, collective sizes, memory fit, CLI errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from nuna_jax.cli import main
from nuna_jax.models.llm import layers
from nuna_jax.models.llm.configs import load_model, model_names
from nuna_jax.models.llm.hardware import hbm_capacity_bytes, machine
from nuna_jax.presets import preset

TABLE2 = preset("table2")
HW = machine(TABLE2)


def m_(name):
    return layers.model_arrays(load_model(name))


def test_twelve_models_and_deepseek_expert_width():
    names = model_names()
    assert len(names) == 12
    ds = load_model("deepseek-v3.2")
    assert (ds.moe_ffn, ds.ffn, ds.n_experts, ds.top_k, ds.dense_layers) == (2048, 18432, 256, 8, 3)


def test_dense_attention_decode_by_hand():
    # Llama-3.1-70B: H 8192, 64 heads, 8 KV heads, d 128; TP 8, one request, 4096 tokens of context
    a = layers.attention(m_("llama-70b"), 8, 1, 4096, prefill=False)
    params = 8192 * 64 * 128 + 2 * 8192 * 8 * 128 + 64 * 128 * 8192
    flops = 2 * params / 8 + 4 * 128 * (64 / 8) * 4096        # projections + QK^T and PV
    kv_bytes_per_token = 2 * 1 * 128 * 2                        # K and V of one KV head per GPU, bf16
    assert float(a["flops"]) == pytest.approx(flops)
    assert float(a["bytes"]) == pytest.approx(params * 2 / 8 + kv_bytes_per_token * 4096)


def test_dense_ffn_and_causal_pairs_by_hand():
    f = layers.dense_ffn(m_("llama-70b"), 8, 1000)
    assert float(f["flops"]) == pytest.approx(2 * 3 * 8192 * 28672 * 1000 / 8)
    assert float(f["bytes"]) == pytest.approx(3 * 8192 * 28672 * 2 / 8)
    assert float(layers.causal_pairs(4.0, 0.0)) == 10          # 1 + 2 + 3 + 4
    assert float(layers.causal_pairs(5.0, 2.0)) == 1 + 2 + 2 + 2 + 2


def test_prefill_attention_by_hand():
    # Llama-2-7B, TP 1, 2 requests of 8 tokens: every query sees its causal prefix (36 pairs)
    a = layers.attention(m_("llama-7b"), 1, 2, 8, prefill=True)
    params = 4 * 4096 * 4096
    assert float(a["flops"]) == pytest.approx(2 * params * 16 + 4 * 128 * 32 * 2 * 36)


def test_moe_layer_by_hand():
    # Mixtral-8x7B: 8 experts of 3 x 4096 x 14336, top-2; EP 8, TP 1, 1024 tokens: every expert is hit
    r = layers.moe(m_("mixtral-8x7b"), 1, 8, 1024)
    w = 3 * 4096 * 14336
    assert float(r["flops"]) == pytest.approx(2 * 1024 * (4096 * 8 + 2 * w))
    assert float(r["bytes"]) == pytest.approx((1 * w + 4096 * 8) * 2, rel=1e-6)
    assert float(r["weight_bytes"]) == pytest.approx((1 * w + 4096 * 8) * 2)
    # decode, one token on each of the 8 EP GPUs: a GPU's expert is missed by all 8 tokens
    # with probability (6/8)^8 (each token picks 2 of 8)
    r1 = layers.moe(m_("mixtral-8x7b"), 1, 8, 1)
    assert float(r1["bytes"]) == pytest.approx(((1 - 0.75 ** 8) * w + 4096 * 8) * 2, rel=1e-6)


def test_collective_sizes_dense_tp_layer():
    r = layers.step(m_("llama-70b"), HW, 8, 1, 1, 1, 1, 2048, prefill=True)
    act = 2048 * 8192 * 2                                         # tokens x hidden x bf16
    kinds = [k for k, _ in layers.COLLECTIVE_SLOTS]
    assert kinds[0] == kinds[1] == "allreduce"
    assert float(r["coll_bytes"][0]) == float(r["coll_bytes"][1]) == act
    assert float(r["coll_count"][0]) == 80 and float(r["coll_count"][1]) == 80   # two per layer
    assert float(r["coll_group"][0]) == 8
    assert float(r["coll_count"][2]) == 0                          # no All-to-All in a dense model
    assert float(r["coll_bytes"][5]) == 1 * 128256 * 2             # LM-head logits of the last position


def test_collective_sizes_moe_ep():
    # Mixtral-8x7B decode, 16 requests, TP 2, DP 4, EP 8: 4 requests per replica, 2 tokens per GPU
    r = layers.step(m_("mixtral-8x7b"), HW, 2, 8, 4, 1, 16, 4096, prefill=False)
    assert float(r["coll_bytes"][2]) == 2 * min(2, 8) * 4096 * 2   # tokens x top-k x hidden x bf16
    assert float(r["coll_count"][2]) == 2 * 32                     # dispatch + combine per MoE layer
    assert float(r["coll_group"][2]) == 8
    assert float(r["coll_bytes"][3]) == 4 * 4096 * 2               # All-Gather over TP of the replica
    assert float(r["coll_count"][1]) == 0                          # no dense FFN layer


def test_memory_by_hand_and_fit_filter():
    r = layers.step(m_("llama-7b"), HW, 1, 1, 1, 1, 1, 4096, prefill=False)
    per_layer = 4 * 4096 * 4096 * 2 + 3 * 4096 * 11008 * 2 + 2 * 32 * 128 * 2 * 4096
    assert float(r["mem_bytes"]) == pytest.approx(32 * per_layer + 2 * 4096 * 32000 * 2, rel=1e-6)
    # Llama-3.1-405B in bf16 (~810 GB) cannot fit on 2 GPUs of 384 GB; it fits on 4
    assert 2 * hbm_capacity_bytes(TABLE2) < 405e9 * 2 < 4 * hbm_capacity_bytes(TABLE2)
    from nuna_jax.models.llm.search import search
    with pytest.raises(ValueError, match="fits"):
        search("llama-405b", 2, "decode", TABLE2)
    r4 = search("llama-405b", 4, "decode", TABLE2)
    assert r4["mem_gb_per_gpu"] * 1e9 <= hbm_capacity_bytes(TABLE2)
    assert r4["configs_fit"] < r4["configs_valid"]                # some valid configurations were rejected


def test_search_matches_brute_force():
    """The batched program's pick equals a Python loop over the grid with the same costs."""
    from nuna_jax.models.llm import search as S
    r = S.search("mixtral-8x7b", 8, "decode", TABLE2, batches=[1, 4], seqs=[1024])
    best = None
    for tp in (1, 2, 4, 8):
        for ep in (1, 2, 4, 8):
            for dp in (1, 2, 4, 8):
                for pp in (1, 2, 4, 8):
                    for b in (1, 4):
                        if tp * dp * pp != 8 or (tp * dp) % ep or b % dp:
                            continue
                        pins = dict(tp=tp, ep=ep, dp=dp, pp=pp)
                        one = S.search("mixtral-8x7b", 8, "decode", TABLE2, batches=[b], seqs=[1024], pins=pins)
                        if best is None or one["time_ms"]["ua"] < best["time_ms"]["ua"]:
                            best = one
    assert r["config"] == best["config"]
    assert r["time_ms"]["ua"] == pytest.approx(best["time_ms"]["ua"])


def test_split_adds_up_and_compute_unchanged():
    from nuna_jax.models.llm.search import search
    r = search("qwen3-30b-a3b", 16, "decode", TABLE2)
    for pol in ("ua", "nap_nar"):
        assert sum(r["split_ms"][pol].values()) == pytest.approx(r["time_ms"][pol], rel=1e-5)
    assert r["split_ms"]["ua"]["compute"] == r["split_ms"]["nap_nar"]["compute"]


def test_table_interpolation_hits_grid_points():
    import jax.numpy as jnp
    from nuna_jax.models.llm.collective_table import interp_time_ns, load_table
    t = load_table("table2")
    ls, lt = jnp.log(jnp.asarray(t["sizes_bytes"], float)), jnp.log(jnp.asarray(t["time_ns"][0, 0, 2]))
    for k, s in enumerate(t["sizes_bytes"]):
        assert float(interp_time_ns(ls, lt, float(s))) == pytest.approx(t["time_ns"][0, 0, 2, k], rel=1e-5)
    assert float(interp_time_ns(ls, lt, 0.0)) == 0.0
    big = float(interp_time_ns(ls, lt, 10.0 * t["sizes_bytes"][-1]))
    assert big >= 10 * t["time_ns"][0, 0, 2, -1] * 0.999            # at least linear beyond the grid


def run(argv, capsys):
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_json_keys(capsys):
    rc, out, _ = run(["e2e", "--model", "llama-7b", "--gpus", "4", "--phase", "decode", "--json"], capsys)
    assert rc == 0
    d = json.loads(out)
    assert set(d["config"]) == {"tp", "ep", "dp", "pp", "batch", "seq_len"}
    assert set(d["time_ms"]) == {"ua", "nap_nar"}
    for k in ("reduction", "split_ms", "configs_evaluated", "wall_s"):
        assert k in d
    assert d["reduction"] == pytest.approx(1 - d["time_ms"]["nap_nar"] / d["time_ms"]["ua"])


def test_cli_list(capsys):
    rc, out, _ = run(["e2e", "--list"], capsys)
    assert rc == 0 and "deepseek-v4-pro" in out and "llama-405b" in out


@pytest.mark.parametrize("argv,msg", [
    (["--model", "llama-9000"], "unknown model"),
    (["--model", "llama-70b", "--gpus", "64", "--tp", "128"], "tp=128"),
    (["--model", "mixtral-8x7b", "--gpus", "32", "--ep", "16"], "experts"),
    (["--model", "llama-70b", "--gpus", "8", "--ep", "2"], "dense"),
    (["--model", "llama-70b", "--batch", "0"], ">= 1"),
    (["--model", "llama-70b", "--gpus", "128"], "1..64"),
    (["--model", "llama-70b", "--gpus", "8", "--system", "nosuch"], "nosuch"),
])
def test_cli_errors_exit_2(argv, msg, capsys):
    rc, _, err = run(["e2e", *argv], capsys)
    assert rc == 2
    assert msg in err and len(err.strip().splitlines()) == 1


def test_cli_malformed_model_file(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("name = 'x'\nn_layers = [\n")
    rc, _, err = run(["e2e", "--model", str(bad)], capsys)
    assert rc == 2 and "invalid TOML" in err
    missing = tmp_path / "missing.toml"
    missing.write_text("name = 'x'\nn_layers = 2\n")
    rc, _, err = run(["e2e", "--model", str(missing)], capsys)
    assert rc == 2 and "missing model field" in err
    wrong = tmp_path / "wrong.toml"
    wrong.write_text("name='x'\nn_layers=2\nhidden=64\nn_heads=4\nn_kv_heads=3\nhead_dim=16\nvocab=100\nffn=128\n")
    rc, _, err = run(["e2e", "--model", str(wrong)], capsys)
    assert rc == 2 and "n_kv_heads" in err


def test_user_model_file_runs(tmp_path, capsys):
    ok = tmp_path / "tiny.toml"
    ok.write_text("name='tiny'\nn_layers=4\nhidden=1024\nn_heads=8\nn_kv_heads=8\nhead_dim=128\n"
                  "vocab=32000\nffn=4096\n")
    rc, out, _ = run(["e2e", "--model", str(ok), "--gpus", "2", "--phase", "prefill", "--json"], capsys)
    assert rc == 0 and json.loads(out)["model"] == "tiny"


@pytest.mark.slow
def test_shipped_table_matches_library():
    """The shipped Table 2 table is what the library's collective model says now (regenerate if not)."""
    from nuna_jax.models.llm.collective_table import best_time_ns, load_table
    t = load_table("table2")
    k, p, g, z = 0, 1, 2, 6           # allreduce, nap+nar, 8 GPUs, 1 MB
    fresh, tbs = best_time_ns(TABLE2, t["kinds"][k], t["groups"][g], t["sizes_bytes"][z], t["policies"][p])
    assert fresh == pytest.approx(t["time_ns"][k, p, g, z], rel=1e-3)
    assert tbs == t["tbs_per_gpu"][k][p][g][z]


def test_summary_geomeans_by_hand():
    from nuna_jax.models.llm.report import summarize

    def pt(phase, ua, nap, ar_ua, ar_nap):
        z = {"alltoall": 0.0, "allgather": 0.0, "p2p": 0.0}
        return {"model": "m", "n_gpus": 8, "phase": phase, "time_ms": {"ua": ua, "nap_nar": nap},
                "reduction": 1 - nap / ua, "config": {},
                "split_ms": {"ua": {"compute": ua - ar_ua, "allreduce": ar_ua, **z},
                             "nap_nar": {"compute": ua - ar_ua, "allreduce": ar_nap, **z}}}
    pts = [pt("prefill", 10.0, 8.0, 4.0, 2.0), pt("prefill", 10.0, 10.0, 1.0, 1.0),
           pt("decode", 4.0, 2.0, 3.0, 1.0)]
    s = summarize(pts)
    assert s["ttft_reduction_geomean"] == pytest.approx(1 - 1 / math.sqrt(10 / 8 * 1.0))
    assert s["ttft_reduction_max"] == pytest.approx(0.2)
    assert s["tpot_reduction_geomean"] == pytest.approx(0.5)
    assert s["comm_speedup_prefill"] == pytest.approx(math.sqrt(2.0 * 1.0))
    assert s["allreduce_speedup"] == pytest.approx((2.0 * 1.0 * 3.0) ** (1 / 3))
