"""Timelines of a simulation: the Chrome / Perfetto trace-event JSON of every resource's services.

:func:`simulate` with ``trace_services=N`` records each resource service of the run (a flit
issued by a CU, read or written by an HBM stack, carried by a mesh link, sent or received by an
I/O port; docs/model.md, "The path of a flit") as ``(flit, resource, start, service)``.
:func:`trace_document` turns them into the trace-event format that https://ui.perfetto.dev and
``chrome://tracing`` open (docs/plots.md, "Simulator timelines"):

* one *process* per GPU (``pid`` = GPU index, named ``GPU g``) and one *thread* per resource
  that served a flit (``tid`` = the GPU-local resource id of :func:`nuna_jax.path.resource_layout`,
  named ``CU 17 (router 4 (4,0), die 0)``, ``HBM stack 3``, ``link (3,0)->(4,0)``,
  ``egress port 5``, ``ingress port 5``; sorted CUs, HBM stacks, links, egress, ingress);
* one complete event (``ph: "X"``) per *run*: consecutive flits of one flow served back to back
  by one resource (each starts when the one before ends) are one slice, with ``args.flits``
  saying how many; a lone flit is a slice of its own.  ``ts`` and ``dur`` are microseconds
  (the format's unit) with picosecond resolution (6 decimals); ``displayTimeUnit`` is ``ns``.
  Each ``dur`` is written 1 ps shorter than the service: Perfetto keeps whole nanoseconds,
  truncating ``ts`` and ``dur`` separately, and a slice ending exactly where the next one on its
  track starts could then overlap it by 1 ns (and be dropped as badly nested); one picosecond
  less makes ``trunc(ts) + trunc(dur) <= trunc(next ts)`` always.
  Slices are named after the flow's GPUs (``GPU 0->3``; background flows ``background``), so
  Perfetto colours a flow's slices alike; ``args`` holds the flow row, its threadblock and step.

The trace is bounded: at most ``max_slices`` slices (:data:`DEFAULT_MAX_SLICES`, about 140 MB of
JSON).  Past the bound it keeps the slices that start before a cut time, all of them (a
complete prefix of the run), and says so (``otherData.truncated``, ``otherData.cut_ns``).
"""

from __future__ import annotations

import json
import os

import numpy as np

__all__ = ["DEFAULT_MAX_SLICES", "RECORD_PER_SLICE", "trace_document", "write_trace", "check_trace_path",
           "resource_names"]

#: default bound on the slices of one trace (about 140 bytes of JSON each)
DEFAULT_MAX_SLICES = 1_000_000
#: services recorded per allowed slice (runs of back-to-back flits merge several services into one)
RECORD_PER_SLICE = 8


def check_trace_path(path: str) -> None:
    """Refuse a trace path that cannot be written, before any simulation (ValueError)."""
    p = str(path)
    if not p.lower().endswith(".json"):
        raise ValueError(f"--trace {p!r}: the file must end in .json (Chrome / Perfetto trace-event JSON)")
    if os.path.isdir(p):
        raise ValueError(f"--trace {p!r} is a directory")
    parent = os.path.dirname(os.path.abspath(p))
    if not os.path.isdir(parent):
        raise ValueError(f"--trace {p!r}: directory {parent!r} does not exist")
    if not os.access(parent, os.W_OK) or (os.path.exists(p) and not os.access(p, os.W_OK)):
        raise ValueError(f"--trace {p!r}: not writable")


