"""The placement search beside a concurrent GEMM (NUNA section 6.6, Figure 14;
docs/optim.md, "Beside a GEMM (NUNA 6.6)").

``optimize(..., gemm_mb_per_gpu=X)`` searches the collective's placement while a naively placed
GEMM (``sim.gemm_background``: 100 tiles round-robin over the compute dies, pages round-robin
over the HBM stacks, ``X`` MB of HBM traffic per GPU) runs on other CUs of every GPU.  One GEMM
serves every point of the space and every reference, so every method is judged beside the same
load:

* its CUs avoid every CU that any point of the space can use (:func:`space_cus`) and UA's CUs
  (UA is simulated as a reference); the simulator refuses a background on a CU the collective
  uses, and a point's CUs are its candidates' or, when ``repair`` moves a threadblock off a full
  CU, the first CU with room in its candidate domain's search order;
* the path model sees it as a :class:`~nuna_jax.models.contention.BackgroundLoad` computed once
  (docs/analytical.md 2.7): every hard and smooth estimate of the search takes it;
* the simulator runs it beside every simulated point (``stop_after_traffic``; the collective's
  time is ``traffic_completion_ps``).

NAP (Algorithm 1) ignores the GEMM: the all-zero point is still NAP+NAR, placed as without it.
"""

from __future__ import annotations

import numpy as np

from ..lowering import build_traffic
from ..models.contention import background_load
from ..nar import nar_domains
from ..placement import place

__all__ = ["GEMM_TILES", "AVOID_RULE", "space_cus", "search_background"]

#: tiles of the GEMM (NUNA section 6.6, Figure 14: a 100-tile GEMM)
GEMM_TILES = 100

AVOID_RULE = ("the GEMM's CUs avoid, on every GPU, the CU ids any point of the search space can use "
              "(every candidate CU of every threadblock with steps, and the first n+1 CUs of every "
              "candidate domain's search order, n the most threadblocks of one GPU: repair's first-fit "
              "fallback) and UA's CUs; one GEMM for every point, baseline and reference")


def space_cus(s, plan, sp) -> np.ndarray:
    """Every CU id (per GPU) that a point of ``sp`` (:class:`.space.Space` of ``plan``) can put a
    threadblock with steps on: its candidates' CUs, and the CUs ``space.repair`` can fall back to.

    The fallback takes the first CU with room in its candidate domain's order (``Domains.cu_order``);
    every CU ahead of it holds a threadblock of the same GPU, so it is among the first ``n + 1`` CUs
    of that order (``n`` the most threadblocks of one GPU)."""
    cand = sp.cand
    act = np.asarray(cand.active, bool)
    if not act.any():
        return np.zeros(0, np.int64)
    dom = nar_domains(s, cand.granularity)
    n = int(np.bincount(np.asarray(plan.tb_gpu)[act]).max())
    doms = np.unique(np.asarray(cand.domain)[act])
    fall = np.asarray(dom.cu_order)[doms, :n + 1]
    return np.union1d(np.unique(np.asarray(cand.cu)[act]), np.unique(fall)).astype(np.int64)


def search_background(s, prep: dict, plan, gemm_mb_per_gpu: float, *, n_tiles: int = GEMM_TILES) -> dict:
    """The GEMM of a search (module docstring): ``{"bg": sim.Background, "bl": BackgroundLoad,
    "info": JSON-ready description}``.  ``prep``: :func:`.driver.prepare`'s (or
    :func:`.counts.prepare_counts`'s: every count's space is avoided); ``plan``: the reference plan
    (UA's CUs are those of its UA placement).  ``ValueError`` when fewer than ``n_tiles`` CUs remain."""
    from ..sim import gemm_background
    mb = float(gemm_mb_per_gpu)
    if not (np.isfinite(mb) and mb > 0):
        raise ValueError(f"gemm_mb_per_gpu must be a positive number of MB, got {gemm_mb_per_gpu!r}")
    parts = ([(pl, P["sp"]) for pl, P in zip(prep["sp"].plans, prep["preps"])] if "preps" in prep
             else [(plan, prep["sp"])])
    used = [space_cus(s, pl, sp) for pl, sp in parts]
    ua = np.asarray(build_traffic(s, plan, place(s, plan, "ua")).cu)
    avoid = np.union1d(np.concatenate(used + [np.zeros(0, np.int64)]), np.unique(ua)).astype(np.int64)
    free = int(s.n_cus) - len(avoid)
    if free < n_tiles:
        raise ValueError(f"a {n_tiles}-tile GEMM beside this search needs {n_tiles} CUs per GPU that no point "
                         f"of the space can use, but only {free} of {s.n_cus} remain ({len(avoid)} avoided: "
                         "candidate CUs, repair's fallbacks and UA's); use fewer threadblocks or candidates")
    bg = gemm_background(s, gemm_bytes=int(round(mb * 1e6)), n_tiles=n_tiles, avoid_cus=avoid)
    bl = background_load(s, bg)
    info = {"gemm_mb_per_gpu": mb, "n_tiles": int(n_tiles), "avoid_rule": AVOID_RULE,
            "n_avoided_cus": int(len(avoid)), "n_cus": int(s.n_cus),
            "gemm_cus": sorted({int(c) for c in np.asarray(bg.cu)}),
            "gemm_flits_per_gpu": int(np.sum(np.asarray(bg.flits)) // max(1, s.n_gpus)),
            "gemm_estimate_alone_ns": float(np.max(np.asarray(bl.duration_ns)))}
    return {"bg": bg, "bl": bl, "info": info}
