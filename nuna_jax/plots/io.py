"""Writing a figure to a file, the format chosen by the suffix."""

from __future__ import annotations

from pathlib import Path

__all__ = ["SUFFIXES", "save"]

SUFFIXES = (".png", ".pdf", ".svg")


def save(fig, path) -> Path:
    """Write ``fig`` to ``path`` as PNG, PDF or SVG (by suffix, case-insensitive); return the path.

    ``ValueError`` for another suffix, or when the file cannot be written
    (missing directory, no permission).
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(f"plot file {str(path)!r}: suffix {p.suffix or '(none)'!r} is not supported; "
                         f"use one of {', '.join(SUFFIXES)}")
    try:
        fig.savefig(p, format=suffix[1:], dpi=150 if suffix == ".png" else None)
    except OSError as e:
        raise ValueError(f"plot file {str(path)!r} cannot be written: {e.strerror or e}") from None
    return p
