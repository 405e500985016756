"""Hostile input (issue 25): unbounded work, silent nonsense, outputs that destroy inputs.

Every case ends in exit 0 within the limits, or exit 2 with one line on stderr naming the input
and no traceback, quickly: the work limits refuse from the inputs, before anything is built.
"""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest

from nuna_jax import limits
from nuna_jax.cli import main
from nuna_jax.limits import Limits, WorkLimitError, using
from nuna_jax.presets import preset

TINY = preset("mono", n_gpus=3)
QUICK_S = 20.0          # CPU s of a refusal: parsing and the estimate only (imports included); CPU time, not
                        # wall, so a loaded machine (CI beside other jobs) cannot fail it, a runaway can


def run(argv, capsys):
    t0 = time.process_time()
    rc = main([str(a) for a in argv])
    dt = time.process_time() - t0
    out, err = capsys.readouterr()
    return rc, out, err, dt


def refused(argv, capsys, *needles):
    """The command exits 2 with one line on stderr containing every needle, no traceback, quickly."""
    rc, out, err, dt = run(argv, capsys)
    assert rc == 2, (rc, out[-500:], err[-2000:])
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for n in needles:
        assert n in err, (n, err)
    assert dt < QUICK_S, dt
    return err


# ---------------------------------------------------------------------------------------------
# System: non-finite fields

@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), np.nan, np.float32("inf"),
                                   np.array([1.0, np.nan])])
def test_system_refuses_non_finite_in_replace(value):
    with pytest.raises(ValueError, match="hop_cycles must be finite"):
        TINY.replace(hop_cycles=value)


def test_system_refuses_non_finite_at_construction():
    import dataclasses

    from nuna_jax.system import System
    kw = {f.name: getattr(TINY, f.name) for f in dataclasses.fields(System)}
    kw["link_bw_bytes_per_ns"] = float("nan")
    with pytest.raises(ValueError, match="link_bw_bytes_per_ns must be finite"):
        System(**kw)
    kw["link_bw_bytes_per_ns"] = 64.0
    kw["mesh_cols"] = float("inf")
    with pytest.raises(ValueError, match="mesh_cols must be finite"):
        System(**kw)


def test_system_still_traces_and_differentiates():
    """jax values (tracers, gradients, batches) are not checked at construction: the model is unchanged."""
    import jax
    import jax.numpy as jnp
    g = jax.grad(lambda s: s.hop_ns)(TINY)
    assert math.isfinite(float(g.hop_cycles))
    hop = jax.vmap(lambda h: TINY.replace(hop_cycles=h).hop_ns)(jnp.arange(1.0, 4.0))
    assert np.allclose(np.asarray(hop), np.arange(1.0, 4.0) / float(TINY.noc_clock_ghz))
    assert TINY.replace(hop_cycles=2.0).hop_cycles == 2.0


# ---------------------------------------------------------------------------------------------
# library entry points: limits=

def test_make_plan_refuses_100k_gpus_at_once():
    from nuna_jax.plans import make_plan
    t0 = time.process_time()
    with pytest.raises(WorkLimitError, match="100000 gpus"):
        make_plan("allgather", 100_000, 10**9)
    assert time.process_time() - t0 < 1.0


def test_make_plan_limits_argument_and_active_limits():
    from nuna_jax.plans import make_plan
    make_plan("allgather", 8, 8000)                                   # the defaults allow it
    with pytest.raises(WorkLimitError, match="threadblocks"):
        make_plan("allgather", 8, 8000, limits=Limits(1e-5))
    with using(Limits(1e-5)):                                         # a command's --max-work
        with pytest.raises(WorkLimitError):
            make_plan("allgather", 8, 8000)
    make_plan("allgather", 8, 8000)                                   # restored after the block


