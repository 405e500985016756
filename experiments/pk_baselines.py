"""ParallelKittens' headline claims as predictions: the baselines (cuBLAS+NCCL, NCCL, xDiT,
YunChang, NCCL All-to-All + GEMM) and the sequence- and expert-parallel workloads (PK section 4).

Nothing here is fitted: the NCCL constants are NCCL's own (nuna_jax/models/nccl.py), the GPU's are
the h100/b200 presets' (nuna_jax/kernel_presets.py; p2p_reduce_eff is the one calibrated
constant, from Fig. 4, and enters no row below except through the fused GEMM+RS / GEMM+AR).

1. NCCL's tuner table (H100, 8 ranks) and its validation against the measured 2-GPU H200
   collectives in benchmarks/data/ (JAX psum / all_gather run NCCL).
2. All-Reduce: PK's in-fabric kernel (kernel model, register ops + multimem) vs NCCL's pick,
   N x N bf16 buffers (our reading of "matrix size"), H100 N = 2048..65536, B200 2048, 4096
   (PK Fig. 6).  Also with NVLS disabled (ring/tree only), a sensitivity, not the prediction.
3. cuBLAS+NCCL at N = 32768 (PK Figs. 7-9): AG+GEMM N x N/8 x N, GEMM+RS and GEMM+AR N x N x N/8.
4. Ring Attention (B 16, H 16, D 128) vs xDiT, L = 768 x 2^j, j = 0..7 (the notes give no x axis;
   this range is our assumption); non-overlapped share (Table 3's definition).
5. DeepSpeed-Ulysses (B 16, H 128, D 128) vs YunChang, same lengths.
6. MoE dispatch + first expert GEMM (top-k 8, 256 experts, H 7168, H_expert 2048) vs NCCL
   All-to-All + grouped GEMM, tokens 2^10..2^17; imbalance 1 (uniform routing).
7. TMA vs copy engine: AG+GEMM (N x N/8 x N) PK's TMA inter-SM kernel vs the same fused kernel
   with copy-engine transfers (intra-SM: all SMs compute), N = 4096..65536.
8. (``--nuna``; minutes) NUNA meets PK: GEMM+RS (N = 32768) and a Ring Attention layer on the
   NUNA Table-2 socket, T_comm from the NUNA path model under UA and NAP+NAR ->
   experiments/data/pk_nuna.json.

Usage: python experiments/pk_baselines.py [--nuna] [--out DIR] -> experiments/data/pk_baselines.json,
results/pk/pk_baselines.png
"""
import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nuna_jax.kernel_presets import kernel_preset  # noqa: E402
from nuna_jax.models import kernel as K  # noqa: E402
from nuna_jax.models import kernel_workloads as W  # noqa: E402
from nuna_jax.models import nccl as N  # noqa: E402

PAPER_AR = {"h100": {2048: 1.28, 4096: 1.32, 8192: 1.0, 16384: 1.12, 32768: 1.07, 65536: 1.02},
            "b200": {2048: 1.79, 4096: 1.66}}
PAPER_CUBLAS_NCCL = {"ag+gemm": 628.0, "gemm+rs": 602.0, "gemm+ar": 317.0}
SEQS = [768 * 2 ** j for j in range(8)]
TOKENS = [2 ** j for j in range(10, 18)]
NS = (4096, 8192, 16384, 32768, 65536)


def nccl_tables():
    cfg = N.nccl_preset("h100")
    out = {"source": N.TUNING_SOURCE, "config": {k: v for k, v in vars(cfg).items() if k != "sources"},
           "topology_sources": cfg.sources}
    out["tables_us_gbps"] = {c: N.nccl_table(cfg, c) for c in ("all-reduce", "all-gather", "reduce-scatter")}
    picks = {}
    for c in ("all-reduce", "all-gather"):
        rows, last = [], None
        for e in range(10, 34):
            ch = N.nccl_choose(cfg, c, 2.0 ** e)
            name = f"{ch['algorithm']}/{ch['protocol']}"
            if name != last:
                rows.append({"from_bytes": 2 ** e, "pick": name})
                last = name
        picks[c] = rows
    out["picks_by_power_of_two"] = picks
    return out


