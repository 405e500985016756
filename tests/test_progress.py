"""One progress path (nuna_jax.progress, rich): named stages with counts and an ETA on a terminal, and not
one byte of progress off a terminal, for every command that has a bar."""

import io
import json
import sys

import pytest

import nuna_jax.progress as P
from nuna_jax.cli import main

SMALL = ["--system", "mono", "--gpus", "2"]
AG = ["--collective", "allgather", "--size", "30kB"]
BAR_MARKS = ("\r", "\x1b[") + P.STAGES + ("collective table", "ETA")


@pytest.fixture
def no_display(monkeypatch):
    """Off a terminal no display may even be built: building one fails the test."""
    def refuse(*a, **k):
        raise AssertionError("a progress display was built while stderr is not a terminal")
    monkeypatch.setattr(P, "_rich_progress", refuse)


def _quiet(capsys, argv):
    assert not sys.stderr.isatty()
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 0, err[-2000:]
    for m in BAR_MARKS:
        assert m not in err, (m, err[-500:])
    return out, err


def _sweep_args(tmp_path):
    g = tmp_path / "grid.toml"
    g.write_text('[sweep]\nsystem = "mono"\n[axes]\nmodel = ["closed_form"]\ncollective = ["allgather"]\n'
                 'gpus = [2, 4]\nsize = ["100kB", "1MB"]\n')
    return ["sweep", str(g), "--out", str(tmp_path / "o.csv")]


def _reproduce_args(tmp_path, monkeypatch):
    from nuna_jax.cli import reproduce as R
    f = tmp_path / "fake.py"
    f.write_text("print('done')\n")
    monkeypatch.setattr(R, "EXPERIMENTS", {"fake": R.Experiment(str(f), "a stand-in experiment")})
    return ["reproduce", "fake"]


def _e2e_all_args(tmp_path):
    from nuna_jax.e2e.llm import collective_table as C, provenance as PV
    d = C.read_table(C.SHIPPED)
    fh = PV.model_file_hashes()
    t = tmp_path / "table.json"
    t.write_text(json.dumps(C.seal({**d, "model_hash": PV.model_hash(fh), "model_files": fh})))
    cfg = tmp_path / "run.toml"
    cfg.write_text('models = ["llama-7b"]\ngpus = [2]\nphases = ["decode"]\n')
    return ["e2e", "--all", "--config", str(cfg), "--table", str(t)]


# every command with a bar; the cheap ones run by default
COMMANDS = [
    ("estimate-all", lambda tmp, mp: ["estimate", *AG, *SMALL, "--policy", "all", "--tbs", "1"]),
    ("sweep", lambda tmp, mp: _sweep_args(tmp)),
    ("reproduce", _reproduce_args),
    pytest.param("simulate", lambda tmp, mp: ["simulate", *AG, *SMALL, "--policy", "UA", "--tbs", "1"],
                 marks=pytest.mark.slow),
    pytest.param("sensitivity", lambda tmp, mp: ["sensitivity", *AG, *SMALL, "--tbs", "1"], marks=pytest.mark.slow),
    pytest.param("optimize", lambda tmp, mp: ["optimize", *AG, *SMALL, "--tbs", "2", "--nar-granularity", "3",
                                              "--candidates", "3", "--budget", "60",
                                              "--no-baselines"], marks=pytest.mark.slow),
    pytest.param("e2e-all", lambda tmp, mp: _e2e_all_args(tmp), marks=pytest.mark.slow),
]


@pytest.mark.parametrize("name,make", COMMANDS, ids=[getattr(c, "values", c)[0] for c in COMMANDS])
def test_no_progress_output_when_stderr_is_not_a_terminal(capsys, tmp_path, monkeypatch, no_display, name, make):
    _quiet(capsys, make(tmp_path, monkeypatch))


@pytest.mark.slow
def test_the_collective_table_build_draws_nothing_off_a_terminal(capsys, tmp_path, no_display):
    from nuna_jax.e2e.llm.collective_table import build_table
    from nuna_jax.presets import preset
    d = build_table(preset("mono"), groups=[2], sizes=[4096, 8192], multiples=(1,), resume=False, progress=True,
                    partial=tmp_path / "partial.json")
    assert len(d["time_ns"]) > 0
    err = capsys.readouterr().err
    for m in BAR_MARKS:
        assert m not in err, (m, err)


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_on_a_terminal_the_main_command_shows_its_named_stages(monkeypatch, capsys):
    """stderr a terminal: estimate --policy all draws planning and evaluating, each to its full count."""
    fake = _Tty()
    monkeypatch.setattr(sys, "stderr", fake)
    assert main(["estimate", *AG, *SMALL, "--policy", "all", "--tbs", "1"]) == 0
    err = fake.getvalue()
    for stage in ("planning", "evaluating"):
        assert stage in err, err[-800:]
    assert "7/7" in err and "policies" in err and "ETA" in err
    assert "simulating" not in err                    # no --simulate: no such stage
    assert "speedup" in capsys.readouterr().out       # the table itself goes to stdout as before


def test_stages_count_and_finish(monkeypatch):
    fake = _Tty()
    monkeypatch.setattr(sys, "stderr", fake)
    with P.Stages("x") as st:
        with st.stage("planning", 3, "steps") as s:
            for _ in range(3):
                s.advance()
        assert s.done == 3
        with st.stage("compiling"):                   # not countable: finished when the block ends
            pass
        sc, fn = st.callback("optimizing", ["a", "b", "c"])
        with sc:
            fn("b")
            assert sc.done == 2
    out = fake.getvalue()
    assert "planning" in out and "compiling" in out and "3/3" in out


def test_disabled_or_off_a_terminal_nothing_is_drawn(monkeypatch, no_display, capsys):
    with P.Stages("x") as st, st.stage("planning", 2) as s:
        s.advance()
    with P.Progress(10, "simulating", unit="flits") as bar:
        bar.update(5, force=True)
    monkeypatch.setattr(sys, "stderr", _Tty())
    with P.Stages("x", enabled=False) as st, st.stage("planning", 2) as s:       # --json: off even on a tty
        s.advance()
    assert capsys.readouterr().err == ""
