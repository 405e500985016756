"""MSCCL XML import: our small files, the real msccl-scheduler files, and errors."""

from pathlib import Path

import numpy as np
import pytest

from nuna_jax.msccl import load_msccl, msccl_gpus, parse_msccl

DATA = Path(__file__).parent / "data"
REAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "msccl"


def real(name):
    f = REAL / name
    if not f.is_file():
        pytest.skip(f"{f} absent (shared MSCCL data not available)")
    return f


def test_two_gpu_allgather_file():
    p = load_msccl(DATA / "ag2_direct.xml", 2 * 4096)
    assert p.n_gpus == 2 and p.n_tbs == 2  # receive-only threadblocks carry no traffic
    assert list(p.src_gpu) == [0, 1] and list(p.dst_gpu) == [1, 0]
    assert list(p.nbytes) == [4096, 4096]
    assert list(p.dst_off) == [0, 4096]  # GPU 0's chunk lands in GPU 1's output slot 0, and vice versa
    assert p.buffer_bytes == (4096, 8192, 0)


def test_three_gpu_ring_file_phases_and_forwarding():
    p = load_msccl(DATA / "ag3_ring.xml", 3 * 1024)
    # per GPU: s (own chunk, phase 0) then rcs (forward the received chunk, phase 1)
    assert p.total_bytes == 6 * 1024
    assert list(p.phase) == [0, 1, 0, 1, 0, 1]
    g0 = p.src_gpu == 0
    assert list(p.src_buf[g0]) == [0, 1]          # i, then o (the copy received by rcs)
    assert list(p.src_off[g0]) == [0, 2 * 1024]   # forwards chunk of GPU 2 from o[2]
    assert list(p.dst_off[g0]) == [0, 2 * 1024]
    assert msccl_gpus(DATA / "ag3_ring.xml") == 3


