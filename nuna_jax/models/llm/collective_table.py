"""Old path of :mod:`nuna_jax.e2e.llm.collective_table` (an alias: ``python -m`` it or import it)."""

import sys

from ...e2e.llm import collective_table as _table

if __name__ == "__main__":  # pragma: no cover
    sys.exit(_table.main())
sys.modules[__name__] = _table