def h200_validation():
    cfg = N.nccl_preset("h200", n_ranks=2)
    rows = []
    for f in sorted((ROOT / "benchmarks" / "data").glob("h200_*.json")):
        d = json.loads(f.read_text())
        for name, coll in (("psum", "all-reduce"), ("all_gather", "all-gather")):
            for r in (d.get("collectives") or {}).get(name, {}).get("rows", []):
                ch = N.nccl_choose(cfg, coll, r["buffer_bytes"])
                rows.append({"file": f.name, "device": d.get("device"), "op": name, "bytes": r["buffer_bytes"],
                             "measured_us": r["measured_ns"] / 1e3, "predicted_us": ch["time_ns"] / 1e3,
                             "pick": f"{ch['algorithm']}/{ch['protocol']}",
                             "ratio": ch["time_ns"] / r["measured_ns"]})
    big = [r["ratio"] for r in rows if r["bytes"] >= 1 << 30]
    return {"n_ranks": 2, "rows": rows,
            "ratio_at_ge_1GiB": {"min": min(big), "max": max(big)} if big else None,
            "note": "measured = JAX psum / all_gather on 2 H200 (NCCL underneath) incl. ~100 us of host "
                    "dispatch (the fitted alpha), so only the large sizes test NCCL's bandwidth term"}


def allreduce_curve():
    out = {}
    for gpu, paper in PAPER_AR.items():
        hw = kernel_preset(gpu)
        rows = []
        for variant, cfg in (("nccl", N.nccl_preset(gpu)),
                             ("nccl_no_nvls", N.nccl_preset(gpu).replace(algorithms=("ring", "tree")))):
            for n, pv in paper.items():
                S = 2.0 * n * n
                pk = float(K.collective_terms(hw, "all-reduce", S, 8)["total_ns"])
                ch = N.nccl_choose(cfg, "all-reduce", S)
                rows.append({"variant": variant, "N": n, "bytes": S, "pk_us": pk / 1e3, "nccl_us": ch["time_ns"] / 1e3,
                             "nccl_pick": f"{ch['algorithm']}/{ch['protocol']}", "speedup": ch["time_ns"] / pk,
                             "paper": pv})
        out[gpu] = rows
    return out


def cublas_nccl():
    hw = kernel_preset("h100")
    n = 32768.0
    shapes = {"ag+gemm": (n, n / 8, n), "gemm+rs": (n, n, n / 8), "gemm+ar": (n, n, n / 8)}
    out = {}
    for op, (m, nn, k) in shapes.items():
        row = {"paper": PAPER_CUBLAS_NCCL[op], "shape": [m, nn, k]}
        for variant, cfg in (("nccl", None), ("nccl_no_nvls", N.nccl_preset("h100").replace(algorithms=("ring", "tree")))):
            t = W.cublas_nccl_terms(hw, op, m, nn, k, 8, nccl=cfg)
            c = cfg or N.nccl_preset("h100")
            S = 2.0 * m * (k if op == "ag+gemm" else nn)
            ch = N.nccl_choose(c, W._FUSED_TO_NCCL[op], S)
            row[variant] = {"tflops": float(K.tflops(t)), "nccl_pick": f"{ch['algorithm']}/{ch['protocol']}",
                            "terms_ms": {kk: float(v) / 1e6 for kk, v in t.items() if kk.endswith("_ns")}}
        row["tflops"] = row["nccl"]["tflops"]
        out[op] = row
    # PK's AG+GEMM (inter-SM, TMA, best split: experiments/pk_overlap.py's kernel) over cuBLAS+NCCL, N sweep
    sweep = []
    for nn in NS:
        m, n2, k = nn, nn / 8, nn
        c, t_pk = K.best_comm_sms_search(hw, "ag+gemm", m, n2, k, 8)
        b = W.cublas_nccl_terms(hw, "ag+gemm", m, n2, k, 8)
        sweep.append({"N": nn, "pk_ms": t_pk / 1e6, "cublas_nccl_ms": float(b["total_ns"]) / 1e6,
                      "speedup": float(b["total_ns"]) / t_pk, "comm_sms": c})
    sp = [r["speedup"] for r in sweep]
    out["ag+gemm_sweep"] = {"rows": sweep, "speedup_min": min(sp), "speedup_max": max(sp)}
    return out


def _sweep(fn_pk, fn_base, xs, share_fn):
    rows = []
    for x in xs:
        pk, b = fn_pk(x), fn_base(x)
        rows.append({"x": x, "pk_ms": float(pk["total_ns"]) / 1e6, "baseline_ms": float(b["total_ns"]) / 1e6,
                     "speedup": float(b["total_ns"] / pk["total_ns"]),
                     "share": float(share_fn(x)), "comm_sms": float(pk.get("comm_sms", 0.0)),
                     "pk_terms_ms": {k: float(v) / 1e6 for k, v in pk.items() if k.endswith("_ns")}})
    sp = [r["speedup"] for r in rows]
    sh = [r["share"] for r in rows]
    return {"rows": rows, "speedup_min": min(sp), "speedup_max": max(sp), "share_min": min(sh), "share_max": max(sh)}


