"""Run a grid: plan the blocks, build the traffic once per discrete configuration,
evaluate in chunks on the device mesh, stream rows to the output, resume.

Order of work (docs/sweep.md):

1. the grid was checked when it was read (``grid.grid_from_dict``);
2. every process reads the output file (points already written are skipped);
3. path-model and simulator points: their traffic is built (cached per
   ``path_eval.traffic_key``) before any evaluation, so a point that cannot be
   placed fails before a row is written;
4. blocks are evaluated chunk by chunk -- closed form generated on the device
   (``closed_eval``), path model as a vmap over (hardware variant, traffic)
   index pairs (``path_eval.path_batch_fn``), simulator points as tasks on the
   host (``sweep.simpool``: here, or over ``jobs`` worker processes, and over every
   process of a ``jax.distributed`` run) -- and each chunk's rows are appended as
   soon as it finishes.

With several processes (``sweep.distributed``), every process runs the same
plan and the same jitted calls over a mesh of every host's devices; results are
all-gathered and process 0 writes.  Each process simulates its share of the
simulator points.

:func:`run_sweep` returns the rows as a ``pandas.DataFrame`` in grid order
(``sweep.frame``); :func:`execute` is the same run returning only its summary
(the CLI's, which never reads a large output back).
"""

from __future__ import annotations

import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import jax
import numpy as np

from . import closed_eval, path_eval
from .frame import RESULT_DTYPES, carried, frame_from_columns, read_sweep, typed_axis
from .grid import SCENARIO_AXES, Grid, continuous_fields
from .groups import Block, blocks
from .shard import device_mesh, put_batch, put_replicated, round_up, to_host
from . import simpool
from .writer import RowWriter, grid_fingerprint, stream_path
from ..limits import Limits

__all__ = ["run_sweep", "execute", "RESULT_COLUMNS", "DEFAULT_MAX_ROWS"]

#: ``tbs_used``: the threadblocks per GPU the row's time is for (the fastest candidate when the point's
#: ``tbs_per_gpu`` is "best"; -1 for the closed form, which has none)
RESULT_COLUMNS = ("time_ns", "lower_bound_ns", "n_flows", "tbs_used")
DEFAULT_MAX_ROWS = 1 << 20   # path model: points x padded flow rows per chunk (bounds memory)
MERGE_FACTOR = None          # path model: shape buckets merged by cost (_merge_shapes); a number: within that ratio


class _Progress:
    def __init__(self, total: int, enabled: bool):
        self.total, self.done, self.enabled = total, 0, enabled and total > 0
        self.t0 = self.last = time.time()

    def add(self, n: int) -> None:
        self.done += n
        now = time.time()
        if self.enabled and (now - self.last > 0.5 or self.done >= self.total):
            self.last = now
            frac = self.done / self.total
            bar = "#" * int(30 * frac)
            sys.stderr.write(f"\r[{bar:30s}] {self.done}/{self.total} points {100 * frac:5.1f}% "
                             f"{now - self.t0:6.1f} s")
            if self.done >= self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()


def _axis_columns(grid: Grid, index: np.ndarray, typed: dict) -> dict:
    """Axis columns of points ``index``, each of its axis's one type (``frame.typed_axis``)."""
    digits = grid.digits(index)
    return {a: typed[a][digits[:, k]] for k, (a, _) in enumerate(grid.axes)}


def _block_system(grid: Grid, block: Block):
    p = dict(block.fixed)
    return grid.system_of(p)


def _hw_values(s) -> np.ndarray:
    """The continuous fields of ``s`` (``grid.continuous_fields`` order), float64."""
    return np.asarray([float(np.asarray(getattr(s, f))) for f in continuous_fields()], np.float64)


def _chunks(n: int, size: int):
    for lo in range(0, n, size):
        yield lo, min(n, lo + size)