def resource_names(system, local_ids) -> list[str]:
    """Readable names of GPU-local resource ids (:func:`nuna_jax.path.resource_layout` order)."""
    from .. import geometry as geo
    from ..path import resource_layout
    lay = resource_layout(system)
    cols = system.mesh_cols
    out = []
    for rid in np.asarray(local_ids, np.int64):
        rid = int(rid)
        if rid < lay.offset_hbm:
            r = rid // system.cus_per_router
            die = int(geo.router_die(system, np.int64(r)))
            out.append(f"CU {rid} (router {r} ({r % cols},{r // cols}), die {die})")
        elif rid < lay.offset_link:
            out.append(f"HBM stack {rid - lay.offset_hbm}")
        elif rid < lay.offset_egress:
            slot = rid - lay.offset_link
            a, b = geo.link_endpoints(system, np.int64(slot))
            a, b = int(a), int(b)
            out.append(f"link ({a % cols},{a // cols})->({b % cols},{b // cols})" if b >= 0 else f"link slot {slot}")
        elif rid < lay.offset_ingress:
            out.append(f"egress port {rid - lay.offset_egress}")
        else:
            out.append(f"ingress port {rid - lay.offset_ingress}")
    return out


def _runs(flow, res, start, svc):
    """Merge services sorted by (resource, start) into runs: same resource, same flow, each
    starting when the one before ends.  Returns (first index of each run, flits per run, end)."""
    end = start + svc
    new = np.ones(flow.shape[0], bool)
    new[1:] = (res[1:] != res[:-1]) | (flow[1:] != flow[:-1]) | (start[1:] != end[:-1])
    first = np.flatnonzero(new)
    count = np.diff(np.r_[first, flow.shape[0]])
    last = first + count - 1
    return first, count, end[last]


def trace_document(system, traffic, result, *, max_slices: int = DEFAULT_MAX_SLICES,
                   meta: dict | None = None) -> tuple[dict, dict]:
    """``(document, summary)``: the trace-event document of ``result.trace`` as a dict (what
    :func:`write_trace` writes, for small runs and tests) and a summary of what it holds.

    ``system``, ``traffic``: what was simulated; ``result``: a :class:`SimResult` of
    :func:`nuna_jax.sim.simulate` run with ``trace_services > 0``; ``max_slices``: the bound.
    Summary keys: ``slices``, ``services`` (recorded), ``truncated``, ``cut_ns`` (every service
    that starts before it is in the trace, ns; None when nothing was left out), ``completion_ns``.
    """
    doc, slices, flows, info = _prepare(system, traffic, result, max_slices, meta)
    doc["traceEvents"] += [json.loads(line) for line in _slice_lines(slices, flows)]
    return doc, info


