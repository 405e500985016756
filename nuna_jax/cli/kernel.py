"""``nuna-jax kernel``: the ParallelKittens fused-kernel cost model, every term printed.

Example::

    nuna-jax kernel --op gemm+rs --m 32768 --n 32768 --k 4096 --gpus 8 --system h100 --baseline
    nuna-jax kernel --op gemm+ar --m 32768 --n 32768 --k 4096 --schedule inter --json
    nuna-jax kernel --op all-reduce --bytes 8388608 --baseline          # + NCCL's tuner choice
    nuna-jax kernel --op ring-attention --batch 16 --heads 16 --seq 98304 --head-dim 128 --baseline
    nuna-jax kernel --op ring-attention --seq 24576 --system nuna-table2 --policy 'ua|nap+nar'
"""

from __future__ import annotations

from .common import add_max_work_arg, emit_json, format_size, limits_from_args, number, size_arg
from .names import KERNEL_MECHANISMS, KERNEL_OPS, KERNEL_PRESETS, KERNEL_SCHEDULES, KERNEL_WORKLOADS, POLICIES

#: Largest GEMM dimension accepted (m, n, k): 2^24, far above any of the papers' shapes.
MAX_DIM = float(1 << 24)

_TERMS = ("launch_ns", "comp_ns", "mem_ns", "comm_ns", "non_overlap_ns", "sync_ns", "total_ns")
#: the baseline each workload is compared with (PK section 4)
_BASELINE = {"ring-attention": "xdit", "ulysses": "yunchang", "moe-dispatch": "sequential"}
_FUSED_COLL = ("ag+gemm", "gemm+rs", "gemm+ar")


def add_parser(subparsers):
    p = subparsers.add_parser(
        "kernel", help="ParallelKittens fused multi-GPU kernel cost model (T = launch + max(comp, mem, comm) + non-overlap + sync)",
        description="Per-GPU time of a fused GEMM+collective kernel, a plain collective, or a "
                    "ParallelKittens workload (ring-attention, ulysses, moe-dispatch) under the "
                    "ParallelKittens cost model; times in ns.  --baseline adds the library baseline "
                    "(cuBLAS+NCCL, xDiT, YunChang, NCCL All-to-All + GEMM); --policy (nuna-table2) "
                    "times T_comm with the NUNA path model under each placement policy.")
    p.add_argument("--op", required=True, choices=KERNEL_OPS + KERNEL_WORKLOADS)
    dim = number(0.0, MAX_DIM, lo_open=True)
    p.add_argument("--m", type=dim, help="rows of the local GEMM (gathered rows for ag+gemm), in (0, 2^24]")
    p.add_argument("--n", type=dim, help="columns of the local GEMM, in (0, 2^24]")
    p.add_argument("--k", type=dim, help="reduction dim of the local GEMM, in (0, 2^24]")
    p.add_argument("--bytes", "--size", type=size_arg, dest="n_bytes", metavar="SIZE",
                   help="buffer size for a plain collective: a size such as 1MB, 1MiB or 4096 (bytes), "
                        "1 B .. 1e15 B (--size is the same flag)")
    p.add_argument("--gpus", type=number(1, 10**9, integer=True, what="n_gpus"), default=8)
    p.add_argument("--system", default="h100", help=f"kernel preset: {', '.join(KERNEL_PRESETS)}")
    p.add_argument("--schedule", choices=KERNEL_SCHEDULES, default="intra")
    p.add_argument("--comm-sms", type=number(0.0, 1e6, lo_open=True, what="comm_sms"), default=None,
                   help="communication SMs for --schedule inter and the inter-SM workloads, in (0, n_sms) "
                        "(default: best by integer search)")
    p.add_argument("--mechanism", choices=KERNEL_MECHANISMS, default=None)
    p.add_argument("--elem-bytes", type=number(0.125, 64.0, what="elem_bytes"), default=2.0,
                   help="bytes per element (bf16 = 2), in [0.125, 64]")
    w = p.add_argument_group("workloads (PK section 4; defaults: the paper's shapes)")
    count = number(1, 1 << 24, integer=True)
    w.add_argument("--batch", type=count, default=16, help="batch B (ring-attention, ulysses), default 16")
    w.add_argument("--heads", type=count, default=None, help="attention heads H (default 16 ring-attention, 128 ulysses)")
    w.add_argument("--seq", type=count, default=None, help="total sequence length, split over --gpus "
                   "(default 98304 ring-attention, 32768 ulysses)")
    w.add_argument("--head-dim", type=count, default=128, help="head dimension D, default 128")
    w.add_argument("--tokens", type=count, default=16384, help="moe-dispatch: total tokens, split over --gpus")
    w.add_argument("--topk", type=count, default=8, help="moe-dispatch: experts per token, default 8")
    w.add_argument("--experts", type=count, default=256, help="moe-dispatch: experts, default 256")
    w.add_argument("--hidden", type=count, default=7168, help="moe-dispatch: model hidden size, default 7168")
    w.add_argument("--expert-hidden", type=count, default=2048, help="moe-dispatch: expert hidden size, default 2048")
    w.add_argument("--imbalance", type=number(1.0, 1e3, what="imbalance"), default=1.0,
                   help="moe-dispatch: tokens at the busiest GPU over the mean, in [1, 1000]")
    p.add_argument("--baseline", action="store_true",
                   help="also print the baseline: no overlap + cuBLAS+NCCL (fused ops), NCCL's tuner (collectives), "
                        "xDiT / YunChang / NCCL A2A + GEMM (workloads)")
    p.add_argument("--policy", default=None,
                   help="nuna-table2 only: placement policies for T_comm from the NUNA path model, "
                        "separated by '|' or ',' (e.g. 'ua|nap+nar'); two or more print each and the "
                        f"first over the last.  Policies: {', '.join(POLICIES)}")
    p.add_argument("--tbs", default="best", help="threadblocks per GPU of the NUNA scenario with --policy: "
                   "an integer or 'best' (default)")
    p.add_argument("--json", action="store_true")
    add_max_work_arg(p)
    return p


