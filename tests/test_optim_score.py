"""The score-function descent (nuna_jax.optim.score): roles tie the same variable of every GPU, and
the estimator's expectation is the exact gradient of the expected estimate.

References: roles written by hand; the gradient of ``E_p[f]`` by central differences of the
expectation enumerated over every point of a tiny space (no sampling)."""

import itertools
import types

import numpy as np
import pytest

from nuna_jax.optim.score import roles, score_gradient, score_probs, score_sample


def _space(var_n, grp_gpu, grp_key=None):
    var_n = np.asarray(var_n, np.int64)
    return types.SimpleNamespace(var_n=var_n, n_vars=len(var_n), grp_gpu=np.asarray(grp_gpu, np.int64),
                                 grp_key=None if grp_key is None else np.asarray(grp_key, np.int64))


def test_roles_rank_within_each_gpu():
    # 2 GPUs x 3 threadblocks; page groups: GPU 0 has 2, GPU 1 has 3 (asymmetric)
    sp = _space([3] * 6 + [2] * 5, [0, 1, 1, 0, 1])
    cls = roles(sp, np.array([0, 0, 0, 1, 1, 1]))
    np.testing.assert_array_equal(cls, [0, 1, 2, 0, 1, 2, 3, 3, 4, 4, 5])


def test_roles_by_first_toucher_tie_the_same_peer_not_the_same_address():
    # 2 GPUs x 2 threadblocks (0, 1 on GPU 0; 2, 3 on GPU 1). GPU 0's groups, in address order, are
    # first touched by threadblocks 0, 0, 3 (its own rank-0 threadblock twice, then GPU 1's rank-1
    # one); GPU 1's by 1, 2, 2 (GPU 0's rank-1 threadblock, then its own rank-0 one twice).
    sp = _space([2] * 10, [0, 0, 0, 1, 1, 1], [0, 0, 3, 1, 2, 2])
    tb_gpu = np.array([0, 0, 1, 1])
    # by hand: pairs (toucher's role, same GPU) -> (0, 1) twice and (1, 0) on each GPU; roles
    # 2 + index of (pair, rank within the pair) in sorted order: (0,1,0) 2, (0,1,1) 3, (1,0,0) 4
    np.testing.assert_array_equal(roles(sp, tb_gpu, "key"), [0, 1, 0, 1, 2, 3, 4, 4, 2, 3])
    # by address rank the first group of GPU 0 (own data) is tied to GPU 1's first (a peer's)
    np.testing.assert_array_equal(roles(sp, tb_gpu, "rank"), [0, 1, 0, 1, 2, 3, 4, 2, 3, 4])
    with pytest.raises(ValueError):
        roles(sp, tb_gpu, "address")


def _expect(sp, cls, z_own, z_tie, f):
    p = score_probs(sp, cls, z_own, z_tie)
    pts = list(itertools.product(*[range(n) for n in sp.var_n]))
    w = np.array([np.prod([p[v, x[v]] for v in range(sp.n_vars)]) for x in pts])
    return float(np.sum(w * np.array([f[x] for x in pts]))), pts, w


@pytest.mark.parametrize("baseline", [0.0, 7.5])
def test_score_gradient_is_the_exact_gradient_in_expectation(baseline):
    """Weighting every point of a 3 x 2 x 3 space by its probability, the estimator's mean equals the
    central-difference gradient of E[f] in every own and every tied logit, for any constant baseline."""
    sp = _space([3, 2, 3], [0])
    cls = np.array([0, 1, 0])            # variables 0 and 2 share a role
    rng = np.random.default_rng(0)
    z_own, z_tie = rng.normal(size=(3, 3)), rng.normal(size=(2, 3))
    f = rng.normal(size=(3, 2, 3)) * 10
    _, pts, w = _expect(sp, cls, z_own, z_tie, f)
    adv = len(pts) * w * (np.array([f[x] for x in pts]) - baseline)   # mean over pts of adv (...) = sum_x p(x) ...
    g_own, g_tie = score_gradient(sp, cls, z_own, z_tie, np.array(pts), adv)
    h = 1e-5
    for z, g in ((z_own, g_own), (z_tie, g_tie)):
        for i, k in itertools.product(range(z.shape[0]), range(z.shape[1])):
            if z is z_own and k >= sp.var_n[i]:
                assert g[i, k] == 0.0     # an option the variable lacks
                continue
            z[i, k] += h
            up = _expect(sp, cls, z_own, z_tie, f)[0]
            z[i, k] -= 2 * h
            dn = _expect(sp, cls, z_own, z_tie, f)[0]
            z[i, k] += h
            assert g[i, k] == pytest.approx((up - dn) / (2 * h), rel=1e-4, abs=1e-7), (i, k)
    assert np.abs(g_tie).max() > 1e-2       # not vacuous


def test_score_sample_follows_the_probabilities():
    sp = _space([3, 2], [0])
    cls = np.array([0, 0])
    z_own, z_tie = np.array([[2.0, 0.0, -1.0], [0.0, 1.0, 0.0]]), np.array([[0.5, 0.0, 0.0]])
    p = score_probs(sp, cls, z_own, z_tie)
    assert p[1, 2] == 0.0                   # variable 1 has 2 options
    xs = score_sample(sp, cls, z_own, z_tie, 20000, np.random.default_rng(1))
    for v in range(2):
        freq = np.bincount(xs[:, v], minlength=3) / len(xs)
        np.testing.assert_allclose(freq, p[v], atol=0.015)