def test_nuna_spread_refuses_a_4096_square_mesh():
    from nuna_jax.models.spread import nuna_spread
    huge = TINY.replace(mesh_cols=4096, mesh_rows=4096)
    t0 = time.process_time()
    with pytest.raises(WorkLimitError, match="mesh routers"):
        nuna_spread(huge)
    assert time.process_time() - t0 < 1.0
    with pytest.raises(WorkLimitError, match="over the limit"):
        nuna_spread(preset("table2"), limits=Limits(1e-3))


def test_make_scenario_and_lowering_refuse_before_building():
    from nuna_jax.lowering import build_traffic
    from nuna_jax.scenario import make_scenario
    t0 = time.process_time()
    with pytest.raises(WorkLimitError, match="pages"):
        make_scenario(preset("table2", n_gpus=64), collective="allreduce", size_bytes=10**10, policy="ua",
                      tbs_per_gpu=63)
    assert time.process_time() - t0 < 1.0
    sc = make_scenario(TINY, collective="allgather", size_bytes=30_000, policy="ua", tbs_per_gpu=2)
    with pytest.raises(WorkLimitError, match="build_traffic"):
        build_traffic(sc.system, sc.plan, sc.placement, limits=Limits(1e-7))
    with pytest.raises(WorkLimitError):
        make_scenario(TINY, collective="allgather", size_bytes=30_000, policy="ua", tbs_per_gpu=2,
                      limits=Limits(1e-7))


def test_every_model_command_has_max_work():
    from nuna_jax.cli import build_parser
    parser, _ = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    lacking = [name for name, p in sub.choices.items()
               if name != "reproduce" and not any("--max-work" in a.option_strings for a in p._actions)]
    assert lacking == []


# ---------------------------------------------------------------------------------------------
# e2e

MOE = """name = "tiny-moe"
n_layers = 4
hidden = 512
n_heads = 8
n_kv_heads = 8
head_dim = 64
vocab = 1000
n_experts = 8
top_k = 2
moe_ffn = 256
"""


@pytest.mark.parametrize("line,needle", [
    ("n_shared_experts = -3", "n_shared_experts"),
    ("q_lora_rank = -5", "q_lora_rank"),
    ("o_lora_rank = -1", "o_lora_rank"),
    ("kv_lora_rank = -2", "kv_lora_rank"),
    ("sliding_window = -1", "sliding_window"),
    ("attn_topk = -7", "attn_topk"),
    ("ffn = -1", "ffn"),
    ("weight_bytes = nan", "weight_bytes"),
    ("weight_bytes = inf", "weight_bytes"),
    ("sliding_fraction = nan", "sliding_fraction"),
    ("n_shared_experts = true", "n_shared_experts"),
    ("n_shared_experts = 1.5", "n_shared_experts"),
    ("n_shared_experts = \"2\"", "n_shared_experts"),
    ("n_shared_experts = 99999999999999999", "n_shared_experts"),
    ("n_dense_layers = -2", "n_dense_layers"),
    ("qk_rope_dim = -64", "qk_rope_dim"),
])
def test_model_toml_field_out_of_range_exits_2(tmp_path, capsys, line, needle):
    f = tmp_path / "m.toml"
    f.write_text(MOE + line + "\n")
    refused(["e2e", "--model", f], capsys, str(f), needle)


@pytest.mark.parametrize("text,needle", [
    ("model = 5\n", "[model]"),
    ("[model]\nname = 3\n", "missing"),
    (MOE.replace('name = "tiny-moe"', "name = 3"), "name"),
    ("x = " + "[" * 5000 + "]" * 5000 + "\n", "nested"),
    ("x = " + "[" * 40 + "]" * 40 + "\n" + MOE, "nested"),
    ("name = \"\"\n" + MOE.split("\n", 1)[1], "name"),
    ("\xff\xfe = 1\n", "UTF-8"),
])
def test_model_toml_malformed_exits_2(tmp_path, capsys, text, needle):
    f = tmp_path / "m.toml"
    f.write_bytes(text.encode("latin-1") if "\xff" in text else text.encode())
    refused(["e2e", "--model", f], capsys, str(f), needle)