def _f(x):
    return float(x)


def _policies(text):
    names = [x.strip() for x in text.replace(",", "|").split("|") if x.strip()]
    known = {x.upper(): x for x in POLICIES}
    bad = [x for x in names if x.upper() not in known]
    if not names or bad:
        raise ValueError(f"--policy {text!r}: unknown policy {bad[0] if bad else '(empty)'!r}; "
                         f"choose from {', '.join(POLICIES)}")
    return names


def _tbs(text):
    if str(text).strip().lower() == "best":
        return "best"
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise ValueError(f"--tbs must be an integer >= 1 or 'best', got {text!r}")
    return v


def _workload_shape(args):
    if args.op == "moe-dispatch":
        return dict(tokens=args.tokens, topk=args.topk, n_experts=args.experts, hidden=args.hidden,
                    expert_hidden=args.expert_hidden, imbalance=args.imbalance)
    heads = args.heads or (16 if args.op == "ring-attention" else 128)
    seq = args.seq or (98304 if args.op == "ring-attention" else 32768)
    return dict(batch=args.batch, heads=heads, seq_len=seq, head_dim=args.head_dim)


def run(args) -> int:
    from ..kernel_presets import kernel_preset
    from ..models import kernel as K
    from ..models import kernel_workloads as W
    limits_from_args(args).check("gpus", args.gpus, f"--gpus {args.gpus}")
    hw = kernel_preset(args.system, n_gpus=args.gpus)
    from .common import RUN
    RUN["system"] = {"system": hw.name, "system_base": None, "system_file": None}   # a kernel preset
    policies = _policies(args.policy) if args.policy is not None else None
    if policies is not None and hw.system is None:
        raise ValueError(f"--policy needs --system nuna-table2 (the NUNA socket); {args.system!r} has no NUNA placement")
    if policies is not None and args.op not in _FUSED_COLL + KERNEL_WORKLOADS:
        raise ValueError(f"--policy applies to {', '.join(_FUSED_COLL + KERNEL_WORKLOADS)}, not {args.op!r}")
    tbs = _tbs(args.tbs)
    workload = args.op in KERNEL_WORKLOADS
    if args.baseline and workload and hw.system is not None:
        raise ValueError(f"--baseline for {args.op} uses NCCL, which the NUNA socket does not have; "
                         "use --policy to compare placements")
    if workload:
        shape = _workload_shape(args)
        t = W.workload_terms(hw, args.op, "pk", n_gpus=args.gpus, elem_bytes=args.elem_bytes,
                             **({} if args.op == "ulysses" else {"comm_sms": args.comm_sms}), **shape)
        mech = "tma"
    else:
        shape = {}
        t = K.kernel_terms(hw, args.op, args.m, args.n, args.k, args.gpus, args.schedule,
                           args.comm_sms, args.mechanism, n_bytes=args.n_bytes, elem_bytes=args.elem_bytes)
        mech = args.mechanism or K.default_mechanism(hw, args.op, args.schedule if args.op in K.FUSED_OPS else "inter")
    out = {"system": hw.name, "op": args.op, "n_gpus": args.gpus}
    if workload:       # one shape for every op (docs/json.md): the GEMM's fields are null here
        out.update(m=None, n=None, k=None, size_bytes=None, schedule=None)
        out["shape"] = shape
        out["design"] = "pk (fused, inter-SM)" if args.op != "ulysses" else "pk (fine-grained A2A kernels)"
    else:
        out.update(m=args.m, n=args.n, k=args.k, size_bytes=args.n_bytes,
                   schedule=args.schedule if args.op in K.FUSED_OPS else None)
    out["mechanism"] = None if args.op == "gemm" else mech
    out["terms_ns"] = {k: _f(t[k]) for k in _TERMS}
    out.update(flops=_f(t["flops"]), hbm_bytes=_f(t["hbm_bytes"]), comm_bytes=_f(t["comm_bytes"]))
    out["comm_bw_bytes_per_ns"] = _f(t["comm_bw_bytes_per_ns"]) if "comm_bw_bytes_per_ns" in t else None
    if "comm_sms" in t and _f(t["comm_sms"]) > 0:
        out["comm_sms"] = _f(t["comm_sms"])
        if "compute_sms" in t:
            out["compute_sms"] = _f(t["compute_sms"])
    if args.op in K.FUSED_OPS or workload:
        out["tflops"] = _f(K.tflops(t))
    if hw.comm_model == "nuna" and policies is None:
        out["nuna_comm_path"] = K.nuna_comm_path()
    if args.baseline:
        _baselines(args, hw, t, shape, out)
    if policies is not None:
        _policy_block(args, hw, shape, policies, tbs, out)
    if args.json:
        emit_json(out)
        return 0
    _print(args, hw, out)
    return 0


