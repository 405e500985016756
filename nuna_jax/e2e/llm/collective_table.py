"""Collective times for the end-to-end model: the ONE place that calls the NUNA collective model.

NUNA section 5.2 times each collective of an inference step with the NoC and
scale-up network model.  Here every distinct (collective, group size, policy)
is timed by ``models.contention.evaluate`` over a log-spaced grid of per-GPU
buffer sizes (nccl-tests convention, ``nuna_jax.plans``) and the search
interpolates in log-log (:func:`interp_time_ns`, jit/vmap-able).  A
collective among ``n`` GPUs of a larger pod is timed on an ``n``-GPU pod of
the same sockets (the single-level Clos switch of Table 2 isolates groups).
How one entry is timed is :mod:`.collective_timing`.

A table records what built it (:mod:`.provenance`): the hash of the model
code (``model_hash``, over every module ``collective_timing`` imports, and
each file's hash in ``model_files``), the system's parameters, the grid
(kinds, policies, groups, sizes, threadblock rule) and a ``table_hash``
sealing all of it with the numbers.  :func:`load_table` checks it: a table
built by other code is *stale* and refused (:class:`StaleTableError`, naming
the command that rebuilds it) unless ``rebuild=True``; an unreadable, edited
or malformed one is refused (:class:`TableError`) naming the file.

The Table 2 table ships as data (``data/table2_collectives.json``); rebuild
it in one command (``--jobs`` processes; progress bar on a terminal; an
interrupted build resumes from its partial file)::

    python -m nuna_jax.e2e.llm.collective_table --jobs 16
    python -m nuna_jax.e2e.llm.collective_table --check     # current? (exit 0 / 1)

Another ``--system`` is tabled on the fly for the group sizes a call needs
and cached on disk (``$XDG_CACHE_HOME/nuna_jax/e2e_tables``, keyed by the
system, the grid and the model hash: a stale cache entry is never found).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from . import provenance
from .collective_timing import TBS_MULTIPLES, best_time_ns, time_or_none  # noqa: F401  (re-exported)

__all__ = ["KINDS", "POLICIES", "GROUP_SIZES", "SIZE_GRID_BYTES", "TBS_MULTIPLES", "FORMAT", "SHIPPED",
           "TableError", "StaleTableError", "build_table", "load_table", "read_table", "table_status",
           "seal", "rebuild_command", "interp_time_ns", "DATA_DIR", "best_time_ns"]

KINDS = ("allreduce", "alltoall", "allgather")      # what an inference step issues (layers.py)
POLICIES = ("ua", "nap+nar")                        # NUNA section 5.3 baseline and full scheme
GROUP_SIZES = (2, 4, 8, 16, 32, 64)                 # NUNA section 6.7: 2-64 GPUs
#: 1 kB .. 100 MB, two per decade (docs/e2e.md "Collective table": NUNA 2 puts prefill collectives at
#: "tens of megabytes"; beyond the grid the search extrapolates at the last slope, at least linear)
SIZE_GRID_BYTES = tuple(int(round(10 ** (3 + k / 2))) // 2 * 2 for k in range(11))
FORMAT = "nuna_jax.e2e_collective_table/2"
DATA_DIR = Path(__file__).resolve().parent / "data"
SHIPPED = DATA_DIR / "table2_collectives.json"
MODULE_CMD = "python -m nuna_jax.e2e.llm.collective_table"
#: keys the seal (``table_hash``) covers; ``build`` (when, where, how long) is a record, not content
SEALED = ("format", "system", "system_params", "kinds", "policies", "groups", "sizes_bytes", "tbs_rule",
          "model_hash", "model_files", "time_ns", "tbs_per_gpu")


class TableError(ValueError):
    """A collective table that cannot be used: unreadable, malformed, edited, or for other hardware."""


class StaleTableError(TableError):
    """A well-formed table built by other model code than this tree's."""


# ---------------------------------------------------------------------------------------------
# building

def tbs_rule(multiples=TBS_MULTIPLES) -> dict:
    return {"rule": "fastest of m * (n_gpus - 1) threadblocks per GPU (NUNA 5.1)",
            "multiples": [int(m) for m in multiples]}


