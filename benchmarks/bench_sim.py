"""Benchmark of the exact flit simulator beside BookSim2: flit-hops per second, side by side.

Self-contained (puts the repo root on sys.path).  Scenarios (Table 2 system,
All-Gather, direct algorithm, one threadblock per peer):

  ag8_1MB_ua        8 GPUs, 1 MB, UA
  ag8_1MB_napnar    8 GPUs, 1 MB, NAP+NAR
  ag8_10MB_ua       8 GPUs, 10 MB, UA
  ag8_10MB_napnar   8 GPUs, 10 MB, NAP+NAR    (the 64-GPU row's like for like)
  ag8_*_credit      8 GPUs 1 MB UA and NAP+NAR, 10 MB UA, credit flow control (one VC per class,
                    buffers at the line-rate depths of ``flow_control.line_rate_depths``)
  ag64_10MB_napnar  64 GPUs, 10 MB, NAP+NAR   (skipped with --quick)
  ag64_10MB_ua      64 GPUs, 10 MB, UA        (only with --full)
  reference         2 GPUs, 100 kB, UA, reference (plain Python) engine, for comparison
  batch             the 7 policies of 8 GPUs 1 MB in one simulate_batch call (threads = cores)

For each: wall time to build the scenario, compile the program, run the
event loop (warm: numba compiled once beforehand), flit-hops, flit-hops/s of
the event loop (``SimResult.loop_s``, wall) and of its CPU time
(``SimResult.loop_cpu_s``, steadier on a shared machine; the reference
engine's row counts its whole run).

BookSim2 side by side: before every scenario row, BookSim2
(``../shared/tools/booksim2/booksim``, or ``--booksim PATH`` / ``$NUNA_JAX_BOOKSIM``)
runs its own 8x8 uniform configuration (``configs/mesh88_uniform.cfg``) at
injection rate 0.2; its flit-hops are ``cycles x nodes x accepted flit rate x
hops average`` (its README's formula), its rate those over its process's wall
(and CPU) seconds.  Each row's ``x_booksim`` is the row's rate over the mean of
the BookSim2 runs just before and just after it, wall over wall and CPU over
CPU: both tools see the same load.  Cost per hop: ``per_hop_64_over_8`` is the
64-GPU row's event-loop CPU seconds per flit-hop over the 8-GPU rows' (goal: <= 1.3);
``per_hop_64_over_8_ua_10MB`` the same for UA 10 MB (with ``--full``).

``--big``: also ``nuna-jax simulate`` of a 100 kB All-Gather on 1,024 GPUs in a
child process (its wall time split as the command reports it, and its peak
resident memory).

The simulator's event loop runs on the host CPU (numba, one core per
scenario; simulate_batch uses several); it does not use a GPU.  The script
records which JAX devices exist so that a run on a GPU host is labelled as
such, with the date, host, core count and load average.  A time guard skips
the remaining big scenarios once 300 s have passed.

Usage: python benchmarks/bench_sim.py [--out DIR] [--quick] [--full] [--big] [--booksim PATH]
  -> DIR/sim_bench_{cpu|gpu}_{date}[_{HHMM} if taken].json (default DIR: benchmarks/out)
"""
import argparse
import datetime
import json
import os
import platform
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))   # validate_booksim: BookSim2's binary and runs

import jax  # noqa: E402

from nuna_jax import sim  # noqa: E402
from nuna_jax.placement import POLICIES  # noqa: E402
from nuna_jax.presets import preset  # noqa: E402
from nuna_jax.scenario import make_scenario  # noqa: E402

GUARD_S = 300.0
BOOKSIM_RATE = 0.2


def booksim_run(binary: Path, rate=BOOKSIM_RATE) -> dict:
    """One BookSim2 run of its 8x8 uniform configuration (``validate_booksim.run_booksim``: its statistics
    and flit-hops), with the wall and CPU seconds of the process."""
    from validate_booksim import run_booksim
    from nuna_jax.noc import load_config
    cfg = binary.parent / "configs" / "mesh88_uniform.cfg"
    overrides = [f"injection_rate={rate}"]
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = run_booksim(binary, cfg, overrides)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    fh, wall = r["flit_hops"], r["wall_s"]
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "cycles": r["cycles"], "nodes": load_config(cfg, overrides).nodes,
            "accepted_flit_rate": r["accepted_flit_rate"], "hops_avg": r["hops_avg"], "flit_hops": fh,
            "flit_hops_per_s": fh / wall, "flit_hops_per_cpu_s": fh / cpu}