def _prepare_path_group(grid: Grid, mesh, key, items, max_rows: int) -> dict:
    """Stack a path group's distinct hardware variants and traffics (replicated on the mesh, one
    copy each) and index each point into them.  ``items``: ``(index [n], hardware [n, fields],
    system, PaddedTraffic, several candidates [n] bool)``, the hardware as :func:`_hw_values`."""
    _, n_rows, n_phases = key
    tr_of, traffics = {}, []
    for _, _, _, tr, _ in items:
        if id(tr) not in tr_of:
            tr_of[id(tr)] = len(traffics)
            traffics.append(tr)
    index = np.concatenate([it[0] for it in items]).astype(np.int64)
    hw, hw_i = np.unique(np.concatenate([it[1] for it in items]), axis=0, return_inverse=True)
    dtype = np.dtype(jax.numpy.result_type(float))
    S = items[0][2].replace(name="sweep", **{f: hw[:, k].astype(dtype) for k, f in enumerate(continuous_fields())})
    T = path_eval.stack_traffic(traffics, n_rows)
    per = lambda f: np.concatenate([np.full(len(it[0]), f(it)) for it in items])  # noqa: E731
    one = len(traffics) == 1
    # per-variant memory: a vmap holds every point's tables at once (max_rows bounds points x rows);
    # lax.map (one traffic on a CPU, path_eval.path_batch_fn) one at a time
    cap = grid.chunk if one and not path_eval.vectorize(mesh) else max_rows // n_rows
    return {"n_phases": n_phases, "n_rows": n_rows,
            "S": put_replicated(S, mesh), "T": put_replicated(T, mesh),
            "X": put_replicated(path_eval.hw_plans(items[0][2], T, n_phases, mesh), mesh),
            "index": index, "n_flows": per(lambda it: it[3].n_flows).astype(np.int64),
            "tbs": per(lambda it: it[3].tbs_per_gpu).astype(np.int64),
            "multi": np.concatenate([it[4] for it in items]).astype(bool),
            "hw_i": hw_i.reshape(-1).astype(np.int32),
            "t_i": per(lambda it: tr_of[id(it[3])]).astype(np.int32),
            "B": round_up(max(1, min(grid.chunk, cap, len(index))), mesh)}


_COMPILED: dict = {}   # ahead-of-time compiled path programs, by shapes (lower().compile() is not cached)


def _compile_all(prepared: list, mesh, threads: int) -> list:
    """Compile every group's program ahead of time, ``threads`` at once (XLA compiles outside
    the GIL, so the groups' compile times overlap on a many-core host)."""
    def one(g):
        args = (g["S"], g["T"], g["X"])
        key = (g["n_phases"], mesh, g["B"], jax.tree_util.tree_structure(args),
               tuple(v.shape for v in jax.tree_util.tree_leaves(args)))
        if key not in _COMPILED:
            fn = path_eval.path_batch_fn(g["n_phases"], mesh)
            idx = put_batch(np.zeros(g["B"], np.int32), mesh)
            _COMPILED[key] = fn.lower(*args, idx, idx).compile()
        return _COMPILED[key]
    if threads <= 1 or len(prepared) <= 1:
        return [one(g) for g in prepared]
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=threads) as ex:
        return list(ex.map(one, prepared))


def _merge_shapes(groups: dict, factor: float | None, platform: str = "cpu") -> dict:
    """Merge path groups of one block and phase count into fewer compiled programs; a merged group
    is padded to its largest row count (zero rows change no estimate or bound, tests/test_sweep_build.py).

    ``factor`` a number: buckets whose padded rows lie within ``factor`` of the smallest of their
    group share it (greedy, ascending; 1: no merging).  ``None`` (the default): the partition of the
    block's buckets (ascending, contiguous) that takes the least time by :data:`COST_NS` of the
    platform -- a compilation, plus per row of the group's row count each point's evaluation and each
    traffic's padding, stacking and copy to the device -- where a merged group's stacked traffics
    hold at most the platform's :data:`MAX_STACK_ROWS` rows (memory)."""
    by = defaultdict(list)
    for (b_no, rows, ph), items in groups.items():
        by[(b_no, ph)].append((rows, items))
    out = {}
    for (b_no, ph), lst in by.items():
        lst.sort(key=lambda x: x[0])
        if factor is None:
            key = platform if platform in COST_NS else "gpu"
            parts = _cheapest_partition(lst, *COST_NS[key], MAX_STACK_ROWS[key])
        else:
            parts, cur, lo = [], [], None
            for rows, items in lst:
                if lo is not None and rows > factor * lo:
                    parts.append(cur)
                    cur, lo = [], None
                if lo is None:
                    lo = rows
                cur.append((rows, items))
            parts.append(cur)
        for cur in parts:
            out[(b_no, max(r for r, _ in cur), ph)] = [it for _, its in cur for it in its]
    return out


