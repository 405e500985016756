"""Flow control of the flit simulator: ``"none"`` (unbounded FCFS queues) or ``"credit"`` (docs/simulator.md,
"Credit flow control").

A simulator setting, not a ``System`` field.  In credit mode every resource a flit leaves into the
data network has an *output buffer*: the input port of the next router (``num_vcs`` virtual channels
of ``vc_buf_flits`` flits, per class), a CU's injection buffer, an I/O port's FIFO.  The rules
below are the one definition both engines (``reference_credit``, ``credit_kernel``) read; they
look only at a flit's *resource* stages, so they are the same on the uncompressed stage table and
on the compressed program.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .program import to_ps

__all__ = ["FlowControl", "MODES", "KIND_CU", "KIND_HBM", "KIND_LINK", "KIND_EGRESS", "KIND_INGRESS",
           "N_CLASSES", "flow_control", "resource_kinds", "stage_classes", "out_buffers", "link_latency_delta_ps",
           "credit_delay_ps", "settings", "line_rate_depths"]

MODES = ("none", "credit")
KIND_CU, KIND_HBM, KIND_LINK, KIND_EGRESS, KIND_INGRESS = 0, 1, 2, 3, 4
#: buffer classes (virtual networks): 0 read response, 1 store / write, 2 delivery (docs/simulator.md)
N_CLASSES = 3


class FlowControl(NamedTuple):
    """Flow-control settings (times in NoC cycles of ``System.noc_clock_ghz``).

    mode            "none": unbounded FCFS queues (the model of docs/model.md); "credit": finite buffers
    num_vcs         virtual channels per router input port and class
    vc_buf_flits    depth of one virtual channel, flits
    port_buf_flits  depth of an I/O port's FIFO (egress -> switch, ingress -> mesh), flits
    inj_buf_flits   depth of a CU's injection buffer (flits it sends straight onto the mesh), flits
    credit_delay_cycles  a freed slot's credit reaches the sender this long after the flit left
    router_cycles   None: a mesh hop takes the System's ``hop_ns`` after the link's serialization;
                    else ``(routing, vc_alloc, sw_alloc, traversal, link)`` cycles whose sum replaces it
    """

    mode: str = "none"
    num_vcs: int = 2
    vc_buf_flits: int = 8
    port_buf_flits: int = 16
    inj_buf_flits: int = 8
    credit_delay_cycles: int = 1
    router_cycles: tuple | None = None

    @property
    def credit(self) -> bool:
        return self.mode == "credit"


def flow_control(x=None, **kw) -> FlowControl:
    """A validated :class:`FlowControl` from ``None`` / a mode name / a ``FlowControl``, plus overrides.
    ``ValueError`` names the bad setting."""
    if x is None:
        fc = FlowControl()
    elif isinstance(x, FlowControl):
        fc = x
    elif isinstance(x, str):
        fc = FlowControl(mode=x)
    else:
        raise ValueError(f"flow_control must be one of {MODES} or a FlowControl, got {x!r}")
    fc = fc._replace(**{k: v for k, v in kw.items() if v is not None})
    if fc.mode not in MODES:
        raise ValueError(f"flow_control must be one of {MODES}, got {fc.mode!r}")
    for name, lo in (("num_vcs", 1), ("vc_buf_flits", 1), ("port_buf_flits", 1), ("inj_buf_flits", 1),
                     ("credit_delay_cycles", 0)):
        v = getattr(fc, name)
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= v <= 1 << 20:
            raise ValueError(f"{name} must be an integer in [{lo}, {1 << 20}], got {v!r}")
    if fc.router_cycles is not None:
        rc = tuple(fc.router_cycles)
        if len(rc) != 5 or any(isinstance(c, bool) or not isinstance(c, (int, np.integer)) or not 0 <= c <= 1000
                               for c in rc):
            raise ValueError("router_cycles must be 5 integers in [0, 1000] (routing, vc_alloc, sw_alloc, "
                             f"traversal, link), got {fc.router_cycles!r}")
        fc = fc._replace(router_cycles=tuple(int(c) for c in rc))
    return fc


def settings(fc: FlowControl) -> dict:
    """The JSON form of the settings used (``nuna-jax simulate --json``, key ``flow_control``)."""
    d = {"mode": fc.mode}
    if fc.credit:
        d.update(num_vcs=int(fc.num_vcs), vc_buf_flits=int(fc.vc_buf_flits), port_buf_flits=int(fc.port_buf_flits),
                 inj_buf_flits=int(fc.inj_buf_flits), credit_delay_cycles=int(fc.credit_delay_cycles),
                 router_cycles=None if fc.router_cycles is None else list(fc.router_cycles))
    return d


def resource_kinds(layout, res) -> np.ndarray:
    """Kind (``KIND_*``) of global resource ids (-1 where ``res < 0``)."""
    res = np.asarray(res, np.int64)
    local = res % layout.per_gpu
    bounds = np.array([layout.offset_hbm, layout.offset_link, layout.offset_egress, layout.offset_ingress])
    return np.where(res >= 0, np.searchsorted(bounds, local, side="right"), -1)


def stage_classes(kinds, mark: int) -> list[int]:
    """Buffer class of each resource stage of one flit (``kinds``: its resource stages in order).

    A traffic flit (``mark`` >= 0: the resource stage after which its store is issued) is a read
    response up to and including ``mark`` (class 0), a store from there to its egress port (1),
    a delivery from its ingress port on (2).  A background flit (``mark`` < 0) is a write (1)
    until its HBM stage, a read response (0) from it on."""
    out, cls = [], (0 if mark >= 0 else 1)
    for k, kind in enumerate(kinds):
        if mark >= 0 and k > mark and cls == 0:
            cls = 1
        if kind == KIND_INGRESS:
            cls = 2
        if mark < 0 and kind == KIND_HBM:
            cls = 0
        out.append(cls)
    return out


def out_buffers(kinds, fc: FlowControl) -> list[tuple[int, int]]:
    """``(virtual channels, depth)`` of the output buffer of each resource stage; ``(0, 0)``: none.

    The last stage has none (the HBM write, a CU receiving a read response: sinks always accept).
    A CU's issue fills its injection buffer only when the next resource is on the data network (a
    write); a read request travels on the request network, which is not modelled as buffers (the
    outstanding-request window bounds it).  An egress port feeds the switch's FIFO, an ingress port
    the destination port's receive FIFO (1 x ``port_buf_flits``); an HBM read or a mesh link a
    router input port (``num_vcs`` x ``vc_buf_flits``), which is also where a flit waits for its
    egress port (a buffer is named by the resource before it, so the depth is a property of that
    resource's kind alone)."""
    out = []
    for k, kind in enumerate(kinds):
        nxt = kinds[k + 1] if k + 1 < len(kinds) else -1
        if nxt < 0:
            out.append((0, 0))
        elif kind == KIND_CU:
            out.append((1, fc.inj_buf_flits) if nxt in (KIND_LINK, KIND_EGRESS) else (0, 0))
        elif kind in (KIND_EGRESS, KIND_INGRESS):
            out.append((1, fc.port_buf_flits))
        else:
            out.append((fc.num_vcs, fc.vc_buf_flits))
    return out


def _cycles_ps(system, cycles) -> int:
    return int(to_ps(float(cycles) / float(system.noc_clock_ghz)))


def link_latency_delta_ps(system, fc: FlowControl) -> int:
    """What credit mode adds to every held mesh link stage's latency, ps: ``router_cycles``' sum in
    place of ``hop_ns`` (0 when ``router_cycles`` is None)."""
    if not fc.credit or fc.router_cycles is None:
        return 0
    return _cycles_ps(system, sum(fc.router_cycles)) - int(to_ps(float(system.hop_ns)))


def credit_delay_ps(system, fc: FlowControl) -> int:
    return _cycles_ps(system, fc.credit_delay_cycles)


def line_rate_depths(system, fc: FlowControl) -> dict:
    """Buffer depths (flits) that keep one sender at line rate through a credit round trip
    (a slot is held from the sender's service start until the flit leaves the next buffer, and its
    credit is back ``credit_delay`` later): ``mesh`` for a router input VC behind a mesh link
    (``ceil((flit / link_bw + hop + credit) / (flit / link_bw))``), ``port`` for the FIFO behind
    an I/O port (``ceil((flit / port_bw + switch_latency + credit) / (flit / port_bw))``).
    Shallower buffers cap a busy link's or port's rate at ``depth / round trip``."""
    from ..path import port_service_ns
    link_svc = float(system.flit_bytes / system.link_bw_bytes_per_ns)
    hop = float(system.hop_ns) if fc.router_cycles is None else sum(fc.router_cycles) / float(system.noc_clock_ghz)
    cd = fc.credit_delay_cycles / float(system.noc_clock_ghz)
    port_svc = float(port_service_ns(system))
    return {"mesh": int(np.ceil((link_svc + hop + cd) / link_svc - 1e-9)),
            "port": int(np.ceil((port_svc + float(system.switch_latency_ns) + cd) / port_svc - 1e-9))}