def grid_spec(system, *, groups=GROUP_SIZES, sizes=SIZE_GRID_BYTES, multiples=TBS_MULTIPLES) -> dict:
    """What a table is built over (the sealed keys but the model and the numbers)."""
    groups = sorted({int(g) for g in groups})
    sizes = sorted({int(s) for s in sizes})
    if not groups or groups[0] < 2:
        raise ValueError(f"collective table: group sizes must be >= 2, got {groups}")
    if len(sizes) < 2 or sizes[0] < 1:
        raise ValueError(f"collective table: give at least two sizes >= 1 byte, got {sizes}")
    if not multiples or min(int(m) for m in multiples) < 1:
        raise ValueError(f"collective table: threadblock multiples must be >= 1, got {list(multiples)}")
    return {"format": FORMAT, "system": system.name, "system_params": provenance.system_params(system),
            "kinds": list(KINDS), "policies": list(POLICIES), "groups": groups, "sizes_bytes": sizes,
            "tbs_rule": tbs_rule(multiples)}


def _task(args):
    """One (entry, threadblock multiple), in a worker process: ("ok", key, time or None, seconds)
    or ("oom", key, None, seconds) when it ran out of the worker's memory cap."""
    system, kind, policy, n, size, m = args
    key = (kind, policy, n, size, m)
    t0 = time.time()
    try:
        t = time_or_none(system, kind, n, size, policy, m * (n - 1))
    except MemoryError:
        return "oom", key, None, time.time() - t0
    except Exception as e:              # XLA's allocator: JaxRuntimeError "RESOURCE_EXHAUSTED: Out of memory"
        if "RESOURCE_EXHAUSTED" in str(e) or "Out of memory" in str(e):
            return "oom", key, None, time.time() - t0
        raise
    return "ok", key, t, time.time() - t0


def _mem_budget_bytes() -> int:
    """90% of the memory available now (Linux ``MemAvailable``), else 80% of the physical memory."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(0.9 * int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(0.8 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):     # pragma: no cover
        return 0


def _rss_bytes(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class _MemoryGuard:
    """Watches the pool's workers (Linux ``/proc``) and kills the largest when together they pass
    ``budget`` bytes of resident memory: the runs in flight are then retried with fewer processes,
    instead of the kernel's out-of-memory killer taking some other process of the machine."""

    def __init__(self, executor, budget: int):
        import threading
        self.ex, self.budget, self.killed = executor, int(budget), False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        if self.budget > 0 and Path("/proc/self/statm").is_file():
            self._thread.start()

    def _watch(self):
        import signal
        while not self._stop.wait(0.5):
            procs = dict(getattr(self.ex, "_processes", None) or {})
            rss = {pid: _rss_bytes(pid) for pid in procs}
            if rss and sum(rss.values()) > self.budget:
                pid = max(rss, key=rss.get)
                self.killed = True
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
                self._stop.wait(2.0)

    def stop(self):
        self._stop.set()


