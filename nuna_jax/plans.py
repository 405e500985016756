"""Threadblock-level collective plans (NUNA section 4.2, MSCCLang-style).

A :class:`Plan` lists, per GPU, threadblocks; each threadblock has an ordered
list of *steps*.  A step reads a contiguous byte range of a local buffer and
writes it into a buffer of another GPU (the "put" model of NUNA section 2: the
threadblock loads from local HBM and stores to remote HBM through an I/O
port).  Local copies and reductions are not steps: they create no scale-up
traffic.

Buffers follow MSCCL's names: ``"i"`` (input), ``"o"`` (output), ``"s"``
(scratch).  Each GPU has the same buffer sizes; in each GPU's address space
the buffers sit back to back, each starting on a page boundary
(:meth:`Plan.buffer_base`).

Chunks (NUNA section 4.2: "chunks as fixed-size regions ... uniquely
identified by the tuple (chunk_id, buffer_type, gpu_id)"): each step reads
``n_chunks`` consecutive chunks ``src_chunk ..`` of ``(src_buf, src_gpu)`` and
writes ``n_chunks`` chunks ``dst_chunk ..`` of ``(dst_buf, dst_gpu)``.  In
generated plans a chunk is one piece moved by one step (distinct byte ranges
get distinct ids); in imported MSCCL plans a chunk is MSCCL's chunk.

Sizes (docs/policies.md, "Sizes"): ``size_bytes`` is the per-GPU buffer the
collective is named by, as in nccl-tests: the gathered output for
All-Gather, the full vector for Reduce-Scatter and All-Reduce, the send
buffer for All-to-All.  Shards are split element-wise (``elem_bytes``,
default 2 = bf16) as evenly as possible (the first ``E mod n`` shards get one
element more).  A size that is not a whole number of elements is padded up
to one (:func:`pad_to`; NCCL and nccl-tests likewise move whole elements):
the plan moves ``padded_size_bytes = size_bytes + pad_bytes`` and reports
``pad_bytes``; bandwidth figures count ``size_bytes`` only.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

__all__ = [
    "Plan", "BUFFERS", "COLLECTIVES", "ALGORITHMS", "make_plan", "split_elems",
    "default_tbs_per_gpu", "pad_to",
]

BUFFERS = ("i", "o", "s")
BUF_INDEX = {b: k for k, b in enumerate(BUFFERS)}
COLLECTIVES = ("allgather", "reducescatter", "allreduce", "alltoall")
ALGORITHMS = ("direct", "ring")
_ALIASES = {
    "allgather": "allgather", "all-gather": "allgather", "all_gather": "allgather", "ag": "allgather",
    "reducescatter": "reducescatter", "reduce-scatter": "reducescatter",
    "reduce_scatter": "reducescatter", "rs": "reducescatter",
    "allreduce": "allreduce", "all-reduce": "allreduce", "all_reduce": "allreduce", "ar": "allreduce",
    "alltoall": "alltoall", "all-to-all": "alltoall", "all_to_all": "alltoall", "a2a": "alltoall",
}

_STEP_FIELDS = ("step_tb", "step_idx", "src_gpu", "src_buf", "src_off", "dst_gpu", "dst_buf",
                "dst_off", "nbytes", "phase", "src_chunk", "dst_chunk", "n_chunks")


def canonical_collective(name: str) -> str:
    key = str(name).strip().lower()
    if key not in _ALIASES:
        raise ValueError(f"unknown collective {name!r}; choose one of {', '.join(COLLECTIVES)}")
    return _ALIASES[key]


@dataclasses.dataclass(frozen=True, eq=False)
class Plan:
    """A threadblock-level collective schedule (numpy arrays, concrete).

    Threadblocks: global id ``t`` in ``0 .. n_tbs-1`` (GPU-major), on GPU
    ``tb_gpu[t]`` with per-GPU id ``tb_local[t]``.

    Steps (one row each, sorted by ``(step_tb, step_idx)``): threadblock
    ``step_tb`` at position ``step_idx`` reads ``nbytes`` from
    ``src_buf[src_off:]`` on ``src_gpu`` (= the threadblock's GPU) and writes
    them to ``dst_buf[dst_off:]`` on ``dst_gpu`` (``!= src_gpu``).  ``phase``
    is the dependency level (0 for direct algorithms; the ring round for
    ring algorithms).  Buffers are coded 0/1/2 = i/o/s.
    """

    collective: str
    algorithm: str
    n_gpus: int
    size_bytes: int
    elem_bytes: int
    buffer_bytes: tuple  # per-GPU bytes of (i, o, s)
    tb_gpu: np.ndarray
    tb_local: np.ndarray
    step_tb: np.ndarray
    step_idx: np.ndarray
    src_gpu: np.ndarray
    src_buf: np.ndarray
    src_off: np.ndarray
    dst_gpu: np.ndarray
    dst_buf: np.ndarray
    dst_off: np.ndarray
    nbytes: np.ndarray
    phase: np.ndarray
    src_chunk: np.ndarray
    dst_chunk: np.ndarray
    n_chunks: np.ndarray
    name: str = ""
    #: bytes added to ``size_bytes`` so that every chunk holds whole elements (:func:`pad_to`); the
    #: arrays above describe the padded buffer of ``size_bytes + pad_bytes`` bytes
    pad_bytes: int = 0

    def __post_init__(self):
        _check_plan(self)

    # -- sizes --------------------------------------------------------------
    @property
    def n_tbs(self) -> int:
        return int(self.tb_gpu.shape[0])

    @property
    def n_steps(self) -> int:
        return int(self.step_tb.shape[0])

    @property
    def padded_size_bytes(self) -> int:
        """The buffer the plan actually moves: ``size_bytes + pad_bytes``."""
        return int(self.size_bytes) + int(self.pad_bytes)

    @property
    def total_bytes(self) -> int:
        """Inter-GPU payload bytes of the whole plan (sum over steps)."""
        return int(np.sum(self.nbytes, dtype=np.int64))

    @property
    def tbs_per_gpu(self) -> np.ndarray:
        return np.bincount(self.tb_gpu, minlength=self.n_gpus)

    def tb_bytes(self) -> np.ndarray:
        """Bytes each threadblock sends, ``[n_tbs]``."""
        return np.bincount(self.step_tb, weights=self.nbytes, minlength=self.n_tbs).astype(np.int64)

    # -- address space ------------------------------------------------------
    def buffer_base(self, page_bytes: int) -> np.ndarray:
        """Byte address of buffers i, o, s in every GPU's address space.

        Buffers sit back to back, each starting on a page boundary.
        """
        al = [-(-int(b) // page_bytes) * page_bytes for b in self.buffer_bytes]
        return np.array([0, al[0], al[0] + al[1]], dtype=np.int64)

    def address_pages(self, page_bytes: int) -> int:
        """Pages of one GPU's address space (all three buffers)."""
        al = [-(-int(b) // page_bytes) for b in self.buffer_bytes]
        return int(sum(al))

    def src_addr(self, page_bytes: int) -> np.ndarray:
        return self.buffer_base(page_bytes)[self.src_buf] + self.src_off

    def dst_addr(self, page_bytes: int) -> np.ndarray:
        return self.buffer_base(page_bytes)[self.dst_buf] + self.dst_off

    def steps_of(self, tb: int) -> np.ndarray:
        """Row indices of threadblock ``tb``'s steps, in order."""
        lo, hi = np.searchsorted(self.step_tb, [tb, tb + 1])
        return np.arange(lo, hi)

    def chunk_tuples(self, row: int) -> list:
        """(chunk_id, buffer_type, gpu) tuples step ``row`` reads and writes."""
        n = int(self.n_chunks[row])
        sb, db = BUFFERS[self.src_buf[row]], BUFFERS[self.dst_buf[row]]
        out = [(int(self.src_chunk[row]) + k, sb, int(self.src_gpu[row])) for k in range(n)]
        out += [(int(self.dst_chunk[row]) + k, db, int(self.dst_gpu[row])) for k in range(n)]
        return out

    def describe(self) -> dict:
        return {
            "collective": self.collective, "algorithm": self.algorithm, "name": self.name,
            "n_gpus": self.n_gpus, "size_bytes": self.size_bytes, "pad_bytes": int(self.pad_bytes),
            "elem_bytes": self.elem_bytes,
            "n_tbs": self.n_tbs, "tbs_per_gpu_max": int(self.tbs_per_gpu.max(initial=0)),
            "n_steps": self.n_steps, "n_phases": int(self.phase.max(initial=-1)) + 1,
            "inter_gpu_bytes": self.total_bytes,
        }


def _check_plan(p: Plan) -> None:
    n = p.step_tb.shape[0]
    for k in _STEP_FIELDS:
        v = getattr(p, k)
        if not isinstance(v, np.ndarray) or v.shape != (n,):
            raise ValueError(f"Plan.{k} must be a numpy array of shape ({n},)")
    if p.n_gpus < 2:
        raise ValueError(f"Plan.n_gpus must be >= 2, got {p.n_gpus}")
    if int(p.pad_bytes) < 0:
        raise ValueError(f"Plan.pad_bytes must be >= 0, got {p.pad_bytes}")
    if p.tb_gpu.shape != p.tb_local.shape:
        raise ValueError("Plan.tb_gpu and Plan.tb_local must have the same shape")
    if n == 0:
        return
    if p.step_tb.min() < 0 or p.step_tb.max() >= p.n_tbs:
        raise ValueError("Plan.step_tb out of range")
    order_key = p.step_tb.astype(np.int64) * (1 << 31) + p.step_idx
    if np.any(np.diff(order_key) <= 0):
        raise ValueError("Plan steps must be sorted by (step_tb, step_idx) without duplicates")
    if np.any(p.src_gpu != p.tb_gpu[p.step_tb]):
        raise ValueError("Plan.src_gpu must equal the GPU of the step's threadblock")
    for k in ("src_gpu", "dst_gpu"):
        v = getattr(p, k)
        if v.min() < 0 or v.max() >= p.n_gpus:
            raise ValueError(f"Plan.{k} must lie in [0, {p.n_gpus})")
    if np.any(p.src_gpu == p.dst_gpu):
        raise ValueError("Plan steps must be inter-GPU (src_gpu != dst_gpu)")
    if np.any(p.nbytes <= 0):
        raise ValueError("Plan.nbytes must be > 0")
    bb = np.asarray(p.buffer_bytes, dtype=np.int64)
    for side in ("src", "dst"):
        buf, off = getattr(p, f"{side}_buf"), getattr(p, f"{side}_off")
        if buf.min() < 0 or buf.max() > 2:
            raise ValueError(f"Plan.{side}_buf must be 0, 1 or 2 (i, o, s)")
        if off.min() < 0 or np.any(off + p.nbytes > bb[buf]):
            bad = int(np.argmax((off < 0) | (off + p.nbytes > bb[buf])))
            raise ValueError(
                f"Plan step {bad}: {side} range [{off[bad]}, {off[bad] + p.nbytes[bad]}) exceeds "
                f"buffer {BUFFERS[buf[bad]]!r} of {bb[buf[bad]]} bytes")


# ---------------------------------------------------------------------------
# generators
# ---------------------------------------------------------------------------
def pad_to(size_bytes: int, unit_bytes: int) -> int:
    """``size_bytes`` rounded up to a whole number of ``unit_bytes`` (an element, or a chunk of whole
    elements), bytes; equal to ``size_bytes`` when it divides."""
    size, unit = int(size_bytes), int(unit_bytes)
    return -(-size // unit) * unit


def split_elems(n_elems: int, parts: int) -> np.ndarray:
    """Element counts of ``parts`` near-equal pieces (the first ``n mod parts`` get one more)."""
    q, r = divmod(int(n_elems), int(parts))
    return q + (np.arange(parts) < r).astype(np.int64)


def default_tbs_per_gpu(n_gpus: int, algorithm: str = "direct") -> int:
    """One threadblock per peer (the paper's 7 for 8 GPUs, section 6.5), for every algorithm."""
    return max(1, int(n_gpus) - 1)


class _Builder:
    """Collects steps per (gpu, local tb); turns them into a Plan."""

    def __init__(self, n_gpus: int, tbs: int):
        self.n, self.tbs = n_gpus, tbs
        self.rows: list[np.ndarray] = []  # each [k, 9]: gpu, ltb, sbuf, soff, dgpu, dbuf, doff, nbytes, phase

    def add_streams(self, g: int, streams, phase: int, elem: int) -> None:
        """Concurrent streams of GPU ``g`` (sbuf, soff, dgpu, dbuf, doff, nbytes), split over tbs.

        ``streams``: one row of six integers per stream (a list of tuples or an ``[m, 6]`` array).
        With ``m`` streams and ``T`` threadblocks: if ``T >= m`` stream ``j``
        is split element-wise over the threadblocks ``t`` with ``t mod m == j``
        (piece ``k`` to threadblock ``k*m + j``, :func:`split_elems`); otherwise stream ``j`` goes
        whole to threadblock ``j mod T``.
        """
        st = np.asarray(streams, dtype=np.int64).reshape(-1, 6)
        m, T = len(st), self.tbs
        j = np.flatnonzero(st[:, 5] > 0)      # streams with bytes to move (original index)
        if len(j) == 0:
            return
        sb, so, dg, db, do, nb = st[j].T
        if T >= m:
            # piece k of stream j: split_elems(E_j, c_j)[k] elements, c_j = len(range(j, T, m))
            c = (T - j + m - 1) // m
            q, r = np.divmod(nb // elem, c)
            sid = np.repeat(np.arange(len(j)), c)
            k = np.arange(len(sid)) - np.repeat(np.cumsum(c) - c, c)
            el = (q[sid] + (k < r[sid])) * elem
            off = (k * q[sid] + np.minimum(k, r[sid])) * elem
            keep = el > 0
            sid, k, el, off = sid[keep], k[keep], el[keep], off[keep]
            tb, so, do = j[sid] + k * m, so[sid] + off, do[sid] + off
            sb, dg, db = sb[sid], dg[sid], db[sid]
        else:
            tb, el = j % T, nb
        rows = np.empty((len(tb), 9), np.int64)
        rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3], rows[:, 4] = g, tb, sb, so, dg
        rows[:, 5], rows[:, 6], rows[:, 7], rows[:, 8] = db, do, el, phase
        self.rows.append(rows)

    def build(self, collective, algorithm, size, elem, buffer_bytes, name="", pad_bytes=0) -> Plan:
        r = np.concatenate(self.rows) if self.rows else np.zeros((0, 9), np.int64)
        gpu, ltb = r[:, 0], r[:, 1]
        # global tb id = gpu * T + local tb (every GPU keeps all T threadblocks)
        T = self.tbs
        tb = gpu * T + ltb
        # order: by tb, then insertion order (stable)
        order = np.argsort(tb, kind="stable")
        r, tb = r[order], tb[order]
        start = np.searchsorted(tb, tb, side="left")
        step_idx = np.arange(len(tb)) - start
        src_chunk = _chunk_ids(r[:, 0], r[:, 2], r[:, 3], r[:, 7])
        dst_chunk = _chunk_ids(r[:, 4], r[:, 5], r[:, 6], r[:, 7])
        i64 = lambda a: np.ascontiguousarray(a, dtype=np.int64)  # noqa: E731
        return Plan(
            collective=collective, algorithm=algorithm, n_gpus=self.n, size_bytes=int(size),
            elem_bytes=int(elem), buffer_bytes=tuple(int(b) for b in buffer_bytes),
            tb_gpu=np.repeat(np.arange(self.n), T).astype(np.int64),
            tb_local=np.tile(np.arange(T), self.n).astype(np.int64),
            step_tb=i64(tb), step_idx=i64(step_idx), src_gpu=i64(r[:, 0]), src_buf=i64(r[:, 2]),
            src_off=i64(r[:, 3]), dst_gpu=i64(r[:, 4]), dst_buf=i64(r[:, 5]), dst_off=i64(r[:, 6]),
            nbytes=i64(r[:, 7]), phase=i64(r[:, 8]), src_chunk=i64(src_chunk), dst_chunk=i64(dst_chunk),
            n_chunks=np.ones(len(tb), np.int64), name=name or f"{collective}-{algorithm}",
            pad_bytes=int(pad_bytes))


def _columns(*cols) -> np.ndarray:
    """Stream rows ``[m, 6]`` from columns, each a scalar or an array of length ``m``."""
    return np.stack(np.broadcast_arrays(*(np.asarray(c, np.int64) for c in cols)), axis=1)


def _chunk_ids(gpu, buf, off, nb) -> np.ndarray:
    """Dense chunk ids per (gpu, buffer): distinct (offset, bytes) ranges get distinct ids, in
    increasing (offset, bytes) order."""
    if len(gpu) == 0:
        return np.zeros(0, np.int64)
    order = np.lexsort((nb, off, buf, gpu))
    g, b, o, z = gpu[order], buf[order], off[order], nb[order]
    new_group = np.append(True, (g[1:] != g[:-1]) | (b[1:] != b[:-1]))
    new_chunk = new_group | np.append(True, (o[1:] != o[:-1]) | (z[1:] != z[:-1]))
    uid = np.cumsum(new_chunk) - 1
    first = np.maximum.accumulate(np.where(new_group, uid, 0))   # the id of the group's first chunk
    rank = np.empty(len(gpu), np.int64)
    rank[order] = uid - first
    return rank


def make_plan(collective: str, n_gpus: int, size_bytes: int, *, algorithm: str = "direct",
              tbs_per_gpu: int | None = None, elem_bytes: int = 2, slot_align_bytes: int = 1,
              limits=None) -> Plan:
    """Generate a plan (NUNA section 5.1: the direct / all-pairs algorithm; ring for comparison).

    Direct (all-pairs): every GPU writes straight to every peer; peers are
    visited in the order ``g+1, g+2, ..`` (mod n).  All-Reduce is two-shot:
    a direct Reduce-Scatter (phase 0) then a direct All-Gather (phase 1).
    Ring: ``n-1`` rounds (``2(n-1)`` for All-Reduce) to the next GPU,
    round ``r`` in phase ``r``; All-to-All on the ring forwards each block
    hop by hop (store-and-forward through scratch).

    ``tbs_per_gpu`` threadblocks per GPU (default ``n_gpus - 1``) share the
    work as :meth:`_Builder.add_streams` describes.

    ``slot_align_bytes`` (D3, docs/policies.md "Modelling choices"): every
    per-GPU slot (shard ``h`` of a full-size buffer, a peer's scratch or
    output slot) starts at a multiple of it: slot ``h`` at ``h * stride``
    with ``stride = ceil(max shard / align) * align``, and full-size buffers
    hold ``n * stride`` bytes.  1 (the default here) packs shards back to
    back; ``scenario.make_scenario`` passes the page size, so that no page
    holds two GPUs' chunks (section 4.2: chunks are "fixed-size regions",
    placed with "4 kB pages").

    ``limits`` (:class:`~nuna_jax.limits.Limits`, default :func:`limits.active`): the GPUs,
    threadblocks and steps are checked from the inputs before anything is built
    (``WorkLimitError``).
    """
    from .limits import active, check_generated_plan
    coll = canonical_collective(collective)
    alg = str(algorithm).strip().lower()
    if alg not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    n = int(n_gpus)
    if n < 2:
        raise ValueError(f"n_gpus must be >= 2, got {n_gpus}")
    if int(elem_bytes) <= 0:
        raise ValueError(f"elem_bytes must be > 0, got {elem_bytes}")
    size, elem = int(size_bytes), int(elem_bytes)
    if size <= 0:
        raise ValueError(f"size_bytes must be > 0, got {size_bytes}")
    asked = size
    size = pad_to(asked, elem)             # whole elements (module doc "Sizes"); unchanged when it divides
    T = default_tbs_per_gpu(n, alg) if tbs_per_gpu is None else int(tbs_per_gpu)
    if T < 1:
        raise ValueError(f"tbs_per_gpu must be >= 1, got {tbs_per_gpu}")
    check_generated_plan(active(limits), coll, alg, n, T, size,
                         f"make_plan({coll}, {alg}, {asked} B on {n} GPUs, {T} threadblocks per GPU)")
    align = int(slot_align_bytes)
    if align < 1:
        raise ValueError(f"slot_align_bytes must be >= 1, got {slot_align_bytes}")
    shard = split_elems(size // elem, n) * elem           # bytes of shard h
    smax = int(shard.max())
    if align == 1:
        soff = np.concatenate([[0], np.cumsum(shard)[:-1]])   # offset of shard h in a full buffer
        full = size
    else:
        smax = -(-smax // align) * align                  # slot stride
        soff = np.arange(n, dtype=np.int64) * smax
        full = n * smax
    I, O, S = 0, 1, 2
    b = _Builder(n, T)
    nxt = lambda g, k=1: (g + k) % n  # noqa: E731

    if alg == "direct":
        ks = np.arange(1, n)
        peers = lambda g: (g + ks) % n  # noqa: E731  (every peer, in the order g+1, g+2, ..)
        if coll == "allgather":
            bufs = (smax, full, 0)
            for g in range(n):
                b.add_streams(g, _columns(I, 0, peers(g), O, soff[g], shard[g]), 0, elem)
        elif coll == "reducescatter":
            bufs = (full, smax, n * smax)
            for g in range(n):
                h = peers(g)
                b.add_streams(g, _columns(I, soff[h], h, S, g * smax, shard[h]), 0, elem)
        elif coll == "alltoall":
            bufs = (full, n * smax, 0)
            for g in range(n):
                h = peers(g)
                b.add_streams(g, _columns(I, soff[h], h, O, g * smax, shard[h]), 0, elem)
        else:  # allreduce, two-shot
            bufs = (full, full, n * smax)
            for g in range(n):
                h = peers(g)
                b.add_streams(g, _columns(I, soff[h], h, S, g * smax, shard[h]), 0, elem)
            for g in range(n):
                b.add_streams(g, _columns(O, soff[g], peers(g), O, soff[g], shard[g]), 1, elem)
    else:  # ring
        if coll == "allgather":
            bufs = (smax, full, 0)
            for r in range(n - 1):
                for g in range(n):
                    c = (g - r) % n
                    src = (I, 0) if r == 0 else (O, soff[c])
                    b.add_streams(g, [(*src, nxt(g), O, soff[c], shard[c])], r, elem)
        elif coll in ("reducescatter", "allreduce"):
            bufs = (full, smax if coll == "reducescatter" else full, full)
            for r in range(n - 1):
                for g in range(n):
                    c = (g - r - 1) % n
                    src = (I, soff[c]) if r == 0 else (S, soff[c])
                    b.add_streams(g, [(*src, nxt(g), S, soff[c], shard[c])], r, elem)
            if coll == "allreduce":
                for r in range(n - 1):
                    for g in range(n):
                        c = (g - r) % n
                        b.add_streams(g, [(O, soff[c], nxt(g), O, soff[c], shard[c])], n - 1 + r, elem)
        else:  # alltoall, store-and-forward on the ring
            bufs = (full, n * smax, n * n * smax)
            for r in range(n - 1):
                for g in range(n):
                    origin = (g - r) % n
                    streams = []
                    for k in range(r + 1, n):
                        d = (origin + k) % n
                        src = (I, soff[d]) if r == 0 else (S, (origin * n + d) * smax)
                        dst = (O, origin * smax) if d == nxt(g) else (S, (origin * n + d) * smax)
                        streams.append((*src, nxt(g), *dst, shard[d]))
                    b.add_streams(g, streams, r, elem)
    return b.build(coll, alg, asked, elem, bufs, pad_bytes=size - asked)
