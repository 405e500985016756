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
   index pairs (``path_eval.path_batch_fn``), simulator on the host -- and each
   chunk's rows are appended as soon as it finishes.

With several processes (``sweep.distributed``), every process runs the same
plan and the same jitted calls over a mesh of every host's devices; results are
all-gathered and process 0 writes.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict

import jax
import numpy as np

from . import closed_eval, path_eval
from .grid import Grid, continuous_fields
from .groups import Block, blocks
from .shard import device_mesh, put_replicated, round_up, to_host
from .writer import RowWriter, grid_fingerprint

__all__ = ["run_sweep", "RESULT_COLUMNS", "DEFAULT_MAX_ROWS"]

RESULT_COLUMNS = ("time_ns", "lower_bound_ns", "n_flows")
DEFAULT_MAX_ROWS = 1 << 20   # path model: points x padded flow rows per chunk (bounds memory)


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


def _axis_columns(grid: Grid, index: np.ndarray) -> dict:
    digits = grid.digits(index)
    return {a: np.asarray(list(v) + [None], dtype=object)[digits[:, k]] for k, (a, v) in enumerate(grid.axes)}


def _block_system(grid: Grid, block: Block):
    p = dict(block.fixed)
    return grid.system_of(p)


def _hw_key(s) -> tuple:
    return tuple(float(np.asarray(getattr(s, f))) for f in continuous_fields())


def _chunks(n: int, size: int):
    for lo in range(0, n, size):
        yield lo, min(n, lo + size)


def run_sweep(grid: Grid, out, *, progress: bool = True, max_rows: int = DEFAULT_MAX_ROWS,
              devices=None, max_chunks: int | None = None, cf_chunk: int | None = None) -> dict:
    """Evaluate every point of ``grid`` not yet in ``out`` and append its row.

    ``max_rows``: path-model chunk bound (points x padded flows); ``devices``:
    the mesh (default ``jax.devices()``); ``max_chunks``: stop after that many
    chunks (an interruption, for tests); ``cf_chunk``: closed-form points per
    chunk (default the grid's ``closed_form_chunk``).  Returns a summary.
    """
    t_start = time.time()
    mesh = device_mesh(devices)
    writer_proc = jax.process_index() == 0
    columns = ["index", *grid.names, *RESULT_COLUMNS]
    w = RowWriter(out, columns, grid_fingerprint(grid), grid.n_points, active=writer_proc)
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        multihost_utils.sync_global_devices("nuna_jax.sweep: output read")
    already = len(w.done)
    bl = blocks(grid)

    # ---- plan: traffic for every path / sim point still to do --------------------------------
    cache: dict = {}
    path_groups: dict = defaultdict(list)     # (block no, n_rows, n_phases) -> [(index, system, PaddedTraffic)]
    sim_points = []
    t_plan = time.time()
    for b_no, b in enumerate(bl):
        if b.fixed["model"] == "closed_form":
            continue
        idx = b.global_index(np.arange(b.n_points, dtype=np.int64))
        idx = idx[w.todo_mask(idx)]
        for i in idx:
            pt = grid.point(int(i))
            s = grid.system_of(pt)
            try:
                tr = path_eval.traffic_for(s, pt, cache)
            except ValueError as e:
                desc = ", ".join(f"{a}={pt[a]}" for a in grid.names)
                raise ValueError(f"grid point {int(i)} ({desc}): {e}") from None
            if b.fixed["model"] == "sim":
                sim_points.append((int(i), s, tr))
            else:
                path_groups[(b_no, tr.n_rows, tr.n_phases)].append((int(i), s, tr))
    plan_s = time.time() - t_plan

    todo = grid.n_points - already
    prog = _Progress(todo, progress and writer_proc)
    w.open()
    n_chunks = 0
    stopped = False
    written = 0

    def emit(index, time_ns, lb, nflows):
        nonlocal written
        keep = w.todo_mask(index)
        cols = {"index": index[keep], **{k: v[keep] for k, v in _axis_columns(grid, index[keep]).items()},
                "time_ns": np.asarray(time_ns)[keep], "lower_bound_ns": np.asarray(lb)[keep],
                "n_flows": np.asarray(nflows)[keep]}
        written += w.write(cols)
        prog.add(int(keep.sum()))

    def budget_left() -> bool:
        nonlocal n_chunks, stopped
        if max_chunks is not None and n_chunks >= max_chunks:
            stopped = True
            return False
        n_chunks += 1
        return True

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
            t = to_host(fn(put_replicated(np.int32(r_lo), mesh), *tables)).reshape(-1)[: hi - lo]
            nan = np.full(hi - lo, np.nan)
            emit(gidx, t, nan, np.full(hi - lo, -1))

    # ---- path model ---------------------------------------------------------------------------
    for (b_no, n_rows, n_phases), items in path_groups.items():
        if stopped:
            break
        hw_of, systems, tr_of, traffics = {}, [], {}, []
        hw_i, t_i = [], []
        for _, s, tr in items:
            k = _hw_key(s)
            if k not in hw_of:
                hw_of[k] = len(systems)
                systems.append(s.replace(name="sweep"))
            kt = id(tr)
            if kt not in tr_of:
                tr_of[kt] = len(traffics)
                traffics.append(tr)
            hw_i.append(hw_of[k])
            t_i.append(tr_of[kt])
        from ..system import stack_systems
        S = put_replicated(stack_systems(systems), mesh)
        T = put_replicated(path_eval.stack_traffic(traffics), mesh)
        index = np.asarray([i for i, _, _ in items], np.int64)
        nfl = np.asarray([tr.n_flows for _, _, tr in items], np.int64)
        hw_i, t_i = np.asarray(hw_i, np.int32), np.asarray(t_i, np.int32)
        B = round_up(max(1, min(grid.chunk, max_rows // n_rows, len(items))), mesh)
        fn = path_eval.path_batch_fn(n_phases, mesh)
        from .shard import put_batch
        for lo, hi in _chunks(len(items), B):
            if not budget_left():
                break
            sel = np.arange(lo, lo + B).clip(max=hi - 1)
            est, lb = to_host(fn(S, T, put_batch(hw_i[sel], mesh), put_batch(t_i[sel], mesh)))
            m = hi - lo
            emit(index[lo:hi], est[:m], lb[:m], nfl[lo:hi])

    # ---- simulator (host, process 0) -------------------------------------------------------------
    for i, s, tr in sim_points:
        if stopped or not budget_left():
            break
        if writer_proc:
            t = path_eval.simulate_ns(s, tr)
            emit(np.asarray([i]), np.asarray([t]), np.asarray([np.nan]), np.asarray([tr.n_flows]))

    w.close()
    return {"n_points": grid.n_points, "already_done": already, "written": written,
            "complete": len(w.done) == grid.n_points if writer_proc else None,
            "interrupted": stopped, "chunks": n_chunks, "blocks": len(bl),
            "path_groups": len(path_groups), "distinct_traffic": len(cache), "plan_s": plan_s,
            "seconds": time.time() - t_start, "devices": [str(d) for d in mesh.devices.ravel()],
            "processes": jax.process_count(), "out": str(out)}