def test_model_toml_too_big_and_deep_config(tmp_path, capsys):
    f = tmp_path / "m.toml"
    f.write_text(MOE + "# " + "x" * 100_000 + "\n")
    refused(["e2e", "--model", f, "--max-work", "1e-3"], capsys, "file bytes")
    c = tmp_path / "c.toml"
    c.write_text("note = " + "[" * 3000 + "]" * 3000 + "\n")
    refused(["e2e", "--all", "--config", c], capsys, str(c), "nested")


def test_e2e_unbounded_work_exits_2_quickly(tmp_path, capsys):
    big = tmp_path / "big.toml"
    big.write_text('base = "table2"\nmesh_cols = 128\nmesh_rows = 128\nn_io_ports = 256\n')
    refused(["e2e", "--model", "llama-7b", "--system", big], capsys, "mesh routers")
    refused(["e2e", "--model", "llama-7b", "--seq-len", "100000000000"], capsys, "seq len")
    refused(["e2e", "--model", "llama-7b", "--batch", "2000000"], capsys, "e2e batch")
    refused(["e2e", "--model", "llama-7b", "--batch", ",".join(map(str, range(1, 5000)))], capsys, "configs")
    refused(["e2e", "--model", "llama-7b", "--jobs", "0"], capsys, "--jobs")
    refused(["e2e", "--model", "llama-7b", "--system", "mono", "--max-work", "1e-3"], capsys, "over the limit")


@pytest.fixture(scope="module")
def fresh_table(tmp_path_factory):
    """The shipped table's numbers re-sealed as built by this tree's model (CLI plumbing only)."""
    from nuna_jax.e2e.llm import collective_table as C, provenance as P
    d = C.read_table(C.SHIPPED)
    files = P.model_file_hashes()
    d = C.seal({**d, "model_hash": P.model_hash(files), "model_files": files})
    f = tmp_path_factory.mktemp("table") / "fresh.json"
    f.write_text(json.dumps(d))
    return f


def test_e2e_refuses_a_non_finite_result(tmp_path, capsys, monkeypatch, fresh_table):
    """A search whose numbers come out non-finite is refused (exit 2), never printed or written."""
    from nuna_jax.e2e.llm import search as S
    real = S.search

    def nan_search(*a, **k):
        r = real(*a, **k)
        r["time_ms"]["ua"] = float("inf")
        return r
    monkeypatch.setattr(S, "search", nan_search)
    for fmt in ([], ["--json"]):
        err = refused(["e2e", "--model", "llama-7b", "--table", fresh_table, *fmt], capsys, "non-finite",
                      "time_ms.ua")
        assert "inf" in err


# ---------------------------------------------------------------------------------------------
# optimize

@pytest.mark.parametrize("flags,needle", [
    (["--steps", "1000000000", "--budget", "100000000000"], "--budget"),
    (["--steps", "1000000000", "--budget", "100000"], "--steps"),
    (["--seeds", "100000", "--budget", "100000"], "--seeds"),
    (["--seeds", "10**9"], "--seeds"),
    (["--straight-through", "nan"], "--straight-through"),
    (["--seed", "-1"], "--seed"),
    (["--candidates", "0"], "--candidates"),
    (["--tbs", "100000"], "search threadblocks"),      # 300,000 threadblocks: ran for over 10 minutes
])
def test_optimize_bounded_search_flags(capsys, flags, needle):
    refused(["optimize", "--system", "mono", "--gpus", "3", "--collective", "allgather", "--size", "30kB", *flags],
            capsys, needle)


def test_optimize_simulations_under_the_simulate_flit_limit(capsys):
    # 8 GPUs x 1 GB All-Gather: 27 M flits a run (simulate allows it), 18 runs are over sim_flits
    refused(["optimize", "--collective", "allgather", "--size", "1GB"], capsys, "sim flits")
    # one run over simulate's own limit: refused with the same limit simulate uses
    refused(["optimize", "--collective", "allgather", "--size", "3GB"], capsys, "flits")
    rc, _, err, _ = run(["simulate", "--collective", "allgather", "--size", "3GB"], capsys)
    assert rc == 2 and "flits" in err


