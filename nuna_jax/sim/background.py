"""On-chip background flows: a concurrent kernel's own HBM traffic (NUNA section 6.6).

``Traffic`` holds inter-GPU flows only; a concurrently running GEMM moves
data between a GPU's own HBM stacks and its CUs.  A :class:`Background`
table describes such flows; :func:`background_stages` gives their stages,
built from the same path terms (``nuna_jax.path``) and resource ids
(``nuna_jax.path.resource_layout``) as the traffic, so they contend for the
same mesh links and HBM stacks (docs/simulator.md, "Background flows"):

* read  (kind 0): CU issue (CU, 1 NoC cycle; latency cu_to_noc + request
  mesh latency CU -> stack) -> HBM read (stack) -> response links stack -> CU
  (held only when ``System.read_response_links``; otherwise the same time as
  pure latency, as for the traffic) -> cu_to_noc back into the CU; delivered there.
* write (kind 1): CU issue (CU, 1 NoC cycle; latency cu_to_noc) -> links
  CU -> stack -> HBM write (stack, hbm_latency); delivered there.

Background flits use their CU's issue stage and 700-request window like any
flit, join no phase (no barrier), and have no store latency.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from .. import path
from ..geometry import cu_router, hbm_endpoint, hbm_endpoint_router, max_hops, router_die
from ..system import System

__all__ = ["Background", "make_background", "background_stages", "gemm_background"]

READ, WRITE = 0, 1


class Background(NamedTuple):
    """On-chip flows, numpy columns ``[B]``: gpu, cu, stack, kind (0 read, 1 write),
    flits, tb (threadblock id, unique per CU), step (issue order inside the tb), channel
    (the stack's channel, 0 .. hbm_routers_per_stack-1: which of its routers)."""

    gpu: Any
    cu: Any
    stack: Any
    kind: Any
    flits: Any
    tb: Any
    step: Any
    channel: Any = 0

    @property
    def n_flows(self) -> int:
        return int(np.shape(self.flits)[0])

    @property
    def total_flits(self) -> int:
        return int(np.sum(self.flits))

    def stages(self, system: System):
        """:func:`background_stages` of this table: how the path model (``models.contention``,
        which may not import ``sim``) reads a background's paths, so both use one definition."""
        return background_stages(system, self)


def make_background(system: System, **cols) -> Background:
    """Validated :class:`Background` from columns (``tb``/``step``/``channel`` default 0)."""
    n = np.shape(cols["flits"])[0]
    out = {}
    for k in Background._fields:
        v = np.asarray(cols.get(k, 0))
        out[k] = np.broadcast_to(v, (n,)).astype(np.int64).copy()
    lim = {"gpu": system.n_gpus, "cu": system.n_cus, "stack": system.n_hbm_stacks, "kind": 2,
           "channel": system.hbm_routers_per_stack}
    for k, hi in lim.items():
        v = out[k]
        if v.size and (v.min() < 0 or v.max() >= hi):
            raise ValueError(f"Background.{k} must lie in [0, {hi}), got range [{v.min()}, {v.max()}]")
    for k in ("flits", "tb", "step"):
        if out[k].size and out[k].min() < 0:
            raise ValueError(f"Background.{k} must be >= 0")
    return Background(**out)


def background_stages(system: System, bg: Background):
    """(resource, service_ns, latency_ns), each ``[B, max_hops + 3]`` (padding = -1, 0, 0)."""
    lay = path.resource_layout(system)
    cu_r = jnp.asarray(cu_router(system))[jnp.asarray(bg.cu)]
    st_r = jnp.asarray(hbm_endpoint_router(system))[hbm_endpoint(system, jnp.asarray(bg.stack),
                                                                  jnp.asarray(bg.channel))]
    g = jnp.asarray(bg.gpu)
    is_read = jnp.asarray(bg.kind) == READ
    b = g.shape[0]
    h = max_hops(system)
    cyc = path.issue_cycle_ns(system)
    hbm_svc = path.hbm_service_ns(system)
    cu_id = g * lay.per_gpu + lay.offset_cu + jnp.asarray(bg.cu)
    hbm_id = g * lay.per_gpu + lay.offset_hbm + jnp.asarray(bg.stack)
    # a read's leg is its response (stack -> CU: path.response_link_stages, which honours
    # System.read_response_links); a write's leg is its store (CU -> stack)
    resp = path.response_link_stages(system, g, st_r, cu_r, lay)        # [B, H] each
    store = path.link_stages(system, g, cu_r, st_r, lay)
    legs = tuple(jnp.where(is_read[:, None], a, b) for a, b in zip(resp, store))
    one = jnp.ones((b, 1))
    # read:  [cu issue, hbm read, H links, return-to-CU latency]
    # write: [cu issue, H links, hbm write, (pad)]
    req = system.cu_to_noc_ns + path.head_latency_ns(system, cu_r, st_r)
    issue = (cu_id[:, None], cyc * one, jnp.where(is_read, req, system.cu_to_noc_ns)[:, None])
    hbm = (hbm_id[:, None], hbm_svc * one, system.hbm_latency_ns * one)
    tail_r = (jnp.full((b, 1), -1), 0.0 * one, system.cu_to_noc_ns * one)
    pad = (jnp.full((b, 1), -1), 0.0 * one, 0.0 * one)
    read_rows = [issue, hbm, legs, tail_r]
    write_rows = [issue, legs, hbm, pad]
    cat = lambda rows, i: jnp.concatenate([jnp.broadcast_to(r[i], (b, r[0].shape[1])) for r in rows], axis=1)  # noqa: E731
    out = []
    for i in range(3):
        out.append(jnp.where(is_read[:, None], cat(read_rows, i), cat(write_rows, i)))
    return jnp.asarray(out[0], jnp.int32), out[1], out[2]


def gemm_background(system: System, *, gemm_bytes: int, n_tiles: int = 100, avoid_cus=None,
                    read_fraction: float = 0.95, gpus=None) -> Background:
    """A naively placed GEMM of ``n_tiles`` tiles on every GPU (NUNA section 6.6).

    ``gemm_bytes`` is the GEMM's HBM traffic per GPU (input panels read +
    output tiles written), split evenly over the tiles; ``read_fraction`` of
    it is reads (a square GEMM tiled 10 x 10 reads 20 panels per output tile:
    0.4 M^2 vs 0.02 M^2 bytes, about 95 % reads).  Tiles are placed
    round-robin over the compute dies, skipping CUs in ``avoid_cus`` (global
    per-GPU CU ids used by the collective); pages are spread round-robin over
    the HBM stacks (flit ``j`` of a tile's reads comes from stack ``j mod n``, channel
    ``(j // n) mod k``), the UA memory placement.  Each tile first issues its reads (step 0), then
    its writes (step 1); its compute is not modelled as a delay.
    """
    if gemm_bytes < 0 or n_tiles < 1:
        raise ValueError("gemm_bytes must be >= 0 and n_tiles >= 1")
    avoid = set() if avoid_cus is None else {int(c) for c in np.asarray(avoid_cus).ravel()}
    cus = np.arange(system.n_cus)
    die = router_die(system, cu_router(system))
    free = [c for c in cus if c not in avoid]
    # round-robin over dies: the k-th tile takes the next free CU of die k mod n_dies
    by_die = [[c for c in free if die[c] == d] for d in range(system.n_dies)]
    tiles_cu = []
    idx = [0] * system.n_dies
    k = 0
    while len(tiles_cu) < n_tiles:
        d = k % system.n_dies
        if idx[d] < len(by_die[d]):
            tiles_cu.append(by_die[d][idx[d]])
            idx[d] += 1
        elif all(idx[e] >= len(by_die[e]) for e in range(system.n_dies)):
            raise ValueError(f"not enough free CUs for {n_tiles} GEMM tiles")
        k += 1
    per_tile_flits = int(np.ceil(gemm_bytes / n_tiles / system.flit_bytes))
    rd = int(round(per_tile_flits * read_fraction))
    wr = per_tile_flits - rd
    gpus = range(system.n_gpus) if gpus is None else gpus
    cols = {k: [] for k in Background._fields}
    n_st, n_ch = system.n_hbm_stacks, system.hbm_routers_per_stack
    for g in gpus:
        for i, c in enumerate(tiles_cu):
            for kind, nfl, step in ((READ, rd, 0), (WRITE, wr, 1)):
                if nfl == 0:
                    continue
                j = np.arange(nfl) + i
                per_ep = np.bincount(hbm_endpoint(system, j % n_st, (j // n_st) % n_ch), minlength=n_st * n_ch)
                for e in np.flatnonzero(per_ep):
                    for key, v in (("gpu", g), ("cu", c), ("stack", e // n_ch), ("channel", e % n_ch),
                                   ("kind", kind), ("flits", per_ep[e]), ("tb", 1_000_000 + i), ("step", step)):
                        cols[key].append(v)
    if not cols["flits"]:
        return make_background(system, **{k: np.zeros(0, np.int64) for k in Background._fields})
    return make_background(system, **{k: np.asarray(v) for k, v in cols.items()})
