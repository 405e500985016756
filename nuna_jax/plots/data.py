"""The numbers the pictures draw, as plain numpy arrays (no drawing here).

Each function answers one question about one GPU ``gpu`` of the pod; the
figures (:mod:`nuna_jax.plots.figures`) only colour what these return, so the
tests check these numbers against independent sums.  Bytes are expected
bytes, ``bytes * weight`` (docs/model.md, "Flow weight"), equal to the bytes
of a discrete placement.
"""

from __future__ import annotations

import numpy as np

from .. import geometry as geo
from ..path import head_latency_ns, resource_layout

__all__ = ["check_gpu", "port_bytes", "stack_bytes", "cu_domains", "resource_utilization",
           "link_utilization", "port_latency_ns"]


def check_gpu(system, gpu) -> int:
    """``gpu`` as an int, or ``ValueError`` naming it and the allowed range."""
    if isinstance(gpu, bool) or not isinstance(gpu, (int, np.integer)) or not 0 <= gpu < system.n_gpus:
        raise ValueError(f"gpu={gpu!r} is not a GPU of the pod: choose 0 .. {system.n_gpus - 1}")
    return int(gpu)


def _expected_bytes(traffic) -> np.ndarray:
    return np.asarray(traffic.bytes, np.float64) * np.asarray(traffic.weight, np.float64)


def port_bytes(system, traffic, gpu: int = 0):
    """(egress, ingress) bytes through every I/O port of ``gpu``, each ``[n_io_ports]``.

    Egress: flows leaving ``gpu`` on port ``p``; ingress: flows entering
    ``gpu`` on port ``p`` (switch plane ``p``, NUNA section 3.1.2).
    """
    g = check_gpu(system, gpu)
    b, p = _expected_bytes(traffic), np.asarray(traffic.port)
    n = system.n_io_ports
    out_ = np.bincount(p, weights=np.where(np.asarray(traffic.src_gpu) == g, b, 0.0), minlength=n)
    in_ = np.bincount(p, weights=np.where(np.asarray(traffic.dst_gpu) == g, b, 0.0), minlength=n)
    return out_, in_


def stack_bytes(system, traffic, gpu: int = 0):
    """(read, written) bytes of every HBM stack of ``gpu``, each ``[n_hbm_stacks]``
    (read: the source data of flows leaving ``gpu``; written: data delivered to ``gpu``)."""
    g = check_gpu(system, gpu)
    b = _expected_bytes(traffic)
    n = system.n_hbm_stacks
    read = np.bincount(np.asarray(traffic.read_stack), minlength=n,
                       weights=np.where(np.asarray(traffic.src_gpu) == g, b, 0.0))
    written = np.bincount(np.asarray(traffic.dst_stack), minlength=n,
                          weights=np.where(np.asarray(traffic.dst_gpu) == g, b, 0.0))
    return read, written


def cu_domains(system, placement, gpu: int = 0):
    """(domain, n_tbs) of every CU of ``gpu``, each ``[n_cus]``.

    ``domain``: the NAR domain (``placement.tb_domain``) of the lowest-id
    threadblock on the CU, -1 on a CU with no threadblock; ``n_tbs``: how
    many threadblocks the CU holds.
    """
    g = check_gpu(system, gpu)
    if placement.tb_gpu is None:
        raise ValueError("placement.tb_gpu is None: the picture needs each threadblock's GPU "
                         "(Placement(..., tb_gpu=plan.tb_gpu))")
    tb_cu, tb_gpu = np.asarray(placement.tb_cu), np.asarray(placement.tb_gpu)
    tb_dom = np.asarray(placement.tb_domain)
    dom = np.full(system.n_cus, -1, np.int64)
    count = np.zeros(system.n_cus, np.int64)
    for t in np.flatnonzero((tb_gpu == g) & (tb_cu >= 0))[::-1]:  # descending: the lowest id writes last
        dom[tb_cu[t]] = tb_dom[t]
        count[tb_cu[t]] += 1
    return dom, count


def resource_utilization(system, sim_result, gpu: int = 0) -> dict:
    """Busy time / completion time of every resource of ``gpu`` in a simulation.

    Keys ``link`` ``[n_link_slots]`` (NaN on slots that point off the mesh,
    geometry's slot order ``4 * router + direction``), ``hbm``
    ``[n_hbm_stacks]`` (reads and writes share a stack), ``egress`` and
    ``ingress`` ``[n_io_ports]``; the denominator is
    ``sim_result.completion_ps`` (zero utilization for an empty run).
    """
    g = check_gpu(system, gpu)
    lay = resource_layout(system)
    busy = np.asarray(sim_result.busy_ps, np.float64)[g * lay.per_gpu:(g + 1) * lay.per_gpu]
    done = float(sim_result.completion_ps)
    u = busy / done if done > 0 else np.zeros_like(busy)
    link = u[lay.offset_link:lay.offset_egress].copy()
    _, to = geo.link_endpoints(system, np.arange(geo.n_link_slots(system)))
    link[np.asarray(to) < 0] = np.nan
    return {"link": link, "hbm": u[lay.offset_hbm:lay.offset_link],
            "egress": u[lay.offset_egress:lay.offset_ingress], "ingress": u[lay.offset_ingress:lay.per_gpu]}


def link_utilization(system, sim_result, gpu: int = 0) -> np.ndarray:
    """Busy time / completion time of every directed mesh link slot of ``gpu`` (NaN off the mesh)."""
    return resource_utilization(system, sim_result, gpu)["link"]


def port_latency_ns(system):
    """(nearest, farthest) zero-load latency from every router's CUs to an I/O port, ns, each
    ``[n_routers]``: ``cu_to_noc_ns + head_latency_ns(router, port router)``, the "CU -> port"
    latency of docs/model.md ("NoC latency figures"; NUNA Figure 4)."""
    routers = np.arange(system.n_routers)
    lat = np.asarray(system.cu_to_noc_ns + head_latency_ns(system, routers[:, None],
                                                           geo.port_router(system)[None, :]), np.float64)
    return lat.min(axis=1), lat.max(axis=1)