# ---------------------------------------------------------------------------------------------
# placement JSON

@pytest.fixture(scope="module")
def saved_placement(tmp_path_factory):
    from nuna_jax.optim.candidates import assemble, make_candidates
    from nuna_jax.optim.io import placement_to_dict
    from nuna_jax.plans import make_plan
    plan = make_plan("allgather", 3, 30_000, slot_align_bytes=TINY.page_bytes)   # as the CLI builds it
    cand, _ = make_candidates(TINY, plan, nar_granularity=3, n_candidates=3)
    pl = assemble(TINY, plan, cand, np.array([1, 0, 2, 2, 0, 1]))
    return plan, pl, placement_to_dict(TINY, plan, pl)


ARGS = ["--system", "mono", "--gpus", "3", "--collective", "allgather", "--size", "30kB", "--tbs", "2"]


def _mut(d, path, value):
    d = json.loads(json.dumps(d))
    o = d
    for k in path[:-1]:
        o = o[k]
    if value is KeyError:
        del o[path[-1]]
    else:
        o[path[-1]] = value
    return d


PLACEMENT_CASES = [
    (("tb_cu",), KeyError, "tb_cu"),
    (("tb_cu",), None, "tb_cu"),
    (("tb_cu",), {"0": 1}, "tb_cu"),
    (("tb_cu",), [0, 1], "tb_cu"),
    (("tb_cu", 0), 1.5, "tb_cu"),
    (("tb_cu", 0), True, "tb_cu"),
    (("tb_cu", 0), "7", "tb_cu"),
    (("tb_cu", 0), 10**30, "tb_cu"),
    (("tb_cu", 0), 10**6, "tb_cu"),
    (("tb_cu", 0), None, "tb_cu"),
    (("tb_domain", 0), 99, "tb_domain"),
    (("tb_domain", 1), -1, "tb_domain"),
    (("page_stack",), [[0]], "page_stack"),
    (("page_stack", 0), {"a": 1}, "page_stack"),
    (("page_stack", 0, 0), 99, "page_stack"),
    (("page_stack", 1, 0), [[1]], "page_stack"),
    (("page_domain",), {"x": 1}, "page_domain"),
    (("page_domain",), [[0]], "page_domain"),
    (("n_tbs",), "6", "n_tbs"),
    (("n_tbs",), 7, "n_tbs"),
    (("n_pages",), None, "n_pages"),
    (("n_gpus",), 3.0, "n_gpus"),
    (("routing_granularity",), 0, "routing_granularity"),
    (("routing_granularity",), 10**9, "routing_granularity"),
    (("routing_granularity",), "3", "routing_granularity"),
    (("placement_granularity",), -4, "placement_granularity"),
    (("policy",), ["OPT"], "policy"),
    (("meta",), [1, 2], "meta"),
    (("format",), "nuna_jax.placement/2", "format"),
    (("surprise",), 1, "unknown field"),
    (("system", "hop_cycles"), 99.0, "another system"),
    (("plan", "digest"), "0" * 64, "another plan"),
]


@pytest.mark.parametrize("path,value,needle", PLACEMENT_CASES, ids=[f"{'.'.join(map(str, p))}={v!r}"[:50]
                                                                     for p, v, _ in PLACEMENT_CASES])
def test_placement_json_field_by_field(saved_placement, tmp_path, path, value, needle):
    from nuna_jax.optim.io import load_placement
    plan, _, d = saved_placement
    f = tmp_path / "p.json"
    f.write_text(json.dumps(_mut(d, path, value)))
    with pytest.raises(ValueError, match="placement file") as e:
        load_placement(str(f), TINY, plan)
    assert needle in str(e.value)


