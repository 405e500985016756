"""Writing an experiment's figure as PNG and PDF side by side.

Every script under ``experiments/`` calls :func:`save_figure` instead of
``fig.savefig``, so each experiment leaves the same pair of files: a PNG for
the generated report (docs/reproduction.md embeds it) and a PDF for print.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["save_figure"]

#: the pair every experiment writes (``plots.io.SUFFIXES`` also has ``.svg`` for ``--plot``)
SUFFIXES = (".png", ".pdf")


def save_figure(fig, path, dpi: int = 110) -> tuple[Path, ...]:
    """Write ``fig`` to ``path``'s stem + ``.png`` and + ``.pdf``; return both paths (PNG first).

    ``path`` may carry ``.png`` or ``.pdf`` (either is dropped) or no suffix;
    any other suffix is kept as part of the name (``fig.v2`` -> ``fig.v2.png``).
    ``dpi`` applies to the PNG; the PDF is vector.  Missing parent folders are
    created.  ``ValueError`` if ``dpi`` is not positive.
    """
    if not dpi or dpi <= 0:
        raise ValueError(f"dpi {dpi!r} must be a positive number of dots per inch")
    p = Path(path)
    base = p.with_suffix("") if p.suffix.lower() in SUFFIXES else p
    base.parent.mkdir(parents=True, exist_ok=True)
    out = []
    for suffix in SUFFIXES:
        f = base.with_name(base.name + suffix)
        fig.savefig(f, format=suffix[1:], dpi=dpi if suffix == ".png" else None)
        out.append(f)
    return tuple(out)