def _run_pool(todo: list, jobs: int, mem_bytes: int, note) -> None:
    """Run ``todo`` in ``jobs`` spawned processes whose resident memory together stays under
    ``mem_bytes`` (:class:`_MemoryGuard`).

    A run that XLA cannot allocate, or that was in flight when the guard killed a worker, is
    tried again in a second round with a quarter of the processes, then alone; only a run that
    fails even then is an error.  At most ``jobs`` runs are in flight, so a killed worker costs
    only the runs it shared the pool with.
    """
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool
    import multiprocessing as mp
    rounds, seen = [], set()
    for j in (jobs, max(1, jobs // 4), 1):
        if j not in seen:
            seen.add(j)
            rounds.append(j)
    for r, j in enumerate(rounds):
        later = []
        queue = list(todo)
        while queue:
            ex = ProcessPoolExecutor(j, mp_context=mp.get_context("spawn"), initializer=_worker_init)
            guard = _MemoryGuard(ex, mem_bytes)
            running = {}
            broken = False
            try:
                while queue or running:
                    while queue and len(running) < j:
                        try:
                            f = ex.submit(_task, queue[0])
                        except BrokenProcessPool:       # the guard killed a worker since the last wait
                            broken = True
                            break
                        running[f] = queue.pop(0)
                    if not running:
                        break
                    fin, _ = wait(list(running), return_when=FIRST_COMPLETED)
                    for f in fin:
                        t = running.pop(f)
                        try:
                            status, key, val, sec = f.result()
                        except BrokenProcessPool:
                            broken = True
                            later.append(t)
                            continue
                        if status == "oom":
                            later.append(t)
                        else:
                            note(key, val, sec)
                    if broken:
                        later += list(running.values())
                        running = {}
                        break
            except BaseException:               # SIGINT / SIGTERM / an error: stop every worker now
                broken = True
                _stop_workers(ex)
                raise
            finally:
                guard.stop()
                ex.shutdown(wait=not broken, cancel_futures=True)
        if not later:
            return
        todo = later
        if r + 1 < len(rounds):
            print(f"collective table: {len(later)} runs did not fit in {mem_bytes / 2**30:.1f} GiB with {j} "
                  f"processes; again with {rounds[r + 1]}", file=sys.stderr)
    raise MemoryError(f"collective table: {len(todo)} runs do not fit in {mem_bytes / 2**30:.1f} GiB "
                      f"even alone (e.g. {todo[0][1:]}); give --mem-gb more, or build on a larger machine")


def _worker_init() -> None:
    """A worker ignores SIGINT (a terminal's Ctrl-C reaches the whole process group): the parent
    handles it and stops the workers (:func:`_stop_workers`), without a traceback from each."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stop_workers(ex) -> None:
    """Kill the pool's worker processes (an interrupted build: the finished runs are in the
    partial file already, the runs in flight are lost and redone on resume)."""
    for proc in list((getattr(ex, "_processes", None) or {}).values()):
        try:
            proc.kill()
        except (OSError, ValueError, AttributeError):
            pass
    for proc in list((getattr(ex, "_processes", None) or {}).values()):
        try:
            proc.join(5.0)
        except (OSError, ValueError, AttributeError, AssertionError):
            pass


def _share_compilations() -> None:
    """Let spawned workers share XLA programs through JAX's persistent cache (env, inherited)."""
    from ...cache import subdir
    d = subdir("xla")
    if d is None:
        return
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(d))
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "1")


