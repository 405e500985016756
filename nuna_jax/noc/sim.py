"""Drive the cycle loop the way BookSim2's ``sim_type = latency`` does (docs/noc.md).

``warmup_periods`` periods of ``sample_period`` cycles warm the network up (statistics cleared
at the start of every even warm-up period and at the end of the warm-up); then sample periods
run, every packet created in them being *measured* (and, as BookSim2 marks a packet when it
reaches the head of its source queue, every packet created while warming up that reaches it only
once the sample periods have begun), until the cumulative average packet latency
and accepted rate have each changed by less than ``stopping_threshold`` /
``acc_stopping_threshold`` three periods in a row, or ``max_samples`` periods in all have run;
then the network drains until every measured packet has arrived (traffic keeps flowing).  A
period whose average latency exceeds ``latency_thres`` ends the run as *unstable* (BookSim2:
"Simulation unstable"), reporting that period's numbers.  Packet latency runs from creation at
the source (source queueing included), network latency from the head's injection; hops count the
routers a packet's head crossed; the accepted flit rate is flits per node per cycle since the
last clear, up to the end of the drain.
"""

from __future__ import annotations

import math
import time

import numpy as np

from . import kernel as K
from .config import NocConfig, load_config

__all__ = ["simulate_noc", "zero_load_latency", "NocResult"]


