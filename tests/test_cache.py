"""The scenario store (nuna_jax.cache): a hit returns what a build returns, the key covers the
inputs, bad entries are rebuilt, the off switch and the size bound hold."""

from __future__ import annotations

import numpy as np
import pytest

from nuna_jax import cache, preset
from nuna_jax import scenario as scn
from nuna_jax.traffic import FIELDS

ARGS = dict(collective="allgather", size_bytes=64 * 4096, policy="UA", tbs_per_gpu=2)


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("NUNA_JAX_CACHE_DIR", str(tmp_path))
    cache.use_scenarios(True)
    yield tmp_path / "scenarios"
    cache.use_scenarios(False)


def _same(a, b):
    for k in FIELDS:
        np.testing.assert_array_equal(np.asarray(getattr(a.traffic, k)), np.asarray(getattr(b.traffic, k)))
    np.testing.assert_array_equal(a.placement.tb_cu, b.placement.tb_cu)
    assert a.system == b.system and a.tbs_chosen_by == b.tbs_chosen_by


def test_hit_skips_the_build_and_equals_it(store, monkeypatch):
    s = preset("table2", n_gpus=2)
    built = scn.make_scenario(s, **ARGS)
    assert len(list(store.glob("*.pkl"))) == 1
    def no_build(*a, **k):
        raise AssertionError("built again")
    monkeypatch.setattr(scn, "_make_scenario", no_build)
    _same(scn.make_scenario(s, **ARGS), built)
    with pytest.raises(AssertionError, match="built again"):     # one ulp of one field: a new key
        scn.make_scenario(s.replace(hbm_latency_ns=np.nextafter(s.hbm_latency_ns, 1e9)), **ARGS)
    with pytest.raises(AssertionError, match="built again"):     # another limit factor: a new key
        from nuna_jax.limits import Limits
        scn.make_scenario(s, **ARGS, limits=Limits(2.0))


def test_key_covers_every_input(tmp_path):
    s = preset("table2", n_gpus=2)
    k0 = cache.scenario_key(s, ARGS, 1.0)
    assert cache.scenario_key(s, dict(ARGS), 1.0) == k0
    for change in (dict(size_bytes=ARGS["size_bytes"] + 1), dict(policy="NAP+NAR"), dict(tbs_per_gpu=3),
                   dict(collective="alltoall"), dict(nar_granularity=2), dict(elem_bytes=4)):
        assert cache.scenario_key(s, {**ARGS, **change}, 1.0) != k0, change
    assert cache.scenario_key(s.replace(n_gpus=4), ARGS, 1.0) != k0
    assert cache.scenario_key(s, ARGS, 0.5) != k0
    import jax
    was = jax.config.jax_enable_x64
    try:                                  # 64-bit floats change NAP's estimates: another entry
        jax.config.update("jax_enable_x64", not was)
        assert cache.scenario_key(s, ARGS, 1.0) != k0
    finally:
        jax.config.update("jax_enable_x64", was)
    assert cache.scenario_key(s, ARGS, 1.0) == k0
    # an MSCCL file is keyed by its bytes, not its name
    a, b = tmp_path / "a.xml", tmp_path / "b.xml"
    a.write_text("<algo/>")
    b.write_text("<algo/>")
    ka = cache.scenario_key(s, {**ARGS, "collective": None, "plan_file": str(a)}, 1.0)
    assert ka == cache.scenario_key(s, {**ARGS, "collective": None, "plan_file": str(b)}, 1.0)
    b.write_text("<algo />")
    assert ka != cache.scenario_key(s, {**ARGS, "collective": None, "plan_file": str(b)}, 1.0)
    with pytest.raises(TypeError):
        cache.scenario_key(s, {**ARGS, "options": object()}, 1.0)


def test_bad_entry_is_rebuilt(store):
    s = preset("table2", n_gpus=2)
    built = scn.make_scenario(s, **ARGS)
    (entry,) = store.glob("*.pkl")
    entry.write_bytes(entry.read_bytes()[:100])                  # truncated
    _same(scn.make_scenario(s, **ARGS), built)
    assert entry.stat().st_size > 100                            # rewritten whole


def test_off_switch_and_library_default(tmp_path, monkeypatch):
    s = preset("table2", n_gpus=2)
    monkeypatch.setenv("NUNA_JAX_CACHE_DIR", str(tmp_path))
    scn.make_scenario(s, **ARGS)                                 # library default: off
    assert not (tmp_path / "scenarios").exists()
    monkeypatch.setenv("NUNA_JAX_CACHE_DIR", "")
    cache.use_scenarios(True)
    try:
        assert not cache.scenarios_on() and cache.root() is None
        scn.make_scenario(s, **ARGS)
    finally:
        cache.use_scenarios(False)
    assert not any(tmp_path.iterdir())