def _partial_path(spec: dict, model_hash: str) -> Path:
    return cache_dir() / f"partial-{spec['system']}-{provenance.digest([spec, model_hash])}.json"


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def build_table(system, *, groups=GROUP_SIZES, sizes=SIZE_GRID_BYTES, multiples=TBS_MULTIPLES, jobs: int = 1,
                progress: bool = True, partial: Path | str | None = None, resume: bool = True,
                mem_gb: float | None = None, keep_partial: bool = False) -> dict:
    """Time every (kind, policy, group, size) on ``system`` (a System); the sealed, JSON-ready table.

    Each entry is the fastest of ``m * (n - 1)`` threadblocks per GPU over ``multiples``; every
    (entry, m) is one task, spread over ``jobs`` processes (largest first).  Finished tasks are
    saved to a partial file (``partial``, default in the cache directory) after each one, and a
    later call with the same code, system and grid resumes from it (``resume=False``: start over).
    ``progress``: a bar on stderr when it is a terminal (:mod:`nuna_jax.progress`).
    """
    from ...progress import Progress
    spec = grid_spec(system, groups=groups, sizes=sizes, multiples=multiples)
    files = provenance.model_file_hashes()
    mhash = provenance.model_hash(files)
    ms = spec["tbs_rule"]["multiples"]
    tasks = [(system, k, p, n, z, m) for k in spec["kinds"] for p in spec["policies"] for n in spec["groups"]
             for z in spec["sizes_bytes"] for m in ms]
    tasks.sort(key=lambda t: -(t[3] * t[3] * t[5] * max(t[4], 4096)))   # big ones first: load balance
    ppath = Path(partial) if partial else _partial_path(spec, mhash)
    pkey = provenance.digest([spec, mhash])
    done: dict[tuple, float | None] = {}
    task_s: dict[tuple, float] = {}
    if resume and ppath.is_file():
        try:
            got = json.loads(ppath.read_text())
            if got.get("key") == pkey:
                for k, p, n, z, m, t, s in got["done"]:
                    done[(k, p, n, z, m)] = t
                    task_s[(k, p, n, z, m)] = s
        except (ValueError, KeyError, TypeError):
            done, task_s = {}, {}
        if done and progress:
            print(f"collective table: resuming from {ppath} ({len(done)} of {len(tasks)} runs done)",
                  file=sys.stderr)
    todo = [t for t in tasks if t[1:] not in done]
    t0 = time.time()
    def save():                     # after every run (a few kB; a killed build loses only runs in flight)
        rows = [[*key, t, round(task_s.get(key, 0.0), 2)] for key, t in done.items()]
        _write_atomic(ppath, json.dumps({"key": pkey, "done": rows}))

    # stage "building" (nuna_jax.progress): runs done of all, with an ETA from the rate so far
    bar = Progress(total=len(tasks), label="building", unit="runs", enabled=progress)
    bar.update(len(done), note="collective table", force=True)

    def note(key, t, s):
        done[key] = t
        task_s[key] = s
        save()
        bar.update(len(done), note="collective table")

    try:
        if jobs > 1 and todo:
            os.environ.setdefault("JAX_PLATFORMS", "cpu")        # the table is the CPU path model's
            _share_compilations()
            mem = int(mem_gb * 2**30) if mem_gb else _mem_budget_bytes()
            _run_pool(todo, int(jobs), mem, note)
        else:
            for t in todo:
                status, key, val, sec = _task(t)
                if status == "oom":
                    raise MemoryError(f"collective table: run {key} ran out of memory")
                note(key, val, sec)
    finally:
        save()
        bar.close()
    times, tbs = [], []
    missing = []
    for k in spec["kinds"]:
        tk, bk = [], []
        for p in spec["policies"]:
            tp_, bp = [], []
            for n in spec["groups"]:
                tn, bn = [], []
                for z in spec["sizes_bytes"]:
                    best = min(((done[(k, p, n, z, m)], m * (n - 1)) for m in ms
                                if done[(k, p, n, z, m)] is not None), default=None)
                    if best is None:
                        missing.append(f"{k} {p} {n} GPUs {z} B")
                        best = (float("nan"), 0)
                    tn.append(float(best[0]))
                    bn.append(int(best[1]))
                tp_.append(tn)
                bp.append(bn)
            tk.append(tp_)
            bk.append(bp)
        times.append(tk)
        tbs.append(bk)
    if missing:
        raise ValueError(f"collective table: no threadblock count of {ms} could be placed for "
                         f"{len(missing)} entries ({', '.join(missing[:4])}...)")
    d = {**spec, "model_hash": mhash, "model_files": files, "time_ns": times, "tbs_per_gpu": tbs}
    d = seal(d)
    skipped = sum(1 for v in done.values() if v is None)
    d["build"] = {"built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "wall_s": round(time.time() - t0, 1), "task_s_total": round(sum(task_s.values()), 1),
                  "runs": len(tasks), "resumed_runs": len(tasks) - len(todo), "unplaceable_runs": skipped,
                  "jobs": int(jobs), "cpus": os.cpu_count(), "command": rebuild_command(d),
                  **_versions()}
    if not keep_partial:        # kept: every (entry, multiple) run, e.g. to merge builds of subsets
        try:
            ppath.unlink()
        except OSError:
            pass
    return d


def _versions() -> dict:
    import platform
    out = {"python": platform.python_version()}
    try:
        import jax
        out["jax"] = jax.__version__
    except ImportError:     # pragma: no cover
        pass
    from ... import __version__
    out["nuna_jax_version"] = __version__
    try:
        import subprocess
        root = provenance.PKG_ROOT.parent
        c = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                           timeout=5)
        if c.returncode == 0:
            out["git_commit"] = c.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def seal(d: dict) -> dict:
    """``d`` with ``table_hash`` set over its sealed keys (:data:`SEALED`)."""
    out = dict(d)
    out["table_hash"] = provenance.digest({k: d[k] for k in SEALED})
    return out


