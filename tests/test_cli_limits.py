"""Work limits and the error boundary (issue 11; README "Limits and errors")."""

from __future__ import annotations

import json

import numpy as np
import pytest

from nuna_jax import limits
from nuna_jax.cli import main
from nuna_jax.plans import make_plan


@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "allreduce", "alltoall"])
@pytest.mark.parametrize("algorithm", ["direct", "ring"])
@pytest.mark.parametrize("n,tbs", [(2, None), (3, 1), (5, None), (5, 2), (4, 9), (8, None), (8, 20)])
def test_generated_plan_estimate_bounds_the_plan(collective, algorithm, n, tbs):
    """The estimate (from inputs only) is an upper bound of the built plan; direct bytes are exact."""
    size = 2 * 3 * 5 * 7 * 1024
    est = limits.generated_plan_work(collective, algorithm, n, tbs, size)
    got = limits.plan_work(make_plan(collective, n, size, algorithm=algorithm, tbs_per_gpu=tbs))
    assert got["plan_steps"] <= est["plan_steps"]
    assert got["threadblocks"] <= est["threadblocks"]
    assert got["bytes"] <= est["bytes"]
    if algorithm == "direct":
        # hand count: every GPU sends the n - 1 others their share: (n - 1) * size, twice for two-shot AR
        assert got["bytes"] == (n - 1) * size * (2 if collective == "allreduce" else 1)


def test_limits_scale_with_max_work_and_name_the_input():
    lim = limits.Limits(2.0)
    assert lim.limit("gpus") == 2 * limits.DEFAULT_LIMITS["gpus"]
    lim.check("gpus", 2048, "--gpus 2048")
    with pytest.raises(limits.WorkLimitError, match=r"--gpus 2049 asks for 2049 gpus, over the limit of 2048"):
        lim.check("gpus", 2049, "--gpus 2049")
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="--max-work"):
            limits.Limits(bad)


def test_pages_and_flits_are_checked_before_building(monkeypatch, capsys):
    # 8 GPUs x 1 GB All-Reduce moves 2 * 7 * 10^9 B = 3,417,968.75 pages of 4 KiB, plus 2 x 112 steps
    # (8 GPUs x 2 phases x 7 peers): 3,418,193 after rounding up
    monkeypatch.setitem(limits.DEFAULT_LIMITS, "pages", 3_418_192)
    assert main(["place", "--collective", "allreduce", "--size", "1GB", "--tbs", "7", "--json"]) == 2
    assert "3418193 pages, over the limit of 3418192" in capsys.readouterr().err
    # --tbs best (the default) checks its largest candidate, 16 x 7 = 112 threadblocks per GPU:
    # 8 GPUs x 2 phases x 112 = 1,792 steps, 3,417,968.75 + 2 x 1,792 = 3,421,552.75 -> 3,421,553
    monkeypatch.setitem(limits.DEFAULT_LIMITS, "pages", 3_421_552)
    assert main(["place", "--collective", "allreduce", "--size", "1GB", "--json"]) == 2
    assert "3421553 pages, over the limit of 3421552" in capsys.readouterr().err
    # simulate: 8 GPUs x 1 MB All-Gather = 7 * 10^6 / 256 = 27,343.75 flits, plus 56 steps: 27,400
    monkeypatch.setitem(limits.DEFAULT_LIMITS, "flits", 27_399)
    assert main(["simulate", "--collective", "allgather", "--size", "1MB", "--tbs", "7", "--json"]) == 2
    assert "27400 flits, over the limit of 27399" in capsys.readouterr().err
    # --tbs best: 112 threadblocks per GPU, 8 x 112 = 896 steps: 27,343.75 + 896 -> 28,240
    monkeypatch.setitem(limits.DEFAULT_LIMITS, "flits", 28_239)
    assert main(["simulate", "--collective", "allgather", "--size", "1MB", "--json"]) == 2
    assert "28240 flits, over the limit of 28239" in capsys.readouterr().err


def test_internal_errors_keep_their_traceback(monkeypatch, capsys):
    import nuna_jax.cli.info as info

    def broken(args):
        raise KeyError("boom")
    monkeypatch.setattr(info, "run", broken)
    assert main(["info"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "KeyError" in err and "a bug" in err


def test_json_is_strict():
    from nuna_jax.cli.common import emit_json
    with pytest.raises(RuntimeError, match="non-finite"):
        emit_json({"a": [1.0, {"b": float("nan")}]})
    with pytest.raises(RuntimeError, match=r"output.x"):
        emit_json({"x": np.float32("inf")})


@pytest.mark.parametrize("argv,needle", [
    (["info", "--gpus", "nan"], "--gpus"),
    (["place", "--collective", "allgather", "--size", "1MB", "--tbs", "-3"], "--tbs"),
    (["place", "--collective", "allgather", "--size", "1MB", "--max-work", "0"], "--max-work"),
    (["estimate", "--collective", "allgather", "--size", "1MB", "--temperature", "1e-300"], "temperature"),
    (["kernel", "--op", "gemm+rs", "--m", "4096", "--n", "4096", "--k", "nan"], "--k"),
    (["nosuch"], "invalid choice"),
    ([], "give a command"),
])
def test_usage_errors_are_one_line_exit_2(argv, needle, capsys):
    assert main(argv) == 2
    cap = capsys.readouterr()
    assert cap.err.count("\n") == 1 and needle in cap.err and cap.out == ""


@pytest.mark.slow
def test_legitimate_input_within_the_limits_still_succeeds(capsys):
    assert main(["place", "--collective", "alltoall", "--size", "1MB", "--gpus", "16", "--max-work", "2",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_gpus"] == 16
