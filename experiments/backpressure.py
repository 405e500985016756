"""NUNA under back-pressure: Figures 10-12 and the 8-GPU headline rerun with credit
flow control beside the unbounded-queue model.

8-GPU All-Gather, Table 2, UA vs NAP+NAR (``--full``: also Figure 11's seven policies at 100 kB
and Figure 12's sizes up to 10 MB).  Each point keeps the threadblock count the analytical model
picks (NUNA 5.1, as Figures 9-12 do); the same traffic then runs through the exact simulator with
``flow_control="none"`` and ``"credit"`` in each configuration below, and the analytical estimate
and lower bound are set beside it.  Figure 10's store-latency histograms are redrawn at 1 MB.

Credit delay 1 cycle.  What limits a buffer is its depth against the credit round trip
(``flow_control.line_rate_depths``): Table 2's mesh hop is 10 cycles (8.33 ns) behind a 0.31 ns
flit, so a router input VC needs 31 flits to keep its link at line rate; the switch leg is 500 ns
behind a 5.12 ns flit, so a port FIFO needs 99.  And a router with one FIFO VC per input is
input-queued: a flit waiting for a busy output blocks the flits behind it (head-of-line blocking),
which the unbounded model (one FCFS queue per resource: output-queued) does not have.
Configurations (``1vc`` / ``4vc``: virtual channels per input port and class):

* ``line_rate_*``: router VCs and port FIFOs at those depths: back-pressure only where queues grow;
* ``fermi_10_*``: 10-flit router VCs, ports at line rate.  GPGPU-Sim's tested GPU interconnect
  configurations (accel-sim/gpgpu-sim_distribution, configs/tested-cfgs/SM2_GTX480/
  config_fermi_islip.icnt and SM7_QV100/config_volta_islip.icnt) give ``num_vcs = 1`` and
  ``vc_buf_size`` 64 and 256 flits of ``flit_size = 40`` B: 2,560 B and 10,240 B per input port,
  i.e. 10 and 40 of our 256 B flits (the 40-flit one is deeper than the line-rate 31); they also
  use separate request and reply subnetworks, as our buffer classes do;
* ``ports_10_4vc``: router VCs at line rate, 10-flit port FIFOs (a switch link without buffers
  sized for its 500 ns round trip).

    python experiments/backpressure.py [--quick] [--full] [--jobs N] [--out DIR]

``--jobs N`` runs the points in N worker processes (each point is independent; same rows, in the
same order).  ``--full`` is 15 points; its 10 MB points dominate: on the shared 2-core VM (load
~10) a 1 MB point took 39 CPU s and a 100 kB one ~8, so the 10 MB ones are several minutes each
and the whole run ~20 CPU minutes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from nuna_jax import preset, sim  # noqa: E402
from nuna_jax.placement import FIGURE11_ORDER  # noqa: E402
from nuna_jax.plots.save import save_figure  # noqa: E402
from nuna_jax.scenario import TBS_BEST_MULTIPLES, make_scenario  # noqa: E402
from nuna_jax.sim.flow_control import flow_control, line_rate_depths, settings  # noqa: E402
from fig9_speedup import best_over_tbs, tbs_candidates, write  # noqa: E402
from fig10_latency_hist import BIN_NS, zero_load_store_ns  # noqa: E402

NAME = "backpressure"
SOURCE = ("GPGPU-Sim tested configs (accel-sim/gpgpu-sim_distribution): SM7_QV100/config_volta_islip.icnt "
          "num_vcs=1, vc_buf_size=256 x 40 B flits; SM2_GTX480/config_fermi_islip.icnt vc_buf_size=64 x 40 B; "
          "separate request / reply subnets")


def configs(s) -> dict:
    """Name -> FlowControl of each credit configuration (module doc)."""
    base = flow_control("credit", num_vcs=1, credit_delay_cycles=1)
    lr = line_rate_depths(s, base)
    mk = lambda vcs, mesh, port: base._replace(num_vcs=vcs, vc_buf_flits=mesh, port_buf_flits=port,  # noqa: E731
                                               inj_buf_flits=mesh)
    return {"line_rate_1vc": mk(1, lr["mesh"], lr["port"]), "line_rate_4vc": mk(4, lr["mesh"], lr["port"]),
            "fermi_10_1vc": mk(1, 10, lr["port"]), "fermi_10_4vc": mk(4, 10, lr["port"]),
            "ports_10_4vc": mk(4, lr["mesh"], 10)}


def run_point(s, size: int, policy: str, cands, hist: bool) -> dict:
    """Estimate, lower bound and simulator (none and every credit depth) of one (size, policy)."""
    best = best_over_tbs(s, "allgather", size, policy, cands)
    sc = make_scenario(s, collective="allgather", size_bytes=size, policy=policy, tbs_per_gpu=best["tbs_per_gpu"])
    row = {"size_bytes": size, "policy": policy, "tbs_per_gpu": best["tbs_per_gpu"],
           "estimate_ns": best["time_ns"], "lower_bound_ns": best["lower_bound_ns"],
           "bottleneck": best["breakdown"]["bottleneck"], "sim": {}}
    zl = None
    for label, fc in [("none", None)] + list(configs(s).items()):
        r = sim.simulate(s, sc.traffic, flow_control=fc)
        stats = sim.latency_stats_ns(r.store_latency_ps)
        m = r.traffic_mask
        d = {"completion_ns": r.traffic_completion_ps / 1000, "store_latency_ns": stats,
             "read_latency_ns": sim.latency_stats_ns((r.store_ps - r.issue_ps)[m]),   # issue -> store issue
             "sim_over_bound": r.traffic_completion_ps / 1000 / best["lower_bound_ns"],
             "estimate_over_sim": best["time_ns"] / (r.traffic_completion_ps / 1000),
             "flit_hops": int(r.flit_hops), "loop_s": r.loop_s, "loop_cpu_s": r.loop_cpu_s,
             "flow_control": settings(fc or flow_control("none"))}
        if hist:
            if zl is None:
                zl = zero_load_store_ns(s, sc.traffic)[r.flit_flow[r.traffic_mask]]
            edges = np.arange(0.0, 4000.0 + BIN_NS, BIN_NS)
            d["hist_edges_ns"] = edges.tolist()
            d["hist_counts"] = np.histogram(r.store_latency_ps / 1000.0, bins=edges)[0].tolist()
            d["queueing_ns_mean"] = float(stats["mean"] - zl.mean())
        row["sim"][label] = d
    return row


def hol_probe(s, cands) -> list:
    """Head-of-line blocking apart from depth: 100 kB UA and 1 MB NAP+NAR with buffers too deep to fill
    (10^5 flits) and 1, 4, 16 VCs per class."""
    rows = []
    for size, pol in ((10**5, "UA"), (10**6, "NAP+NAR")):
        tbs = best_over_tbs(s, "allgather", size, pol, cands)["tbs_per_gpu"]
        sc = make_scenario(s, collective="allgather", size_bytes=size, policy=pol, tbs_per_gpu=tbs)
        row = {"size_bytes": size, "policy": pol, "tbs_per_gpu": tbs,
               "none_ns": sim.simulate(s, sc.traffic).traffic_completion_ps / 1000, "credit_ns": {}}
        for vcs in (1, 4, 16):
            fc = flow_control("credit", num_vcs=vcs, vc_buf_flits=10**5, port_buf_flits=10**5, inj_buf_flits=10**5,
                              credit_delay_cycles=1)
            row["credit_ns"][str(vcs)] = sim.simulate(s, sc.traffic, flow_control=fc).traffic_completion_ps / 1000
        print(f"head-of-line probe {size:>9,d} B {pol:8s}: none {row['none_ns']:.1f} ns, 10^5-flit buffers with "
              + ", ".join(f"{k} VC {v:.1f}" for k, v in row["credit_ns"].items()), flush=True)
        rows.append(row)
    return rows


def main(argv=None) -> int:
    from nuna_jax import cache
    cache.use_scenarios(True)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100 kB and 1 MB, UA and NAP+NAR, one threadblock multiple")
    ap.add_argument("--full", action="store_true", help="also Figure 11's seven policies at 100 kB and sizes to 10 MB")
    ap.add_argument("--out", default=str(ROOT / "results" / NAME), metavar="DIR")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes for the points")
    a = ap.parse_args(argv)
    s = preset("table2", n_gpus=8)
    mults = (TBS_BEST_MULTIPLES[-1],) if a.quick else TBS_BEST_MULTIPLES
    cands = tbs_candidates(8, mults)
    sizes = [10**5, 10**6] if not a.full else [10**5, 3 * 10**5, 10**6, 3 * 10**6, 10**7]
    points = [(n, p) for n in sizes for p in ("UA", "NAP+NAR")]
    if a.full:
        points += [(10**5, p) for p in FIGURE11_ORDER if p not in ("UA", "NAP+NAR")]
    rows = []
    pool = None
    if a.jobs > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor
        pool = ProcessPoolExecutor(a.jobs, mp_context=mp.get_context("fork"))
        futs = [pool.submit(run_point, s, n, pol, cands, n == 10**6) for n, pol in points]
    t0 = time.time()
    for idx, (n, pol) in enumerate(points):
        row = futs[idx].result() if pool else run_point(s, n, pol, cands, hist=(n == 10**6))
        rows.append(row)
        sims = "  ".join(f"{k} {v['completion_ns']:8.1f} (x{v['sim_over_bound']:.3f} bound, read "
                         f"{v['read_latency_ns']['mean']:.0f} store {v['store_latency_ns']['mean']:.0f})"
                         for k, v in row["sim"].items())
        print(f"{n:>9,d} B {pol:9s} tbs {row['tbs_per_gpu']:3d} est {row['estimate_ns']:8.1f} bound "
              f"{row['lower_bound_ns']:8.1f} | {sims} [{time.time() - t0:.1f}s]", flush=True)
        t0 = time.time()
    if pool:
        pool.shutdown()
    speedups = {}
    for n in sizes:
        by = {r["policy"]: r for r in rows if r["size_bytes"] == n}
        speedups[str(n)] = {k: by["UA"]["sim"][k]["completion_ns"] / by["NAP+NAR"]["sim"][k]["completion_ns"]
                            for k in by["UA"]["sim"]}
        speedups[str(n)]["estimate"] = by["UA"]["estimate_ns"] / by["NAP+NAR"]["estimate_ns"]
    out = {"experiment": "NUNA under back-pressure", "system": "table2", "gpus": 8,
           "collective": "allgather", "depth_source": SOURCE,
           "line_rate_depths": line_rate_depths(s, flow_control("credit", credit_delay_cycles=1)),
           "credit_settings": {k: settings(fc) for k, fc in configs(s).items()},
           "tbs_per_gpu": f"the estimate's best of {cands}", "rows": rows, "nap_nar_speedup": speedups,
           "head_of_line_probe": hol_probe(s, cands),
           "bound_holds": all(v["sim_over_bound"] >= 1.0 for r in rows for v in r["sim"].values()),
           "quick": bool(a.quick)}
    write(out, Path(a.out), plot, NAME)
    return 0


def plot(out, png: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    labels = ["none"] + list(out["credit_settings"])
    sizes = sorted({r["size_bytes"] for r in out["rows"]})
    for pol, ls in (("UA", "-"), ("NAP+NAR", "--")):
        for i, lab in enumerate(labels):
            ys = [next(r for r in out["rows"] if r["size_bytes"] == n and r["policy"] == pol)["sim"][lab]["completion_ns"]
                  for n in sizes]
            ax1.plot(sizes, ys, ls, marker="o", color=f"C{i}", label=f"{pol} {lab}")
        lb = [next(r for r in out["rows"] if r["size_bytes"] == n and r["policy"] == pol)["lower_bound_ns"] for n in sizes]
        ax1.plot(sizes, lb, ls, color="k", lw=0.8, label=f"{pol} lower bound")
    ax1.set_xscale("log")
    ax1.set_yscale("log")
    ax1.set_xlabel("All-Gather size per GPU (B)")
    ax1.set_ylabel("completion (ns)")
    ax1.set_title("8 GPUs: simulated completion, unbounded vs credit")
    ax1.legend(fontsize=6, ncol=2)
    for r in out["rows"]:
        if r["size_bytes"] != 10**6 or r["policy"] not in ("UA", "NAP+NAR"):
            continue
        for i, lab in enumerate(("none", "fermi_10_4vc")):
            d = r["sim"][lab]
            e = np.asarray(d["hist_edges_ns"])
            ax2.step(e[:-1], d["hist_counts"], where="post", color="C0" if r["policy"] == "UA" else "C1",
                     ls="-" if i == 0 else ":", label=f"{r['policy']} {lab}")
    ax2.set_xlim(0, 3000)
    ax2.set_xlabel("one-way store latency (ns)")
    ax2.set_ylabel("flits")
    ax2.set_title("Figure 10 at 1 MB: unbounded vs 4 x 10-flit router VCs")
    ax2.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, png)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
