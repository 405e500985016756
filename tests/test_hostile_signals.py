"""SIGTERM / SIGINT stop ``nuna-jax e2e`` and every process of its collective-table build, and
leave the build resumable (issue 25).  A real build of a small system's table in a subprocess:
about a minute on 2 busy cores, so under the ``slow`` marker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _children(pid: int) -> set[int]:
    """Every descendant of ``pid`` (Linux /proc)."""
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        for t in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = (t / "children").read_text().split()
            except OSError:
                continue
            for k in map(int, kids):
                if k not in out:
                    out.add(k)
                    todo.append(k)
    return out


def _alive(pid: int) -> bool:
    try:
        st = Path(f"/proc/{pid}/stat").read_text().split()
    except OSError:
        return False
    return st[2] != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_the_table_build_and_its_workers(tmp_path, sig):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "NUNA_JAX_CACHE_DIR": "", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "nuna_jax", "e2e", "--model", "llama-7b", "--system", "mono", "--gpus", "2",
            "--jobs", "2"]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        part = tmp_path / "nuna_jax" / "e2e_tables"
        deadline = time.time() + 240
        kids: set[int] = set()
        # wait for the workers and for the first finished run (the partial file)
        while time.time() < deadline and proc.poll() is None:
            kids |= _children(proc.pid)
            if len(kids) >= 2 and list(part.glob("partial-*.json")):
                break
            time.sleep(0.5)
        assert proc.poll() is None, proc.communicate()
        assert len(kids) >= 2 and list(part.glob("partial-*.json")), "the build did not start in time"
        t0 = time.time()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
        assert time.time() - t0 < 30
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + sig if sig == signal.SIGTERM else proc.returncode == 130, (proc.returncode, err)
    assert "Traceback" not in err, err
    time.sleep(1.0)
    left = [k for k in kids if _alive(k)]
    assert left == [], f"worker processes still running: {left}"
    # resumable: the same command picks up the finished runs
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        err2 = ""
        while time.time() < deadline and proc.poll() is None:
            time.sleep(1.0)
            if list(part.glob("partial-*.json")) and _children(proc.pid):
                break
        proc.send_signal(signal.SIGTERM)
        _, err2 = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "resuming from" in err2, err2
