"""Import MSCCL XML algorithm files (msccl-tools format) into a :class:`plans.Plan`.

Format: ``<algo ngpus nchunksperloop coll ...>`` > ``<gpu id i_chunks
o_chunks s_chunks>`` > ``<tb id send recv chan>`` > ``<step s type srcbuf
srcoff dstbuf dstoff cnt depid deps hasdep>``.

Semantics (docs/policies.md, "MSCCL import"):

* ``size_bytes`` is the buffer of ``nchunksperloop`` chunks, so a chunk is
  ``size_bytes / nchunksperloop`` bytes, a whole number of elements.  A size
  that ``nchunksperloop`` whole-element chunks do not divide is padded up to
  the next one that they do (``plans.pad_to``): each chunk is
  ``ceil(size_bytes / (nchunksperloop * elem_bytes))`` elements, and the
  plan's ``pad_bytes`` says how many bytes were added (``Plan.pad_bytes``;
  bandwidth figures count ``size_bytes`` only).  Sizes that divide give the
  plan they always gave.
* Sending steps (``s``, ``rcs``, ``rrs``, ``rrcs``) of a threadblock with
  ``send = p`` on channel ``chan`` are matched, in order, with the receiving
  steps (``r``, ``rcs``, ``rrs``, ``rrc``, ``rrcs``) of the threadblock on GPU
  ``p`` with ``recv = g`` on the same channel.  Each match is one plan step of
  the *sending* threadblock (NUNA's put model: the threadblock that loads the
  data stores it into the peer): it reads ``cnt`` chunks at ``srcbuf/srcoff``
  (for ``rcs`` / ``rrcs``, whose data was first received into
  ``dstbuf/dstoff``, at ``dstbuf/dstoff``) and writes them at the receiving
  step's ``dstbuf/dstoff`` on ``p``.
* Threadblocks that only receive or copy locally carry no scale-up traffic
  and are left out of the plan.
* ``phase`` is the dependency level: a receive completes one level after its
  matched send; a step is at least at the level of the previous step of its
  threadblock and of its explicit dependency ``(depid, deps)``.

Parsing is safe and bounded: ``defusedxml`` (no DTD, no entity declarations,
no external entities) feeds a tree builder that keeps line numbers; every
integer attribute is checked against a range before any product or array is
formed, and ``ngpus`` against the ``<gpu>`` elements actually present.  Errors
name the file, the line and the element.  :func:`load_msccl` parses a file
once and hands later calls with the same file (unchanged) and size the same
plan.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .plans import BUF_INDEX, Plan, canonical_collective, pad_to

__all__ = ["load_msccl", "parse_msccl", "msccl_gpus"]

_SEND = {"s", "rcs", "rrs", "rrcs"}
_RECV = {"r", "rcs", "rrs", "rrc", "rrcs"}
_TYPES = _SEND | _RECV | {"cpy", "re", "nop"}
_READS_DST = {"rcs", "rrcs"}  # data sent on is the copy just received into dst


class _Node:
    __slots__ = ("tag", "attrs", "line", "children")

    def __init__(self, tag, attrs, line):
        self.tag, self.attrs, self.line, self.children = tag, attrs, line, []


#: Largest accepted integer attribute (chunk counts, offsets, ids, step indices): 2^40.
MAX_ATTR = 1 << 40
#: Largest buffer a plan may address, bytes (keeps every offset an exact int64).
MAX_BUFFER_BYTES = 1 << 60


class _Builder:
    """defusedxml target: a tree of :class:`_Node` with the line of each start tag."""

    def __init__(self):
        self.parser = None
        self.stack: list[_Node] = []
        self.root: list[_Node] = []

    def start(self, tag, attrs):
        node = _Node(tag, dict(attrs), self.parser.parser.CurrentLineNumber)
        (self.stack[-1].children if self.stack else self.root).append(node)
        self.stack.append(node)

    def end(self, tag):
        self.stack.pop()

    def close(self):
        return self.root[0] if self.root else None


class _HeaderOnly(Exception):
    pass


def _parser(target):
    from defusedxml.ElementTree import DefusedXMLParser
    p = DefusedXMLParser(target=target, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    target.parser = p
    return p


def _xml_error(e: Exception, source: str) -> ValueError:
    from defusedxml import DefusedXmlException
    from xml.etree.ElementTree import ParseError
    if isinstance(e, DefusedXmlException):
        return ValueError(f"{source}: DTDs, entity declarations and external entities are not allowed "
                          f"({type(e).__name__})")
    if isinstance(e, ParseError):
        line, col = getattr(e, "position", (None, None))
        msg = str(e).split(":")[0]
        return ValueError(f"{source}: malformed XML at line {line}, column {col}: {msg}")
    raise e


def _parse_tree(text: bytes | str, source: str) -> _Node:
    from defusedxml import DefusedXmlException
    from xml.etree.ElementTree import ParseError
    b = _Builder()
    p = _parser(b)
    try:
        p.feed(text)
        root = p.close()
    except (DefusedXmlException, ParseError) as e:
        raise _xml_error(e, source) from None
    if root is None:
        raise ValueError(f"{source}: no root element")
    return root


def _int(node: _Node, key: str, source: str, *, default=None, lo=None, hi=MAX_ATTR) -> int:
    if key not in node.attrs:
        if default is not None:
            return default
        raise ValueError(f"{source}: line {node.line}: <{node.tag}> lacks attribute {key!r}")
    raw = node.attrs[key]
    if len(raw) > 40:
        raise ValueError(f"{source}: line {node.line}: <{node.tag}> attribute {key}={raw[:40]!r}... "
                         "is too long for an integer")
    try:
        v = int(raw)
    except ValueError:
        raise ValueError(f"{source}: line {node.line}: <{node.tag}> attribute {key}={raw!r} "
                         "is not an integer") from None
    if (lo is not None and v < lo) or v > hi:
        raise ValueError(f"{source}: line {node.line}: <{node.tag}> attribute {key}={raw[:40]!r} is out of "
                         f"range: allowed {lo if lo is not None else '-inf'} .. {hi}")
    return v


def _buf(node: _Node, key: str, source: str) -> int:
    raw = node.attrs.get(key)
    if raw is None:
        raise ValueError(f"{source}: line {node.line}: <{node.tag}> lacks attribute {key!r}")
    if raw not in BUF_INDEX:
        raise ValueError(f"{source}: line {node.line}: <{node.tag}> attribute {key}={raw!r} "
                         "must be one of i, o, s")
    return BUF_INDEX[raw]


def _header(root: _Node, source: str) -> tuple[int, int, str]:
    if root.tag != "algo":
        raise ValueError(f"{source}: line {root.line}: root element must be <algo>, got <{root.tag}>")
    n = _int(root, "ngpus", source, lo=2)
    nchunks = _int(root, "nchunksperloop", source, lo=1)
    coll = root.attrs.get("coll", "")
    return n, nchunks, coll


def msccl_gpus(path: str | Path) -> int:
    """The ``ngpus`` of an MSCCL XML file (reads only up to the root element)."""
    from defusedxml import DefusedXmlException
    from xml.etree.ElementTree import ParseError
    p = _plan_path(path)

    class _Head(_Builder):
        def start(self, tag, attrs):
            super().start(tag, attrs)
            raise _HeaderOnly

    b = _Head()
    parser = _parser(b)
    try:
        with p.open("rb") as fh:
            while chunk := fh.read(1 << 16):
                parser.feed(chunk)
            parser.close()
    except _HeaderOnly:
        pass
    except (DefusedXmlException, ParseError) as e:
        raise _xml_error(e, str(p)) from None
    if not b.root:
        raise ValueError(f"{p}: no root element")
    return _header(b.root[0], str(p))[0]


def _plan_path(path) -> Path:
    p = Path(path)
    if not p.exists():
        raise ValueError(f"plan file {str(p)!r} does not exist")
    if not p.is_file():
        raise ValueError(f"plan file {str(p)!r} is not a regular file")
    return p


_CACHE: dict = {}


def load_msccl(path: str | Path, size_bytes: int, *, elem_bytes: int = 2, limits=None) -> Plan:
    """Read an MSCCL XML file into a Plan for a buffer of ``size_bytes``.

    The file is parsed once: a second call with the same (unchanged) file,
    size and element size returns the same Plan.  The file's size is checked
    before it is read (``limits``, default :func:`limits.active`: ``file_bytes``,
    16 MiB; ``WorkLimitError``).
    """
    from .limits import active
    p = _plan_path(path)
    active(limits).check_file(p, "MSCCL plan file")
    st = os.stat(p)
    key = (str(p.resolve()), st.st_ino, st.st_size, st.st_mtime_ns, int(size_bytes), int(elem_bytes))
    if key in _CACHE:
        return _CACHE[key]
    plan = parse_msccl(p.read_bytes(), size_bytes, elem_bytes=elem_bytes, source=str(p))
    _CACHE.clear()
    _CACHE[key] = plan
    return plan


def parse_msccl(text: bytes | str, size_bytes: int, *, elem_bytes: int = 2, source: str = "<msccl>") -> Plan:
    """Parse MSCCL XML text (see module doc)."""
    root = _parse_tree(text, source)
    n, nchunks, coll = _header(root, source)
    size, elem = int(size_bytes), int(elem_bytes)
    if size <= 0:
        raise ValueError(f"size_bytes must be > 0, got {size_bytes}")
    if elem <= 0:
        raise ValueError(f"elem_bytes must be > 0, got {elem_bytes}")
    padded = pad_to(size, nchunks * elem)   # whole elements per chunk (module doc); == size when it divides
    cb = padded // nchunks
    try:
        collective = canonical_collective(coll) if coll else "custom"
    except ValueError:
        collective = str(coll)

    if cb * max(1, nchunks) > MAX_BUFFER_BYTES:
        raise ValueError(f"{source}: size_bytes={size} is too large (at most {MAX_BUFFER_BYTES} bytes)")

    # ---- walk the tree, validating structure
    gpus: dict[int, dict] = {}
    for gnode in root.children:
        if gnode.tag != "gpu":
            raise ValueError(f"{source}: line {gnode.line}: expected <gpu> inside <algo>, got <{gnode.tag}>")
        gid = _int(gnode, "id", source, lo=0)
        if gid >= n:
            raise ValueError(f"{source}: line {gnode.line}: <gpu id={gid}> out of range (ngpus={n})")
        if gid in gpus:
            raise ValueError(f"{source}: line {gnode.line}: duplicate <gpu id={gid}>")
        chunks = [_int(gnode, k, source, default=0, lo=0) for k in ("i_chunks", "o_chunks", "s_chunks")]
        for k, c in zip(("i_chunks", "o_chunks", "s_chunks"), chunks):
            if c * cb > MAX_BUFFER_BYTES:
                raise ValueError(f"{source}: line {gnode.line}: <gpu id={gid}> {k}={c} chunks of {cb} B exceed "
                                 f"{MAX_BUFFER_BYTES} bytes")
        tbs = {}
        for tnode in gnode.children:
            if tnode.tag != "tb":
                raise ValueError(f"{source}: line {tnode.line}: expected <tb> inside <gpu>, got <{tnode.tag}>")
            tid = _int(tnode, "id", source, lo=0)
            if tid in tbs:
                raise ValueError(f"{source}: line {tnode.line}: duplicate <tb id={tid}> on GPU {gid}")
            send = _int(tnode, "send", source, default=-1, lo=-1)
            recv = _int(tnode, "recv", source, default=-1, lo=-1)
            chan = _int(tnode, "chan", source, default=0, lo=0)
            for k, v in (("send", send), ("recv", recv)):
                if v >= n or v == gid:
                    raise ValueError(f"{source}: line {tnode.line}: <tb id={tid}> on GPU {gid}: "
                                     f"{k}={v} is not another GPU in [0, {n})")
            steps = []
            for snode in tnode.children:
                if snode.tag != "step":
                    raise ValueError(f"{source}: line {snode.line}: expected <step> inside <tb>, got <{snode.tag}>")
                typ = snode.attrs.get("type")
                if typ not in _TYPES:
                    raise ValueError(f"{source}: line {snode.line}: <step> type={typ!r} unknown; "
                                     f"expected one of {', '.join(sorted(_TYPES))}")
                st = dict(node=snode, s=_int(snode, "s", source, lo=0), type=typ,
                          cnt=_int(snode, "cnt", source, default=1, lo=1),
                          depid=_int(snode, "depid", source, default=-1, lo=-1),
                          deps=_int(snode, "deps", source, default=-1, lo=-1))
                for side in ("src", "dst"):
                    st[side + "buf"] = _buf(snode, side + "buf", source)
                    st[side + "off"] = _int(snode, side + "off", source, lo=0)
                if typ in _SEND and send < 0:
                    raise ValueError(f"{source}: line {snode.line}: <step type={typ}> sends but its <tb> has send=-1")
                if typ in _RECV and recv < 0:
                    raise ValueError(f"{source}: line {snode.line}: <step type={typ}> receives but its <tb> has recv=-1")
                steps.append(st)
            steps.sort(key=lambda q: q["s"])
            if len({q["s"] for q in steps}) != len(steps):
                raise ValueError(f"{source}: line {tnode.line}: <tb id={tid}> on GPU {gid} repeats a step index s")
            tbs[tid] = dict(node=tnode, send=send, recv=recv, chan=chan, steps=steps)
        gpus[gid] = dict(node=gnode, chunks=chunks, tbs=tbs)
    if len(gpus) != n:  # ids are unique and < n: some are missing; name the first few, O(len(gpus))
        first = []
        for g in range(n):
            if g not in gpus:
                first.append(str(g))
                if len(first) == 10:
                    break
        more = f", ... ({n - len(gpus)} in all)" if n - len(gpus) > 10 else ""
        raise ValueError(f"{source}: <algo ngpus={n}> but no <gpu> element for id(s) [{', '.join(first)}{more}]")
    buf_chunks = np.max(np.array([gpus[g]["chunks"] for g in range(n)]), axis=0)

    # ---- match sends with receives per (sender, receiver, channel)
    send_q: dict[tuple, list] = {}
    recv_q: dict[tuple, list] = {}
    for g in range(n):
        for tid, tb in sorted(gpus[g]["tbs"].items()):
            for k, st in enumerate(tb["steps"]):
                if st["type"] in _SEND:
                    key = (g, tb["send"], tb["chan"])
                    owner = send_q.setdefault(key, [])
                    if owner and owner[0][1] != tid:
                        raise ValueError(f"{source}: line {tb['node'].line}: GPU {g}: threadblocks {owner[0][1]} "
                                         f"and {tid} both send to GPU {tb['send']} on channel {tb['chan']}")
                    owner.append((g, tid, k))
                if st["type"] in _RECV:
                    key = (tb["recv"], g, tb["chan"])
                    owner = recv_q.setdefault(key, [])
                    if owner and owner[0][1] != tid:
                        raise ValueError(f"{source}: line {tb['node'].line}: GPU {g}: threadblocks {owner[0][1]} "
                                         f"and {tid} both receive from GPU {tb['recv']} on channel {tb['chan']}")
                    owner.append((g, tid, k))
    for key in sorted(set(send_q) | set(recv_q)):
        a, b = send_q.get(key, []), recv_q.get(key, [])
        if len(a) != len(b):
            g, h, c = key
            where = a[0] if a else b[0]
            line = gpus[where[0]]["tbs"][where[1]]["node"].line
            raise ValueError(f"{source}: line {line}: GPU {g} sends {len(a)} time(s) to GPU {h} on channel {c} "
                             f"but GPU {h} receives {len(b)} time(s) from it")
    match = {}  # send node -> recv node
    for key, a in send_q.items():
        for snd, rcv in zip(a, recv_q[key]):
            match[snd] = rcv
    src_of = {rcv: snd for snd, rcv in match.items()}

    # ---- dependency levels (phases): longest path in the step DAG (Kahn's order)
    def preds(node):
        g, tid, k = node
        st = gpus[g]["tbs"][tid]["steps"][k]
        out = []
        if k > 0:
            out.append(((g, tid, k - 1), 0))
        if st["depid"] >= 0:
            dtb = gpus[g]["tbs"].get(st["depid"])
            idx = None if dtb is None else next((i for i, q in enumerate(dtb["steps"]) if q["s"] == st["deps"]), None)
            if idx is None:
                raise ValueError(f"{source}: line {st['node'].line}: depid={st['depid']} deps={st['deps']} "
                                 f"names no step on GPU {g}")
            out.append(((g, st["depid"], idx), 0))
        if node in src_of:
            out.append((src_of[node], 1))
        return out

    nodes = [(g, tid, k) for g in range(n) for tid, tb in sorted(gpus[g]["tbs"].items())
             for k in range(len(tb["steps"]))]
    succ: dict[tuple, list] = {v: [] for v in nodes}
    indeg = {v: 0 for v in nodes}
    for v in nodes:
        for u, w in preds(v):
            succ[u].append((v, w))
            indeg[v] += 1
    lev = {v: 0 for v in nodes}
    ready = [v for v in nodes if indeg[v] == 0]
    done = 0
    while ready:
        u = ready.pop()
        done += 1
        for v, w in succ[u]:
            lev[v] = max(lev[v], lev[u] + w)
            indeg[v] -= 1
            if indeg[v] == 0:
                ready.append(v)
    if done != len(nodes):
        g, tid, k = next(v for v in nodes if indeg[v] > 0)
        raise ValueError(f"{source}: line {gpus[g]['tbs'][tid]['steps'][k]['node'].line}: cyclic step "
                         "dependencies (the send/receive order deadlocks)")

    # ---- plan rows: one per matched send, owned by the sending threadblock
    rows = []
    tb_keys: list[tuple] = []
    tb_index: dict[tuple, int] = {}
    for snd in sorted(match):
        g, tid, k = snd
        st = gpus[g]["tbs"][tid]["steps"][k]
        h, rt, rk = match[snd]
        rst = gpus[h]["tbs"][rt]["steps"][rk]
        if rst["cnt"] != st["cnt"]:
            raise ValueError(f"{source}: line {rst['node'].line}: receive of {rst['cnt']} chunk(s) matches a "
                             f"send of {st['cnt']} (line {st['node'].line})")
        sb, so = (st["dstbuf"], st["dstoff"]) if st["type"] in _READS_DST else (st["srcbuf"], st["srcoff"])
        db, do = rst["dstbuf"], rst["dstoff"]
        for buf, off, node, gg in ((sb, so, st["node"], g), (db, do, rst["node"], h)):
            have = gpus[gg]["chunks"][buf]
            if off + st["cnt"] > have:
                raise ValueError(f"{source}: line {node.line}: chunks [{off}, {off + st['cnt']}) exceed buffer "
                                 f"{'ios'[buf]!r} of {have} chunk(s) on GPU {gg}")
        if (g, tid) not in tb_index:
            tb_index[(g, tid)] = len(tb_keys)
            tb_keys.append((g, tid))
        rows.append((tb_index[(g, tid)], k, g, sb, so, h, db, do, st["cnt"], lev[snd]))
    if not rows:
        raise ValueError(f"{source}: the algorithm has no inter-GPU transfers")
    r = np.array(rows, dtype=np.int64)
    order = np.lexsort((r[:, 1], r[:, 0]))
    r = r[order]
    tbid = r[:, 0]
    step_idx = np.arange(len(r)) - np.searchsorted(tbid, tbid, side="left")
    i64 = lambda a: np.ascontiguousarray(a, dtype=np.int64)  # noqa: E731
    name = root.attrs.get("name", Path(source).stem)
    return Plan(
        collective=collective, algorithm="msccl", n_gpus=n, size_bytes=size, elem_bytes=elem,
        buffer_bytes=tuple(int(c) * cb for c in buf_chunks),
        tb_gpu=i64([g for g, _ in tb_keys]), tb_local=i64([t for _, t in tb_keys]),
        step_tb=i64(tbid), step_idx=i64(step_idx), src_gpu=i64(r[:, 2]), src_buf=i64(r[:, 3]),
        src_off=i64(r[:, 4] * cb), dst_gpu=i64(r[:, 5]), dst_buf=i64(r[:, 6]), dst_off=i64(r[:, 7] * cb),
        nbytes=i64(r[:, 8] * cb), phase=i64(r[:, 9]), src_chunk=i64(r[:, 4]), dst_chunk=i64(r[:, 7]),
        n_chunks=i64(r[:, 8]), name=name, pad_bytes=padded - size)
