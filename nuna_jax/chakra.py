"""Read Chakra execution traces (MLCommons ``ChakraProtoMsg``, ``et_def.proto``) without a dependency.

A Chakra ET is one file per rank, ``PREFIX.<rank>.et`` (optionally gzip-compressed), holding a
stream of protobuf messages, each preceded by its length as a base-128 varint: one
``GlobalMetadata`` (``version = 1``, ``attr = 2``), then ``Node`` messages.  The fields read here
(field numbers of mlcommons/chakra ``schema/protobuf/et_def.proto``)::

    Node: id = 1 (uint64), name = 2, type = 3 (NodeType), ctrl_deps = 4, data_deps = 5
          (repeated uint64, packed or not), start_time_micros = 6, duration_micros = 7,
          attr = 10 (repeated AttributeProto); inputs = 8, outputs = 9, storage = 11 are skipped
    AttributeProto: name = 1, then one value: double 3, float 5, int32 7, int64 9, uint32 11,
          uint64 13, sint32 15, sint64 17, fixed32 19, fixed64 21, sfixed32 23, sfixed64 25,
          bool 27, string 29, bytes 31; the lists 4 .. 32 (``values = 1`` inside)
    NodeType: 1 METADATA, 2 MEM_LOAD, 3 MEM_STORE, 4 COMP, 5 COMM_SEND, 6 COMM_RECV, 7 COMM_COLL,
          8 STORAGE, 9 BATCH, 10 CHECKPOINT (0 INVALID and anything else: refused)
    CollectiveCommType: 0 ALL_REDUCE, 1 REDUCE, 2 ALL_GATHER, 3 GATHER, 4 SCATTER, 5 BROADCAST,
          6 ALL_TO_ALL, 7 REDUCE_SCATTER, 8 REDUCE_SCATTER_BLOCK, 9 BARRIER

Attributes used (the names ASTRA-sim's Chakra feeder reads): ``comm_type``, ``comm_size``
(bytes), ``comm_src`` / ``comm_dst`` / ``comm_tag`` (point-to-point), ``pg_name`` (process
group), ``num_ops`` (FLOPs of a compute node), ``tensor_size`` (bytes a compute or memory node
touches).  ``duration_micros`` is microseconds (Chakra's unit); times here are ns.

Why a hand-written decoder: the official ``mlc-chakra`` package installs (1.0.0 with protobuf
7.36 in a scratch venv), but pulls in about 100 packages (HolisticTraceAnalysis, pandas,
jupyterlab ...) for a reader that needs five message types; the wire format (varints,
length-delimited fields, fixed 32/64-bit words) is small and documented, and a decoder we own
can bound every loop and name the file and node in each error.

Every error is a ``ValueError`` naming the file (and the node where there is one): a truncated
message or varint, a length prefix past the end of the file or over the per-message limit,
unknown wire types or node types, duplicate node ids, dependencies on missing nodes, cycles,
counts over :data:`TRACE_LIMITS` (new limits of this module, scaled by ``--max-work`` like
:data:`nuna_jax.limits.DEFAULT_LIMITS`), and, across ranks, rank files missing from ``0..N-1``,
collectives whose type or size disagree between ranks, sends without their receive.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import math
import re
import struct
from pathlib import Path

__all__ = ["NODE_TYPES", "COMM_TYPES", "TRACE_LIMITS", "Node", "RankTrace", "Trace", "decode_stream",
           "read_rank_file", "load_trace", "encode_trace", "critical_path"]

NODE_TYPES = {1: "METADATA", 2: "MEM_LOAD", 3: "MEM_STORE", 4: "COMP", 5: "COMM_SEND", 6: "COMM_RECV",
              7: "COMM_COLL", 8: "STORAGE", 9: "BATCH", 10: "CHECKPOINT"}
COMM_TYPES = {0: "ALL_REDUCE", 1: "REDUCE", 2: "ALL_GATHER", 3: "GATHER", 4: "SCATTER", 5: "BROADCAST",
              6: "ALL_TO_ALL", 7: "REDUCE_SCATTER", 8: "REDUCE_SCATTER_BLOCK", 9: "BARRIER"}

#: Limits of this module (not in nuna_jax.limits, a model-hash file), multiplied by ``--max-work``:
#: nodes in one rank's file, ranks of a trace, dependencies of one node, bytes of one message,
#: bytes of one communication (``comm_size``: 1 TiB), decompressed bytes of one file (256 MiB).
TRACE_LIMITS = {"trace_nodes": 1 << 20, "trace_ranks": 1 << 12, "trace_deps": 1 << 16,
                "trace_message_bytes": 1 << 24, "trace_comm_bytes": 1 << 40, "trace_file_bytes": 1 << 28}

_MAX_VARINT_BYTES = 10


def _limit(what: str, limits=None) -> int:
    from .limits import active
    return max(1, int(TRACE_LIMITS[what] * active(limits).factor))


class _Err(ValueError):
    pass


def _varint(buf: bytes, pos: int, end: int, where: str) -> tuple[int, int]:
    v = 0
    shift = 0
    for k in range(_MAX_VARINT_BYTES):
        if pos >= end:
            raise _Err(f"{where}: truncated varint")
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            if v >= 1 << 64:
                raise _Err(f"{where}: varint over 64 bits")
            return v, pos
        shift += 7
    raise _Err(f"{where}: varint longer than {_MAX_VARINT_BYTES} bytes")


def _fields(buf: bytes, pos: int, end: int, where: str):
    """(field number, wire type, value) of one message: ints for varint / fixed, (start, stop) for bytes."""
    while pos < end:
        key, pos = _varint(buf, pos, end, where)
        field, wt = key >> 3, key & 7
        if field == 0:
            raise _Err(f"{where}: field number 0")
        if wt == 0:
            v, pos = _varint(buf, pos, end, where)
        elif wt == 1:
            if pos + 8 > end:
                raise _Err(f"{where}: truncated 64-bit field {field}")
            v = int.from_bytes(buf[pos:pos + 8], "little")
            pos += 8
        elif wt == 2:
            n, pos = _varint(buf, pos, end, where)
            if n > end - pos:
                raise _Err(f"{where}: field {field} claims {n} bytes, {end - pos} left")
            v = (pos, pos + n)
            pos += n
        elif wt == 5:
            if pos + 4 > end:
                raise _Err(f"{where}: truncated 32-bit field {field}")
            v = int.from_bytes(buf[pos:pos + 4], "little")
            pos += 4
        else:
            raise _Err(f"{where}: unsupported wire type {wt} (field {field})")
        yield field, wt, v


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _signed32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def _zigzag(v: int) -> int:
    return (v >> 1) ^ -(v & 1)


def _text(buf: bytes, span, where: str) -> str:
    try:
        return buf[span[0]:span[1]].decode("utf-8")
    except UnicodeDecodeError:
        raise _Err(f"{where}: string is not UTF-8") from None


def _scalar(buf, field: int, wt: int, v, where: str):
    """One AttributeProto scalar (field 3 .. 31, odd) as a Python value."""
    kinds = {3: "d", 5: "f", 7: "i32", 9: "i64", 11: "u", 13: "u", 15: "z", 17: "z", 19: "u", 21: "u",
             23: "s32", 25: "s64", 27: "b", 29: "str", 31: "bytes"}
    k = kinds[field]
    if k in ("str", "bytes"):
        if wt != 2:
            raise _Err(f"{where}: attribute value field {field} has wire type {wt}")
        return _text(buf, v, where) if k == "str" else bytes(buf[v[0]:v[1]])
    if wt == 2:
        raise _Err(f"{where}: attribute value field {field} has wire type 2")
    if k == "d":
        return struct.unpack("<d", v.to_bytes(8, "little"))[0] if wt == 1 else float(v)
    if k == "f":
        return struct.unpack("<f", (v & 0xFFFFFFFF).to_bytes(4, "little"))[0] if wt == 5 else float(v)
    if k == "i32":
        return _signed32(v)
    if k == "i64" or k == "s64":
        return _signed64(v)
    if k == "s32":
        return _signed32(v)
    if k == "z":
        return _zigzag(v)
    if k == "b":
        return bool(v)
    return v


def _list(buf, field: int, span, where: str) -> list:
    """An AttributeProto list (``values = 1``, packed or not) of the scalar kind ``field - 1``."""
    kind = field - 1
    out = []
    for f, wt, v in _fields(buf, span[0], span[1], where):
        if f != 1:
            continue
        if wt == 2 and kind not in (29, 31):   # packed
            p, e = v
            while p < e:
                if kind in (3, 21, 25):
                    if p + 8 > e:
                        raise _Err(f"{where}: truncated packed list")
                    x, p = int.from_bytes(buf[p:p + 8], "little"), p + 8
                    wt2 = 1
                elif kind in (5, 19, 23):
                    if p + 4 > e:
                        raise _Err(f"{where}: truncated packed list")
                    x, p = int.from_bytes(buf[p:p + 4], "little"), p + 4
                    wt2 = 5
                else:
                    x, p = _varint(buf, p, e, where)
                    wt2 = 0
                out.append(_scalar(buf, kind, wt2, x, where))
                if len(out) > 1 << 20:
                    raise _Err(f"{where}: attribute list over {1 << 20} values")
        else:
            out.append(_scalar(buf, kind, wt, v, where))
    return out


def _attribute(buf, span, where: str) -> tuple[str, object]:
    name, value = "", None
    for f, wt, v in _fields(buf, span[0], span[1], where):
        if f == 1 and wt == 2:
            name = _text(buf, v, where)
        elif 3 <= f <= 32:
            value = _scalar(buf, f, wt, v, where) if f % 2 == 1 else _list(buf, f, v, where)
    return name, value


@dataclasses.dataclass
class Node:
    """One Chakra node: ``type`` a :data:`NODE_TYPES` name, ``duration_ns`` from ``duration_micros``
    (None when absent), ``attrs`` the attributes by name."""

    id: int
    name: str
    type: str
    data_deps: list
    ctrl_deps: list
    duration_ns: float | None
    attrs: dict

    def attr_int(self, key: str, where: str, default=None):
        v = self.attrs.get(key, default)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
            raise ValueError(f"{where}: node {self.id} ({self.name!r}): attribute {key} is not an integer "
                             f"({str(v)[:40]})")
        return int(v)

    @property
    def deps(self) -> list:
        return list(dict.fromkeys(self.data_deps + self.ctrl_deps))


def _node(buf, span, where: str, limits) -> Node:
    nid, name, typ, start_end = 0, "", 0, span
    data, ctrl, dur, attrs = [], [], None, {}
    max_deps = _limit("trace_deps", limits)
    for f, wt, v in _fields(buf, start_end[0], start_end[1], where):
        if f in (1, 3, 6, 7) and wt != 0:
            raise _Err(f"{where}: field {f} has wire type {wt}, expected a varint")
        if f == 1:
            nid = v
        elif f == 2 and wt == 2:
            name = _text(buf, v, where)[:200]
        elif f == 3:
            typ = v
        elif f in (4, 5):
            dst = ctrl if f == 4 else data
            if wt == 2:
                p, e = v
                while p < e:
                    x, p = _varint(buf, p, e, where)
                    dst.append(x)
                    if len(dst) > max_deps:
                        break
            elif wt == 0:
                dst.append(v)
            else:
                raise _Err(f"{where}: dependency field {f} has wire type {wt}")
            if len(dst) > max_deps:
                raise _Err(f"{where}: node {nid} has over {max_deps} dependencies (--max-work)")
        elif f == 7:
            dur = v * 1000.0
        elif f == 10 and wt == 2:
            k, val = _attribute(buf, v, f"{where}, node {nid} ({name!r})")
            attrs[k] = val
    if typ not in NODE_TYPES:
        raise ValueError(f"{where}: node {nid} ({name!r}): unknown node type {typ} "
                         f"(Chakra's are {min(NODE_TYPES)} .. {max(NODE_TYPES)})")
    return Node(nid, name, NODE_TYPES[typ], data, ctrl, dur, attrs)


def decode_stream(buf: bytes, source: str = "<bytes>", limits=None) -> tuple[dict, list]:
    """``(metadata, nodes)`` of one rank's decompressed ET bytes; ``metadata`` has ``version`` and the
    attributes."""
    pos, end, k = 0, len(buf), 0
    meta, nodes = None, []
    max_msg, max_nodes = _limit("trace_message_bytes", limits), _limit("trace_nodes", limits)
    if end == 0:
        raise ValueError(f"{source}: empty file (a Chakra ET starts with its GlobalMetadata)")
    while pos < end:
        where = f"{source}: message {k} at byte {pos}"
        try:
            n, p = _varint(buf, pos, end, where + " (length prefix)")
        except _Err as e:
            raise ValueError(str(e)) from None
        if n > end - p:
            raise ValueError(f"{where}: length prefix {n} runs past the end of the file ({end - p} bytes left)"
                             " -- truncated or not a Chakra ET")
        if n > max_msg:
            raise ValueError(f"{where}: message of {n} bytes, over the limit of {max_msg} (--max-work)")
        try:
            if k == 0:
                meta = {"version": ""}
                for f, wt, v in _fields(buf, p, p + n, where + " (GlobalMetadata)"):
                    if f == 1 and wt == 2:
                        meta["version"] = _text(buf, v, where)
                    elif f == 2 and wt == 2:
                        a, val = _attribute(buf, v, where)
                        meta[a] = val
            else:
                nodes.append(_node(buf, (p, p + n), where, limits))
                if len(nodes) > max_nodes:
                    raise ValueError(f"{source}: over {max_nodes} nodes, the trace_nodes limit (--max-work)")
        except _Err as e:
            raise ValueError(str(e)) from None
        pos, k = p + n, k + 1
    return meta, nodes


_RANK_FILE = re.compile(r"^(?P<prefix>.+)\.(?P<rank>\d{1,9})\.et(?P<gz>\.gz)?$")


def _read_bytes(path: Path, limits) -> bytes:
    from .limits import active
    lim = active(limits)
    lim.check_file(path, "trace file")
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        cap = _limit("trace_file_bytes", limits)
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as g:
                out = g.read(cap + 1)
        except (OSError, EOFError, gzip.BadGzipFile) as e:
            raise ValueError(f"{path}: bad gzip data ({e})") from None
        if len(out) > cap:
            raise ValueError(f"{path}: decompresses to over {cap} bytes, the trace_file_bytes limit (--max-work)")
        return out
    return raw


@dataclasses.dataclass
class RankTrace:
    rank: int
    path: str
    metadata: dict
    nodes: list           # in file order
    by_id: dict
    order: list           # node ids in a topological order of the dependency graph


def _topological(path: str, nodes: list, by_id: dict) -> list:
    indeg = {n.id: 0 for n in nodes}
    users = {n.id: [] for n in nodes}
    for n in nodes:
        for d in n.deps:
            if d not in by_id:
                raise ValueError(f"{path}: node {n.id} ({n.name!r}) depends on node {d}, which is not in the file")
            if d == n.id:
                raise ValueError(f"{path}: node {n.id} ({n.name!r}) depends on itself (a cycle)")
            indeg[n.id] += 1
            users[d].append(n.id)
    ready = [n.id for n in nodes if indeg[n.id] == 0]
    order = []
    while ready:
        x = ready.pop()
        order.append(x)
        for u in users[x]:
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    if len(order) != len(nodes):
        left = next(n for n in nodes if indeg[n.id] > 0)
        raise ValueError(f"{path}: the dependency graph has a cycle through node {left.id} ({left.name!r})")
    return order


def read_rank_file(path, rank: int | None = None, limits=None) -> RankTrace:
    """One rank's file: decoded, node ids unique, every dependency present, no cycle."""
    p = Path(path)
    if rank is None:
        m = _RANK_FILE.match(p.name)
        rank = int(m["rank"]) if m else 0
    meta, nodes = decode_stream(_read_bytes(p, limits), str(p), limits)
    by_id = {}
    for n in nodes:
        if n.id in by_id:
            raise ValueError(f"{p}: node id {n.id} appears twice ({by_id[n.id].name!r} and {n.name!r})")
        by_id[n.id] = n
    order = _topological(str(p), nodes, by_id)
    max_comm = _limit("trace_comm_bytes", limits)
    for n in nodes:
        where = str(p)
        if n.type in ("COMM_COLL", "COMM_SEND", "COMM_RECV"):
            size = n.attr_int("comm_size", where)
            if size is None:
                raise ValueError(f"{p}: node {n.id} ({n.name!r}): {n.type} without a comm_size attribute")
            if size < 0 or size > max_comm:
                raise ValueError(f"{p}: node {n.id} ({n.name!r}): comm_size {size} bytes is outside "
                                 f"[0, {max_comm}] (the trace_comm_bytes limit, --max-work)")
        if n.type == "COMM_COLL":
            ct = n.attr_int("comm_type", where)
            if ct is None or ct not in COMM_TYPES:
                raise ValueError(f"{p}: node {n.id} ({n.name!r}): comm_type {ct} is not a Chakra collective "
                                 f"(0 .. {max(COMM_TYPES)})")
        if n.type in ("COMM_SEND", "COMM_RECV"):
            key = "comm_dst" if n.type == "COMM_SEND" else "comm_src"
            peer = n.attr_int(key, where)
            if peer is None or peer < 0:
                raise ValueError(f"{p}: node {n.id} ({n.name!r}): {n.type} without a valid {key}")
        if n.duration_ns is not None and not (n.duration_ns <= 1e18):
            raise ValueError(f"{p}: node {n.id} ({n.name!r}): duration over 10^15 microseconds")
        for key in ("num_ops", "tensor_size"):
            v = n.attrs.get(key)
            if v is not None:
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)) \
                        or not 0 <= float(v) <= 1e24:
                    raise ValueError(f"{p}: node {n.id} ({n.name!r}): {key} {str(v)[:40]} is not a number in "
                                     "[0, 1e24]")
    return RankTrace(rank, str(p), meta or {}, nodes, by_id, order)


