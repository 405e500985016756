"""``python -m nuna_jax`` runs the ``nuna-jax`` command."""

import sys

from .cli import main

sys.exit(main())