#: ``(compile, evaluate a row for one point, pad + stack + copy a row of one traffic)``, ns, per platform
#: (``_merge_shapes``; speed only, no result depends on them).  The 2-core CPU (8-GPU All-Gather, load
#: 16-17, 2026-12-02): a compile of the path program 7.1-8.6 CPU s, an evaluation 1.1-1.9 CPU us a
#: row; one H200 (2026-12-02 log): ~1.5 s a compile, ~9 ns a row (0.29 ms for 32,256 flows); a
#: traffic row is 14 columns of 4 bytes, padded, stacked and copied: ~60 ns on either host
COST_NS = {"cpu": (7.5e9, 1200.0, 60.0), "gpu": (1.5e9, 9.0, 60.0)}
#: a merged group's stacked traffics hold at most this many rows (x 14 columns of 4 bytes: 3.8 GB on a
#: CPU, 15 GB on an accelerator)
MAX_STACK_ROWS = {"cpu": 1 << 26, "gpu": 1 << 28}


def _cheapest_partition(lst: list, compile_ns: float, row_ns: float, stack_ns: float,
                        max_stack_rows: int) -> list:
    """Contiguous groups of ``lst`` (``(rows, items)`` ascending) minimizing the sum over groups of
    ``compile_ns + rows x (points x row_ns + traffics x stack_ns)``, ``rows`` the group's largest
    (dynamic programming over the cut points); a group of several buckets stacks at most
    ``max_stack_rows`` rows."""
    k = len(lst)
    pts = [sum(len(it[0]) for it in items) for _, items in lst]
    trs = [len({id(it[3]) for it in items}) for _, items in lst]
    best = [0.0] + [float("inf")] * k     # best[j]: the cheapest partition of the first j buckets
    cut = [0] * (k + 1)
    for j in range(1, k + 1):
        rows = lst[j - 1][0]
        n_pts = n_tr = 0
        for i in range(j - 1, -1, -1):   # group lst[i:j], padded to rows
            n_pts += pts[i]
            n_tr += trs[i]
            if i < j - 1 and n_tr * rows > max_stack_rows:
                break
            c = best[i] + compile_ns + float(rows) * (n_pts * row_ns + n_tr * stack_ns)
            if c < best[j]:
                best[j], cut[j] = c, i
    parts, j = [], k
    while j > 0:
        parts.append(lst[cut[j]:j])
        j = cut[j]
    return parts[::-1]


