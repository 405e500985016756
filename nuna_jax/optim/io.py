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

__all__ = ["save_placement", "load_placement", "placement_to_dict", "plan_digest"]

FORMAT = "nuna_jax.placement/1"
#: keys a placement file may hold: required, then optional
REQUIRED = ("format", "n_gpus", "n_tbs", "n_pages", "routing_granularity", "tb_cu", "tb_domain", "page_stack")
OPTIONAL = ("policy", "placement_granularity", "page_domain", "meta", "provenance", "system", "plan")


def plan_digest(plan) -> str:
    """SHA-256 of a plan's steps (threadblock, endpoints, buffers, offsets, bytes, phase): the plan a
    placement was made for."""
    import hashlib
    h = hashlib.sha256()
    for a in (plan.tb_gpu, plan.step_tb, plan.step_idx, plan.src_gpu, plan.src_buf, plan.src_off, plan.dst_gpu,
              plan.dst_buf, plan.dst_off, plan.nbytes, plan.phase):
        h.update(np.ascontiguousarray(np.asarray(a), dtype=np.int64).tobytes())
        h.update(b"|")
    return h.hexdigest()


def _system_params(s) -> dict:
    from ..provenance import system_params
    return system_params(s)


def placement_to_dict(s, plan, pl: Placement, meta: dict | None = None) -> dict:
    return {"format": FORMAT, "policy": pl.policy, "n_gpus": int(plan.n_gpus), "n_tbs": int(plan.n_tbs),
            "n_pages": int(pl.page_stack.shape[1]), "routing_granularity": int(pl.routing_granularity),
            "placement_granularity": int(pl.placement_granularity),
            "tb_cu": np.asarray(pl.tb_cu).tolist(), "tb_domain": np.asarray(pl.tb_domain).tolist(),
            "page_stack": np.asarray(pl.page_stack).tolist(),
            "page_domain": None if pl.page_domain is None else np.asarray(pl.page_domain).tolist(),
            "system": _system_params(s), "plan": {"collective": plan.collective, "algorithm": plan.algorithm,
                                                  "size_bytes": int(plan.size_bytes), "digest": plan_digest(plan)},
            "meta": meta or {}, "provenance": provenance()}


def save_placement(path: str, s, plan, pl: Placement, meta: dict | None = None) -> None:
    """Write the placement as strict JSON (a NaN / infinite number in ``meta`` is written as null), atomically:
    a failed write leaves an existing file as it was; ``ValueError`` "cannot write" names the path."""
    import math
    import os
    meta = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in (meta or {}).items()}
    text = json.dumps(placement_to_dict(s, plan, pl, meta), separators=(",", ":"), allow_nan=False)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise ValueError(f"cannot write placement file {path!r}: {e.strerror or e}") from None


def _no_constant(name):
    raise ValueError(f"{name} is not allowed (numbers must be finite)")


def _int(where: str, d: dict, k: str, lo: int, hi: int) -> int:
    v = d[k]
    if type(v) is not int or not lo <= v <= hi:
        raise ValueError(f"{where}: field {k} must be an integer in [{lo}, {hi}], got {str(v)[:60]}")
    return v


def _int_array(where: str, k: str, v, shape: tuple, lo: int, hi: int, dtype) -> np.ndarray:
    """Field ``k``: nested lists of integers of ``shape`` (a list of rows for 2-D), each in ``[lo, hi]``."""
    what = f"a list of {shape[0]} integers" if len(shape) == 1 else \
        f"a list of {shape[0]} lists of {shape[1]} integers"
    if not isinstance(v, list) or len(v) != shape[0]:
        got = f"a list of {len(v)}" if isinstance(v, list) else ("null" if v is None else type(v).__name__)
        raise ValueError(f"{where}: field {k} must be {what} (the plan's shape), got {got}")
    rows = [v] if len(shape) == 1 else v
    for i, r in enumerate(rows):
        if len(shape) == 2 and (not isinstance(r, list) or len(r) != shape[1]):
            got = f"a list of {len(r)}" if isinstance(r, list) else type(r).__name__
            raise ValueError(f"{where}: field {k}[{i}] must be a list of {shape[1]} integers, got {got}")
        if not all(type(x) is int for x in r):
            bad = next(x for x in r if type(x) is not int)
            raise ValueError(f"{where}: field {k} must hold integers only, got {str(bad)[:40]!r}")
    try:
        a = np.asarray(v, dtype=np.int64)
    except OverflowError:
        raise ValueError(f"{where}: field {k} must lie in [{lo}, {hi}]") from None
    if a.size and (a.min() < lo or a.max() > hi):
        raise ValueError(f"{where}: field {k} must lie in [{lo}, {hi}], got values in [{a.min()}, {a.max()}]")
    return a.astype(dtype)


