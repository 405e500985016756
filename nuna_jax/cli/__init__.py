"""The ``nuna-jax`` command.

Each subcommand lives in its own module ``nuna_jax.cli.<name>`` exposing
``add_parser(subparsers)`` (registers the subparser) and ``run(args) -> int``.
This file dispatches and is the one error boundary (README "Limits and
errors"): a user error -- a bad command line, a bad or unreadable input file,
a number out of range, work over the limits -- is one line on stderr and exit
status 2; anything else is a bug and keeps its traceback (exit 1).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback

#: Exception types that mean "bad input" (after the readers have turned parser errors
#: into ValueError naming the file): values out of range, overflow, unreadable files.
USER_ERRORS = (ValueError, OverflowError, OSError)
MAX_MESSAGE_CHARS = 600


class UsageError(Exception):
    """A command-line parse error (argparse's), reported as one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors raised as :class:`UsageError` (subparsers inherit it)."""

    def error(self, message):
        raise UsageError(f"{self.prog}: error: {message} (see {self.prog} --help)")


def one_line(text: str) -> str:
    """A message folded onto one line and capped at ``MAX_MESSAGE_CHARS``."""
    s = " ".join(str(text).split())
    return s if len(s) <= MAX_MESSAGE_CHARS else s[:MAX_MESSAGE_CHARS - 3] + "..."


def _user_message(e: BaseException) -> str:
    if isinstance(e, OSError) and e.filename is not None:
        return f"cannot read {e.filename!r}: {e.strerror or type(e).__name__}"
    if isinstance(e, OverflowError):
        return f"a number is out of range ({e})"
    return str(e) or type(e).__name__

# subcommand name -> module; order is the order in --help
SUBCOMMANDS = {
    "info": "nuna_jax.cli.info",
    "place": "nuna_jax.cli.place",
    "estimate": "nuna_jax.cli.estimate",
    "simulate": "nuna_jax.cli.simulate",
    "kernel": "nuna_jax.cli.kernel",
    "e2e": "nuna_jax.cli.e2e",
    "sweep": "nuna_jax.cli.sweep",
    "sensitivity": "nuna_jax.cli.sensitivity",
    "optimize": "nuna_jax.cli.optimize",
    "reproduce": "nuna_jax.cli.reproduce",
    "noc": "nuna_jax.cli.noc",
    "trace": "nuna_jax.cli.trace",
}


def build_parser() -> tuple[argparse.ArgumentParser, dict]:
    p = _Parser(
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


def use_compilation_cache() -> None:
    """Keep XLA's compiled programs between runs of the command (JAX's persistent compilation
    cache; the second ``nuna-jax estimate`` on the same shapes skips most of the compile time) and
    built scenarios (:mod:`nuna_jax.cache`), under the cache root's ``xla/`` and ``scenarios/``
    (``$NUNA_JAX_CACHE_DIR``, empty: off; else ``~/.cache/nuna_jax``); an unwritable directory just
    leaves the cache off.  Does not import jax: when jax is not loaded yet, the setting goes through
    the environment variables jax reads when it is first imported."""
    import os
    from .. import cache
    cache.use_scenarios(True)
    d = cache.subdir("xla")
    if d is None:
        return
    d = str(d)
    if "jax" not in sys.modules:
        os.environ["JAX_COMPILATION_CACHE_DIR"] = d
        os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "1.0"
        return
    import jax
    try:
        jax.config.update("jax_compilation_cache_dir", d)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    except AttributeError:  # an old jax
        return


def main(argv: list[str] | None = None) -> int:
    # parsing (--help, --version, argument errors) loads no jax, flax or numba: every subcommand
    # module imports them where it runs (tests/test_cli_quick.py)
    parser, runners = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as e:
        print(one_line(str(e)), file=sys.stderr)
        return 2
    if not args.command:
        print(f"nuna-jax: error: give a command ({', '.join(runners)}); see nuna-jax --help", file=sys.stderr)
        return 2
    use_compilation_cache()
    from .common import RUN
    RUN.update(argv=list(sys.argv[1:] if argv is None else argv), system=None)
    try:
        from ..limits import Limits, using
        from .common import check_output_paths
        check_output_paths(args)                              # before any work: never destroy an input
        with using(Limits(getattr(args, "max_work", 1.0))):   # the library's default limits: --max-work's
            return int(runners[args.command](args) or 0)
    except USER_ERRORS as e:
        print(one_line(f"nuna-jax {args.command}: error: {_user_message(e)}"), file=sys.stderr)
        return 2
    except MemoryError:
        print(f"nuna-jax {args.command}: error: out of memory; the inputs ask for more than this machine "
              "has (lower the sizes, or --max-work below 1)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"nuna-jax {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception:  # a bug: keep the traceback, say so
        traceback.print_exc()
        print(f"nuna-jax {args.command}: internal error (a bug in nuna-jax, not in your input); "
              "please report it with the command line above", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
