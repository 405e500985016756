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
8. The departing rows against PK's own numbers (``paper_consistency``: what each would need,
   from Table 3's GEMM time, Figs. 4 and 6 and the 450 GB/s link; enters no prediction).
9. (``--nuna``; minutes) NUNA meets PK: GEMM+RS (N = 32768) and a Ring Attention layer on the
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


# --------------------------------------------------------------------------- the paper against itself
#: PK's own numbers the checks below combine (shared/reference/parallelkittens-numbers.md)
PK_T3_GEMM_K4096_MS = 11.78     # Table 3: 32768 x 32768 x 4096 GEMM alone = GEMM+RS/GEMM+AR's local GEMM at N = 32768
PK_FIG4_AR_NO_OVERLAP = 450.9   # Fig. 4: GEMM+AR, no overlap (TFLOP/s), N = 32768
PK_LINK_GBPS = 450.0            # NVLink 4, per direction (PK 2.1)


def _affine_ratio_turns(seq):
    """Number of direction changes of a sequence (a ratio of two ``a + S/b`` times has none)."""
    d = [b - a for a, b in zip(seq, seq[1:]) if b != a]
    return sum(1 for x, y in zip(d, d[1:]) if (x > 0) != (y > 0))


def paper_consistency(d):
    """What the departing rows would need, from PK's own numbers and the stated hardware; the
    arithmetic of docs/kernel_model.md ("Where the rows depart"), so that it is reproducible.
    Nothing here enters a prediction."""
    hw = kernel_preset("h100")
    n, P = 32768.0, 8
    S = 2.0 * n * n                                  # bytes: the N x N bf16 buffer (2 GiB)
    F = 2.0 * n * n * n / P                          # FLOP of the local GEMM (all three kernels)
    tf = lambda ms: F / (ms * 1e-3) / 1e12          # noqa: E731
    link_ms = (P - 1) / P * S / PK_LINK_GBPS / 1e6   # the gather / scatter at the full link rate
    out = {"inputs": {"pk_table3_gemm_k4096_ms": PK_T3_GEMM_K4096_MS, "pk_fig4_gemm_ar_no_overlap_tflops":
                      PK_FIG4_AR_NO_OVERLAP, "link_gbps": PK_LINK_GBPS, "buffer_bytes": S, "gemm_flop": F}}
    # 1. AG+GEMM and GEMM+RS: a sequential GEMM then collective cannot beat GEMM + (P-1)/P S / link
    bound = tf(PK_T3_GEMM_K4096_MS + link_ms)
    seq = {"collective_at_link_ms": link_ms, "max_sequential_tflops": bound}
    for op, pv in (("ag+gemm", PAPER_CUBLAS_NCCL["ag+gemm"]), ("gemm+rs", PAPER_CUBLAS_NCCL["gemm+rs"])):
        t_ms = F / (pv * 1e12) * 1e3
        seq[op] = {"paper_tflops": pv, "paper_total_ms": t_ms,
                   "collective_left_ms": t_ms - PK_T3_GEMM_K4096_MS,
                   "collective_gbps_implied": (P - 1) / P * S / ((t_ms - PK_T3_GEMM_K4096_MS) * 1e6),
                   "gemm_tflops_needed_at_link": tf(t_ms - link_ms),
                   "ours_tflops": _dig_f(d, "cublas_nccl", op, "tflops")}
    out["cublas_nccl_ag_rs"] = seq
    # 2. GEMM+AR: Fig. 9's 317 against Fig. 6 (PK AR / NCCL at the same 2 GiB = 1.07) and Fig. 4
    t_no = F / (PK_FIG4_AR_NO_OVERLAP * 1e12) * 1e3
    ar_no = t_no - PK_T3_GEMM_K4096_MS
    fig6 = PAPER_AR["h100"][32768]
    t_317 = F / (PAPER_CUBLAS_NCCL["gemm+ar"] * 1e12) * 1e3
    out["cublas_nccl_ar"] = {
        "paper_tflops": PAPER_CUBLAS_NCCL["gemm+ar"], "paper_total_ms": t_317,
        "nccl_ar_ms_implied_by_317": t_317 - PK_T3_GEMM_K4096_MS,
        "nccl_ar_algbw_gbps_implied_by_317": S / ((t_317 - PK_T3_GEMM_K4096_MS) * 1e6),
        "fig4_no_overlap_ar_ms": ar_no,
        "nccl_ar_ms_from_fig4_and_fig6": fig6 * ar_no,
        "cublas_nccl_tflops_from_fig4_and_fig6": tf(PK_T3_GEMM_K4096_MS + fig6 * ar_no),
        "cublas_nccl_tflops_if_fig4_used_nccl": PK_FIG4_AR_NO_OVERLAP,
        "nccl_over_pk_ar_needed_by_317": (t_317 - PK_T3_GEMM_K4096_MS) / ar_no,
        "ours_tflops": _dig_f(d, "cublas_nccl", "gemm+ar", "tflops")}
    # 3. All-Reduce vs NCCL: a ratio of two (latency + bytes / bandwidth) times is monotone in size
    rows = {r["N"]: r for r in d["allreduce_vs_nccl"]["h100"] if r["variant"] == "nccl"}
    paper = [PAPER_AR["h100"][k] for k in sorted(PAPER_AR["h100"])]
    r2 = rows[2048]
    b4 = {r["N"]: r for r in d["allreduce_vs_nccl"]["b200"] if r["variant"] == "nccl"}[4096]
    b200_reg_floor_us = 1.125 * b4["bytes"] / kernel_preset("b200").reg_bw_bytes_per_ns / 1e3
    out["allreduce"] = {
        "paper_h100": paper, "paper_direction_changes": _affine_ratio_turns(paper),
        "ours_h100": [rows[k]["speedup"] for k in sorted(rows)],
        "ours_direction_changes": _affine_ratio_turns([rows[k]["speedup"] for k in sorted(rows)]),
        "h100_2048": {"ours_nccl_us": r2["nccl_us"], "ours_pk_us": r2["pk_us"],
                      "nccl_us_for_paper_ratio_at_our_pk": PAPER_AR["h100"][2048] * r2["pk_us"],
                      "pk_us_for_paper_ratio_at_our_nccl": r2["nccl_us"] / PAPER_AR["h100"][2048]},
        "b200_4096": {"ours_nccl_us": b4["nccl_us"], "ours_pk_us": b4["pk_us"],
                      "pk_register_floor_us": b200_reg_floor_us,
                      "nccl_us_needed_at_pk_floor": PAPER_AR["b200"][4096] * b200_reg_floor_us,
                      "nccl_nvls_algbw_gbps_needed": b4["bytes"] / (
                          (PAPER_AR["b200"][4096] * b200_reg_floor_us
                           - N.algo_latency_us(N.nccl_preset("b200"), "all-reduce", "nvls", "simple")) * 1e3)}}
    # 4. Ring Attention: the largest speedup is at the shortest sequence (L = 768, the smallest
    #    multiple PK allows), where PK's kernel is link-bound
    ra = dict(batch=16, heads=16, head_dim=128, n_gpus=8)
    L0 = 768
    kv = 2.0 * 16 * 16 * (L0 / 8) * 128 * 2
    pk_floor_us = 7 * kv / PK_LINK_GBPS / 1e3
    x = W.ring_attention_terms(hw, seq_len=L0, design="xdit", **ra)
    pk = W.ring_attention_terms(hw, seq_len=L0, design="pk", **ra)
    xdit_needed_us = 4.08 * pk_floor_us
    cfg = N.nccl_preset("h100")
    p2p_us = float(N.p2p_time_ns(cfg, kv)) / 1e3
    xd_us = float(x["total_ns"]) / 1e3
    out["ring_attention"] = {
        "L": L0, "kv_block_bytes": kv, "pk_link_floor_us": pk_floor_us, "ours_pk_us": float(pk["total_ns"]) / 1e3,
        "ours_xdit_us": xd_us, "xdit_us_needed_at_pk_floor": xdit_needed_us,
        "nccl_send_recv_us": p2p_us,
        "xdit_extra_per_step_us_needed": (xdit_needed_us - xd_us) / 8.0,
        "send_recv_gbps_if_transfers_were_all": 7 * kv / (xdit_needed_us * 1e3)}
    cross = []
    for L in range(12288, 24576 + 1, 768):
        cross.append({"L": L, "share": float(W.share_vs_compute_only(hw, "ring-attention", seq_len=L, **ra))})
    out["ring_attention"]["share_by_L"] = cross
    below = [c["L"] for c in cross if c["share"] <= 0.09]
    out["ring_attention"]["first_L_at_or_below_9pct"] = below[0] if below else None
    return out


