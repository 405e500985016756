"""Measured collectives: All-Gather, Reduce-Scatter, All-Reduce and All-to-All through JAX's
collectives (``jax.lax`` under ``shard_map``; NCCL on GPUs), timed and reported as nccl-tests
reports them (docs/multi_gpu.md).

    python benchmarks/bench_collectives.py [--devices 2,4,8] [--min-bytes 1KiB] [--max-bytes 1GiB]
        [--factor 2] [--iters 20] [--reps 5] [--collectives all_gather,...] [--out DIR] [--emulate N]

Size ``S`` (bytes) of one row follows nccl-tests (doc/PERFORMANCE.md of NVIDIA/nccl-tests, commit
03a204a; and its src/*.cu), which is also the ``n`` of the closed form
(nuna_jax/models/collectives.py), so a fit needs no conversion:

=================  =====================================================  ==================
collective         S                                                       bus factor
=================  =====================================================  ==================
all_gather         the gathered output of one device (``p`` shards S/p)    (p-1)/p
reduce_scatter     the full input vector of one device (output S/p)        (p-1)/p
all_reduce         the vector of one device (input = output = S)           2(p-1)/p
all_to_all         what one device sends in total, itself included (S/p    (p-1)/p
                   to each peer)
=================  =====================================================  ==================

``algbw = S / t`` and ``busbw = algbw * factor`` in GB/s (10^9 B/s, = bytes/ns), ``t`` the time
of one collective.  Element counts are rounded down to a multiple of ``p`` (as nccl-tests does),
so the reported ``size_bytes`` is the size actually moved.

Timing: one jitted program runs ``--iters`` collectives back to back in a ``lax.fori_loop``
(each waits for the previous one through ``lax.optimization_barrier``: no copy, no extra kernel),
so the host's dispatch cost is paid once per ``iters`` collectives; ``t`` = wall time of the
program / iters.  After a warm-up call, ``--reps`` programs are timed; the median is reported
(every repetition is kept).  A size that does not fit in ``--mem-fraction`` of the smallest
device memory is skipped and listed.

Writes ``collectives_<tag>_<date>.json`` to ``--out`` (default benchmarks/out).  Needs at least 2
devices: on a CPU, ``--emulate N`` sets ``XLA_FLAGS=--xla_force_host_platform_device_count=N``
(before JAX is imported) to check the code, not to measure anything.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")

__all__ = ["COLLECTIVES", "bus_factor", "algbw_GBps", "busbw_GBps", "buffer_elems", "collective_fn",
           "loop_fn", "make_input", "sizes_from", "time_collective", "machine_info", "main"]


# ---------------------------------------------------------------------------------------------
# the nccl-tests arithmetic (no JAX)
# ---------------------------------------------------------------------------------------------
def bus_factor(collective: str, n: int) -> float:
    """nccl-tests' bus-bandwidth correction for ``n`` ranks (doc/PERFORMANCE.md, "Summary"):
    All-Reduce 2(n-1)/n; Reduce-Scatter, All-Gather, All-to-All (n-1)/n."""
    if collective not in COLLECTIVES:
        raise ValueError(f"collective must be one of {', '.join(COLLECTIVES)}, got {collective!r}")
    if not (isinstance(n, int) and n >= 1):
        raise ValueError(f"n (ranks) must be an integer >= 1, got {n!r}")
    f = (n - 1) / n
    return 2.0 * f if collective == "all_reduce" else f


def algbw_GBps(size_bytes: float, time_s: float) -> float:
    """Algorithm bandwidth ``S / t`` in GB/s (10^9 bytes per second), as nccl-tests."""
    return float(size_bytes) / float(time_s) / 1e9


def busbw_GBps(collective: str, n: int, size_bytes: float, time_s: float) -> float:
    """Bus bandwidth ``algbw * bus_factor(collective, n)`` in GB/s."""
    return algbw_GBps(size_bytes, time_s) * bus_factor(collective, n)


def buffer_elems(collective: str, n: int, size_bytes: int, itemsize: int) -> dict:
    """Element counts of one device's buffers for an ``S = size_bytes`` row (module doc):
    ``count`` (elements of S, a multiple of ``n``), ``in`` and ``out`` (per device), and the size
    actually used, ``size_bytes = count * itemsize``."""
    if collective not in COLLECTIVES:
        raise ValueError(f"collective must be one of {', '.join(COLLECTIVES)}, got {collective!r}")
    count = (int(size_bytes) // itemsize) // n * n
    if count < n:
        raise ValueError(f"size {size_bytes} B is below one {itemsize}-byte element per device for {n} devices")
    per = count // n
    i, o = {"all_gather": (per, count), "reduce_scatter": (count, per),
            "all_reduce": (count, count), "all_to_all": (count, count)}[collective]
    return {"count": count, "in": i, "out": o, "size_bytes": count * itemsize}


def sizes_from(min_bytes: int, max_bytes: int, factor: float) -> list[int]:
    """``min, min*factor, ...`` up to ``max`` (nccl-tests ``-b -e -f``)."""
    if min_bytes < 1 or max_bytes < min_bytes:
        raise ValueError(f"need 1 <= --min-bytes <= --max-bytes, got {min_bytes}, {max_bytes}")
    if not factor > 1:
        raise ValueError(f"--factor must be > 1, got {factor}")
    out, s = [], float(min_bytes)
    while s <= max_bytes * (1 + 1e-12):
        out.append(int(round(s)))
        s *= factor
    return out


# ---------------------------------------------------------------------------------------------
# the collectives (JAX)
# ---------------------------------------------------------------------------------------------
def _shard_map():
    import jax
    if hasattr(jax, "shard_map"):           # jax >= 0.7
        return jax.shard_map
    from jax.experimental.shard_map import shard_map   # older releases: check_rep, not check_vma

    def sm(f, *, check_vma=True, **kw):
        return shard_map(f, check_rep=check_vma, **kw)
    return sm


def _body(collective: str, axis: str = "d"):
    """The per-device collective on one device's block (1-D)."""
    from jax import lax
    if collective == "all_gather":
        return lambda x: lax.all_gather(x, axis, tiled=True)
    if collective == "reduce_scatter":
        return lambda x: lax.psum_scatter(x, axis, scatter_dimension=0, tiled=True)
    if collective == "all_reduce":
        return lambda x: lax.psum(x, axis)
    if collective == "all_to_all":
        return lambda x: lax.all_to_all(x, axis, 0, 0, tiled=True)
    raise ValueError(f"collective must be one of {', '.join(COLLECTIVES)}, got {collective!r}")


