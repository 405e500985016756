"""One inference step decomposed per layer: FLOPs, HBM bytes, memory and collectives (NUNA 5.2).

All functions are plain arithmetic on ``jax.numpy`` (or Python numbers): they
``vmap`` over configurations and can be checked by hand.  Per GPU, per layer:

Parallelism (``tp * dp * pp`` GPUs; ``ep`` divides ``tp * dp``):
* attention and dense FFN: Megatron tensor parallel over ``tp`` (heads and FFN
  columns split); two All-Reduces of ``T * H * b`` per dense layer, one after
  attention in an MoE layer (T = tokens of one replica, b = 2 bytes);
* MoE: each GPU of a TP group takes ``ceil(T / tp)`` of the replica's tokens,
  experts are split over ``ep`` GPUs (replicated ``tp*dp/ep`` times); All-to-All
  dispatch and combine, each ``ceil(T/tp) * min(k, ep) * H * b`` per GPU
  (``../shared/reference/llm-models.md``), then an All-Gather over ``tp`` of
  ``T * H * b`` restores the replicated activations;
* ``dp`` replicas each serve ``batch / dp`` requests (no collective);
* ``pp`` stages run one after another (latency: no micro-batch overlap), with a
  point-to-point send of ``T * H * b`` between stages, timed as a 2-GPU
  All-Gather of ``2 T H b`` (each GPU sends its half to the other);
* once per step: vocabulary-parallel embedding All-Reduce (``T * H * b``) and
  the LM head's All-Gather of the logits of the last position of each request
  (``B * V * b``).

Compute is a roofline per block (attention, FFN/MoE, LM head):
``max(flops / F, bytes / BW)`` with weights and KV-cache traffic as bytes;
compute and communication are serialized (NUNA 5.2).
"""

from __future__ import annotations

import jax.numpy as jnp

from .configs import ModelConfig
from .hardware import ACT_BYTES

__all__ = ["model_arrays", "causal_pairs", "attention", "dense_ffn", "moe", "lm_head", "step",
           "COLLECTIVE_SLOTS", "SPLIT_KINDS"]

# slot -> (collective kind, what it is); order of step()["coll_*"] arrays
COLLECTIVE_SLOTS = (
    ("allreduce", "attention output (TP)"),
    ("allreduce", "dense FFN output (TP)"),
    ("alltoall", "MoE dispatch + combine (EP)"),
    ("allgather", "MoE output (TP)"),
    ("allreduce", "embedding (TP)"),
    ("allgather", "LM-head logits (TP)"),
    ("allgather", "pipeline send (PP, 2-GPU)"),
)
SPLIT_KINDS = ("allreduce", "alltoall", "allgather", "p2p")
_SLOT_SPLIT = (0, 0, 1, 2, 0, 2, 3)     # slot -> index in SPLIT_KINDS


def model_arrays(m: ModelConfig) -> dict:
    """The numbers of a model as floats (a pytree: one compiled program serves every model)."""
    mla = m.attention == "mla"
    qk = m.head_dim + (m.qk_rope_dim if mla else 0)
    v = m.v_head_dim if mla else m.head_dim
    h, H, kv = m.n_heads, m.hidden, m.n_kv_heads
    q_params = (H * m.q_lora_rank + m.q_lora_rank * h * qk) if m.q_lora_rank else H * h * qk
    if mla:
        kv_params = H * (m.kv_lora_rank + m.qk_rope_dim) + m.kv_lora_rank * h * (m.head_dim + v)
        kv_elems = m.kv_lora_rank + m.qk_rope_dim          # latent cache, replicated over TP
    else:
        kv_params = H * kv * m.head_dim * (1 if m.kv_shared else 2)
        kv_elems = kv * m.head_dim * (1 if m.kv_shared else 2)
    o_params = (h * v * m.o_lora_rank + m.o_lora_rank * H) if m.o_lora_rank else h * v * H
    f = float
    return {
        "n_dense": f(m.dense_layers), "n_moe": f(m.moe_layers), "H": f(H), "h": f(h), "kv": f(kv),
        "qk": f(qk), "v": f(v), "mla": f(mla), "attn_params": f(q_params + kv_params + o_params),
        "kv_elems": f(kv_elems), "ffn": f(m.ffn), "E": f(m.n_experts), "k": f(m.top_k),
        "n_shared": f(m.n_shared_experts), "moe_ffn": f(m.moe_ffn), "V": f(m.vocab),
        "window": f(m.sliding_window), "window_frac": f(m.sliding_fraction), "topk": f(m.attn_topk),
        "wb": f(m.weight_bytes),
    }


def causal_pairs(S, cap):
    """Query-key pairs of one causal sequence of S tokens when each query sees at most ``cap`` keys
    (``cap <= 0``: no cap): sum_{i=1..S} min(i, cap)."""
    full = S * (S + 1) / 2
    c = jnp.where(cap > 0, jnp.minimum(cap, S), S)
    return jnp.where(c >= S, full, c * S - c * (c - 1) / 2)


def _keys(S, cap):
    return jnp.where(cap > 0, jnp.minimum(S, cap), S)


