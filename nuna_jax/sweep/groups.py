"""Split a grid into blocks of equal static shape.

A *block* fixes every axis that changes the compiled program or the
formula -- ``model``, ``collective``, ``algorithm``, ``stat``, ``system`` and the
static ``System`` fields (``n_gpus``, ``n_io_ports``, ``n_dies``, mesh, ...) --
and leaves the others *free* (``size``, the continuous hardware fields,
``policy``, ``tbs_per_gpu``, ``nar_granularity``).  A block's points are a
sub-grid of the free axes; point ``j`` of a block (C order over its free axes)
has a global index computed here on the host (numpy); the closed form decodes
the same mixed-radix digits on the device (``closed_eval``).

Path-model blocks are split further by traffic shape (padded rows, phases) in
``sweep.run``; the closed form needs no traffic.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np

from .grid import SCENARIO_AXES, Grid, continuous_fields, static_fields

__all__ = ["FIXED_AXES", "Block", "blocks"]

FIXED_AXES = ("model", "collective", "algorithm", "stat", "system") + static_fields()


@dataclasses.dataclass(frozen=True)
class Block:
    fixed: dict                      # axis -> value for every fixed axis of the grid (+ defaults)
    base_index: int                  # global index of the block's first point
    free_axes: tuple[str, ...]       # in grid order
    free_lens: tuple[int, ...]
    free_strides: tuple[int, ...]    # global C-order strides of the free axes

    @property
    def n_points(self) -> int:
        return int(math.prod(self.free_lens))

    def free_digits(self, j):
        """Digits of local points ``j`` over the free axes, a list of arrays (C order)."""
        out, rem = [], j
        for n in reversed(self.free_lens):
            out.append(rem % n)
            rem = rem // n
        return out[::-1]

    def global_index(self, j):
        idx = np.zeros_like(j) + self.base_index
        for d, st in zip(self.free_digits(j), self.free_strides):
            idx = idx + d * st
        return idx

    def hw_axes(self) -> tuple[str, ...]:
        """Free continuous hardware axes (their product indexes the block's hardware variants)."""
        return tuple(a for a in self.free_axes if a in continuous_fields())


def blocks(grid: Grid) -> list[Block]:
    """Every block of the grid, in order of their fixed axes' values."""
    names, shape = grid.names, grid.shape
    strides = [int(math.prod(shape[i + 1:])) for i in range(len(shape))]
    fixed_pos = [i for i, a in enumerate(names) if a in FIXED_AXES]
    free_pos = [i for i, a in enumerate(names) if a not in FIXED_AXES]
    out = []
    for digits in itertools.product(*[range(shape[i]) for i in fixed_pos]):
        fixed = {k: v for k, v in SCENARIO_AXES.items() if k in FIXED_AXES}
        base = 0
        for i, d in zip(fixed_pos, digits):
            fixed[names[i]] = grid.axes[i][1][d]
            base += d * strides[i]
        out.append(Block(fixed, base, tuple(names[i] for i in free_pos), tuple(shape[i] for i in free_pos),
                         tuple(strides[i] for i in free_pos)))
    return out
