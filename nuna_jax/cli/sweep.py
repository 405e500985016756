"""``nuna-jax sweep GRID.toml --out FILE``: evaluate a design-space grid (docs/sweep.md).

The grid is read and checked first (a bad grid exits 2 before any work);
rows stream to ``FILE`` (``.csv``, or ``.npz`` / ``.parquet`` with a ``.rows.csv``
stream beside it until the last point is in) and an interrupted sweep resumes from
what it wrote; the finished file holds the rows in grid order.  ``--jobs N``: the
simulator points run on N local processes (``sweep.simpool``).
"""

from __future__ import annotations

from .common import add_max_work_arg, emit_json, limits_from_args, parse_size


def add_parser(sub) -> None:
    p = sub.add_parser(
        "sweep", help="evaluate a design-space grid (closed form / path model / simulator)",
        description="Evaluate every point of a TOML grid (docs/sweep.md) with jit + vmap in chunks, "
                    "sharded over every JAX device; rows stream to --out and a rerun resumes.")
    p.add_argument("grid", metavar="GRID.toml", help="the grid (see examples/grids/)")
    p.add_argument("--out", required=True, metavar="FILE",
                   help="output: FILE.csv, FILE.npz or FILE.parquet (pyarrow: pip install 'nuna_jax[data]'); "
                        "rows in grid order")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="simulator points: run them on N local processes, this one and N-1 workers it starts "
                        "(default 1: this one alone; same rows whatever N); with --num-processes, N on each")
    p.add_argument("--build-jobs", type=int, default=1, metavar="N",
                   help="path-model points: build their traffics (plans, NAP's search, lowering) on N worker "
                        "processes, JAX on the CPU (default 1: here; same rows on a CPU host; docs/sweep.md)")
    p.add_argument("--max-rows", type=int, default=None, metavar="N",
                   help="path model: points x padded flows per chunk (memory bound; default 2^20)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--coordinator", default=None, metavar="HOST:PORT",
                   help="multi-process run: jax.distributed coordinator address")
    p.add_argument("--num-processes", type=int, default=1, metavar="N")
    p.add_argument("--process-id", type=int, default=0, metavar="K")
    p.add_argument("--force", action="store_true",
                   help="start afresh: remove an existing --out (and its .rows.csv stream) first, even one "
                        "that is not a sweep output (without it such a file is never written over)")
    p.add_argument("--json", action="store_true", help="print the run summary as JSON")
    add_max_work_arg(p)


def _has_sim_points(grid_file) -> bool:
    """Whether the grid's ``model`` axis names the simulator (read with the standard library alone;
    False if the file cannot be read: the grid's own checks report that)."""
    import tomllib
    try:
        with open(grid_file, "rb") as f:
            m = tomllib.load(f).get("axes", {}).get("model")
    except (OSError, ValueError):
        return False
    return "sim" in ([m] if isinstance(m, str) else list(m) if isinstance(m, list) else [])


def run(args) -> int:
    if isinstance(args.jobs, int) and 2 <= args.jobs <= 1024 and _has_sim_points(args.grid):
        # the workers import jax and load the simulator while this process imports and plans
        # (nuna_jax.workers); a pool the sweep does not take is killed below
        from ..workers import close_early, start_early
        start_early(args.jobs)
        try:
            return _run(args)
        finally:
            close_early()
    return _run(args)


def _run(args) -> int:
    from ..sweep.grid import load_grid
    from ..sweep.run import DEFAULT_MAX_ROWS, execute
    from ..sweep.writer import check_format
    out = str(args.out)
    check_format(out)
    if not 1 <= args.jobs <= 1024:
        raise ValueError(f"--jobs must lie in [1, 1024], got {args.jobs}")
    if not 1 <= args.build_jobs <= 1024:
        raise ValueError(f"--build-jobs must lie in [1, 1024], got {args.build_jobs}")
    if args.max_rows is not None and args.max_rows < 1:
        raise ValueError(f"--max-rows must be >= 1, got {args.max_rows}")
    from pathlib import Path
    if Path(out).resolve() == Path(args.grid).resolve():
        raise ValueError(f"--out {out} is the grid file itself; choose another output")
    lim = limits_from_args(args)
    grid = load_grid(args.grid, parse_size=parse_size, limits=lim)      # every check before any work
    from .common import RUN
    base = getattr(grid, "base", None)
    if base is not None:                 # the grid's base system, for the JSON's provenance
        RUN["system"] = {"system": base.name, "system_base": None, "system_file": None}
    if args.force:
        from ..sweep.writer import stream_path
        for f in {Path(out), stream_path(out)}:
            if f.exists():
                f.unlink()
    if args.coordinator:
        from ..sweep.distributed import initialize
        initialize(args.coordinator, args.num_processes, args.process_id)
    from ..progress import stderr_is_terminal
    # the sweep's bar only on a terminal (never into a pipe or a log); sweep/run.py draws it
    summary = execute(grid, out, progress=not args.no_progress and not args.json and stderr_is_terminal(),
                      max_rows=args.max_rows or DEFAULT_MAX_ROWS, limits=lim, jobs=args.jobs,
                      build_jobs=args.build_jobs)
    if args.json:
        emit_json(summary)
    else:
        import jax
        if jax.process_index() == 0:
            print(f"sweep {args.grid}: {summary['n_points']} points, {summary['written']} written, "
                  f"{summary['already_done']} already in {out}; {summary['seconds']:.1f} s on "
                  f"{len(summary['devices'])} device(s), {summary['processes']} process(es)")
    return 0