@pytest.mark.parametrize("text,needle", [
    ("[1, 2]", "JSON object"),
    ("{", "not valid JSON"),
    ("[" * 100_000 + "]" * 100_000, "nested"),
    ('{"format": "nuna_jax.placement/1", "x": ' + "[" * 50 + "]" * 50 + "}", "nested"),
    ('{"format": NaN}', "NaN"),
    ("", "not valid JSON"),
])
def test_placement_json_malformed_on_the_cli(tmp_path, capsys, text, needle):
    f = tmp_path / "p.json"
    f.write_text(text)
    refused(["estimate", *ARGS, "--placement", f], capsys, "placement file", needle)


def test_placement_for_another_system_or_plan_on_the_cli(saved_placement, tmp_path, capsys):
    from nuna_jax.optim.io import save_placement
    plan, pl, d = saved_placement
    f = tmp_path / "p.json"
    save_placement(str(f), TINY, plan, pl)
    rc, out, err, _ = run(["estimate", *ARGS, "--placement", f, "--json"], capsys)
    assert rc == 0, err
    other = tmp_path / "other.toml"
    other.write_text('base = "mono"\nhop_cycles = 7.0\n')
    refused(["estimate", *ARGS[2:], "--system", other, "--gpus", "3", "--placement", f], capsys,
            "another system", "hop_cycles")
    # a page the plan touches placed on no stack: refused naming the file
    g = tmp_path / "g.json"
    g.write_text(json.dumps(_mut(d, ("page_stack", 0, 0), -1)))
    refused(["estimate", *ARGS, "--placement", g], capsys, "placement file")


def test_saved_placement_is_strict_json_and_atomic(saved_placement, tmp_path):
    from nuna_jax.optim.io import load_placement, save_placement
    plan, pl, _ = saved_placement
    f = tmp_path / "p.json"
    save_placement(str(f), TINY, plan, pl, meta={"relaxed_ns": float("nan"), "x": 1.0})
    d = json.loads(f.read_text(), parse_constant=lambda c: pytest.fail(f"non-strict {c}"))
    assert d["meta"] == {"relaxed_ns": None, "x": 1.0}
    load_placement(str(f), TINY, plan)
    with pytest.raises(ValueError, match="cannot write placement file"):
        save_placement(str(tmp_path / "no" / "p.json"), TINY, plan, pl)
    before = f.read_text()
    with pytest.raises(ValueError, match="cannot write"):
        save_placement(str(tmp_path), TINY, plan, pl)            # a directory: nothing replaced
    assert f.read_text() == before


# ---------------------------------------------------------------------------------------------
# outputs never overwrite an input of the same run

@pytest.fixture()
def inputs(tmp_path):
    sysf = tmp_path / "sys.toml"
    sysf.write_text('base = "mono"\nn_gpus = 3\n')
    model = tmp_path / "model.toml"
    model.write_text(MOE)
    cfg = tmp_path / "cfg.toml"
    cfg.write_text('models = ["llama-7b"]\ngpus = [2]\n')
    return {"system": sysf, "model": model, "config": cfg}


def _unchanged(files: dict, before: dict):
    for k, f in files.items():
        assert f.read_bytes() == before[k], f"{k} input was changed"


@pytest.mark.parametrize("argv,target,needle", [
    (["optimize", "--collective", "allgather", "--size", "30kB", "--save", "{system}"], "system", "--system"),
    (["estimate", "--collective", "allgather", "--size", "30kB", "--plot", "{system}"], "system", "--system"),
    (["place", "--collective", "allgather", "--size", "30kB", "--plot", "{system}"], "system", "--system"),
    (["simulate", "--collective", "allgather", "--size", "30kB", "--plot", "{system}"], "system", "--system"),
    (["info", "--plot", "{system}"], "system", "--system"),
    (["sensitivity", "--collective", "allgather", "--size", "30kB", "--plot", "{system}"], "system", "--system"),
])
def test_output_flag_onto_the_system_file(inputs, capsys, argv, target, needle):
    before = {k: f.read_bytes() for k, f in inputs.items()}
    argv = [a.format(**inputs) for a in argv] + ["--system", str(inputs["system"])]
    refused(argv, capsys, needle, "destroy")
    _unchanged(inputs, before)


