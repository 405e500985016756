"""The differentiable NAP/NAR placement search (issue 12; docs/optim.md)."""
