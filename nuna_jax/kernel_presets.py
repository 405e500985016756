"""Hardware presets for the ParallelKittens kernel model, each field with its source.

``kernel_preset(name, **overrides) -> KernelHW``; names: ``h100``, ``h200``,
``b200``, ``nuna-table2``, ``h200-measured`` (needs a measurement file from
``benchmarks/h200_kernel_check.py``).  ``preset_sources(name)`` returns the
per-field sources.  PK = ParallelKittens, arXiv:2511.13940.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .models.kernel import KernelHW, _validate_hw

__all__ = ["kernel_preset", "kernel_preset_names", "preset_sources", "nuna_table2_hw",
           "measured_files", "H100", "B200"]

_PK = "PK (arXiv:2511.13940)"
_LAUNCH_SRC = ("not given by PK; 4 us is our round figure for a CUDA launch plus block "
               "setup (order of the ~2-5 us host launch latency usually quoted); it is "
               "< 0.1% of the Table 3 kernels")
_EFF_SRC = ("not given by PK; 0.75 of peak is our round figure for a sustained large bf16 "
            "GEMM on H100 SXM (cuBLAS-class ~740 TFLOP/s). Not fitted to Table 3; the "
            "h200-measured preset (same GH100 compute die) replaces it with a measurement")

H100 = dict(
    name="h100", n_sms=132.0, peak_flops_per_ns=989e3, gemm_eff=0.75, hbm_bw_bytes_per_ns=3350.0,
    link_bw_bytes_per_ns=450.0, ce_bw_bytes_per_ns=368.82, tma_bw_bytes_per_ns=350.01,
    reg_bw_bytes_per_ns=342.68, ce_msg80_bytes=256.0 * 2**20, tma_msg80_bytes=2.0 * 2**10,
    reg_msg80_bytes=128.0, tma_max_msg_bytes=227.0 * 2**10, tma_sat_sms=15.0, reg_sat_sms=76.0,
    sync_intra_ns=64.0, sync_inter_ns=832.0, launch_ns=4000.0, in_fabric_reduction=True,
    p2p_reduce_eff=0.847,
)
_H100_SRC = dict(
    n_sms="H100 SXM5: 132 SMs (NVIDIA datasheet)",
    peak_flops_per_ns=f"989 TFLOP/s dense bf16 ({_PK} 3.3 hiding condition, R = 989e12)",
    gemm_eff=_EFF_SRC,
    hbm_bw_bytes_per_ns="3.35 TB/s HBM3 (NVIDIA H100 SXM datasheet)",
    link_bw_bytes_per_ns=f"NVLink 4: 450 GB/s per direction ({_PK} 2.1, 3.3)",
    ce_bw_bytes_per_ns=f"368.82 GB/s, 82% of 450 ({_PK} 3.2, Fig. 2)",
    tma_bw_bytes_per_ns=f"350.01 GB/s, 78% ({_PK} 3.2, Fig. 2)",
    reg_bw_bytes_per_ns=f"342.68 GB/s, 76% ({_PK} 3.2, Fig. 2)",
    ce_msg80_bytes=f"80% of peak only from ~256 MB messages ({_PK} 3.2)",
    tma_msg80_bytes=f"near peak from ~2 KB ({_PK} 3.2); read as 80%",
    reg_msg80_bytes=f"efficient from 128 B ({_PK} Fig. 2); read as 80%",
    tma_max_msg_bytes=f"227 KB per TMA message ({_PK} 3.2)",
    tma_sat_sms=f"~15 SMs saturate NVLink with TMA ({_PK} 3.2)",
    reg_sat_sms=f"~76 SMs with register ld/st ({_PK} 3.2)",
    sync_intra_ns=f"~64 ns mbarrier ({_PK} 3.3)",
    sync_inter_ns=f"~832 ns through HBM ({_PK} 3.3)",
    launch_ns=_LAUNCH_SRC,
    in_fabric_reduction="NVSwitch 3 NVLS multimem.ld_reduce / multimem.red (PK 3.2)",
    p2p_reduce_eff=(f"CALIBRATED, one target: {_PK} Fig. 4 intra-SM GEMM+AR 172.3 TFLOP/s (N = 32768), "
                    "a kernel bound by atomic store_add into all peers; experiments/pk_calibrate_atomic.py "
                    "gives 0.8472 (294.8 GB/s per 64 KB tile against 348.0 for a plain TMA store). "
                    "PK attributes the K ~ 2048 residual to these atomic adds (3.3) but gives no bandwidth. "
                    "Not fitted to Table 3, whose rows are predictions"),
)

H200 = dict(H100, name="h200", hbm_bw_bytes_per_ns=4800.0)
_H200_SRC = dict(
    _H100_SRC,
    hbm_bw_bytes_per_ns="4.8 TB/s HBM3e (NVIDIA H200 SXM datasheet)",
    n_sms="H200 uses the H100 GH100 die: 132 SMs, 989 TFLOP/s bf16 dense",
    ce_bw_bytes_per_ns="assumed equal to H100 (same NVLink 4 / NVSwitch); PK measured H100 only",
    tma_bw_bytes_per_ns="assumed equal to H100 (same NVLink 4 / NVSwitch)",
    reg_bw_bytes_per_ns="assumed equal to H100 (same NVLink 4 / NVSwitch)",
)

B200 = dict(
    H100, name="b200", n_sms=148.0, peak_flops_per_ns=2.25e6, hbm_bw_bytes_per_ns=8000.0,
    link_bw_bytes_per_ns=900.0, ce_bw_bytes_per_ns=726.13, tma_bw_bytes_per_ns=669.12,
    reg_bw_bytes_per_ns=628.35, tma_sat_sms=669.12 / 45.7, reg_sat_sms=3.2 * 669.12 / 45.7,
)
_B200_SRC = dict(
    _H100_SRC,
    n_sms="B200: 148 SMs (NVIDIA Blackwell whitepaper)",
    peak_flops_per_ns="2.25 PFLOP/s dense bf16 (NVIDIA HGX B200 datasheet, 4.5 PF with sparsity)",
    hbm_bw_bytes_per_ns="8 TB/s HBM3e (NVIDIA B200 datasheet)",
    link_bw_bytes_per_ns=f"NVLink 5: 900 GB/s per direction ({_PK} 3.2)",
    ce_bw_bytes_per_ns=f"726.13 GB/s, 81% of 900 ({_PK} 3.2)",
    tma_bw_bytes_per_ns=f"669.12 GB/s, 74% ({_PK} 3.2)",
    reg_bw_bytes_per_ns=f"628.35 GB/s, 70% ({_PK} 3.2)",
    tma_sat_sms=f"669.12 / 45.7 GB/s per SM = 14.6 SMs ({_PK} 3.2: one SM ~45.7 GB/s on B200)",
    reg_sat_sms=(f"{_PK} 3.2: register ops need 3.2-5.1x TMA's SMs; H100's 76/15 = 5.1 is the top, "
                 "so we take 3.2x for B200 (inference, not a stated number)"),
    p2p_reduce_eff="H100's calibrated value carried over (assumption: no B200 atomic measurement in PK)",
)


def nuna_table2_hw(n_gpus: int = 8, **system_overrides) -> KernelHW:
    """The NUNA Table-2 socket (nuna_jax.presets preset "table2") as a KernelHW.

    T_comm comes from the NUNA collective model (``comm_model="nuna"``, see
    ``models.kernel.nuna_collective_ns``).  Compute, HBM and the scale-up
    link are the System's.  Per-CU issue bandwidth by Little's law:
    ``max_outstanding_per_cu * flit_bytes / RTT`` with ``RTT = 2 * (switch
    latency + cu_to_noc + mean CU->port mesh latency)``; ``tma_sat_sms`` is
    scale-up bandwidth over that.  No PK-style mechanism measurements exist
    for this socket: all three mechanisms get the nominal link bandwidth and
    H100's message-size curves (an assumption).
    """
    from .geometry import cu_router, port_router
    from .path import head_latency_ns
    from .presets import preset
    s = preset("table2", n_gpus=n_gpus, **system_overrides)
    cu = np.unique(cu_router(s))
    onchip = float(s.cu_to_noc_ns) + float(np.mean(head_latency_ns(s, cu[:, None], port_router(s)[None, :])))
    rtt = 2.0 * (float(s.switch_latency_ns) + onchip)
    per_cu = s.max_outstanding_per_cu * s.flit_bytes / rtt
    link = float(s.scaleup_bw_bytes_per_ns)
    sat = link / per_cu
    hw = KernelHW(
        name="nuna-table2", in_fabric_reduction=False, comm_model="nuna",
        n_sms=float(s.n_cus), peak_flops_per_ns=float(s.flops_bf16_per_ns), gemm_eff=0.75,
        hbm_bw_bytes_per_ns=float(s.hbm_total_bw_bytes_per_ns), link_bw_bytes_per_ns=link,
        ce_bw_bytes_per_ns=link, tma_bw_bytes_per_ns=link, reg_bw_bytes_per_ns=link,
        ce_msg80_bytes=H100["ce_msg80_bytes"], tma_msg80_bytes=H100["tma_msg80_bytes"],
        reg_msg80_bytes=H100["reg_msg80_bytes"], tma_max_msg_bytes=H100["tma_max_msg_bytes"],
        tma_sat_sms=sat, reg_sat_sms=sat * 76.0 / 15.0,
        sync_intra_ns=64.0, sync_inter_ns=832.0, launch_ns=4000.0, p2p_reduce_eff=1.0, system=s,
    )
    return _validate_hw(hw)


_NUNA_SRC = dict(
    n_sms="System.n_cus (NUNA Table 2: 24x6 mesh x 4 CUs = 576)",
    peak_flops_per_ns="System.flops_bf16_per_ns (25 PFLOP/s, NUNA Table 2)",
    gemm_eff=_EFF_SRC.replace("H100 SXM", "H100 SXM, carried over to the NUNA socket as an assumption"),
    hbm_bw_bytes_per_ns="System: 16 stacks x 2.5 TB/s = 40 TB/s (NUNA Table 2)",
    link_bw_bytes_per_ns="System.scaleup_bw: 144 ports x 50 GB/s = 7.2 TB/s (NUNA Table 2)",
    tma_bw_bytes_per_ns="= scale-up bandwidth (no measurement; T_comm is the NUNA model's anyway)",
    tma_sat_sms="scale-up bw / Little's-law per-CU bandwidth (700 outstanding x 256 B / RTT)",
    reg_sat_sms="tma_sat_sms x 76/15 (H100's register/TMA SM ratio, an assumption)",
    comm="T_comm from nuna_jax.models.collectives if present, else alpha-beta on the System",
    in_fabric_reduction="False: NUNA Table 2 does not state switch reduction",
    sync_intra_ns="H100 value (PK 3.3), an assumption", sync_inter_ns="H100 value (PK 3.3), an assumption",
    launch_ns=_LAUNCH_SRC,
    p2p_reduce_eff="1.0: no atomic-reduction measurement for this socket (T_comm is the NUNA model's)",
)

_REPO = Path(__file__).resolve().parents[1]


def measured_files() -> list[Path]:
    """H200 measurement files (``benchmarks/data/h200_*.json``), newest name last."""
    return sorted((_REPO / "benchmarks" / "data").glob("h200_*.json"))


def _h200_measured(path: str | Path | None = None) -> tuple[dict, dict]:
    files = [Path(path)] if path else measured_files()
    if not files or not files[-1].is_file():
        raise ValueError("preset 'h200-measured' needs benchmarks/data/h200_*.json; "
                         "run benchmarks/h200_kernel_check.py on an H200 first")
    data = json.loads(files[-1].read_text())
    fit = data["fit"]
    params = dict(H200, name="h200-measured")
    src = dict(_H200_SRC)
    params["gemm_eff"] = float(fit["gemm_eff"])
    src["gemm_eff"] = f"fit to measured bf16 matmuls ({files[-1].name}, {data.get('device')}, {data.get('date')})"
    if fit.get("hbm_bw_bytes_per_ns"):
        params["hbm_bw_bytes_per_ns"] = float(fit["hbm_bw_bytes_per_ns"])
        src["hbm_bw_bytes_per_ns"] = f"measured device copy, read+write bytes / time ({files[-1].name})"
    if fit.get("launch_ns"):
        params["launch_ns"] = float(fit["launch_ns"])
        src["launch_ns"] = f"fitted intercept of the GEMM timing model ({files[-1].name})"
    return params, src


_PRESETS = {"h100": (H100, _H100_SRC), "h200": (H200, _H200_SRC), "b200": (B200, _B200_SRC)}


def kernel_preset_names() -> list[str]:
    return sorted(list(_PRESETS) + ["nuna-table2", "h200-measured"])


def kernel_preset(name: str = "h100", n_gpus: int = 8, measured_path=None, **overrides) -> KernelHW:
    """A named KernelHW preset, optionally with field overrides (validated)."""
    key = str(name).lower()
    if key == "nuna-table2":
        hw = nuna_table2_hw(n_gpus)
        return hw.replace(**overrides) if overrides else hw
    if key == "h200-measured":
        params, _ = _h200_measured(measured_path)
    elif key in _PRESETS:
        params = dict(_PRESETS[key][0])
    else:
        raise ValueError(f"unknown kernel preset {name!r}; choose one of {', '.join(kernel_preset_names())}")
    params.update(overrides)
    fields = set(KernelHW.__dataclass_fields__)
    unknown = sorted(set(params) - fields)
    if unknown:
        raise ValueError(f"unknown KernelHW field(s): {', '.join(unknown)}")
    return _validate_hw(KernelHW(**params))


def preset_sources(name: str) -> dict:
    """Per-field source notes for a preset."""
    key = str(name).lower()
    if key == "nuna-table2":
        return dict(_NUNA_SRC)
    if key == "h200-measured":
        return _h200_measured()[1]
    if key not in _PRESETS:
        raise ValueError(f"unknown kernel preset {name!r}")
    return dict(_PRESETS[key][1])
