"""Algorithm 1's greedy loop (NUNA section 4.2), compiled.

:func:`placement.algorithm1` walks every threadblock of every group and every
chunk it serves, one after another: a greedy that cannot be vectorised, and
at 64 GPUs the most expensive part of building a NAP scenario in plain Python
(a million :meth:`placement.PageMap.place` calls for a 100 MB All-Reduce).
This module is the same loop over flat arrays, written in the subset of
Python that numba compiles (without numba it runs as plain Python: the same
code and the same answer, only slower).  :func:`placement.algorithm1` keeps the
readable object version as the reference (``engine="python"``), and the two
must agree exactly (tests/test_algorithm1_kernel.py).

Arrays (all int64 but the page maps):

* ``rem_cu[G, C]``: each CU's outstanding-request budget left (line 9);
* ``ptr[G, D]``: first CU, in domain ``d``'s order, that may still have room;
* ``rem_st[G, St]``: each HBM stack's bandwidth-delay budget left, bytes
  (lines 16-18), refilled window by window (:class:`placement.PageMap`);
* ``ps``, ``pd`` ``[G, pages]`` (int16): each page's stack and NAR domain, -1
  while unplaced.

Returns -1 when every threadblock was placed, else the threadblock that did
not fit (the caller raises the error).
"""

from __future__ import annotations

import numpy as np

from .numba_jit import HAVE_NUMBA, jit as _jit  # numba if installed (NUNA_JAX_NO_NUMBA=1: plain Python)

__all__ = ["HAVE_NUMBA", "run_algorithm1", "BUDGET_SERVED", "BUDGET_PAGES", "PAGES_EXHAUSTED"]

BUDGET_SERVED, BUDGET_PAGES = 0, 1
PAGES_EXHAUSTED = -2        # return code: the fixed page budget ran out (cannot happen, see PageMap)


