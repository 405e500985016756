"""BookSim2 configuration files for ``nuna-jax noc`` (docs/noc.md).

A BookSim2 file is a list of ``key = value;`` statements with ``//`` and ``/* */`` comments;
command-line ``key=value`` overrides follow it, as ``booksim CONFIG key=value`` takes them.
Every key BookSim2's router and traffic manager read for this model is known here with
BookSim2's own default (``booksim_config.cpp``); a key outside that list, or a value the model
does not implement, is refused with a ``ValueError`` naming the key (the CLI: exit 2, one line).
This module imports nothing heavy (the CLI parses before numba loads).
"""

from __future__ import annotations

import math
import re

__all__ = ["DEFAULTS", "TRAFFIC_PATTERNS", "NocConfig", "parse_config_text", "load_config", "parse_override"]

TRAFFIC_PATTERNS = ("uniform", "transpose", "bitcomp", "bitrev", "shuffle", "tornado", "neighbor")

#: BookSim2's defaults for the keys this model reads
DEFAULTS = {
    "topology": "torus", "k": 8, "n": 2, "c": 1, "routing_function": "none",
    "num_vcs": 16, "vc_buf_size": 8, "buf_size": -1, "wait_for_tail_credit": 0,
    "vc_allocator": "islip", "sw_allocator": "islip", "alloc_iters": 1,
    "credit_delay": 0, "routing_delay": 1, "vc_alloc_delay": 1, "sw_alloc_delay": 1,
    "st_prepare_delay": 0, "st_final_delay": 1,
    "input_speedup": 1, "output_speedup": 1, "internal_speedup": 1.0,
    "traffic": "uniform", "packet_size": 1, "injection_rate": 0.1, "injection_rate_uses_flits": 0,
    "injection_process": "bernoulli", "sim_type": "latency", "warmup_periods": 3, "sample_period": 1000,
    "max_samples": 10, "sim_count": 1, "latency_thres": 500.0, "stopping_threshold": 0.05,
    "acc_stopping_threshold": 0.05, "warmup_threshold": 0.05, "acc_warmup_threshold": 0.05,
    "seed": 0, "classes": 1, "subnets": 1, "priority": "none", "speculative": 0, "noq": 0,
    "hold_switch_for_packet": 0, "vc_busy_when_full": 0, "vc_prioritize_empty": 0, "include_queuing": 1,
    "use_read_write": 0, "sim_power": 0, "print_activity": 0, "viewer_trace": 0, "deadlock_warn_timeout": 256,
    "watch_out": "", "stats_out": "", "print_csv_results": 0, "measure_stats": 1,
}

#: keys whose only supported value is BookSim2's default (the model has no other)
FIXED = ("c", "buf_size", "alloc_iters", "st_prepare_delay", "st_final_delay", "output_speedup",
         "internal_speedup", "sim_count", "classes", "subnets", "priority", "speculative", "noq",
         "hold_switch_for_packet", "vc_busy_when_full", "vc_prioritize_empty", "include_queuing",
         "use_read_write", "sim_power", "print_activity", "viewer_trace", "watch_out", "stats_out",
         "print_csv_results", "measure_stats")
#: keys that only name the choice BookSim2 makes anyway (accepted, checked)
CHOICES = {"topology": ("mesh", "torus"), "routing_function": ("dor",), "vc_allocator": ("islip",),
           "sw_allocator": ("islip",), "traffic": TRAFFIC_PATTERNS, "injection_process": ("bernoulli",),
           "sim_type": ("latency",)}
# integer keys: (lo, hi)
INT_RANGES = {"k": (2, 1024), "n": (1, 10), "num_vcs": (1, 64), "vc_buf_size": (1, 1024),
              "wait_for_tail_credit": (0, 1), "credit_delay": (0, 64), "routing_delay": (0, 64),
              "vc_alloc_delay": (1, 64), "sw_alloc_delay": (1, 64), "input_speedup": (1, 64),
              "packet_size": (1, 4096), "injection_rate_uses_flits": (0, 1), "warmup_periods": (1, 1000),
              "sample_period": (1, 1 << 20), "max_samples": (1, 1000), "seed": (0, (1 << 31) - 1),
              "deadlock_warn_timeout": (0, 1 << 30)}
