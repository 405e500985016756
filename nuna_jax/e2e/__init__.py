"""The end-to-end model (NUNA sections 5.2 and 6.7): LLM inference TTFT / TPOT on collectives timed
by the library's path model.  It sits above the scenario layer (plan -> placement -> traffic) that
it times collectives through, so no import in the package runs back up the layers (docs/e2e.md).

:mod:`nuna_jax.e2e.llm` holds the model; ``nuna-jax e2e`` is its command.
"""
