"""``nuna-jax kernel``: the ParallelKittens fused-kernel cost model, every term printed.

Example::

    nuna-jax kernel --op gemm+rs --m 32768 --n 32768 --k 4096 --gpus 8 --system h100
    nuna-jax kernel --op gemm+ar --m 32768 --n 32768 --k 4096 --schedule inter --json
"""

from __future__ import annotations

from .common import add_max_work_arg, emit_json, format_size, limits_from_args, number, size_arg
from .names import KERNEL_MECHANISMS, KERNEL_OPS, KERNEL_PRESETS, KERNEL_SCHEDULES

#: Largest GEMM dimension accepted (m, n, k): 2^24, far above any of the papers' shapes.
MAX_DIM = float(1 << 24)

_TERMS = ("launch_ns", "comp_ns", "mem_ns", "comm_ns", "non_overlap_ns", "sync_ns", "total_ns")


def add_parser(subparsers):
    p = subparsers.add_parser(
        "kernel", help="ParallelKittens fused multi-GPU kernel cost model (T = launch + max(comp, mem, comm) + non-overlap + sync)",
        description="Per-GPU time of a fused GEMM+collective kernel (or a plain collective) "
                    "under the ParallelKittens cost model; times in ns.")
    p.add_argument("--op", required=True, choices=KERNEL_OPS)
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
                   help="communication SMs for --schedule inter, in (0, n_sms) (default: best by integer search)")
    p.add_argument("--mechanism", choices=KERNEL_MECHANISMS, default=None)
    p.add_argument("--elem-bytes", type=number(0.125, 64.0, what="elem_bytes"), default=2.0,
                   help="bytes per element (bf16 = 2), in [0.125, 64]")
    p.add_argument("--baseline", action="store_true", help="also print the non-overlapped baseline")
    p.add_argument("--json", action="store_true")
    add_max_work_arg(p)
    return p


def _f(x):
    return float(x)


def run(args) -> int:
    from ..kernel_presets import kernel_preset
    from ..models import kernel as K
    limits_from_args(args).check("gpus", args.gpus, f"--gpus {args.gpus}")
    hw = kernel_preset(args.system, n_gpus=args.gpus)
    from .common import RUN
    RUN["system"] = {"system": hw.name, "system_base": None, "system_file": None}   # a kernel preset
    t = K.kernel_terms(hw, args.op, args.m, args.n, args.k, args.gpus, args.schedule,
                       args.comm_sms, args.mechanism, n_bytes=args.n_bytes, elem_bytes=args.elem_bytes)
    mech = args.mechanism or K.default_mechanism(hw, args.op, args.schedule if args.op in K.FUSED_OPS else "inter")
    out = {"system": hw.name, "op": args.op, "m": args.m, "n": args.n, "k": args.k,
           "size_bytes": args.n_bytes, "n_gpus": args.gpus,
           "schedule": args.schedule if args.op in K.FUSED_OPS else None,
           "mechanism": None if args.op == "gemm" else mech,
           "terms_ns": {k: _f(t[k]) for k in _TERMS},
           "flops": _f(t["flops"]), "hbm_bytes": _f(t["hbm_bytes"]), "comm_bytes": _f(t["comm_bytes"]),
           "comm_bw_bytes_per_ns": _f(t["comm_bw_bytes_per_ns"])}
    if "comm_sms" in t:
        out["comm_sms"] = _f(t["comm_sms"])
        out["compute_sms"] = _f(t["compute_sms"])
    if args.op in K.FUSED_OPS:
        out["tflops"] = _f(K.tflops(t))
    if hw.comm_model == "nuna":
        out["nuna_comm_path"] = K.nuna_comm_path()
    if args.baseline and args.op in ("ag+gemm", "gemm+rs", "gemm+ar"):
        b = K.baseline_terms(hw, args.op, args.m, args.n, args.k, args.gpus, elem_bytes=args.elem_bytes)
        out["baseline_terms_ns"] = {k: _f(b[k]) for k in _TERMS}
        out["baseline_tflops"] = _f(K.tflops(b))
    if args.json:
        emit_json(out)
        return 0
    shape = (f"m={args.m:g} n={args.n:g} k={args.k:g}" if args.op != "all-reduce" and args.m
             else f"size={format_size(args.n_bytes)}" if args.n_bytes else "")
    print(f"{args.op} on {hw.name} x{args.gpus}  {shape}  schedule={out['schedule']}  "
          f"mechanism={out['mechanism']}" + (f"  comm_sms={out['comm_sms']:g}" if out.get("comm_sms") else ""))
    for k in _TERMS:
        print(f"  {k[:-3]:<12} {out['terms_ns'][k]:>16,.1f} ns")
    print(f"  comm: {out['comm_bytes']:.4g} B at {out['comm_bw_bytes_per_ns']:.1f} B/ns")
    if "tflops" in out:
        print(f"  throughput   {out['tflops']:>12.1f} TFLOP/s (local)")
    if "baseline_terms_ns" in out:
        print(f"  baseline (no overlap) total {out['baseline_terms_ns']['total_ns']:,.1f} ns, "
              f"{out['baseline_tflops']:.1f} TFLOP/s")
    if "nuna_comm_path" in out:
        print(f"  T_comm via: {out['nuna_comm_path']}")
    return 0