@dataclasses.dataclass
class Collective:
    """One collective matched across ranks: the k-th COMM_COLL of process group ``pg`` on each rank."""

    index: int
    pg: str
    comm_type: str
    size_bytes: int
    ranks: tuple
    node_ids: dict        # rank -> node id
    name: str


@dataclasses.dataclass
class P2P:
    src: int
    dst: int
    tag: int
    size_bytes: int
    send_node: int
    recv_node: int


@dataclasses.dataclass
class Trace:
    """All ranks of a trace: ``ranks[r]`` a :class:`RankTrace`, the collectives matched across ranks,
    the point-to-point messages matched send to receive."""

    ranks: list
    collectives: list
    p2p: list

    @property
    def n_ranks(self) -> int:
        return len(self.ranks)


def _trace_files(paths) -> list[Path]:
    out = []
    for x in paths:
        p = Path(x)
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if _RANK_FILE.match(q.name) and q.is_file())
            if not found:
                raise ValueError(f"trace directory {str(p)!r} holds no PREFIX.<rank>.et files")
            out.extend(found)
        elif p.exists():
            out.append(p)
        else:
            raise ValueError(f"trace file {str(p)!r} does not exist")
    return out


def load_trace(paths, limits=None) -> Trace:
    """Read a trace from rank files and/or a directory of ``PREFIX.<rank>.et[.gz]`` files.

    Ranks come from the file names (a single file without a rank number is rank 0) and must be
    ``0 .. N-1`` once each, with one prefix.  Collectives are matched by order within each process
    group (``pg_name``, default the whole trace): the k-th collective of a group must have the same
    ``comm_type`` and ``comm_size`` on every rank that has the group.  Every ``COMM_SEND`` from a to b
    needs a ``COMM_RECV`` on b from a with the same tag and size (matched in order)."""
    files = _trace_files([paths] if isinstance(paths, (str, Path)) else list(paths))
    if not files:
        raise ValueError("no trace files given")
    by_rank, prefixes = {}, set()
    for f in files:
        m = _RANK_FILE.match(f.name)
        if m is None and len(files) > 1:
            raise ValueError(f"{f}: a trace of several files needs names PREFIX.<rank>.et")
        r = int(m["rank"]) if m else 0
        prefixes.add(str(f.parent / m["prefix"]) if m else str(f))
        if r in by_rank:
            raise ValueError(f"{f}: rank {r} given twice (also {by_rank[r]})")
        by_rank[r] = f
    if len(prefixes) > 1:
        raise ValueError(f"trace files of different prefixes: {', '.join(sorted(prefixes))[:300]}")
    from .limits import active
    n = len(by_rank)
    if n > _limit("trace_ranks", limits):
        raise ValueError(f"{n} rank files, over the trace_ranks limit of {_limit('trace_ranks', limits)} (--max-work)")
    missing = [r for r in range(n) if r not in by_rank]
    if missing:
        raise ValueError(f"rank files must be numbered 0 .. {n - 1}: rank {missing[0]} is missing "
                         f"(have {', '.join(map(str, sorted(by_rank)))[:200]})")
    active(limits)
    ranks = [read_rank_file(by_rank[r], r, limits) for r in range(n)]
    return Trace(ranks, _match_collectives(ranks), _match_p2p(ranks))