def _dig_f(d, *keys):
    for k in keys:
        d = (d or {}).get(k)
    return None if d is None else float(d)


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
    out["size_probe"] = nuna_size_probe(hw)
    out["wall_s"] = time.time() - t0
    return out


def nuna_size_probe(hw, sizes=(8 * 4 * 2 ** 20, 8 * 48 * 2 ** 20), tbs=112):
    """A sense check of the Ring Attention row's UA / NAP+NAR < 1: the same All-Gather (ring and
    direct plans) at smaller buffers, 112 threadblocks per GPU (the 'best' count of the rows
    above), T_comm from the path model under each policy."""
    from nuna_jax import pk_nuna as PN
    rows = []
    for alg in ("ring", "direct"):
        for size in sizes:
            t = {p: PN.policy_comm_ns(hw.system, "allgather", size, p, alg, tbs)[0] for p in ("ua", "nap+nar")}
            rows.append({"algorithm": alg, "size_bytes": size, "ua_us": t["ua"] / 1e3,
                         "nap_nar_us": t["nap+nar"] / 1e3, "ua_over_nap_nar": t["ua"] / t["nap+nar"]})
    return {"collective": "allgather", "tbs_per_gpu": tbs, "rows": rows}


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
    d["paper_consistency"] = paper_consistency(d)
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
    pc = d["paper_consistency"]
    print(f"paper vs itself: sequential GEMM + collective <= {pc['cublas_nccl_ag_rs']['max_sequential_tflops']:.0f} "
          f"TFLOP/s (PK: 628, 602); Figs. 4+6 give cuBLAS+NCCL GEMM+AR "
          f"{pc['cublas_nccl_ar']['cublas_nccl_tflops_from_fig4_and_fig6']:.0f} (Fig. 9: 317); ring 4.08x needs xDiT "
          f">= {pc['ring_attention']['xdit_us_needed_at_pk_floor']:.0f} us at L = 768 (ours "
          f"{pc['ring_attention']['ours_xdit_us']:.0f}); ring share <= 9% from L = "
          f"{pc['ring_attention']['first_L_at_or_below_9pct']}")
    if args.nuna:
        nu = nuna_block()
        (data_dir / "pk_nuna.json").write_text(json.dumps(nu, indent=1, default=float))
        print(f"NUNA: GEMM+RS UA/NAP+NAR {nu['gemm+rs_N32768']['ratio']:.3f}, ring attention "
              f"{nu['ring_attention_L24576']['ratio']:.3f} ({nu['wall_s']:.0f} s)")
        for r in nu["size_probe"]["rows"]:
            print(f"  allgather {r['algorithm']} {r['size_bytes'] / 2 ** 20:.0f} MiB: UA {r['ua_us']:.1f} us, "
                  f"NAP+NAR {r['nap_nar_us']:.1f} us, UA / NAP+NAR {r['ua_over_nap_nar']:.3f}")


if __name__ == "__main__":
    main()
