"""The differentiable NAP/NAR placement search (docs/optim.md)."""
