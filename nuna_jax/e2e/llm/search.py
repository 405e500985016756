"""The configuration search of NUNA section 5.2, as one batched program.

For a model, a pod of ``n_gpus`` and a phase, every (TP, EP, DP, PP, batch,
seq_len) of the grid is costed at once (``jax.jit`` of a ``jax.vmap`` over
:func:`layers.step`); configurations that break a divisibility rule or whose
weights + KV cache exceed the GPU's HBM are masked; the latency-optimal one
(TTFT for prefill, TPOT for decode) is kept under UA and under NAP+NAR.
Collective times come from the table of :mod:`collective_table`.
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from . import layers
from .collective_table import KINDS, POLICIES, interp_time_ns, load_table
from .configs import ModelConfig, load_model
from .hardware import machine

__all__ = ["search", "candidates", "check_search_work", "validate_pins", "default_batches", "PHASES", "SEQ_LENS"]

PHASES = ("prefill", "decode")
#: Prompt lengths (prefill) / context lengths (decode) searched by default.  NUNA 5.2: "We choose the
#: batch size, sequence length, and parallelization strategy that minimizes [TTFT / TPOT]"; the
#: paper gives no range, so this one is ours (docs/e2e.md "Sequence length"): 1k-32k tokens.  Every
#: cost grows with the length, so the latency objective picks the shortest one that fits.
SEQ_LENS = (1024, 2048, 4096, 8192, 16384, 32768)
_FIELDS = ("tp", "ep", "dp", "pp", "batch", "seq_len")


def default_batches(n_gpus: int) -> list[int]:
    """Requests served at once, searched by default: 1, 2, 4, .. up to the GPU count."""
    return [1 << i for i in range(int(n_gpus).bit_length())]


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def validate_pins(m: ModelConfig, n_gpus: int, pins: dict) -> None:
    """User-fixed degrees that can never work -> ValueError naming the value and the allowed range."""
    if not 1 <= n_gpus <= 64:
        raise ValueError(f"--gpus must be in 1..64 (the collective table's pod sizes, NUNA 6.7), got {n_gpus}")
    for k in ("tp", "ep", "dp", "pp"):
        v = pins.get(k)
        if v is None:
            continue
        if v < 1 or v > n_gpus or n_gpus % v:
            raise ValueError(f"{k}={v} is impossible on {n_gpus} GPUs: it must divide the GPU count "
                             f"(allowed: {', '.join(map(str, _divisors(n_gpus)))})")
    ep = pins.get("ep")
    if ep is not None and ep > 1:
        if not m.is_moe:
            raise ValueError(f"ep={ep} needs an MoE model; {m.name} is dense (use ep=1)")
        if m.n_experts % ep:
            raise ValueError(f"ep={ep} does not divide the {m.n_experts} experts of {m.name} "
                             f"(allowed: {', '.join(str(d) for d in _divisors(m.n_experts) if d <= n_gpus)})")
    tp = pins.get("tp")
    if tp is not None and m.n_heads % tp:
        raise ValueError(f"tp={tp} does not divide the {m.n_heads} attention heads of {m.name}")
    if pins.get("pp") is not None and pins["pp"] > m.n_layers:
        raise ValueError(f"pp={pins['pp']} exceeds the {m.n_layers} layers of {m.name}")
    prod = 1
    for k in ("tp", "dp", "pp"):
        prod *= pins.get(k) or 1
    if n_gpus % prod:
        raise ValueError(f"tp*dp*pp={prod} does not divide {n_gpus} GPUs")


def check_search_work(n_gpus: int, batches, seqs, pins: dict | None = None, *, limits=None,
                      source: str = "e2e search") -> int:
    """The configurations :func:`candidates` would build, and the largest batch and length, within
    the work limits (:func:`nuna_jax.limits.check_e2e_work`; default :func:`limits.active`);
    returns the count."""
    from ...limits import active, check_e2e_work
    pins = pins or {}
    d = len(_divisors(int(n_gpus)))
    n = 1
    for k in ("tp", "ep", "dp", "pp"):
        n *= 1 if pins.get(k) is not None else d
    bs, ss = {int(b) for b in batches}, {int(x) for x in seqs}
    n *= len(bs) * len(ss)
    check_e2e_work(active(limits), n_configs=n, batches=bs, seqs=ss, source=source)
    return n


def candidates(n_gpus: int, batches, seqs, pins: dict | None = None) -> dict:
    """The grid: every divisor of ``n_gpus`` for TP, EP, DP, PP, times the batches and lengths (numpy)."""
    pins = pins or {}
    axes = [[pins[k]] if pins.get(k) is not None else _divisors(n_gpus) for k in ("tp", "ep", "dp", "pp")]
    axes += [sorted({int(b) for b in batches}), sorted({int(s) for s in seqs})]
    grid = np.meshgrid(*[np.asarray(a, dtype=np.float64) for a in axes], indexing="ij")
    return {k: g.ravel() for k, g in zip(_FIELDS, grid)}


def _coll_time(log_sizes, log_times, log2_groups, kind_policy_rows, group, size):
    """Time of one collective from the table: log-log in size, log-linear between group sizes."""
    rows = log_times[kind_policy_rows]                     # [G, Z]
    x = jnp.clip(jnp.log2(jnp.maximum(group, 1.0)), log2_groups[0], log2_groups[-1]) - log2_groups[0]
    lo = jnp.clip(jnp.floor(x), 0, len(log2_groups) - 1).astype(jnp.int32)
    hi = jnp.minimum(lo + 1, len(log2_groups) - 1)
    w = x - lo
    t_lo = interp_time_ns(log_sizes, rows[lo], size)
    t_hi = interp_time_ns(log_sizes, rows[hi], size)
    t = jnp.exp((1 - w) * jnp.log(jnp.maximum(t_lo, 1e-30)) + w * jnp.log(jnp.maximum(t_hi, 1e-30)))
    return jnp.where((group > 1) & (size > 0), t, 0.0)


@functools.partial(jax.jit, static_argnames=("prefill",))
def _program(m, hw, tab, c, n_gpus, prefill: bool):
    """Cost every configuration (vmap) and pick the best under each policy (masked argmin)."""
    slot_kind = jnp.asarray([KINDS.index(k) for k, _ in layers.COLLECTIVE_SLOTS])
    slot_split = jnp.asarray(layers._SLOT_SPLIT)

    def one(tp, ep, dp, pp, batch, seq):
        r = layers.step(m, hw, tp, ep, dp, pp, batch, seq, prefill)
        ok = (tp * dp * pp == n_gpus) & (jnp.mod(tp * dp, ep) == 0) & (jnp.mod(batch, dp) == 0)
        ok &= jnp.where(m["E"] > 0, jnp.mod(m["E"], ep) == 0, ep == 1)
        ok &= (jnp.mod(m["h"], tp) == 0) & (pp <= m["n_dense"] + m["n_moe"])
        fits = r["mem_bytes"] <= hw["hbm_capacity_bytes"]
        out = {"ok": ok, "fits": fits, "compute_ns": r["compute_ns"], "mem_bytes": r["mem_bytes"]}
        for p in range(len(POLICIES)):
            t = jax.vmap(lambda kd, g, s: _coll_time(tab["log_sizes"], tab["log_times"], tab["log2_groups"],
                                                     (kd, p), g, s))(slot_kind, r["coll_group"], r["coll_bytes"])
            per_slot = t * r["coll_count"]
            split = jnp.zeros(len(layers.SPLIT_KINDS)).at[slot_split].add(per_slot)
            out[f"split_{p}"] = split
            out[f"time_{p}"] = r["compute_ns"] + per_slot.sum()
        return out

    o = jax.vmap(one)(*(c[k] for k in _FIELDS))
    good = o["ok"] & o["fits"]
    best = {}
    for p in range(len(POLICIES)):
        best[p] = jnp.argmin(jnp.where(good, o[f"time_{p}"], jnp.inf))
    picked = {p: {k: v[best[p]] for k, v in o.items()} for p in best}
    # the NAP+NAR time of the configuration chosen under UA (same deployment, NUNA-aware collectives)
    same = {"time": o["time_1"][best[0]], "split": o["split_1"][best[0]]}
    return {"best": best, "picked": picked, "same": same, "n_ok": o["ok"].sum(), "n_fit": good.sum()}


def _table_arrays(table: dict) -> dict:
    return {"log_sizes": jnp.log(jnp.asarray(table["sizes_bytes"], dtype=jnp.float32)),
            "log_times": jnp.log(jnp.asarray(table["time_ns"], dtype=jnp.float32)),
            "log2_groups": jnp.log2(jnp.asarray(table["groups"], dtype=jnp.float32))}


def _pad(c: dict, pad_to: int | None = None) -> dict:
    n = len(c["tp"])
    size = max(1 << max(6, (n - 1).bit_length()), pad_to or 0)   # few shapes -> few compilations
    out = {}
    for k, v in c.items():
        pad = np.full(size - n, v[0] if k != "tp" else 0.5)   # tp=0.5: never tp*dp*pp == n_gpus
        out[k] = jnp.asarray(np.concatenate([v, pad]), dtype=jnp.float32)
    return out


def search(model, n_gpus: int, phase: str, system, *, table: dict | None = None, batches=None, seqs=None,
           pins: dict | None = None, pad_to: int | None = None, jobs: int = 1) -> dict:
    """Latency-optimal configuration of ``model`` on ``n_gpus`` GPUs of ``system`` for ``phase``.

    ``batches`` (requests served by the pod at once; default 1, 2, 4, .. n_gpus) and ``seqs``
    (default :data:`SEQ_LENS`): all combinations are searched.  As in the paper the objective is the
    latency itself, so the smallest batch and length win unless memory excludes them; pin one
    value to study a loaded pod.  ``pad_to`` pads the grid (one compiled program for many calls).
    ``table``: the collective table (:func:`collective_table.load_table`; default: the system's,
    checked: a stale one raises ``StaleTableError``).
    Returns a JSON-ready dict (keys of the ``nuna-jax e2e --json`` output).
    """
    t0 = time.time()
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {', '.join(PHASES)}, got {phase!r}")
    m = load_model(model)
    pins = {k: v for k, v in (pins or {}).items() if v is not None}
    validate_pins(m, int(n_gpus), pins)
    batches = list(batches) if batches else default_batches(n_gpus)
    seqs = list(seqs) if seqs else list(SEQ_LENS)
    for name, vals in (("batch", batches), ("seq_len", seqs)):
        if any(int(v) < 1 for v in vals):
            raise ValueError(f"{name} values must be >= 1, got {vals}")
    check_search_work(int(n_gpus), batches, seqs, pins, source=f"e2e search of {m.name} on {n_gpus} GPUs")
    if table is None:
        need = {g for g in (2, 4, 8, 16, 32, 64) if g <= max(2, int(n_gpus))}
        table = load_table(system, groups=need, jobs=jobs)
    c = candidates(int(n_gpus), batches, seqs, pins)
    n_cfg = len(c["tp"])
    hw = {k: jnp.float32(v) for k, v in machine(system).items()}
    ma = {k: jnp.float32(v) for k, v in layers.model_arrays(m).items()}
    r = _program(ma, hw, _table_arrays(table), _pad(c, pad_to), jnp.float32(n_gpus), phase == "prefill")
    r = jax.device_get(r)
    out = {"model": m.name, "n_gpus": int(n_gpus), "phase": phase, "system": system.name,
           "pinned": dict(pins), "batch_candidates": sorted({int(b) for b in batches}),
           "seq_len_candidates": sorted({int(x) for x in seqs}),
           "configs_evaluated": n_cfg, "configs_valid": int(r["n_ok"]), "configs_fit": int(r["n_fit"])}
    if int(r["n_fit"]) == 0:
        raise ValueError(f"no configuration of {m.name} fits on {n_gpus} GPUs "
                         f"({int(r['n_ok'])} valid, none within the HBM capacity); try more GPUs")
    b0 = int(r["best"][0])
    cfg = {k: int(c[k][b0]) for k in _FIELDS}
    b1 = int(r["best"][1])
    ua = float(r["picked"][0]["time_0"])
    nap = float(r["same"]["time"])
    split = lambda comp, s: {"compute": float(comp) / 1e6,
                             **{k: float(v) / 1e6 for k, v in zip(layers.SPLIT_KINDS, s)}}
    out.update({
        "config": cfg,
        "time_ms": {"ua": ua / 1e6, "nap_nar": nap / 1e6},
        "reduction": 1.0 - nap / ua,
        "split_ms": {"ua": split(r["picked"][0]["compute_ns"], r["picked"][0]["split_0"]),
                     "nap_nar": split(r["picked"][0]["compute_ns"], r["same"]["split"])},
        "mem_gb_per_gpu": float(r["picked"][0]["mem_bytes"]) / 1e9,
        "nap_nar_best": {"config": {k: int(c[k][b1]) for k in _FIELDS},
                         "time_ms": float(r["picked"][1]["time_1"]) / 1e6},
        "wall_s": time.time() - t0,
    })
    if "status" in table:
        out["collective_table"] = table["status"]
    return out
