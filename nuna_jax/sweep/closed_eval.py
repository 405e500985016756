"""The closed-form (alpha-beta-gamma) evaluator of one block, on the device mesh.

A block fixes the collective, algorithm, alpha statistic and the static
system (so ``p = n_gpus``), which are compile-time constants of
``models.collectives.cost_ns``: XLA folds its ``select`` over collectives and
algorithms away and each point costs one fused multiply-add chain.  Per
hardware variant (the product of the block's continuous hardware axes),
``alpha, beta, gamma`` come from ``collectives.alpha_beta_gamma`` (vmapped).

A chunk is generated on the device from its first local index ``j0``: the
point's free-axis digits (mixed radix, ``groups.Block.free_digits``) pick its
size and hardware variant from small replicated tables, so the device reads
almost nothing and writes 4 bytes per point.  The chunk axis is split over
the mesh.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from ..models import collectives as C
from .groups import Block
from .shard import batch_sharding, put_replicated, replicated

__all__ = ["hw_tables", "closed_form_fn", "closed_form_tables"]

_ABG_BATCH = 256  # hardware variants per alpha_beta_gamma call (bounds the [routers, stacks] tables)


def hw_tables(block: Block, base_system, grid) -> dict:
    """Per hardware variant (C order over ``block.hw_axes()``): the value of each hw axis, ``[H]``."""
    axes = block.hw_axes()
    if not axes:
        return {}
    mesh_vals = np.meshgrid(*[np.asarray(grid.values(a), np.float64) for a in axes], indexing="ij")
    return {a: m.ravel() for a, m in zip(axes, mesh_vals)}


def closed_form_tables(block: Block, base_system, grid):
    """``(alpha_ns, beta_ns_per_byte, gamma_ns_per_byte)``, each ``[H]`` float32, for the block's
    hardware variants (``H = 1`` when no continuous hardware axis is free)."""
    stat = block.fixed["stat"]
    hw = hw_tables(block, base_system, grid)
    f = jax.jit(jax.vmap(lambda vals: jnp.stack(C.alpha_beta_gamma(base_system.replace(**vals), stat))))
    if not hw:
        a, b, g = C.alpha_beta_gamma(base_system, stat)
        return tuple(np.asarray([float(v)], np.float32) for v in (a, b, g))
    H = len(next(iter(hw.values())))
    out = []
    for lo in range(0, H, _ABG_BATCH):
        sl = {k: jnp.asarray(v[lo:lo + _ABG_BATCH], jnp.float32) for k, v in hw.items()}
        out.append(np.asarray(f(sl)))
    abg = np.concatenate(out, axis=0).astype(np.float32)
    return abg[:, 0], abg[:, 1], abg[:, 2]


@functools.lru_cache(maxsize=256)
def closed_form_fn(coll: int, alg: int, p: int, free_lens: tuple, size_pos: int, hw_pos: tuple,
                   chunk: int, mesh):
    """``f(j0, sizes, alpha, beta, gamma) -> time_ns[chunk]`` for local points ``j0 .. j0+chunk-1``.

    ``free_lens``: the block's free-axis lengths; ``size_pos``: position of the
    ``size`` axis among them; ``hw_pos``: positions of the continuous hardware
    axes (C order gives the variant index).  Points past the block's end read
    clamped tables (the caller drops them).
    """
    hw_lens = [free_lens[i] for i in hw_pos]
    hw_strides = [int(math.prod(hw_lens[k + 1:])) for k in range(len(hw_lens))]
    bat, rep = batch_sharding(mesh), replicated(mesh)

    def f(j0, sizes, alpha, beta, gamma):
        j = j0 + jnp.arange(chunk, dtype=jnp.int32)
        digits, rem = [], j
        for n in reversed(free_lens):
            digits.append(rem % n)
            rem = rem // n
        digits = digits[::-1]
        n_bytes = sizes[digits[size_pos]]
        h = jnp.zeros_like(j)
        for i, st in zip(hw_pos, hw_strides):
            h = h + digits[i] * st
        return C.cost_ns(coll, alg, p, n_bytes, alpha[h], beta[h], gamma[h])

    return jax.jit(f, in_shardings=(rep, rep, rep, rep, rep), out_shardings=bat)


def block_args(block: Block, base_system, grid, mesh):
    """Everything :func:`closed_form_fn` needs for a block: ``(static kwargs, device tables)``."""
    coll = C.collective_code(block.fixed["collective"])
    alg = C.algorithm_code(block.fixed["algorithm"])
    sizes = np.asarray(grid.values("size"), np.float32)
    size_pos = block.free_axes.index("size")
    hw_axes = block.hw_axes()
    hw_pos = tuple(block.free_axes.index(a) for a in hw_axes)
    a, b, g = closed_form_tables(block, base_system, grid)
    static = dict(coll=coll, alg=alg, p=int(base_system.n_gpus), free_lens=tuple(block.free_lens),
                  size_pos=size_pos, hw_pos=hw_pos)
    return static, put_replicated((sizes, a, b, g), mesh)
