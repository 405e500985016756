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
           "dim_parameters", "collective_time_ns"]

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
