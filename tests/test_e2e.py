"""End-to-end LLM model (issue 13): hand-calculated layers, collective sizes, memory fit, CLI errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from nuna_jax.cli import main
from nuna_jax.e2e.llm import layers
from nuna_jax.e2e.llm.configs import load_model, model_names
from nuna_jax.e2e.llm.hardware import hbm_capacity_bytes, machine
from nuna_jax.presets import preset

TABLE2 = preset("table2")
HW = machine(TABLE2)


@pytest.fixture(scope="module")
def table():
    """The shipped Table 2 table as it is, current or not: these tests check the step model and the
    search, whose arithmetic does not depend on the table being fresh (test_shipped_table_is_current
    checks that)."""
    from nuna_jax.e2e.llm.collective_table import load_table
    return load_table("table2", allow_stale=True)


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


def test_memory_by_hand_and_fit_filter(table):
    r = layers.step(m_("llama-7b"), HW, 1, 1, 1, 1, 1, 4096, prefill=False)
    per_layer = 4 * 4096 * 4096 * 2 + 3 * 4096 * 11008 * 2 + 2 * 32 * 128 * 2 * 4096
    assert float(r["mem_bytes"]) == pytest.approx(32 * per_layer + 2 * 4096 * 32000 * 2, rel=1e-6)
    # Llama-3.1-405B in bf16 (~810 GB) cannot fit on 2 GPUs of 384 GB; it fits on 4
    assert 2 * hbm_capacity_bytes(TABLE2) < 405e9 * 2 < 4 * hbm_capacity_bytes(TABLE2)
    from nuna_jax.e2e.llm.search import search
    with pytest.raises(ValueError, match="fits"):
        search("llama-405b", 2, "decode", TABLE2, table=table)
    r4 = search("llama-405b", 4, "decode", TABLE2, table=table)
    assert r4["mem_gb_per_gpu"] * 1e9 <= hbm_capacity_bytes(TABLE2)
    assert r4["configs_fit"] < r4["configs_valid"]                # some valid configurations were rejected


def test_search_matches_brute_force(table):
    """The batched program's pick equals a Python loop over the grid with the same costs."""
    from nuna_jax.e2e.llm import search as S
    r = S.search("mixtral-8x7b", 8, "decode", TABLE2, table=table, batches=[1, 4], seqs=[1024])
    best = None
    for tp in (1, 2, 4, 8):
        for ep in (1, 2, 4, 8):
            for dp in (1, 2, 4, 8):
                for pp in (1, 2, 4, 8):
                    for b in (1, 4):
                        if tp * dp * pp != 8 or (tp * dp) % ep or b % dp:
                            continue
                        pins = dict(tp=tp, ep=ep, dp=dp, pp=pp)
                        one = S.search("mixtral-8x7b", 8, "decode", TABLE2, table=table, batches=[b], seqs=[1024],
                                       pins=pins)
                        if best is None or one["time_ms"]["ua"] < best["time_ms"]["ua"]:
                            best = one
    assert r["config"] == best["config"]
    assert r["time_ms"]["ua"] == pytest.approx(best["time_ms"]["ua"])


def test_split_adds_up_and_compute_unchanged(table):
    from nuna_jax.e2e.llm.search import search
    r = search("qwen3-30b-a3b", 16, "decode", TABLE2, table=table)
    for pol in ("ua", "nap_nar"):
        assert sum(r["split_ms"][pol].values()) == pytest.approx(r["time_ms"][pol], rel=1e-5)
    assert r["split_ms"]["ua"]["compute"] == r["split_ms"]["nap_nar"]["compute"]


def test_table_interpolation_hits_grid_points(table):
    import jax.numpy as jnp
    from nuna_jax.e2e.llm.collective_table import interp_time_ns
    t = table
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


def _current_copy(src: Path, dst: Path) -> Path:
    """``src``'s numbers re-sealed as built by this tree's model (CLI plumbing tests only: the
    numbers are not recomputed, so this is a stand-in for a fresh table, never a shipped one)."""
    from nuna_jax.e2e.llm import collective_table as C, provenance as P
    d = C.read_table(src)
    files = P.model_file_hashes()
    d = C.seal({**d, "model_hash": P.model_hash(files), "model_files": files})
    dst.write_text(json.dumps(d))
    return dst


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """A current table (the shipped numbers, re-sealed) for the command-line tests."""
    from nuna_jax.e2e.llm.collective_table import SHIPPED
    return _current_copy(SHIPPED, tmp_path_factory.mktemp("table") / "fresh.json")