def _specs(mesh):
    from jax.sharding import PartitionSpec as P
    return dict(mesh=mesh, in_specs=P("d"), out_specs=P("d"))


def collective_fn(collective: str, mesh):
    """One collective over mesh axis ``"d"``: a jitted ``f(x) -> y``; ``x`` is the global array
    ``[p * in]`` split over the devices (device ``i`` holds ``x[i*in:(i+1)*in]``), ``y`` is
    ``[p * out]``, device ``i``'s output at ``y[i*out:(i+1)*out]`` (``in``/``out``:
    :func:`buffer_elems`)."""
    import jax
    sm = _shard_map()
    return jax.jit(sm(_body(collective), check_vma=False, **_specs(mesh)))


CHAINS = ("barrier", "update")


def loop_fn(collective: str, mesh, iters: int, chain: str = "barrier", unroll: bool = False):
    """``iters`` collectives in one program, each after the previous; returns the last output.

    ``chain`` says how collective ``i + 1`` is made to wait for collective ``i``:

    * ``barrier``: ``lax.optimization_barrier`` on (input, previous output), inside a ``while``
      loop: no extra kernel, the result equals :func:`collective_fn`'s.  It relies on XLA keeping
      the loop's collective in the body (``_loop_structure`` checks the compiled program).
    * ``update``: element 0 of each device's input is overwritten by element 0 of its previous
      output (an in-place one-element ``dynamic_update_slice``): a true data dependency that no
      compiler can hoist or merge, at the cost of one tiny kernel per collective.

    ``unroll`` (``update`` only: XLA folds unrolled barriers away): straight-line code instead of
    a ``while`` loop."""
    import jax
    from jax import lax
    if not (isinstance(iters, int) and iters >= 1):
        raise ValueError(f"iters must be an integer >= 1, got {iters!r}")
    if chain not in CHAINS:
        raise ValueError(f"chain must be one of {', '.join(CHAINS)}, got {chain!r}")
    if unroll and chain != "update":
        raise ValueError("unroll needs chain='update' (XLA folds unrolled optimization barriers away)")
    body = _body(collective)
    sm = _shard_map()

    def per_device(x):
        y0 = body(x)

        def step(_, carry):
            if chain == "barrier":
                xx, _ = lax.optimization_barrier(carry)    # waits for the previous output
            else:
                xx, yy = carry
                xx = lax.dynamic_update_slice(xx, yy[:1].astype(xx.dtype), (0,))
            return xx, body(xx)

        return lax.fori_loop(1, iters, step, (x, y0), unroll=bool(unroll) and iters > 1)[1]

    return jax.jit(sm(per_device, check_vma=False, **_specs(mesh)))