def attention(m: dict, tp, batch, seq, prefill: bool) -> dict:
    """One attention block on one GPU of a replica serving ``batch`` requests of context ``seq``."""
    T = batch * seq if prefill else batch
    f = m["window_frac"]
    if prefill:
        pairs = (1 - f) * causal_pairs(seq, m["topk"]) + f * causal_pairs(seq, m["window"])
    else:
        pairs = (1 - f) * _keys(seq, m["topk"]) + f * _keys(seq, m["window"])
    cached = (1 - f) * seq + f * _keys(seq, m["window"])      # tokens kept per request (sparse: all kept)
    read = (1 - f) * _keys(seq, m["topk"]) + f * _keys(seq, m["window"])         # tokens read per query
    # KV cache share of one GPU: GQA splits KV heads over TP (replicated beyond kv); MLA replicates
    kv_share = jnp.where(m["mla"] > 0, 1.0, jnp.ceil(m["kv"] / tp) / m["kv"])
    kv_tok_bytes = m["kv_elems"] * kv_share * ACT_BYTES
    flops = 2 * m["attn_params"] * T / tp + 2 * (m["qk"] + m["v"]) * (m["h"] / tp) * batch * pairs
    w_bytes = m["attn_params"] * m["wb"] / tp
    kv_traffic = kv_tok_bytes * (T if prefill else batch * read)
    return {"flops": flops, "bytes": w_bytes + kv_traffic, "weight_bytes": w_bytes,
            "kv_bytes": kv_tok_bytes * batch * cached}


def dense_ffn(m: dict, tp, tokens) -> dict:
    """Gated FFN (3 matrices of H x F), columns split over TP."""
    w = 3 * m["H"] * m["ffn"]
    return {"flops": 2 * w * tokens / tp, "bytes": w * m["wb"] / tp, "weight_bytes": w * m["wb"] / tp}


def moe(m: dict, tp, ep, tokens) -> dict:
    """Routed + shared experts on one GPU holding E/ep experts and ceil(tokens/tp) tokens."""
    t_local = jnp.ceil(tokens / tp)
    w_exp = 3 * m["H"] * m["moe_ffn"]
    e_local = m["E"] / ep
    touched = 1 - (1 - m["k"] / jnp.maximum(m["E"], 1)) ** (ep * t_local)   # share of local experts hit
    flops = 2 * t_local * (m["H"] * m["E"] + w_exp * (m["k"] + m["n_shared"]))
    held = (e_local + m["n_shared"]) * w_exp * m["wb"] + m["H"] * m["E"] * m["wb"]
    read = (e_local * touched + m["n_shared"]) * w_exp * m["wb"] + m["H"] * m["E"] * m["wb"]
    return {"flops": flops, "bytes": read, "weight_bytes": held, "t_local": t_local}


def lm_head(m: dict, tp, batch) -> dict:
    """Logits of the last position of each request, vocabulary split over TP."""
    w = m["H"] * m["V"]
    return {"flops": 2 * w * batch / tp, "bytes": w * m["wb"] / tp, "weight_bytes": w * m["wb"] / tp}


def _roof(blk, hw):
    return jnp.maximum(blk["flops"] / hw["flops_per_ns"], blk["bytes"] / hw["hbm_bytes_per_ns"])


def step(m: dict, hw: dict, tp, ep, dp, pp, batch, seq, prefill: bool) -> dict:
    """One prefill (TTFT) or decode (TPOT) step of the whole pod for ``batch`` requests.

    Returns ``compute_ns``, ``mem_bytes`` (per GPU: weights of one stage + KV
    cache), and per collective slot (``COLLECTIVE_SLOTS``) ``coll_group``,
    ``coll_bytes`` (per-GPU buffer, nccl-tests convention) and ``coll_count``.
    """
    b_r = batch / dp                                  # requests per replica
    T = b_r * seq if prefill else b_r
    att = attention(m, tp, b_r, seq, prefill)
    ffn = dense_ffn(m, tp, T)
    mo = moe(m, tp, ep, T)
    head = lm_head(m, tp, b_r)
    n_d, n_m = m["n_dense"], m["n_moe"]
    compute = (n_d + n_m) * _roof(att, hw) + n_d * _roof(ffn, hw) + n_m * _roof(mo, hw) + _roof(head, hw)
    layers_per_stage = jnp.ceil((n_d + n_m) / pp)
    frac_d = n_d / (n_d + n_m)
    w_layer = att["weight_bytes"] + frac_d * ffn["weight_bytes"] + (1 - frac_d) * mo["weight_bytes"]
    mem = layers_per_stage * (w_layer + att["kv_bytes"]) + 2 * head["weight_bytes"]   # embedding + head
    act = T * m["H"] * ACT_BYTES
    one = jnp.ones_like(T)
    tpg = tp * one
    group = jnp.stack([tpg, tpg, ep * one, tpg, tpg, tpg, 2 * one])
    size = jnp.stack([act, act, mo["t_local"] * jnp.minimum(m["k"], ep) * m["H"] * ACT_BYTES, act, act,
                      b_r * m["V"] * ACT_BYTES, 2 * act])
    count = jnp.stack([(n_d + n_m) * one, n_d * one, 2 * n_m * one, n_m * one, one, one, (pp - 1) * one])
    count = jnp.where(group > 1, count, 0.0)
    return {"compute_ns": compute, "mem_bytes": mem, "coll_group": group, "coll_bytes": size,
            "coll_count": count}
