"""nuna_jax: collective communication on multi-die GPU scale-up pods, in JAX.

Models (alpha-beta collectives, XY mesh latency, port and link contention,
the ParallelKittens kernel model), the NUNA placement (NAP) and routing (NAR)
policies, and an exact flit simulator.  See README.md and docs/model.md.
"""

from .presets import from_params, from_toml, preset, preset_names
from .system import System

__version__ = "0.1.0"
__all__ = ["System", "preset", "preset_names", "from_params", "from_toml", "__version__"]
