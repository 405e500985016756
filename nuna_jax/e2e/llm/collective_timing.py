"""How one entry of the end-to-end collective table is timed (the root of its model hash).

Everything that decides a table entry is this file plus what it imports
(scenario, placement, lowering, the path model, plans, presets, ...):
:func:`provenance.model_files` follows the imports from here, so a change to
any of those modules' code makes the shipped table stale.  Keep the timing
rule here and nothing else.
"""

from __future__ import annotations

#: NUNA 5.1 "the best-performing number of threadblocks": the table times each entry with
#: ``m * (n - 1)`` threadblocks per GPU for each ``m`` here and keeps the fastest.
TBS_MULTIPLES = (1, 4, 16)


def time_collective_ns(system, kind: str, n_gpus: int, size_bytes: int, policy: str,
                       tbs_per_gpu: int | None = None) -> float:
    """Estimated time (ns) of one collective by the library's NUNA path model (direct algorithm)."""
    from ...models.contention import evaluate
    from ...scenario import make_scenario
    s = system.replace(n_gpus=int(n_gpus))
    sc = make_scenario(s, collective=kind, size_bytes=int(size_bytes), policy=policy, tbs_per_gpu=tbs_per_gpu)
    return float(evaluate(s, sc.traffic)["time_ns"])


def time_or_none(system, kind: str, n_gpus: int, size_bytes: int, policy: str, tbs_per_gpu: int):
    """:func:`time_collective_ns`, or None when the threadblock count cannot be placed."""
    try:
        return time_collective_ns(system, kind, n_gpus, size_bytes, policy, tbs_per_gpu)
    except ValueError:           # more threadblocks than the CUs hold
        return None


def best_time_ns(system, kind: str, n_gpus: int, size_bytes: int, policy: str,
                 multiples=TBS_MULTIPLES) -> tuple[float, int]:
    """The fastest of ``m * (n_gpus - 1)`` threadblocks per GPU over ``multiples`` (a count that
    cannot be placed is skipped).  Returns (time_ns, threadblocks per GPU)."""
    best = (float("inf"), 0)
    for m in multiples:
        tbs = m * (int(n_gpus) - 1)
        t = time_or_none(system, kind, n_gpus, size_bytes, policy, tbs)
        if t is not None:
            best = min(best, (t, tbs))
    return best