def test_cli_json_keys(capsys, fresh):
    rc, out, _ = run(["e2e", "--model", "llama-7b", "--gpus", "4", "--phase", "decode", "--json",
                      "--table", str(fresh)], capsys)
    assert rc == 0
    d = json.loads(out)
    assert set(d["config"]) == {"tp", "ep", "dp", "pp", "batch", "seq_len"}
    assert set(d["time_ms"]) == set(d["split_ms"]) == {"UA", "NAP+NAR"}     # canonical policy names (docs/json.md)
    for k in ("reduction", "split_ms", "configs_evaluated", "wall_s", "seq_len_candidates"):
        assert k in d
    assert d["reduction"] == pytest.approx(1 - d["time_ms"]["NAP+NAR"] / d["time_ms"]["UA"])
    ct = d["collective_table"]
    assert ct["path"] == str(fresh) and ct["current"] is True
    assert ct["model_hash"] == ct["current_model_hash"]


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
    (["--model", "llama-70b", "--config", "x.toml"], "--config goes with --all"),
    (["--all", "--config", "nosuch.toml"], "does not exist"),
    (["--all", "--gpus", "4", "--tp", "8"], "impossible on every GPU count"),
    (["--model", "llama-70b", "--table", "nosuch.json"], "nosuch.json"),
])
def test_cli_errors_exit_2(argv, msg, capsys, fresh):
    if argv[-1] == "8" and "--all" in argv:
        argv = [*argv, "--table", str(fresh)]
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


def test_user_model_file_runs(tmp_path, capsys, fresh):
    ok = tmp_path / "tiny.toml"
    ok.write_text("name='tiny'\nn_layers=4\nhidden=1024\nn_heads=8\nn_kv_heads=8\nhead_dim=128\n"
                  "vocab=32000\nffn=4096\n")
    rc, out, _ = run(["e2e", "--model", str(ok), "--gpus", "2", "--phase", "prefill", "--json",
                      "--table", str(fresh)], capsys)
    assert rc == 0 and json.loads(out)["model"] == "tiny"


# ---- the collective table knows what built it ------------------------------------------------

def test_shipped_table_is_current():
    """The shipped table was built by this tree's collective model (a hash check: seconds).

    It fails after any code change to a module the table depends on (provenance.model_files:
    placement, scenario, lowering, path, plans, presets, models/contention, ...); the message
    names the files and the one command that rebuilds the table."""
    from nuna_jax.e2e.llm import collective_table as C
    d = C.read_table(C.SHIPPED)
    st = C.table_status(d, C.SHIPPED)
    assert st["current"], C._stale_message(st)
    assert d["groups"] == list(C.GROUP_SIZES) and d["sizes_bytes"] == list(C.SIZE_GRID_BYTES)
    assert d["tbs_rule"]["multiples"] == list(C.TBS_MULTIPLES)


def test_model_files_follow_the_imports():
    from nuna_jax.e2e.llm.provenance import model_files
    f = set(model_files())
    # presets.py is not needed: the System's field values are hashed (provenance.system_params)
    for need in ("placement.py", "scenario.py", "lowering.py", "path.py", "plans.py", "system.py", "nar.py",
                 "traffic.py", "models/contention/api.py", "models/contention/tables.py",
                 "e2e/llm/collective_timing.py"):
        assert f"nuna_jax/{need}" in f, need
    for not_model in ("cli/e2e.py", "e2e/llm/search.py", "e2e/llm/collective_table.py", "sim/api.py"):
        assert f"nuna_jax/{not_model}" not in f, not_model


