"""``nuna-jax e2e``: end-to-end LLM inference (TTFT / TPOT) with and without NUNA-aware collectives.

NUNA sections 5.2 and 6.7; the model is ``nuna_jax.models.llm`` (docs/e2e.md).
"""

from __future__ import annotations

from .common import emit_json


def _ints(text: str) -> list[int]:
    try:
        vals = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"expected comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise ValueError(f"expected integers >= 1, got {text!r}")
    return vals


def add_parser(sub) -> None:
    p = sub.add_parser(
        "e2e", help="end-to-end LLM inference time (TTFT / TPOT), UA vs NAP+NAR",
        description="Search the latency-optimal parallelism (TP x EP x DP x PP), batch and sequence "
                    "length of an LLM on the pod (NUNA 5.2) and time it with UA and with NAP+NAR "
                    "collectives. --all runs the paper's 12 models on 2-64 GPUs and summarizes (NUNA 6.7).")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--model", metavar="NAME|FILE.toml", help="a shipped model (see --list) or a TOML file")
    what.add_argument("--all", action="store_true", help="every shipped model, 2-64 GPUs, both phases")
    what.add_argument("--list", action="store_true", help="list the shipped models")
    p.add_argument("--gpus", type=int, default=8, metavar="N", help="GPUs in the pod (default 8)")
    p.add_argument("--phase", choices=("prefill", "decode"), default="decode")
    p.add_argument("--system", default="table2", metavar="NAME|FILE.toml",
                   help="hardware preset or TOML file (default table2; others time collectives first)")
    p.add_argument("--batch", default=None, metavar="B[,B..]",
                   help="requests served at once (default 1,2,4,..,N; the latency objective picks the smallest)")
    p.add_argument("--seq-len", default=None, metavar="S[,S..]",
                   help="prompt length (prefill) / context length (decode), default 4096")
    for k in ("tp", "ep", "dp", "pp"):
        p.add_argument(f"--{k}", type=int, default=None, metavar="N", help=f"fix the {k.upper()} degree")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="processes for timing collectives of a --system other than table2 (default 1)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def _system(args):
    from ..presets import load_system
    return load_system(args.system)


def run(args) -> int:
    from ..models.llm.configs import load_model, model_names
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
    from ..models.llm.search import search
    r = search(args.model, args.gpus, args.phase, _system(args),
               batches=_ints(args.batch) if args.batch else None,
               seqs=_ints(args.seq_len) if args.seq_len else None,
               pins={"tp": args.tp, "ep": args.ep, "dp": args.dp, "pp": args.pp}, jobs=args.jobs)
    if args.json:
        emit_json(r)
        return 0
    c = r["config"]
    metric = "TTFT" if args.phase == "prefill" else "TPOT"
    print(f"{r['model']} {args.phase} on {r['n_gpus']} GPUs ({r['system']}): "
          f"{r['configs_evaluated']} configurations, {r['configs_fit']} valid and fit, {r['wall_s']:.2f} s")
    print(f"  config   TP={c['tp']} EP={c['ep']} DP={c['dp']} PP={c['pp']} batch={c['batch']} "
          f"seq_len={c['seq_len']} ({r['mem_gb_per_gpu']:.1f} GB/GPU)")
    print(f"  {metric:4s}     UA {r['time_ms']['ua']:.4f} ms   NAP+NAR {r['time_ms']['nap_nar']:.4f} ms   "
          f"reduction {100 * r['reduction']:.1f}%")
    for pol in ("ua", "nap_nar"):
        s = r["split_ms"][pol]
        print(f"  split {pol:7s} " + "  ".join(f"{k} {v:.4f}" for k, v in s.items()) + " (ms)")
    return 0


def _run_all(args) -> int:
    import sys

    from ..models.llm.report import PAPER, run_all
    s = _system(args)
    prog = None if args.json else (lambda r: print(
        f"  {r['model']:18s} {r['n_gpus']:3d} {r['phase']:7s} UA {r['time_ms']['ua']:10.4f} ms  "
        f"NAP+NAR {r['time_ms']['nap_nar']:10.4f} ms  {100 * r['reduction']:6.1f}%", file=sys.stderr))
    out = run_all(s, progress=prog, jobs=args.jobs)
    out["paper"] = PAPER
    if args.json:
        emit_json(out)
        return 0
    sm = out["summary"]
    print(f"e2e --all on {s.name}: {len(out['points'])} points ({len(out['no_fit'])} with no fitting "
          f"configuration), {out['configs_evaluated']} configurations in {out['wall_s']:.1f} s "
          f"({out['configs_per_s']:.3g}/s)")
    print(f"  {'':28s} {'ours':>8s} {'paper':>8s}")
    for key, label in (("ttft_reduction_geomean", "TTFT reduction, geomean"),
                       ("ttft_reduction_max", "TTFT reduction, max"),
                       ("tpot_reduction_geomean", "TPOT reduction, geomean"),
                       ("tpot_reduction_max", "TPOT reduction, max")):
        print(f"  {label:28s} {100 * sm[key]:7.1f}% {100 * PAPER[key]:7.1f}%")
    for key, label in (("comm_speedup_prefill", "prefill collectives"),
                       ("comm_speedup_decode", "decode collectives"),
                       ("allreduce_speedup", "All-Reduce"), ("alltoall_speedup", "All-to-All"),
                       ("allgather_speedup", "All-Gather"), ("p2p_speedup", "pipeline send")):
        paper = PAPER.get(key)
        print(f"  {label + ' speedup':28s} {sm[key]:7.2f}x " + (f"{paper:7.2f}x" if paper else "       -"))
    for ph in ("prefill", "decode"):
        l70 = sm.get("llama70b_64gpu", {}).get(ph)
        if l70:
            c = l70["config"]
            print(f"  Llama-70B 64 GPUs {ph:7s}: TP={c['tp']} EP={c['ep']} DP={c['dp']} PP={c['pp']} "
                  f"reduction {100 * l70['reduction']:.1f}% (paper: TP=8, "
                  f"{100 * PAPER['llama70b_64gpu'][ph + '_speedup']:.0f}%)")
    return 0
