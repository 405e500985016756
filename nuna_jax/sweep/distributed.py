"""Several processes (hosts) on one sweep, through ``jax.distributed``.

Call :func:`initialize` before any other JAX call; afterwards ``jax.devices()``
lists every process's devices, ``sweep.shard.device_mesh`` spans them all,
and ``run_sweep`` runs unchanged: each process feeds its shards of every
chunk, results are all-gathered, process 0 writes the file.  Simulator points
are dealt out instead: each process simulates its share of each round on its own
``jobs`` processes (``sweep.simpool``).  On CPU the collectives go through Gloo.
"""

from __future__ import annotations

__all__ = ["initialize", "shutdown"]


def initialize(coordinator: str, num_processes: int, process_id: int) -> None:
    """``jax.distributed.initialize`` with a checked ``HOST:PORT`` coordinator."""
    host, _, port = str(coordinator).rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"coordinator must be HOST:PORT, got {coordinator!r}")
    if not (isinstance(num_processes, int) and num_processes >= 1):
        raise ValueError(f"num_processes must be an integer >= 1, got {num_processes!r}")
    if not (isinstance(process_id, int) and 0 <= process_id < num_processes):
        raise ValueError(f"process_id must lie in [0, {num_processes}), got {process_id!r}")
    import jax
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes,
                               process_id=process_id)


def shutdown() -> None:
    import jax
    jax.distributed.shutdown()
