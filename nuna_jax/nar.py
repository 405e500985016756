"""NUNA-aware routing (NAR) domains and the address hash that picks a port
(NUNA section 4.1, docs/policies.md "NAR").

Ports are ordered along the socket's perimeter: the west short edge top to
bottom (ports ``0 .. n/2-1``, rows ascending), then the east edge bottom to
top (ports ``n-1`` down to ``n/2``).  Granularity ``g`` cuts that order into
``g`` contiguous pieces of near-equal length (``numpy.array_split``: the first
``n mod g`` pieces get one port more).  For even ``g`` every domain lies on a
single edge and is physically contiguous; for odd ``g`` the middle domain
wraps around the bottom of the socket: it holds the bottom ports of the west
edge and the bottom ports of the east edge.  ``g = 1`` is one domain with all
ports: the baseline.

Inside a domain the ports are listed in ascending id order, and the port of a
flit is chosen by the hash

    port = domain_ports[d][(dst_addr // flit_bytes) mod m_d]

where ``dst_addr`` is the flit-aligned destination address of the flit (its
byte address in the destination GPU's address space) and ``m_d`` the number
of ports of domain ``d``.  With ``g = 1`` this is exactly the baseline hash
``port = (dst_addr // flit_bytes) mod n_io_ports`` (section 4.1.1: "statically
hashes lower-order physical address bits").
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .geometry import cu_router, hops as hop_count, port_router, stack_router
from .system import System

__all__ = ["Domains", "nar_domains", "perimeter_order", "hash_residue", "port_of_residue", "port_of_flit",
           "max_useful_granularity"]


class Domains(NamedTuple):
    """NAR domains of one granularity.

    ports: list of ``g`` int arrays (port ids of each domain, ascending).
    flat, offset, size: the same as one flat array: domain ``d`` is
        ``flat[offset[d] : offset[d] + size[d]]``.
    port_domain: ``[n_io_ports]`` domain of every port.
    stack_order: ``[g, n_hbm_stacks]`` stacks by increasing mean hop distance
        from the domain's port routers (ties: lower stack id).
    cu_order: ``[g, n_cus]`` CUs by increasing mean hop distance to the
        domain's port routers (ties: lower CU id); Algorithm 1's search order.
    cu_domain: ``[n_cus]`` the domain nearest each CU (mean hop distance to its
        ports; ties: lower domain id).
    """

    granularity: int
    ports: list
    flat: np.ndarray
    offset: np.ndarray
    size: np.ndarray
    port_domain: np.ndarray
    stack_order: np.ndarray
    cu_order: np.ndarray
    cu_domain: np.ndarray


def perimeter_order(s: System) -> np.ndarray:
    """Port ids along the perimeter: west top->bottom, then east bottom->top."""
    half = s.n_io_ports // 2
    return np.concatenate([np.arange(half), np.arange(s.n_io_ports - 1, half - 1, -1)])


def max_useful_granularity(s: System) -> int:
    """``2 * mesh_rows``: one domain per edge router (12 on Table 2).

    Finer domains split the ports of one router and cannot shorten any path.
    """
    return 2 * s.mesh_rows


def nar_domains(s: System, granularity: int) -> Domains:
    """NAR domains for granularity ``g`` (1 .. n_io_ports)."""
    g = int(granularity)
    if g < 1 or g > s.n_io_ports:
        raise ValueError(f"nar_granularity must lie in [1, {s.n_io_ports}] (number of I/O ports), got {granularity}")
    pieces = np.array_split(perimeter_order(s), g)
    ports = [np.sort(p).astype(np.int64) for p in pieces]
    size = np.array([len(p) for p in ports], dtype=np.int64)
    offset = np.concatenate([[0], np.cumsum(size)[:-1]]).astype(np.int64)
    flat = np.concatenate(ports)
    port_domain = np.empty(s.n_io_ports, np.int64)
    port_domain[flat] = np.repeat(np.arange(g), size)

    pr, sr, cr = port_router(s), stack_router(s), cu_router(s)
    # mean hop distance from each domain's port routers to every stack / CU router
    hp_st = hop_count(s, pr[:, None], sr[None, :]).astype(np.float64)    # [P, St]
    hp_cu = hop_count(s, pr[:, None], cr[None, :]).astype(np.float64)    # [P, C]
    d_st = np.stack([hp_st[p].mean(axis=0) for p in ports])             # [g, St]
    d_cu = np.stack([hp_cu[p].mean(axis=0) for p in ports])             # [g, C]
    stack_order = np.stack([np.lexsort((np.arange(s.n_hbm_stacks), np.round(d, 9))) for d in d_st])
    cu_order = np.stack([np.lexsort((np.arange(s.n_cus), np.round(d, 9))) for d in d_cu])
    cu_domain = np.argmin(np.round(d_cu, 9), axis=0)  # argmin picks the lowest id on ties
    return Domains(g, ports, flat, offset, size, port_domain, stack_order, cu_order,
                   cu_domain.astype(np.int64))


def hash_residue(dst_addr, flit_bytes: int, m):
    """The hash's index into a domain of ``m`` ports: ``(dst_addr // flit_bytes) mod m``."""
    return (np.asarray(dst_addr, dtype=np.int64) // flit_bytes) % m


def port_of_residue(dom: Domains, domain, residue) -> np.ndarray:
    """Port id at position ``residue`` of domain ``domain``'s ascending port list."""
    return dom.flat[dom.offset[np.asarray(domain, dtype=np.int64)] + residue]


def port_of_flit(dom: Domains, domain, dst_addr, flit_bytes: int) -> np.ndarray:
    """The hash: ``ports[d][(dst_addr // flit_bytes) mod m_d]`` (vectorized)."""
    d = np.asarray(domain, dtype=np.int64)
    return port_of_residue(dom, d, hash_residue(dst_addr, flit_bytes, dom.size[d]))