@_jit
def _refill(rem_st, windows, gpu, order, need, window):
    """Open as many windows as it takes for one stack of ``order`` to fit ``need`` bytes."""
    k = -1
    for i in range(order.shape[0]):
        short = need - rem_st[gpu, order[i]]
        c = -((-short) // window)          # ceil(short / window)
        if k < 0 or c < k:
            k = c
    if k < 1:
        k = 1
    for j in range(rem_st.shape[1]):
        rem_st[gpu, j] += k * window
    windows[gpu] += k


@_jit
def _one(rem_st, windows, ps, pd, gpu, page, nbytes, order, domain, window, budget):
    """Put one page on the first stack of ``order`` whose budget fits ``nbytes`` (refill if none)."""
    for attempt in range(2):
        for i in range(order.shape[0]):
            st = order[i]
            if rem_st[gpu, st] >= nbytes:
                ps[gpu, page] = st
                pd[gpu, page] = domain
                rem_st[gpu, st] -= nbytes
                return 0
        if budget == BUDGET_PAGES:
            return PAGES_EXHAUSTED
        _refill(rem_st, windows, gpu, order, nbytes, window)
    return PAGES_EXHAUSTED


@_jit
def _full(rem_st, windows, ps, pd, gpu, pages, order, domain, page_bytes, window, budget):
    """Place whole ``pages`` first fit in ``order`` (each charged ``page_bytes``), window by window."""
    at = 0
    n = pages.shape[0]
    while at < n:
        for i in range(order.shape[0]):
            if at >= n:
                break
            st = order[i]
            take = rem_st[gpu, st] // page_bytes
            while take > 0 and at < n:
                ps[gpu, pages[at]] = st
                pd[gpu, pages[at]] = domain
                rem_st[gpu, st] -= page_bytes
                take -= 1
                at += 1
        if at < n:
            if budget == BUDGET_PAGES:
                return PAGES_EXHAUSTED
            _refill(rem_st, windows, gpu, order, page_bytes, window)
    return 0


@_jit
def _serve(rem_st, windows, ps, pd, gpu, addr, nbytes, order, domain, page_bytes, window, budget):
    """Serve the chunk ``[addr, addr + nbytes)`` of ``gpu`` (:meth:`placement.PageMap.place`)."""
    P = page_bytes
    p0 = addr // P
    p1 = (addr + nbytes - 1) // P
    if budget == BUDGET_PAGES:   # a page is charged once, when it is placed
        free = np.empty(p1 - p0 + 1, np.int64)
        m = 0
        for p in range(p0, p1 + 1):
            if ps[gpu, p] < 0:
                free[m] = p
                m += 1
        if m:
            return _full(rem_st, windows, ps, pd, gpu, free[:m], order, domain, P, window, budget)
        return 0
    if p0 == p1:
        st = ps[gpu, p0]
        if st >= 0:
            rem_st[gpu, st] -= nbytes
            return 0
        return _one(rem_st, windows, ps, pd, gpu, p0, nbytes, order, domain, window, budget)
    npg = p1 - p0 + 1
    first_share = P * (p0 + 1) - addr
    last_share = addr + nbytes - P * p1
    # the stacks already holding some of the chunk are charged first
    n_free = 0
    first_free, last_free = -1, -1
    for j in range(npg):
        st = ps[gpu, p0 + j]
        if st >= 0:
            share = first_share if j == 0 else (last_share if j == npg - 1 else P)
            rem_st[gpu, st] -= share
        else:
            if first_free < 0:
                first_free = j
            last_free = j
            n_free += 1
    if n_free == 0:
        return 0
    head = first_free == 0 and first_share < P
    tail = last_free == npg - 1 and last_share < P and n_free > (1 if head else 0)
    if head:
        rc = _one(rem_st, windows, ps, pd, gpu, p0, first_share, order, domain, window, budget)
        if rc:
            return rc
    n_mid = n_free - (1 if head else 0) - (1 if tail else 0)
    if n_mid > 0:
        mid = np.empty(n_mid, np.int64)
        m = 0
        lo = 1 if head else 0
        hi = npg - 1 if tail else npg
        for j in range(lo, hi):
            if ps[gpu, p0 + j] < 0:
                mid[m] = p0 + j
                m += 1
        rc = _full(rem_st, windows, ps, pd, gpu, mid[:m], order, domain, P, window, budget)
        if rc:
            return rc
    if tail:
        return _one(rem_st, windows, ps, pd, gpu, p1, last_share, order, domain, window, budget)
    return 0


@_jit
def run_algorithm1(group_tbs, group_start, cu_order, stack_order, st_by_router, cu_router, tb_gpu, demand,
                   bounds, nbytes, saddr, daddr, dst_gpu, rem_cu, ptr, tb_cu, tb_dom, group_domain,
                   place_memory, rem_st, windows, ps, pd, page_bytes, window, budget):
    """Algorithm 1's loop (see :func:`placement.algorithm1`): groups ``group_tbs[group_start[i]:
    group_start[i + 1]]`` in order, domain ``nar = (nar + 1) mod nar_max`` per group, each
    threadblock on the first CU (from ``ptr``) in the domain's order with room for its demand, its
    chunks' pages served source then destination.  Fills the output arrays in place; returns -1, the
    threadblock that did not fit, or :data:`PAGES_EXHAUSTED`."""
    nar_max = cu_order.shape[0]
    n_cus = cu_order.shape[1]
    nar = 0
    for gi in range(group_start.shape[0] - 1):
        nar = (nar + 1) % nar_max
        group_domain[gi] = nar
        order = cu_order[nar]
        for j in range(group_start[gi], group_start[gi + 1]):
            tb = group_tbs[j]
            g = tb_gpu[tb]
            q = demand[tb]
            k = -1
            for i in range(ptr[g, nar], n_cus):
                if rem_cu[g, order[i]] >= q:
                    k = i
                    break
            if k < 0:
                return tb
            cu = order[k]
            tb_cu[tb] = cu
            tb_dom[tb] = nar
            rem_cu[g, cu] -= q
            while ptr[g, nar] < n_cus and rem_cu[g, order[ptr[g, nar]]] <= 0:
                ptr[g, nar] += 1
            if place_memory:
                local = st_by_router[cu_router[cu]]
                for r in range(bounds[tb], bounds[tb + 1]):
                    nb = nbytes[r]
                    rc = _serve(rem_st, windows, ps, pd, g, saddr[r], nb, local, nar, page_bytes, window, budget)
                    if rc:
                        return rc
                    rc = _serve(rem_st, windows, ps, pd, dst_gpu[r], daddr[r], nb, stack_order[nar], nar,
                                page_bytes, window, budget)
                    if rc:
                        return rc
    return -1


@_jit
def logical_groups(key_id, bounds, n_keys, out_group):
    """``logical_allocation``'s loop (see :func:`placement.logical_allocation`) over dense chunk ids:
    threadblock ``tb`` touches chunks ``key_id[bounds[tb]:bounds[tb + 1]]``; it joins the group
    owning most of its distinct chunks (ties: the group created first), or founds a new one, and
    its unowned chunks join that group.  ``out_group[tb]``: the group (-1: no steps).  Returns the
    number of groups."""
    n_tbs = bounds.shape[0] - 1
    owner = np.full(n_keys, -1, np.int64)
    seen = np.full(n_keys, -1, np.int64)       # last threadblock that counted the chunk
    cnt = np.zeros(n_tbs + 1, np.int64)        # chunks of this threadblock per group (scratch)
    width = 1
    for tb in range(n_tbs):
        width = max(width, bounds[tb + 1] - bounds[tb])
    touched = np.empty(width, np.int64)
    n_groups = 0
    for tb in range(n_tbs):
        lo, hi = bounds[tb], bounds[tb + 1]
        if lo == hi:
            out_group[tb] = -1
            continue
        nt = 0
        for e in range(lo, hi):
            c = key_id[e]
            if seen[c] == tb:
                continue
            seen[c] = tb
            g = owner[c]
            if g >= 0:
                if cnt[g] == 0:
                    touched[nt] = g
                    nt += 1
                cnt[g] += 1
        best, best_n = -1, 0
        for i in range(nt):
            g = touched[i]
            if cnt[g] > best_n or (cnt[g] == best_n and g < best):
                best, best_n = g, cnt[g]
            cnt[g] = 0
        if best < 0:
            best = n_groups
            n_groups += 1
        out_group[tb] = best
        for e in range(lo, hi):
            c = key_id[e]
            if owner[c] < 0:
                owner[c] = best
    return n_groups


@_jit
def ua_dispatch(order, tb_gpu, demand, has_steps, rem, ptr, tb_cu):
    """UA's threadblock dispatch (see :func:`placement._place_ua`): threadblocks with steps in id
    order, each on the first CU from its GPU's pointer, cyclically in ``order``, whose budget
    ``rem[g, cu]`` fits its demand; the pointer moves past that CU.  Returns -1, or the
    threadblock that did not fit."""
    n_cus = order.shape[0]
    for tb in range(tb_gpu.shape[0]):
        if not has_steps[tb]:
            continue
        g, q = tb_gpu[tb], demand[tb]
        k = -1
        for i in range(n_cus):
            if rem[g, order[(ptr[g] + i) % n_cus]] >= q:
                k = i
                break
        if k < 0:
            return tb
        cu = order[(ptr[g] + k) % n_cus]
        tb_cu[tb] = cu
        rem[g, cu] -= q
        ptr[g] = (ptr[g] + k + 1) % n_cus
    return -1


@_jit
def first_fit_each(tbs, tb_order, orders, tb_gpu, demand, rem, tb_cu):
    """NUMA's threadblock dispatch (see :func:`placement._place_numa`): threadblocks ``tbs`` in
    order, each on the first CU of its CU order ``orders[tb_order[tb]]`` whose budget
    ``rem[g, cu]`` fits its demand.  Returns -1, or the threadblock that did not fit."""
    n_cus = orders.shape[1]
    for j in range(tbs.shape[0]):
        tb = tbs[j]
        g, q = tb_gpu[tb], demand[tb]
        order = orders[tb_order[tb]]
        k = -1
        for i in range(n_cus):
            if rem[g, order[i]] >= q:
                k = i
                break
        if k < 0:
            return tb
        tb_cu[tb] = order[k]
        rem[g, order[k]] -= q
    return -1