def test_store_keeps_to_its_size(store, monkeypatch):
    s = preset("table2", n_gpus=2)
    scn.make_scenario(s, **ARGS)
    (first,) = store.glob("*.pkl")
    monkeypatch.setattr(cache, "SCENARIO_CACHE_BYTES", first.stat().st_size + 1)
    import os
    os.utime(first, (1, 1))                                     # the oldest
    scn.make_scenario(s, **{**ARGS, "tbs_per_gpu": 3})
    left = list(store.glob("*.pkl"))
    assert len(left) == 1 and left[0] != first
    monkeypatch.setattr(cache, "SCENARIO_MAX_ENTRY_BYTES", 10)   # too large to keep: not stored
    scn.make_scenario(s, **{**ARGS, "tbs_per_gpu": 4})
    assert list(store.glob("*.pkl")) == left
    assert not list(store.glob(".tmp-*"))                       # the partial file written is removed


def _entries(d):
    """(scenario entries, command records) of a store directory."""
    import pickle
    sc, rec = [], []
    for e in sorted(d.glob("*.pkl")):
        with open(e, "rb") as f:
            obj = pickle.load(f)["scenario"]
        (rec if isinstance(obj, dict) and "record_format" in obj else sc).append(e)
    return sc, rec


def test_command_line_uses_the_store(tmp_path, monkeypatch, capsys):
    from nuna_jax.cli import main
    monkeypatch.setenv("NUNA_JAX_CACHE_DIR", str(tmp_path))
    argv = ["place", "--gpus", "2", "--collective", "allgather", "--size", "256KiB", "--policy", "ua", "--tbs", "2"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    sc, rec = _entries(tmp_path / "scenarios")
    assert len(sc) == 1 and len(rec) == 1 and (tmp_path / "xla").is_dir()
    monkeypatch.setattr(scn, "_make_scenario", lambda *a, **k: (_ for _ in ()).throw(AssertionError("rebuilt")))
    assert main(argv) == 0                      # the command's record
    assert capsys.readouterr().out == first
    rec[0].unlink()
    assert main(argv) == 0                      # no record: the stored scenario, not a build
    assert capsys.readouterr().out == first
    assert len(_entries(tmp_path / "scenarios")[1]) == 1   # and the record is back


def test_record_key_covers_the_arguments_and_files(tmp_path, monkeypatch):
    """cli.replay: every argument but --json, a named file's bytes (not its path) and 64-bit
    floats are in a command record's key; the store's off switch turns records off."""
    import argparse
    from nuna_jax.cli import replay
    monkeypatch.setenv("NUNA_JAX_CACHE_DIR", str(tmp_path))
    cache.use_scenarios(True)
    try:
        base = dict(command="place", system="table2", gpus=8, collective="allgather", plan=None, size="1MB",
                    policy="nap+nar", tbs=None, nar_granularity=None, algorithm="direct", placement=None,
                    plot=None, max_work=1.0, json=False)
        key = lambda **kw: replay.record_key("place", argparse.Namespace(**{**base, **kw}))  # noqa: E731
        k0 = key()
        assert key() == k0 and key(json=True) == k0
        # no key (no replay) for a named input that is not a regular file: the command refuses it
        # itself, and hashing /dev/zero would never end
        assert key(plan="/dev/zero") is None and key(placement=str(tmp_path)) is None
        assert key(plan=str(tmp_path / "missing.xml")) is None
        for change in (dict(gpus=4), dict(gpus=None), dict(size="1MiB"), dict(policy="ua"), dict(tbs="best"),
                       dict(tbs=7), dict(nar_granularity=4), dict(algorithm="ring"), dict(max_work=0.5),
                       dict(max_work=float(np.nextafter(1.0, 2.0))), dict(collective="allreduce"),
                       dict(plot="x.png"), dict(unknown_new_option=1)):
            assert key(**change) != k0, change
        assert replay.record_key("estimate", argparse.Namespace(**base)) != k0
        a, b = tmp_path / "a.toml", tmp_path / "b.toml"
        a.write_text('base = "table2"\n')
        b.write_text('base = "table2"\n')
        ka = key(system=str(a))
        assert ka != k0 and key(system=str(b)) != ka          # the path is an argument too
        b.write_text('base = "table2"\nhbm_latency_ns = 101.0\n')
        kb = key(system=str(b))
        a.write_text(b.read_text())
        assert key(system=str(a)) not in (ka, kb)              # same path, other bytes: a new key
        import sys

        import jax
        was = jax.config.jax_enable_x64
        jax.config.update("jax_enable_x64", not was)        # jax imported: its config decides
        try:
            assert key() != k0
        finally:
            jax.config.update("jax_enable_x64", was)
        assert key() == k0
        monkeypatch.delitem(sys.modules, "jax")              # not imported (a store hit): the variable
        monkeypatch.setenv("JAX_ENABLE_X64", "0" if was else "1")
        assert key() != k0
        monkeypatch.setenv("JAX_ENABLE_X64", "1" if was else "0")
        assert key() == k0
        monkeypatch.setitem(sys.modules, "jax", jax)
        monkeypatch.delenv("JAX_ENABLE_X64")
        with pytest.raises(TypeError, match="not a plain value"):
            replay.store_record(k0, {"out": {"system": preset("table2")}})
        monkeypatch.setenv("NUNA_JAX_CACHE_DIR", "")
        assert key() is None and replay.load_record(None) is None and not replay.store_record(None, {})
    finally:
        cache.use_scenarios(False)