def _baselines(args, hw, t, shape, out):
    from ..models import kernel as K
    from ..models import kernel_workloads as W
    from ..models import nccl as N
    has_nccl = hw.system is None
    if args.op in _FUSED_COLL:
        b = K.baseline_terms(hw, args.op, args.m, args.n, args.k, args.gpus, elem_bytes=args.elem_bytes)
        out["baseline_terms_ns"] = {k: _f(b[k]) for k in _TERMS}
        out["baseline_tflops"] = _f(K.tflops(b))
        if has_nccl:
            c = W.cublas_nccl_terms(hw, args.op, args.m, args.n, args.k, args.gpus, elem_bytes=args.elem_bytes)
            cfg = W.nccl_for(hw, args.gpus)
            S = args.elem_bytes * args.m * (args.k if args.op == "ag+gemm" else args.n)
            out["cublas_nccl_terms_ns"] = {k: _f(c[k]) for k in _TERMS}
            out["cublas_nccl_tflops"] = _f(K.tflops(c))
            out["nccl"] = _nccl_info(N, cfg, W._FUSED_TO_NCCL[args.op], S)
            out["speedup_over_cublas_nccl"] = _f(c["total_ns"]) / out["terms_ns"]["total_ns"]
    elif args.op in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all") and has_nccl:
        cfg = W.nccl_for(hw, args.gpus)
        S = args.n_bytes if args.n_bytes else args.m * args.n * args.elem_bytes
        if args.op == "all-to-all":
            tn = _f(N.alltoall_time_ns(cfg, S))
            out["nccl"] = {"algorithm": "p2p (grouped send/recv)", "protocol": None, "time_ns": tn}
        else:
            out["nccl"] = _nccl_info(N, cfg, args.op, S)
            tn = out["nccl"]["time_ns"]
        out["speedup_over_nccl"] = tn / out["terms_ns"]["total_ns"]
    elif args.op in KERNEL_WORKLOADS:
        if not has_nccl:
            raise ValueError(f"--baseline for {args.op} uses NCCL, which the NUNA socket does not have; "
                             "use --policy to compare placements")
        design = _BASELINE[args.op]
        b = W.workload_terms(hw, args.op, design, n_gpus=args.gpus, elem_bytes=args.elem_bytes, **shape)
        out["baseline_design"] = design
        out["baseline_terms_ns"] = {k: _f(b[k]) for k in _TERMS}
        out["speedup_over_baseline"] = _f(b["total_ns"]) / out["terms_ns"]["total_ns"]
        sh = W.share_vs_compute_only(hw, args.op, n_gpus=args.gpus, elem_bytes=args.elem_bytes, **shape)
        out["non_overlapped_share"] = _f(sh)


def _nccl_info(N, cfg, coll, S):
    ch = N.nccl_choose(cfg, coll, S)
    return {"algorithm": ch["algorithm"], "protocol": ch["protocol"], "time_ns": ch["time_ns"],
            "latency_ns": ch["latency_ns"], "bandwidth_gbps": ch["bandwidth_gbps"], "source": N.TUNING_SOURCE}


