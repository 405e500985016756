"""``nuna-jax e2e``: end-to-end LLM inference (TTFT / TPOT) with and without NUNA-aware collectives.

NUNA sections 5.2 and 6.7; the model is ``nuna_jax.e2e.llm`` (docs/e2e.md).  The collective
times come from a table that records the model code that built it: a stale table is refused
(exit 2, naming the command that rebuilds it) unless ``--rebuild-table``.
"""

from __future__ import annotations

import sys

from .common import add_max_work_arg, emit_json, limits_from_args, number


def _ints(text: str, what: str) -> list[int]:
    try:
        vals = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{what}: expected comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise ValueError(f"{what}: expected integers >= 1, got {text!r}")
    return vals


def add_parser(sub) -> None:
    p = sub.add_parser(
        "e2e", help="end-to-end LLM inference time (TTFT / TPOT), UA vs NAP+NAR",
        description="Search the latency-optimal parallelism (TP x EP x DP x PP), batch and sequence "
                    "length of an LLM on the pod (NUNA 5.2) and time it with UA and with NAP+NAR "
                    "collectives. --all runs the paper's 12 models on 2-64 GPUs and summarizes (NUNA 6.7); "
                    "--config FILE.toml pins models, GPU counts, phases and per-model settings.")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--model", metavar="NAME|FILE.toml", help="a shipped model (see --list) or a TOML file")
    what.add_argument("--all", action="store_true", help="every shipped model, 2-64 GPUs, both phases")
    what.add_argument("--list", action="store_true", help="list the shipped models")
    p.add_argument("--config", default=None, metavar="FILE.toml",
                   help="with --all: models, gpus, phases, [search] and [model.NAME] settings "
                        "(docs/e2e.md; examples/e2e/)")
    p.add_argument("--gpus", type=int, default=None, metavar="N",
                   help="GPUs in the pod (default 8; with --all: only this count)")
    p.add_argument("--phase", choices=("prefill", "decode"), default=None,
                   help="default decode (with --all: both)")
    p.add_argument("--system", default=None, metavar="NAME|FILE.toml",
                   help="hardware preset or TOML file (default table2; others time collectives first)")
    p.add_argument("--batch", default=None, metavar="B[,B..]",
                   help="requests served at once (default 1,2,4,..,N; the latency objective picks the smallest)")
    p.add_argument("--seq-len", default=None, metavar="S[,S..]",
                   help="prompt length (prefill) / context length (decode) candidates "
                        "(default 1024,2048,..,32768; the latency objective picks the shortest that fits)")
    for k in ("tp", "ep", "dp", "pp"):
        p.add_argument(f"--{k}", type=int, default=None, metavar="N",
                       help=f"fix the {k.upper()} degree (with --all: for every model)")
    p.add_argument("--table", default=None, metavar="FILE.json",
                   help="the collective table to use (default: the shipped Table 2 table, or a cached one "
                        "for another --system)")
    p.add_argument("--rebuild-table", action="store_true",
                   help="rebuild the collective table first (also when it is current): hours of CPU, use --jobs")
    p.add_argument("--jobs", type=number(1, 1024, integer=True, what="--jobs"), default=1, metavar="N",
                   help="processes for timing collectives (--rebuild-table, or a --system other than table2)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    add_max_work_arg(p)


def _system(args, config=None, max_group: int = 64):
    """The ``--system`` (or the config's), within the work limits: its mesh, and when its
    collectives must be timed first (any system but Table 2's hardware), the largest run of the
    table build (``max_group`` GPUs, the grid's largest size and threadblock count)."""
    from ..limits import check_traffic_work, generated_plan_work
    from ..e2e.llm import provenance
    from ..e2e.llm.collective_table import SIZE_GRID_BYTES, TBS_MULTIPLES
    from ..presets import is_system_file, load_system, preset
    lim = limits_from_args(args)
    spec = args.system or (config.system if config else None) or "table2"
    if is_system_file(spec):
        lim.check_file(spec, "--system file")
    s = load_system(spec)
    lim.check_system(s, f"--system {spec}")
    from .common import RUN
    from ..presets import system_origin
    RUN["system"] = {"system": s.name, **system_origin(spec)}
    if provenance.system_params(s) != provenance.system_params(preset("table2")) or args.rebuild_table:
        n = max(2, int(max_group))
        t = max(TBS_MULTIPLES) * (n - 1)
        work = generated_plan_work("allreduce", "direct", n, t, max(SIZE_GRID_BYTES))
        check_traffic_work(lim, work, s.replace(n_gpus=n), f"timing the collectives of --system {spec} "
                           f"(All-Reduce of {max(SIZE_GRID_BYTES)} B on {n} GPUs, {t} threadblocks per GPU)",
                           flits=False)
    return s


#: the model's policy keys and their canonical names (docs/json.md: ``UA``, ``NAP+NAR`` in text and JSON)
POLICY_KEYS = {"ua": "UA", "nap_nar": "NAP+NAR"}


def canonical_policy_keys(obj):
    """``obj`` with every dict keyed by the model's policy keys (``time_ms``, ``split_ms``: ``ua``,
    ``nap_nar``) keyed by the canonical policy names instead."""
    if isinstance(obj, dict):
        if obj and set(obj) <= set(POLICY_KEYS):
            return {POLICY_KEYS[k]: canonical_policy_keys(v) for k, v in obj.items()}
        return {k: canonical_policy_keys(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [canonical_policy_keys(v) for v in obj]
    return obj


def _check_finite(obj, what: str, where: str = "") -> None:
    """A result with a NaN or infinite number is refused (the model's inputs are out of its range)."""
    import math
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError(f"{what}: the model gives a non-finite value ({obj!r}) at {where or 'the result'}; "
                         "its inputs are out of the model's range")
    if isinstance(obj, dict):
        for k, v in obj.items():
            _check_finite(v, what, f"{where}.{k}" if where else str(k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _check_finite(v, what, f"{where}[{i}]")


def _table(args, system, groups):
    from ..e2e.llm.collective_table import load_table
    if args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    return load_table(system, groups=groups, jobs=args.jobs, path=args.table, rebuild=args.rebuild_table,
                      progress=True)


def _fmt(v, scale: float, unit: str, digits: int = 1) -> str:
    return "-" if v is None else f"{scale * v:.{digits}f}{unit}"


def _table_line(st) -> str:
    if not st:
        return ""
    return (f"  collective table {st['path']} (model {st['model_hash']}, "
            f"{'current' if st['current'] else 'STALE'}, built {st.get('built')})")


class _Stopped(SystemExit):
    pass


def run(args) -> int:
    """SIGTERM (and SIGINT) stop the command and every process of its table build; the finished
    timing runs are already in the build's partial file, so the same command resumes."""
    import signal
    import threading
    if threading.current_thread() is not threading.main_thread():
        return _run(args)

    def stop(signum, frame):
        print(f"nuna-jax e2e: stopped by {signal.Signals(signum).name}; finished collective timings are "
              "saved, the same command resumes", file=sys.stderr)
        raise _Stopped(128 + signum)

    old = signal.signal(signal.SIGTERM, stop)
    try:
        return _run(args)
    finally:
        signal.signal(signal.SIGTERM, old)


def _run(args) -> int:
    from ..e2e.llm.configs import load_model, model_names
    if args.list:
        rows = []
        for n in model_names():
            m = load_model(n)
            rows.append({"name": n, "layers": m.n_layers, "hidden": m.hidden, "experts": m.n_experts,
                         "top_k": m.top_k, "source": m.source})
        if args.json:
            emit_json({"models": rows})
        else:
            for r in rows:
                moe = f"MoE {r['experts']} experts, top-{r['top_k']}" if r["experts"] else "dense"
                print(f"{r['name']:18s} {r['layers']:4d} layers, hidden {r['hidden']:6d}, {moe}")
        return 0
    if args.all:
        return _run_all(args)
    if args.config:
        raise ValueError("--config goes with --all (for one model, give its settings as flags)")
    from ..e2e.llm.collective_table import GROUP_SIZES
    from ..e2e.llm.search import search, validate_pins
    gpus = 8 if args.gpus is None else args.gpus
    phase = args.phase or "decode"
    pins = {"tp": args.tp, "ep": args.ep, "dp": args.dp, "pp": args.pp}
    batches = _ints(args.batch, "--batch") if args.batch else None
    seqs = _ints(args.seq_len, "--seq-len") if args.seq_len else None
    model = load_model(args.model)
    validate_pins(model, gpus, {k: v for k, v in pins.items() if v is not None})
    from ..e2e.llm.search import SEQ_LENS, check_search_work, default_batches
    check_search_work(gpus, batches or default_batches(gpus), seqs or SEQ_LENS, pins,
                      source=f"e2e of {model.name} on {gpus} GPUs")
    groups = [g for g in GROUP_SIZES if g <= max(2, gpus)]
    s = _system(args, max_group=max(groups))
    table = _table(args, s, groups)       # input errors first
    r = search(model, gpus, phase, s, table=table, batches=batches, seqs=seqs, pins=pins)
    _check_finite(r, f"e2e of {model.name}")
    r = canonical_policy_keys(r)
    if args.json:
        emit_json(r)
        return 0
    c = r["config"]
    metric = "TTFT" if phase == "prefill" else "TPOT"
    print(f"{r['model']} {phase} on {r['n_gpus']} GPUs ({r['system']}): "
          f"{r['configs_evaluated']} configurations, {r['configs_fit']} valid and fit, {r['wall_s']:.2f} s")
    print(f"  config   TP={c['tp']} EP={c['ep']} DP={c['dp']} PP={c['pp']} batch={c['batch']} "
          f"seq_len={c['seq_len']} ({r['mem_gb_per_gpu']:.1f} GB/GPU)")
    print(f"  {metric:4s}     UA {r['time_ms']['UA']:.4f} ms   NAP+NAR {r['time_ms']['NAP+NAR']:.4f} ms   "
          f"reduction {100 * r['reduction']:.1f}%")
    for pol in ("UA", "NAP+NAR"):
        sp = r["split_ms"][pol]
        print(f"  split {pol:7s} " + "  ".join(f"{k} {v:.4f}" for k, v in sp.items()) + " (ms)")
    print(_table_line(r.get("collective_table")))
    return 0


def _run_all(args) -> int:
    from ..e2e.llm.collective_table import GROUP_SIZES
    from ..e2e.llm.report import PAPER, RunConfig, load_run_config, run_all
    cfg = load_run_config(args.config) if args.config else RunConfig()
    flags = {"tp": args.tp, "ep": args.ep, "dp": args.dp, "pp": args.pp,
             "batch": _ints(args.batch, "--batch") if args.batch else None,
             "seq_len": _ints(args.seq_len, "--seq-len") if args.seq_len else None}
    cfg = cfg.with_flags(**flags)
    import dataclasses
    if args.gpus is not None:
        if not 1 <= args.gpus <= 64:
            raise ValueError(f"--gpus must be in 1..64 (the collective table's pod sizes, NUNA 6.7), got {args.gpus}")
        cfg = dataclasses.replace(cfg, gpu_counts=(args.gpus,))
    if args.phase:
        cfg = dataclasses.replace(cfg, phases=(args.phase,))
    groups = [g for g in GROUP_SIZES if g <= max(2, max(cfg.gpu_counts))]
    s = _system(args, cfg, max_group=max(groups))
    table = _table(args, s, groups)
    from ..progress import Stages
    n_points = len(cfg.model_list()) * len(cfg.gpu_counts) * len(cfg.phases)   # at most: some may not fit
    with Stages("e2e", enabled=not args.json) as stages, \
            stages.stage("evaluating", n_points, "points") as st:
        def prog(r):        # one finished (model, GPUs, phase) point: the bar moves, its numbers are the note
            st.advance(note=f"{r['model']} {r['n_gpus']} GPUs {r['phase']}: {100 * r['reduction']:.1f}%")
        out = run_all(s, progress=prog, jobs=args.jobs, config=cfg, table=table)
    _check_finite(out, "e2e --all")
    out["paper"] = PAPER
    out = canonical_policy_keys(out)
    if args.json:
        emit_json(out)
        return 0
    sm = out["summary"]
    print(f"e2e --all on {s.name} ({cfg.source}): {len(out['points'])} points ({len(out['no_fit'])} with no "
          f"fitting configuration, {len(out['skipped'])} impossible under the pins), {out['configs_evaluated']} "
          f"configurations in {out['wall_s']:.1f} s ({out['configs_per_s']:.3g}/s)")
    print(f"  {'':28s} {'ours':>8s} {'paper':>8s}")
    for key, label in (("ttft_reduction_geomean", "TTFT reduction, geomean"),
                       ("ttft_reduction_max", "TTFT reduction, max"),
                       ("tpot_reduction_geomean", "TPOT reduction, geomean"),
                       ("tpot_reduction_max", "TPOT reduction, max")):
        print(f"  {label:28s} {_fmt(sm[key], 100, '%'):>8s} {100 * PAPER[key]:7.1f}%")
    for key, label in (("comm_speedup_prefill", "prefill collectives"),
                       ("comm_speedup_decode", "decode collectives"),
                       ("allreduce_speedup", "All-Reduce"), ("alltoall_speedup", "All-to-All"),
                       ("allgather_speedup", "All-Gather"), ("p2p_speedup", "pipeline send")):
        paper = PAPER.get(key)
        print(f"  {label + ' speedup':28s} {_fmt(sm[key], 1, 'x', 2):>8s} " + (f"{paper:7.2f}x" if paper else "       -"))
    for ph in ("prefill", "decode"):
        l70 = sm.get("llama70b_64gpu", {}).get(ph)
        if l70:
            c = l70["config"]
            print(f"  Llama-70B 64 GPUs {ph:7s}: TP={c['tp']} EP={c['ep']} DP={c['dp']} PP={c['pp']} "
                  f"batch={c['batch']} seq_len={c['seq_len']} reduction {100 * l70['reduction']:.1f}% "
                  f"(paper: TP=8, {100 * PAPER['llama70b_64gpu'][ph + '_speedup']:.0f}%)")
    print(_table_line(out.get("collective_table")))
    return 0