def test_code_hash_ignores_comments_and_docstrings(tmp_path):
    from nuna_jax.e2e.llm.provenance import code_hash
    base = 'def f(x):\n    """Doc."""\n    return x + 1  # add\n'
    same = '"""Module doc."""\n# a comment\n\ndef f(x):\n    """Other doc,\n    two lines."""\n    return x + 1\n'
    other = 'def f(x):\n    """Doc."""\n    return x + 2  # add\n'
    hashes = []
    for i, text in enumerate((base, same, other, 's = "# one"\n', 's = "# two"\n')):
        p = tmp_path / f"m{i}.py"
        p.write_text(text)
        hashes.append(code_hash(p))
    assert hashes[0] == hashes[1]
    assert hashes[0] != hashes[2]           # code changed
    assert hashes[3] != hashes[4]           # a '#' in a string is code


def _doctor(src: Path, dst: Path, reseal: bool, **changes) -> Path:
    from nuna_jax.e2e.llm import collective_table as C
    d = json.loads(src.read_text())
    d.update(changes)
    if reseal:
        d = C.seal(d)
    dst.write_text(json.dumps(d))
    return dst


def test_stale_table_exits_2_naming_the_rebuild_command(tmp_path, capsys, fresh):
    bad = _doctor(fresh, tmp_path / "stale.json", reseal=True, model_hash="0123456789abcdef")
    rc, _, err = run(["e2e", "--model", "llama-70b", "--gpus", "8", "--table", str(bad)], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "stale" in err and "0123456789abcdef" in err
    assert "python -m nuna_jax.e2e.llm.collective_table" in err and f"--out {bad} --jobs N" in err
    assert "--rebuild-table" in err


def test_edited_hash_exits_2(tmp_path, capsys, fresh):
    """The hash changed by hand (not re-sealed): the seal no longer matches the content."""
    bad = _doctor(fresh, tmp_path / "edited.json", reseal=False, model_hash="0123456789abcdef")
    rc, _, err = run(["e2e", "--model", "llama-70b", "--gpus", "8", "--table", str(bad)], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "edited after it was built" in err and str(bad) in err
    assert "python -m nuna_jax.e2e.llm.collective_table" in err


def test_code_change_makes_the_table_stale(monkeypatch, capsys, fresh):
    """As after an edit of placement.py: the file's hash differs from the one the table recorded."""
    from nuna_jax.e2e.llm import provenance
    real = provenance.model_file_hashes()
    monkeypatch.setattr(provenance, "model_file_hashes",
                        lambda: {**real, "nuna_jax/placement.py": "ffffffffffffffff"})
    rc, _, err = run(["e2e", "--model", "llama-70b", "--gpus", "8", "--json", "--table", str(fresh)], capsys)
    assert rc == 2 and "stale" in err and "nuna_jax/placement.py changed" in err


@pytest.mark.parametrize("case,msg", [
    ("badjson", "not valid JSON"),
    ("missing", "missing key 'time_ns'"),
    ("wrongtype", "'groups' must be a JSON list"),
    ("nan", "is not a finite number > 0"),
    ("negative", "is not a finite number > 0"),
    ("shape", "must be a list of"),
    ("oldformat", "format is None"),
])
def test_invalid_table_exits_2_naming_the_file(case, msg, tmp_path, capsys, fresh):
    d = json.loads(fresh.read_text())
    p = tmp_path / f"{case}.json"
    if case == "badjson":
        p.write_text(fresh.read_text()[:500])
    else:
        if case == "missing":
            del d["time_ns"]
        elif case == "wrongtype":
            d["groups"] = "2,4,8"
        elif case == "nan":
            d["time_ns"][0][1][2][3] = float("nan")
        elif case == "negative":
            d["time_ns"][0][1][2][3] = -5.0
        elif case == "shape":
            d["time_ns"][0][1][2] = d["time_ns"][0][1][2][:-1]
        elif case == "oldformat":
            del d["format"]
        p.write_text(json.dumps(d))          # json writes NaN as NaN (not valid JSON numbers elsewhere)
    rc, _, err = run(["e2e", "--model", "llama-70b", "--gpus", "8", "--table", str(p)], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert msg in err and str(p) in err, err


def test_table_for_other_hardware_or_groups_is_refused(tmp_path, capsys, fresh):
    d = json.loads(fresh.read_text())
    d["system_params"] = {**d["system_params"], "hop_cycles": 99.0}
    other = tmp_path / "other.json"
    from nuna_jax.e2e.llm.collective_table import seal
    other.write_text(json.dumps(seal(d)))
    rc, _, err = run(["e2e", "--model", "llama-70b", "--table", str(other)], capsys)
    assert rc == 2 and "other hardware" in err and "hop_cycles" in err


def _fake_time(system, kind, n, size, policy, tbs):
    """A stand-in for the path model: fast, deterministic, unplaceable above 20 threadblocks."""
    if tbs > 20:
        return None
    return 1000.0 + size / (50.0 * n) + 100.0 * tbs + (0 if policy == "ua" else -300.0)


def test_build_resume_and_best_threadblocks(tmp_path, monkeypatch):
    from nuna_jax.e2e.llm import collective_table as C
    monkeypatch.setattr(C, "time_or_none", _fake_time)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls = []

    def interrupted(*a):
        if len(calls) == 5:
            raise KeyboardInterrupt
        calls.append(a)
        return _fake_time(*a)
    monkeypatch.setattr(C, "time_or_none", interrupted)
    kw = dict(groups=[2, 8], sizes=[1000, 10**6], multiples=[1, 4], progress=False)
    with pytest.raises(KeyboardInterrupt):
        C.build_table(TABLE2, **kw)
    monkeypatch.setattr(C, "time_or_none", _fake_time)
    d = C.build_table(TABLE2, **kw)
    assert d["build"]["resumed_runs"] == 5 and d["build"]["runs"] == 3 * 2 * 2 * 2 * 2
    assert d["build"]["unplaceable_runs"] == 3 * 2 * 2           # 4 x 7 = 28 threadblocks at 8 GPUs
    C.validate(json.loads(json.dumps(d)), "built")                # the seal survives a JSON round trip
    # the fastest placeable count: 1 x (n - 1) here (time grows with threadblocks; 28 > 20 cannot be placed)
    assert d["tbs_per_gpu"][0][0] == [[1, 1], [7, 7]]
    assert d["time_ns"][0][1][1][0] == pytest.approx(_fake_time(None, "allreduce", 8, 1000, "nap+nar", 7))
    assert not list(tmp_path.glob("nuna_jax/e2e_tables/partial-*"))    # removed once complete


def test_rebuild_table_flag_rebuilds_a_stale_table(tmp_path, monkeypatch, capsys):
    from nuna_jax.e2e.llm import collective_table as C
    monkeypatch.setattr(C, "time_or_none", _fake_time)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    small = C.build_table(TABLE2, groups=[2], sizes=[1000, 10**6], multiples=[1], progress=False)
    p = tmp_path / "small.json"
    p.write_text(json.dumps(C.seal({**small, "model_hash": "0" * 16})))
    argv = ["e2e", "--model", "llama-7b", "--gpus", "2", "--json", "--table", str(p)]
    rc, _, err = run(argv, capsys)
    assert rc == 2 and "stale" in err
    assert f"--groups 2 --sizes 1000,1000000 --tbs-multiples 1 --out {p} --jobs N" in err
    rc, out, _ = run([*argv, "--rebuild-table"], capsys)
    assert rc == 0 and json.loads(out)["collective_table"]["current"] is True
    assert C.read_table(p)["sizes_bytes"] == [1000, 10**6]        # the same grid, rebuilt in place
    rc, out, _ = run(argv, capsys)
    assert rc == 0


def test_module_check_command(tmp_path, capsys, fresh):
    from nuna_jax.e2e.llm.collective_table import main as table_main
    assert table_main(["--check", "--out", str(fresh)]) == 0
    stale = _doctor(fresh, tmp_path / "s.json", reseal=True, model_hash="0" * 16)
    assert table_main(["--check", "--out", str(stale)]) == 1
    assert "stale" in capsys.readouterr().err


@pytest.mark.slow
def test_shipped_table_matches_library():
    """An entry of the shipped table is what the library's collective model computes now (minutes)."""
    from nuna_jax.e2e.llm.collective_table import SHIPPED, best_time_ns, load_table
    t = load_table("table2", allow_stale=True)
    if not t["status"]["current"]:
        pytest.skip(f"{SHIPPED} is stale (test_shipped_table_is_current says so)")
    k, p, g, z = 0, 1, 2, 6           # allreduce, nap+nar, 8 GPUs, 1 MB
    fresh_t, tbs = best_time_ns(TABLE2, t["kinds"][k], t["groups"][g], t["sizes_bytes"][z], t["policies"][p])
    assert fresh_t == pytest.approx(t["time_ns"][k, p, g, z], rel=1e-3)
    assert tbs == t["tbs_per_gpu"][k][p][g][z]


# ---- e2e --all: configuration files, pins, the sequence-length search ----------------------------

def test_anchor_config_reproduces_the_papers_row(capsys, fresh):
    """examples/e2e/llama70b_64gpu_tp8.toml: Llama-70B on 64 GPUs with TP 8 pinned (NUNA 6.7)."""
    cfg = Path(__file__).resolve().parents[1] / "examples" / "e2e" / "llama70b_64gpu_tp8.toml"
    rc, out, _ = run(["e2e", "--all", "--config", str(cfg), "--json", "--table", str(fresh)], capsys)
    assert rc == 0
    d = json.loads(out)
    assert [(p["model"], p["n_gpus"], p["phase"]) for p in d["points"]] == [
        ("llama-70b", 64, "prefill"), ("llama-70b", 64, "decode")]
    assert all(p["config"]["tp"] == 8 and p["pinned"] == {"tp": 8} for p in d["points"])
    assert d["summary"]["llama70b_64gpu"]["decode"]["config"]["tp"] == 8
    assert d["run_config"]["per_model"] == {"llama-70b": {"tp": 8}}


def test_config_file_errors(tmp_path, capsys):
    cases = {"unknown key": "modles = ['llama-7b']\n", "must be an integer": "[model.llama-7b]\ntp = 'eight'\n",
             "unknown model": "models = ['llama-9000']\n", "invalid TOML": "models = [\n",
             "[search]: unknown key": "[search]\nbatchsize = 4\n"}
    for msg, text in cases.items():
        p = tmp_path / "c.toml"
        p.write_text(text)
        rc, _, err = run(["e2e", "--all", "--config", str(p)], capsys)
        assert rc == 2 and msg in err and len(err.strip().splitlines()) == 1, (msg, err)


def test_config_flags_and_skips(table):
    from nuna_jax.e2e.llm.report import RunConfig, run_all
    cfg = RunConfig(models=("llama-7b", "mixtral-8x7b"), gpu_counts=(2, 8), phases=("decode",),
                    per_model={"mixtral-8x7b": {"ep": 8}}).with_flags(seq_len=[2048])
    r = run_all(TABLE2, table=table, config=cfg)
    got = {(p["model"], p["n_gpus"]): p for p in r["points"]}
    assert set(got) == {("llama-7b", 2), ("llama-7b", 8), ("mixtral-8x7b", 8)}
    assert got[("mixtral-8x7b", 8)]["config"]["ep"] == 8
    assert all(p["config"]["seq_len"] == 2048 for p in r["points"])
    assert [(s["model"], s["n_gpus"]) for s in r["skipped"]] == [("mixtral-8x7b", 2)]   # ep=8 on 2 GPUs
    assert "ep=8 is impossible on 2 GPUs" in r["skipped"][0]["reason"]


def test_sequence_length_is_searched(table):
    """NUNA 5.2 chooses the sequence length that minimizes TTFT / TPOT: every cost grows with it,
    so the search lands on the shortest candidate, and its time is the pinned shortest's."""
    from nuna_jax.e2e.llm.search import SEQ_LENS, search
    for ph in ("prefill", "decode"):
        r = search("llama-70b", 8, ph, TABLE2, table=table)
        assert r["seq_len_candidates"] == list(SEQ_LENS)
        assert r["config"]["seq_len"] == min(SEQ_LENS)
        one = search("llama-70b", 8, ph, TABLE2, table=table, seqs=[min(SEQ_LENS)])
        assert one["time_ms"]["ua"] == pytest.approx(r["time_ms"]["ua"])
        longer = search("llama-70b", 8, ph, TABLE2, table=table, seqs=[4 * min(SEQ_LENS)])
        assert longer["time_ms"]["ua"] > r["time_ms"]["ua"]


def test_summary_geomeans_by_hand():
    from nuna_jax.e2e.llm.report import summarize

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