def workloads():
    hw = kernel_preset("h100")
    ra = dict(batch=16, heads=16, head_dim=128, n_gpus=8)
    ring = _sweep(lambda L: W.ring_attention_terms(hw, seq_len=L, design="pk", **ra),
                  lambda L: W.ring_attention_terms(hw, seq_len=L, design="xdit", **ra), SEQS,
                  lambda L: W.share_vs_compute_only(hw, "ring-attention", seq_len=L, **ra))
    ring["no_merge_kernel"] = _sweep(lambda L: W.ring_attention_terms(hw, seq_len=L, design="pk", **ra),
                                     lambda L: W.ring_attention_terms(hw, seq_len=L, design="xdit", merge_kernel=False, **ra),
                                     SEQS, lambda L: 0.0)
    ring["no_merge_kernel"] = {k: v for k, v in ring["no_merge_kernel"].items() if k.startswith("speedup")}
    seq = _sweep(lambda L: W.ring_attention_terms(hw, seq_len=L, design="pk", **ra),
                 lambda L: W.ring_attention_terms(hw, seq_len=L, design="sequential", **ra), SEQS, lambda L: 0.0)
    ring["over_sequential"] = {k: v for k, v in seq.items() if k.startswith("speedup")}
    ring["x"] = "total sequence length L"
    uy = dict(batch=16, heads=128, head_dim=128, n_gpus=8)
    uly = _sweep(lambda L: W.ulysses_terms(hw, seq_len=L, design="pk", **uy),
                 lambda L: W.ulysses_terms(hw, seq_len=L, design="yunchang", **uy), SEQS,
                 lambda L: W.share_vs_compute_only(hw, "ulysses", seq_len=L, **uy))
    uly["x"] = "total sequence length L"
    moe = _sweep(lambda T: W.moe_dispatch_terms(hw, tokens=T, design="pk"),
                 lambda T: W.moe_dispatch_terms(hw, tokens=T, design="sequential"), TOKENS,
                 lambda T: W.share_vs_compute_only(hw, "moe-dispatch", tokens=T))
    moe["x"] = "total tokens"
    moe["imbalance_1.5"] = _sweep(lambda T: W.moe_dispatch_terms(hw, tokens=T, design="pk", imbalance=1.5),
                                  lambda T: W.moe_dispatch_terms(hw, tokens=T, design="sequential", imbalance=1.5),
                                  TOKENS, lambda T: W.share_vs_compute_only(hw, "moe-dispatch", tokens=T, imbalance=1.5))
    moe["imbalance_1.5"] = {k: v for k, v in moe["imbalance_1.5"].items() if k != "rows"}
    return {"ring_attention": ring, "ulysses": uly, "moe_dispatch": moe}


def tma_vs_ce():
    hw = kernel_preset("h100")
    rows = []
    for n in NS:
        m, nn, k = n, n / 8, n
        c, _ = K.best_comm_sms_search(hw, "ag+gemm", m, nn, k, 8, mechanism="tma")
        tma = K.fused_terms(hw, "ag+gemm", m, nn, k, 8, "inter", c, "tma")
        ce = K.fused_terms(hw, "ag+gemm", m, nn, k, 8, "intra", None, "ce")
        rows.append({"N": n, "tma_tflops": float(K.tflops(tma)), "ce_tflops": float(K.tflops(ce)),
                     "tma_comm_sms": c, "ratio": float(ce["total_ns"] / tma["total_ns"])})
    r = [x["ratio"] for x in rows]
    return {"rows": rows, "ratio_min": min(r), "ratio_max": max(r)}


def nuna_block():
    from nuna_jax import pk_nuna as PN
    hw = kernel_preset("nuna-table2")
    out = {}
    t0 = time.time()
    n = 32768.0
    r = PN.compare_policies(hw, "gemm+rs", m=n, n=n, k=n / 8, tbs_per_gpu="best")
    out["gemm+rs_N32768"] = {"ratio": r["ratio"], "policies": r["policies"]}
    r = PN.compare_policies(hw, "ring-attention", seq_len=24576, batch=16, heads=16, head_dim=128, tbs_per_gpu="best")
    out["ring_attention_L24576"] = {"ratio": r["ratio"], "policies": r["policies"]}
    out["wall_s"] = time.time() - t0
    return out


