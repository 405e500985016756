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
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np

from .models.collectives import ALGORITHMS, COLLECTIVES, algorithm_code, collective_code, cost_ns

__all__ = ["AstraNetwork", "TOPOLOGIES", "parse_network", "load_network", "gbps_to_bytes_per_ns",
           "dim_parameters", "collective_time_ns"]

TOPOLOGIES = ("Ring", "FullyConnected", "Switch")
_KEYS = ("topology", "npus_count", "bandwidth", "latency")
_DEFAULT_ALG = {"Ring": "ring", "FullyConnected": "direct", "Switch": "recursive"}


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
        return int(np.prod(self.npus_count))

    def describe(self) -> dict:
        return {"topology": list(self.topology), "npus_count": list(self.npus_count),
                "bandwidth_GBps": list(self.bandwidth_GBps), "latency_ns": list(self.latency_ns),
                "n_npus": self.n_npus}


def _scalar(tok: str):
    tok = tok.strip().strip("'\"")
    try:
        return float(tok) if re.search(r"[.eE]", tok) else int(tok)
    except ValueError:
        return tok


def _parse_yaml_subset(text: str) -> dict:
    """The YAML subset ASTRA-sim network files use: ``key: [a, b]``, ``key: a``
    and block lists (``key:`` then ``- a`` lines); ``#`` comments."""
    out: dict = {}
    key = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        s = line.strip()
        if s.startswith("- "):
            if key is None or not isinstance(out.get(key), list):
                raise ValueError(f"line {n}: list item outside a list: {raw.strip()!r}")
            out[key].append(_scalar(s[2:]))
            continue
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_\-]*)\s*:\s*(.*)", s)
        if not m:
            raise ValueError(f"line {n}: cannot parse {raw.strip()!r}")
        key, val = m.group(1), m.group(2).strip()
        if val.startswith("["):
            if not val.endswith("]"):
                raise ValueError(f"line {n}: unterminated list for {key!r}")
            inner = val[1:-1].strip()
            out[key] = [_scalar(x) for x in inner.split(",")] if inner else []
        elif val == "":
            out[key] = []
        else:
            out[key] = _scalar(val)
    return out


def parse_network(text: str, source: str = "<string>") -> AstraNetwork:
    """Parse and validate the text of an ASTRA-sim network YAML; ``ValueError`` names the bad key."""
    try:
        d = _parse_yaml_subset(text)
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None
    unknown = sorted(set(d) - set(_KEYS))
    if unknown:
        raise ValueError(f"{source}: unknown key(s) {', '.join(unknown)}; an ASTRA-sim analytical network "
                         f"has {', '.join(_KEYS)}")
    missing = [k for k in _KEYS if k not in d]
    if missing:
        raise ValueError(f"{source}: missing key(s) {', '.join(missing)}")
    vals = {k: d[k] if isinstance(d[k], list) else [d[k]] for k in _KEYS}
    n = len(vals["topology"])
    if n == 0:
        raise ValueError(f"{source}: topology must list at least one dimension")
    for k in _KEYS:
        if len(vals[k]) != n:
            raise ValueError(f"{source}: {k} has {len(vals[k])} entries but topology has {n} dimensions")
    topo = []
    for t in vals["topology"]:
        match = [x for x in TOPOLOGIES if x.lower() == str(t).lower()]
        if not match:
            raise ValueError(f"{source}: topology {t!r} is not one of {', '.join(TOPOLOGIES)}")
        topo.append(match[0])
    npus = []
    for v in vals["npus_count"]:
        if not isinstance(v, (int, float)) or v != int(v) or int(v) < 1:
            raise ValueError(f"{source}: npus_count entries must be integers >= 1, got {v!r}")
        npus.append(int(v))
    for k in ("bandwidth", "latency"):
        for v in vals[k]:
            if not isinstance(v, (int, float)) or not np.isfinite(v) or v < 0 or (k == "bandwidth" and v == 0):
                rng = "> 0" if k == "bandwidth" else ">= 0"
                raise ValueError(f"{source}: {k} entries must be numbers {rng}, got {v!r}")
    return AstraNetwork(tuple(topo), tuple(npus), tuple(float(v) for v in vals["bandwidth"]),
                        tuple(float(v) for v in vals["latency"]))


def load_network(path) -> AstraNetwork:
    """Read an ASTRA-sim network YAML file."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"network file {str(p)!r} does not exist")
    return parse_network(p.read_text(), str(p))


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
