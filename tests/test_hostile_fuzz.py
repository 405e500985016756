"""Fuzz the grammars of model TOMLs (``e2e --model FILE.toml``) and placement JSON (``--placement``),
valid and broken (issue 25; the command-line fuzz is tests/test_fuzz_cli.py).

Every generated file must be read into a model / placement or refused with a ``ValueError``
naming the file (exit 2 on the command line), never any other exception; a model that is read has
finite numbers, a placement that is read lowers to traffic.  The default run only reads (no JIT:
a few seconds); ``-m slow`` runs many more examples (``NUNA_FUZZ_EXAMPLES``) and the ``e2e`` and
``estimate`` commands on them, checking the exit-2 / strict-JSON contract.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nuna_jax.e2e.llm.configs import FIELD_RANGES, ModelConfig, load_model
from nuna_jax.presets import preset
from test_hostile_inputs import fresh_table  # noqa: F401  (a fixture: the shipped table re-sealed)

TINY = preset("mono", n_gpus=3)
FAST = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
DEEP = settings(max_examples=int(os.environ.get("NUNA_FUZZ_EXAMPLES", "400")), deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
STATS = {"model_files": 0, "model_ok": 0, "placement_files": 0, "placement_ok": 0, "cli": 0}


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    print(f"\nhostile fuzz: {STATS}")


# ---------------------------------------------------------------------------------------------
# a small TOML writer (values the grammar generates)

def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(v)


def toml_text(d: dict, table: str | None) -> str:
    head = f"[{table}]\n" if table else ""
    return head + "".join(f"{json.dumps(k) if not k.isidentifier() else k} = {toml_value(v)}\n" for k, v in d.items())


# ---------------------------------------------------------------------------------------------
# model TOML grammar

INT_FIELDS = [k for k, (lo, hi) in FIELD_RANGES.items() if isinstance(hi, int)]
FLOAT_FIELDS = [k for k, (lo, hi) in FIELD_RANGES.items() if isinstance(hi, float)]
BASE = {"name": "fuzz", "n_layers": 4, "hidden": 256, "n_heads": 8, "n_kv_heads": 4, "head_dim": 32,
        "vocab": 1000, "ffn": 512}
MOE = {"n_experts": 8, "top_k": 2, "moe_ffn": 128}

scalars = st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
                    st.booleans(), st.text(max_size=8))
json_values = st.recursive(scalars, lambda c: st.one_of(st.lists(c, max_size=3),
                                                          st.dictionaries(st.text("abcxyz_", min_size=1, max_size=4),
                                                                          c, max_size=3)), max_leaves=6)


def field_value(k):
    lo, hi = FIELD_RANGES[k]
    if isinstance(hi, float):
        return st.one_of(st.floats(lo, hi), st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(
            [lo, hi, -1.0, 0.0, hi * 2]), st.integers(-3, 3))
    return st.one_of(st.integers(lo, min(hi, 64)), st.sampled_from([lo, hi, lo - 1, hi + 1, -1, 0, 2**63]),
                     st.integers(-(2**70), 2**70), st.floats(-10, 10), st.booleans(), st.just("3"))


def valid_value(k):
    lo, hi = FIELD_RANGES[k]
    if isinstance(hi, float):
        return st.floats(lo, hi)
    return st.integers(max(lo, 0), min(hi, 16))


@st.composite
def model_docs(draw):
    d = dict(BASE)
    if draw(st.booleans()):
        d.update(MOE)
    if draw(st.booleans()):
        d.update({"attention": "mla", "kv_lora_rank": 64, "v_head_dim": 32, "qk_rope_dim": 16})
    valid = draw(st.integers(0, 2)) == 0                 # a third: in-range values only
    for k in draw(st.lists(st.sampled_from(INT_FIELDS + FLOAT_FIELDS), max_size=4, unique=True)):
        d[k] = draw(valid_value(k) if valid else field_value(k))
    if valid:
        return toml_text(d, "model" if draw(st.booleans()) else None)
    for k in draw(st.lists(st.sampled_from(sorted(d)), max_size=2, unique=True)):
        if draw(st.integers(0, 3)) == 0:
            del d[k]                                     # a required field missing, sometimes
        else:
            d[k] = draw(json_values)                     # any TOML value where a field belongs
    if draw(st.integers(0, 9)) == 0:
        d[draw(st.text("abcdefgh_", min_size=1, max_size=6))] = 1   # an unknown field
    if draw(st.integers(0, 9)) == 0:
        d["attention"] = draw(st.sampled_from(["gqa", "mla", "MLA", "", "flash"]))
    text = toml_text(d, "model" if draw(st.booleans()) else None)
    mode = draw(st.integers(0, 11))
    if mode == 0:                                        # nesting
        n = draw(st.sampled_from([2, 31, 33, 200, 3000]))
        text += "deep = " + "[" * n + "]" * n + "\n"
    elif mode == 1:                                      # truncated
        text = text[:draw(st.integers(0, len(text)))]
    elif mode == 2:                                      # a stray byte
        i = draw(st.integers(0, len(text)))
        text = text[:i] + draw(st.sampled_from(["\x00", "[", "=", "\"", "\xff", "\n["])) + text[i:]
    return text


def _read_model(tmp_path, text: str):
    f = tmp_path / "m.toml"
    f.write_bytes(text.encode("utf-8", "surrogatepass") if "\xff" not in text else text.encode("latin-1", "replace"))
    STATS["model_files"] += 1
    try:
        m = load_model(str(f))
    except ValueError as e:
        msg = str(e)
        assert str(f) in msg and "\n" not in msg.strip(), msg
        return f, None
    assert isinstance(m, ModelConfig)
    from nuna_jax.e2e.llm.layers import model_arrays
    for k, v in model_arrays(m).items():
        assert math.isfinite(float(v)) and float(v) >= 0, (k, v)
    STATS["model_ok"] += 1
    return f, m


@FAST
@given(text=model_docs())
def test_model_toml_grammar(tmp_path, text):
    _read_model(tmp_path, text)


# ---------------------------------------------------------------------------------------------
# placement JSON grammar

@pytest.fixture(scope="module")
def placement_case():
    from nuna_jax.optim.candidates import assemble, make_candidates
    from nuna_jax.optim.io import placement_to_dict
    from nuna_jax.plans import make_plan
    plan = make_plan("allgather", 3, 30_000, tbs_per_gpu=2, slot_align_bytes=TINY.page_bytes)
    cand, _ = make_candidates(TINY, plan, nar_granularity=3, n_candidates=3)
    pl = assemble(TINY, plan, cand, np.array([1, 0, 2, 2, 0, 1]))
    return plan, placement_to_dict(TINY, plan, pl)


ARRAYS = ("tb_cu", "tb_domain", "page_stack", "page_domain")


@st.composite
def placement_edits(draw):
    """A list of edits (path, value | 'del' | 'trunc') applied to a valid placement document."""
    edits = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.integers(0, 5))
        key = draw(st.sampled_from(["format", "policy", "n_gpus", "n_tbs", "n_pages", "routing_granularity",
                                    "placement_granularity", *ARRAYS, "meta", "system", "plan", "extra"]))
        if kind == 0:
            edits.append(((key,), "del"))
        elif kind == 1:
            edits.append(((key,), draw(json_values)))
        elif kind in (2, 3) and key in ARRAYS:
            edits.append(((key, draw(st.integers(0, 5))), draw(st.one_of(
                json_values, st.integers(-3, 200), st.lists(st.integers(-2, 9), max_size=4)))))
        elif kind == 4 and key in ARRAYS:
            edits.append(((key,), "trunc"))
        else:
            edits.append(((key,), draw(st.sampled_from([0, 1, 3, 4, 6, -1, 10**9, None, "OPT", 3.0]))))
    text_mode = draw(st.integers(0, 9))
    return edits, text_mode, draw(st.integers(0, 10**6))


def _apply(d, edits):
    d = json.loads(json.dumps(d))
    for path, v in edits:
        o = d
        for k in path[:-1]:
            o = o.get(k) if isinstance(o, dict) else None
        k = path[-1]
        if isinstance(o, dict):
            if v == "del":
                o.pop(k, None)
            elif v == "trunc" and isinstance(o.get(k), list):
                o[k] = o[k][:-1]
            elif v != "trunc":
                o[k] = v
        elif isinstance(o, list) and isinstance(k, int) and k < len(o):
            o[k] = v if v not in ("del", "trunc") else None
        if len(path) == 2 and isinstance(d.get(path[0]), list) and path[1] < len(d[path[0]]):
            if v not in ("del", "trunc"):
                d[path[0]][path[1]] = v
    return d


def _load_placement(tmp_path, plan, doc, text_mode, cut):
    from nuna_jax.optim.io import load_placement
    text = json.dumps(doc)
    if text_mode == 0:
        text = text[:cut % (len(text) + 1)]
    elif text_mode == 1:
        text = text.replace("]", "]]", 1)
    f = tmp_path / "p.json"
    f.write_text(text)
    STATS["placement_files"] += 1
    try:
        pl = load_placement(str(f), TINY, plan)
    except ValueError as e:
        msg = str(e)
        assert "placement file" in msg and str(f) in msg, msg
        return f, None
    from nuna_jax.lowering import build_traffic
    try:
        t = build_traffic(TINY, plan, pl)
    except ValueError as e:                       # a touched page without a stack: the CLI names the file
        assert "page_stack" in str(e) or "tb_cu" in str(e), e
        return f, None
    assert np.all(np.isfinite(np.asarray(t.flits)))
    STATS["placement_ok"] += 1
    return f, pl


@FAST
@given(case=placement_edits())
def test_placement_json_grammar(tmp_path, placement_case, case):
    plan, doc = placement_case
    edits, text_mode, cut = case
    _load_placement(tmp_path, plan, _apply(doc, edits), text_mode, cut)


def test_the_unedited_placement_loads(tmp_path, placement_case):
    plan, doc = placement_case
    assert _load_placement(tmp_path, plan, doc, 9, 0)[1] is not None


# ---------------------------------------------------------------------------------------------
# slow: the commands on generated files

def _cli(argv) -> tuple[int, str, str]:
    from nuna_jax.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in argv])
    STATS["cli"] += 1
    o, e = out.getvalue(), err.getvalue()
    assert rc in (0, 2), (rc, e[-3000:])
    assert "Traceback" not in e
    if rc == 2:
        assert len(e.strip().splitlines()) == 1, e
    elif "--json" in argv:
        json.loads(o, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    return rc, o, e


@pytest.mark.slow
@DEEP
@given(text=model_docs(), gpus=st.sampled_from([1, 2, 8]), phase=st.sampled_from(["prefill", "decode"]))
def test_e2e_on_generated_models(tmp_path, fresh_table, text, gpus, phase):
    f, _ = _read_model(tmp_path, text)
    _cli(["e2e", "--model", f, "--gpus", gpus, "--phase", phase, "--table", fresh_table, "--json"])


@pytest.mark.slow
@DEEP
@given(case=placement_edits())
def test_estimate_on_generated_placements(tmp_path, placement_case, case):
    plan, doc = placement_case
    edits, text_mode, cut = case
    f, _ = _load_placement(tmp_path, plan, _apply(doc, edits), text_mode, cut)
    _cli(["estimate", "--system", "mono", "--gpus", "3", "--collective", "allgather", "--size", "30kB", "--tbs", "2",
          "--placement", f, "--json"])
