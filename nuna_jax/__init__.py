"""nuna_jax: collective communication on multi-die GPU scale-up pods, in JAX.

Models (alpha-beta collectives, XY mesh latency, port and link contention,
the ParallelKittens kernel model), the NUNA placement (NAP) and routing (NAR)
policies, and an exact flit simulator.  See README.md and docs/model.md.

The names below load on first use (module ``__getattr__``), so ``import nuna_jax`` and the
command line's ``--help`` do not import jax or flax.
"""

import importlib

__version__ = "0.1.0"
__all__ = ["System", "preset", "preset_names", "from_params", "from_toml", "__version__"]

# name -> submodule that defines it
_LAZY = {"System": "system", "preset": "presets", "preset_names": "presets", "from_params": "presets",
         "from_toml": "presets"}


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
