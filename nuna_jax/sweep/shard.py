"""One device mesh over every device JAX sees (all local devices; all hosts' after
``jax.distributed.initialize``) and the few helpers the evaluators need to put
host arrays on it and bring results back.

The same code runs on one CPU, on emulated CPU devices
(``XLA_FLAGS=--xla_force_host_platform_device_count=N``), on one or several
GPUs and on several processes: a batch axis is split over mesh axis ``"d"``,
tables are replicated.  Results are gathered to every process
(``multihost_utils.process_allgather``) so that process 0 can write them.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

__all__ = ["device_mesh", "batch_sharding", "replicated", "put_batch", "put_replicated", "to_host",
           "round_up"]


def device_mesh(devices=None) -> Mesh:
    """A 1-D mesh (axis ``"d"``) over ``devices`` (default: ``jax.devices()``, every host's)."""
    devs = jax.devices() if devices is None else list(devices)
    return Mesh(np.asarray(devs), ("d",))


def batch_sharding(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec("d"))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def round_up(n: int, mesh: Mesh) -> int:
    """``n`` rounded up to a multiple of the mesh size (a batch splits evenly)."""
    k = mesh.devices.size
    return -(-int(n) // k) * k


def _put(x, sharding):
    x = np.asarray(x)
    if jax.process_count() == 1:
        return jax.device_put(x, sharding)
    return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])


def put_batch(x, mesh: Mesh):
    """Host array (identical on every process) split along axis 0 over the mesh."""
    return _put(x, batch_sharding(mesh))


def put_replicated(tree, mesh: Mesh):
    """A pytree of host arrays, replicated on every device of the mesh."""
    sh = replicated(mesh)
    return jax.tree_util.tree_map(lambda v: _put(v, sh), tree)


def to_host(tree):
    """Results as numpy on every process (an all-gather across processes when there are several)."""
    if jax.process_count() == 1:
        return jax.tree_util.tree_map(np.asarray, tree)
    from jax.experimental import multihost_utils
    return jax.tree_util.tree_map(np.asarray, multihost_utils.process_allgather(tree, tiled=True))
