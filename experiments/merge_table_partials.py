"""Merge the partial files of collective-table builds over disjoint GPU-count subsets into the
partial file of the full default grid, so that the full build only assembles and seals.

Used when the shipped table is built in two halves at once, e.g. on the lent host:
the small groups on CPU processes and the 32 / 64-GPU groups on processes that run the path
model on the GPU (docs/e2e.md, "Collective table"):

    python experiments/merge_table_partials.py --part 2,4,8,16:results/p_small.json \
        --part 32,64:results/p_large.json --out results/table_partial.json
    python -m nuna_jax.e2e.llm.collective_table --partial results/table_partial.json

Each part's key is checked against this tree's model hash and its own grid (a part built by
other code is refused), and the merged file gets the full grid's key.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from nuna_jax.e2e.llm import collective_table as CT
from nuna_jax.e2e.llm import provenance
from nuna_jax.presets import load_system


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", action="append", required=True, help="GROUPS:FILE (e.g. 32,64:p.json)")
    ap.add_argument("--system", default="table2")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    system = load_system(a.system)
    mhash = provenance.model_hash(provenance.model_file_hashes())
    rows, groups_all = {}, set()
    for part in a.part:
        gs, _, f = part.partition(":")
        groups = [int(x) for x in gs.split(",")]
        d = json.loads(Path(f).read_text())
        want = provenance.digest([CT.grid_spec(system, groups=groups), mhash])
        if d.get("key") != want:
            print(f"{f}: not a partial build of groups {groups} by this tree's model; refused", file=sys.stderr)
            return 2
        for r in d["done"]:
            rows[tuple(r[:5])] = r
        groups_all |= set(groups)
    if sorted(groups_all) != sorted(CT.GROUP_SIZES):
        print(f"the parts cover groups {sorted(groups_all)}, not {list(CT.GROUP_SIZES)}", file=sys.stderr)
        return 2
    key = provenance.digest([CT.grid_spec(system), mhash])
    Path(a.out).write_text(json.dumps({"key": key, "done": list(rows.values())}))
    print(f"{a.out}: {len(rows)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