def _match_collectives(ranks: list) -> list:
    groups = {}      # pg -> rank -> [nodes in topological-then-id order]
    for rt in ranks:
        pos = {nid: k for k, nid in enumerate(rt.order)}
        colls = sorted((n for n in rt.nodes if n.type == "COMM_COLL"), key=lambda n: (pos[n.id], n.id))
        for n in colls:
            pg = n.attrs.get("pg_name")
            pg = str(pg) if pg not in (None, "") else "default"
            groups.setdefault(pg, {}).setdefault(rt.rank, []).append(n)
    out = []
    for pg, per in groups.items():
        rs = sorted(per)
        counts = {r: len(per[r]) for r in rs}
        if len(set(counts.values())) > 1:
            a, b = min(counts, key=counts.get), max(counts, key=counts.get)
            raise ValueError(f"ranks disagree on the collectives of process group {pg!r}: "
                             f"{ranks[a].path} has {counts[a]}, {ranks[b].path} has {counts[b]}")
        for k in range(counts[rs[0]]):
            ref = per[rs[0]][k]
            rt0 = ranks[rs[0]]
            ct, sz = ref.attr_int("comm_type", rt0.path), ref.attr_int("comm_size", rt0.path)
            for r in rs[1:]:
                n = per[r][k]
                c2, s2 = n.attr_int("comm_type", ranks[r].path), n.attr_int("comm_size", ranks[r].path)
                if (c2, s2) != (ct, sz):
                    raise ValueError(
                        f"ranks disagree on collective {k} of process group {pg!r}: {rt0.path} node {ref.id} is "
                        f"{COMM_TYPES[ct]} of {sz} B, {ranks[r].path} node {n.id} is {COMM_TYPES[c2]} of {s2} B")
            out.append(Collective(len(out), pg, COMM_TYPES[ct], sz, tuple(rs), {r: per[r][k].id for r in rs},
                                  ref.name))
    return out


