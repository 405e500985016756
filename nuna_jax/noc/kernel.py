"""The cycle loop of ``nuna-jax noc``: BookSim2's input-queued virtual-channel router (docs/noc.md).

One call advances every source and router of a k-ary n-mesh/torus from cycle ``c0`` to ``c1``
(or until the measured packets have drained).  All state lives in the int64 arrays that
:mod:`nuna_jax.noc.sim` allocates; the loop is compiled with numba when it is available and
runs as plain Python with ``NUNA_JAX_NO_NUMBA=1`` (same results for the same seed only within
one engine: the two draw random numbers from different generators).

Per cycle, in order: credits due this cycle return to their output VC (and, with
``wait_for_tail_credit``, free it once the tail's credits are all back); every source draws a
Bernoulli packet into its unbounded injection queue and puts at most one flit into a free
injection VC with a credit; every router then (1) routes a head flit at the front of an idle
input VC (dimension order), (2) allocates output VCs (one-iteration iSLIP: each free output VC
grants the requesting input VC after its round-robin pointer, each input VC accepts the granting
output VC after its own), (3) allocates the switch (one-iteration iSLIP over crossbar inputs
``input_port * input_speedup + vc % input_speedup`` and output ports, one flit per output per
cycle) among active VCs whose front flit has arrived and whose output VC has a credit, and
moves the winners: the flit lands in the downstream buffer (or the sink) ``sw_alloc_delay + 2``
cycles later and a credit goes back upstream, usable ``sw_alloc_delay + 1 + credit_delay``
cycles later.  A head that arrives at cycle a asks for a VC at ``a + routing_delay`` and for the
switch ``vc_alloc_delay`` cycles after the grant; body flits follow one per cycle.
"""

from __future__ import annotations


import numpy as np

from ..numba_jit import HAVE_NUMBA, jit as _jit, jit_inline as _jit_inline, jit_loop as _jit_loop  # noqa: F401  (numba if installed; docs/simulator.md, "Engines")

# indices into the integer parameter vector
(P_N, P_K, P_DIMS, P_PORTS, P_V, P_B, P_S, P_PS, P_RD, P_VAD, P_SAD, P_CD, P_WFTC, P_TORUS, P_QCAP,
 P_PCAP, P_WHEEL, P_SEED, P_UNIFORM) = range(19)
N_PARAMS = 19
# indices into the stats vector (float64)
(S_PKTS, S_PLAT, S_NLAT, S_HOPS, S_ACC_FLITS, S_FLIT_HOPS, S_OUTSTANDING, S_LAST_E, S_PLAT_MIN, S_PLAT_MAX,
 S_LIVE, S_CREATED) = range(12)
N_STATS = 12


DEBRUIJN_MUL = 0x07EDD5E59A4E28C2
DEBRUIJN = np.zeros(64, np.int64)   # bit index of a power of two (the lowest set bit of a VC mask)
for _b in range(64):
    DEBRUIJN[(((1 << _b) * DEBRUIJN_MUL) >> 58) & 63] = _b


@_jit
def seed_rng(seed):
    np.random.seed(seed)


#: per-router scratch rows of ``run_cycles``'s ``scr`` (allocated by the caller: the loop runs without
#: numba's runtime, so it allocates nothing): lengths P*V x 6, P*S*P x 5, P x 2, P*S x 2, P
(R_REQ, R_ACT, R_ACTP, R_ACTV, R_GRANT, R_GDIST, R_SREQ_VC, R_SREQ_D, R_SL_T, R_SL_X, R_SL_O, R_OGRANT, R_OGD,
 R_XACC, R_XD, R_VCNT) = range(16)
N_SCRATCH = 16


def scratch(P, V, S):
    """The scratch rows ``run_cycles`` needs for ``P`` ports, ``V`` VCs and input speedup ``S``."""
    return np.zeros((N_SCRATCH, max(P * V, P * S * P)), np.int64)


