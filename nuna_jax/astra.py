"""Read an ASTRA-sim analytical network configuration as a closed-form system.

ASTRA-sim (the simulator NUNA section 5.1 uses) describes its analytical
network in a small YAML file, one entry per dimension::

    topology: [ Ring, FullyConnected, Switch ]
    npus_count: [ 2, 8, 4 ]      # NPUs per dimension (total = product)
    bandwidth: [ 200.0, 100.0, 50.0 ]   # GB/s per link
    latency: [ 50.0, 500.0, 2000.0 ]    # ns per link

Semantics we follow (ASTRA-sim's analytical backend, astra-network-analytical):

* ``GB/s`` means 2^30 bytes per second: ``bytes/ns = GBps * 2^30 / 1e9``.
* one message of ``m`` bytes over ``h`` hops costs ``h * latency + m / bandwidth``
  (latency per hop, serialization once).
* hops: ``Switch`` 2 (NPU -> switch -> NPU), ``FullyConnected`` 1, ``Ring``
  (bidirectional) the shorter way round: 1 between neighbours.
* a collective over several dimensions is hierarchical, dimension by
  dimension: Reduce-Scatter over dims 0, 1, ... with the data shrinking by
  ``p_d`` each time; All-Gather the mirror image; All-Reduce =
  Reduce-Scatter then All-Gather; All-to-All runs the whole buffer over each
  dimension in turn.
* the algorithm per dimension defaults to the one that fits its topology:
  ``Ring`` -> ring, ``FullyConnected`` -> direct, ``Switch`` -> recursive
  (halving-doubling); ``algorithm=`` forces one for all dimensions.

Where we depart (docs/analytical.md, "ASTRA-sim"): we count link capacity
per NPU -- a FullyConnected NPU has ``p - 1`` links, a Switch NPU one link to
the switch, a Ring NPU two (one per direction; the ring algorithm uses one),
so concurrent messages of a direct exchange share their NPU's links, as in
ASTRA-sim's congestion-aware backend, not its congestion-unaware one.  The
file has no reduction cost, so gamma = 0.  Only the four keys above are read;
any other key is an error (so a typo is not silently ignored).

Reading is PyYAML's ``safe_load`` (no tags that construct objects); every
number is checked before use: counts are integers in ``[1, MAX_NPUS_PER_DIM]``
whose product (exact, Python integers) is at most ``MAX_NPUS``, bandwidths
and latencies finite and within :data:`BANDWIDTH_RANGE_GBPS` /
:data:`LATENCY_RANGE_NS`, so no result can overflow to infinity.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import numpy as np

from .models.collectives import ALGORITHMS, COLLECTIVES, algorithm_code, collective_code, cost_ns

__all__ = ["AstraNetwork", "TOPOLOGIES", "parse_network", "load_network", "gbps_to_bytes_per_ns",
           "dim_parameters", "collective_time_ns", "BACKENDS", "send_time_ns", "backend_collective_ns"]

TOPOLOGIES = ("Ring", "FullyConnected", "Switch")
_KEYS = ("topology", "npus_count", "bandwidth", "latency")
_DEFAULT_ALG = {"Ring": "ring", "FullyConnected": "direct", "Switch": "recursive"}
#: Accepted ranges (inclusive): link GB/s, link latency ns, NPUs per dimension / in all, dimensions.
BANDWIDTH_RANGE_GBPS = (1e-6, 1e9)
LATENCY_RANGE_NS = (0.0, 1e12)
MAX_NPUS_PER_DIM = 1 << 20
MAX_NPUS = 1 << 20
MAX_DIMS = 64


def gbps_to_bytes_per_ns(gbps):
    """ASTRA-sim's GB/s (2^30 B/s) to bytes/ns."""
    return np.asarray(gbps, dtype=np.float64) * 2**30 / 1e9


@dataclasses.dataclass(frozen=True)
class AstraNetwork:
    """One ASTRA-sim analytical network: per-dimension topology, NPUs, link GB/s, link ns."""

    topology: tuple
    npus_count: tuple
    bandwidth_GBps: tuple
    latency_ns: tuple

    @property
    def n_dims(self) -> int:
        return len(self.topology)

    @property
    def n_npus(self) -> int:
        return math.prod(int(p) for p in self.npus_count)

    def describe(self) -> dict:
        return {"topology": list(self.topology), "npus_count": list(self.npus_count),
                "bandwidth_GBps": list(self.bandwidth_GBps), "latency_ns": list(self.latency_ns),
                "n_npus": self.n_npus}