def _plan_path_block(grid: Grid, lim: Limits, b_no: int, idx: np.ndarray, seen_work: dict, reps: list) -> None:
    """The points of a path block ``idx`` that need a traffic: append to ``reps`` one
    ``(block no, point indices, hardware [n, fields], system, point, first index, candidate points)``
    per set of points that share their traffic (checked against the work limits first).

    Points that differ only in continuous hardware axes that the placement does not read share
    their traffic, limits and candidates: one representative per such set is planned (the
    grid checked every continuous value against every static system when it was read), the
    others only get their hardware values (numpy, no System per point)."""
    cont = continuous_fields()
    hw_axes = [k for k, (a, _) in enumerate(grid.axes) if a in cont and a not in path_eval.PLACEMENT_FIELDS]
    rest = [k for k in range(len(grid.axes)) if k not in hw_axes]
    digits = grid.digits(idx)
    _, first, inv = np.unique(digits[:, rest], axis=0, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    for g in np.argsort(first):        # in the order of their first points (errors name the first)
        j0 = first[g]
        sel = np.flatnonzero(inv == g)
        i0 = int(idx[j0])
        pt = grid.point(i0)
        s = grid.system_of(pt)
        _check_point_work(lim, grid, i0, pt, s, seen_work)
        hw = np.tile(_hw_values(s), (sel.size, 1))
        for k in hw_axes:
            a, vals = grid.axes[k]
            hw[:, cont.index(a)] = np.asarray(vals, np.float64)[digits[sel, k]]
        # a path point is evaluated at each of its threadblock counts, and the fastest kept
        choices = tuple(dict(pt, tbs_per_gpu=t) for t in path_eval.tbs_choices(s, pt))
        reps.append((b_no, idx[sel], hw, s, pt, i0, choices))


def _build_path_traffic(grid: Grid, reps: list, cache: dict, path_groups: dict, left: dict,
                        build_jobs: int) -> None:
    """Build every distinct traffic of ``reps`` (:func:`_plan_path_block`; ``cache``: traffic key ->
    PaddedTraffic, ``path_eval.traffic_for``'s) here or on ``build_jobs`` worker processes
    (``sweep.trafficpool``), then file each point's candidates into ``path_groups`` in grid order;
    the first point (in that order) whose traffic cannot be built raises."""
    from . import trafficpool
    todo, keys = {}, []
    for _, _, _, s, _, _, choices in reps:
        ks = [path_eval.traffic_key(s, c) for c in choices]
        keys.append(ks)
        for k, c in zip(ks, choices):
            if k not in cache and k not in todo:
                todo[k] = (len(todo), s, c)
    built = trafficpool.build_all([(n, s, c) for n, s, c in todo.values()], build_jobs)
    failed = {}
    for k, (n, _, _) in todo.items():
        st, v = built[n]
        if st == "ok":
            cache[k] = v
        else:
            failed[k] = v
    for (b_no, sel_idx, hw, s, pt, i0, choices), ks in zip(reps, keys):
        got, err = [], None
        for k in ks:
            if k in cache:
                got.append(cache[k])
            else:                          # more threadblocks than the CUs hold: not a candidate
                err = failed[k]
        if not got or (err is not None and not isinstance(pt["tbs_per_gpu"], str)):
            desc = ", ".join(f"{a}={pt[a]}" for a in grid.names)
            raise ValueError(f"grid point {i0} ({desc}): {err}") from None
        multi = np.full(sel_idx.size, len(got) > 1)
        if len(got) > 1:
            left.update((int(i), len(got)) for i in sel_idx)
        for tr in got:
            path_groups[(b_no, tr.n_rows, tr.n_phases)].append((sel_idx, hw, s, tr, multi))


def _check_point_work(lim: Limits, grid: Grid, i: int, pt: dict, s, seen: dict) -> int:
    """The work limits of one path / sim point, from its inputs (``limits.generated_plan_work``), before
    its traffic is built; returns the flits it would simulate (0 for the path model)."""
    from ..limits import check_traffic_work, generated_plan_work
    key = (s.n_gpus, s.mesh_cols, s.mesh_rows, s.cus_per_router, s.n_io_ports, s.page_bytes, s.flit_bytes,
           pt["collective"], pt["algorithm"], pt["tbs_per_gpu"], pt["size"], pt["model"])
    if key not in seen:
        desc = f"grid point {i} (" + ", ".join(f"{a}={pt[a]}" for a in grid.names) + ")"
        lim.check_system(s, desc)
        tbs = max(path_eval.tbs_choices(s, pt))        # "best": its largest candidate
        work = generated_plan_work(pt["collective"], pt["algorithm"], s.n_gpus, tbs, pt["size"])
        check_traffic_work(lim, work, s, desc, flits=pt["model"] == "sim")
        seen[key] = int(work["bytes"] // int(s.flit_bytes) + work["plan_steps"]) if pt["model"] == "sim" else 0
    return seen[key]


def run_sweep(grid: Grid, out=None, *, progress: bool = True, max_rows: int = DEFAULT_MAX_ROWS,
              devices=None, max_chunks: int | None = None, cf_chunk: int | None = None,
              merge_factor: float | None = MERGE_FACTOR, compile_threads: int | None = None,
              limits: Limits | None = None, jobs: int = 1, build_jobs: int = 1):
    """Evaluate every point of ``grid``; the rows as a ``pandas.DataFrame`` in grid order.

    ``out``: ``None`` (the default: nothing touches the disk, the rows are kept in memory) or a
    ``.csv``, ``.npz`` or ``.parquet`` (pyarrow) file: the points not yet in it are evaluated and
    appended (resumable, docs/sweep.md), and the frame holds every row of the file.  Columns:
    ``index``, one per grid axis, ``time_ns`` (ns), ``lower_bound_ns`` (ns; NaN but for the path
    model), ``n_flows`` and ``tbs_used`` (-1 for the closed form); types in ``sweep.frame``.
    ``df.attrs["summary"]``: the run summary (points written, seconds, devices, ...).

    ``jobs``: the simulator points run on this many local processes, this one and ``jobs - 1``
    workers it starts (``sweep.simpool``; 1: this one alone); the rows do not depend on it.
    ``build_jobs``: the path-model points' traffics are built on this many worker processes
    (``sweep.trafficpool``; 1: here, one after another); on a CPU host the rows do not depend on it,
    on an accelerator host NAP's granularity search then runs on the host CPU (its module doc).
    ``max_rows``: path-model chunk bound (points x padded flows); ``devices``:
    the mesh (default ``jax.devices()``); ``max_chunks``: stop after that many
    chunks (an interruption, for tests); ``cf_chunk``: closed-form points per
    chunk (default the grid's ``closed_form_chunk``); ``merge_factor``: path
    shape buckets within this ratio share a compiled program (1: no merging; ``None``, the
    default: merged where a compilation costs more than evaluating the padding, ``_merge_shapes``);
    ``compile_threads``: path-model programs compiled at once (default: CPU
    count, at most 8).  ``limits`` (default :class:`~nuna_jax.limits.Limits`): every path / sim
    point's system, threadblocks, steps, pages (and flits) are checked before its traffic is built,
    and the grid's total simulated flits.

    With several ``jax.distributed`` processes, process 0's frame is the file's; another process's
    holds the rows of this run (all of them when ``out`` is None).

    Example::

        from nuna_jax.sweep import grid_from_dict, run_sweep
        g = grid_from_dict({"axes": {"model": ["closed_form"], "gpus": [2, 8], "size": [10**5, 10**6]}})
        df = run_sweep(g, progress=False)          # 4 rows; df.to_parquet(...) / df.pivot(...)
        df.pivot(index="size", columns="n_gpus", values="time_ns")   # ns
    """
    summary, w = _execute(grid, out, progress=progress, max_rows=max_rows, devices=devices,
                          max_chunks=max_chunks, cf_chunk=cf_chunk, merge_factor=merge_factor,
                          compile_threads=compile_threads, limits=limits, jobs=jobs, build_jobs=build_jobs,
                          keep=True)
    columns = ["index", *grid.names, *RESULT_COLUMNS]
    attrs = {"summary": summary}
    if out is not None and w.active:
        src = stream_path(out)              # an unfinished .npz / .parquet: its stream; a CSV: itself
        src = src if src.exists() else Path(out)
        if src.exists():
            df = read_sweep(src)
            df.attrs.update(attrs)
            return df
    cols = w.columns_in_memory()
    if not cols:
        empty = {c: np.zeros(0, RESULT_DTYPES.get(c, np.int64)) for c in columns}
        empty.update({a: typed_axis(v)[:0] for a, v in grid.axes})
        cols = empty
    return frame_from_columns(cols, columns, attrs)


def execute(grid: Grid, out, **kw) -> dict:
    """:func:`run_sweep` without reading the rows back: the run summary only."""
    return _execute(grid, out, **kw)[0]


def _execute(grid: Grid, out, *, progress: bool = True, max_rows: int = DEFAULT_MAX_ROWS,
             devices=None, max_chunks: int | None = None, cf_chunk: int | None = None,
             merge_factor: float | None = MERGE_FACTOR, compile_threads: int | None = None,
             limits: Limits | None = None, jobs: int = 1, build_jobs: int = 1, keep: bool = False):
    if not (isinstance(build_jobs, (int, np.integer)) and not isinstance(build_jobs, bool) and build_jobs >= 1):
        raise ValueError(f"build_jobs must be an integer >= 1, got {build_jobs!r}")
    if not (isinstance(jobs, (int, np.integer)) and not isinstance(jobs, bool) and jobs >= 1):
        raise ValueError(f"jobs must be an integer >= 1, got {jobs!r}")
    lim = limits or Limits()
    t_start = time.time()
    if compile_threads is None:
        compile_threads = min(8, os.cpu_count() or 1)
    mesh = device_mesh(devices)
    writer_proc = jax.process_index() == 0
    columns = ["index", *grid.names, *RESULT_COLUMNS]
    typed = {a: typed_axis(v) for a, v in grid.axes}
    fp = grid_fingerprint(grid) if out is not None else "memory"
    w = RowWriter(out, columns, fp, grid.n_points, active=writer_proc, keep=keep and not writer_proc)
    runner = simpool.LocalRunner(int(jobs))
    aborted = True
    try:
        if len(w.done) < grid.n_points and \
                "sim" in (grid.values("model") if "model" in grid.names else (SCENARIO_AXES["model"],)):
            runner.prestart()          # workers import jax and the simulator while this process plans
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils
            multihost_utils.sync_global_devices("nuna_jax.sweep: output read")
        already = len(w.done)
        bl = blocks(grid)

        # ---- plan: traffic for every path / sim point still to do --------------------------------
        cache: dict = {}
        path_groups: dict = defaultdict(list)     # (block no, n_rows, n_phases) -> [(index, hw, system, traffic, multi)]
        sim_points = []                           # (flits, index, build system, system, point)
        sim_builders: dict = {}                   # traffic key -> system of its first point
        left: dict = {}                           # path point -> candidates not yet evaluated
        path_reps: list = []                      # path points that need a traffic (_plan_path_block)
        seen_work: dict = {}
        sim_flits = 0
        t_plan = time.time()
        for b_no, b in enumerate(bl):
            if b.fixed["model"] == "closed_form":
                continue
            idx = b.global_index(np.arange(b.n_points, dtype=np.int64))
            idx = idx[w.todo_mask(idx)]
            if b.fixed["model"] != "sim":
                _plan_path_block(grid, lim, b_no, idx, seen_work, path_reps)
                continue
            for i in idx:
                pt = grid.point(int(i))
                s = grid.system_of(pt)
                flits = _check_point_work(lim, grid, int(i), pt, s, seen_work)
                sim_flits += flits
                lim.check("sim_flits", sim_flits, f"{grid.source or 'the grid'}'s simulator points")
                # a simulator point builds its own scenario ("best" chosen inside by the path model)
                # where it is simulated (sweep.simpool), on the system of the first point of its
                # traffic key, as a serial sweep's cache would
                k = path_eval.traffic_key(s, pt)
                build = sim_builders.setdefault(k, s)
                sim_points.append((flits, int(i), build, s, pt))
        _build_path_traffic(grid, path_reps, cache, path_groups, left, build_jobs)
        path_groups = _merge_shapes(path_groups, merge_factor, mesh.devices.flat[0].platform)
        plan_s = time.time() - t_plan

        todo = grid.n_points - already
        prog = _Progress(todo, progress and writer_proc)
        w.open()
        n_chunks = 0
        stopped = False
        written = 0

        best: dict = {}

        def emit_candidates(index, time_ns, lb, nflows, tbs, multi):
            """Path rows: a point's row is written once all its candidates are in, with the fastest
            (ties: fewer threadblocks, as ``make_scenario(tbs_per_gpu="best")``); a point of one
            candidate at once."""
            if not multi.all():
                one = ~multi
                emit(index[one], time_ns[one], lb[one], nflows[one], tbs[one])
            out = []
            for k in np.flatnonzero(multi):
                i = int(index[k])
                cand = (float(time_ns[k]), int(tbs[k]), float(lb[k]), int(nflows[k]))
                cur = best.get(i)
                if cur is None or cand[:2] < cur[:2]:
                    best[i] = cur = cand
                left[i] -= 1
                if left[i] == 0:
                    out.append((i, *best.pop(i)))
            if out:
                i, t, tb, lo, nf = (np.asarray(c) for c in zip(*out))
                emit(i.astype(np.int64), t, lo, nf, tb)

        def emit(index, time_ns, lb, nflows, tbs):
            nonlocal written
            keep = w.todo_mask(index)
            bad = keep & ~np.isfinite(np.asarray(time_ns, np.float64))
            if bad.any():
                i = int(index[np.flatnonzero(bad)[0]])
                pt = grid.point(i)
                desc = ", ".join(f"{a}={pt[a]}" for a in grid.names)
                raise ValueError(f"grid point {i} ({desc}) evaluates to a non-finite time; its inputs are "
                                 "outside what the model can represent (nothing non-finite is written)")
            cols = {"index": np.asarray(index, np.int64)[keep], **_axis_columns(grid, index[keep], typed),
                    "time_ns": carried(time_ns)[keep], "lower_bound_ns": carried(lb)[keep],
                    "n_flows": np.asarray(nflows, np.int64)[keep], "tbs_used": np.asarray(tbs, np.int64)[keep]}
            written += w.write(cols)
            prog.add(int(keep.sum()))

        def budget_left() -> bool:
            nonlocal n_chunks, stopped
            if max_chunks is not None and n_chunks >= max_chunks:
                stopped = True
                return False
            n_chunks += 1
            return True

        t_eval = time.time()
        # ---- closed form ------------------------------------------------------------------------
        for b in bl:
            if b.fixed["model"] != "closed_form" or stopped:
                continue
            if b.n_points >= 2**31:
                raise ValueError(f"a closed-form block has {b.n_points} points; at most 2^31 - 1 per block "
                                 "(split the grid)")
            s = _block_system(grid, b)
            static, tables = closed_eval.block_args(b, s, grid, mesh)
            L = b.free_lens[-1]
            n_rows = b.n_points // L
            rows = round_up(max(1, min((cf_chunk or grid.closed_form_chunk) // L, n_rows)), mesh)
            fn = closed_eval.closed_form_fn(rows=rows, mesh=mesh, **static)
            for r_lo in range(0, n_rows, rows):
                lo, hi = r_lo * L, min(n_rows, r_lo + rows) * L
                j = np.arange(lo, hi, dtype=np.int64)
                gidx = b.global_index(j)
                if not w.todo_mask(gidx).any():
                    continue
                if not budget_left():
                    break
                t = carried(to_host(fn(put_replicated(np.int32(r_lo), mesh), *tables)).reshape(-1)[: hi - lo])
                nan = np.full(hi - lo, np.nan)
                emit(gidx, t, nan, np.full(hi - lo, -1), np.full(hi - lo, -1))

        # ---- path model ---------------------------------------------------------------------------
        prepared = [_prepare_path_group(grid, mesh, key, items, max_rows) for key, items in path_groups.items()]
        t_c = time.time()
        compiled = _compile_all(prepared, mesh, compile_threads)
        compile_s = time.time() - t_c
        for g, fn in zip(prepared, compiled):
            if stopped:
                break
            B = g["B"]
            for lo, hi in _chunks(len(g["index"]), B):
                if not budget_left():
                    break
                sel = np.arange(lo, lo + B).clip(max=hi - 1)
                est, lb = (carried(x) for x in
                           to_host(fn(g["S"], g["T"], g["X"], put_batch(g["hw_i"][sel], mesh), put_batch(g["t_i"][sel], mesh))))
                m = hi - lo
                emit_candidates(g["index"][lo:hi], est[:m], lb[:m], g["n_flows"][lo:hi], g["tbs"][lo:hi],
                                g["multi"][lo:hi])

        # ---- simulator (host: here, over `jobs` workers, over every process; sweep.simpool) ----------
        t_sim, cpu_sim = time.time(), time.process_time()
        if not stopped and sim_points:
            sim_points.sort(key=lambda x: (-x[0], x[1]))          # largest first (load balance)

            def describe(i):
                pt = grid.point(i)
                return f"grid point {i} (" + ", ".join(f"{a}={pt[a]}" for a in grid.names) + ")"

            def emit_sim(i, t, nf, tb):
                emit(i, t, np.full(len(i), np.nan), nf, tb)

            if not simpool.run_sim_tasks([x[1:] for x in sim_points], runner, emit_sim, budget_left, describe):
                stopped = True
        sim_s, sim_cpu_s = time.time() - t_sim, time.process_time() - cpu_sim

        eval_s = time.time() - t_eval
        aborted = False
        runner.close()
        workers_cpu_s = runner.workers_cpu_s()
        w.close()
    finally:
        runner.close(abort=aborted)   # an error or ^C: the workers are killed, not waited for
        w.close_lock()     # also on an error: the next run must not find the output locked
    summary = {"eval_s": eval_s, "compile_s": compile_s, "sim_s": sim_s, "sim_points": len(sim_points),
               "jobs": int(jobs), "build_jobs": int(build_jobs), "sim_here": runner.done_here,
               "sim_cpu_s": sim_cpu_s, "sim_workers_cpu_s": workers_cpu_s,
               "sim_on_workers": runner.on_workers, "n_points": grid.n_points, "already_done": already, "written": written,
               "complete": len(w.done) == grid.n_points if writer_proc else None,
               "interrupted": stopped, "chunks": n_chunks, "blocks": len(bl),
               "path_groups": len(path_groups), "distinct_traffic": len(cache), "plan_s": plan_s,
               "seconds": time.time() - t_start, "devices": [str(d) for d in mesh.devices.ravel()],
               "processes": jax.process_count(), "out": None if out is None else str(out)}
    return summary, w
