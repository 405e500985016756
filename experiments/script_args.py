"""The ``--out DIR`` argument of the experiments that take no other (``nuna-jax reproduce --out``)."""

from __future__ import annotations

import argparse
from pathlib import Path


def out_dir(doc: str, defaults: str, argv=None) -> Path | None:
    """``--out DIR`` parsed from ``argv`` (the script's ``__doc__`` heads its help; ``defaults`` names
    where the outputs go without it): write every output into DIR instead of the clone's folders."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", default=None, metavar="DIR",
                    help=f"write the JSON and the plot into DIR (default: {defaults})")
    a = ap.parse_args(argv)
    return None if a.out is None else Path(a.out)
