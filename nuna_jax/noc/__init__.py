"""A credit-flow-controlled NoC simulator for synthetic traffic that reads BookSim2 configuration
files (docs/noc.md): BookSim2's input-queued virtual-channel router on k-ary n-meshes and tori."""

from .config import DEFAULTS, TRAFFIC_PATTERNS, NocConfig, load_config  # noqa: F401


def simulate_noc(*a, **kw):
    from .sim import simulate_noc as f
    return f(*a, **kw)


def zero_load_latency(cfg):
    from .sim import zero_load_latency as f
    return f(cfg)
