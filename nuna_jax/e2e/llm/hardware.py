"""Hardware numbers the end-to-end model needs that ``System`` lacks (to move to ``presets``).

NUNA Table 2 gives 16 HBM stacks and 40 TB/s but no capacity; section 4
speaks of a physical address space of "100s of GB".  We take 24 GB per stack
(HBM3 8-high, the stack of the MI300X that the paper cites as a current
multi-die part: 8 stacks, 192 GB), so a Table 2 GPU holds 16 x 24 GB = 384 GB.
An assumption, not a paper number: it only decides which configurations fit.
"""

from __future__ import annotations

HBM_BYTES_PER_STACK = 24e9   # assumption (see module doc)
ACT_BYTES = 2                # bf16 activations, KV cache and collective payloads (NUNA: bf16 compute)


def hbm_capacity_bytes(system) -> float:
    """HBM capacity of one GPU (socket), bytes."""
    return float(system.n_hbm_stacks) * HBM_BYTES_PER_STACK


def machine(system) -> dict:
    """The numbers the roofline reads, as plain floats (NUNA Table 2 via ``System``)."""
    return {"flops_per_ns": float(system.flops_bf16_per_ns),
            "hbm_bytes_per_ns": float(system.hbm_total_bw_bytes_per_ns),
            "hbm_capacity_bytes": hbm_capacity_bytes(system)}
