"""Speed of the end-to-end LLM search (docs/e2e.md).

1. Throughput of the batched search program: one ``search`` call over a large grid
   (Llama-3.1-70B, 64 GPUs, decode, 7^4 parallelism degrees x 13 batches x 16 lengths
   = 499,408 configurations), best of a few calls after the compiling one.
2. Wall time of ``nuna-jax e2e --all`` (12 models x 6 GPU counts x 2 phases) in a fresh
   process, with its own configurations-per-second count.

Writes ``e2e_cpu.json`` to ``--out`` (default benchmarks/out).  About a minute and a half
on the 2-core CPU.

    python benchmarks/bench_e2e.py [--out DIR] [--reps N]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402

from nuna_jax.e2e.llm.search import search  # noqa: E402
from nuna_jax.presets import preset  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out"))
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args(argv)
    s = preset("table2")
    batches = [1 << i for i in range(13)]
    seqs = [256 * k for k in range(1, 17)]
    t0 = time.perf_counter()
    r = search("llama-70b", 64, "decode", s, batches=batches, seqs=seqs)
    first = time.perf_counter() - t0
    best = float("inf")
    for _ in range(a.reps):
        t0 = time.perf_counter()
        r = search("llama-70b", 64, "decode", s, batches=batches, seqs=seqs)
        best = min(best, time.perf_counter() - t0)
    n = r["configs_evaluated"]
    print(f"search program: {n} configurations in {best:.3f} s = {n / best:.3g} configs/s "
          f"(first call with compilation {first:.2f} s)")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "nuna_jax", "e2e", "--all", "--json"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    wall_all = time.perf_counter() - t0
    d = json.loads(proc.stdout)
    print(f"nuna-jax e2e --all: {wall_all:.1f} s wall (process), {d['configs_evaluated']} configurations, "
          f"{d['configs_per_s']:.3g} configs/s inside, {len(d['points'])} points")
    out = {"backend": jax.default_backend(), "devices": [str(x) for x in jax.devices()],
           "machine": platform.processor() or platform.machine(), "python": platform.python_version(),
           "jax": jax.__version__,
           "search_program": {"model": "llama-70b", "n_gpus": 64, "phase": "decode", "configs": n,
                              "best_s": best, "configs_per_s": n / best, "first_call_s": first},
           "e2e_all": {"wall_s_process": wall_all, "wall_s_inside": d["wall_s"],
                       "configs": d["configs_evaluated"], "configs_per_s": d["configs_per_s"],
                       "points": len(d["points"])}}
    Path(a.out).mkdir(parents=True, exist_ok=True)
    p = Path(a.out) / "e2e_cpu.json"
    p.write_text(json.dumps(out, indent=2))
    print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