FLOAT_RANGES = {"injection_rate": (0.0, 1.0), "latency_thres": (0.0, 1e9), "stopping_threshold": (0.0, 1e9),
                "acc_stopping_threshold": (0.0, 1e9), "warmup_threshold": (0.0, 1e9),
                "acc_warmup_threshold": (0.0, 1e9)}

_STMT = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$", re.S)


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _convert(key: str, raw: str, where: str):
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        raw = raw[1:-1]
    if key not in DEFAULTS:
        raise ValueError(f"unknown configuration key {key!r}{where}: nuna-jax noc models BookSim2's "
                         "mesh/torus input-queued router; see docs/noc.md for the keys it reads")
    if raw.startswith("{"):
        raise ValueError(f"configuration key {key!r}{where}: arrays (per-class values) are not supported")
    default = DEFAULTS[key]
    if key in INT_RANGES:
        try:
            v = float(raw)
        except ValueError:
            raise ValueError(f"configuration key {key!r}{where}: {raw!r} is not a number") from None
        lo, hi = INT_RANGES[key]
        if not math.isfinite(v) or v != int(v) or not lo <= v <= hi:
            raise ValueError(f"configuration key {key!r}{where}: {raw!r} must be an integer in [{lo}, {hi}]")
        return int(v)
    if key in FLOAT_RANGES or isinstance(default, float):
        try:
            v = float(raw)
        except ValueError:
            raise ValueError(f"configuration key {key!r}{where}: {raw!r} is not a number") from None
        lo, hi = FLOAT_RANGES.get(key, (-math.inf, math.inf))
        if not math.isfinite(v) or not lo <= v <= hi:
            raise ValueError(f"configuration key {key!r}{where}: {raw!r} must be a finite number in [{lo:g}, {hi:g}]")
        return v
    if isinstance(default, int):
        try:
            v = float(raw)
        except ValueError:
            raise ValueError(f"configuration key {key!r}{where}: {raw!r} is not a number") from None
        return int(v) if math.isfinite(v) and v == int(v) else v
    return raw


def parse_config_text(text: str, source: str = "the configuration") -> dict:
    """``{key: value}`` from BookSim2 configuration text (values converted and range-checked)."""
    out = {}
    body = _strip_comments(text)
    line = 1
    for stmt in body.split(";"):
        lead = stmt[:len(stmt) - len(stmt.lstrip())]
        where = f" ({source} line {line + lead.count(chr(10))})"
        line += stmt.count("\n")
        if not stmt.strip():
            continue
        m = _STMT.match(stmt)
        if not m:
            raise ValueError(f"{source}: cannot read statement {stmt.strip()[:60]!r}{where} (want key = value;)")
        out[m.group(1)] = _convert(m.group(1), m.group(2), where)
    return out


def parse_override(item: str) -> tuple[str, object]:
    """One command-line ``key=value``."""
    if "=" not in item:
        raise ValueError(f"override {item!r}: want key=value")
    k, v = item.split("=", 1)
    k = k.strip()
    return k, _convert(k, v, " (command line)")


