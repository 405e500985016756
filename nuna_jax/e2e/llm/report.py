"""Every model x GPU count x phase (NUNA section 6.7) and the summary beside the paper's numbers.

What ``--all`` runs is a :class:`RunConfig`: the models, GPU counts and phases, and per model
the search's pins and candidate lists (``tp``, ``ep``, ``dp``, ``pp``; ``batch``, ``seq_len``),
from command-line flags or a TOML file (:func:`load_run_config`; examples/e2e/*.toml)::

    models = ["llama-70b"]          # default: the 12 shipped models
    gpus = [64]                     # default: 2, 4, 8, 16, 32, 64
    phases = ["prefill", "decode"]  # default: both
    [search]                        # every model (a [model.NAME] table overrides it)
    seq_len = [1024, 2048, 4096]    # an int or a list; default search.SEQ_LENS
    [model.llama-70b]
    tp = 8                          # pin the degree (NUNA 6.7's Llama-70B point)
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

from .collective_table import GROUP_SIZES, load_table
from .configs import load_model, model_names
from .layers import SPLIT_KINDS
from .search import PHASES, SEQ_LENS, candidates, check_search_work, default_batches, search, validate_pins

__all__ = ["run_all", "summarize", "PAPER", "GPU_COUNTS", "RunConfig", "load_run_config", "PIN_KEYS",
           "LIST_KEYS"]

GPU_COUNTS = (2, 4, 8, 16, 32, 64)
PIN_KEYS = ("tp", "ep", "dp", "pp")
LIST_KEYS = ("batch", "seq_len")
# NUNA section 6.7
PAPER = {"ttft_reduction_geomean": 0.06, "ttft_reduction_max": 0.11, "tpot_reduction_geomean": 0.07,
         "tpot_reduction_max": 0.28, "comm_speedup_prefill": 1.32, "comm_speedup_decode": 1.56,
         "allreduce_speedup": 1.54, "alltoall_speedup": 1.48,
         "llama70b_64gpu": {"tp": 8, "prefill_speedup": 0.08, "decode_speedup": 0.16}}


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """What ``e2e --all`` runs: models x GPU counts x phases, with per-model search settings."""
    models: tuple = ()                  # empty: every shipped model
    gpu_counts: tuple = GPU_COUNTS
    phases: tuple = PHASES
    search: dict = dataclasses.field(default_factory=dict)      # every model
    per_model: dict = dataclasses.field(default_factory=dict)   # name -> settings over ``search``
    system: str | None = None
    source: str = "defaults"

    def model_list(self) -> list[str]:
        return list(self.models) or model_names()

    def settings(self, model: str) -> dict:
        """The search settings of ``model``: ``search`` overridden by its own table."""
        return {**self.search, **self.per_model.get(model, {})}

    def with_flags(self, **flags) -> "RunConfig":
        """Command-line values (not None) override the file for every model."""
        given = {k: v for k, v in flags.items() if v is not None}
        if not given:
            return self
        per = {m: {k: v for k, v in s.items() if k not in given} for m, s in self.per_model.items()}
        src = self.source + " + flags" if self.source != "defaults" else "flags"
        return dataclasses.replace(self, search={**self.search, **given}, per_model=per, source=src)

    def describe(self) -> dict:
        return {"source": self.source, "models": self.model_list(), "gpu_counts": list(self.gpu_counts),
                "phases": list(self.phases), "search": dict(self.search),
                "per_model": {k: dict(v) for k, v in self.per_model.items()}}


def _settings(d, where: str) -> dict:
    if not isinstance(d, dict):
        raise ValueError(f"{where} must be a table of {', '.join(PIN_KEYS + LIST_KEYS)}")
    out = {}
    for k, v in d.items():
        if k in PIN_KEYS:
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{where}.{k} must be an integer >= 1, got {v!r}")
            out[k] = v
        elif k in LIST_KEYS:
            vals = [v] if isinstance(v, int) and not isinstance(v, bool) else v
            if (not isinstance(vals, list) or not vals
                    or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in vals)):
                raise ValueError(f"{where}.{k} must be an integer >= 1 or a non-empty list of them, got {v!r}")
            out[k] = sorted(set(vals))
        else:
            raise ValueError(f"{where}: unknown key {k!r}; known: {', '.join(PIN_KEYS + LIST_KEYS)}")
    return out


def load_run_config(path: str | Path) -> RunConfig:
    """A :class:`RunConfig` from a TOML file (module doc); ValueError naming the file and key."""
    from .configs import _read_toml
    p = Path(path)
    d = _read_toml(p, "e2e config")
    where = str(p)
    known = {"models", "gpus", "phases", "search", "model", "system", "note"}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    kw = {"source": where}
    if "models" in d:
        if not isinstance(d["models"], list) or not d["models"] or not all(isinstance(m, str) for m in d["models"]):
            raise ValueError(f"{where}: models must be a non-empty list of model names")
        for m in d["models"]:
            load_model(m)                                   # unknown names fail here, naming the model
        kw["models"] = tuple(d["models"])
    if "gpus" in d:
        g = d["gpus"] if isinstance(d["gpus"], list) else [d["gpus"]]
        if not g or not all(isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= 64 for x in g):
            raise ValueError(f"{where}: gpus must be GPU counts in 1..64, got {d['gpus']!r}")
        kw["gpu_counts"] = tuple(sorted(set(g)))
    if "phases" in d:
        ph = d["phases"] if isinstance(d["phases"], list) else [d["phases"]]
        if not ph or not all(x in PHASES for x in ph):
            raise ValueError(f"{where}: phases must be among {', '.join(PHASES)}, got {d['phases']!r}")
        kw["phases"] = tuple(x for x in PHASES if x in ph)
    if "system" in d:
        if not isinstance(d["system"], str):
            raise ValueError(f"{where}: system must be a preset name or a TOML path")
        kw["system"] = d["system"]
    kw["search"] = _settings(d.get("search", {}), f"{where}: [search]")
    per = d.get("model", {})
    if not isinstance(per, dict):
        raise ValueError(f"{where}: [model.NAME] must be tables")
    kw["per_model"] = {}
    for name, sets in per.items():
        load_model(name)
        kw["per_model"][name] = _settings(sets, f"{where}: [model.{name}]")
    return RunConfig(**kw)


def _geo(xs):
    """Geometric mean of the positive finite values; None (JSON null) when there are none."""
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def run_all(system, models=None, gpu_counts=GPU_COUNTS, progress=None, jobs: int = 1, *,
            config: RunConfig | None = None, table: dict | None = None) -> dict:
    """Search every point of ``config`` (default: every model, ``gpu_counts``, both phases).

    Points where nothing fits are listed in ``no_fit``; points where a pinned degree is
    impossible (e.g. ``tp = 8`` on 4 GPUs) in ``skipped`` with the reason; a model whose pins
    are impossible at every point is an error.
    """
    t0 = time.time()
    cfg = config or RunConfig(models=tuple(models or ()), gpu_counts=tuple(gpu_counts))
    counts = tuple(cfg.gpu_counts)
    if table is None:
        table = load_table(system, groups=[g for g in GROUP_SIZES if g <= max(2, max(counts))], jobs=jobs)
    pad = 0                   # one padded size: two compilations (prefill, decode) in all
    for m in cfg.model_list():
        st = cfg.settings(m)
        for n in counts:
            bs, ss = st.get("batch") or default_batches(n), st.get("seq_len") or SEQ_LENS
            pins = {k: st[k] for k in PIN_KEYS if k in st}
            check_search_work(n, bs, ss, pins, source=f"e2e --all: {m} on {n} GPUs")
            grid = candidates(n, bs, ss, pins)
            pad = max(pad, len(grid["tp"]))
    points, no_fit, skipped, n_cfg = [], [], [], 0
    for m in cfg.model_list():
        st = cfg.settings(m)
        pins = {k: st[k] for k in PIN_KEYS if k in st}
        ran = 0
        for n in counts:
            try:
                validate_pins(load_model(m), n, pins)
            except ValueError as e:
                skipped.extend({"model": m, "n_gpus": n, "phase": ph, "reason": str(e)} for ph in cfg.phases)
                continue
            ran += 1
            for ph in cfg.phases:
                try:
                    r = search(m, n, ph, system, table=table, pins=pins, batches=st.get("batch"),
                               seqs=st.get("seq_len"), pad_to=pad)
                except ValueError as e:
                    if "fits" not in str(e):
                        raise
                    no_fit.append({"model": m, "n_gpus": n, "phase": ph})
                    continue
                n_cfg += r["configs_evaluated"]
                points.append(r)
                if progress:
                    progress(r)
        if not ran:
            why = next((s["reason"] for s in skipped if s["model"] == m), "")
            raise ValueError(f"{m}: the settings {st} are impossible on every GPU count "
                             f"{', '.join(map(str, counts))} ({why})")
    wall = time.time() - t0
    return {"system": system.name, "run_config": cfg.describe(), "points": points, "no_fit": no_fit,
            "skipped": skipped, "configs_evaluated": n_cfg, "wall_s": wall, "configs_per_s": n_cfg / wall,
            "collective_table": table.get("status"), "summary": summarize(points)}


def summarize(points: list[dict]) -> dict:
    """Geometric-mean / max reductions and per-kind geometric-mean collective speedups (None where no
    point has the quantity, e.g. All-to-All of a dense model)."""
    out = {}
    for ph, key in (("prefill", "ttft"), ("decode", "tpot")):
        pts = [p for p in points if p["phase"] == ph]
        sp = [p["time_ms"]["ua"] / p["time_ms"]["nap_nar"] for p in pts]
        g = _geo(sp)
        out[f"{key}_reduction_geomean"] = 1 - 1 / g if g else None
        out[f"{key}_reduction_max"] = max((p["reduction"] for p in pts), default=None)
        comm = lambda s: sum(s[k] for k in SPLIT_KINDS)
        cs = [comm(p["split_ms"]["ua"]) / comm(p["split_ms"]["nap_nar"]) for p in pts
              if comm(p["split_ms"]["nap_nar"]) > 0]
        out[f"comm_speedup_{ph}"] = _geo(cs)
        ratio = [p["split_ms"]["ua"]["compute"] / comm(p["split_ms"]["ua"]) for p in pts
                 if comm(p["split_ms"]["ua"]) > 0]
        out[f"compute_to_comm_{ph}"] = _geo(ratio)
        out[f"points_{ph}"] = len(pts)
        out[f"points_with_comm_{ph}"] = len(cs)
    for k in SPLIT_KINDS:
        xs = [p["split_ms"]["ua"][k] / p["split_ms"]["nap_nar"][k] for p in points
              if p["split_ms"]["nap_nar"][k] > 0]
        out[f"{k}_speedup"] = _geo(xs)
    for p in points:
        if p["model"] == "llama-70b" and p["n_gpus"] == 64:
            out.setdefault("llama70b_64gpu", {})[p["phase"]] = {"config": p["config"],
                                                                 "reduction": p["reduction"]}
    return out