def _read(path: str, where: str) -> dict:
    from ..limits import active, check_nesting
    active().check_file(path, "placement file")
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except OSError as e:
        raise ValueError(f"cannot read {where}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{where}: not UTF-8 text (byte {e.start})") from None
    try:
        d = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError(f"{where}: not valid JSON (nested too deeply)") from None
    except ValueError as e:
        raise ValueError(f"{where}: not valid JSON ({e})") from None
    check_nesting(d, where)
    if not isinstance(d, dict):
        raise ValueError(f"{where}: the top level must be a JSON object, got {type(d).__name__}")
    return d


def load_placement(path: str, s, plan) -> Placement:
    """The placement saved in ``path``, checked field by field against ``plan`` on ``s`` (types, shapes,
    ranges, and the system and plan it was saved for when the file records them); ``ValueError``
    naming the file and the field if it does not fit."""
    where = f"placement file {path!r}"
    d = _read(path, where)
    if d.get("format") != FORMAT:
        raise ValueError(f"{where}: format must be {FORMAT!r}, got {str(d.get('format'))[:60]!r}")
    unknown = sorted(str(k) for k in set(d) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)[:200]}; known: "
                         f"{', '.join(REQUIRED + OPTIONAL)}")
    missing = [k for k in REQUIRED if d.get(k) is None]
    if missing:
        raise ValueError(f"{where}: missing or null field(s) {', '.join(missing)}")
    for k, t in (("meta", dict), ("provenance", dict), ("system", dict), ("plan", dict), ("policy", str)):
        if d.get(k) is not None and not isinstance(d[k], t):
            raise ValueError(f"{where}: field {k} must be a JSON {'string' if t is str else 'object'}, "
                             f"got {type(d[k]).__name__}")
    if d.get("system") is not None:
        want = _system_params(s)
        diff = sorted(k for k in set(want) | set(d["system"]) if want.get(k) != d["system"].get(k))
        if diff:
            raise ValueError(f"{where} was saved for another system than {s.name!r} (differs in "
                             f"{', '.join(diff[:5])}); use the --system it was made for")
    n_pages = plan.address_pages(s.page_bytes)
    for k, want in (("n_gpus", plan.n_gpus), ("n_tbs", plan.n_tbs), ("n_pages", n_pages)):
        if type(d[k]) is not int or d[k] != want:
            raise ValueError(f"{where} has {k}={str(d[k])[:40]} but the plan needs {want} "
                             "(same --collective/--plan, --size, --gpus and --tbs as when it was saved)")
    if d.get("plan") is not None and d["plan"].get("digest") != plan_digest(plan):
        raise ValueError(f"{where} was saved for another plan (its steps differ: "
                         f"{str(d['plan'].get('collective'))[:40]} of {str(d['plan'].get('size_bytes'))[:40]} B); "
                         "use the --collective/--plan, --size, --gpus and --tbs it was made for")
    g = _int(where, d, "routing_granularity", 1, max(1, int(s.n_io_ports)))
    try:
        dom = nar_domains(s, g)
    except ValueError as e:
        raise ValueError(f"{where}: field routing_granularity={g}: {e}") from None
    pg = _int(where, d, "placement_granularity", 1, max(1, int(s.n_cus))) if d.get("placement_granularity") \
        is not None else g
    policy = str(d.get("policy") or "FILE")
    if len(policy) > 200:
        raise ValueError(f"{where}: field policy must be at most 200 characters")
    tb_cu = _int_array(where, "tb_cu", d["tb_cu"], (plan.n_tbs,), -1, s.n_cus - 1, np.int64)
    tb_dom = _int_array(where, "tb_domain", d["tb_domain"], (plan.n_tbs,), 0, g - 1, np.int64)
    ps = _int_array(where, "page_stack", d["page_stack"], (plan.n_gpus, n_pages), -1, s.n_hbm_stacks - 1, np.int16)
    pd = d.get("page_domain")            # NAR domain of each page (routing by address, D5), or absent
    if pd is not None:
        pd = _int_array(where, "page_domain", pd, (plan.n_gpus, n_pages), -1, g - 1, np.int16)
    pl = Placement(policy=policy, tb_cu=tb_cu, tb_domain=tb_dom, page_stack=ps, domains=dom,
                   placement_granularity=pg, cu_demand=cu_demand(s, plan),
                   cu_capacity=int(s.max_outstanding_per_cu), stack_capacity_pages=stack_capacity_pages(s, plan),
                   tb_gpu=plan.tb_gpu, page_domain=pd)
    chk = check_capacities(s, plan, pl)
    if not chk["ok"]:
        bad = [k for k in ("all_placed",) if not chk[k]] or ["cu_max_requests > cu_capacity or stack pages"]
        raise ValueError(f"{where} breaks a budget ({', '.join(bad)}): {chk}")
    return pl