def rebuild_command(d: dict, out: str | Path | None = None, jobs: str = "N") -> str:
    """The command line that rebuilds a table of ``d``'s system and grid (``out``: where; the
    shipped table is always rebuilt on the default grid)."""
    args = [MODULE_CMD]
    if out is not None and Path(out).resolve() == SHIPPED.resolve():
        return f"{MODULE_CMD} --jobs {jobs}"
    system = d.get("system", "table2")
    if system != "table2":
        args.append(f"--system {system}")
    if list(d.get("groups", GROUP_SIZES)) != list(GROUP_SIZES):
        args.append("--groups " + ",".join(map(str, d["groups"])))
    if list(d.get("sizes_bytes", SIZE_GRID_BYTES)) != list(SIZE_GRID_BYTES):
        args.append("--sizes " + ",".join(map(str, d["sizes_bytes"])))
    mult = (d.get("tbs_rule") or {}).get("multiples", list(TBS_MULTIPLES))
    if list(mult) != list(TBS_MULTIPLES):
        args.append("--tbs-multiples " + ",".join(map(str, mult)))
    if out is not None and Path(out).resolve() != SHIPPED.resolve():
        args.append(f"--out {out}")
    args.append(f"--jobs {jobs}")
    return " ".join(args)


# ---------------------------------------------------------------------------------------------
# reading and checking

def _fail(path, why: str):
    raise TableError(f"collective table {str(path)!r} is invalid: {why}; rebuild it: "
                     f"{MODULE_CMD}{'' if Path(path).resolve() == SHIPPED.resolve() else ' --out ' + str(path)}"
                     f" --jobs N")


def _check_shape(path, name, arr, shape, want):
    """``arr`` is a nested list of ``shape`` whose leaves pass ``want``."""
    def walk(a, dims, where):
        if not dims:
            if not want(a):
                _fail(path, f"{name}{where} = {a!r} is not {want.__doc__}")
            return
        if not isinstance(a, list) or len(a) != dims[0]:
            _fail(path, f"{name}{where} must be a list of {dims[0]} (kinds x policies x groups x sizes = "
                        f"{' x '.join(map(str, shape))})")
        for i, x in enumerate(a):
            walk(x, dims[1:], f"{where}[{i}]")
    walk(arr, list(shape), "")


def _pos_finite(x):
    """a finite number > 0"""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _pos_int(x):
    """an integer >= 1"""
    return isinstance(x, int) and not isinstance(x, bool) and x >= 1


def validate(d, path) -> dict:
    """``d`` (parsed JSON) as a well-formed, sealed table, or :class:`TableError` naming ``path``."""
    if not isinstance(d, dict):
        _fail(path, "the top level must be a JSON object")
    if d.get("format") != FORMAT:
        _fail(path, f"format is {d.get('format')!r}, not {FORMAT!r} (a table from before tables recorded "
                    "the model that built them)")
    need = {"system": str, "system_params": dict, "kinds": list, "policies": list, "groups": list,
            "sizes_bytes": list, "tbs_rule": dict, "model_hash": str, "model_files": dict, "time_ns": list,
            "tbs_per_gpu": list, "table_hash": str}
    for k, t in need.items():
        if k not in d:
            _fail(path, f"missing key {k!r}")
        if not isinstance(d[k], t):
            _fail(path, f"{k!r} must be a JSON {t.__name__}, got {type(d[k]).__name__}")
    for k in ("kinds", "policies"):
        if not d[k] or not all(isinstance(x, str) for x in d[k]):
            _fail(path, f"{k!r} must be a non-empty list of names")
    if list(d["kinds"]) != list(KINDS):
        _fail(path, f"kinds must be {list(KINDS)} (what a step issues, in this order), got {d['kinds']}")
    if list(d["policies"]) != list(POLICIES):
        _fail(path, f"policies must be {list(POLICIES)}, got {d['policies']}")
    for k, lo in (("groups", 2), ("sizes_bytes", 1)):
        v = d[k]
        if (len(v) < (1 if k == "groups" else 2) or not all(_pos_int(x) and x >= lo for x in v)
                or any(b <= a for a, b in zip(v, v[1:]))):
            _fail(path, f"{k!r} must be increasing integers >= {lo}, got {v[:8]}")
    shape = (len(d["kinds"]), len(d["policies"]), len(d["groups"]), len(d["sizes_bytes"]))
    _check_shape(path, "time_ns", d["time_ns"], shape, _pos_finite)
    _check_shape(path, "tbs_per_gpu", d["tbs_per_gpu"], shape, _pos_int)
    if not all(isinstance(v, str) for v in d["model_files"].values()):
        _fail(path, "'model_files' must map paths to hashes")
    try:
        want = provenance.digest({k: d[k] for k in SEALED})
    except ValueError as e:
        _fail(path, f"cannot be hashed ({e})")
    if want != d["table_hash"]:
        _fail(path, f"its table_hash {d['table_hash']!r} does not match its content ({want!r}): it was "
                    "edited after it was built")
    return d