def test_real_allgather_1m():
    f = real("ndv4_ag-1m.xml")
    p = load_msccl(f, 2**20)
    # 8 GPUs, 32 chunks per loop: each GPU owns 4 chunks and sends them to 7 peers
    assert p.n_gpus == 8
    assert p.total_bytes == 8 * 7 * 4 * (2**20 // 32)
    assert np.all(p.phase == 0)
    assert p.n_tbs == 8 * 28  # 28 sending threadblocks per GPU in the file


def test_real_alltoall_and_hierarchical():
    p = load_msccl(real("ndv4_a2a2ll.xml"), 16 * 4096)
    assert p.total_bytes == 8 * 7 * 2 * 4096  # 2 chunks to each of 7 peers
    h = load_msccl(real("ncv4_ag_hier_4_LL.xml"), 16 * 4096)
    # 4 GPUs x 12 received chunks each
    assert h.total_bytes == 4 * 12 * 4096
    assert set(h.phase) == {0, 1}


def test_malformed_xml_names_the_line():
    with pytest.raises(ValueError, match=r"line 5.*mismatched tag"):
        load_msccl(DATA / "bad_unclosed.xml", 4096)


def test_dtd_and_entities_rejected():
    with pytest.raises(ValueError, match="DTD"):
        load_msccl(DATA / "bad_entity.xml", 4096)


def test_unmatched_send_is_reported():
    with pytest.raises(ValueError, match="sends 1 time.*receives 0"):
        load_msccl(DATA / "bad_unmatched.xml", 4096)


@pytest.mark.parametrize("xml,msg", [
    ('<algo ngpus="2" nchunksperloop="2"><gpu id="0"><tb id="0" send="1"><step s="0" type="s" '
     'srcbuf="i" dstbuf="o" dstoff="0"/></tb></gpu></algo>', r"line 1: <step> lacks attribute 'srcoff'"),
    ('<algo ngpus="2" nchunksperloop="2">\n<gpu id="0">\n<tb id="0" send="1">\n<step s="0" type="zz" '
     'srcbuf="i" srcoff="0" dstbuf="o" dstoff="0"/></tb></gpu></algo>', r"line 4: <step> type='zz'"),
    ('<algo ngpus="two" nchunksperloop="2"/>', r"ngpus='two' is not an integer"),
    ('<plan/>', "root element must be <algo>"),
    ('<algo ngpus="2" nchunksperloop="2">\n<gpu id="0">\n<chunk/></gpu></algo>', r"line 3: expected <tb>"),
])
def test_bad_elements(xml, msg):
    with pytest.raises(ValueError, match=msg):
        parse_msccl(xml, 4096)


def test_a_size_the_chunks_do_not_divide_is_padded_to_whole_element_chunks():
    # 2 chunks per loop of 2-byte elements: 4098 B -> chunks of ceil(4098 / 4) = 1025 elements = 2050 B
    for size, pad in ((4098, 2), (4097, 3), (4100, 0)):
        p = load_msccl(DATA / "ag2_direct.xml", size)
        assert p.size_bytes == size and p.pad_bytes == pad and p.padded_size_bytes == 4100
        assert list(p.nbytes) == [2050, 2050] and list(p.dst_off) == [0, 2050]
        assert p.buffer_bytes == (2050, 4100, 0)
    # 3-rank ring, 3 chunks per loop: 1 MB needs ceil(1e6 / 6) = 166,667 elements per chunk
    r = load_msccl(DATA / "ag3_ring.xml", 10**6)
    assert r.pad_bytes == 3 * 2 * 166_667 - 10**6 == 2
    assert set(r.nbytes.tolist()) == {2 * 166_667}
    # the padded plan is the plan of the padded size, step for step
    q = load_msccl(DATA / "ag3_ring.xml", 10**6 + 2)
    assert q.pad_bytes == 0
    for k in ("step_tb", "src_off", "dst_off", "nbytes", "phase", "src_chunk", "dst_chunk", "n_chunks"):
        np.testing.assert_array_equal(getattr(r, k), getattr(q, k), err_msg=k)
    assert r.buffer_bytes == q.buffer_bytes


@pytest.mark.parametrize("name", ["ndv4_ag-1m.xml", "ndv4_a2a2ll.xml", "ncv4_ag_hier_4_LL.xml"])
def test_real_plans_take_sizes_their_chunks_do_not_divide(name):
    f = real(name)
    p = load_msccl(f, 10**6 + 2)          # 1 MB + one element: no chunk count of these files divides it
    assert p.pad_bytes > 0 and p.padded_size_bytes % (p.elem_bytes * 16) == 0
    assert p.pad_bytes < p.elem_bytes * 32   # less than one element per chunk (at most 32 chunks per loop)
    assert np.all(p.nbytes % p.elem_bytes == 0)


def test_missing_plan_file_is_named():
    with pytest.raises(ValueError, match="does not exist"):
        load_msccl(DATA / "nope.xml", 4096)


# ---- bounded work and one parse per file (issue 11)
def test_huge_ngpus_is_refused_fast_with_a_short_message():
    import time
    t0 = time.process_time()
    with pytest.raises(ValueError) as e:
        parse_msccl('<algo ngpus="1000000000" nchunksperloop="1"><gpu id="0"/></algo>', 1000)
    assert time.process_time() - t0 < 1.0           # no set of 10^9 ids
    msg = str(e.value)
    assert len(msg) < 200 and "999999999 in all" in msg  # ids 1 .. 10^9 - 1 missing, 10 named


@pytest.mark.parametrize("attr", ['ngpus="1099511627777"', 'ngpus="99999999999999999999999999999999999999999999"'])
def test_integer_attributes_are_range_checked(attr):
    with pytest.raises(ValueError, match="ngpus"):
        parse_msccl(f'<algo {attr} nchunksperloop="1"/>', 1000)


def test_buffers_too_large_to_address_are_refused():
    xml = ('<algo ngpus="2" nchunksperloop="1"><gpu id="0" o_chunks="1000000000000"/>'
           '<gpu id="1"/></algo>')
    with pytest.raises(ValueError, match="o_chunks"):
        parse_msccl(xml, 2**30)  # 10^12 chunks of 1 GiB > 2^60 bytes


@pytest.mark.parametrize("xml,msg", [
    ('<!DOCTYPE algo [<!ENTITY a "x">]><algo name="&a;"/>', "not allowed"),
    ('<!DOCTYPE algo SYSTEM "http://example.invalid/a.dtd"><algo/>', "not allowed"),
    ("<algo", "malformed XML at line 1"),
    ("", "malformed XML"),
])
def test_hostile_xml_is_refused_by_the_hardened_parser(xml, msg):
    with pytest.raises(ValueError, match=msg):
        parse_msccl(xml, 1000)


def test_the_cli_parses_a_plan_file_once(monkeypatch, capsys):
    import nuna_jax.msccl as M
    from nuna_jax.cli import main
    calls = []
    real = M.parse_msccl
    monkeypatch.setattr(M, "parse_msccl", lambda *a, **k: calls.append(1) or real(*a, **k))
    M._CACHE.clear()
    assert main(["place", "--plan", str(DATA / "ag3_ring.xml"), "--size", "3kB", "--json"]) == 0
    assert len(calls) == 1
    assert msccl_gpus(DATA / "ag3_ring.xml") == 3 and len(calls) == 1  # header only, no full parse


def test_load_msccl_checks_the_file_size_before_reading(tmp_path, monkeypatch):
    """A library call refuses a file over the file_bytes limit without reading it (WorkLimitError)."""
    from pathlib import Path as _P

    from nuna_jax.limits import Limits, WorkLimitError
    from nuna_jax.msccl import load_msccl
    big = tmp_path / "big.xml"
    with open(big, "wb") as f:
        f.truncate((1 << 24) + 1)           # 16 MiB + 1 B, sparse
    read = []
    monkeypatch.setattr(_P, "read_bytes", lambda self: read.append(self) or b"")
    with pytest.raises(WorkLimitError, match="file bytes"):
        load_msccl(big, 1 << 20)
    with pytest.raises(WorkLimitError, match="file bytes"):
        load_msccl(big, 1 << 20, limits=Limits(0.5))
    assert read == []