def _match_p2p(ranks: list) -> list:
    n = len(ranks)
    sends, recvs = {}, {}
    for rt in ranks:
        pos = {nid: k for k, nid in enumerate(rt.order)}
        for node in sorted(rt.nodes, key=lambda x: (pos[x.id], x.id)):
            if node.type not in ("COMM_SEND", "COMM_RECV"):
                continue
            tag = node.attr_int("comm_tag", rt.path, 0)
            size = node.attr_int("comm_size", rt.path)
            if node.type == "COMM_SEND":
                peer = node.attr_int("comm_dst", rt.path)
                key = (rt.rank, peer, tag)
                d = sends
            else:
                peer = node.attr_int("comm_src", rt.path)
                key = (peer, rt.rank, tag)
                d = recvs
            if peer >= n or peer == rt.rank:
                raise ValueError(f"{rt.path}: node {node.id} ({node.name!r}): {node.type} peer rank {peer} is "
                                 f"{'this rank' if peer == rt.rank else f'not in 0 .. {n - 1}'}")
            d.setdefault(key, []).append((node, size))
    out = []
    for key in sorted(set(sends) | set(recvs)):
        s, r = sends.get(key, []), recvs.get(key, [])
        src, dst, tag = key
        if len(s) != len(r):
            side, lst = (ranks[src], s) if len(s) > len(r) else (ranks[dst], r)
            node = lst[min(len(s), len(r))][0]
            raise ValueError(f"{side.path}: node {node.id} ({node.name!r}): {len(s)} send(s) from rank {src} to "
                             f"rank {dst} with tag {tag} but {len(r)} receive(s)")
        for (sn, ss), (rn, rsz) in zip(s, r):
            if ss != rsz:
                raise ValueError(f"{ranks[dst].path}: node {rn.id} ({rn.name!r}): receives {rsz} B but the send "
                                 f"{ranks[src].path} node {sn.id} sends {ss} B")
            out.append(P2P(src, dst, tag, ss, sn.id, rn.id))
    return out


