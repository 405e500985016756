"""Imports only go down the layers of /work/shared/ARCHITECTURE.md (and docs/model.md):
system/presets/geometry < plans/msccl/placement/nar < traffic < lowering < path < models | sim <
scenario < e2e (the end-to-end model) / optim / sweep < cli.  ``sim`` never imports ``models``; nothing
below ``cli`` imports it; ``models/llm`` is only the old import path of ``e2e/llm`` (an alias), which
nothing in the package imports."""

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "nuna_jax"

# layer of a module (first component under nuna_jax); unknown modules are reported
LAYER = {
    "__version__": -1, "cache": -1, "schemas": -1, "checks": -1, "numba_jit": -1, "units": -1, "workers": -1, "provenance": 0, "system": 0, "presets": 1, "geometry": 1, "limits": 1, "progress": 1,
    "plans": 2, "msccl": 3, "nar": 2, "algorithm1_kernel": 2, "placement": 3, "astra": 8, "chakra": 2,
    "traffic": 4, "lowering": 5, "path": 6,
    "models": 7, "sim": 7, "noc": 7, "kernel_presets": 8,
    # plan -> placement -> traffic; NAP's NAR-granularity search asks the path model (NUNA 4.1.2)
    "scenario": 8,
    "e2e": 9,           # the end-to-end model times collectives through scenario + the path model
    "models.llm": 12,   # alias of e2e.llm kept for users' old imports: no code, imported by nothing here
    "optim": 9, "sweep": 9, "sensitivity": 9, "plots": 9, "pk_nuna": 9,
    "cli": 10, "__main__": 11, "__init__": 11,
}


def _key(parts) -> str:
    """Layer key of a module path: ``models.llm`` has a layer of its own, else the first part."""
    parts = list(parts)
    if len(parts) >= 2 and ".".join(parts[:2]) in LAYER:
        return ".".join(parts[:2])
    return parts[0] if parts else "__init__"


def _module_name(p: Path) -> str:
    return _key(p.relative_to(PKG).with_suffix("").parts)


def _imports(p: Path):
    tree = ast.parse(p.read_text())
    pkg_parts = p.relative_to(PKG).parent.parts
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(pkg_parts[: len(pkg_parts) - (node.level - 1)])
                mod = base + (node.module.split(".") if node.module else [])
                names = [mod + [a.name] for a in node.names] if not node.module else [mod]
                for m in names:
                    yield _key(m)
            elif node.module and node.module.startswith("nuna_jax."):
                yield _key(node.module.split(".")[1:])
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("nuna_jax."):
                    yield _key(a.name.split(".")[1:])


FILES = sorted(p for p in PKG.rglob("*.py"))


@pytest.mark.parametrize("p", FILES, ids=lambda p: str(p.relative_to(PKG)))
def test_imports_only_go_down(p):
    me = _module_name(p)
    assert me in LAYER, f"{me}: add the module to the layer table"
    for dep in _imports(p):
        if dep == me:
            continue
        assert dep in LAYER, f"{p.relative_to(PKG)} imports unknown module {dep}"
        if me == "sim":
            assert not dep.startswith("models"), f"{p.relative_to(PKG)}: sim/ must not import models/"
        assert LAYER[dep] < LAYER[me] or (me == "__init__"), (
            f"{p.relative_to(PKG)} (layer {LAYER[me]}) imports {dep} (layer {LAYER[dep]}): an import up the layers")


def test_the_models_llm_alias_has_no_code_and_nothing_imports_it():
    alias = PKG / "models" / "llm"
    assert sorted(p.name for p in alias.iterdir() if p.suffix == ".py") == ["__init__.py", "collective_table.py"]
    for p in FILES:
        if alias in p.parents:
            continue
        assert "models.llm" not in set(_imports(p)), f"{p.relative_to(PKG)} imports the models.llm alias"
    for f in alias.glob("*.py"):
        tree = ast.parse(f.read_text())
        assert not [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))], f


def test_the_alias_is_the_same_module_and_its_main_runs():
    import subprocess
    import sys

    import nuna_jax.e2e.llm.search as new
    import nuna_jax.models.llm.collective_table as old_table
    import nuna_jax.models.llm.search as old
    from nuna_jax.e2e.llm import collective_table
    assert old is new and old_table is collective_table
    r = subprocess.run([sys.executable, "-m", "nuna_jax.models.llm.collective_table", "--help"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "--check" in r.stdout and "Warning" not in r.stderr
