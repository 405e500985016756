"""The ``nuna-jax`` command.

Each subcommand lives in its own module ``nuna_jax.cli.<name>`` exposing
``add_parser(subparsers)`` (registers the subparser) and ``run(args) -> int``.
This file only dispatches.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand name -> module; order is the order in --help
SUBCOMMANDS = {
    "info": "nuna_jax.cli.info",
    "place": "nuna_jax.cli.place",
    "estimate": "nuna_jax.cli.estimate",
    "simulate": "nuna_jax.cli.simulate",
    "kernel": "nuna_jax.cli.kernel",
    "optimize": "nuna_jax.cli.optimize",
}


def build_parser() -> tuple[argparse.ArgumentParser, dict]:
    p = argparse.ArgumentParser(
        prog="nuna-jax",
        description="Model, optimize and check collective communication on multi-die GPU "
                    "scale-up pods (NUNA). Default system: NUNA Table 2.",
    )
    from .. import __version__
    p.add_argument("--version", action="version", version=f"nuna-jax {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    runners = {}
    for name, modname in SUBCOMMANDS.items():
        try:
            mod = importlib.import_module(modname)
        except ModuleNotFoundError as e:  # a subcommand not built yet
            if e.name != modname:
                raise
            continue
        mod.add_parser(sub)
        runners[name] = mod.run
    return p, runners


def main(argv: list[str] | None = None) -> int:
    parser, runners = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    try:
        return int(runners[args.command](args) or 0)
    except ValueError as e:
        print(f"nuna-jax {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
