"""Range checks shared by the hardware descriptions (``System``, ``KernelHW``)."""

from __future__ import annotations

import jax
import numpy as np


def concrete(v):
    """``v`` as a float ``np.ndarray`` if it is concrete, else None (a tracer: unchecked)."""
    if isinstance(v, jax.core.Tracer):
        return None
    try:
        return np.asarray(v, dtype=float)
    except Exception:
        return None


def check_float_fields(label: str, obj, positive=(), nonneg=()) -> None:
    """Raise ``ValueError`` naming ``label.field`` if a concrete field is not finite,
    not > 0 (``positive``) or not >= 0 (``nonneg``)."""
    for k in tuple(positive) + tuple(nonneg):
        v = getattr(obj, k)
        a = concrete(v)
        if a is None:
            continue
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{label}.{k} must be finite, got {v!r}")
        if k in positive and np.any(a <= 0):
            raise ValueError(f"{label}.{k} must be > 0, got {v!r}")
        if k in nonneg and np.any(a < 0):
            raise ValueError(f"{label}.{k} must be >= 0, got {v!r}")
