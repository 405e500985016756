"""Run a script under a work-limit factor: ``python -m nuna_jax.cli.limited F SCRIPT [ARGS...]``.

``nuna-jax reproduce --max-work F`` starts each experiment this way, so that every library entry
point the script calls (``make_plan``, the lowering, ``make_scenario``, ...) checks its work
against limits multiplied by ``F`` (:class:`nuna_jax.limits.Limits`, README "Limits and errors"),
as ``--max-work F`` does for the other commands.
"""

from __future__ import annotations

import os
import runpy
import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 2:
        print("usage: python -m nuna_jax.cli.limited F SCRIPT [ARGS...]", file=sys.stderr)
        return 2
    factor, script, rest = float(argv[0]), argv[1], argv[2:]
    from ..limits import Limits, using
    sys.argv = [script, *rest]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))   # as `python SCRIPT` would
    with using(Limits(factor)):
        runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