def credit_line_rate(s):
    """The credit rows' flow control: one VC per class, buffers as deep as a credit round trip needs
    for line rate (``flow_control.line_rate_depths``: 31-flit router VCs, 99-flit port FIFOs on Table 2)."""
    from nuna_jax.sim.flow_control import flow_control, line_rate_depths
    base = flow_control("credit", num_vcs=1, credit_delay_cycles=1)
    d = line_rate_depths(s, base)
    return base._replace(vc_buf_flits=d["mesh"], port_buf_flits=d["port"], inj_buf_flits=d["mesh"])


def one(name, n_gpus, size, policy, engine="fast", credit=False):
    s = preset("table2", n_gpus=n_gpus)
    t0 = time.perf_counter()
    sc = make_scenario(s, collective="allgather", size_bytes=size, policy=policy)
    t1 = time.perf_counter()
    if engine == "fast" and credit:
        from nuna_jax.sim.credit_kernel import run_credit_fast
        prog = sim.compile_program(s, sc.traffic)
        t2 = time.perf_counter()
        r = run_credit_fast(prog, s, credit_line_rate(s))
        cpu = r.loop_cpu_s
    elif engine == "fast":
        prog = sim.compile_program(s, sc.traffic)
        t2 = time.perf_counter()
        r = sim.fast.run_fast(prog)
        cpu = r.loop_cpu_s                    # the event loop's own CPU seconds
    else:
        t2 = time.perf_counter()
        c0 = time.thread_time()
        r = sim.run_reference(s, sc.traffic)
        cpu = time.thread_time() - c0
    t3 = time.perf_counter()
    loop = r.loop_s if r.loop_s > 0 else t3 - t2
    row = {"name": name, "gpus": n_gpus, "size_bytes": size, "policy": policy, "engine": r.engine,
           "flow_control": "credit (line-rate depths)" if credit else "none",
           "flits": r.flits_delivered, "flit_hops": r.flit_hops, "completion_ns": r.completion_ns,
           "scenario_s": t1 - t0, "compile_s": t2 - t1, "run_s": t3 - t2, "loop_s": loop, "run_cpu_s": cpu,
           "total_s": t3 - t0, "flit_hops_per_s": r.flit_hops / loop, "flit_hops_per_cpu_s": r.flit_hops / cpu,
           "cpu_ns_per_hop": 1e9 * cpu / max(r.flit_hops, 1)}
    print(f"{name:18s} {r.flits_delivered:9d} flits {r.flit_hops:11d} hops  scenario {t1 - t0:6.2f} s  "
          f"compile {t2 - t1:6.2f} s  loop {loop:7.3f} s (cpu {cpu:7.3f} s)  "
          f"{row['flit_hops_per_s']:.3g} flit-hops/s ({row['flit_hops_per_cpu_s']:.3g} per cpu s)  [{r.engine}]",
          flush=True)
    return row


def jax_heap_event_us(n_heap=32768, steps=20000):
    """Cost of the core of a JAX event loop: one heap pop + push per lax iteration, us/event.

    Why there is no JAX engine (docs/simulator.md): this alone, jitted, is
    compared with the compiled loop's whole cost per event.
    """
    import jax.numpy as jnp
    import numpy as np

    def sift(heap, key):
        def cond(c):
            return 2 * c[0] + 1 < n_heap

        def body(c):
            i, h = c
            l = 2 * i + 1
            r = l + 1
            c_ = jnp.where((r < n_heap) & (h[jnp.minimum(r, n_heap - 1)] < h[l]), r, l)
            swap = h[c_] < h[i]
            hi, hc = h[i], h[c_]
            h = h.at[i].set(jnp.where(swap, hc, hi)).at[c_].set(jnp.where(swap, hi, hc))
            return jnp.where(swap, c_, n_heap), h
        return jax.lax.while_loop(cond, body, (jnp.int32(0), heap.at[0].set(key)))[1]

    @jax.jit
    def run(heap, k):
        def body(j, c):
            h, acc = c
            top = h[0]
            return sift(h, top + 8333 + (j * 7919) % 1000), acc + top
        return jax.lax.fori_loop(0, k, body, (heap, jnp.int32(0)))

    h = jnp.asarray(np.sort(np.random.default_rng(0).integers(0, 10**6, n_heap)).astype(np.int32))
    run(h, 10)[1].block_until_ready()
    t = time.perf_counter()
    run(h, steps)[1].block_until_ready()
    return (time.perf_counter() - t) / steps * 1e6


