"""Plans: generators (direct, ring) and their invariants (NUNA sections 4.2, 5.1)."""

import numpy as np
import pytest

from nuna_jax.plans import COLLECTIVES, make_plan, split_elems

# Inter-GPU bytes of the whole pod, by hand (size = per-GPU buffer, n GPUs):
# every direct / ring variant moves (n-1) * size, except two-shot / ring
# All-Reduce (2 (n-1) size) and store-and-forward ring All-to-All
# (sum over rounds r of (n-1-r) blocks per GPU = n(n-1)/2 blocks of size/n per GPU).
def expected_bytes(coll, alg, n, size):
    if coll == "allreduce":
        return 2 * (n - 1) * size
    if coll == "alltoall" and alg == "ring":
        return n * (n - 1) // 2 * size  # n GPUs x n(n-1)/2 blocks x size/n (exact when n | size/elem)
    return (n - 1) * size


@pytest.mark.parametrize("coll", COLLECTIVES)
@pytest.mark.parametrize("alg", ["direct", "ring"])
@pytest.mark.parametrize("n,tbs", [(2, 1), (3, 5), (8, None), (8, 3), (5, 40)])
def test_byte_conservation(coll, alg, n, tbs):
    size = 2 * n * 3000  # whole elements, divisible by n
    p = make_plan(coll, n, size, algorithm=alg, tbs_per_gpu=tbs)
    assert p.total_bytes == expected_bytes(coll, alg, n, size)
    assert np.all(p.src_gpu != p.dst_gpu)
    # every GPU sends the same amount in these symmetric algorithms
    per_gpu = np.bincount(p.src_gpu, weights=p.nbytes, minlength=n)
    assert np.allclose(per_gpu, per_gpu[0])


def test_uneven_sizes_still_conserve_bytes():
    # 1 MB over 3 GPUs: 500000 bf16 elements -> shards 166667, 166667, 166666 elements
    p = make_plan("allgather", 3, 10**6, tbs_per_gpu=4)
    assert p.total_bytes == 2 * 10**6
    assert list(split_elems(500000, 3)) == [166667, 166667, 166666]


def test_direct_allgather_structure_8gpus():
    p = make_plan("allgather", 8, 10**6)  # default 7 threadblocks, one per peer
    assert p.n_tbs == 56 and p.n_steps == 56
    assert np.all(p.phase == 0)
    assert np.all(p.nbytes == 125000)
    # GPU g's threadblock j writes to peer (g + 1 + j) mod 8, at output slot g
    rows = p.src_gpu == 3
    assert sorted(p.dst_gpu[rows]) == [0, 1, 2, 4, 5, 6, 7]
    assert np.all(p.dst_off[rows] == 3 * 125000)
    assert p.dst_gpu[p.steps_of(3 * 7)[0]] == 4  # GPU 3's first threadblock -> GPU 4


def test_1008_threadblocks_split_each_peer_over_144():
    p = make_plan("allgather", 8, 10**6, tbs_per_gpu=1008)
    assert p.n_tbs == 8 * 1008
    assert np.bincount(p.step_tb, minlength=p.n_tbs).max() == 1
    # 125000 B = 62500 elements over 144 pieces: 62500 = 144*434 + 4 -> 868 or 870 bytes
    assert set(np.unique(p.nbytes)) == {868, 870}
    assert p.total_bytes == 7 * 10**6


def test_fewer_threadblocks_than_peers_take_several_steps():
    p = make_plan("alltoall", 8, 8 * 1000, tbs_per_gpu=3)
    steps = np.bincount(p.step_tb, minlength=p.n_tbs)
    assert list(steps[:3]) == [3, 2, 2]  # peers 0,3,6 / 1,4 / 2,5 of GPU 0


def test_ring_and_two_shot_phases():
    n = 4
    ar = make_plan("allreduce", n, 4 * 1024)
    assert set(ar.phase) == {0, 1}
    ring = make_plan("allreduce", n, 4 * 1024, algorithm="ring", tbs_per_gpu=1)
    assert sorted(set(ring.phase)) == list(range(2 * (n - 1)))
    assert np.all(ring.dst_gpu == (ring.src_gpu + 1) % n)


def test_errors():
    with pytest.raises(ValueError, match="unknown collective"):
        make_plan("broadcast", 8, 1000)
    with pytest.raises(ValueError, match="n_gpus"):
        make_plan("allgather", 1, 1000)
    with pytest.raises(ValueError, match="tbs_per_gpu"):
        make_plan("allgather", 4, 1000, tbs_per_gpu=0)
    with pytest.raises(ValueError, match="algorithm"):
        make_plan("allgather", 4, 1000, algorithm="tree")


def test_chunk_tuples_name_gpu_and_buffer():
    p = make_plan("allgather", 2, 4096, tbs_per_gpu=1)
    assert p.chunk_tuples(0) == [(0, "i", 0), (0, "o", 1)]


# ---- any size with any plan: padding to whole elements
_ARRAYS = ("tb_gpu", "tb_local", "step_tb", "step_idx", "src_gpu", "src_buf", "src_off", "dst_gpu", "dst_buf",
           "dst_off", "nbytes", "phase", "src_chunk", "dst_chunk", "n_chunks")


@pytest.mark.parametrize("coll", ["allgather", "reducescatter", "allreduce", "alltoall"])
@pytest.mark.parametrize("alg", ["direct", "ring"])
def test_a_size_of_part_elements_is_padded_to_the_next_whole_element(coll, alg):
    # 1001 B of 2-byte elements: 501 elements (1002 B) are moved, 1 B of padding is reported
    p = make_plan(coll, 4, 1001, algorithm=alg, tbs_per_gpu=3, slot_align_bytes=64)
    q = make_plan(coll, 4, 1002, algorithm=alg, tbs_per_gpu=3, slot_align_bytes=64)
    assert p.size_bytes == 1001 and p.pad_bytes == 1 and p.padded_size_bytes == 1002
    assert q.pad_bytes == 0 and q.padded_size_bytes == 1002
    for k in _ARRAYS:
        np.testing.assert_array_equal(getattr(p, k), getattr(q, k), err_msg=k)
    assert p.buffer_bytes == q.buffer_bytes
    assert np.all(p.nbytes % 2 == 0)                                  # whole elements in every step
    assert p.describe()["pad_bytes"] == 1 and p.describe()["size_bytes"] == 1001


def test_padded_allgather_moves_the_padded_shards_by_hand():
    # 8 GPUs, 1001 B -> 501 elements: shards of 63 x5 and 62 x3 elements (split_elems); direct All-Gather
    # sends each shard to 7 peers: 7 * 1002 B in all
    p = make_plan("allgather", 8, 1001)
    assert p.total_bytes == 7 * 1002
    assert sorted(set(p.nbytes.tolist())) == [124, 126]
    one_byte = make_plan("allgather", 2, 1, tbs_per_gpu=1)           # 1 B: one element from GPU 0 only
    assert one_byte.pad_bytes == 1 and one_byte.total_bytes == 2 and list(one_byte.src_gpu) == [0]
