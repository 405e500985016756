"""NCCL's collective cost model: Ring and Tree (and NVLS) with the LL, LL128 and Simple protocols.

This is the model NCCL's own tuner uses to pick an algorithm and a protocol for a collective of
``nBytes`` (``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime`` in NVIDIA/nccl
``src/graph/tuning.cc``), re-expressed here so that "cuBLAS + NCCL", ParallelKittens' baseline
(PK, arXiv:2511.13940, section 4), is a prediction:

    time_us(algo, proto) = lat_us(algo, proto) + nBytes / (1000 * algbw_GBps(algo, proto))

and NCCL runs the (algorithm, protocol) of the smallest time.  Units: the constants are NCCL's
(microseconds, GB/s = bytes/ns); the public functions return ns.

**Source.** Every tuning constant below is quoted from ``src/graph/tuning.cc`` of NVIDIA/nccl at
commit ``b6475625fbcaa2c3c0e50eed2fa1255d7514d4a2`` (the 2.19/2.20 generation: it has MNNVL, NVLS
and NVLS-Tree; the arrays are indexed Volta / Ampere / Hopper and a Blackwell GPU falls in the
Hopper row, ``compCapIndex = minCompCap >= 90 ? HOPPER``).  The name of the array in that file is
given beside each constant.  Only ``nNodes == 1`` (one NVSwitch box, the PK setting) is modelled:
the network terms (``hwLat[NET]``, ``latencyInter``, ``netOverhead``, the ring plateau factor)
are then unused.  PK ran NCCL 2.27.3 (PyTorch 2.8.0 pins ``nvidia-nccl-cu12==2.27.3``); the
single-node constants that differ in the 2.23+ tables (Tree/Simple latency, NVLS ``hwLat`` 25 us,
the Ring/LL cap) change none of the tuner's picks at PK's sizes (docs/kernel_model.md, "Which NCCL
PK ran").

**Inputs that are not tuning constants** (the topology NCCL's graph search finds, in
:class:`NcclConfig`): the number of channels and the per-channel bandwidth of the ring/tree graph
and of the NVLS graph, and which algorithms are enabled.  The presets (:func:`nccl_preset`) derive
them from the GPU's NVLink count and NCCL's per-link constant (``SM90_NVLINK_BW`` in
``src/graph/topo.h``), as stated in their ``sources``; nothing is fitted to a measurement.

What is not modelled: NCCL's reduction of channels/threads for small sizes
(``threadThresholds``: it lowers SM use, not the tuner's time), the tuner plugin, CollNet, PAT,
and ``numPipeOps`` aggregation (one collective per call here).  Point-to-point send/recv and
All-to-All are not timed by NCCL's tuner; :func:`p2p_time_ns` and :func:`alltoall_time_ns` are
our mapping onto one ring step of the same constants (docs/kernel_model.md, "NCCL").
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax.numpy as jnp
import numpy as np

__all__ = ["NcclConfig", "ALGORITHMS", "PROTOCOLS", "COLLS", "nccl_preset", "nccl_preset_names",
           "algo_bandwidth_gbps", "algo_latency_us", "algo_time_ns", "nccl_time_ns", "nccl_choose",
           "nccl_table", "p2p_time_ns", "alltoall_time_ns", "TUNING_SOURCE", "CONSTANT_SOURCES"]

TUNING_SOURCE = "NVIDIA/nccl src/graph/tuning.cc @ b6475625fbcaa2c3c0e50eed2fa1255d7514d4a2"

ALGORITHMS = ("tree", "ring", "nvls")
PROTOCOLS = ("ll", "ll128", "simple")
#: the collectives the tuner times, named as in the kernel model
COLLS = ("all-reduce", "all-gather", "reduce-scatter", "broadcast", "reduce")

# --------------------------------------------------------------------------- tuning.cc constants
#: ``baseLat[algo][proto]`` (us): Tree {LL, LL128, Simple}, Ring {...}; NVLS row is 0
BASE_LAT_US = {"tree": (6.8, 14.0, 0.0), "ring": (6.6, 14.0, 8.4), "nvls": (0.0, 0.0, 0.0)}
#: ``hwLat[NCCL_HW_NVLINK][algo][proto]`` (us); NVLS is Simple only
HW_LAT_NVLINK_US = {"tree": (0.6, 1.25, 28.0), "ring": (0.6, 1.9, 3.4), "nvls": (0.0, 0.0, 23.0)}
#: ``llMaxBws[index1][index2]`` (GB/s), single node: index1 = compCapIndex, index2 = nNodes-1 = 0
LL_MAX_BW = {"volta": 39.0, "ampere": 87.7, "hopper": 87.7}
#: ``perChMaxRingLL128Bws[compCapIndex][0]`` (GB/s per channel)
PER_CH_MAX_RING_LL128_BW = {"volta": 20.0, "ampere": 20.0, "hopper": 36.7}
#: ``perChMaxTreeLL128Bws[compCapIndex][0]`` (GB/s per channel)
PER_CH_MAX_TREE_LL128_BW = {"volta": 20.0, "ampere": 20.0, "hopper": 36.7}
#: ``perChMaxTreeBws[compCapIndex][0]`` (GB/s per channel)
PER_CH_MAX_TREE_BW = {"volta": 26.5, "ampere": 24.0, "hopper": 38.7}
#: ``treeCorrectionFactor[proto][log2i(nBytes >> 6)]``, powers of two from 64 B to 256 MB
TREE_CORRECTION = {
    "ll": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    "ll128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    "simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}
# "Various model refinements" of ncclTopoTuneModel (single node, ppn >= 2):
RING_LL_FACTOR_AR = 1.0 / 4.0      # Ring/LL busBw *= 1/4 for AllReduce and Reduce
RING_LL_FACTOR_OTHER = 1.0 / 3.0   # ... 1/3 for the others (nNodes == 1)
RING_LL128_FACTOR = 0.92           # Ring/LL128 busBw *= 0.92 (ppn >= 2) /*120.0/128.0*/
TREE_FACTOR = 0.92                 # Tree busBw *= .92
TREE_LL_FACTOR = 1.0 / 3.8         # Tree/LL busBw *= 1/3.8
TREE_LL128_FACTOR = 7.0 / 9.0      # Tree/LL128 busBw *= 7/9 (nNodes == 1)
NVLS_RATIO = 5.0 / 6.0             # NVLS: algBw = busBw * 5/6
TREE_RATIO = 0.5                   # Tree: algBw = busBw * .5

CONSTANT_SOURCES = {
    "BASE_LAT_US": f"baseLat ({TUNING_SOURCE})",
    "HW_LAT_NVLINK_US": f"hwLat[NCCL_HW_NVLINK] ({TUNING_SOURCE})",
    "LL_MAX_BW": f"llMaxBws, single-node column ({TUNING_SOURCE})",
    "PER_CH_MAX_RING_LL128_BW": f"perChMaxRingLL128Bws ({TUNING_SOURCE})",
    "PER_CH_MAX_TREE_LL128_BW": f"perChMaxTreeLL128Bws ({TUNING_SOURCE})",
    "PER_CH_MAX_TREE_BW": f"perChMaxTreeBws ({TUNING_SOURCE})",
    "TREE_CORRECTION": f"treeCorrectionFactor ({TUNING_SOURCE}, ncclTopoGetAlgoTime)",
    "factors": f"the 'Various model refinements' and 'Convert bus BW to algorithm BW' lines of "
               f"ncclTopoTuneModel ({TUNING_SOURCE})",
}


@dataclasses.dataclass(frozen=True)
class NcclConfig:
    """What NCCL's tuner knows about one communicator (single node).

    ``arch``: ``"volta" | "ampere" | "hopper"`` (the tuning tables' row; Blackwell uses Hopper's
    in the cited version).  ``n_ranks``: GPUs.  ``ring_channels`` x ``ring_bw_gbps``: the ring
    (and tree) graph, per-channel bandwidth GB/s (``graphs[a]->nChannels``, ``bwIntra``).
    ``nvls_channels`` x ``nvls_bw_gbps``: the NVLS graph (``min(bwIntra, bwInter)``).
    ``algorithms``: which are enabled (NVLS needs an NVSwitch with multicast, H100 and later).
    ``ll128``: LL128 enabled (NCCL enables it on NVLink for Volta/Ampere/Hopper).
    ``kernel_sms``: SMs NCCL's kernel occupies (default: one per ring channel).  ``sources``:
    where each topology number comes from.
    """

    name: str = "custom"
    arch: str = "hopper"
    n_ranks: int = 8
    ring_channels: int = 12
    ring_bw_gbps: float = 30.0
    nvls_channels: int = 8
    nvls_bw_gbps: float = 40.0
    algorithms: tuple = ("tree", "ring", "nvls")
    ll128: bool = True
    kernel_sms: Any = None
    sources: Any = None

    @property
    def sms(self) -> int:
        """SMs NCCL's kernel holds while it runs: one CTA per channel (``kernel_sms`` if set, else
        ``ring_channels``).  Used where an NCCL kernel runs beside a compute kernel (xDiT)."""
        return int(self.ring_channels if self.kernel_sms is None else self.kernel_sms)

    def __post_init__(self):
        if self.arch not in LL_MAX_BW:
            raise ValueError(f"NcclConfig.arch must be one of {tuple(LL_MAX_BW)}, got {self.arch!r}")
        if not isinstance(self.n_ranks, (int, np.integer)) or self.n_ranks < 2:
            raise ValueError(f"NcclConfig.n_ranks must be an integer >= 2, got {self.n_ranks!r}")
        for k in ("ring_channels", "nvls_channels"):
            v = getattr(self, k)
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"NcclConfig.{k} must be an integer >= 1, got {v!r}")
        for k in ("ring_bw_gbps", "nvls_bw_gbps"):
            v = getattr(self, k)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"NcclConfig.{k} must be positive and finite (GB/s), got {v!r}")
        bad = [a for a in self.algorithms if a not in ALGORITHMS]
        if bad or not self.algorithms:
            raise ValueError(f"NcclConfig.algorithms must be a non-empty subset of {ALGORITHMS}, got {self.algorithms!r}")

    def replace(self, **kw) -> "NcclConfig":
        return dataclasses.replace(self, **kw)


# --------------------------------------------------------------------------- presets
_H100_LINKS = 18         # H100 SXM5: 18 NVLink-4 links to the NVSwitches (NVIDIA datasheet)
_SM90_NVLINK_BW = 20.0   # GB/s per link, topo.h SM90_NVLINK_BW in the 2.19 generation (20.6 later)
_SM100_NVLINK_BW = 40.0  # GB/s per link, topo.h SM100_NVLINK_BW (40.0-40.1 by version)


def _box(name, n_ranks, per_link, arch="hopper", **kw):
    total = _H100_LINKS * per_link
    # the ring graph carries the GPU's whole NVLink aggregate: nChannels x bw = total
    # (H100: 12 search channels x 30 GB/s = 360, the ring graph an NCCL 2.19 H100 GRAPH dump prints)
    ring_ch, ring_bw = (12, total / 12)
    # NVLS: one head per GPU; bw = the largest entry of NCCL's intra speed array
    # (search.cc sm90SpeedArrayIntra = {60, 50, 40, 30, ...}; sm100: {90, 80, ...}) with
    # n_heads x bw <= the GPU's aggregate
    speeds = (90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0) if per_link > 30 else (60.0, 50.0, 40.0, 30.0, 24.0, 20.0)
    heads = min(int(n_ranks), 8)
    nvls_bw = next(s for s in speeds if heads * s <= total + 1e-9)
    src = {
        "ring_channels x ring_bw_gbps": f"{ring_ch} x {ring_bw:g} = {total:g} GB/s = {_H100_LINKS} NVLinks x "
                                        f"{per_link:g} GB/s (topo.h SM{'100' if per_link > 30 else '90'}_NVLINK_BW); "
                                        "the ring graph uses the whole aggregate",
        "nvls_channels x nvls_bw_gbps": f"{heads} heads x {nvls_bw:g} GB/s: the largest search.cc intra speed with "
                                        f"heads x speed <= {total:g}",
        "arch": "tuning.cc tables: Hopper row (minCompCap >= 90)",
    }
    return NcclConfig(name=name, arch=arch, n_ranks=int(n_ranks), ring_channels=ring_ch, ring_bw_gbps=ring_bw,
                      nvls_channels=heads, nvls_bw_gbps=nvls_bw, sources=src, **kw)


def nccl_preset_names() -> list[str]:
    return ["b200", "h100", "h200"]


def nccl_preset(name: str = "h100", n_ranks: int = 8, **overrides) -> NcclConfig:
    """NCCL's view of an 8-GPU NVSwitch box: ``h100`` / ``h200`` (NVLink 4, 18 links, Hopper
    tables) or ``b200`` (NVLink 5, 18 links at twice the rate; the cited NCCL version has no
    Blackwell tables, so Hopper's are used -- an extrapolation).  ``h200-measured`` maps to h200."""
    key = str(name).lower()
    if key == "h200-measured":
        key = "h200"
    if key in ("h100", "h200"):
        cfg = _box(key, n_ranks, _SM90_NVLINK_BW)
    elif key == "b200":
        cfg = _box(key, n_ranks, _SM100_NVLINK_BW)
    else:
        raise ValueError(f"no NCCL preset for system {name!r}; NCCL presets: {', '.join(nccl_preset_names())} "
                         "(the NUNA socket has no NCCL: use the NUNA path model)")
    return cfg.replace(**overrides) if overrides else cfg


# --------------------------------------------------------------------------- the tuner
def _coll(coll: str) -> str:
    c = str(coll).lower().replace("_", "-")
    c = {"allreduce": "all-reduce", "allgather": "all-gather", "reducescatter": "reduce-scatter"}.get(c, c)
    if c not in COLLS:
        raise ValueError(f"NCCL collective must be one of {COLLS}, got {coll!r}")
    return c


def _nsteps(coll: str, n: int) -> int:
    """``nsteps`` of ncclTopoTuneModel: 2(n-1) for AllReduce, n-1 for AG/RS, n otherwise."""
    return 2 * (n - 1) if coll == "all-reduce" else (n - 1 if coll in ("all-gather", "reduce-scatter") else n)


def _supported(cfg: NcclConfig, coll: str, algo: str, proto: str) -> bool:
    if algo not in cfg.algorithms:
        return False
    if algo == "nvls" and proto != "simple":
        return False                          # NVLS: Simple only
    if algo == "tree" and coll != "all-reduce":
        return False                          # Tree: AllReduce only
    if algo == "nvls" and coll not in ("all-reduce", "all-gather", "reduce-scatter"):
        return False
    if proto == "ll128" and not cfg.ll128:
        return False
    return True


def algo_bandwidth_gbps(cfg: NcclConfig, coll: str, algo: str, proto: str) -> float:
    """Algorithm bandwidth (GB/s = bytes/ns) NCCL's tuner assigns, 0 if unsupported
    (``comm->bandwidths[coll][algo][proto]``, single node)."""
    coll = _coll(coll)
    if not _supported(cfg, coll, algo, proto):
        return 0.0
    n = cfg.n_ranks
    if algo == "nvls":
        bus = cfg.nvls_channels * cfg.nvls_bw_gbps
        return bus * NVLS_RATIO
    nch = cfg.ring_channels
    bus = nch * cfg.ring_bw_gbps
    if algo == "ring":
        if proto == "ll":
            f = RING_LL_FACTOR_AR if coll in ("all-reduce", "reduce") else RING_LL_FACTOR_OTHER
            bus = min(LL_MAX_BW[cfg.arch], bus * f)
        elif proto == "ll128":
            bus = min(bus * RING_LL128_FACTOR, nch * PER_CH_MAX_RING_LL128_BW[cfg.arch])
        return bus * n / _nsteps(coll, n)
    # tree
    bus = min(bus * TREE_FACTOR, nch * PER_CH_MAX_TREE_BW[cfg.arch])
    if proto == "ll":
        bus = min(bus * TREE_LL_FACTOR, LL_MAX_BW[cfg.arch])
    elif proto == "ll128":
        bus = min(bus * TREE_LL128_FACTOR, nch * PER_CH_MAX_TREE_LL128_BW[cfg.arch])
    return bus * TREE_RATIO


def algo_latency_us(cfg: NcclConfig, coll: str, algo: str, proto: str) -> float:
    """Latency (us) of ``comm->latencies[coll][algo][proto]``, single node: Ring
    ``baseLat + nsteps * hwLat`` (``baseLat + hwLat`` for Broadcast/Reduce on same channels),
    Tree ``baseLat + 2 (n - 1) hwLat``, NVLS ``hwLat`` alone."""
    coll = _coll(coll)
    p = PROTOCOLS.index(proto)
    hw = HW_LAT_NVLINK_US[algo][p]
    if algo == "nvls":
        return hw
    base = BASE_LAT_US[algo][p]
    n = cfg.n_ranks
    if algo == "ring":
        if coll in ("broadcast", "reduce"):
            return base + hw
        return base + _nsteps(coll, n) * hw
    return base + 2 * (n - 1) * hw


def _tree_correction(proto: str, n_bytes):
    """``treeCorrectionFactor[proto][log2i(nBytes >> 6)]`` (1 at and above 2^23 x 64 B)."""
    tab = jnp.asarray(TREE_CORRECTION[proto] + (1.0,), jnp.float32)
    units = jnp.floor(jnp.asarray(n_bytes, jnp.float32) / 64.0)
    log = jnp.floor(jnp.log2(jnp.maximum(units, 1.0)))
    idx = jnp.clip(log, 0, len(TREE_CORRECTION[proto])).astype(jnp.int32)
    return tab[idx]


def algo_time_ns(cfg: NcclConfig, coll: str, algo: str, proto: str, n_bytes):
    """``ncclTopoGetAlgoTime``: ``lat + nBytes / (1000 bw)`` us, returned in ns (``inf`` where
    unsupported).  ``n_bytes`` is NCCL's ``nBytes``: the buffer for AllReduce, the gathered
    output for AllGather, the full input for ReduceScatter (count x nRanks).  Array-valued."""
    bw = algo_bandwidth_gbps(cfg, coll, algo, proto)
    nb = jnp.asarray(n_bytes, jnp.float32)
    if bw == 0.0:
        return jnp.full(jnp.shape(nb), jnp.inf, jnp.float32)
    if algo == "tree":
        bw = bw * _tree_correction(proto, nb)
    return 1000.0 * algo_latency_us(cfg, coll, algo, proto) + nb / bw


def _candidates(cfg, coll):
    return [(a, p) for a in ALGORITHMS for p in PROTOCOLS if _supported(cfg, _coll(coll), a, p)]


def nccl_time_ns(cfg: NcclConfig, coll: str, n_bytes):
    """Time (ns) of the (algorithm, protocol) NCCL's tuner picks: the minimum of
    :func:`algo_time_ns` over the enabled pairs.  jit / vmap / grad (a.e.) over ``n_bytes``."""
    ts = jnp.stack([algo_time_ns(cfg, coll, a, p, n_bytes) for a, p in _candidates(cfg, coll)])
    return jnp.min(ts, axis=0)


def _check_bytes(n_bytes):
    a = np.asarray(n_bytes, dtype=float)
    if not np.all(np.isfinite(a)) or np.any(a <= 0):
        raise ValueError(f"n_bytes must be positive and finite, got {n_bytes!r}")
    return a


def nccl_choose(cfg: NcclConfig, coll: str, n_bytes) -> dict:
    """The tuner's choice for one concrete size: ``algorithm``, ``protocol``, ``time_ns``,
    ``latency_ns``, ``bandwidth_gbps`` (algorithm bandwidth, tree-corrected) and ``all`` (every
    enabled pair's time, ns)."""
    nb = float(_check_bytes(n_bytes))
    allt = {f"{a}/{p}": float(algo_time_ns(cfg, coll, a, p, nb)) for a, p in _candidates(cfg, coll)}
    best = min(allt, key=allt.get)
    a, p = best.split("/")
    lat = 1000.0 * algo_latency_us(cfg, coll, a, p)
    return {"algorithm": a, "protocol": p, "time_ns": allt[best], "latency_ns": lat,
            "bandwidth_gbps": nb / (allt[best] - lat), "all": allt}


def nccl_table(cfg: NcclConfig, coll: str) -> dict:
    """``{"algo/proto": (latency_us, algbw_GBps)}`` as NCCL prints under NCCL_DEBUG=TUNING."""
    return {f"{a}/{p}": (algo_latency_us(cfg, coll, a, p), algo_bandwidth_gbps(cfg, coll, a, p))
            for a, p in _candidates(cfg, coll)}


# --------------------------------------------------------------------------- p2p and all-to-all
def _p2p_parts(cfg: NcclConfig, proto: str):
    """(latency us, bus bandwidth GB/s) of one ring step with protocol ``proto`` (LL or Simple):
    ``baseLat[ring] + hwLat[ring]`` and the ring bus bandwidth with the non-AllReduce LL factor."""
    p = PROTOCOLS.index(proto)
    lat = BASE_LAT_US["ring"][p] + HW_LAT_NVLINK_US["ring"][p]
    bus = cfg.ring_channels * cfg.ring_bw_gbps
    if proto == "ll":
        bus = min(LL_MAX_BW[cfg.arch], bus * RING_LL_FACTOR_OTHER)
    return lat, bus


def p2p_time_ns(cfg: NcclConfig, n_bytes):
    """NCCL send/recv of ``n_bytes`` with one peer (ns): our mapping onto one ring step of the
    tuner's constants (NCCL's tuner does not time p2p), the faster of LL and Simple (NCCL's p2p
    protocols).  ``lat + n / busBw``."""
    nb = jnp.asarray(n_bytes, jnp.float32)
    ts = []
    for proto in ("ll", "simple"):
        lat, bus = _p2p_parts(cfg, proto)
        ts.append(1000.0 * lat + nb / bus)
    return jnp.minimum(*ts)


def alltoall_time_ns(cfg: NcclConfig, n_bytes):
    """NCCL All-to-All of a send buffer of ``n_bytes`` per GPU (ns): grouped send/recv to all
    ``n-1`` peers at once, so one p2p latency and the ``(n-1)/n`` that leaves the GPU at the ring
    bus bandwidth (our mapping, as :func:`p2p_time_ns`)."""
    n = cfg.n_ranks
    nb = jnp.asarray(n_bytes, jnp.float32)
    ts = []
    for proto in ("ll", "simple"):
        lat, bus = _p2p_parts(cfg, proto)
        ts.append(1000.0 * lat + (n - 1) / n * nb / bus)
    return jnp.minimum(*ts)
