"""Bit-identity of ``nuna-jax noc`` across speed work: every number of every run the BookSim2
validation makes (experiments/validate_booksim.py: both shipped configurations, every injection
rate, both VC buffer depths, every seed), plus a torus and the other traffic patterns.

    python benchmarks/check_noc_digests.py --record   # write benchmarks/data/noc_digests.json
    python benchmarks/check_noc_digests.py            # compare with it; exit 1 on any difference
    python benchmarks/check_noc_digests.py --quick    # the first two seeds of each point only

The recorded file was written by the code of its ``commit``; every later speed change must
reproduce each run's latencies, accepted rate, hops, cycles and flit-hops exactly (floats compared
with ``==``).  Independently of the record, the packet latencies are also compared with the
``per_seed_latency`` lists of experiments/out/validate_booksim.json (written by the validation run).
History: 26dfe76 wrote the first record, and the kernel's speed changes up to e53e43a reproduced all
408 runs of it bit for bit; 3e24f01 changed the model (packets measured as BookSim2 marks them), so
the record and the validation were rewritten by that code; session 9 added 4 configurations (8 runs)
and re-recorded the whole file with the session-start code (5aca173: the 408 earlier runs unchanged), and
its kernel rewrite (routers visit only their candidates) reproduced all 416.  Needs BookSim2's configuration files (../shared/tools/booksim2).
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

DIGESTS = ROOT / "benchmarks" / "data" / "noc_digests.json"
VALIDATION = ROOT / "experiments" / "out" / "validate_booksim.json"
KEYS = ("packet_latency_avg_cycles", "network_latency_avg_cycles", "accepted_flit_rate", "hops_avg", "cycles",
        "flit_hops", "packets_measured", "packet_latency_min_cycles", "packet_latency_max_cycles", "unstable")
#: beyond the validation: torus (dateline VC classes), other patterns, input speedup, no tail-credit wait
EXTRA = [
    ("mesh88_uniform.cfg", ["topology=torus", "injection_rate=0.3"]),
    ("mesh88_uniform.cfg", ["topology=torus", "k=4", "n=3", "num_vcs=4", "injection_rate=0.2"]),
    ("mesh88_uniform.cfg", ["traffic=bitrev", "injection_rate=0.2", "packet_size=4"]),
    ("mesh88_uniform.cfg", ["traffic=tornado", "injection_rate=0.15", "num_vcs=2", "vc_buf_size=2"]),
    ("mesh88_uniform.cfg", ["traffic=shuffle", "injection_rate=0.3", "input_speedup=2"]),
    ("mesh88_lat.cfg", ["wait_for_tail_credit=0", "injection_rate=0.006"]),
    ("mesh88_lat.cfg", ["traffic=neighbor", "topology=torus", "injection_rate=0.01"]),
    ("mesh88_uniform.cfg", ["injection_rate=0.6"]),   # unstable
    # added in session 9 (recorded by the session-start code, 5aca173): 64 VCs (the top bit of a VC mask),
    # delays above 1 (VCs wait in the kernel's wake calendar), no routing delay, a bigger torus
    ("mesh88_uniform.cfg", ["topology=torus", "k=4", "num_vcs=64", "injection_rate=0.4"]),
    ("mesh88_lat.cfg", ["routing_delay=2", "vc_alloc_delay=2", "sw_alloc_delay=2", "credit_delay=1",
                        "injection_rate=0.005"]),
    ("mesh88_uniform.cfg", ["routing_delay=0", "vc_alloc_delay=3", "injection_rate=0.3", "packet_size=3",
                            "injection_rate_uses_flits=1"]),
    ("mesh88_uniform.cfg", ["topology=torus", "k=16", "num_vcs=4", "vc_buf_size=4", "injection_rate=0.1"]),
]


def cases(quick: bool):
    from validate_booksim import BUFFERS, SEEDS, SWEEPS
    out = []
    for cfgname, rates in SWEEPS.items():
        seeds = SEEDS[cfgname][:2] if quick else SEEDS[cfgname]
        for buf in BUFFERS:
            for rate in rates:
                for seed in seeds:
                    out.append((cfgname, [f"vc_buf_size={buf}", f"injection_rate={rate}"], seed))
    for cfgname, ov in EXTRA:
        for seed in (0, 1):
            out.append((cfgname, ov, seed))
    return out


def key(cfgname, ov, seed):
    return f"{cfgname}|{' '.join(ov)}|seed={seed}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cfgdir", default="/work/shared/tools/booksim2/configs")
    a = ap.parse_args(argv)
    from nuna_jax.noc.sim import simulate_noc
    cfgdir = Path(a.cfgdir)
    if not (cfgdir / "mesh88_uniform.cfg").is_file():
        print(f"check_noc_digests: no BookSim2 configurations in {cfgdir}; nothing to check")
        return 0
    got, wall = {}, 0.0
    t0 = time.perf_counter()
    for cfgname, ov, seed in cases(a.quick):
        r = simulate_noc(path=cfgdir / cfgname, overrides=ov, seed=seed)
        wall += r["wall_s"]
        got[key(cfgname, ov, seed)] = {k: r[k] for k in KEYS}
    total = time.perf_counter() - t0
    print(f"{len(got)} runs, simulation {wall:.1f} s, in all {total:.1f} s")
    if a.record:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "nuna_jax/noc"], cwd=ROOT, capture_output=True,
                               text=True).stdout.strip()
        DIGESTS.parent.mkdir(parents=True, exist_ok=True)
        DIGESTS.write_text(json.dumps({"commit": commit + (" (nuna_jax/noc modified)" if dirty else ""),
                                       "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                                       "runs": got}, indent=0, sort_keys=True) + "\n")
        print(f"wrote {DIGESTS}")
        return 0
    bad = 0
    ref = json.loads(DIGESTS.read_text())["runs"]
    for k, v in got.items():
        if k not in ref:
            print(f"MISSING in the record: {k}")
            bad += 1
            continue
        for f in KEYS:
            a_, b_ = v[f], ref[k][f]
            if not (a_ == b_ or (a_ != a_ and b_ != b_)):   # equal, or both NaN
                print(f"DIFF {k} {f}: {a_!r} != recorded {b_!r}")
                bad += 1
    # the validation's committed per-seed latencies (main's code at validation time)
    nval = 0
    if VALIDATION.is_file():
        doc = json.loads(VALIDATION.read_text())
        for res in doc["results"]:
            for p in res["points"]:
                ov = [f"vc_buf_size={res['vc_buf_size']}", f"injection_rate={p['injection_rate']}"]
                for seed, lat in zip(res["seeds"], p["nuna_jax"]["per_seed_latency"]):
                    k = key(res["config"], ov, seed)
                    if k in got:
                        nval += 1
                        x = got[k]["packet_latency_avg_cycles"]
                        if not (x == lat or (x != x and lat != lat)):
                            print(f"DIFF from validate_booksim.json {k}: {x!r} != {lat!r}")
                            bad += 1
    print(f"{len(got)} runs x {len(KEYS)} numbers compared with the record, {nval} latencies with "
          f"validate_booksim.json: {'all identical' if not bad else f'{bad} differences'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