def big_case(timeout=1800) -> dict:
    """``nuna-jax simulate`` of a 100 kB All-Gather on 1,024 GPUs in a child process: its JSON times and
    the child's peak resident memory (GB)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c",
                        "import json, resource, sys; from nuna_jax.cli import main; "
                        "sys.argv = ['nuna-jax', 'simulate', '--collective', 'allgather', '--size', '100kB', "
                        "'--gpus', '1024', '--json']; rc = main(); "
                        "print('PEAK_RSS_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss); sys.exit(rc)"],
                       capture_output=True, text=True, env=env, timeout=timeout)
    wall = time.perf_counter() - t0
    out = {"wall_s_process": wall, "returncode": r.returncode}
    m = re.search(r"PEAK_RSS_KB (\d+)", r.stdout)
    out["peak_rss_gb"] = int(m.group(1)) / 1e6 if m else None
    try:
        d = json.loads(r.stdout[:r.stdout.rindex("}") + 1])
        out.update({k: d.get(k) for k in ("completion_ns", "flits_delivered", "flit_hops", "wall_s", "sim_s",
                                          "time_s", "process_s", "tbs_per_gpu", "flit_hops_per_s")})
    except ValueError:
        out["stderr_tail"] = r.stderr[-500:]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out"))
    ap.add_argument("--quick", action="store_true", help="skip the 64-GPU scenarios")
    ap.add_argument("--full", action="store_true", help="also 64 GPUs, 10 MB under UA")
    ap.add_argument("--big", action="store_true", help="also `simulate` of 100 kB All-Gather on 1,024 GPUs")
    ap.add_argument("--booksim", default=None, help="BookSim2 binary (default: ../shared/tools/booksim2/booksim)")
    a = ap.parse_args()
    start = time.perf_counter()
    devs = [f"{d.platform}:{d.device_kind}" for d in jax.devices()]
    try:
        load0 = os.getloadavg()
    except OSError:
        load0 = None
    info = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": platform.node(), "machine": platform.machine(), "processor": platform.processor(),
            "cpu_count": os.cpu_count(), "python": platform.python_version(), "jax_devices": devs,
            "numba": sim.HAVE_NUMBA, "loadavg_start": load0,
            "note": "the event loop runs on the host CPU (numba); the GPU is not used by the simulator"}
    print(json.dumps(info))
    from validate_booksim import find_booksim
    binary = Path(a.booksim) if a.booksim else find_booksim()
    if binary is None:
        print("BookSim2 not found: no side-by-side ratio (give --booksim PATH)")
    info["booksim"] = None if binary is None else str(binary)
    # warm-up: compile (or load from cache) the numba kernel once
    t0 = time.perf_counter()
    one("warmup", 2, 20_000, "ua")
    one("warmup_credit", 2, 20_000, "ua", credit=True)
    info["warmup_s"] = time.perf_counter() - t0
    rows, bs_runs = [], []
    plan = [("ag8_1MB_ua", 8, 10**6, "ua"), ("ag8_1MB_napnar", 8, 10**6, "nap+nar"),
            ("ag8_10MB_ua", 8, 10**7, "ua"), ("ag8_10MB_napnar", 8, 10**7, "nap+nar"),
            ("ag8_1MB_ua_credit", 8, 10**6, "ua", "fast", True), ("ag8_1MB_napnar_credit", 8, 10**6, "nap+nar", "fast", True),
            ("ag8_10MB_ua_credit", 8, 10**7, "ua", "fast", True)]
    if not sim.HAVE_NUMBA:   # the pure-Python fallback of the same loop: keep to the small cases
        print("numba not installed: running the fast engine's pure-Python fallback, small cases only")
        plan = plan[:2]
    elif not a.quick:
        plan.append(("ag64_10MB_napnar", 64, 10**7, "nap+nar"))
        if a.full:
            plan.append(("ag64_10MB_ua", 64, 10**7, "ua"))

    def booksim():
        if binary is None:
            return None
        b = booksim_run(binary)
        bs_runs.append(b)
        print(f"  booksim2 8x8 uniform @{BOOKSIM_RATE}: {b['flit_hops']:.0f} flit-hops in {b['wall_s']:.2f} s "
              f"(cpu {b['cpu_s']:.2f} s): {b['flit_hops_per_s']:.3g} flit-hops/s "
              f"({b['flit_hops_per_cpu_s']:.3g} per cpu s)", flush=True)
        return b

    before = booksim()
    for p in plan:
        if time.perf_counter() - start > GUARD_S:
            print(f"skipping {p[0]}: time guard ({GUARD_S:.0f} s) reached")
            rows.append({"name": p[0], "skipped": "time guard"})
            continue
        row = one(*p)
        after = booksim()
        if before is not None:
            wall_bs = (before["flit_hops_per_s"] + after["flit_hops_per_s"]) / 2
            cpu_bs = (before["flit_hops_per_cpu_s"] + after["flit_hops_per_cpu_s"]) / 2
            row["booksim_flit_hops_per_s"] = wall_bs
            row["booksim_flit_hops_per_cpu_s"] = cpu_bs
            row["x_booksim"] = row["flit_hops_per_s"] / wall_bs
            row["x_booksim_cpu"] = row["flit_hops_per_cpu_s"] / cpu_bs
            print(f"  -> {row['x_booksim']:.0f}x BookSim2 (wall), {row['x_booksim_cpu']:.0f}x (cpu)", flush=True)
        before = after
        rows.append(row)
    rows.append(one("reference", 2, 100_000, "ua", engine="reference"))
    # a batch of candidate placements in one call
    s = preset("table2", n_gpus=8)
    ts = [make_scenario(s, collective="allgather", size_bytes=10**6, policy=pol).traffic for pol in POLICIES]
    t0 = time.perf_counter()
    res = sim.simulate_batch(s, ts)
    wall = time.perf_counter() - t0
    hops = sum(r.flit_hops for r in res)
    rows.append({"name": "batch_7_policies_ag8_1MB", "candidates": len(ts), "threads": min(len(ts), os.cpu_count()),
                 "total_s": wall, "flit_hops": hops, "flit_hops_per_s": hops / wall,
                 "completion_ns": {pol: r.completion_ns for pol, r in zip(POLICIES, res)}})
    print(f"batch of {len(ts)} placements (8 GPUs, 1 MB): {wall:.2f} s, {hops / wall:.3g} flit-hops/s overall")
    # cost per hop, 64 GPUs over 8 GPUs (CPU seconds per flit-hop)
    by = {r["name"]: r for r in rows if "cpu_ns_per_hop" in r}
    if "ag64_10MB_napnar" in by:
        c64 = by["ag64_10MB_napnar"]["cpu_ns_per_hop"]
        info["per_hop_64_over_8"] = {k: c64 / by[k]["cpu_ns_per_hop"] for k in
                                     ("ag8_1MB_ua", "ag8_1MB_napnar", "ag8_10MB_ua", "ag8_10MB_napnar") if k in by}
        if "ag64_10MB_ua" in by and "ag8_10MB_ua" in by:
            info["per_hop_64_over_8_ua_10MB"] = by["ag64_10MB_ua"]["cpu_ns_per_hop"] / by["ag8_10MB_ua"]["cpu_ns_per_hop"]
        print("CPU cost per flit-hop of the event loop, 64 GPUs (NAP+NAR 10 MB) over 8 GPUs: " +
              ", ".join(f"{k} {v:.2f}x" for k, v in info["per_hop_64_over_8"].items()) +
              (f"; UA 10 MB, 64 over 8 GPUs: {info['per_hop_64_over_8_ua_10MB']:.2f}x"
               if "per_hop_64_over_8_ua_10MB" in info else ""))
    if bs_runs:
        info["booksim_runs"] = bs_runs
        xs = [r["x_booksim"] for r in rows if "x_booksim" in r]
        xc = [r["x_booksim_cpu"] for r in rows if "x_booksim_cpu" in r]
        info["x_booksim_min"], info["x_booksim_cpu_min"] = min(xs), min(xc)
        print(f"vs BookSim2 (same run, same machine): {min(xs):.0f}x-{max(xs):.0f}x (wall), "
              f"{min(xc):.0f}x-{max(xc):.0f}x (cpu)")
    if a.big:
        print("1,024 GPUs, 100 kB All-Gather (`nuna-jax simulate`, child process) ...", flush=True)
        info["big_1024gpu_100kB"] = big_case()
        print(json.dumps(info["big_1024gpu_100kB"]))
    info["jax_heap_pop_push_us_per_event"] = jax_heap_event_us()
    print(f"JAX lax.while_loop heap pop+push alone: {info['jax_heap_pop_push_us_per_event']:.1f} us/event "
          f"(jax default device {jax.devices()[0].platform})")
    try:
        info["loadavg_end"] = os.getloadavg()
    except OSError:
        pass
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    kind = "gpu" if any(d.startswith(("gpu", "cuda")) for d in devs) else "cpu"
    payload = {"info": info, "rows": rows, "wall_s": time.perf_counter() - start}
    path = out / f"sim_bench_{kind}_{info['date'][:10]}.json"
    if path.exists():                               # never overwrite an earlier run's file
        path = path.with_name(f"{path.stem}_{info['date'][11:13]}{info['date'][14:16]}.json")
    path.write_text(json.dumps(payload, indent=1))
    print(f"wrote {path} ({payload['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