def _dest_table(cfg: NocConfig) -> np.ndarray:
    k, n, N = cfg["k"], cfg["n"], cfg.nodes
    src = np.arange(N, dtype=np.int64)
    t = cfg["traffic"]
    lg = max(N.bit_length() - 1, 0)
    if t == "uniform":
        return src.copy()
    if t == "bitcomp":
        return (~src) & (N - 1)
    if t == "transpose":
        sh = lg // 2
        return ((src >> sh) | (src << sh)) & (N - 1)
    if t == "bitrev":
        out = np.zeros_like(src)
        for b in range(lg):
            out |= ((src >> b) & 1) << (lg - 1 - b)
        return out
    if t == "shuffle":
        return ((src << 1) & (N - 1)) | ((src >> (lg - 1)) & 1)
    digits = [(src // k ** d) % k for d in range(n)]
    if t == "tornado":
        shift = (k + 1) // 2 - 1
    else:  # neighbor
        shift = 1
    return sum(((dg + shift) % k) * k ** d for d, dg in enumerate(digits)).astype(np.int64)


def _topology(cfg: NocConfig):
    k, n, N = cfg["k"], cfg["n"], cfg.nodes
    P = 2 * n + 1
    nbr = -np.ones(N * P, np.int64)
    wrap = np.zeros(N * P, np.int64)
    torus = cfg["topology"] == "torus"
    for r in range(N):
        for d in range(n):
            x = (r // k ** d) % k
            for s, step in ((0, 1), (1, -1)):
                y = x + step
                w = 0
                if not 0 <= y < k:
                    if not torus:
                        continue
                    y %= k
                    w = 1
                nbr[r * P + 2 * d + s] = r + (y - x) * k ** d
                wrap[r * P + 2 * d + s] = w
    return nbr, wrap


def _zeros64(n: int) -> np.ndarray:
    """``n`` int64 zeros starting on a 64-byte boundary (a cache line: a VC's buffer of 8 slots, a row of 8
    fields, is one line instead of two)."""
    raw = np.zeros(n + 8, np.int64)
    off = (-raw.ctypes.data % 64) // 8
    return raw[off:off + n]


class NocResult(dict):
    """The run's numbers (plain floats / ints), as ``nuna-jax noc --json`` prints them."""


def _hops(cfg, s, d):
    """Links a dimension-order route crosses from node(s) ``s`` to ``d`` (numpy arrays or ints): per
    dimension the digit distance, on a torus the shorter way round."""
    k = cfg["k"]
    s, d = np.asarray(s, np.int64), np.asarray(d, np.int64)
    h = np.zeros(np.broadcast(s, d).shape, np.int64)
    for _ in range(cfg["n"]):
        x, y = s % k, d % k
        h += np.minimum((y - x) % k, (x - y) % k) if cfg["topology"] == "torus" else np.abs(y - x)
        s, d = s // k, d // k
    return h


def zero_load_latency(cfg: NocConfig) -> float:
    """The average packet latency in cycles with no contention, as the model computes it: a packet
    crossing ``h`` links (``h + 1`` routers) takes ``2 + (h + 1) * (routing_delay + vc_alloc_delay +
    sw_alloc_delay + 2) + packet_size - 1`` cycles; averaged over the traffic pattern's pairs
    (uniform: every destination, the source included, as BookSim2 draws them)."""
    per = cfg["routing_delay"] + cfg["vc_alloc_delay"] + cfg["sw_alloc_delay"] + 2
    N = cfg.nodes
    src = np.arange(N, dtype=np.int64)
    if cfg["traffic"] == "uniform":
        hs = _hops(cfg, src[:, None], src[None, :]).ravel()
    else:
        hs = _hops(cfg, src, _dest_table(cfg))
    return 2 + (float(np.mean(hs)) + 1) * per + cfg["packet_size"] - 1


def simulate_noc(cfg: NocConfig | None = None, *, path=None, overrides=(), seed: int | None = None,
                 max_cycles: int | None = None) -> NocResult:
    """Run one BookSim2-style latency simulation; ``seed`` overrides the file's ``seed``."""
    if cfg is None:
        cfg = load_config(path, overrides)
    t0 = time.perf_counter()
    k, n, N = cfg["k"], cfg["n"], cfg.nodes
    P, V, B, S, PS = 2 * n + 1, cfg["num_vcs"], cfg["vc_buf_size"], cfg["input_speedup"], cfg["packet_size"]
    nbr, wrap = _topology(cfg)
    coord = ((np.arange(N, dtype=np.int64)[:, None] // k ** np.arange(n, dtype=np.int64)) % k).ravel()
    dest = _dest_table(cfg)
    torus = cfg["topology"] == "torus"
    seed = int(cfg["seed"] if seed is None else seed)
    period = cfg["sample_period"]
    if max_cycles is None:
        max_cycles = cfg.max_cycles   # the configuration's work was checked against the limits when loaded
    # the injection queues and the packet table hold what an unstable run piles up before the
    # latency threshold stops it (overflow ends the run as unstable, as that threshold would)
    rate = cfg.packet_rate
    pile = rate * (2 * period + 4 * cfg["latency_thres"]) + 64
    qcap = int(min(max(256, pile), (1 << 22) // N))
    pcap = int(min(max(1 << 12, N * pile), 1 << 23))
    W = 1
    while W < cfg["sw_alloc_delay"] + cfg["credit_delay"] + 8:
        W *= 2
    prm = np.zeros(K.N_PARAMS, np.int64)
    prm[K.P_N], prm[K.P_K], prm[K.P_DIMS], prm[K.P_PORTS], prm[K.P_V], prm[K.P_B] = N, k, n, P, V, B
    prm[K.P_S], prm[K.P_PS], prm[K.P_RD], prm[K.P_VAD] = S, PS, cfg["routing_delay"], cfg["vc_alloc_delay"]
    prm[K.P_SAD], prm[K.P_CD], prm[K.P_WFTC] = cfg["sw_alloc_delay"], cfg["credit_delay"], cfg["wait_for_tail_credit"]
    prm[K.P_TORUS], prm[K.P_QCAP], prm[K.P_PCAP], prm[K.P_WHEEL] = int(torus), qcap, pcap, W
    prm[K.P_SEED], prm[K.P_UNIFORM] = seed, int(cfg["traffic"] == "uniform")
    NIV = N * P * V
    i64 = lambda m, fill=0: np.full(m, fill, np.int64)  # noqa: E731
    st = np.zeros(K.N_STATS, np.float64)
    pk = np.zeros(pcap * K.N_PK, np.int64)   # rows of K.N_PK fields, flat (constant strides in the loop)
    free_slots = np.arange(pcap, dtype=np.int64)
    src = [np.zeros((N, qcap), np.int64), i64(N), i64(N), i64(N), i64(N, -1), i64(N, V - 1),
           i64(N * V, B), i64(N * V), i64(N * V)]
    bq = _zeros64(NIV * B)
    ivs = np.zeros(NIV * K.N_IVS, np.int64)
    rows = ivs.reshape(NIV, K.N_IVS)
    rows[:, K.I_ROW] = np.arange(NIV) // V          # router * ports + input port
    rows[:, K.I_RTR] = np.arange(NIV) // (P * V)    # router
    ovs = np.zeros(NIV * K.N_OVS, np.int64)
    ovs[K.O_OWN::K.N_OVS] = -1
    ocr = i64(NIV, B)   # per output VC: its credits
    ofree = i64(N * P, -1 if V >= 64 else (1 << V) - 1)   # per router port: the mask of free output VCs
    # the routers' candidates: per router port, the mask of input VCs ready to ask for a VC (vam) / for the
    # switch (sam); per router, the mask of ports with any (rva, rsa); input VCs waiting for their ready
    # cycle are in the wake calendar (whead: a list per cycle slot, linked through wnext)
    vam, rva, sam, rsa = i64(N * P), i64(N), i64(N * P), i64(N)
    W2 = 1
    while W2 < max(cfg["sw_alloc_delay"] + cfg["routing_delay"], cfg["vc_alloc_delay"]) + 2:
        W2 *= 2
    whead, wnext = i64(W2, -1), i64(NIV, -1)
    ptrs = [i64(N * P), i64(N * P * S), i64(N * P * S)]
    wheel = np.zeros((W, N * P * S + N + 1), np.int64)
    wcnt = i64(W)
    aw, acnt = np.zeros((W, N * (P + 1), 2), np.int64), i64(W)   # a flit per link, source and sink a cycle
    scr = K.scratch(P, V, S)
    K.seed_rng(seed)

    def step(c, c1, mode):
        c2, status = K.run_cycles(c, c1, mode, rate, prm, nbr, wrap, coord, dest, st, pk, free_slots, *src,
                                  bq, vam, rva, sam, rsa, whead, wnext, ivs, ovs, ocr, ofree, *ptrs, wheel, wcnt, aw,
                                  acnt, scr)
        if status == 2:
            raise RuntimeError("noc kernel: a buffer overflowed (a bug)")
        return int(c2), status

    def clear(c):
        for j in (K.S_PKTS, K.S_PLAT, K.S_NLAT, K.S_HOPS, K.S_ACC_FLITS, K.S_PLAT_MAX):
            st[j] = 0.0
        st[K.S_PLAT_MIN] = math.inf
        return c

    def snapshot(c, reset):
        npk = st[K.S_PKTS]
        el = max(c - reset, 1)
        return {"packets": int(npk),
                "plat": st[K.S_PLAT] / npk if npk else math.nan,
                "nlat": st[K.S_NLAT] / npk if npk else math.nan,
                "hops": st[K.S_HOPS] / npk if npk else math.nan,
                "acc": st[K.S_ACC_FLITS] / (N * el),
                "plat_min": st[K.S_PLAT_MIN] if npk else math.nan, "plat_max": st[K.S_PLAT_MAX] if npk else math.nan}

    c = 0
    reset = clear(0)
    state = "warming_up"
    phases = converged = 0
    prev_lat = prev_acc = 0.0
    unstable = False
    last = None
    while phases < cfg["max_samples"] and (state != "running" or converged < 3):
        if state == "warming_up" and phases % 2 == 0:
            reset = clear(c)
        c, status = step(c, c + period, 0 if state == "warming_up" else 1)
        last = snapshot(c, reset)
        if status == 1:
            unstable = True
            break
        lat, acc = last["plat"], last["acc"]
        lat_change = abs((lat - prev_lat) / lat) if lat and not math.isnan(lat) else math.inf
        acc_change = abs((acc - prev_acc) / acc) if acc else math.inf
        prev_lat, prev_acc = lat, acc
        if not math.isnan(lat) and lat > cfg["latency_thres"]:
            unstable = True
            break
        if state == "warming_up":
            if phases + 1 >= cfg["warmup_periods"]:
                reset = clear(c)
                state = "running"   # the first sample period is compared with the last warm-up one (BookSim2)
        else:
            if lat_change < cfg["stopping_threshold"] and acc_change < cfg["acc_stopping_threshold"]:
                converged += 1
            else:
                converged = 0
        phases += 1
    if not unstable:
        if state != "running":  # max_samples ran out while warming up
            unstable = True
        else:
            drain_c, drain_acc = c, st[K.S_ACC_FLITS]   # BookSim2 counts accepted flits up to the drain
            while st[K.S_OUTSTANDING] > 0:
                c2, status = step(c, min(c + period, max_cycles), 2)
                if status == 1 or c2 >= max_cycles:
                    unstable = True
                    c = c2
                    break
                c = c2
            if not unstable:
                c = max(c, int(st[K.S_LAST_E]) + 1)
            last = snapshot(c, reset)
            last["acc"] = drain_acc / (N * max(drain_c - reset, 1))
    wall = time.perf_counter() - t0
    return NocResult(
        packet_latency_avg_cycles=last["plat"], network_latency_avg_cycles=last["nlat"],
        accepted_flit_rate=last["acc"], hops_avg=last["hops"], cycles=int(c), flit_hops=int(st[K.S_FLIT_HOPS]),
        wall_s=wall, packets_measured=last["packets"], packet_latency_min_cycles=last["plat_min"],
        packet_latency_max_cycles=last["plat_max"], unstable=bool(unstable), seed=seed,
        injection_rate=float(cfg["injection_rate"]), zero_load_latency_cycles=zero_load_latency(cfg),
        engine="numba" if K.HAVE_NUMBA else "python")