# ------------------------------------------------------------------ critical path over all ranks

def critical_path(trace: Trace, node_time_ns, coll_time_ns, p2p_time_ns) -> dict:
    """Longest path (ns) through the trace's dependency graph, all ranks together.

    Every node of every rank is a vertex weighted by ``node_time_ns(rank, node)`` (compute, memory;
    0 for metadata); the k-th collective of a group is *one* vertex shared by its ranks (it starts
    when the last of them is ready: a collective synchronizes its ranks) weighted by
    ``coll_time_ns(collective)``; a matched send / receive pair is one vertex weighted by
    ``p2p_time_ns(p2p)``.  Returns ``{"critical_path_ns", "path": [(rank, node_id), ...]}``;
    a cycle made by the synchronization (a deadlocked trace) is an error naming a node on it.
    """
    vid = {}                  # (rank, node id) -> vertex
    weight, label = [], []
    for c in trace.collectives:
        v = len(weight)
        weight.append(float(coll_time_ns(c)))
        label.append((c.ranks[0], c.node_ids[c.ranks[0]]))
        for r, nid in c.node_ids.items():
            vid[(r, nid)] = v
    for m in trace.p2p:
        v = len(weight)
        weight.append(float(p2p_time_ns(m)))
        label.append((m.src, m.send_node))
        vid[(m.src, m.send_node)] = v
        vid[(m.dst, m.recv_node)] = v
    for rt in trace.ranks:
        for n in rt.nodes:
            if (rt.rank, n.id) not in vid:
                vid[(rt.rank, n.id)] = len(weight)
                weight.append(float(node_time_ns(rt.rank, n)))
                label.append((rt.rank, n.id))
    nv = len(weight)
    preds = [set() for _ in range(nv)]
    for rt in trace.ranks:
        for n in rt.nodes:
            v = vid[(rt.rank, n.id)]
            for d in n.deps:
                u = vid[(rt.rank, d)]
                if u != v:
                    preds[v].add(u)
    succ = [[] for _ in range(nv)]
    indeg = [0] * nv
    for v in range(nv):
        for u in preds[v]:
            succ[u].append(v)
            indeg[v] += 1
    finish = [0.0] * nv
    best_pred = [-1] * nv
    ready = [v for v in range(nv) if indeg[v] == 0]
    done = 0
    start = [0.0] * nv
    while ready:
        u = ready.pop()
        done += 1
        finish[u] = start[u] + weight[u]
        for v in succ[u]:
            if best_pred[v] < 0 or finish[u] > start[v]:
                start[v], best_pred[v] = finish[u], u
            indeg[v] -= 1
            if indeg[v] == 0:
                ready.append(v)
    if done != nv:
        v = next(v for v in range(nv) if indeg[v] > 0)
        r, nid = label[v]
        raise ValueError(f"{trace.ranks[r].path}: node {nid}: the collectives and sends tie the ranks' graphs into "
                         "a cycle (the trace would deadlock)")
    end = max(range(nv), key=lambda v: finish[v]) if nv else -1
    path = []
    v = end
    while v >= 0:
        path.append(label[v])
        v = best_pred[v]
    return {"critical_path_ns": finish[end] if nv else 0.0, "path": path[::-1]}


