"""NUNA sections 1 and 3.1.3: the zero-load latency spread of the Table 2 socket, as JSON + plot.

The numbers are ``nuna-jax info --json`` (nuna_jax.models.spread, docs/model.md "NoC latency
figures"); the plot is ``nuna-jax info --plot`` (CU -> nearest and farthest I/O port, NUNA
Figure 4).  Adds, for section 3.1.3 ("for a remote write, the NoC transfer takes up to 0.9 us,
while the scale-up latency is 1 us"), the worst one-way store latency without its scale-up part
(``store.max - switch_ns``) and the scale-up part itself (egress port + switch + ingress port).

    python experiments/spread.py [--out DIR]   -> DIR/spread.json, DIR/spread.png, DIR/spread.pdf
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nuna_jax import preset  # noqa: E402
from nuna_jax.cli.info import info_dict  # noqa: E402
from nuna_jax.path import path_tables  # noqa: E402
from nuna_jax.plots import latency_map_figure  # noqa: E402
from nuna_jax.plots.save import save_figure  # noqa: E402

NAME = "spread"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "experiments" / "out"))
    a = ap.parse_args(argv)
    s = preset("table2")
    d = info_dict(s)
    switch_ns = float(path_tables(s).switch_ns)
    store = d["gpu_to_gpu_latency_ns"]["store"]
    out = {"figure": "NUNA section 1 spread, 3.1.3 NoC vs scale-up latency, Figure 4 map", "system": "table2",
           "noc_latency_ns": d["noc_latency_ns"], "gpu_to_gpu_latency_ns": d["gpu_to_gpu_latency_ns"],
           "ratios": d["ratios"], "paper_ratios": d["paper_ratios"],
           "remote_write": {"noc_max_ns": store["max"] - switch_ns, "scale_up_ns": switch_ns}}
    outdir = Path(a.out)
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / f"{NAME}.json").write_text(json.dumps(out, indent=1))
    save_figure(latency_map_figure(s), outdir / NAME, dpi=110)
    r = out["ratios"]
    print(f"NoC worst/best {r['noc_worst_over_best']:.2f}, mean/best {r['noc_mean_over_best']:.2f}; transfer "
          f"worst/best {r['transfer_worst_over_best']:.2f}, mean/best {r['transfer_mean_over_best']:.2f}; remote write "
          f"NoC max {out['remote_write']['noc_max_ns']:.0f} ns, scale-up {switch_ns:.0f} ns")
    print(f"wrote {outdir / NAME}.json/.png/.pdf")
    return 0


if __name__ == "__main__":
    sys.exit(main())
