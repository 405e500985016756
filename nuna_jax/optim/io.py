"""Save and load a discrete placement as JSON (``--placement FILE.json``).

The file holds what ``lowering.build_traffic`` needs: ``tb_cu``, ``tb_domain``,
``page_stack``, the routing granularity and the ``policy`` it is labelled by
(``OPT`` for ``nuna-jax optimize --save``; ``place``, ``estimate`` and
``simulate --placement`` print that name, not ``--policy``), plus the plan's shape
(``n_gpus``, ``n_tbs``, ``n_pages``) so that loading against another plan fails
with a message instead of lowering garbage, and the ``provenance`` of the code
that wrote it.  Loading re-derives the budgets
(``placement.cu_demand``, ``placement.stack_capacity_pages``) and checks them.
"""

from __future__ import annotations

import json

import numpy as np

from ..nar import nar_domains
from ..placement import Placement, cu_demand, stack_capacity_pages
from ..provenance import provenance
from .candidates import check_capacities

__all__ = ["save_placement", "load_placement", "placement_to_dict"]

FORMAT = "nuna_jax.placement/1"


def placement_to_dict(s, plan, pl: Placement, meta: dict | None = None) -> dict:
    return {"format": FORMAT, "policy": pl.policy, "n_gpus": int(plan.n_gpus), "n_tbs": int(plan.n_tbs),
            "n_pages": int(pl.page_stack.shape[1]), "routing_granularity": int(pl.routing_granularity),
            "placement_granularity": int(pl.placement_granularity),
            "tb_cu": np.asarray(pl.tb_cu).tolist(), "tb_domain": np.asarray(pl.tb_domain).tolist(),
            "page_stack": np.asarray(pl.page_stack).tolist(),
            "page_domain": None if pl.page_domain is None else np.asarray(pl.page_domain).tolist(),
            "meta": meta or {}, "provenance": provenance()}


def save_placement(path: str, s, plan, pl: Placement, meta: dict | None = None) -> None:
    with open(path, "w") as f:
        json.dump(placement_to_dict(s, plan, pl, meta), f, separators=(",", ":"))


def load_placement(path: str, s, plan) -> Placement:
    """The placement saved in ``path``, checked against ``plan`` on ``s``; ``ValueError`` if it does not fit."""
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read placement file {path!r}: {e}") from None
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise ValueError(f"placement file {path!r}: format must be {FORMAT!r}")
    n_pages = plan.address_pages(s.page_bytes)
    for k, want in (("n_gpus", plan.n_gpus), ("n_tbs", plan.n_tbs), ("n_pages", n_pages)):
        if d.get(k) != want:
            raise ValueError(f"placement file {path!r} has {k}={d.get(k)} but the plan needs {want} "
                             "(same --collective/--plan, --size, --gpus and --tbs as when it was saved)")
    g = int(d["routing_granularity"])
    dom = nar_domains(s, g)
    tb_cu = np.asarray(d["tb_cu"], np.int64)
    tb_dom = np.asarray(d["tb_domain"], np.int64)
    ps = np.asarray(d["page_stack"], np.int16)
    if tb_cu.shape != (plan.n_tbs,) or tb_dom.shape != (plan.n_tbs,) or ps.shape != (plan.n_gpus, n_pages):
        raise ValueError(f"placement file {path!r}: tb_cu, tb_domain or page_stack has the wrong shape")
    if tb_cu.max(initial=0) >= s.n_cus or tb_cu.min(initial=0) < -1:
        raise ValueError(f"placement file {path!r}: tb_cu must lie in [-1, {s.n_cus})")
    if tb_dom.min(initial=0) < 0 or tb_dom.max(initial=0) >= g:
        raise ValueError(f"placement file {path!r}: tb_domain must lie in [0, {g})")
    if ps.min(initial=0) < -1 or ps.max(initial=0) >= s.n_hbm_stacks:
        raise ValueError(f"placement file {path!r}: page_stack must lie in [-1, {s.n_hbm_stacks})")
    pd = d.get("page_domain")            # NAR domain of each page (routing by address, D5), or absent
    if pd is not None:
        pd = np.asarray(pd, np.int16)
        if pd.shape != ps.shape or pd.min(initial=0) < -1 or pd.max(initial=0) >= g:
            raise ValueError(f"placement file {path!r}: page_domain must have page_stack's shape and lie in "
                             f"[-1, {g})")
    pl = Placement(policy=str(d.get("policy", "FILE")), tb_cu=tb_cu, tb_domain=tb_dom, page_stack=ps, domains=dom,
                   placement_granularity=int(d.get("placement_granularity", g)), cu_demand=cu_demand(s, plan),
                   cu_capacity=int(s.max_outstanding_per_cu), stack_capacity_pages=stack_capacity_pages(s, plan),
                   tb_gpu=plan.tb_gpu, page_domain=pd)
    chk = check_capacities(s, plan, pl)
    if not chk["ok"]:
        raise ValueError(f"placement file {path!r} breaks a budget: {chk}")
    return pl