@_jit_inline
def _enqueue(j, B, p, fi, t, bpk, bfi, barr, bhead, bcnt):
    """Append flit ``fi`` of packet ``p`` (usable from cycle ``t``) to VC buffer ``j`` (a ring of ``B``
    slots); False when the buffer is full (a credit bug)."""
    if bcnt[j] >= B:
        return False
    pos = bhead[j] + bcnt[j]
    if pos >= B:
        pos -= B
    bpk[j * B + pos] = p
    bfi[j * B + pos] = fi
    barr[j * B + pos] = t
    bcnt[j] += 1
    return True


@_jit_loop
def run_cycles(c0, c1, mode, prate, prm, nbr, wrap, coord, dest_tab, st,
               pk_dst, pk_ct, pk_it, pk_hops, pk_rec, pk_dir, pk_ph, free_slots,
               sq, sq_head, sq_cnt, src_flit, src_vc, src_last, inj_cred, inj_own, inj_tail,
               bpk, bfi, barr, bhead, bcnt, nem, rfl,
               ist, irdy, ifree, iport, ivc, ilo, ihi,
               oown, ocred, otail,
               vgp, vap, sgp, sap, svp,
               wheel, wcnt, scr):
    """Advance cycles ``c0 .. c1 - 1``; ``mode`` 0 warm-up (every retired packet counts), 1 running
    (packets created now are measured), 2 drain (stop once the measured packets are out).  Returns
    (next cycle, status): status 0 ok, 1 a queue or the packet table overflowed (unstable), 2 a
    buffer overflow (a bug).  ``coord[r * n + d]``: router r's digit in dimension d; ``scr``:
    :func:`scratch`'s rows."""
    N = prm[P_N]; K = prm[P_K]; D = prm[P_DIMS]; P = prm[P_PORTS]; V = prm[P_V]; B = prm[P_B]
    S = prm[P_S]; PS = prm[P_PS]; RD = prm[P_RD]; VAD = prm[P_VAD]; SAD = prm[P_SAD]; CD = prm[P_CD]
    WFTC = prm[P_WFTC]; TORUS = prm[P_TORUS]; QCAP = prm[P_QCAP]; W = prm[P_WHEEL]; UNIF = prm[P_UNIFORM]
    EJ = P - 1
    PV = P * V
    PSX = P * S
    half = V // 2
    # per-router scratch (rows of scr)
    req_i = scr[R_REQ]
    act = scr[R_ACT]
    actp = scr[R_ACTP]
    actv = scr[R_ACTV]
    m = np.int64(0)
    grant = scr[R_GRANT]
    gdist = scr[R_GDIST]
    sreq_vc = scr[R_SREQ_VC]
    sreq_d = scr[R_SREQ_D]
    ogrant = scr[R_OGRANT]
    ogd = scr[R_OGD]
    xacc = scr[R_XACC]
    xd = scr[R_XD]
    vcnt = scr[R_VCNT]
    sl_t = scr[R_SL_T]
    sl_x = scr[R_SL_X]
    sl_o = scr[R_SL_O]
    for t in range(PSX * P):
        sreq_vc[t] = -1
    c = c0
    while c < c1:
        if mode == 2 and st[S_OUTSTANDING] <= 0:
            break
        # 1. credits due now
        slot = c & (W - 1)
        for e in range(wcnt[slot]):
            tgt = wheel[slot, e]
            if tgt >= 0:
                ocred[tgt] += 1
                if WFTC == 1 and otail[tgt] == 1 and ocred[tgt] == B:
                    otail[tgt] = 0
                    oown[tgt] = -1
            else:
                j = -tgt - 1
                inj_cred[j] += 1
                if WFTC == 1 and inj_tail[j] == 1 and inj_cred[j] == B:
                    inj_tail[j] = 0
                    inj_own[j] = 0
        wcnt[slot] = 0
        # 2. sources: generate, inject
        for s in range(N):
            if prate > 0.0 and np.random.random() < prate:
                if st[S_LIVE] >= free_slots.shape[0] or sq_cnt[s] >= QCAP:
                    return c, 1
                p = free_slots[np.int64(st[S_LIVE])]
                st[S_LIVE] += 1
                st[S_CREATED] += 1
                if UNIF == 1:
                    d = np.random.randint(0, N)
                else:
                    d = dest_tab[s]
                pk_dst[p] = d
                pk_ct[p] = c
                pk_it[p] = -1
                pk_hops[p] = 0
                pk_rec[p] = 1 if mode == 1 else 0
                if mode == 1:
                    st[S_OUTSTANDING] += 1
                dirs = 0
                if TORUS == 1:   # shortest direction per dimension, a random one on a tie
                    for dim in range(D):
                        x = coord[s * D + dim]
                        y = coord[d * D + dim]
                        dist2 = K - 2 * ((y - x + K) % K)
                        if not (dist2 > 0 or (dist2 == 0 and np.random.random() < 0.5)):
                            dirs |= 1 << dim
                pk_dir[p] = dirs
                pk_ph[p] = 0
                sq[s, (sq_head[s] + sq_cnt[s]) % QCAP] = p
                sq_cnt[s] += 1
            if sq_cnt[s] > 0:
                p = sq[s, sq_head[s]]
                fi = src_flit[s]
                if fi == 0 and src_vc[s] < 0:
                    for t in range(1, V + 1):
                        v = (src_last[s] + t) % V
                        if inj_own[s * V + v] == 0 and inj_cred[s * V + v] > 0:
                            src_vc[s] = v
                            inj_own[s * V + v] = 1
                            src_last[s] = v
                            break
                v = src_vc[s]
                if v >= 0 and inj_cred[s * V + v] > 0:
                    if not _enqueue((s * P + EJ) * V + v, B, p, fi, c + 2, bpk, bfi, barr, bhead, bcnt):
                        return c, 2
                    nem[s * P + EJ] |= np.int64(1) << v
                    rfl[s] += 1
                    inj_cred[s * V + v] -= 1
                    if fi == 0:
                        pk_it[p] = c
                    if fi == PS - 1:
                        sq_head[s] = (sq_head[s] + 1) % QCAP
                        sq_cnt[s] -= 1
                        src_flit[s] = 0
                        src_vc[s] = -1
                        if WFTC == 1:
                            inj_tail[s * V + v] = 1
                        else:
                            inj_own[s * V + v] = 0
                    else:
                        src_flit[s] = fi + 1
        # 3. routers
        for r in range(N):
            if rfl[r] == 0:
                continue
            base = r * PV
            # 3a. route idle VCs with a head at the front; collect VC-allocation requests
            nreq = 0
            nact = 0
            for inp in range(P):
                m = nem[r * P + inp]
                while m != 0:
                    low = m & (-m)
                    m ^= low
                    v = DEBRUIJN[((low * DEBRUIJN_MUL) >> 58) & 63]
                    li = inp * V + v
                    act[nact] = li
                    actp[nact] = inp
                    actv[nact] = v
                    nact += 1
            for t in range(nact):
                li = act[t]
                i = base + li
                if ist[i] == 0:
                    q = i * B + bhead[i]
                    p = bpk[q]
                    arr = barr[q]
                    rdy = arr if arr > ifree[i] else ifree[i]
                    irdy[i] = rdy + RD
                    d = pk_dst[p]
                    inp = actp[t]
                    o = EJ
                    for dim in range(D):
                        x = coord[r * D + dim]
                        y = coord[d * D + dim]
                        if x != y:
                            if TORUS == 1:
                                o = 2 * dim + ((pk_dir[p] >> dim) & 1)
                            else:
                                o = 2 * dim if y > x else 2 * dim + 1
                            break
                    iport[i] = o
                    if TORUS == 1 and o != EJ:
                        if inp == EJ or inp // 2 != o // 2:
                            pk_ph[p] = 0          # a new dimension: before its dateline
                        if pk_ph[p] == 1 or wrap[r * P + o] == 1:
                            ilo[i] = half
                            ihi[i] = V - 1
                        else:
                            ilo[i] = 0
                            ihi[i] = half - 1
                    else:
                        ilo[i] = 0
                        ihi[i] = V - 1
                    ist[i] = 1
                if ist[i] == 1 and irdy[i] <= c:
                    req_i[nreq] = li
                    nreq += 1
            # 3b. VC allocation (iSLIP, one iteration)
            if nreq > 0:
                for t in range(nreq):
                    vcnt[iport[base + req_i[t]]] = 0
                for t in range(nreq):
                    vcnt[iport[base + req_i[t]]] += 1
                for t in range(nreq):     # grant: each free output VC picks the requester after its pointer
                    li = req_i[t]
                    i = base + li
                    o = iport[i]
                    if vcnt[o] == 1:      # the only requester of its port: every free VC grants it
                        continue
                    for ov in range(ilo[i], ihi[i] + 1):
                        grant[o * V + ov] = -1
                        gdist[o * V + ov] = PV + 1
                for t in range(nreq):
                    li = req_i[t]
                    i = base + li
                    o = iport[i]
                    if vcnt[o] == 1:
                        continue
                    for ov in range(ilo[i], ihi[i] + 1):
                        oi = base + o * V + ov
                        if oown[oi] >= 0:
                            continue
                        dd = li - vgp[oi]
                        if dd < 0:
                            dd += PV
                        if dd < gdist[o * V + ov]:
                            gdist[o * V + ov] = dd
                            grant[o * V + ov] = li
                for t in range(nreq):     # accept: each input VC picks the granting VC after its pointer
                    li = req_i[t]
                    i = base + li
                    o = iport[i]
                    only = vcnt[o] == 1
                    best = -1
                    bd = PV + 1
                    for ov in range(ilo[i], ihi[i] + 1):
                        if (only and oown[base + o * V + ov] < 0) or (not only and grant[o * V + ov] == li):
                            dd = o * V + ov - vap[i]
                            if dd < 0:
                                dd += PV
                            if dd < bd:
                                bd = dd
                                best = ov
                    if best >= 0:
                        oi = base + o * V + best
                        oown[oi] = i
                        vgp[oi] = li + 1 if li + 1 < PV else 0
                        vap[i] = o * V + best + 1 if o * V + best + 1 < PV else 0
                        ivc[i] = best
                        ist[i] = 2
                        irdy[i] = c + VAD
            # 3c. switch allocation (iSLIP, one iteration) and traversal
            nsr = 0
            for t2 in range(nact):
                li = act[t2]
                i = base + li
                if ist[i] != 2 or bcnt[i] == 0 or irdy[i] > c:
                    continue
                if barr[i * B + bhead[i]] > c:
                    continue
                o = iport[i]
                if ocred[base + o * V + ivc[i]] <= 0:
                    continue
                inp = actp[t2]
                v = actv[t2]
                x = inp * S + (v % S if S > 1 else 0)
                dd = v - svp[r * PSX + x]
                if dd < 0:
                    dd += V
                t = x * P + o
                if sreq_vc[t] < 0:
                    sl_t[nsr] = t
                    sl_x[nsr] = x
                    sl_o[nsr] = o
                    nsr += 1
                    sreq_vc[t] = v
                    sreq_d[t] = dd
                elif dd < sreq_d[t]:
                    sreq_vc[t] = v
                    sreq_d[t] = dd
            if nsr == 0:
                continue
            for a_ in range(nsr):
                ogrant[sl_o[a_]] = -1
                ogd[sl_o[a_]] = PSX + 1
                xacc[sl_x[a_]] = -1
                xd[sl_x[a_]] = P + 1
            for a_ in range(nsr):      # grant: each output picks an input after its pointer
                o = sl_o[a_]
                dd = sl_x[a_] - sgp[r * P + o]
                if dd < 0:
                    dd += PSX
                if dd < ogd[o]:
                    ogd[o] = dd
                    ogrant[o] = sl_x[a_]
            for a_ in range(nsr):      # accept: each input picks a granting output after its pointer
                o = sl_o[a_]
                x = sl_x[a_]
                if ogrant[o] == x:
                    dd = o - sap[r * PSX + x]
                    if dd < 0:
                        dd += P
                    if dd < xd[x]:
                        xd[x] = dd
                        xacc[x] = a_
            for a_ in range(nsr):
                t = sl_t[a_]
                v = sreq_vc[t]
                sreq_vc[t] = -1
                x = sl_x[a_]
                if xacc[x] != a_:
                    continue
                o = sl_o[a_]
                inp = x // S if S > 1 else x
                i = base + inp * V + v
                sgp[r * P + o] = x + 1 if x + 1 < PSX else 0
                sap[r * PSX + x] = o + 1 if o + 1 < P else 0
                svp[r * PSX + x] = v + 1 if v + 1 < V else 0
                # move the front flit
                q = i * B + bhead[i]
                p = bpk[q]
                fi = bfi[q]
                bhead[i] = bhead[i] + 1 if bhead[i] + 1 < B else 0
                bcnt[i] -= 1
                rfl[r] -= 1
                if bcnt[i] == 0:
                    nem[r * P + inp] &= ~(np.int64(1) << v)
                ov = ivc[i]
                oi = base + o * V + ov
                ocred[oi] -= 1
                if fi == 0:
                    pk_hops[p] += 1
                st[S_FLIT_HOPS] += 1
                tail = fi == PS - 1
                e = c + SAD + 2
                if o == EJ:
                    # the sink takes the flit at e and returns its credit at once
                    sl = (c + SAD + 2 + CD) & (W - 1)
                    wheel[sl, wcnt[sl]] = oi
                    wcnt[sl] += 1
                    if e >= 0:
                        st[S_ACC_FLITS] += 1
                    if tail:
                        lat = e - pk_ct[p]
                        if mode == 0 or pk_rec[p] == 1:
                            st[S_PKTS] += 1
                            st[S_PLAT] += lat
                            st[S_NLAT] += e - pk_it[p]
                            st[S_HOPS] += pk_hops[p]
                            if lat < st[S_PLAT_MIN]:
                                st[S_PLAT_MIN] = lat
                            if lat > st[S_PLAT_MAX]:
                                st[S_PLAT_MAX] = lat
                        if pk_rec[p] == 1:
                            st[S_OUTSTANDING] -= 1
                            if e > st[S_LAST_E]:
                                st[S_LAST_E] = e
                        st[S_LIVE] -= 1
                        free_slots[np.int64(st[S_LIVE])] = p
                else:
                    nr = nbr[r * P + o]
                    if not _enqueue((nr * P + (o ^ 1)) * V + ov, B, p, fi, e, bpk, bfi, barr, bhead, bcnt):
                        return c, 2
                    nem[nr * P + (o ^ 1)] |= np.int64(1) << ov
                    rfl[nr] += 1
                    if TORUS == 1 and wrap[r * P + o] == 1:
                        pk_ph[p] = 1
                # the credit for the freed slot goes upstream
                sl = (c + SAD + 1 + CD) & (W - 1)
                if inp == EJ:   # the source sees it one cycle later (BookSim2: the node reads credits first)
                    sl = (c + SAD + 2 + CD) & (W - 1)
                    wheel[sl, wcnt[sl]] = -(r * V + v) - 1
                else:
                    ur = nbr[r * P + inp]
                    wheel[sl, wcnt[sl]] = (ur * P + (inp ^ 1)) * V + v
                wcnt[sl] += 1
                if tail:
                    if WFTC == 1:
                        otail[oi] = 1
                    else:
                        oown[oi] = -1
                    ist[i] = 0
                    ifree[i] = c + SAD
                else:
                    irdy[i] = c + SAD
        c += 1
    return c, 0