# ------------------------------------------------------------------ writing (tests, examples)

def _enc_varint(v: int) -> bytes:
    if v < 0:
        v += 1 << 64
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _enc_field(field: int, wt: int, payload) -> bytes:
    key = _enc_varint(field << 3 | wt)
    if wt == 0:
        return key + _enc_varint(payload)
    return key + _enc_varint(len(payload)) + payload


def _enc_attr(name: str, value) -> bytes:
    b = _enc_field(1, 2, name.encode())
    if isinstance(value, bool):
        return b + _enc_field(27, 0, int(value))
    if isinstance(value, int):
        return b + _enc_field(9, 0, value)
    if isinstance(value, float):
        return b + _enc_varint(3 << 3 | 1) + struct.pack("<d", value)
    if isinstance(value, str):
        return b + _enc_field(29, 2, value.encode())
    if isinstance(value, (list, tuple)) and all(isinstance(x, bool) for x in value):        # BoolList
        return b + _enc_field(28, 2, _enc_field(1, 2, b"".join(_enc_varint(int(x)) for x in value)))
    if isinstance(value, (list, tuple)) and all(isinstance(x, int) for x in value):         # Int64List
        return b + _enc_field(10, 2, _enc_field(1, 2, b"".join(_enc_varint(x) for x in value)))
    raise TypeError(f"attribute {name}: unsupported value {value!r}")