class NocConfig(dict):
    """The merged configuration (defaults, file, overrides), checked for what the model supports."""

    def check(self) -> "NocConfig":
        for key in FIXED:
            if self[key] != DEFAULTS[key]:
                raise ValueError(f"configuration key {key!r} = {self[key]!r} is not supported (only BookSim2's "
                                 f"default {DEFAULTS[key]!r})")
        for key, allowed in CHOICES.items():
            if self[key] not in allowed:
                raise ValueError(f"configuration key {key!r} = {self[key]!r} is not supported "
                                 f"(supported: {', '.join(allowed)})")
        if self["input_speedup"] > self["num_vcs"]:
            raise ValueError(f"configuration key 'input_speedup' = {self['input_speedup']} exceeds num_vcs "
                             f"= {self['num_vcs']}")
        if self["topology"] == "torus" and self["num_vcs"] < 2:
            raise ValueError("configuration key 'num_vcs' must be >= 2 on a torus (dateline VC classes)")
        nodes = self["k"] ** self["n"]
        from ..limits import active
        lim = active()
        lim.check("mesh_routers", nodes, f"configuration keys 'k' and 'n' (k^n = {self['k']}^{self['n']})")
        if nodes > 1 << 20:   # the simulator's flit word holds a destination in 20 bits (noc/kernel.py)
            raise ValueError(f"configuration keys 'k' and 'n': k^n = {nodes} nodes; the model holds at most 2^20")
        # the simulation's work and memory, before anything is allocated (a buffer slot, a router-cycle
        # and a simulated flit each count as one flit against the `flits` limit)
        lim.check("flits", nodes * (2 * self["n"] + 1) * self["num_vcs"] * self["vc_buf_size"],
                  "configuration keys 'num_vcs' and 'vc_buf_size' (buffer slots: k^n x (2n + 1) ports x num_vcs x "
                  "vc_buf_size)")
        lim.check("flits", nodes * self["sample_period"] * (self["warmup_periods"] + self["max_samples"]),
                  "configuration keys 'sample_period', 'warmup_periods' and 'max_samples' (router-cycles: k^n x "
                  "sample_period x (warmup_periods + max_samples))")
        lim.check("flits", int(nodes * self.packet_rate * self["packet_size"] * self.max_cycles),
                  "configuration keys 'injection_rate' and 'packet_size' (flits: k^n x packets/node/cycle x "
                  "packet_size x the run's cycle bound)")
        if self["traffic"] in ("transpose", "bitrev", "shuffle", "bitcomp") and nodes & (nodes - 1):
            raise ValueError(f"configuration key 'traffic' = {self['traffic']!r} needs a power-of-two node count "
                             f"(k^n = {nodes})")
        if self["traffic"] == "transpose" and (nodes.bit_length() - 1) % 2:
            raise ValueError(f"configuration key 'traffic' = 'transpose' needs an even log2 of the node count "
                             f"(k^n = {nodes})")
        return self

    @property
    def nodes(self) -> int:
        return self["k"] ** self["n"]

    @property
    def max_cycles(self) -> int:
        """The run's cycle bound: warm-up and sample periods, then a drain of at most 50 periods + 100,000
        cycles (a run still draining then ends as unstable)."""
        period = self["sample_period"]
        return period * (self["warmup_periods"] + self["max_samples"]) + 50 * period + 100000

    @property
    def packet_rate(self) -> float:
        """Packets per node per cycle (BookSim2: ``injection_rate`` is in packets unless
        ``injection_rate_uses_flits``)."""
        r = float(self["injection_rate"])
        return r / self["packet_size"] if self["injection_rate_uses_flits"] else r


def load_config(path=None, overrides=(), text: str | None = None) -> NocConfig:
    """Defaults, then the file (``path`` or ``text``), then ``key=value`` overrides; checked."""
    cfg = NocConfig(DEFAULTS)
    if path is not None:
        from ..limits import active
        active().check_file(path, "configuration file")
        with open(path, "rb") as fh:
            raw = fh.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"configuration file {str(path)!r} is not UTF-8 text") from None
    if text is not None:
        cfg.update(parse_config_text(text, f"{path}" if path is not None else "the configuration"))
    for item in overrides:
        k, v = parse_override(item) if isinstance(item, str) else (item[0], _convert(item[0], str(item[1]), ""))
        cfg[k] = v
    return cfg.check()