def _policy_block(args, hw, shape, policies, tbs, out):
    from .. import pk_nuna as PN
    kw = dict(n_gpus=args.gpus, elem_bytes=args.elem_bytes, tbs_per_gpu=tbs)
    if args.op in _FUSED_COLL:
        for nm in ("m", "n", "k"):
            if getattr(args, nm) is None:
                raise ValueError(f"{args.op} needs --{nm}")
        kw.update(m=args.m, n=args.n, k=args.k, schedule=args.schedule, comm_sms=args.comm_sms)
    else:
        kw.update(shape)
        if args.op != "ulysses":
            kw["comm_sms"] = args.comm_sms
    res = {}
    for pol in policies:
        r = PN.nuna_policy_terms(hw, args.op, pol, **kw)
        res[pol] = {"terms_ns": {k: r[k] for k in _TERMS}, "nuna": r["nuna"]}
    out["policies"] = res
    if len(policies) >= 2:
        out["policy_ratio"] = res[policies[0]]["terms_ns"]["total_ns"] / res[policies[-1]]["terms_ns"]["total_ns"]
        out["policy_ratio_of"] = f"{policies[0]} / {policies[-1]} (total time)"
        out["policy_comm_ratio"] = res[policies[0]]["terms_ns"]["comm_ns"] / res[policies[-1]]["terms_ns"]["comm_ns"]


def _terms_lines(terms, indent="  "):
    for k in _TERMS:
        print(f"{indent}{k[:-3]:<12} {terms[k]:>16,.1f} ns")


def _print(args, hw, out):
    if args.op in KERNEL_WORKLOADS:
        shape = " ".join(f"{k}={v:g}" for k, v in out["shape"].items())
    elif args.op in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all"):
        shape = f"size={format_size(args.n_bytes)}" if args.n_bytes else (f"m={args.m:g} n={args.n:g}" if args.m else "")
    else:
        shape = f"m={args.m:g} n={args.n:g} k={args.k:g}"
    head = f"{args.op} on {hw.name} x{args.gpus}  {shape}"
    if out.get("schedule"):
        head += f"  schedule={out['schedule']}"
    if out.get("design"):
        head += f"  design={out['design']}"
    print(head + f"  mechanism={out['mechanism']}" + (f"  comm_sms={out['comm_sms']:g}" if out.get("comm_sms") else ""))
    _terms_lines(out["terms_ns"])
    print(f"  comm: {out['comm_bytes']:.4g} B" + (f" at {out['comm_bw_bytes_per_ns']:.1f} B/ns"
                                                 if out["comm_bw_bytes_per_ns"] is not None else ""))
    if "tflops" in out:
        print(f"  throughput   {out['tflops']:>12.1f} TFLOP/s (local)")
    if "baseline_tflops" in out:
        print(f"  baseline (no overlap) total {out['baseline_terms_ns']['total_ns']:,.1f} ns, "
              f"{out['baseline_tflops']:.1f} TFLOP/s")
    if "cublas_nccl_terms_ns" in out:
        nc = out["nccl"]
        print(f"  cuBLAS+NCCL total {out['cublas_nccl_terms_ns']['total_ns']:,.1f} ns, "
              f"{out['cublas_nccl_tflops']:.1f} TFLOP/s (NCCL {nc['algorithm']}/{nc['protocol']} "
              f"{nc['time_ns']:,.1f} ns); fused speedup {out['speedup_over_cublas_nccl']:.2f}x")
    elif "speedup_over_nccl" in out:
        nc = out["nccl"]
        print(f"  NCCL {nc['algorithm']}" + (f"/{nc['protocol']}" if nc.get("protocol") else "") +
              f": {nc['time_ns']:,.1f} ns; "
              f"speedup over NCCL {out['speedup_over_nccl']:.2f}x")
    if "baseline_design" in out:
        print(f"  baseline {out['baseline_design']}:")
        _terms_lines(out["baseline_terms_ns"], "    ")
        print(f"  speedup over {out['baseline_design']} {out['speedup_over_baseline']:.2f}x; "
              f"non-overlapped share {out['non_overlapped_share']:.1%}")
    if "policies" in out:
        for pol, r in out["policies"].items():
            nu = r["nuna"]
            print(f"  policy {pol}: T_comm from the NUNA path model ({nu['collective']}, {nu['algorithm']}, "
                  f"{nu['size_bytes']:,} B, tbs {nu['tbs_per_gpu']}, bottleneck {nu['bottleneck']})")
            _terms_lines(r["terms_ns"], "    ")
        if "policy_ratio" in out:
            print(f"  ratio {out['policy_ratio_of']}: {out['policy_ratio']:.3f} "
                  f"(T_comm ratio {out['policy_comm_ratio']:.3f})")
    if "nuna_comm_path" in out:
        print(f"  T_comm via: {out['nuna_comm_path']}")
