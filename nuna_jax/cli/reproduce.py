"""``nuna-jax reproduce``: run the papers' experiments (``experiments/`` of a clone) one after another.

Each experiment is a script under ``experiments/`` that writes its JSON and a
PNG + PDF plot (README, "Reproducing the papers"); the last, ``report``,
regenerates docs/reproduction.md from experiments/out and experiments/data
(with ``--out DIR`` some scripts write under DIR instead, and the report still
reads those two folders).  This command runs the chosen ones in
order, with a progress bar on a terminal, and reports each one's status and
wall time.  ``--quick`` passes each script the flags of its reduced grid (a
few minutes in all on a 2-core CPU); the default is the papers' full grids.
The scripts live in the repository, not in the installed package: from an
installation without the clone the command says so (exit 2).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from .common import emit_json


class Experiment(NamedTuple):
    script: str          # file under experiments/
    what: str            # the paper figure or table
    quick: tuple = ()    # flags of the reduced grid (--quick)
    takes_out: bool = False   # the script accepts --out DIR


#: name -> experiment, in the order ``--all`` runs them (cheap first)
EXPERIMENTS = {
    "pk_table3": Experiment("pk_table3.py", "ParallelKittens Table 3 (GEMM vs fused GEMM+RS)", (), True),
    "pk_overlap": Experiment("pk_overlap.py", "ParallelKittens intra- vs inter-SM overlap", (), True),
    "pk_mechanisms": Experiment("pk_mechanisms.py", "ParallelKittens transfer mechanisms", (), True),
    "pk_baselines": Experiment("pk_baselines.py", "ParallelKittens vs NCCL / cuBLAS+NCCL / xDiT / YunChang; "
                               "ring attention, Ulysses, MoE", (), True),
    "spread": Experiment("spread.py", "NUNA 1, 3.1.3, Fig. 4: zero-load latency spread of the socket", (), True),
    "fig2": Experiment("fig2_collective_sizes.py", "NUNA Fig. 2: collective output sizes", (), True),
    "fig15": Experiment("fig15_e2e.py", "NUNA Fig. 15: end-to-end runtime decomposition", (), True),
    "fig12": Experiment("fig12_size.py", "NUNA Fig. 12: NAP+NAR speedup vs size", ("--tbs-mults", "1"), True),
    "fig11": Experiment("fig11_isolation.py", "NUNA Fig. 11: the seven configurations",
                        ("--no-sim", "--tbs-mults", "1"), True),
    "fig13": Experiment("fig13_nar_granularity.py", "NUNA Fig. 13: NAR granularity", ("--no-sim",), True),
    "fig9": Experiment("fig9_speedup.py", "NUNA Fig. 9: speedup vs size and GPUs", ("--quick",), True),
    "fig10": Experiment("fig10_latency_hist.py", "NUNA Fig. 10: store-latency histograms (simulator)", (), True),
    "fig14": Experiment("fig14_gemm_interference.py", "NUNA Fig. 14: All-Gather beside a GEMM (simulator)",
                        ("--quick",), True),
    "validation": Experiment("validate_analytical.py", "estimate vs simulator", ("--quick",), True),
    "readings": Experiment("readings.py", "NUNA 6.2 / Table 2: 8-GPU headline over the open readings (simulator)", (), True),
    "backpressure": Experiment("backpressure.py", "NUNA under back-pressure: Figs. 10-12 and the 8-GPU headline with "
                               "credit flow control (simulator)", ("--quick",), True),
    # last: the report reads every JSON above (and experiments/out/*.jsonl of fidelity_device.py)
    "report": Experiment("fidelity_table.py", "docs/reproduction.md/.json + docs/fidelity.md from the experiments' JSON", (), True),
}


def experiments_dir() -> Path:
    """``experiments/`` of the clone this package runs from; ``ValueError`` if there is none."""
    d = Path(__file__).resolve().parents[2] / "experiments"
    if not d.is_dir():
        raise ValueError(f"no experiments/ folder next to the package ({d}): reproduce runs from a clone of "
                         "the repository (pip install -e .)")
    return d


def add_parser(sub) -> None:
    p = sub.add_parser("reproduce", help="run the papers' experiments (scripts under experiments/)",
                       description="Run the NUNA and ParallelKittens experiments of experiments/ in order, "
                                   "each writing its JSON and PNG + PDF plot, then the report "
                                   "(docs/reproduction.md); --quick uses reduced grids.")
    p.add_argument("names", nargs="*", metavar="NAME", help=f"experiments to run: {', '.join(EXPERIMENTS)}")
    p.add_argument("--all", action="store_true", help="every experiment, in the order listed")
    p.add_argument("--quick", action="store_true", help="reduced grids (a few minutes on a 2-core CPU)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="results folder for the scripts that take one (default: each script's own)")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="run up to N experiments at once (the report still runs last; default 1)")
    p.add_argument("--list", action="store_true", help="list the experiments and exit")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    from .common import add_max_work_arg
    add_max_work_arg(p)            # each experiment runs under it (nuna_jax.cli.limited)


def _chosen(args) -> list[str]:
    if args.all:
        return list(EXPERIMENTS)
    if not args.names:
        raise ValueError("name at least one experiment or give --all (see nuna-jax reproduce --list)")
    bad = [n for n in args.names if n not in EXPERIMENTS]
    if bad:
        raise ValueError(f"unknown experiment(s) {', '.join(bad)}; choose from {', '.join(EXPERIMENTS)}")
    return list(dict.fromkeys(args.names))


def _first_done(running: dict) -> str:
    """Name of the first running experiment to finish (polls every 0.2 s)."""
    while True:
        for name, (proc, _, _) in running.items():
            if proc.poll() is not None:
                return name
        time.sleep(0.2)


def run(args) -> int:
    if args.list:
        rows = {n: {"script": f"experiments/{e.script}", "what": e.what, "quick_flags": list(e.quick)}
                for n, e in EXPERIMENTS.items()}
        if args.json:
            emit_json({"experiments": rows})
        else:
            for n, r in rows.items():
                print(f"  {n:15s} {r['script']:40s} {r['what']}")
        return 0
    names = _chosen(args)
    if args.jobs < 1 or args.jobs > 256:
        raise ValueError(f"--jobs must lie in [1, 256], got {args.jobs}")
    root = experiments_dir()
    if args.quick and not args.json:
        print("note: --quick writes its reduced grids over experiments/out and experiments/data "
              "(`git checkout experiments` restores the committed full-grid results)", file=sys.stderr)
    out_dir = Path(args.out).resolve() if args.out else None   # relative to where the user stands, not the clone

    def command(name):
        e = EXPERIMENTS[name]
        script = [str(root / e.script)]
        if args.max_work != 1.0:         # the library's limits inside the script: --max-work's
            script = ["-m", "nuna_jax.cli.limited", repr(float(args.max_work))] + script
        cmd = [sys.executable, *script] + (list(e.quick) if args.quick else [])
        if out_dir is not None and e.takes_out:
            cmd += ["--out", str(out_dir / name)]
        return cmd

    running: dict = {}

    def stop_children(signum=None, frame=None):
        """SIGINT / SIGTERM: end every running experiment (and its children), then exit 128 + signal."""
        for proc, _, _ in running.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except (ProcessLookupError, PermissionError):
                    pass
        deadline = time.monotonic() + 10
        for proc, _, _ in running.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        raise SystemExit(128 + (signum or signal.SIGINT))

    old = {sig: signal.signal(sig, stop_children) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _run_waves(args, names, command, running)
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def _run_waves(args, names, command, running) -> int:
    from ..progress import Progress
    root = experiments_dir()

    # the report reads every other experiment's JSON: it waits for all of them
    waves = [[n for n in names if n != "report"]] + ([["report"]] if "report" in names else [])
    results = []
    with Progress(total=len(names), label="running", unit="experiments", enabled=not args.json) as bar:
        for wave in waves:
            pending = list(wave)
            while pending or running:
                while pending and len(running) < args.jobs:
                    name = pending.pop(0)
                    log = tempfile.TemporaryFile(mode="w+")   # a file, not a pipe: no child blocks on output
                    # each experiment leads its own process group, so a signal can end it and its children
                    running[name] = (subprocess.Popen(command(name), cwd=root.parent, stdout=log,
                                                      stderr=subprocess.STDOUT, text=True, start_new_session=True),
                                     time.perf_counter(), log)
                name = _first_done(running)
                proc, t0, log = running.pop(name)
                proc.wait()
                log.seek(0)
                out = log.read()
                log.close()
                wall = time.perf_counter() - t0
                results.append({"name": name, "script": f"experiments/{EXPERIMENTS[name].script}",
                                "rc": proc.returncode, "wall_s": wall, "tail": out.strip().splitlines()[-3:]})
                bar.update(len(results), note=name, force=True)
                if not args.json:
                    status = "ok" if proc.returncode == 0 else "FAILED (rc %d)" % proc.returncode
                    print(f"  {name:15s} {status:14s} {wall:7.1f} s", flush=True)
    failed = [r["name"] for r in results if r["rc"] != 0]
    if args.json:
        emit_json({"quick": bool(args.quick), "experiments": results, "failed": failed})
    elif failed:
        for r in results:
            if r["rc"]:
                print(f"{r['name']}: " + " | ".join(r["tail"]), file=sys.stderr)
    return 1 if failed else 0