def _prepare(system, traffic, result, max_slices, meta):
    """The document's metadata events and header, the slices as arrays, the flows' labels, the
    summary."""
    tr = result.trace
    if tr is None:
        raise ValueError("the result holds no trace: simulate with trace_services > 0")
    from ..path import resource_layout
    lay = resource_layout(system)
    flit, res, start, svc = (np.asarray(tr[k], np.int64) for k in ("flit", "resource", "start_ps", "service_ps"))
    cut = tr.get("complete_before_ps")
    if cut is not None:                                   # keep the complete prefix the recording holds
        keep = start < cut
        flit, res, start, svc = flit[keep], res[keep], start[keep], svc[keep]
    flow = np.asarray(result.flit_flow, np.int64)[flit]
    o = np.lexsort((flit, start, res))
    flow, res, start, svc, flit = flow[o], res[o], start[o], svc[o], flit[o]
    first, count, end = _runs(flow, res, start, svc)
    ts = start[first]
    if first.shape[0] > max_slices:                       # bound: the slices starting before a cut time
        c2 = int(np.partition(ts, max_slices)[max_slices])
        cut = c2 if cut is None else min(cut, c2)
    if cut is not None:
        k = ts < cut
        first, count, end, ts = first[k], count[k], end[k], ts[k]
    r_of, fl_of = res[first], flow[first]
    gpu, local = r_of // lay.per_gpu, r_of % lay.per_gpu

    t = traffic.numpy() if hasattr(traffic, "numpy") else traffic
    n_tf = int(result.n_traffic_flows)
    src = np.asarray(t.src_gpu, np.int64)
    dst = np.asarray(t.dst_gpu, np.int64)
    tb = np.asarray(t.tb, np.int64)
    step = np.asarray(t.step, np.int64)

    events = []
    for g in np.unique(gpu):
        events.append({"name": "process_name", "ph": "M", "pid": int(g), "tid": 0, "args": {"name": f"GPU {int(g)}"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": int(g), "tid": 0,
                       "args": {"sort_index": int(g)}})
    pairs = np.unique(np.stack([gpu, local], axis=1), axis=0) if gpu.size else np.zeros((0, 2), np.int64)
    uniq_local = np.unique(pairs[:, 1]) if pairs.size else np.zeros(0, np.int64)
    names = dict(zip(uniq_local.tolist(), resource_names(system, uniq_local)))
    for g, lr in pairs.tolist():
        events.append({"name": "thread_name", "ph": "M", "pid": g, "tid": lr, "args": {"name": names[lr]}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": g, "tid": lr, "args": {"sort_index": lr}})
    info = {"slices": int(first.shape[0]), "services": int(start.shape[0]),
            "truncated": cut is not None, "cut_ns": None if cut is None else cut / 1000.0,
            "completion_ns": result.completion_ps / 1000.0, "max_slices": int(max_slices)}
    other = {"format": "nuna_jax simulator timeline: one slice per run of back-to-back flits of one flow "
                       "on one resource; pid = GPU, tid = GPU-local resource id; ts/dur in us",
             "engine": result.engine, **info, **(meta or {})}
    doc = {"traceEvents": events, "displayTimeUnit": "ns", "otherData": other}
    slices = (ts, end - ts, gpu, local, fl_of, count, flit[first])
    return doc, slices, (n_tf, src, dst, tb, step), info


def _slice_lines(slices, flows):
    ts, dur, gpu, local, fl_of, count, _ = slices
    n_tf, src, dst, tb, step = flows
    used = np.unique(fl_of)
    head = {}                                            # per flow: the start of its event text
    for fl in used.tolist():
        if fl < n_tf:
            head[fl] = (f'{{"name":"GPU {int(src[fl])}->{int(dst[fl])}","ph":"X",',
                        f',"tb":{int(tb[fl])},"step":{int(step[fl])}}}}}')
        else:
            head[fl] = ('{"name":"background","ph":"X",', "}}")
    for t0, d, g, lr, fl, n in zip(ts.tolist(), dur.tolist(), gpu.tolist(), local.tolist(), fl_of.tolist(),
                                   count.tolist()):
        h, tail = head[fl]
        d = max(d - 1, 0)                 # 1 ps short: see the module doc (viewers that keep whole ns)
        yield (f'{h}"pid":{g},"tid":{lr},"ts":{t0 // 1000000}.{t0 % 1000000:06d},'
               f'"dur":{d // 1000000}.{d % 1000000:06d},"args":{{"flow":{fl},"flits":{n}{tail}')


def write_trace(path: str, system, traffic, result, *, max_slices: int = DEFAULT_MAX_SLICES,
                meta: dict | None = None) -> dict:
    """Write ``result``'s timeline to ``path`` (trace-event JSON, streamed line by line);
    returns the summary of :func:`trace_document` plus ``path`` and ``bytes``.  Times are exact: picoseconds written
    as microseconds with six decimals."""
    doc, slices, flows, info = _prepare(system, traffic, result, max_slices, meta)
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    with open(path, "w", encoding="utf-8") as fh:
        fh.write('{"traceEvents":[\n')
        first = True
        for e in doc["traceEvents"]:
            fh.write(("" if first else ",\n") + json.dumps(e, separators=(",", ":")))
            first = False
        lines = list(_slice_lines(slices, flows))
        if lines:
            fh.write(("" if first else ",\n") + ",\n".join(lines))
        fh.write("\n],\n")
        fh.write(json.dumps(head, separators=(",", ":"), allow_nan=False)[1:])
        fh.write("\n")
    return {**info, "path": str(path), "bytes": os.path.getsize(path)}