def plot(d, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
    for gpu, mk in (("h100", "o"), ("b200", "s")):
        rows = [r for r in d["allreduce_vs_nccl"][gpu] if r["variant"] == "nccl"]
        ax[0].plot([r["N"] for r in rows], [r["speedup"] for r in rows], mk + "-", label=f"{gpu} ours")
        ax[0].plot([r["N"] for r in rows], [r["paper"] for r in rows], mk + "--", label=f"{gpu} PK Fig. 6")
    ax[0].set_xscale("log", base=2)
    ax[0].set_xlabel("N (N x N bf16 buffer)")
    ax[0].set_ylabel("All-Reduce speedup over NCCL")
    ax[0].legend()
    for key, lab in (("ring_attention", "Ring Attention / xDiT"), ("ulysses", "Ulysses / YunChang")):
        rows = d["workloads"][key]["rows"]
        ax[1].plot([r["x"] for r in rows], [r["speedup"] for r in rows], "o-", label=lab + " (ours)")
    ax[1].axhspan(1.07, 4.08, alpha=0.1, color="C0", label="PK ring 1.07-4.08x")
    ax[1].axhspan(1.01, 1.39, alpha=0.1, color="C1", label="PK Ulysses 1.01-1.39x")
    ax[1].set_xscale("log", base=2)
    ax[1].set_xlabel("total sequence length")
    ax[1].set_ylabel("speedup")
    ax[1].legend(fontsize=7)
    ops = [o for o in d["cublas_nccl"] if not o.endswith("_sweep")]
    ax[2].bar([i - 0.2 for i in range(3)], [d["cublas_nccl"][o]["tflops"] for o in ops], 0.4, label="ours")
    ax[2].bar([i + 0.2 for i in range(3)], [d["cublas_nccl"][o]["paper"] for o in ops], 0.4, label="PK")
    ax[2].set_xticks(range(3), ops)
    ax[2].set_ylabel("cuBLAS+NCCL TFLOP/s (N = 32768)")
    ax[2].legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nuna", action="store_true", help="also the NUNA policy comparison (minutes)")
    ap.add_argument("--out", default=None, metavar="DIR",
                    help="write the JSON and the plot into DIR (default: experiments/data/ and results/pk/)")
    args = ap.parse_args(argv)
    data_dir = Path(args.out) if args.out else ROOT / "experiments" / "data"
    plot_dir = Path(args.out) if args.out else ROOT / "results" / "pk"
    data_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    d = {"nccl": nccl_tables(), "nccl_validation_h200": h200_validation(), "allreduce_vs_nccl": allreduce_curve(),
         "cublas_nccl": cublas_nccl(), "workloads": workloads(), "tma_vs_ce": tma_vs_ce()}
    d["wall_s"] = time.time() - t0
    d["plot"] = plot(d, plot_dir / "pk_baselines.png")
    out = data_dir / "pk_baselines.json"
    out.write_text(json.dumps(d, indent=1, default=float))
    print(f"wrote {out} ({d['wall_s']:.0f} s)")
    for gpu, rows in d["allreduce_vs_nccl"].items():
        for r in rows:
            if r["variant"] == "nccl":
                print(f"AR {gpu} N={r['N']}: ours {r['speedup']:.2f}x ({r['nccl_pick']}) paper {r['paper']}x")
    for op, r in d["cublas_nccl"].items():
        if op.endswith("_sweep"):
            print(f"AG+GEMM over cuBLAS+NCCL: {r['speedup_min']:.2f}-{r['speedup_max']:.2f}x")
            continue
        print(f"cuBLAS+NCCL {op}: ours {r['tflops']:.0f} paper {r['paper']:.0f} TFLOP/s")
    for k, v in d["workloads"].items():
        print(f"{k}: speedup {v['speedup_min']:.2f}-{v['speedup_max']:.2f}x, share {v['share_min']:.1%}-{v['share_max']:.1%}")
    print(f"TMA vs CE: {d['tma_vs_ce']['ratio_min']:.2f}-{d['tma_vs_ce']['ratio_max']:.2f}x")
    if args.nuna:
        nu = nuna_block()
        (data_dir / "pk_nuna.json").write_text(json.dumps(nu, indent=1, default=float))
        print(f"NUNA: GEMM+RS UA/NAP+NAR {nu['gemm+rs_N32768']['ratio']:.3f}, ring attention "
              f"{nu['ring_attention_L24576']['ratio']:.3f} ({nu['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