def test_output_flags_onto_other_inputs(inputs, tmp_path, capsys, saved_placement):
    from nuna_jax.optim.io import save_placement
    plan, pl, _ = saved_placement
    pf = tmp_path / "p.json"
    save_placement(str(pf), TINY, plan, pl)
    inputs = {**inputs, "placement": pf}
    before = {k: f.read_bytes() for k, f in inputs.items()}
    refused(["estimate", *ARGS, "--placement", pf, "--plot", pf], capsys, "--placement", "destroy")
    refused(["e2e", "--model", inputs["model"], "--rebuild-table", "--table", inputs["model"]], capsys,
            "--model", "destroy")
    refused(["e2e", "--all", "--config", inputs["config"], "--rebuild-table", "--table", inputs["config"]], capsys,
            "--config", "destroy")
    refused(["e2e", "--model", "llama-7b", "--system", inputs["system"], "--rebuild-table", "--table",
             inputs["system"]], capsys, "--system", "destroy")
    # through another name of the same file (a symlink)
    link = tmp_path / "link.toml"
    link.symlink_to(inputs["system"])
    refused(["optimize", "--system", inputs["system"], "--collective", "allgather", "--size", "30kB",
             "--save", link], capsys, "destroy")
    _unchanged(inputs, before)


def test_sweep_out_onto_its_grid_and_nowhere(tmp_path, capsys):
    grid = tmp_path / "g.csv"                       # a TOML grid that --out's suffix rule would accept
    grid.write_text('[fixed]\nsystem = "mono"\n[axes]\nsize = ["30kB"]\n')
    before = grid.read_bytes()
    refused(["sweep", grid, "--out", grid], capsys, "is the grid file itself")
    refused(["sweep", grid, "--out", tmp_path / "no" / "o.csv"], capsys, "cannot write")
    assert grid.read_bytes() == before


def test_rebuild_table_never_writes_over_a_file_that_is_not_a_table(tmp_path, capsys):
    notes = tmp_path / "notes.json"
    notes.write_text('{"my": "notes"}')
    refused(["e2e", "--model", "llama-7b", "--system", "mono", "--gpus", "2", "--rebuild-table", "--table", notes],
            capsys, "not a collective table")
    assert notes.read_text() == '{"my": "notes"}'


def test_outputs_that_cannot_be_written_exit_2_before_work(tmp_path, capsys):
    refused(["estimate", *ARGS, "--plot", tmp_path / "no" / "x.png"], capsys, "cannot write", "no directory")
    refused(["optimize", *ARGS, "--save", tmp_path / "no" / "x.json"], capsys, "cannot write")
    refused(["optimize", *ARGS, "--save", tmp_path], capsys, "cannot write", "directory")


def test_limits_nesting_depth_is_iterative():
    deep = []
    for _ in range(100_000):
        deep = [deep]
    assert limits.nesting_depth(deep, stop=40) == 41
    with pytest.raises(ValueError, match="nested more than"):
        limits.check_nesting({"a": deep}, "x")
    limits.check_nesting({"a": [[1, 2], {"b": [3]}]}, "x")


def test_best_threadblocks_never_skips_a_candidate_over_the_limits(monkeypatch):
    """``tbs_per_gpu="best"``: a candidate over the work limits refuses the call; it is not silently
    dropped from the search (which would change the answer)."""
    from nuna_jax.scenario import make_scenario
    monkeypatch.setitem(limits.DEFAULT_LIMITS, "threadblocks", 50)     # 3 GPUs x 32 (the largest) > 50
    with pytest.raises(WorkLimitError, match="threadblocks"):
        make_scenario(TINY, collective="allgather", size_bytes=30_000, policy="ua", tbs_per_gpu="best")