def make_input(collective: str, mesh, n_in: int, dtype: str = "float32"):
    """Device ``i``'s block of ``n_in`` elements filled on the device (no host transfer, no global
    index that could overflow int32 at 1 GiB x 8 devices): ``(j + 7 i) mod 251`` at local index j."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import PartitionSpec as P
    sm = _shard_map()

    def f():
        i = lax.axis_index("d")
        return ((lax.iota(jnp.int32, n_in) + 7 * i) % 251).astype(dtype)

    return jax.jit(sm(f, mesh=mesh, in_specs=(), out_specs=P("d"), check_vma=False))()


def time_collective(collective: str, mesh, size_bytes: int, *, iters: int, reps: int,
                    dtype: str = "float32", chain: str = "barrier", unroll: bool = False) -> dict:
    """One nccl-tests row: median time of one collective over ``reps`` timed programs of ``iters``."""
    import jax
    import numpy as np
    p = mesh.devices.size
    item = np.dtype(dtype).itemsize
    b = buffer_elems(collective, p, size_bytes, item)
    x = make_input(collective, mesh, b["in"], dtype)
    fn = loop_fn(collective, mesh, iters, chain, unroll)
    t0 = time.perf_counter()
    compiled = fn.lower(x).compile()
    hlo = compiled.as_text() or ""
    jax.block_until_ready(compiled(x))           # warm-up
    warm = time.perf_counter() - t0
    fn = compiled
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(x))
        ts.append((time.perf_counter() - t0) / iters)
    del x
    t = float(np.median(ts))
    S = b["size_bytes"]
    return {"collective": collective, "n_devices": p, "size_bytes": S, "count": b["count"], "dtype": dtype,
            "iters": iters, "chain": chain, "unroll": bool(unroll), "reps": reps, "time_us": t * 1e6, "time_us_min": min(ts) * 1e6,
            "time_us_all": [v * 1e6 for v in ts], "algbw_GBps": algbw_GBps(S, t),
            "busbw_GBps": busbw_GBps(collective, p, S, t), "bus_factor": bus_factor(collective, p),
            "first_call_s": warm, "hlo": (st := _loop_structure(hlo)),
            "loop_ok": _loop_ok(st, iters, unroll) if p > 1 else None}     # one device: XLA drops the collective


def _loop_ok(st: dict, iters: int, unroll: bool) -> bool:
    """Whether the compiled program can hold ``iters`` collectives: unrolled, ``iters`` ops; looped,
    a ``while`` loop (when its trip count ``iters - 1`` exceeds 1) and >= 2 ops (before + body)."""
    n_ops = sum(v for k, v in st.items() if k != "while_loops")
    if unroll:
        return n_ops >= iters
    return n_ops >= min(iters, 2) and (iters <= 2 or st["while_loops"] >= 1)


_HLO_OPS = {"all_gather": "all-gather", "reduce_scatter": "reduce-scatter", "all_reduce": "all-reduce",
            "all_to_all": "all-to-all"}


def _loop_structure(hlo: str) -> dict:
    """How many ``while`` loops and collective ops the compiled program holds (a check that the loop's
    collective was not hoisted or merged away: expected 1 loop and 2 ops, one before the loop and one
    in its body; XLA may rewrite a collective, e.g. an All-Reduce into a Reduce-Scatter + All-Gather)."""
    import re
    ops = re.findall(r"\b(all-gather|reduce-scatter|all-reduce|all-to-all)(?:-start)?\(", hlo)
    return {"while_loops": len(re.findall(r"\bwhile\(", hlo)),
            **{op: ops.count(op) for op in sorted(set(ops))}}


# ---------------------------------------------------------------------------------------------
def _driver_version() -> str | None:
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
        return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def machine_info() -> dict:
    """Date (UTC), host, device kind, driver, JAX / jaxlib / platform versions of this process, and the
    environment variables that steer XLA and NCCL (``NCCL_*``, ``XLA_*``, ``JAX_*``)."""
    import jax
    import jaxlib
    devs = jax.devices()
    try:
        pv = devs[0].client.platform_version
    except Exception:   # noqa: BLE001 - informational only
        pv = None
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "host": platform.node(), "platform": platform.platform(), "cpu_count": os.cpu_count(),
            "python": platform.python_version(), "jax": jax.__version__, "jaxlib": jaxlib.__version__,
            "backend": jax.default_backend(), "platform_version": pv, "driver": _driver_version(),
            "device_kind": devs[0].device_kind, "n_devices_seen": len(devs),
            "process_count": jax.process_count(), "devices": [str(d) for d in devs],
            "env": {k: v for k, v in sorted(os.environ.items())
                    if k.startswith(("NCCL_", "XLA_", "JAX_", "CUDA_VISIBLE", "TF_CPP"))}}


def _device_memory(devs) -> int | None:
    lims = []
    for d in devs:
        try:
            st = d.memory_stats() or {}
        except Exception:   # noqa: BLE001 - CPU devices have no stats
            st = {}
        if "bytes_limit" in st:
            lims.append(int(st["bytes_limit"]))
    return min(lims) if lims else None


def _parse_counts(text: str, n_seen: int) -> list[int]:
    if text is None:
        c = [k for k in (2, 4, 8, 16, 32, 64) if k <= n_seen]
        return c + ([n_seen] if n_seen >= 2 and n_seen not in c else [])
    try:
        c = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--devices must be a comma-separated list of integers, got {text!r}") from None
    if not c or any(k < 1 or k > n_seen for k in c):
        raise ValueError(f"--devices: every count must lie in [1, {n_seen}] (JAX sees {n_seen} device(s)), got {text!r}")
    return c


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default=None,
                    help="device counts, e.g. 2,4,8 (default: 2, 4, 8 ... up to all); 1 only as a smoke run of the "
                         "code on one GPU (a 1-device collective moves nothing)")
    ap.add_argument("--collectives", default=",".join(COLLECTIVES))
    ap.add_argument("--min-bytes", default="1KiB", help="smallest S (default 1KiB, nccl-tests -b 1K)")
    ap.add_argument("--max-bytes", default="1GiB", help="largest S (default 1GiB, nccl-tests -e 1G)")
    ap.add_argument("--factor", type=float, default=2.0, help="size step factor (nccl-tests -f)")
    ap.add_argument("--iters", type=int, default=20, help="collectives per timed program (nccl-tests -n)")
    ap.add_argument("--reps", type=int, default=5, help="timed programs per size; the median is reported")
    ap.add_argument("--chain", default="barrier", choices=CHAINS,
                    help="how each timed collective waits for the previous one (loop_fn; default barrier)")
    ap.add_argument("--unroll", action="store_true",
                    help="with --chain update: unroll the timed loop (no while-loop overhead per collective)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16", "int32"))
    ap.add_argument("--mem-fraction", type=float, default=0.4,
                    help="skip a size whose buffers exceed this fraction of device memory")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out"))
    ap.add_argument("--tag", default=None, help="name tag (default: backend_ndevices)")
    ap.add_argument("--emulate", type=int, default=None, metavar="N",
                    help="CPU check run on N emulated devices (sets XLA_FLAGS before JAX is imported)")
    a = ap.parse_args(argv)
    from nuna_jax.units import parse_size
    try:
        lo, hi = parse_size(a.min_bytes), parse_size(a.max_bytes)
        sizes = sizes_from(lo, hi, a.factor)
        colls = [c.strip() for c in a.collectives.split(",") if c.strip()]
        for c in colls:
            bus_factor(c, 2)
        if a.iters < 1 or a.reps < 1:
            raise ValueError(f"--iters and --reps must be >= 1, got {a.iters}, {a.reps}")
        if not 0 < a.mem_fraction <= 1:
            raise ValueError(f"--mem-fraction must lie in (0, 1], got {a.mem_fraction}")
        if a.unroll and a.chain != "update":
            raise ValueError("--unroll needs --chain update (XLA folds unrolled optimization barriers away)")
        if a.emulate is not None and a.emulate < 2:
            raise ValueError(f"--emulate must be >= 2, got {a.emulate}")
    except ValueError as e:
        print(f"bench_collectives: {e}", file=sys.stderr)
        return 2
    if a.emulate:
        if "jax" in sys.modules:
            print("bench_collectives: --emulate must be set before JAX is imported", file=sys.stderr)
            return 2
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   f" --xla_force_host_platform_device_count={a.emulate}").strip()
        os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    import numpy as np
    from jax.sharding import Mesh
    devs = jax.devices()
    try:
        counts = _parse_counts(a.devices, len(devs))
    except ValueError as e:
        print(f"bench_collectives: {e}", file=sys.stderr)
        return 2
    if not counts:
        print(f"bench_collectives: needs at least 2 devices, JAX sees {len(devs)} "
              "(on a CPU, --emulate N checks the code)", file=sys.stderr)
        return 2
    info = machine_info()
    info["emulated"] = bool(a.emulate)
    print(json.dumps({k: info[k] for k in ("date", "device_kind", "backend", "jax", "driver", "n_devices_seen")}),
          flush=True)
    mem = _device_memory(devs)
    item = np.dtype(a.dtype).itemsize
    rows, skipped = [], []
    for k in counts:
        mesh = Mesh(np.asarray(devs[:k]), ("d",))
        print(f"# {k} devices{'':4s}{'size (B)':>12s} {'time (us)':>10s} {'algbw':>8s} {'busbw':>8s}  (GB/s)",
              flush=True)
        for c in colls:
            for S in sizes:
                try:
                    b = buffer_elems(c, k, S, item)
                except ValueError:
                    skipped.append({"collective": c, "n_devices": k, "size_bytes": S, "why": "below one element per device"})
                    continue
                need = 3 * (b["in"] + b["out"]) * item      # input, output, loop carry
                if mem is not None and need > a.mem_fraction * mem:
                    skipped.append({"collective": c, "n_devices": k, "size_bytes": S,
                                    "why": f"needs ~{need} B per device > {a.mem_fraction} x {mem} B"})
                    continue
                r = time_collective(c, mesh, S, iters=a.iters, reps=a.reps, dtype=a.dtype, chain=a.chain,
                                    unroll=a.unroll)
                rows.append(r)
                if r["loop_ok"] is False:
                    print(f"warning: {c} {S} B: the compiled program does not hold {a.iters} collectives "
                          f"({r['hlo']}); rerun with --chain update", file=sys.stderr, flush=True)
                print(f"{c:>16s} {r['size_bytes']:12d} {r['time_us']:10.2f} {r['algbw_GBps']:8.2f} "
                      f"{r['busbw_GBps']:8.2f}", flush=True)
    res = {"info": info,
           "convention": {"size_bytes": {"all_gather": "gathered output of one device",
                                         "reduce_scatter": "full input vector of one device",
                                         "all_reduce": "vector of one device",
                                         "all_to_all": "data one device sends in total (itself included)"},
                          "algbw_GBps": "size_bytes / time, 1e9 B/s",
                          "busbw_GBps": "algbw * bus_factor: AR 2(n-1)/n, AG RS A2A (n-1)/n "
                                        "(NVIDIA/nccl-tests doc/PERFORMANCE.md)",
                          "time_us": "median over reps of (program wall time / iters)"},
           "args": {"devices": counts, "collectives": colls, "sizes": sizes, "iters": a.iters, "reps": a.reps,
                    "chain": a.chain, "unroll": a.unroll, "dtype": a.dtype, "mem_fraction": a.mem_fraction},
           "results": rows, "skipped": skipped}
    tag = a.tag or f"{info['backend']}{'_emulated' if a.emulate else ''}_{max(counts)}dev"
    outdir = Path(a.out)
    outdir.mkdir(parents=True, exist_ok=True)
    path = outdir / f"collectives_{tag}_{info['date'][:10]}.json"
    path.write_text(json.dumps(res, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