def read_table(path: str | Path) -> dict:
    """Read and validate a table file (raw JSON lists; :class:`TableError` naming the file)."""
    from ...limits import MAX_NESTING_DEPTH, active, nesting_depth
    p = Path(path)
    try:
        active().check_file(p, "collective table")
        text = p.read_text()
    except OSError as e:
        raise TableError(f"cannot read collective table {str(p)!r}: {e.strerror or e}") from None
    except ValueError as e:
        raise TableError(str(e)) from None
    try:
        d = json.loads(text)              # NaN / Infinity parse; validate() names the entry
    except RecursionError:
        _fail(p, "not valid JSON (nested too deeply)")
    except ValueError as e:
        _fail(p, f"not valid JSON ({e})")
    if nesting_depth(d, stop=MAX_NESTING_DEPTH) > MAX_NESTING_DEPTH:
        _fail(p, f"nested more than {MAX_NESTING_DEPTH} levels deep")
    return validate(d, p)


def _rebuild_spec(p: Path) -> dict:
    """The grid of the table at ``p`` that ``--rebuild-table`` rewrites ({} when it is missing or
    damaged); ``TableError`` when ``p`` exists but is no collective table at all (a file that is not
    a table is never written over)."""
    if not p.exists():
        return {}
    if not p.is_file():
        raise TableError(f"cannot write collective table {str(p)!r}: it is not a regular file")
    try:
        head = json.loads(p.read_text())
    except (OSError, ValueError, RecursionError, UnicodeDecodeError):
        head = None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise TableError(f"--table {str(p)!r} exists and is not a collective table ({FORMAT}); "
                         "refusing to write over it (remove it, or choose another path)")
    try:
        return validate(head, p)
    except TableError:
        return {}




def table_status(d: dict, path) -> dict:
    """``collective_table`` of the e2e JSON: where the table is, which model built it, whether it is
    this tree's model (``current``), and if not which files differ and how to rebuild it."""
    files_now = provenance.model_file_hashes()
    now = provenance.model_hash(files_now)
    rec = d.get("model_files", {})
    changed = sorted(f for f in set(files_now) | set(rec) if files_now.get(f) != rec.get(f))
    out = {"path": str(path), "model_hash": d.get("model_hash"), "current": d.get("model_hash") == now,
           "current_model_hash": now, "table_hash": d.get("table_hash"),
           "built": (d.get("build") or {}).get("built"), "rebuild": rebuild_command(d, path)}
    if changed:
        out["changed_files"] = changed
    return out


def _stale_message(st: dict) -> str:
    ch = st.get("changed_files", [])
    what = (f" ({', '.join(ch[:4])}{', ...' if len(ch) > 4 else ''} changed)" if ch else "")
    return (f"collective table {st['path']!r} is stale: built by model {st['model_hash']}, this tree's model is "
            f"{st['current_model_hash']}{what}; rebuild it: {st['rebuild']} (or give nuna-jax e2e --rebuild-table)")


def check_current(d: dict, path) -> dict:
    """:func:`table_status`, or :class:`StaleTableError` when the table is not current."""
    st = table_status(d, path)
    if not st["current"]:
        raise StaleTableError(_stale_message(st))
    return st


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "nuna_jax" / "e2e_tables"


def _as_arrays(d: dict, st: dict) -> dict:
    d = dict(d)
    d["time_ns"] = np.asarray(d["time_ns"], dtype=np.float64)
    d["status"] = st
    return d


def _announce(system, groups, progress):
    if progress:
        n = len(KINDS) * len(POLICIES) * len(groups) * len(SIZE_GRID_BYTES)
        print(f"nuna-jax e2e: timing collectives for system {system.name!r} on groups of "
              f"{', '.join(map(str, groups))} GPUs ({n} entries, {len(TBS_MULTIPLES)} runs each)",
              file=sys.stderr)