def encode_node(id: int, name: str = "", type: str | int = "COMP", data_deps=(), ctrl_deps=(),
                duration_micros: int | None = None, **attrs) -> bytes:
    """One ``Node`` message (no length prefix); ``type`` a :data:`NODE_TYPES` name or number."""
    t = type if isinstance(type, int) else {v: k for k, v in NODE_TYPES.items()}[type]
    b = b""
    if id:
        b += _enc_field(1, 0, id)
    if name:
        b += _enc_field(2, 2, name.encode())
    b += _enc_field(3, 0, t)
    if ctrl_deps:
        b += _enc_field(4, 2, b"".join(_enc_varint(d) for d in ctrl_deps))
    if data_deps:
        b += _enc_field(5, 2, b"".join(_enc_varint(d) for d in data_deps))
    if duration_micros is not None:
        b += _enc_field(7, 0, duration_micros)
    for k, v in attrs.items():
        b += _enc_field(10, 2, _enc_attr(k, v))
    return b


def encode_trace(nodes, version: str = "0.0.4") -> bytes:
    """A rank file's bytes: a GlobalMetadata then the nodes, each length-prefixed.  ``nodes``: Node
    message bytes (:func:`encode_node`) or dicts of its keyword arguments."""
    msgs = [_enc_field(1, 2, version.encode())]
    msgs += [n if isinstance(n, bytes) else encode_node(**n) for n in nodes]
    return b"".join(_enc_varint(len(m)) + m for m in msgs)
