"""The hardware description: one multi-die GPU socket and the scale-up pod around it.

`System` is a pytree (``flax.struct.dataclass``).  Fields that fix array shapes
(mesh size, counts of CUs, stacks, ports, GPUs, flit size) are *static*: they
are part of the compiled program, so changing them re-traces.  Continuous
fields (latencies, clocks, bandwidths) are pytree leaves: they can be traced,
batched with ``vmap`` and differentiated with ``grad``.

Units (see docs/model.md): time in ns, sizes in bytes, bandwidth in bytes/ns
(numerically equal to GB/s, decimal), clock in GHz (cycles per ns).

Where the routers, CUs, stacks and ports sit is :mod:`nuna_jax.geometry`;
the numbers of the presets are :mod:`nuna_jax.presets`.  Port ``p`` of every
GPU attaches to switch plane ``p`` (rail-optimized Clos, NUNA section 3.1.2).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np
from flax import struct

from .checks import check_float_fields

__all__ = [
    "System",
    "validate",
    "stack_systems",
]

_static = lambda: struct.field(pytree_node=False)  # noqa: E731


@struct.dataclass
class System:
    """One GPU socket (a global 2-D mesh NoC) and the pod of ``n_gpus`` sockets.

    Static (shape-defining) fields
    ------------------------------
    name: preset name, for reports.
    mesh_cols, mesh_rows: global mesh size in routers (X along the long edge).
    n_dies: compute dies; each owns ``mesh_cols / n_dies`` columns.
    cus_per_router: compute units attached to every router.
    n_hbm_stacks: HBM stacks, half on each long edge.
    hbm_routers_per_stack: routers along its stretch of edge that each stack's
        channels attach to (1 = one router at the stretch's centre; Table 2: 3,
        every router of the stretch; docs/model.md "HBM channels").
    n_io_ports: scale-up I/O ports, half on each short edge.
    n_gpus: sockets in the scale-up pod (NUNA: "number of GPUs").
    flit_bytes: NoC / scale-up flit size in bytes (256 B, NUNA section 5.1).
    page_bytes: memory page size in bytes (4 KiB, NUNA section 4.2).
    max_outstanding_per_cu: outstanding memory requests one CU may have (700).
    read_response_links: whether a read response (the 256 B data flit from the
        HBM stack back to the reading CU) occupies the mesh links of its route
        (True, the presets' reading) or crosses the mesh as pure latency
        (False: same zero-load time, holds no link).  The paper does not say;
        docs/model.md, "Read responses on the mesh", quotes why True.

    Continuous fields (pytree leaves)
    ---------------------------------
    noc_clock_ghz: NoC clock in GHz (cycles per ns).
    hop_cycles: router + link traversal per mesh hop, in NoC cycles.
    die_crossing_ns: extra latency for a hop that crosses a die boundary, ns.
    cu_to_noc_ns: latency from a CU to its router (L1 miss path), ns.
    link_bw_bytes_per_ns: bandwidth of one *directed* mesh link, bytes/ns.
    hbm_bw_bytes_per_ns: bandwidth of one HBM stack, bytes/ns.
    hbm_latency_ns: HBM access latency, ns.
    port_bw_bytes_per_ns: bandwidth of one I/O port per direction, bytes/ns.
    switch_latency_ns: scale-up latency from egress port to the peer's ingress
        port (link + single-level Clos switch), ns.
    flops_bf16_per_ns, flops_fp4_per_ns: dense peak throughput, FLOP/ns.
    """

    name: str = _static()
    mesh_cols: int = _static()
    mesh_rows: int = _static()
    n_dies: int = _static()
    cus_per_router: int = _static()
    n_hbm_stacks: int = _static()
    hbm_routers_per_stack: int = _static()
    n_io_ports: int = _static()
    n_gpus: int = _static()
    flit_bytes: int = _static()
    page_bytes: int = _static()
    max_outstanding_per_cu: int = _static()
    read_response_links: bool = _static()

    noc_clock_ghz: Any
    hop_cycles: Any
    die_crossing_ns: Any
    cu_to_noc_ns: Any
    link_bw_bytes_per_ns: Any
    hbm_bw_bytes_per_ns: Any
    hbm_latency_ns: Any
    port_bw_bytes_per_ns: Any
    switch_latency_ns: Any
    flops_bf16_per_ns: Any
    flops_fp4_per_ns: Any

    def __post_init__(self):
        # construction and ``replace``: a concrete number (Python, NumPy, or a concrete jax array such
        # as ``jnp.asarray(nan)``) that is NaN or infinite is refused here; tracers (inside jit, vmap,
        # grad) carry no value and pass; ``validate`` checks ranges
        for k in _FINITE_FIELDS:
            v = getattr(self, k)
            if isinstance(v, jax.Array):
                if isinstance(v, jax.core.Tracer) or not v.is_fully_addressable:
                    continue
            elif not isinstance(v, (float, np.floating, np.ndarray)) or isinstance(v, bool):
                continue
            a = np.asarray(v)
            if a.dtype.kind in "fc" and not np.all(np.isfinite(a)):
                raise ValueError(f"System.{k} must be finite, got {v!r}")

    # ---- derived quantities (plain properties; no state) -------------------
    @property
    def n_routers(self) -> int:
        return self.mesh_cols * self.mesh_rows

    @property
    def n_cus(self) -> int:
        return self.n_routers * self.cus_per_router

    @property
    def cols_per_die(self) -> int:
        return self.mesh_cols // self.n_dies

    @property
    def hop_ns(self):
        """Latency of one mesh hop in ns (hop_cycles / noc_clock_ghz)."""
        return self.hop_cycles / self.noc_clock_ghz

    @property
    def n_directed_links(self) -> int:
        c, r = self.mesh_cols, self.mesh_rows
        return 2 * ((c - 1) * r + c * (r - 1))

    @property
    def bisection_bw_bytes_per_ns(self):
        """Bandwidth across the mesh's minimum bisection, both directions.

        The cut across the long (X) dimension crosses ``mesh_rows``
        bidirectional links, i.e. ``2 * mesh_rows`` directed links.
        """
        return 2 * self.mesh_rows * self.link_bw_bytes_per_ns

    @property
    def hbm_total_bw_bytes_per_ns(self):
        return self.n_hbm_stacks * self.hbm_bw_bytes_per_ns

    @property
    def scaleup_bw_bytes_per_ns(self):
        """Per-GPU scale-up bandwidth, one direction, bytes/ns (sum over ports)."""
        return self.n_io_ports * self.port_bw_bytes_per_ns

    # ``replace(**changes)`` comes from flax.struct (unvalidated, trace-safe);
    # call ``validate(s.replace(...))`` at API boundaries.

    def summary(self) -> dict:
        """A plain-dict description (JSON-ready) of the system."""
        f = lambda v: float(np.asarray(v))  # noqa: E731
        return {
            "name": self.name,
            "mesh": [self.mesh_cols, self.mesh_rows],
            "n_dies": self.n_dies,
            "n_cus": self.n_cus,
            "cus_per_router": self.cus_per_router,
            "n_hbm_stacks": self.n_hbm_stacks,
            "hbm_routers_per_stack": self.hbm_routers_per_stack,
            "n_io_ports": self.n_io_ports,
            "n_gpus": self.n_gpus,
            "flit_bytes": self.flit_bytes,
            "page_bytes": self.page_bytes,
            "max_outstanding_per_cu": self.max_outstanding_per_cu,
            "read_response_links": bool(self.read_response_links),
            "noc_clock_ghz": f(self.noc_clock_ghz),
            "hop_ns": f(self.hop_ns),
            "die_crossing_ns": f(self.die_crossing_ns),
            "cu_to_noc_ns": f(self.cu_to_noc_ns),
            "link_bw_GBps": f(self.link_bw_bytes_per_ns),
            "bisection_bw_TBps": f(self.bisection_bw_bytes_per_ns) / 1e3,
            "hbm_total_bw_TBps": f(self.hbm_total_bw_bytes_per_ns) / 1e3,
            "hbm_latency_ns": f(self.hbm_latency_ns),
            "port_bw_GBps": f(self.port_bw_bytes_per_ns),
            "scaleup_bw_TBps": f(self.scaleup_bw_bytes_per_ns) / 1e3,
            "switch_latency_ns": f(self.switch_latency_ns),
            "bf16_PFLOPS": f(self.flops_bf16_per_ns) / 1e6,
            "fp4_PFLOPS": f(self.flops_fp4_per_ns) / 1e6,
        }


# ---------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------
_POSITIVE_INT = (
    "mesh_cols", "mesh_rows", "n_dies", "cus_per_router", "n_hbm_stacks", "hbm_routers_per_stack",
    "n_io_ports", "flit_bytes", "page_bytes", "max_outstanding_per_cu",
)
_POSITIVE_FLOAT = (
    "noc_clock_ghz", "hop_cycles", "link_bw_bytes_per_ns", "hbm_bw_bytes_per_ns",
    "port_bw_bytes_per_ns", "flops_bf16_per_ns", "flops_fp4_per_ns",
)
_NONNEG_FLOAT = ("die_crossing_ns", "cu_to_noc_ns", "hbm_latency_ns", "switch_latency_ns")
_FINITE_FIELDS = _POSITIVE_INT + ("n_gpus",) + _POSITIVE_FLOAT + _NONNEG_FLOAT


def validate(s: System) -> System:
    """Raise ``ValueError`` naming the first bad field; return ``s`` if fine."""
    for k in _POSITIVE_INT:
        v = getattr(s, k)
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v <= 0:
            raise ValueError(f"System.{k} must be a positive integer, got {v!r}")
    if not isinstance(s.read_response_links, (bool, np.bool_)):
        raise ValueError(f"System.read_response_links must be true or false, got {s.read_response_links!r}")
    if not isinstance(s.n_gpus, (int, np.integer)) or s.n_gpus < 1:
        raise ValueError(f"System.n_gpus must be an integer >= 1, got {s.n_gpus!r}")
    check_float_fields("System", s, _POSITIVE_FLOAT, _NONNEG_FLOAT)
    if s.mesh_cols % s.n_dies:
        raise ValueError(
            f"System.n_dies={s.n_dies} must divide mesh_cols={s.mesh_cols} "
            "(each compute die owns an equal slab of columns)")
    if s.mesh_cols < 2:
        raise ValueError(f"System.mesh_cols must be >= 2 (ports sit on two short edges), got {s.mesh_cols}")
    if s.n_hbm_stacks % 2:
        raise ValueError(f"System.n_hbm_stacks must be even (half on each long edge), got {s.n_hbm_stacks}")
    if s.n_hbm_stacks // 2 > s.mesh_cols:
        raise ValueError(
            f"System.n_hbm_stacks={s.n_hbm_stacks}: {s.n_hbm_stacks // 2} stacks per long edge "
            f"do not fit on an edge of mesh_cols={s.mesh_cols} routers")
    stretch = s.mesh_cols // (s.n_hbm_stacks // 2)
    if s.hbm_routers_per_stack > stretch:
        raise ValueError(
            f"System.hbm_routers_per_stack={s.hbm_routers_per_stack} exceeds the {stretch} router(s) along "
            f"each stack's stretch of edge (mesh_cols={s.mesh_cols}, {s.n_hbm_stacks // 2} stacks per edge); "
            f"choose 1 .. {stretch}")
    if s.n_io_ports % 2:
        raise ValueError(f"System.n_io_ports must be even (half on each short edge), got {s.n_io_ports}")
    per_edge = s.n_io_ports // 2
    if per_edge % s.mesh_rows:
        raise ValueError(
            f"System.n_io_ports={s.n_io_ports}: {per_edge} ports per short edge do not spread "
            f"evenly over mesh_rows={s.mesh_rows} edge routers")
    if s.page_bytes % s.flit_bytes:
        raise ValueError(
            f"System.page_bytes={s.page_bytes} must be a multiple of flit_bytes={s.flit_bytes}")
    return s


def stack_systems(systems) -> System:
    """One System whose continuous fields are stacked along a new leading axis.

    All systems must share their static fields (mesh, counts, flit and page
    sizes); the result is the batch that ``jax.vmap(f)(stacked)`` maps over,
    equal to calling ``f`` on each system.  ``ValueError`` if the statics differ.
    """
    import jax
    import jax.numpy as jnp
    systems = list(systems)
    if not systems:
        raise ValueError("stack_systems: need at least one System")
    statics = {f.name: getattr(systems[0], f.name) for f in dataclasses.fields(System)
               if not f.metadata.get("pytree_node", True) and f.name != "name"}
    for k, sy in enumerate(systems[1:], 1):
        bad = [n for n, v in statics.items() if getattr(sy, n) != v]
        if bad:
            raise ValueError(f"stack_systems: system {k} differs from system 0 in static field(s) "
                             f"{', '.join(bad)} (only continuous fields may vary in a batch)")
    dtype = np.dtype(jnp.result_type(float))

    def stack(*v):
        if any(isinstance(x, jax.Array) or isinstance(x, jax.core.Tracer) for x in v):
            return jnp.stack([jnp.asarray(x, dtype) for x in v])      # already on a device / traced
        return jnp.asarray(np.stack([np.asarray(x, dtype) for x in v]))  # host values: one copy per field
    return jax.tree_util.tree_map(stack, *systems)