def _load_yaml(text: str, source: str) -> dict:
    import yaml
    try:
        d = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = getattr(e, "problem", None) or type(e).__name__
        raise ValueError(f"{source}: invalid YAML{where}: {what}") from None
    except RecursionError:
        raise ValueError(f"{source}: invalid YAML: nested too deeply") from None
    if not isinstance(d, dict):
        raise ValueError(f"{source}: expected a mapping of {', '.join(_KEYS)}, got {type(d).__name__}")
    return d


_NUMBER = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


def _plain(v):
    """A YAML 1.2 number that PyYAML (YAML 1.1) left a string, such as ``1e3``, as a number."""
    if isinstance(v, str) and len(v) <= 40 and _NUMBER.fullmatch(v.strip()):
        t = v.strip()
        return float(t) if re.search(r"[.eE]", t) else int(t)
    return v


def _number(v, key: str, lo: float, hi: float, source: str) -> float:
    rng = f"numbers in [{lo:g}, {hi:g}]"
    v = _plain(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{source}: {key} entries must be {rng}, got {str(v)[:40]!r}")
    try:
        f = float(v)
    except OverflowError:
        f = math.inf
    if not (math.isfinite(f) and lo <= f <= hi):
        raise ValueError(f"{source}: {key} entries must be {rng}, got {str(v)[:40]}")
    return f


def parse_network(text: str, source: str = "<string>") -> AstraNetwork:
    """Parse and validate the text of an ASTRA-sim network YAML; ``ValueError`` names the bad key."""
    d = _load_yaml(text, source)
    unknown = sorted(str(k) for k in set(d) - set(_KEYS))
    if unknown:
        raise ValueError(f"{source}: unknown key(s) {', '.join(unknown)[:200]}; an ASTRA-sim analytical network "
                         f"has {', '.join(_KEYS)}")
    missing = [k for k in _KEYS if k not in d]
    if missing:
        raise ValueError(f"{source}: missing key(s) {', '.join(missing)}")
    vals = {k: d[k] if isinstance(d[k], list) else [d[k]] for k in _KEYS}
    n = len(vals["topology"])
    if n == 0 or n > MAX_DIMS:
        raise ValueError(f"{source}: topology must list 1 .. {MAX_DIMS} dimensions, got {n}")
    for k in _KEYS:
        if len(vals[k]) != n:
            raise ValueError(f"{source}: {k} has {len(vals[k])} entries but topology has {n} dimensions")
    topo = []
    for t in vals["topology"]:
        match = [x for x in TOPOLOGIES if isinstance(t, str) and x.lower() == t.lower()]
        if not match:
            raise ValueError(f"{source}: topology {str(t)[:40]!r} is not one of {', '.join(TOPOLOGIES)}")
        topo.append(match[0])
    npus = []
    total = 1
    for v in vals["npus_count"]:
        v = _plain(v)
        ok = isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_NPUS_PER_DIM
        if isinstance(v, float) and math.isfinite(v) and v.is_integer() and 1 <= v <= MAX_NPUS_PER_DIM:
            ok = True
        if not ok:
            raise ValueError(f"{source}: npus_count entries must be integers in [1, {MAX_NPUS_PER_DIM}], "
                             f"got {str(v)[:40]}")
        npus.append(int(v))
        total *= int(v)
        if total > MAX_NPUS:
            raise ValueError(f"{source}: npus_count {npus}... multiplies to more than {MAX_NPUS} NPUs")
    bw = tuple(_number(v, "bandwidth", *BANDWIDTH_RANGE_GBPS, source) for v in vals["bandwidth"])
    lat = tuple(_number(v, "latency", *LATENCY_RANGE_NS, source) for v in vals["latency"])
    return AstraNetwork(tuple(topo), tuple(npus), bw, lat)


def load_network(path) -> AstraNetwork:
    """Read an ASTRA-sim network YAML file."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"network file {str(p)!r} does not exist")
    if not p.is_file():
        raise ValueError(f"network file {str(p)!r} is not a regular file")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{p}: not UTF-8 text (byte {e.start})") from None
    return parse_network(text, str(p))


def _hops(topology: str, p: int, alg: int) -> int:
    if topology == "Switch":
        return 2
    if topology == "FullyConnected":
        return 1
    # bidirectional ring: neighbours for the ring algorithm, else the farthest peer
    return 1 if alg == algorithm_code("ring") else max(1, p // 2)


def _links(topology: str, p: int, alg: int) -> int:
    if topology == "FullyConnected":
        return max(1, p - 1) if alg == algorithm_code("direct") else 1
    if topology == "Switch":
        return 1
    return 1 if alg == algorithm_code("ring") else 2


def dim_parameters(net: AstraNetwork, algorithm=None) -> list[dict]:
    """Per dimension: ``p``, ``algorithm``, ``alpha_ns`` (= hops * latency),
    ``beta_ns_per_byte`` (= 1 / (links per NPU * link bytes/ns))."""
    out = []
    for topo, p, bw, lat in zip(net.topology, net.npus_count, net.bandwidth_GBps, net.latency_ns):
        alg = algorithm_code(algorithm if algorithm is not None else _DEFAULT_ALG[topo])
        hops = _hops(topo, p, alg)
        links = _links(topo, p, alg)
        out.append({"topology": topo, "p": p, "algorithm": ALGORITHMS[alg], "hops": hops, "links": links,
                    "alpha_ns": hops * lat, "beta_ns_per_byte": 1.0 / (links * float(gbps_to_bytes_per_ns(bw)))})
    return out


def collective_time_ns(net: AstraNetwork, collective, size_bytes, algorithm=None) -> dict:
    """Closed-form time of a collective on an ASTRA-sim network, hierarchical over dimensions.

    ``size_bytes`` follows the module ``collectives`` convention (gathered
    output for All-Gather, the vector for Reduce-Scatter / All-Reduce, the
    send buffer for All-to-All).  Returns ``{"time_ns", "dims": [...]}`` with
    each dimension's share.
    """
    c = collective_code(collective)
    n = float(size_bytes)
    if n <= 0:
        raise ValueError(f"size must be > 0 bytes, got {size_bytes}")
    if algorithm is not None and algorithm_code(algorithm) == algorithm_code("tree") and c != 2:
        raise ValueError("the tree algorithm exists for all_reduce only")
    dims = dim_parameters(net, algorithm)
    total = 0.0
    shrink = 1.0
    rows = []
    for d in dims:
        nd = n if c == collective_code("all_to_all") else n / shrink
        k = algorithm_code(d["algorithm"])
        a, b = d["alpha_ns"], d["beta_ns_per_byte"]
        if c == collective_code("all_reduce") and k != algorithm_code("tree"):
            # Reduce-Scatter on the way down plus All-Gather on the way back
            tk = float(cost_ns(1, k, d["p"], nd, a, b, 0.0)) + float(cost_ns(0, k, d["p"], nd, a, b, 0.0))
        else:
            tk = float(cost_ns(c, k, d["p"], nd, a, b, 0.0))
        rows.append({**d, "size_bytes": nd, "time_ns": tk})
        total += tk
        shrink *= d["p"]
    return {"collective": COLLECTIVES[c], "size_bytes": n, "n_npus": net.n_npus, "time_ns": total, "dims": rows}


# ====================================================================================================
# ASTRA-sim's two analytical network backends, exactly (astra-network-analytical)
#
# congestion_unaware (``BasicTopology::send``): a message of ``m`` bytes between two NPUs of one
#   basic topology takes ``(uint64)(hops * latency + m / bw)`` ns, ``bw`` in bytes/ns =
#   ``GBps * 2^30 / 10^9``; hops: Ring the shorter way round (bidirectional), FullyConnected 1,
#   Switch 2.  On a multi-dimensional network (``MultiDimTopology::send``) only the *first*
#   dimension in which the two addresses differ is charged (address: NPU id in mixed radix,
#   dimension 0 fastest).  Concurrent messages never interact.
# congestion_aware: every NPU (and every Switch's switch device) is a device, every link a FIFO
#   queue.  A chunk is sent whole over each link of its route in turn (store and forward): the
#   link is busy for ``(uint64)(m / bw)`` ns and the chunk reaches the next device after
#   ``(uint64)(latency + m / bw)`` ns; a chunk that finds the link busy waits in first-come order.
#   Routes: Ring the shorter way (clockwise on a tie), FullyConnected the direct link, Switch
#   NPU -> switch -> NPU; across dimensions, dimension 0 first (``MultiDimTopology::route``).
#   Events of one time run in the order they were scheduled (ASTRA-sim's EventQueue).
# ====================================================================================================

BACKENDS = ("unaware", "aware")


def _bytes_per_ns(gbps: float) -> float:
    """``bw_GBps_to_Bpns``, in the same floating-point order as ASTRA-sim (``bw * 2^30 / 1e9``)."""
    return float(gbps) * (1 << 30) / 1_000_000_000


def _address(net: AstraNetwork, npu: int) -> list[int]:
    out = []
    for p in net.npus_count:
        out.append(npu % p)
        npu //= p
    return out


def _check_npu(net: AstraNetwork, x, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not 0 <= int(x) < net.n_npus:
        raise ValueError(f"{what} NPU must be an integer in [0, {net.n_npus - 1}], got {x!r}")
    return int(x)


def _check_size(size) -> int:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer, float)) or not float(size) >= 1 \
            or not float(size) <= 2**62 or float(size) != int(size):
        raise ValueError(f"message size must be a whole number of bytes in [1, 2^62], got {size!r}")
    return int(size)


def _hop_count(topology: str, p: int, a: int, b: int) -> int:
    if topology == "Switch":
        return 2
    if topology == "FullyConnected":
        return 1
    cw = (b - a) % p
    return min(cw, p - cw)


def _unaware_ns(topology: str, p: int, a: int, b: int, size: int, bw_gbps: float, lat_ns: float) -> int:
    return int(_hop_count(topology, p, a, b) * lat_ns + float(size) / _bytes_per_ns(bw_gbps))


def _local_route(topology: str, p: int, a: int, b: int) -> list:
    """Devices of one basic topology's route from ``a`` to ``b`` (the switch is device ``"sw"``)."""
    if topology == "Switch":
        return [a, "sw", b]
    if topology == "FullyConnected":
        return [a, b]
    cw = (b - a) % p
    step = -1 if p - cw < cw else 1
    out, x = [a], a
    while x != b:
        x = (x + step) % p
        out.append(x)
    return out


def _route_links(net: AstraNetwork, src: int, dst: int) -> list:
    """The links of ASTRA-sim's congestion-aware route, dimension 0 first: ``(dim, group, from, to)``
    with ``group`` the address without that dimension (each basic topology has its own links)."""
    cur, goal = _address(net, src), _address(net, dst)
    links = []
    for d, topo in enumerate(net.topology):
        if cur[d] == goal[d]:
            continue
        group = tuple(cur[:d] + cur[d + 1:])
        dev = _local_route(topo, net.npus_count[d], cur[d], goal[d])
        links += [(d, group, u, v) for u, v in zip(dev, dev[1:])]
        cur[d] = goal[d]
    return links


class _AwareNetwork:
    """ASTRA-sim's congestion-aware links and event queue, for a batch of messages.

    ``run(rounds)``: ``rounds[r]`` lists ``(src, dst, links, size)``; a round-``r + 1`` message of NPU
    ``n`` is sent when every round-``r`` message ``n`` sends or receives has arrived (the system
    layer's next step), at once, in the round's order.  Returns the arrival times."""

    def __init__(self, link_params):
        self.params = link_params          # link key -> (latency ns, bytes/ns)

    def run(self, rounds):
        import heapq
        from collections import deque
        heap, seq = [], [0]
        busy, pending = {}, {}
        arrive = [[None] * len(r) for r in rounds]
        left = [dict() for _ in rounds]    # round -> npu -> messages of the round not arrived yet
        for r, msgs in enumerate(rounds):
            for s, d, _, _ in msgs:
                for n in (s, d):
                    left[r][n] = left[r].get(n, 0) + 1
        now = [0]

        def push(t, kind, arg):
            heapq.heappush(heap, (t, seq[0], kind, arg))
            seq[0] += 1

        def transmit(link, msg):
            lat, bw = self.params[link[0]]
            size = rounds[msg[0]][msg[1]][3]
            busy[link] = True
            push(now[0] + int(lat + float(size) / bw), "arrive", msg)       # arrival first, as ASTRA-sim
            push(now[0] + int(float(size) / bw), "free", link)

        def send_on(link, msg):
            if busy.get(link):
                pending.setdefault(link, deque()).append(msg)
            else:
                transmit(link, msg)

        def inject(r, npu):
            for k, (s, d, links, _) in enumerate(rounds[r]):
                if s == npu:
                    send_on(links[0], (r, k, 0))

        def finished(r, k):
            arrive[r][k] = now[0]
            s, d = rounds[r][k][0], rounds[r][k][1]
            for n in (s, d):
                left[r][n] -= 1
                if left[r][n] == 0 and r + 1 < len(rounds):
                    inject(r + 1, n)

        if rounds:
            for n in sorted({m[0] for m in rounds[0]}):
                inject(0, n)
        while heap:
            t, _, kind, arg = heapq.heappop(heap)
            now[0] = t
            if kind == "free":
                busy[arg] = False
                q = pending.get(arg)
                if q:
                    transmit(arg, q.popleft())
            else:
                r, k, hop = arg
                links = rounds[r][k][2]
                if hop + 1 == len(links):
                    finished(r, k)
                else:
                    send_on(links[hop + 1], (r, k, hop + 1))
        return arrive


def _link_params(net: AstraNetwork) -> dict:
    return {d: (float(net.latency_ns[d]), _bytes_per_ns(net.bandwidth_GBps[d])) for d in range(net.n_dims)}


def send_time_ns(net: AstraNetwork, src, dst, size_bytes, backend: str = "unaware") -> dict:
    """One message from NPU ``src`` to NPU ``dst`` on an idle network, as ASTRA-sim's analytical
    ``backend`` (``unaware`` or ``aware``) times it: ``{"time_ns", "hops", "dims"}`` (integer ns)."""
    backend = _backend(backend)
    a, b = _check_npu(net, src, "source"), _check_npu(net, dst, "destination")
    if a == b:
        raise ValueError(f"source and destination are the same NPU ({a}); ASTRA-sim refuses such a send")
    size = _check_size(size_bytes)
    if backend == "unaware":
        sa, sb = _address(net, a), _address(net, b)
        d = next(k for k in range(net.n_dims) if sa[k] != sb[k])
        topo, p = net.topology[d], net.npus_count[d]
        t = _unaware_ns(topo, p, sa[d], sb[d], size, net.bandwidth_GBps[d], net.latency_ns[d])
        return {"backend": backend, "src": a, "dst": b, "size_bytes": size, "time_ns": t,
                "hops": _hop_count(topo, p, sa[d], sb[d]), "dims": [d]}
    links = _route_links(net, a, b)
    arr = _AwareNetwork(_link_params(net)).run([[(a, b, links, size)]])
    return {"backend": backend, "src": a, "dst": b, "size_bytes": size, "time_ns": int(arr[0][0]),
            "hops": len(links), "dims": sorted({x[0] for x in links})}


def _backend(name) -> str:
    b = str(name).strip().lower()
    if b in ("unaware", "congestion_unaware", "congestion-unaware"):
        return "unaware"
    if b in ("aware", "congestion_aware", "congestion-aware"):
        return "aware"
    raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {name!r}")


def _rounds(op: str, alg: str, p: int, size: int) -> list:
    """ASTRA-sim's system-layer steps of one collective phase on ``p`` NPUs of one dimension.

    ``op``: ``rs`` (vector of ``size`` bytes), ``ag`` (gathered output of ``size``), ``a2a`` (send
    buffer of ``size``).  Each round lists ``(src, dst, bytes)``:

    * ring: ``p - 1`` rounds; every NPU sends ``size // p`` to its clockwise neighbour (RS: one
      share of the vector; AG: its input, ``size // p``); All-to-All: round ``k`` sends
      ``size // p`` to NPU ``i + k``.
    * direct: one round; every NPU sends ``size // p`` to each of the ``p - 1`` others, in the
      order ``i + 1, i + 2, ...``.
    * recursive (halving-doubling, ``p`` a power of 2): RS ``log2 p`` rounds, partner at distance
      1, 2, 4, ... (``i XOR 2^k``), ``size / 2, size / 4, ...`` bytes; AG the mirror: distance
      ``p / 2, ..., 1``, ``size // p, 2 size // p, ...`` bytes.
    """
    if p == 1:
        return []
    share = size // p
    if share < 1:
        raise ValueError(f"{size} B over {p} NPUs leaves a share of 0 bytes; ASTRA-sim needs >= 1 B per message")
    if alg == "ring":
        if op == "a2a":
            return [[(i, (i + k) % p, share) for i in range(p)] for k in range(1, p)]
        return [[(i, (i + 1) % p, share) for i in range(p)] for _ in range(p - 1)]
    if alg == "direct":
        return [[(i, (i + k) % p, share) for i in range(p) for k in range(1, p)]]
    if alg == "recursive":
        if p & (p - 1):
            raise ValueError(f"halving-doubling (recursive) needs a power-of-2 NPU count, got {p}")
        steps = p.bit_length() - 1
        if op == "a2a":
            raise ValueError("halving-doubling has no All-to-All; use direct or ring")
        if op == "rs":
            return [[(i, i ^ (1 << k), size >> (k + 1)) for i in range(p)] for k in range(steps)]
        return [[(i, i ^ (p >> (k + 1)), share << k) for i in range(p)] for k in range(steps)]
    raise ValueError(f"the analytical backends time ring, direct and recursive algorithms, not {alg!r}")


def _phase_ns(net: AstraNetwork, d: int, rounds: list, backend: str) -> int:
    topo, p = net.topology[d], net.npus_count[d]
    bw, lat = net.bandwidth_GBps[d], net.latency_ns[d]
    if not rounds:
        return 0
    if backend == "unaware":
        ready = [0] * p
        for msgs in rounds:
            nxt = list(ready)
            for s, t, m in msgs:
                done = ready[s] + _unaware_ns(topo, p, s, t, m, bw, lat)
                nxt[s] = max(nxt[s], done)
                nxt[t] = max(nxt[t], done)
            ready = nxt
        return int(max(ready))
    params = {d: (float(lat), _bytes_per_ns(bw))}
    def links(s, t):
        r = _local_route(topo, p, s, t)
        return [(d, (), u, v) for u, v in zip(r, r[1:])]
    rr = [[(s, t, links(s, t), m) for s, t, m in msgs] for msgs in rounds]
    arr = _AwareNetwork(params).run(rr)
    return int(max(max(a) for a in arr))


#: Messages one backend evaluation may time (phases x rounds x messages), times ``--max-work``: a limit
#: of this module (nuna_jax.limits is a model-hash file).  4 M messages: about a minute of the aware
#: event loop on one core.
BACKEND_MESSAGES = 1 << 22


def _message_count(alg: str, p: int) -> int:
    if p <= 1:
        return 0
    if alg == "recursive":
        return p * max(1, (p - 1).bit_length())
    return p * (p - 1)


def _algorithms(algorithm, n_dims: int) -> list:
    """``None``, one algorithm for every dimension, or one per dimension (a list, or a comma-separated
    string such as ``ring,direct,recursive`` -- as ASTRA-sim's ``all-reduce-implementation``)."""
    if algorithm is None:
        return [None] * n_dims
    parts = [x.strip().lower() for x in algorithm.split(",")] if isinstance(algorithm, str) else \
        [str(x).strip().lower() for x in algorithm]
    alias = {"halvingdoubling": "recursive", "halving-doubling": "recursive", "hd": "recursive"}
    parts = [alias.get(x, x) for x in parts]
    if len(parts) == 1:
        parts = parts * n_dims
    if len(parts) != n_dims:
        raise ValueError(f"{len(parts)} algorithms for a network of {n_dims} dimensions: give one, or one per "
                         "dimension")
    for a in parts:
        if a not in ("ring", "direct", "recursive"):
            raise ValueError(f"the analytical backends time ring, direct and recursive (halvingDoubling) "
                             f"algorithms, not {a!r}")
    return parts


def backend_collective_ns(net: AstraNetwork, collective, size_bytes, backend: str = "unaware",
                          algorithm=None, limits=None, involved_dims=None) -> dict:
    """A collective on an ASTRA-sim network, each step timed by one analytical backend (integer ns).

    Hierarchical, as ASTRA-sim's system layer runs a collective over several dimensions: a
    Reduce-Scatter runs dimension 0, 1, ... with the vector shrinking by ``p_d`` after each; an
    All-Gather is the mirror (the last dimension first, growing to ``size``); an All-Reduce is the
    Reduce-Scatter then the All-Gather; an All-to-All runs its whole send buffer over each
    dimension.  Within a dimension the steps are :func:`_rounds`'s; the dimension's groups use
    disjoint links, so one group is simulated.  Phases run one after the other.  ``size_bytes``
    follows ``models.collectives`` (gathered output for All-Gather: ASTRA-sim's All-Gather
    ``comm_size`` is the per-NPU input, ``size_bytes / n_npus``; the per-dimension sizes are then
    ASTRA-sim's exactly).  ``algorithm``: one for all dimensions or one per dimension
    (:func:`_algorithms`); ``involved_dims``: a Chakra node's ``involved_dim`` (dimensions left out
    do not take part).  Not modelled: dataset splits (one chunk per phase), the system layer's
    endpoint and reduction delays."""
    backend = _backend(backend)
    c = COLLECTIVES[collective_code(collective)]
    n = _check_size(size_bytes)
    if involved_dims is None:
        involved_dims = [True] * net.n_dims
    involved_dims = [bool(x) for x in involved_dims]
    if len(involved_dims) != net.n_dims:
        raise ValueError(f"involved dimensions list {len(involved_dims)} entries; the network has {net.n_dims}")
    dims = [d for d in range(net.n_dims) if net.npus_count[d] > 1 and involved_dims[d]]
    per_dim = _algorithms(algorithm, net.n_dims)
    algs = {d: per_dim[d] or _DEFAULT_ALG[net.topology[d]] for d in dims}
    if c == "all_to_all":   # halving-doubling has no All-to-All: direct where it is only the default
        algs = {d: "direct" if a == "recursive" and per_dim[d] is None else a for d, a in algs.items()}
    for a in set(algs.values()):
        if a not in ("ring", "direct", "recursive"):
            raise ValueError(f"the analytical backends time ring, direct and recursive algorithms, not {a!r}")
    sizes, shrink = {}, 1
    for d in dims:
        sizes[d] = n // shrink
        shrink *= net.npus_count[d]
    plan = []
    if c == "reduce_scatter":
        plan = [(d, "rs") for d in dims]
    elif c == "all_gather":
        plan = [(d, "ag") for d in reversed(dims)]
    elif c == "all_reduce":
        plan = [(d, "rs") for d in dims] + [(d, "ag") for d in reversed(dims)]
    else:
        plan = [(d, "a2a") for d in dims]
    from .limits import active
    cap = max(1, int(BACKEND_MESSAGES * active(limits).factor))
    count = sum(_message_count(algs[d], net.npus_count[d]) for d, _ in plan)
    if count > cap:
        raise ValueError(f"{c} on {net.n_npus} NPUs with the {backend} backend sends {count} messages, over the "
                         f"limit of {cap} (backend_messages of nuna_jax.astra, --max-work)")
    phases, total = [], 0
    for d, op in plan:
        size = n if op == "a2a" else sizes[d]
        rounds = _rounds(op, algs[d], net.npus_count[d], size)
        t = _phase_ns(net, d, rounds, backend)
        phases.append({"dim": d, "topology": net.topology[d], "p": net.npus_count[d], "algorithm": algs[d],
                       "op": {"rs": "reduce_scatter", "ag": "all_gather", "a2a": "all_to_all"}[op],
                       "size_bytes": size, "rounds": len(rounds),
                       "message_bytes": sorted({m for r in rounds for _, _, m in r}), "time_ns": t})
        total += t
    return {"collective": c, "backend": backend, "size_bytes": n, "n_npus": net.n_npus, "time_ns": total,
            "phases": phases}
