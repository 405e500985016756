"""LLM architectures as data (NUNA section 5.2: the 12 models of the end-to-end study).

One TOML file per model under ``data/models/`` (each names its public source;
facts checked against ``../shared/reference/llm-models.md``); users add a
model with ``load_model("path/to/model.toml")``.  Per-expert widths are
``moe_ffn`` (DeepSeek's ``moe_intermediate_size``), never the dense FFN.

Fields (integers unless noted):

* ``n_layers``, ``hidden``, ``n_heads``, ``n_kv_heads``, ``head_dim``, ``vocab``
* ``ffn``: dense (gated, 3-matrix) FFN width; 0 when no layer is dense
* ``n_dense_layers``: layers with a dense FFN (default: all if ``n_experts == 0``, else 0)
* ``n_experts``, ``top_k``, ``n_shared_experts``, ``moe_ffn``: routed experts
* ``attention``: ``"gqa"`` (default) or ``"mla"``; MLA uses ``q_lora_rank``,
  ``kv_lora_rank``, ``qk_rope_dim``, ``v_head_dim`` (``head_dim`` is qk_nope)
* ``q_lora_rank``, ``o_lora_rank``: low-rank q / o projections (0 = full)
* ``kv_shared`` (bool): one tensor serves as K and V (cache counted once)
* ``sliding_window``, ``sliding_fraction`` (float): the share of layers with a window
* ``attn_topk``: sparse attention, keys read per query (0 = all)
* ``weight_bytes`` (float, default 2 = bf16)
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

__all__ = ["ModelConfig", "load_model", "model_names", "MODELS_DIR"]

MODELS_DIR = Path(__file__).resolve().parent / "data" / "models"


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    name: str
    source: str
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab: int
    ffn: int = 0
    n_dense_layers: int = -1
    n_experts: int = 0
    top_k: int = 0
    n_shared_experts: int = 0
    moe_ffn: int = 0
    attention: str = "gqa"
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_dim: int = 0
    v_head_dim: int = 0
    o_lora_rank: int = 0
    kv_shared: bool = False
    sliding_window: int = 0
    sliding_fraction: float = 0.0
    attn_topk: int = 0
    weight_bytes: float = 2.0

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def dense_layers(self) -> int:
        return self.n_layers if not self.is_moe else max(self.n_dense_layers, 0)

    @property
    def moe_layers(self) -> int:
        return self.n_layers - self.dense_layers


_REQUIRED = ("name", "n_layers", "hidden", "n_heads", "n_kv_heads", "head_dim", "vocab")
_FIELDS = {f.name: f for f in dataclasses.fields(ModelConfig)}

#: Allowed range of every numeric field, inclusive.  Sizes and counts that must exist are >= 1;
#: a count, width or rank where 0 means "absent" (no dense FFN, no experts, a full-rank
#: projection, no window, dense attention) is >= 0; ``n_dense_layers`` -1 means the default.  The
#: upper ends are far above any published model and keep the float32 search finite.
FIELD_RANGES = {
    "n_layers": (1, 1 << 14), "hidden": (1, 1 << 18), "n_heads": (1, 1 << 14), "n_kv_heads": (1, 1 << 14),
    "head_dim": (1, 1 << 14), "vocab": (1, 1 << 24), "ffn": (0, 1 << 22), "n_dense_layers": (-1, 1 << 14),
    "n_experts": (0, 1 << 14), "top_k": (0, 1 << 14), "n_shared_experts": (0, 1 << 10), "moe_ffn": (0, 1 << 22),
    "q_lora_rank": (0, 1 << 18), "kv_lora_rank": (0, 1 << 18), "qk_rope_dim": (0, 1 << 14),
    "v_head_dim": (0, 1 << 14), "o_lora_rank": (0, 1 << 18), "sliding_window": (0, 1 << 26),
    "sliding_fraction": (0.0, 1.0), "attn_topk": (0, 1 << 26), "weight_bytes": (0.125, 64.0),
}
_MAX_TEXT = {"name": 200, "source": 2000}


def _validate(m: ModelConfig, where: str) -> ModelConfig:
    import math
    for k, (lo, hi) in FIELD_RANGES.items():
        v = getattr(m, k)
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"{where}: field {k} must be a finite number in [{lo:g}, {hi:g}], got {v!r}")
        if not lo <= v <= hi:
            raise ValueError(f"{where}: field {k} must be in [{lo:g}, {hi:g}], got {v!r}")
    for k, n in _MAX_TEXT.items():
        v = getattr(m, k)
        if not v.strip() or len(v) > n:
            raise ValueError(f"{where}: field {k} must be a non-empty string of at most {n} characters")
    if m.n_kv_heads > m.n_heads:
        raise ValueError(f"{where}: n_kv_heads={m.n_kv_heads} exceeds n_heads={m.n_heads}")
    if not m.is_moe and (m.top_k or m.n_shared_experts or m.moe_ffn):
        raise ValueError(f"{where}: top_k, n_shared_experts and moe_ffn need routed experts (n_experts >= 1; "
                         f"got n_experts=0, top_k={m.top_k}, n_shared_experts={m.n_shared_experts}, "
                         f"moe_ffn={m.moe_ffn})")
    if m.sliding_fraction > 0 and m.sliding_window < 1:
        raise ValueError(f"{where}: sliding_fraction={m.sliding_fraction:g} needs sliding_window >= 1")
    if m.attention not in ("gqa", "mla"):
        raise ValueError(f"{where}: attention must be 'gqa' or 'mla', got {m.attention!r}")
    if m.n_heads % m.n_kv_heads:
        raise ValueError(f"{where}: n_heads={m.n_heads} is not a multiple of n_kv_heads={m.n_kv_heads}")
    if m.is_moe:
        if not (1 <= m.top_k <= m.n_experts) or m.moe_ffn < 1:
            raise ValueError(f"{where}: an MoE model needs 1 <= top_k <= n_experts={m.n_experts} and "
                             f"moe_ffn >= 1 (got top_k={m.top_k}, moe_ffn={m.moe_ffn})")
        if not 0 <= m.dense_layers <= m.n_layers:
            raise ValueError(f"{where}: n_dense_layers must be in [0, n_layers={m.n_layers}]")
    if m.dense_layers > 0 and m.ffn < 1:
        raise ValueError(f"{where}: {m.dense_layers} dense layers need ffn >= 1, got {m.ffn}")
    if m.attention == "mla" and (m.kv_lora_rank < 1 or m.v_head_dim < 1):
        raise ValueError(f"{where}: MLA needs kv_lora_rank >= 1 and v_head_dim >= 1")
    if not 0.0 <= m.sliding_fraction <= 1.0:
        raise ValueError(f"{where}: sliding_fraction must be in [0, 1], got {m.sliding_fraction}")
    if m.weight_bytes <= 0:
        raise ValueError(f"{where}: weight_bytes must be > 0, got {m.weight_bytes}")
    return m


def from_dict(d: dict, where: str = "model") -> ModelConfig:
    from ...limits import check_nesting
    if not isinstance(d, dict):
        raise ValueError(f"{where}: a model must be a table of fields, got {type(d).__name__}")
    check_nesting(d, where)
    d = d.get("model", d)
    if not isinstance(d, dict):
        raise ValueError(f"{where}: [model] must be a table of fields, got {type(d).__name__}")
    d = dict(d)
    unknown = sorted(set(d) - set(_FIELDS))
    if unknown:
        raise ValueError(f"{where}: unknown model field(s) {', '.join(unknown)}; known: {', '.join(_FIELDS)}")
    missing = [k for k in _REQUIRED if k not in d]
    if missing:
        raise ValueError(f"{where}: missing model field(s) {', '.join(missing)}")
    d.setdefault("source", "user file")
    for k, v in d.items():
        f = _FIELDS[k]
        want = f.type if isinstance(f.type, type) else {"int": int, "float": float, "str": str,
                                                          "bool": bool}[f.type]
        if want is float and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if not isinstance(v, want) or (want is int and isinstance(v, bool)):
            raise ValueError(f"{where}: field {k} must be {_KIND[want]}, got {str(v)[:60]!r}")
        d[k] = v
    return _validate(ModelConfig(**d), where)


_KIND = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def _read_toml(path: Path, what: str = "model file") -> dict:
    """A TOML file's table, within the file-size and nesting limits; ``ValueError`` naming the file."""
    import tomllib

    from ...limits import active, check_nesting
    active().check_file(path, what)
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: invalid TOML: {e}") from None
    except RecursionError:
        raise ValueError(f"{path}: invalid TOML: nested too deeply") from None
    check_nesting(data, str(path))
    return data


def model_names() -> list[str]:
    """The shipped models (NUNA section 5.2), in the paper's order."""
    order = ["llama-7b", "llama-70b", "llama-405b", "gpt-oss-20b", "gpt-oss-120b", "mixtral-8x7b",
             "mixtral-8x22b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3.2", "deepseek-v4-flash",
             "deepseek-v4-pro"]
    have = {p.stem for p in MODELS_DIR.glob("*.toml")}
    return [n for n in order if n in have] + sorted(have - set(order))


def load_model(spec: str | ModelConfig) -> ModelConfig:
    """A shipped model by name (case-insensitive) or a TOML file path."""
    if isinstance(spec, ModelConfig):
        return spec
    s = str(spec)
    if s.endswith(".toml"):
        p = Path(s)
        return from_dict(_read_toml(p), str(p))     # missing, not a regular file, too big: ValueError
    p = MODELS_DIR / f"{s.lower()}.toml"
    if not p.is_file():
        raise ValueError(f"unknown model {s!r}; choose one of {', '.join(model_names())} or give a .toml file")
    return from_dict(_read_toml(p), str(p))
