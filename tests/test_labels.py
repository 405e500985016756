"""Labels that tell the truth (issue 20 item 6): a loaded placement is labelled by its own policy, a
TOML system by its file (with its base beside it), and every JSON carries the code's provenance."""

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from nuna_jax.cli import main
from nuna_jax.lowering import build_traffic
from nuna_jax.optim.candidates import assemble, make_candidates
from nuna_jax.optim.io import placement_to_dict, save_placement
from nuna_jax.optim.search import Evaluator
from nuna_jax.plans import make_plan
from nuna_jax.presets import from_toml, preset, system_origin
from nuna_jax.provenance import git_commit, provenance

ROOT = Path(__file__).resolve().parents[1]
TINY = preset("mono", n_gpus=3)
ARGS = ["--system", "mono", "--gpus", "3", "--collective", "allgather", "--size", "30kB"]


def _run(argv, capsys):
    rc = main(argv)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A placement as `nuna-jax optimize --save` writes it (assembled from candidates: policy OPT)."""
    plan = make_plan("allgather", 3, 30_000, slot_align_bytes=TINY.page_bytes)   # as the CLI builds it
    cand, _ = make_candidates(TINY, plan, nar_granularity=3, n_candidates=3)
    choice = np.array([1, 0, 2, 2, 0, 1])
    pl = assemble(TINY, plan, cand, choice)
    # the optimizer's answer comes from the same Evaluator -> assemble path, with the same label
    assert Evaluator(TINY, plan, cand)(choice)[0].policy == pl.policy == "OPT"
    f = tmp_path_factory.mktemp("pl") / "opt.json"
    save_placement(str(f), TINY, plan, pl)
    return f, plan, pl


def test_saved_placement_is_labelled_by_its_own_policy(saved, capsys, tmp_path):
    f, plan, pl = saved
    assert json.loads(f.read_text())["policy"] == "OPT"
    # estimate: JSON and text say OPT, not the default --policy nap+nar
    rc, out, _ = _run(["estimate", *ARGS, "--placement", str(f), "--json"], capsys)
    assert rc == 0 and json.loads(out)["policy"] == "OPT"
    rc, out, _ = _run(["estimate", *ARGS, "--placement", str(f)], capsys)
    assert rc == 0 and "policy OPT" in out and "NAP+NAR" not in out
    # simulate and place
    rc, out, _ = _run(["simulate", *ARGS, "--placement", str(f), "--json"], capsys)
    assert rc == 0 and json.loads(out)["scenario"]["policy"] == "OPT"
    rc, out, _ = _run(["simulate", *ARGS, "--placement", str(f)], capsys)
    assert rc == 0 and "policy OPT" in out
    rc, out, _ = _run(["place", *ARGS, "--placement", str(f), "--json"], capsys)
    assert rc == 0 and json.loads(out)["scenario"]["placement"]["policy"] == "OPT"
    # a name saved in the file is kept, whatever --policy says
    d = placement_to_dict(TINY, plan, pl)
    d["policy"] = "MY-SEARCH"
    g = tmp_path / "mine.json"
    g.write_text(json.dumps(d))
    rc, out, _ = _run(["estimate", *ARGS, "--policy", "ua", "--placement", str(g), "--json"], capsys)
    assert rc == 0 and json.loads(out)["policy"] == "MY-SEARCH"
    # one placement cannot be seven policies
    rc, _, err = _run(["estimate", *ARGS, "--policy", "all", "--placement", str(f)], capsys)
    assert rc == 2 and "--placement" in err
    # a generated placement keeps its policy's name
    rc, out, _ = _run(["estimate", *ARGS, "--policy", "nap+nar", "--json"], capsys)
    assert json.loads(out)["policy"] == "NAP+NAR"


def test_a_toml_system_is_named_after_its_file(tmp_path, capsys):
    f = tmp_path / "slow-switch.toml"
    f.write_text('base = "table2"\nswitch_latency_ns = 900\n')
    s = from_toml(f)
    assert s.name == "slow-switch" and s.switch_latency_ns == 900.0 and s.mesh_cols == 24
    assert system_origin(str(f)) == {"system_base": "table2", "system_file": str(f)}
    g = tmp_path / "named.toml"                       # its own name wins over the file's
    g.write_text('[system]\nbase = "mono"\nname = "my-mono"\nhop_cycles = 20\n')
    assert from_toml(g).name == "my-mono" and system_origin(str(g))["system_base"] == "mono"
    h = tmp_path / "nobase.toml"                      # no base: Table 2 fills the rest, and says so
    h.write_text("n_gpus = 4\n")
    assert from_toml(h).name == "nobase" and system_origin(str(h))["system_base"] == "table2"
    assert system_origin("table2") == {"system_base": None, "system_file": None}
    # the CLI: JSON has system, system_base, system_file; the text line names the file and the base
    m = tmp_path / "fast-mono.toml"
    m.write_text('base = "mono"\nport_bw_bytes_per_ns = 50\n')
    argv = ["estimate", "--system", str(m), "--gpus", "2", "--collective", "allgather", "--size", "10kB"]
    rc, out, _ = _run([*argv, "--json"], capsys)
    d = json.loads(out)
    assert rc == 0 and (d["system"], d["system_base"], d["system_file"]) == ("fast-mono", "mono", str(m))
    rc, out, _ = _run(argv, capsys)
    assert rc == 0 and f"(fast-mono ({m}, base mono))" in out and "(mono)" not in out
    rc, out, _ = _run(["info", "--system", str(m), "--json"], capsys)
    d = json.loads(out)
    assert rc == 0 and (d["system"], d["name"], d["system_base"]) == ("fast-mono", "fast-mono", "mono")
    rc, out, _ = _run(["info", "--system", "mono", "--json"], capsys)
    d = json.loads(out)
    assert (d["system"], d["system_base"], d["system_file"]) == ("mono", None, None)


def test_every_cli_json_carries_provenance(capsys, saved):
    rc, out, _ = _run(["estimate", *ARGS, "--json"], capsys)
    d = json.loads(out)
    # the package's provenance, then the command's (docs/json.md: system, its TOML source, the command line)
    assert rc == 0 and list(d)[-1] == "provenance" and provenance().items() <= d["provenance"].items()
    assert d["provenance"]["command_line"] == "nuna-jax estimate " + " ".join(ARGS) + " --json"
    assert (d["provenance"]["system"], d["provenance"]["system_file"]) == (d["system"], None)
    assert d["provenance"]["nuna_jax_version"]
    assert "time_ns" in d and "system" in d                               # every existing key kept
    rc, out, _ = _run(["info", "--system", "mono", "--json"], capsys)
    assert provenance().items() <= json.loads(out)["provenance"].items()
    f, _, _ = saved                                                        # a saved placement too
    assert provenance().items() <= json.loads(f.read_text())["provenance"].items()


def test_git_commit_is_the_checkout_head_and_never_fails(tmp_path):
    if shutil.which("git") and (ROOT / ".git").exists():
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
        if head.returncode == 0:
            assert git_commit(ROOT) == head.stdout.strip()
    assert git_commit(tmp_path) is None                                     # no checkout
    sha, sha2 = "a" * 40, "b" * 40
    # a plain checkout: HEAD -> a loose ref; then the same ref only in packed-refs
    repo = tmp_path / "repo"
    (repo / ".git" / "refs" / "heads").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / ".git" / "refs" / "heads" / "main").write_text(sha + "\n")
    assert git_commit(repo) == sha
    (repo / ".git" / "refs" / "heads" / "main").unlink()
    (repo / ".git" / "packed-refs").write_text(f"# pack-refs with: peeled\n{sha2} refs/heads/main\n")
    assert git_commit(repo) == sha2
    # a worktree: .git is a file naming its gitdir, whose commondir holds the branch refs
    wt = tmp_path / "wt"
    wt.mkdir()
    gd = repo / ".git" / "worktrees" / "wt"
    gd.mkdir(parents=True)
    (wt / ".git").write_text(f"gitdir: {gd}\n")
    (gd / "commondir").write_text("../..\n")
    (gd / "HEAD").write_text("ref: refs/heads/feature\n")
    (repo / ".git" / "refs" / "heads" / "feature").write_text(sha + "\n")
    assert git_commit(wt) == sha
    (gd / "HEAD").write_text(sha2 + "\n")                                  # detached
    assert git_commit(wt) == sha2
    # garbage anywhere: None, never an exception
    (gd / "HEAD").write_text("ref: refs/heads/missing\n")
    assert git_commit(wt) is None
    (wt / ".git").write_bytes(b"\xff\xfe")
    assert git_commit(wt) is None
