"""``nuna-jax trace``: a Chakra execution trace timed on the NUNA pod, or on an ASTRA-sim network.

Every collective of the trace (``nuna_jax.chakra``: matched across ranks) is timed by the path
model on the NUNA pod under each policy (``make_scenario`` + ``estimate``, NUNA section 5.3) --
or, with ``--network FILE.yml``, by one of ASTRA-sim's analytical backends
(``nuna_jax.astra.backend_collective_ns``); compute comes from the trace (``duration_micros``,
else a roofline of ``num_ops`` FLOPs and ``tensor_size`` bytes on the system's bf16 FLOP rate
and HBM bandwidth); the critical path through all ranks' dependency graphs
(``chakra.critical_path``) gives the end-to-end time per policy, and NAP+NAR's saving over UA.
The collective-size CDF is NUNA Figure 2's (each collective counted once).  docs/traces.md.
"""

from __future__ import annotations

import math

from .common import add_plot_arg, add_system_args, check_plot_path, emit_json, format_size, limits_from_args

_TEMPERATURE_NS = 10.0   # the path model's smooth-estimate temperature (estimate's default); time_ns ignores it

#: Chakra collective -> the nuna_jax collective that times it (the first four exactly; the others
#: are timed as the generated collective that moves the same bytes per GPU: docs/traces.md)
MODELLED_AS = {"ALL_REDUCE": "allreduce", "ALL_GATHER": "allgather", "REDUCE_SCATTER": "reducescatter",
               "REDUCE_SCATTER_BLOCK": "reducescatter", "ALL_TO_ALL": "alltoall", "BROADCAST": "allgather",
               "GATHER": "allgather", "SCATTER": "allgather", "REDUCE": "reducescatter", "BARRIER": "allreduce"}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "trace", help="time a Chakra execution trace (collectives, critical path, NAP+NAR saving)",
        description="Read a Chakra execution trace (one PREFIX.<rank>.et file per rank, or their directory), "
                    "time every collective with the path model on the NUNA pod under each policy (or with an "
                    "ASTRA-sim analytical backend on --network FILE.yml), and report the critical path through "
                    "the dependency graph, NAP+NAR's saving over UA and the collective-size CDF (NUNA Fig. 2).")
    p.add_argument("traces", nargs="+", metavar="FILES_OR_DIR", help="rank files PREFIX.<rank>.et[.gz] or a directory")
    add_system_args(p)
    p.add_argument("--policy", default="nap+nar", metavar="P|all",
                   help="policy timed beside UA (default nap+nar); all: the seven of NUNA section 5.3")
    p.add_argument("--algorithm", default="direct", choices=("direct", "ring"),
                   help="generated plan algorithm on the NUNA pod (default direct)")
    p.add_argument("--network", default=None, metavar="FILE.yml",
                   help="time the collectives on this ASTRA-sim analytical network instead of the NUNA pod")
    p.add_argument("--backend", default="unaware", choices=("unaware", "aware"),
                   help="with --network: ASTRA-sim's congestion_unaware (default) or congestion_aware backend")
    p.add_argument("--network-algorithm", default=None, metavar="A[,A...]",
                   help="with --network: direct, ring or recursive for every dimension, or one per dimension "
                        "(e.g. ring,direct,recursive; default: per topology)")
    add_plot_arg(p, "the collective-size CDF and the critical path per policy")


def _policies(arg: str) -> list[str]:
    from ..placement import FIGURE11_ORDER
    a = str(arg).strip().lower()
    if a == "all":
        return list(FIGURE11_ORDER)
    from .names import POLICIES
    match = [x for x in POLICIES if x.lower() == a]
    if not match:
        raise ValueError(f"--policy {arg!r} is not one of {', '.join(x.lower() for x in POLICIES)} or all")
    return ["UA"] if match[0] == "UA" else ["UA", match[0]]