def load_table(system, groups=None, jobs: int = 1, progress: bool = True, *, path: str | Path | None = None,
               rebuild: bool = False, allow_stale: bool = False) -> dict:
    """The checked collective table of ``system`` (a System, or a preset name) covering ``groups``.

    * ``path``: that file (it must be for ``system``'s hardware);
    * else Table 2's hardware: the shipped data (:data:`SHIPPED`);
    * else a table cached for this system, grid and model, or one built now and cached.

    A file that is stale (built by other model code) raises :class:`StaleTableError` naming the
    command that rebuilds it; ``rebuild=True`` rebuilds it in place instead (``jobs`` processes);
    ``allow_stale=True`` uses it as it is (tests, comparisons; ``status["current"]`` says so).
    A malformed or edited file, or one for other hardware, raises :class:`TableError`.
    The result has ``time_ns`` as an array and ``status`` (:func:`table_status`).
    """
    if isinstance(system, str):
        from ...presets import load_system
        system = load_system(system)
    groups = tuple(sorted({int(g) for g in groups})) if groups else GROUP_SIZES
    params = provenance.system_params(system)
    from ...presets import preset
    if path is None and params == provenance.system_params(preset("table2")):
        path = SHIPPED
    if path is not None:
        p = Path(path)
        if rebuild:
            spec = _rebuild_spec(p)
            if p.resolve() == SHIPPED.resolve():            # the shipped table: the default grid
                spec, want = {}, list(GROUP_SIZES)
            else:                                           # another file: its own grid, or what is needed
                want = sorted(set(groups) | set(spec.get("groups", groups)))
            d = build_table(system, groups=want, sizes=spec.get("sizes_bytes", SIZE_GRID_BYTES),
                            multiples=(spec.get("tbs_rule") or {}).get("multiples", TBS_MULTIPLES),
                            jobs=jobs, progress=progress)
            d["build"]["command"] = rebuild_command(d, p, jobs=str(jobs))
            try:
                _write_atomic(p, json.dumps(d, indent=1) + "\n")
            except OSError as e:
                raise TableError(f"cannot write collective table {str(p)!r}: {e.strerror or e}") from None
        d = read_table(p)
        if d["system_params"] != params:
            diff = sorted(k for k in set(params) | set(d["system_params"])
                          if params.get(k) != d["system_params"].get(k))
            raise TableError(f"collective table {str(p)!r} was built for other hardware than system "
                             f"{system.name!r} (differs in {', '.join(diff[:5])}); rebuild it: "
                             f"{rebuild_command({**d, 'system': system.name}, p)}")
        missing = sorted(set(groups) - set(d["groups"]))
        if missing:
            raise TableError(f"collective table {str(p)!r} has groups {d['groups']} but this needs "
                             f"{', '.join(map(str, missing))} GPUs; rebuild it: "
                             f"{rebuild_command({**d, 'groups': sorted(set(d['groups']) | set(groups))}, p)}")
        st = table_status(d, p) if allow_stale else check_current(d, p)
        return _as_arrays(d, st)
    spec = grid_spec(system)
    key = provenance.digest([{k: v for k, v in spec.items() if k != "system"}, provenance.model_hash()])
    cp = cache_dir() / f"{system.name}_{key}.json"
    if cp.is_file() and not rebuild:
        try:
            d = read_table(cp)
            if d["system_params"] == params and set(groups) <= set(d["groups"]):
                return _as_arrays(d, check_current(d, cp))
        except TableError:
            pass
    _announce(system, groups, progress)
    d = build_table(system, groups=groups, jobs=jobs, progress=progress)
    try:
        _write_atomic(cp, json.dumps(d))
    except OSError:
        pass
    return _as_arrays(d, table_status(d, cp))


