"""docs/fidelity.md and docs/reproduction.md from the experiments' JSON.

Reads experiments/out/{sensitivity,validation,fig13,headline}.jsonl (written by
experiments/fidelity_device.py; missing files are listed as not run) for
docs/fidelity.md: the headline before / after, the sensitivity table of every
modelling choice, Figure 13 and the validation errors.  Writes
docs/reproduction.md (and the same rows as docs/reproduction.json) from every experiment's JSON (experiments/out/*.json,
experiments/data/pk_*.json) through experiments/claims.py (claim rows: paper,
ours, ratio, verdict) and experiments/report_md.py (markdown, plots copied into
docs/img/).  Reads nothing but JSON, so a rerun regenerates both pages.

    python experiments/fidelity_table.py [--results experiments/out] [--data experiments/data] [--docs docs]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from claims import best_by_sim  # noqa: E402
OUT = ROOT / "experiments" / "out"
POL = ("UA", "UA+NAR", "NUMA", "NUMA+NAR", "NAP*", "NAP", "NAP+NAR")
DEF, PREV = "default", "previous (main before issue 10)"   # variant keys of the committed JSON


def _label(v: str) -> str:
    """How a variant is shown: the ``previous`` key names the choices before their review."""
    return "previous (the modelling choices before their review)" if v == PREV else v


def _rows(name):
    p = OUT / f"{name}.jsonl"
    if not p.exists():
        return None
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()]


def _index(rows):
    ix = {}
    for r in rows or []:
        if "error" in r:
            continue
        k = (r["variant"], r.get("collective", "allgather"), r["n_gpus"], int(r["size"]), r.get("tbs"),
             r.get("nar_granularity"), r["policy"])
        ix[k] = r
    return ix


def _get(ix, variant, size, policy, n=8, coll="allgather", tbs=None, g=None):
    return ix.get((variant, coll, n, int(size), tbs, g, policy))


def _sp(ix, variant, size, policy, key="sim_ns", **kw):
    a, b = _get(ix, variant, size, "UA", **kw), _get(ix, variant, size, policy, **kw)
    if not a or not b or key not in a or key not in b:
        return None
    return a[key] / b[key]


def _f(x, fmt="{:.2f}"):
    return "-" if x is None else fmt.format(x)


def _size(n):
    return {10**5: "100 kB", 10**6: "1 MB", 10**7: "10 MB", 64 * 10**6: "64 MB"}.get(int(n), f"{n:.0f} B")


def _key(r):
    return (r.get("study"), r["variant"], r.get("collective", "allgather"), r["n_gpus"], int(r["size"]), r.get("tbs"),
            r.get("nar_granularity"), r["policy"])


def merge(src_dir):
    """Replace rows of experiments/out/<study>.jsonl by the rows of the same case in ``src_dir``
    (a partial rerun, e.g. ``--policies UA+NAR,NUMA+NAR`` after a change that touches only them)."""
    new = {}
    for line in (Path(src_dir) / "all.jsonl").read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            new[_key(r)] = r
    for study in {k[0] for k in new}:
        p = OUT / f"{study}.jsonl"
        old = [json.loads(x) for x in p.read_text().splitlines() if x.strip()] if p.exists() else []
        seen, out = set(), []
        for r in old:
            k = _key(r)
            out.append(new.get(k, r))
            seen.add(k)
        out += [r for k, r in new.items() if k[0] == study and k not in seen]
        p.write_text("".join(json.dumps(r, default=float) + "\n" for r in out))
        print(f"merged {sum(1 for k in new if k[0] == study)} rows into {p}")


def headline_best(rows, L):
    L += ["### Best threadblock count (NUNA 5.1: \"the best-performing number of threadblocks\")", ""]
    if not rows:
        L += ["Not run (experiments/out/headline.jsonl missing).", ""]
        return
    best = best_by_sim(rows, lambda r: (r["variant"], int(r["size"]), r["policy"]))
    L += ["Each configuration at its fastest of 7, 28, 112 threadblocks per GPU (simulator); speedup over UA at "
          "its own best count; (threadblocks, granularity) in parentheses.", "",
          "| size | UA best (ns) | UA+NAR | NUMA+NAR | NAP | NAP+NAR before | NAP+NAR after |", "|---|---|---|---|---|---|---|"]
    for n in (10**5, 10**6, 10**7, 64 * 10**6):
        u, up = best.get((DEF, n, "UA")), best.get((PREV, n, "UA"))
        if not u:
            continue
        cell = lambda v, p, base: (lambda r: f"{base['sim_ns'] / r['sim_ns']:.2f} ({r['tbs']}, g {r['routing_granularity']})"  # noqa: E731
                                   if r else "-")(best.get((v, n, p)))
        L.append(f"| {_size(n)} | {u['sim_ns']:.0f} ({u['tbs']}) | {cell(DEF, 'UA+NAR', u)} | {cell(DEF, 'NUMA+NAR', u)} | "
                 f"{cell(DEF, 'NAP', u)} | {cell(PREV, 'NAP+NAR', up) if up else '-'} | {cell(DEF, 'NAP+NAR', u)} |")
    L.append("")


def headline(ix, L):
    L += ["## Headline: NAP+NAR over UA, 8 GPUs, All-Gather, 7 threadblocks per GPU", "",
          "Exact simulator (the judge) and analytical estimate; *before* = every modelling choice of "
          "docs/policies.md as it was before its review (variant `previous`), *after* = the new defaults. Speedup = UA time / policy time.", "",
          "| size | paper | NAP+NAR sim before | after | NAP+NAR est. before | after | NAP sim before | after | "
          "UA+NAR sim after | NUMA+NAR sim after | NAP+NAR g (after) |", "|" + "---|" * 11]
    paper = {10**5: "1.5-1.9", 10**6: "1.5-1.9", 10**7: "-", 64 * 10**6: "~1.1"}
    for n in (10**5, 10**6, 10**7, 64 * 10**6):
        r = _get(ix, DEF, n, "NAP+NAR")
        L.append(f"| {_size(n)} | {paper[n]} | {_f(_sp(ix, PREV, n, 'NAP+NAR'))} | {_f(_sp(ix, DEF, n, 'NAP+NAR'))} | "
                 f"{_f(_sp(ix, PREV, n, 'NAP+NAR', 'estimate_ns'))} | {_f(_sp(ix, DEF, n, 'NAP+NAR', 'estimate_ns'))} | "
                 f"{_f(_sp(ix, PREV, n, 'NAP'))} | {_f(_sp(ix, DEF, n, 'NAP'))} | {_f(_sp(ix, DEF, n, 'UA+NAR'))} | "
                 f"{_f(_sp(ix, DEF, n, 'NUMA+NAR'))} | {r['routing_granularity'] if r else '-'} |")
    L.append("")
    L += ["### Figure 10: one-way store latency, 8 GPUs, 1 MB All-Gather (ns)", "",
          "| | UA mean | UA max | NAP+NAR mean | NAP+NAR max |", "|---|---|---|---|---|",
          "| paper (6.2) | 920 | 1,320 | 780 | 1,180 |"]
    for v, lab in ((PREV, "before"), (DEF, "after")):
        u, n = _get(ix, v, 10**6, "UA"), _get(ix, v, 10**6, "NAP+NAR")
        if u and n and "store_latency_ns" in u and "store_latency_ns" in n:
            a, b = u["store_latency_ns"], n["store_latency_ns"]
            L.append(f"| {lab} | {a['mean']:.0f} | {a['max']:.0f} | {b['mean']:.0f} | {b['max']:.0f} |")
    L.append("")


def sensitivity(ix, variants, L):
    L += ["## Sensitivity to each modelling choice (item 2)", "",
          "Each variant flips one choice of docs/policies.md \"Modelling choices\" away from its default "
          "(`previous` flips all of D1, D2b, D3, D4, D5 back). 8 GPUs, All-Gather, 7 threadblocks per GPU. "
          "UA: simulated completion (ns); the others: simulated speedup over UA of the same variant "
          "(estimate in parentheses).", ""]
    for n in (10**5, 10**6, 10**7):
        L += [f"### {_size(n)}", "", "| variant | UA (ns) | " + " | ".join(POL[1:]) + " |",
              "|" + "---|" * (len(POL) + 1)]
        for v in variants:
            u = _get(ix, v, n, "UA")
            if not u:
                continue
            cells = [f"{_f(_sp(ix, v, n, p))} ({_f(_sp(ix, v, n, p, 'estimate_ns'))})" for p in POL[1:]]
            L.append(f"| {_label(v)} | {u['sim_ns']:.0f} | " + " | ".join(cells) + " |")
        L.append("")
    L += ["NAP granularity chosen by the search (routing g for NAP+NAR; Algorithm 1's nar_max for NAP, NAP*):", "",
          "| variant | size | NAP* | NAP | NAP+NAR |", "|---|---|---|---|---|"]
    for v in variants:
        for n in (10**5, 10**6, 10**7):
            rs = [_get(ix, v, n, p) for p in ("NAP*", "NAP", "NAP+NAR")]
            if all(rs):
                L.append(f"| {_label(v)} | {_size(n)} | " + " | ".join(str(r["placement_granularity"]) for r in rs) + " |")
    L.append("")


def validation(rows, L):
    L += ["## Validation: analytical estimate against the simulator (item 5)", ""]
    if not rows:
        L += ["Not run at this commit (experiments/out/validation.jsonl missing): see the report.", ""]
        return
    ok = [r for r in rows if "sim_ns" in r and "error" not in r]
    for r in ok:
        r["err"] = (r["estimate_ns"] - r["sim_ns"]) / r["sim_ns"]
    ix = {}
    for r in ok:
        ix[(r.get("collective"), r["n_gpus"], r["size"], r.get("tbs"), r["policy"])] = r
    sperr = []
    for (c, n, sz, t, p), r in ix.items():
        u = ix.get((c, n, sz, t, "UA"))
        if u and p != "UA":
            se, ss = u["estimate_ns"] / r["estimate_ns"], u["sim_ns"] / r["sim_ns"]
            sperr.append((se - ss) / ss)
    ae = [abs(r["err"]) for r in ok]
    L += [f"{len(ok)} cases ({len(rows) - len(ok)} failed or not simulated). Completion-time error "
          f"(estimate - sim) / sim: median {statistics.median([r['err'] for r in ok]):+.1%}, median |error| "
          f"{statistics.median(ae):.1%}, worst {max(ok, key=lambda r: abs(r['err']))['err']:+.1%}. "
          f"Speedup-over-UA error: median |error| {statistics.median([abs(x) for x in sperr]):.1%}, worst "
          f"{max(sperr, key=abs):+.1%}.", "",
          "| group | cases | median error | median abs error | worst |", "|---|---|---|---|---|"]
    def grp(name, key):
        g = {}
        for r in ok:
            g.setdefault(key(r), []).append(r["err"])
        for k in sorted(g, key=str):
            e = g[k]
            L.append(f"| {name} {k} | {len(e)} | {statistics.median(e):+.1%} | "
                     f"{statistics.median([abs(x) for x in e]):.1%} | {max(e, key=abs):+.1%} |")
    grp("size", lambda r: _size(r["size"]))
    grp("config", lambda r: r["policy"])
    grp("GPUs", lambda r: r["n_gpus"])
    grp("collective", lambda r: r.get("collective"))
    L.append("")
    worst = sorted(ok, key=lambda r: -abs(r["err"]))[:8]
    L += ["Worst cases:", "", "| collective | GPUs | size | tbs | config | sim (ns) | estimate (ns) | error | bottleneck |",
          "|---|---|---|---|---|---|---|---|---|"]
    for r in worst:
        L.append(f"| {r.get('collective')} | {r['n_gpus']} | {_size(r['size'])} | {r.get('tbs') or 'n-1'} | "
                 f"{r['policy']} | {r['sim_ns']:.0f} | {r['estimate_ns']:.0f} | {r['err']:+.1%} | {r.get('bottleneck')} |")
    L.append("")


def fig13(rows, L):
    L += ["## Figure 13: NAR granularity, 1 MB All-Gather, 8 GPUs (simulator)", ""]
    if not rows:
        L += ["Not run at this commit (experiments/out/fig13.jsonl missing).", ""]
        return
    ix = {(r["policy"], r["tbs"], r.get("nar_granularity")): r for r in rows if "sim_ns" in r}
    L += ["Speedup of NAR granularity g over the same placement with hashed routing (g = 1).", "",
          "| tbs | pair | " + " | ".join(str(g) for g in range(2, 13)) + " |", "|" + "---|" * 13]
    for tbs in (7, 1008):
        for pol, base in (("UA+NAR", "UA"), ("NAP+NAR", "NAP")):
            b = ix.get((base, tbs, 1))
            if not b:
                continue
            cells = [_f(b["sim_ns"] / ix[(pol, tbs, g)]["sim_ns"]) if (pol, tbs, g) in ix else "-" for g in range(2, 13)]
            L.append(f"| {tbs} | {pol} / {base} | " + " | ".join(cells) + " |")
    L.append("")


def provenance() -> str:
    """One line from experiments/out/provenance.json (written by fidelity_device.py)."""
    p = OUT / "provenance.json"
    if not p.exists():
        return "Provenance: not recorded (experiments/out/provenance.json missing).\n"
    d = json.loads(p.read_text())
    return (f"Provenance: studies {', '.join(d.get('studies', []))} ran on {d.get('host', '?')} "
            f"({d.get('jobs', '?')} processes, {d.get('wall_s', 0):.0f} s, {d.get('date', '?')}), code of commit "
            f"{d.get('commit', '?')}{' plus uncommitted changes' if d.get('dirty') else ''}.\n")


def fig9_sim(rows, L):
    """NUNA Figure 9 judged by the simulator: each configuration at its best threadblock count."""
    L += ["## Figure 9 with the simulator (item 4)", ""]
    if not rows:
        L += ["Not run (experiments/out/fig9.jsonl missing).", ""]
        return
    best = best_by_sim(rows, lambda r: (r.get("collective", "allgather"), r["n_gpus"], int(r["size"]), r["policy"]))
    L += ["Speedup over UA, simulated (analytical estimate in parentheses), each configuration at its fastest "
          "of 1, 4, 16 x (n - 1) threadblocks per GPU by the simulator (1 and 4 x at 64 GPUs); the estimate "
          "column is the estimate of that same placement. UA: best simulated time (threadblocks).", "",
          "| collective | GPUs | size | UA (ns) | UA+NAR | NUMA+NAR | NAP+NAR |", "|---|---|---|---|---|---|---|"]
    for coll in ("allgather", "allreduce", "alltoall"):
        for n in (2, 8, 64):
            for size in (10**5, 10**6, 10**7):
                u = best.get((coll, n, size, "UA"))
                if not u:
                    continue
                cells = []
                for p in ("UA+NAR", "NUMA+NAR", "NAP+NAR"):
                    r = best.get((coll, n, size, p))
                    cells.append("-" if not r else f"{u['sim_ns'] / r['sim_ns']:.2f} "
                                 f"({u['estimate_ns'] / r['estimate_ns']:.2f})")
                L.append(f"| {coll} | {n} | {_size(size)} | {u['sim_ns']:.0f} ({u['tbs']}) | " + " | ".join(cells) + " |")
    L.append("")


def claims_pointer(L):
    L += ["## Fidelity table (item 7)", "",
          "Moved to [reproduction.md](reproduction.md): every quantitative claim of NUNA sections 1, 3 and 6 and of "
          "the ParallelKittens notes, with the paper's value, ours, the ratio, a verdict and the JSON it came from, "
          "generated by this same script.", ""]


def main(argv=None) -> int:
    global OUT
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=str(OUT), help="the experiments' JSON folder (experiments/out)")
    ap.add_argument("--data", default=str(ROOT / "experiments" / "data"), help="ParallelKittens JSON (pk_*.json)")
    ap.add_argument("--docs", default=str(ROOT / "docs"), help="writes DOCS/fidelity.md, DOCS/reproduction.md, DOCS/img/")
    ap.add_argument("--merge", default=None, help="first merge a partial rerun's DIR/all.jsonl into experiments/out")
    ap.add_argument("--out", default=None, metavar="DIR",
                    help="write the documents into DIR instead of docs/ (same as --docs DIR; the JSON is still read "
                         "from --results and --data)")
    a = ap.parse_args(argv)
    if a.out is not None:
        a.docs = a.out
    OUT = Path(a.results)
    if a.merge:
        merge(a.merge)
    sens = _rows("sensitivity")
    ix = _index(sens)
    variants = []
    for r in sens or []:
        if r["variant"] not in variants:
            variants.append(r["variant"])
    order = [DEF] + sorted(v for v in variants if v not in (DEF, PREV)) + [PREV]
    L = ["# Fidelity: our NUNA numbers beside the paper's", "",
         "Generated by `python experiments/fidelity_table.py` from experiments/out/*.jsonl "
         "(`python experiments/fidelity_device.py`) and experiments/data/pk_*.json. Do not edit by hand.", "",
         provenance()]
    headline(ix, L)
    headline_best(_rows("headline"), L)
    sensitivity(ix, [v for v in order if v in variants], L)
    f13 = _rows("fig13")
    fig13(f13, L)
    fig9_sim(_rows("fig9"), L)
    validation(_rows("validation"), L)
    claims_pointer(L)
    docs = Path(a.docs)
    docs.mkdir(parents=True, exist_ok=True)
    (docs / "fidelity.md").write_text("\n".join(L) + "\n")
    from claims import collect
    import report_md
    rows = collect(OUT, a.data, ROOT)
    rep = report_md.write(rows, {"out": OUT, "data": Path(a.data)}, docs)
    print(f"wrote {docs / 'fidelity.md'}, {rep} and {rep.with_suffix('.json')} ({len(rows)} claims)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