def _size_cdf(sizes: list) -> list:
    """NUNA Figure 2's CDF: for each distinct size, the fraction of collectives of at most that size."""
    if not sizes:
        return []
    s = sorted(sizes)
    out = []
    for k, v in enumerate(s):
        if k + 1 < len(s) and s[k + 1] == v:
            continue
        out.append({"size_bytes": int(v), "fraction": (k + 1) / len(s)})
    return out


class _PodTimer:
    """Collective times on the NUNA pod by the path model, one build per (collective, size, ranks, policy)."""

    def __init__(self, args, system, policies):
        self.args, self.system, self.policies, self.cache = args, system, policies, {}

    def __call__(self, kind: str, size: int, n_ranks: int) -> dict:
        if n_ranks <= 1:
            return {p: 0.0 for p in self.policies}
        key = (kind, size, n_ranks)
        if key not in self.cache:
            from ..models.contention import evaluate
            from ..scenario import make_scenario
            lim = limits_from_args(self.args)
            lim.check("gpus", n_ranks, f"a collective over {n_ranks} ranks")
            s = self.system.replace(n_gpus=n_ranks)
            out = {}
            for p in self.policies:
                sc = make_scenario(s, collective=kind, size_bytes=max(int(size), 1), policy=p, tbs_per_gpu="best",
                                   algorithm=self.args.algorithm, limits=lim)
                out[p] = float(evaluate(sc.system, sc.traffic, _TEMPERATURE_NS)["time_ns"])
            self.cache[key] = out
        return self.cache[key]

    def p2p(self, size: int) -> float:
        from ..models import collectives as C
        a = float(C.alpha_ns(self.system, "mean"))
        _, beta, _ = C.alpha_beta_gamma(self.system, "mean")
        return a + float(size) * float(beta)


class _NetTimer:
    """Collective times on an ASTRA-sim network by one analytical backend (one column)."""

    def __init__(self, args, net, label):
        self.args, self.net, self.policies, self.cache = args, net, [label], {}

    def group(self, involved) -> int:
        """NPUs of one group of a collective over the ``involved`` dimensions (all when None)."""
        if involved is None:
            return self.net.n_npus
        return math.prod(p for p, x in zip(self.net.npus_count, involved) if x)

    def __call__(self, kind: str, size: int, n_ranks: int, involved=None) -> dict:
        if n_ranks <= 1:
            return {self.policies[0]: 0.0}
        if n_ranks != self.net.n_npus:
            raise ValueError(f"a collective over {n_ranks} ranks on the {self.net.n_npus}-NPU --network "
                             f"{self.args.network}: the backends time collectives over all NPUs "
                             "(restrict one with the node's involved_dim attribute)")
        key = (kind, size, None if involved is None else tuple(involved))
        if key not in self.cache:
            from ..astra import backend_collective_ns
            r = backend_collective_ns(self.net, kind, max(int(size), self.net.n_npus), self.args.backend,
                                      self.args.network_algorithm, limits_from_args(self.args), involved)
            self.cache[key] = {self.policies[0]: float(r["time_ns"])}
        return self.cache[key]

    def p2p(self, size: int, src: int, dst: int) -> float:
        from ..astra import send_time_ns
        return float(send_time_ns(self.net, src, dst, max(int(size), 1), self.args.backend)["time_ns"])


def _involved(trace, c, net):
    """The collective's ``involved_dim`` (a bool per network dimension) on a network; None otherwise."""
    if net is None:
        return None
    r0 = c.ranks[0]
    node = trace.ranks[r0].by_id[c.node_ids[r0]]
    v = node.attrs.get("involved_dim")
    if v is None:
        return None
    if not isinstance(v, list) or len(v) != net.n_dims or not all(isinstance(x, (bool, int)) for x in v):
        raise ValueError(f"{trace.ranks[r0].path}: node {node.id} ({node.name!r}): involved_dim {str(v)[:60]} is not "
                         f"a list of {net.n_dims} booleans (one per --network dimension)")
    return [bool(x) for x in v]