def interp_time_ns(log_sizes, log_times, size_bytes):
    """Log-log interpolation of one (kind, policy, group) row at ``size_bytes`` (jnp, vmap-able).

    Below the grid: the smallest size's time (latency-bound).  Above it: the
    last segment's slope, at least 1 (bandwidth-bound: time grows with bytes).
    Size 0 means "no collective" and gives 0.
    """
    import jax.numpy as jnp
    x = jnp.log(jnp.maximum(size_bytes, 1.0))
    y = jnp.interp(x, log_sizes, log_times)
    slope = jnp.maximum((log_times[-1] - log_times[-2]) / (log_sizes[-1] - log_sizes[-2]), 1.0)
    y = jnp.where(x > log_sizes[-1], log_times[-1] + slope * (x - log_sizes[-1]), y)
    return jnp.where(size_bytes > 0, jnp.exp(y), 0.0)


# ---------------------------------------------------------------------------------------------
# command line

def _int_list(text: str) -> list[int]:
    try:
        v = [int(float(x)) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"expected comma-separated integers, got {text!r}") from None
    if not v:
        raise ValueError(f"expected comma-separated integers, got {text!r}")
    return v


def main(argv=None) -> int:
    import argparse
    p = argparse.ArgumentParser(
        prog=MODULE_CMD, description="Build (default) or --check the collective time table of `nuna-jax e2e`. "
                                     "With no options: rebuild the shipped Table 2 table.")
    p.add_argument("--system", default="table2", help="preset or TOML file (default table2)")
    p.add_argument("--jobs", type=int, default=1, help="processes (default 1)")
    p.add_argument("--out", default=None, help="output JSON (default: the shipped data file for table2)")
    p.add_argument("--groups", default=None, help="GPU counts, e.g. 2,4,8 (default 2,4,8,16,32,64)")
    p.add_argument("--sizes", default=None, help="per-GPU sizes in bytes (default: 11 sizes, 1 kB-100 MB)")
    p.add_argument("--tbs-multiples", default=None, help="m of m*(n-1) threadblocks per GPU (default 1,4,16)")
    p.add_argument("--mem-gb", type=float, default=None,
                   help="resident memory the processes may use together (default 90%% of what is available)")
    p.add_argument("--fresh", action="store_true", help="ignore a partial file of an interrupted build")
    p.add_argument("--partial", default=None, help="partial-results file (default: in the cache directory)")
    p.add_argument("--keep-partial", action="store_true",
                   help="keep the partial file when done (experiments/merge_table_partials.py merges them)")
    p.add_argument("--check", action="store_true",
                   help="only check that the table is well formed and current (exit 0; else 1 and the reason)")
    a = p.parse_args(argv)
    import signal
    import threading

    def stop(signum, frame):            # SIGTERM: stop the workers too (_run_pool), keep the partial file
        raise SystemExit(128 + signum)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)
    try:
        from ...presets import load_system
        system = load_system(a.system)
        out = Path(a.out) if a.out else (SHIPPED if a.system.lower() == "table2"
                                         else Path(f"{system.name}_collectives.json"))
        if a.check:
            d = read_table(out)
            st = table_status(d, out)
            if not st["current"]:
                print(_stale_message(st), file=sys.stderr)
                return 1
            print(f"{out}: current (model {st['model_hash']}, built {st['built']})")
            return 0
        if a.jobs < 1:
            raise ValueError(f"--jobs must be >= 1, got {a.jobs}")
        kw = {}
        if a.groups:
            kw["groups"] = _int_list(a.groups)
        if a.sizes:
            kw["sizes"] = _int_list(a.sizes)
        if a.tbs_multiples:
            kw["multiples"] = _int_list(a.tbs_multiples)
        d = build_table(system, jobs=a.jobs, partial=a.partial, resume=not a.fresh, mem_gb=a.mem_gb,
                        keep_partial=a.keep_partial, **kw)
        d["build"]["command"] = rebuild_command(d, out, jobs=str(a.jobs))
        _write_atomic(out, json.dumps(d, indent=1) + "\n")
    except TableError as e:
        print(f"{MODULE_CMD}: {e}", file=sys.stderr)
        return 1 if a.check else 2
    except (ValueError, OSError, MemoryError) as e:
        print(f"{MODULE_CMD}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{MODULE_CMD}: interrupted; the finished runs are kept in the partial file, run the same "
              "command again to resume", file=sys.stderr)
        return 130
    b = d["build"]
    print(f"wrote {out} (model {d['model_hash']}, {b['runs']} runs, {b['wall_s']:.0f} s wall with --jobs "
          f"{a.jobs}, {b['task_s_total']:.0f} s of run time)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
