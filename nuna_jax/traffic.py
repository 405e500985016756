"""Traffic: the seam between placement and the two timing models.

A ``Traffic`` is a table of *flows*.  A flow is a group of flits that take the
very same path (docs/model.md, "The path of a flit") and are issued by the
same threadblock in the same step:

    src_gpu, cu        the issuing threadblock's GPU and CU (CU id within GPU)
    read_stack         local HBM stack the data is read from (on src_gpu)
    read_channel       the stack's channel (0 .. hbm_routers_per_stack-1), which
                       fixes the router the read leaves from (geometry,
                       "HBM channels")
    port               egress I/O port ordinal on src_gpu; the flit crosses
                       switch plane ``port`` and enters dst_gpu on the ingress
                       port of the same ordinal (rail-optimized Clos)
    dst_gpu, dst_stack destination GPU and the HBM stack written there
    dst_channel        the destination stack's channel (router the write enters)
    flits              number of flits (float: integer-valued for hard traffic,
                       expected counts for soft traffic from a relaxed
                       placement)
    bytes              payload bytes carried (<= flits * flit_bytes)
    tb                 threadblock id, unique across the pod
    step               order of the flow inside its threadblock (flits of a
                       threadblock are issued step by step; inside one step
                       round-robin over that step's flows, row order)
    phase              global phase: no flit of phase k is issued before every
                       flit of phase k-1 is delivered (a barrier; models the
                       step dependencies of multi-step algorithms)
    weight             probability that the flow exists, in [0, 1]: 1 for every
                       row of a discrete placement; a relaxed placement lowers
                       to one row per candidate weighted by its probability
                       (docs/model.md, "Flow weight").  A float leaf, so
                       ``t.replace(weight=w)`` works under ``jit`` and ``grad``.

Only inter-GPU data is represented (``src_gpu != dst_gpu``); local copies
are not traffic.  The analytical model (``models.contention``) and the
simulator (``sim``) read the same object, so they can disagree only about how
long, never about what is sent (shared/ARCHITECTURE.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flax import struct

__all__ = ["Traffic", "make_traffic", "validate", "FIELDS"]

FIELDS = ("src_gpu", "cu", "read_stack", "read_channel", "port", "dst_gpu", "dst_stack", "dst_channel",
          "flits", "bytes", "tb", "step", "phase", "weight")
_INT_FIELDS = ("src_gpu", "cu", "read_stack", "read_channel", "port", "dst_gpu", "dst_stack", "dst_channel",
               "tb", "step", "phase")


@struct.dataclass
class Traffic:
    """Flow table; every field is an array of shape ``[n_flows]`` (see module doc)."""

    src_gpu: Any
    cu: Any
    read_stack: Any
    read_channel: Any
    port: Any
    dst_gpu: Any
    dst_stack: Any
    dst_channel: Any
    flits: Any
    bytes: Any
    tb: Any
    step: Any
    phase: Any
    weight: Any

    @property
    def n_flows(self) -> int:
        return int(np.shape(self.flits)[0])

    @property
    def total_flits(self) -> float:
        return float(np.sum(np.asarray(self.flits)))

    @property
    def total_bytes(self) -> float:
        return float(np.sum(np.asarray(self.bytes)))

    @property
    def is_hard(self) -> bool:
        """True when every flow carries a whole number of flits and weight 1 (simulable)."""
        f = np.asarray(self.flits)
        return bool(np.all(f == np.round(f)) and np.all(np.asarray(self.weight) == 1))

    def numpy(self) -> "Traffic":
        return Traffic(**{k: np.asarray(getattr(self, k)) for k in FIELDS})



def make_traffic(system, **cols) -> Traffic:
    """Build a validated ``Traffic`` from column arrays (numpy, concrete).

    Defaults: ``bytes = flits * flit_bytes``, ``read_channel = dst_channel = 0``,
    ``tb = 0``, ``step = 0``, ``phase = 0``, ``weight = 1``.  Raises ``ValueError`` naming the bad column.
    """
    missing = [k for k in ("src_gpu", "cu", "read_stack", "port", "dst_gpu", "dst_stack", "flits")
               if k not in cols]
    if missing:
        raise ValueError(f"make_traffic: missing column(s) {', '.join(missing)}")
    unknown = sorted(set(cols) - set(FIELDS))
    if unknown:
        raise ValueError(f"make_traffic: unknown column(s) {', '.join(unknown)}")
    n = np.shape(cols["flits"])[0] if np.ndim(cols["flits"]) else 1
    out = {}
    for k in FIELDS:
        if k in cols:
            v = np.asarray(cols[k])
        elif k == "bytes":
            v = np.asarray(cols["flits"], dtype=np.float64) * system.flit_bytes
        elif k == "weight":
            v = np.ones(n)
        else:
            v = np.zeros(n, dtype=np.int32)
        v = np.broadcast_to(v, (n,)).copy() if v.ndim == 0 else v
        if v.shape != (n,):
            raise ValueError(f"make_traffic: column {k!r} has shape {v.shape}, expected ({n},)")
        out[k] = v.astype(np.int32) if k in _INT_FIELDS else v.astype(np.float64)
    t = Traffic(**out)
    validate(system, t)
    return t


def validate(system, t: Traffic) -> Traffic:
    """Range checks of every column against the system; ``ValueError`` if bad."""
    lim = {
        "src_gpu": system.n_gpus, "dst_gpu": system.n_gpus, "cu": system.n_cus,
        "read_stack": system.n_hbm_stacks, "dst_stack": system.n_hbm_stacks,
        "port": system.n_io_ports,
        "read_channel": system.hbm_routers_per_stack, "dst_channel": system.hbm_routers_per_stack,
    }
    for k, hi in lim.items():
        v = np.asarray(getattr(t, k))
        if v.size and (v.min() < 0 or v.max() >= hi):
            raise ValueError(f"Traffic.{k} must lie in [0, {hi}), got range [{v.min()}, {v.max()}]")
    for k in ("tb", "step", "phase"):
        v = np.asarray(getattr(t, k))
        if v.size and v.min() < 0:
            raise ValueError(f"Traffic.{k} must be >= 0")
    f = np.asarray(t.flits)
    if f.size and (not np.all(np.isfinite(f)) or f.min() < 0):
        raise ValueError("Traffic.flits must be finite and >= 0")
    w = np.asarray(t.weight)
    if w.size and (not np.all(np.isfinite(w)) or w.min() < 0 or w.max() > 1):
        raise ValueError("Traffic.weight must lie in [0, 1] (the probability that the flow exists)")
    b = np.asarray(t.bytes)
    if b.size and (b.min() < 0 or np.any(b > f * system.flit_bytes + 1e-6)):
        raise ValueError("Traffic.bytes must lie in [0, flits * flit_bytes]")
    if np.any(np.asarray(t.src_gpu) == np.asarray(t.dst_gpu)):
        raise ValueError("Traffic holds inter-GPU flows only: src_gpu == dst_gpu found")
    return t