def _node_time(hw: dict):
    def t(rank, n) -> float:
        if n.type in ("COMP", "MEM_LOAD", "MEM_STORE"):
            if n.duration_ns is not None and n.duration_ns > 0:
                return float(n.duration_ns)
            flops = float(n.attrs.get("num_ops") or 0.0) if n.type == "COMP" else 0.0
            nbytes = float(n.attrs.get("tensor_size") or 0.0)
            return max(flops / hw["flops_per_ns"], nbytes / hw["hbm_bytes_per_ns"])
        return 0.0
    return t


def run(args) -> int:
    from pathlib import Path

    from .. import chakra
    check_plot_path(args)
    if args.plot:
        for t in args.traces:
            if Path(t).exists() and Path(args.plot).resolve() == Path(t).resolve():
                raise ValueError(f"--plot {args.plot!r} is a trace file this command reads; choose another output")
    lim = limits_from_args(args)
    trace = chakra.load_trace(args.traces, lim)
    from .common import system_from_args
    system = system_from_args(args)
    if args.gpus is not None and args.gpus < trace.n_ranks:
        raise ValueError(f"--gpus {args.gpus} is fewer than the trace's {trace.n_ranks} ranks")
    if args.network:
        from ..astra import load_network
        lim.check_file(args.network, "--network file")
        net = load_network(args.network)
        lim.check("network_npus", net.n_npus, f"--network {args.network} ({net.n_npus} NPUs)")
        if net.n_npus < trace.n_ranks:
            raise ValueError(f"--network {args.network} has {net.n_npus} NPUs, fewer than the trace's "
                             f"{trace.n_ranks} ranks")
        timer = _NetTimer(args, net, f"ASTRA-sim {args.backend}")
    else:
        timer = _PodTimer(args, system, _policies(args.policy))
    pols = timer.policies
    rows = []
    for c in trace.collectives:
        kind = MODELLED_AS[c.comm_type]
        involved = _involved(trace, c, net if args.network else None)
        group = timer.group(involved) if args.network else len(c.ranks)
        # comm_size as ASTRA-sim reads it: All-Gather's (and Gather's) is the per-rank input, so the
        # gathered output nuna_jax's collectives take is comm_size x the ranks of a group
        size = (1 if c.comm_type == "BARRIER" else
                c.size_bytes * group if c.comm_type in ("ALL_GATHER", "GATHER") else c.size_bytes)
        t = timer(kind, size, len(c.ranks), involved) if args.network else timer(kind, size, len(c.ranks))
        rows.append({"node_id": c.node_ids[c.ranks[0]], "node_ids": {str(r): v for r, v in c.node_ids.items()},
                     "name": c.name, "type": c.comm_type, "modelled_as": kind, "process_group": c.pg,
                     "size_bytes": c.size_bytes, "timed_size_bytes": size, "ranks": list(c.ranks),
                     "involved_dim": involved, "time_ns": t})
    p2p_ns = {}
    for m in trace.p2p:
        p2p_ns[(m.src, m.send_node)] = (timer.p2p(m.size_bytes, m.src, m.dst) if args.network
                                        else timer.p2p(m.size_bytes))
    from ..e2e.llm.hardware import machine
    node_t = _node_time(machine(system))
    by_coll = {id(c): r for c, r in zip(trace.collectives, rows)}
    cp, paths = {}, {}
    for p in pols:
        r = chakra.critical_path(trace, node_t, lambda c, p=p: by_coll[id(c)]["time_ns"][p],
                                 lambda m: p2p_ns[(m.src, m.send_node)])
        cp[p], paths[p] = r["critical_path_ns"], r["path"]
    compute_ns = sum(node_t(rt.rank, n) for rt in trace.ranks for n in rt.nodes) / max(1, trace.n_ranks)
    out = {"trace": [str(t) for t in args.traces], "n_ranks": trace.n_ranks,
           "n_gpus": int(net.n_npus) if args.network else int(system.n_gpus),
           "n_nodes": sum(len(rt.nodes) for rt in trace.ranks),
           "target": (f"ASTRA-sim network {args.network} ({args.backend} backend)" if args.network
                      else f"NUNA pod ({system.name}), path model, {args.algorithm}"),
           "policies": pols, "collectives": rows,
           "p2p": [{"src": m.src, "dst": m.dst, "tag": m.tag, "size_bytes": m.size_bytes,
                    "time_ns": p2p_ns[(m.src, m.send_node)]} for m in trace.p2p],
           "compute_ns_per_rank": compute_ns, "critical_path_ns": cp,
           "critical_path": [{"rank": r, "node_id": n} for r, n in paths[pols[-1]]]}
    if args.network:
        out["speedup"] = None
        nd = net.describe()
        nd["n_gpus"] = nd.pop("n_npus")        # the command's vocabulary (docs/json.md)
        out["network"] = {"file": args.network, "backend": args.backend, **nd}
    else:
        out["speedup"] = {p: (cp["UA"] / cp[p] if cp[p] > 0 else 1.0) for p in pols}
        if "NAP+NAR" in cp:
            out["saving_ns"] = cp["UA"] - cp["NAP+NAR"]
            out["saving_fraction"] = (cp["UA"] - cp["NAP+NAR"]) / cp["UA"] if cp["UA"] > 0 else 0.0
    out["size_cdf"] = _size_cdf([c.size_bytes for c in trace.collectives])
    if args.plot:
        from .common import write_plot
        write_plot(args, lambda: _figure(out))
    if args.json:
        emit_json(out)
        return 0
    print(f"trace {', '.join(out['trace'])[:120]}: {trace.n_ranks} ranks, {out['n_nodes']} nodes, "
          f"{len(rows)} collectives, {len(trace.p2p)} sends; on {out['target']}")
    w = max(9, *(len(p) for p in pols))
    print(f"  {'node':>6s} {'type':20s} {'size':>10s} {'ranks':>5s}  " + " ".join(f"{p:>{w}s}" for p in pols))
    for r in rows[:50]:
        print(f"  {r['node_id']:6d} {r['type']:20s} {format_size(r['size_bytes']):>10s} {len(r['ranks']):5d}  "
              + " ".join(f"{r['time_ns'][p]:{w}.1f}" for p in pols))
    if len(rows) > 50:
        print(f"  ... {len(rows) - 50} more (--json lists all)")
    print("  critical path (ns): " + ", ".join(f"{p} {cp[p]:.1f}" for p in pols))
    if "saving_ns" in out:
        print(f"  NAP+NAR saves {out['saving_ns']:.1f} ns ({100 * out['saving_fraction']:.1f}%) of UA's critical "
              f"path: speedup {out['speedup']['NAP+NAR']:.3f}x")
    return 0


def _figure(out: dict):
    from matplotlib.figure import Figure
    fig = Figure(figsize=(10, 3.8))
    a, b = fig.subplots(1, 2)
    cdf = out["size_cdf"]
    if cdf:
        xs = [c["size_bytes"] for c in cdf]
        ys = [c["fraction"] for c in cdf]
        a.step([xs[0]] + xs, [0.0] + ys, where="post")
        a.set_xscale("log")
    a.set_xlabel("collective size (bytes)")
    a.set_ylabel("cumulative fraction of collectives")
    a.set_title("collective sizes (NUNA Fig. 2 style)", fontsize=9)
    a.grid(alpha=0.3)
    pols = out["policies"]
    b.bar(range(len(pols)), [out["critical_path_ns"][p] / 1e3 for p in pols])
    b.set_xticks(range(len(pols)))
    b.set_xticklabels(pols, rotation=30, fontsize=7)
    b.set_ylabel("critical path (us)")
    b.set_title(out["target"][:70], fontsize=8)
    fig.tight_layout()
    return fig
