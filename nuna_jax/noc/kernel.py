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

The work is proportional to what happens, not to the network's size (docs/noc.md, "Speed"): a head
is routed once, when it reaches the front of an idle VC (on arrival, or when the previous packet's
tail leaves); an input VC is a *candidate* of its router -- a bit in a per-port mask of VCs asking
for a VC (``vam``) or for the switch (``sam``), with a per-router mask of the ports holding any --
only from its ready cycle on, and until then waits in a wake calendar (``whead``/``wnext``); flits on
links wait in the arrivals calendar and credits in the credits calendar.  A router without
candidates is skipped; VC allocation visits the free output VCs (``ofree``, a mask per port) of the
requested range.  All of it gives the cycle-by-cycle result of scanning every VC every cycle
(benchmarks/check_noc_digests.py).
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


if HAVE_NUMBA:
    from numba.cpython.unsafe.numbers import trailing_zeros as _trailing_zeros

    @_jit_inline
    def _ctz(m):
        """The index of the lowest set bit of ``m`` (one instruction: LLVM's cttz)."""
        return _trailing_zeros(m)
else:
    def _ctz(m):
        """The index of the lowest set bit of ``m`` (a de Bruijn multiply and a table)."""
        m = int(m) & 0xFFFFFFFFFFFFFFFF
        return int(DEBRUIJN[((((m & -m) * DEBRUIJN_MUL) & 0xFFFFFFFFFFFFFFFF) >> 58) & 63])


@_jit
def seed_rng(seed):
    np.random.seed(seed)


#: fields of an input VC's row (``ivs``): state (0 idle, 1 routed, 2 active), ready cycle, free-from
#: cycle, output port, output VC, VC range lo/hi, buffer head / count, VC-allocation accept pointer, and
#: two constants: its port's row (router * ports + input port) and its router
(I_ST, I_RDY, I_FREE, I_PORT, I_VC, I_LO, I_HI, I_HEAD, I_CNT, I_AP, I_ROW, I_RTR) = range(12)
N_IVS = 12
#: fields of an output VC's row (``ovs``): owning input VC (-1 free), tail sent, grant pointer (its credits: ``ocr``)
(O_OWN, O_TAIL, O_GP) = range(3)
N_OVS = 3
#: a flit, in a buffer slot (``bq``) and the arrivals calendar, is one int64: ``packet << PK_SHIFT |
#: destination << FI_BITS | flit index`` (``packet_size`` <= 4,096 flits, nodes <= 2^20 (config.py),
#: packets < 2^23 (sim.py's packet table): the routers read the destination without visiting the packet)
FI_BITS = 12
FI_MASK = (1 << FI_BITS) - 1
DST_BITS = 20
DST_MASK = (1 << DST_BITS) - 1
PK_SHIFT = FI_BITS + DST_BITS
#: fields of a packet (``pk``): destination, creation cycle, injection cycle, hops, measured, torus
#: directions, dateline phase
(K_DST, K_CT, K_IT, K_HOPS, K_REC, K_DIR, K_PH) = range(7)
N_PK = 7

#: per-router scratch rows of ``run_cycles``'s ``scr`` (allocated by the caller: the loop runs without
#: numba's runtime, so it allocates nothing): lengths P*V x 6, P*S*P x 5, P x 2, P*S x 2, P
(R_REQ, R_REQO, R_REQM, R_REQP, R_GRANT, R_GDIST, R_SREQ_VC, R_SREQ_D, R_SL_T, R_SL_X, R_SL_O, R_OGRANT, R_OGD,
 R_XACC, R_XD, R_VCNT) = range(16)
N_SCRATCH = 16


def scratch(P, V, S):
    """The scratch rows ``run_cycles`` needs for ``P`` ports, ``V`` VCs and input speedup ``S``."""
    return np.zeros((N_SCRATCH, max(P * V, P * S * P)), np.int64)


@_jit_inline
def _send(aw, acnt, W, t, j, f):
    """Schedule flit ``f`` (its word: ``PK_SHIFT``) to enter VC buffer ``j`` at cycle ``t`` (``aw``/``acnt``:
    the arrivals calendar, ``W`` slots); until then no router visits it.  ``j = -1``: the flit reaches its
    destination's sink then (:func:`_retire`)."""
    sl = t & (W - 1)
    k = acnt[sl]
    aw[sl, k, 0] = j
    aw[sl, k, 1] = f
    acnt[sl] = k + 1


@_jit_inline
def _retire(p, tail, t, mode, st, pk, free_slots):
    """A flit of packet ``p`` reaches its destination's sink at cycle ``t``: count it; at the tail, record
    the packet (every packet while warming up, ``mode`` 0; else the measured ones) and free its slot
    (BookSim2's _RetireFlit, at the flit's arrival)."""
    st[S_ACC_FLITS] += 1
    if not tail:
        return
    lat = t - pk[p * N_PK + K_CT]
    if mode == 0 or pk[p * N_PK + K_REC] == 1:
        st[S_PKTS] += 1
        st[S_PLAT] += lat
        st[S_NLAT] += t - pk[p * N_PK + K_IT]
        st[S_HOPS] += pk[p * N_PK + K_HOPS]
        if lat < st[S_PLAT_MIN]:
            st[S_PLAT_MIN] = lat
        if lat > st[S_PLAT_MAX]:
            st[S_PLAT_MAX] = lat
    if pk[p * N_PK + K_REC] == 1:
        st[S_OUTSTANDING] -= 1
        if t > st[S_LAST_E]:
            st[S_LAST_E] = t
    st[S_LIVE] -= 1
    free_slots[np.int64(st[S_LIVE])] = p


@_jit_inline
def _enqueue(j, B, f, bq, ivs):
    """Append flit ``f`` (arriving now) to VC buffer ``j`` (a ring of ``B`` slots); False when the buffer is
    full (a credit bug)."""
    if ivs[j * N_IVS + I_CNT] >= B:
        return False
    pos = ivs[j * N_IVS + I_HEAD] + ivs[j * N_IVS + I_CNT]
    if pos >= B:
        pos -= B
    bq[j * B + pos] = f
    ivs[j * N_IVS + I_CNT] += 1
    return True


@_jit_inline
def _bits_below(n):
    """The mask of bits ``0 .. n - 1`` (``n`` in 0..64)."""
    if n >= 64:
        return np.int64(-1)
    return (np.int64(1) << n) - 1


@_jit_inline
def _vc_range(lo, hi):
    """The mask of VCs ``lo .. hi``."""
    return _bits_below(hi + 1) & ~_bits_below(lo)


@_jit_inline
def _route(i, c, f, D, V, EJ, TORUS, RD, half, coord, wrap, pk, ivs):
    """Route the head flit ``f`` at the front of idle input VC ``i`` as the router would at cycle ``c``
    (dimension order; on a torus the packet's direction and the dateline VC class): state 1, ready (to
    request a VC) at ``max(c, I_FREE) + routing_delay``, which it returns.  ``max(c, I_FREE)`` is BookSim2's
    max(arrival, I_FREE): a head is routed the first cycle it is at the front of an idle VC, either the
    cycle it arrived (into an idle, empty VC: arrival = c) or the cycle after the previous tail was
    switched at c - 1 (arrival <= c - 1 < I_FREE = c - 1 + sw_alloc_delay)."""
    b = i * N_IVS
    rdy = c if c > ivs[b + I_FREE] else ivs[b + I_FREE]
    rdy += RD
    ivs[b + I_RDY] = rdy
    r = ivs[b + I_RTR]
    inp = ivs[b + I_ROW] - r * (EJ + 1)
    d = (f >> FI_BITS) & DST_MASK
    p = f >> PK_SHIFT
    o = EJ
    for dim in range(D):
        x = coord[r * D + dim]
        y = coord[d * D + dim]
        if x != y:
            if TORUS == 1:
                o = 2 * dim + ((pk[p * N_PK + K_DIR] >> dim) & 1)
            else:
                o = 2 * dim if y > x else 2 * dim + 1
            break
    ivs[b + I_PORT] = o
    if TORUS == 1 and o != EJ:
        if inp == EJ or inp // 2 != o // 2:
            pk[p * N_PK + K_PH] = 0          # a new dimension: before its dateline
        if pk[p * N_PK + K_PH] == 1 or wrap[r * (EJ + 1) + o] == 1:
            ivs[b + I_LO] = half
            ivs[b + I_HI] = V - 1
        else:
            ivs[b + I_LO] = 0
            ivs[b + I_HI] = half - 1
    else:
        ivs[b + I_LO] = 0
        ivs[b + I_HI] = V - 1
    ivs[b + I_ST] = 1
    return rdy


@_jit_inline
def _mark(i, V, P, ivs, msk, rmsk):
    """Put input VC ``i`` into a router's candidate set (``msk``: a VC mask per router port, ``rmsk``: per
    router, the mask of its ports with candidates)."""
    rp = ivs[i * N_IVS + I_ROW]
    r = ivs[i * N_IVS + I_RTR]
    msk[rp] |= np.int64(1) << (i - rp * V)
    rmsk[r] |= np.int64(1) << (rp - r * P)


@_jit_inline
def _unmark(r, inp, v, P, msk, rmsk):
    """Take VC ``v`` of input port ``inp`` of router ``r`` out of the router's candidate set (:func:`_mark`)."""
    m = msk[r * P + inp] & ~(np.int64(1) << v)
    msk[r * P + inp] = m
    if m == 0:
        rmsk[r] &= ~(np.int64(1) << inp)


@_jit_inline
def _sleep(i, t, W2, whead, wnext):
    """Input VC ``i`` waits until cycle ``t`` (its ready cycle; at most ``W2 - 1`` cycles ahead): the wake
    calendar, a list per cycle slot linked through ``wnext`` (a VC waits for one cycle at a time)."""
    sl = t & (W2 - 1)
    wnext[i] = whead[sl]
    whead[sl] = i


@_jit_loop
def run_cycles(c0, c1, mode, prate, prm, nbr, wrap, coord, dest_tab, st, pk, free_slots,
               sq, sq_head, sq_cnt, src_flit, src_vc, src_last, inj_cred, inj_own, inj_tail,
               bq, vam, rva, sam, rsa, whead, wnext, ivs, ovs, ocr, ofree, sgp, sap, svp, wheel, wcnt, aw, acnt, scr):
    """Advance cycles ``c0 .. c1 - 1``; ``mode`` 0 warm-up (every retired packet counts), 1 running
    (packets created now are measured, and those created while warming up that reach the head of
    their source queue now), 2 drain (stop once the measured packets are out).  Returns
    (next cycle, status): status 0 ok, 1 a queue or the packet table overflowed (unstable), 2 a
    buffer overflow (a bug).  ``coord[r * n + d]``: router r's digit in dimension d; the state of
    input VC ``i`` is the row ``ivs[i * N_IVS:]`` (fields ``I_*``), of output VC ``oi`` the row
    ``ovs[oi * N_OVS:]`` (``O_*``) and its credits ``ocr[oi]``, of buffer slot ``q`` the flit word ``bq[q]``,
    of packet ``p`` the row ``pk[p * N_PK:]`` (``K_*``); ``vam``/``rva``, ``sam``/``rsa``: the routers'
    candidates for VC and switch allocation, ``whead``/``wnext``: the wake calendar of VCs waiting for
    their ready cycle; ``ofree``: per router port, the mask of free output VCs; ``wheel``/``wcnt``: the
    credits calendar, ``aw``/``acnt``: the flit arrivals calendar (a flit enters its buffer when it
    arrives, so no router visits it on the link); ``scr``: :func:`scratch`'s rows."""
    N = prm[P_N]; K = prm[P_K]; D = prm[P_DIMS]; P = prm[P_PORTS]; V = prm[P_V]; B = prm[P_B]
    S = prm[P_S]; PS = prm[P_PS]; RD = prm[P_RD]; VAD = prm[P_VAD]; SAD = prm[P_SAD]; CD = prm[P_CD]
    WFTC = prm[P_WFTC]; TORUS = prm[P_TORUS]; QCAP = prm[P_QCAP]; W = prm[P_WHEEL]; UNIF = prm[P_UNIFORM]
    W2 = whead.shape[0]
    EJ = P - 1
    PV = P * V
    PSX = P * S
    half = V // 2
    # per-router scratch (rows of scr)
    req_i = scr[R_REQ]
    req_o = scr[R_REQO]
    req_m = scr[R_REQM]
    req_p = scr[R_REQP]
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
                ocr[tgt] += 1
                if WFTC == 1 and ovs[tgt * N_OVS + O_TAIL] == 1 and ocr[tgt] == B:
                    ovs[tgt * N_OVS + O_TAIL] = 0
                    ovs[tgt * N_OVS + O_OWN] = -1
                    ofree[tgt // V] |= np.int64(1) << (tgt % V)
            else:
                j = -tgt - 1
                inj_cred[j] += 1
                if WFTC == 1 and inj_tail[j] == 1 and inj_cred[j] == B:
                    inj_tail[j] = 0
                    inj_own[j] = 0
        wcnt[slot] = 0
        # input VCs whose ready cycle is now join their router's candidates: VC allocation (state 1) or,
        # holding a flit, switch allocation (state 2)
        sl2 = c & (W2 - 1)
        i = whead[sl2]
        whead[sl2] = -1
        while i >= 0:
            nx = wnext[i]
            if ivs[i * N_IVS + I_ST] == 1:
                _mark(i, V, P, ivs, vam, rva)
            elif ivs[i * N_IVS + I_CNT] > 0:
                _mark(i, V, P, ivs, sam, rsa)
            i = nx
        # flits due now enter their buffers (a head at the front of an idle VC is routed now), or their
        # destination's sink
        for k in range(acnt[slot]):
            j = aw[slot, k, 0]
            if j < 0:
                _retire(aw[slot, k, 1] >> PK_SHIFT, (aw[slot, k, 1] & FI_MASK) == PS - 1, c, mode, st, pk, free_slots)
                continue
            if not _enqueue(j, B, aw[slot, k, 1], bq, ivs):
                return c, 2
            if ivs[j * N_IVS + I_CNT] == 1:      # it is at the front
                stt = ivs[j * N_IVS + I_ST]
                if stt == 0:
                    t = _route(j, c, aw[slot, k, 1], D, V, EJ, TORUS, RD, half, coord, wrap, pk, ivs)
                    if t <= c:
                        _mark(j, V, P, ivs, vam, rva)
                    else:
                        _sleep(j, t, W2, whead, wnext)
                elif stt == 2 and ivs[j * N_IVS + I_RDY] <= c:
                    _mark(j, V, P, ivs, sam, rsa)
        acnt[slot] = 0
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
                pk[p * N_PK + K_DST] = d
                pk[p * N_PK + K_CT] = c
                pk[p * N_PK + K_IT] = -1
                # measured: created while running; 2: created while warming up, decided when it reaches
                # the head of its source queue (below)
                pk[p * N_PK + K_REC] = 1 if mode == 1 else (2 if mode == 0 else 0)
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
                pk[p * N_PK + K_DIR] = dirs
                pk[p * N_PK + K_PH] = 0
                # the routers its head will cross (dimension order: the links per dimension, the torus way
                # chosen, + 1)
                h = 1
                for dim in range(D):
                    x = coord[s * D + dim]
                    y = coord[d * D + dim]
                    if TORUS == 1:
                        h += (x - y + K) % K if (dirs >> dim) & 1 else (y - x + K) % K
                    else:
                        h += y - x if y > x else x - y
                pk[p * N_PK + K_HOPS] = h
                sq[s, (sq_head[s] + sq_cnt[s]) % QCAP] = p
                sq_cnt[s] += 1
            if sq_cnt[s] > 0:
                p = sq[s, sq_head[s]]
                if pk[p * N_PK + K_REC] == 2:
                    # its first cycle at the head of the queue: BookSim2 generates a source's next packet
                    # only once its queue is empty (backdated to its Bernoulli slot) and measures it if
                    # that happens after the warm-up, so a packet created late in the warm-up behind a
                    # backlog is measured (docs/noc.md, "The model")
                    if mode != 0:
                        pk[p * N_PK + K_REC] = 1
                        st[S_OUTSTANDING] += 1
                    else:
                        pk[p * N_PK + K_REC] = 0
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
                    f = (p << PK_SHIFT) | (pk[p * N_PK + K_DST] << FI_BITS) | fi
                    _send(aw, acnt, W, c + 2, (s * P + EJ) * V + v, f)
                    inj_cred[s * V + v] -= 1
                    if fi == 0:
                        pk[p * N_PK + K_IT] = c
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
        # 3. routers with candidates (input VCs ready to ask for a VC or for the switch; the others wait in
        # the wake calendar or for a flit, so no router visits them)
        for r in range(N):
            if rva[r] == 0 and rsa[r] == 0:
                continue
            base = r * PV
            # 3a. the VC-allocation requests: routed VCs whose ready cycle has come
            nreq = 0
            m2 = rva[r]
            while m2 != 0:
                inp = _ctz(m2)
                m2 &= m2 - 1
                m = vam[r * P + inp]
                while m != 0:
                    li = inp * V + _ctz(m)
                    m &= m - 1
                    i = base + li
                    o = ivs[i * N_IVS + I_PORT]
                    req_i[nreq] = li
                    req_o[nreq] = o
                    req_p[nreq] = inp
                    req_m[nreq] = _vc_range(ivs[i * N_IVS + I_LO], ivs[i * N_IVS + I_HI])
                    vcnt[o] += 1          # requesters per output port (zero outside this block)
                    nreq += 1
            # 3b. VC allocation (iSLIP, one iteration), over the free output VCs of each requested port
            # (``ofree``: a bit mask per router port, so the work is the free VCs, not all of them)
            if nreq > 0:
                for t in range(nreq):     # grant: each free output VC picks the requester after its pointer
                    o = req_o[t]
                    if vcnt[o] == 1:      # the only requester of its port: every free VC grants it
                        continue
                    m = ofree[r * P + o] & req_m[t]
                    while m != 0:
                        ov = _ctz(m)
                        m &= m - 1
                        grant[o * V + ov] = -1
                        gdist[o * V + ov] = PV + 1
                for t in range(nreq):
                    o = req_o[t]
                    if vcnt[o] == 1:
                        continue
                    li = req_i[t]
                    m = ofree[r * P + o] & req_m[t]
                    while m != 0:
                        ov = _ctz(m)
                        m &= m - 1
                        dd = li - ovs[(base + o * V + ov) * N_OVS + O_GP]
                        if dd < 0:
                            dd += PV
                        if dd < gdist[o * V + ov]:
                            gdist[o * V + ov] = dd
                            grant[o * V + ov] = li
                for t in range(nreq):     # accept: each input VC picks the granting VC after its pointer
                    o = req_o[t]
                    m = ofree[r * P + o] & req_m[t]
                    if m == 0:
                        continue
                    li = req_i[t]
                    i = base + li
                    best = -1
                    pos = ivs[i * N_IVS + I_AP] - o * V   # the accept pointer, relative to this port's VC 0
                    if vcnt[o] == 1:
                        # every free VC granted: the first at or after the pointer (cyclically over all
                        # the router's output VCs), i.e. the lowest one >= pos if the pointer is inside
                        # this port, else the lowest one
                        mh = m & ~_bits_below(pos) if 0 < pos < V else 0
                        if mh == 0:
                            mh = m
                        best = _ctz(mh)
                    else:
                        bd = PV + 1
                        while m != 0:
                            ov = _ctz(m)
                            m &= m - 1
                            if grant[o * V + ov] == li:
                                dd = ov - pos
                                if dd < 0:
                                    dd += PV
                                if dd < bd:
                                    bd = dd
                                    best = ov
                    if best >= 0:
                        oi = base + o * V + best
                        ovs[oi * N_OVS + O_OWN] = i
                        ofree[r * P + o] &= ~(np.int64(1) << best)
                        ovs[oi * N_OVS + O_GP] = li + 1 if li + 1 < PV else 0
                        ivs[i * N_IVS + I_AP] = o * V + best + 1 if o * V + best + 1 < PV else 0
                        ivs[i * N_IVS + I_VC] = best
                        ivs[i * N_IVS + I_ST] = 2
                        ivs[i * N_IVS + I_RDY] = c + VAD
                        _unmark(r, req_p[t], li - req_p[t] * V, P, vam, rva)
                        _sleep(i, c + VAD, W2, whead, wnext)
                for t in range(nreq):
                    vcnt[req_o[t]] = 0
            # 3c. switch allocation (iSLIP, one iteration) and traversal
            # (candidates: active VCs holding a flit whose ready cycle has come; they need a credit)
            nsr = 0
            m2 = rsa[r]
            while m2 != 0:
                inp = _ctz(m2)
                m2 &= m2 - 1
                m = sam[r * P + inp]
                while m != 0:
                    v = _ctz(m)
                    m &= m - 1
                    i = base + inp * V + v
                    o = ivs[i * N_IVS + I_PORT]
                    if ocr[base + o * V + ivs[i * N_IVS + I_VC]] <= 0:
                        continue
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
            for a_ in range(nsr if nsr > 1 else 0):   # (one request: granted and accepted)
                ogrant[sl_o[a_]] = -1
                ogd[sl_o[a_]] = PSX + 1
                xacc[sl_x[a_]] = -1
                xd[sl_x[a_]] = P + 1
            for a_ in range(nsr if nsr > 1 else 0):      # grant: each output picks an input after its pointer
                o = sl_o[a_]
                dd = sl_x[a_] - sgp[r * P + o]
                if dd < 0:
                    dd += PSX
                if dd < ogd[o]:
                    ogd[o] = dd
                    ogrant[o] = sl_x[a_]
            for a_ in range(nsr if nsr > 1 else 0):      # accept: each input picks a granting output after its pointer
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
                if nsr > 1 and xacc[x] != a_:
                    continue
                o = sl_o[a_]
                inp = x // S if S > 1 else x
                i = base + inp * V + v
                sgp[r * P + o] = x + 1 if x + 1 < PSX else 0
                sap[r * PSX + x] = o + 1 if o + 1 < P else 0
                svp[r * PSX + x] = v + 1 if v + 1 < V else 0
                # move the front flit
                q = i * B + ivs[i * N_IVS + I_HEAD]
                f = bq[q]
                p = f >> PK_SHIFT
                fi = f & FI_MASK
                ivs[i * N_IVS + I_HEAD] = ivs[i * N_IVS + I_HEAD] + 1 if ivs[i * N_IVS + I_HEAD] + 1 < B else 0
                ivs[i * N_IVS + I_CNT] -= 1
                ov = ivs[i * N_IVS + I_VC]
                oi = base + o * V + ov
                ocr[oi] -= 1
                st[S_FLIT_HOPS] += 1
                tail = fi == PS - 1
                e = c + SAD + 2
                if o == EJ:
                    # the sink takes the flit at e (counted then: _retire); its credit is usable here at e + 2 +
                    # credit_delay (BookSim2: the node writes it when it retires the flit, the router reads it
                    # a cycle later and applies credit_delay; measured on the binary at credit delays 0-2)
                    sl = (c + SAD + 4 + CD) & (W - 1)
                    wheel[sl, wcnt[sl]] = oi
                    wcnt[sl] += 1
                    _send(aw, acnt, W, e, -1, f)
                else:
                    nr = nbr[r * P + o]
                    _send(aw, acnt, W, e, (nr * P + (o ^ 1)) * V + ov, f)
                    if TORUS == 1 and fi == 0 and wrap[r * P + o] == 1:   # the head crossed a dateline
                        pk[p * N_PK + K_PH] = 1
                # the credit for the freed slot goes upstream
                sl = (c + SAD + 1 + CD) & (W - 1)
                if inp == EJ:   # the source: no credit_delay (BookSim2 applies it in routers; its traffic manager
                    sl = (c + SAD + 1) & (W - 1)     # processes a credit the cycle it reads it)
                    wheel[sl, wcnt[sl]] = -(r * V + v) - 1
                else:
                    ur = nbr[r * P + inp]
                    wheel[sl, wcnt[sl]] = (ur * P + (inp ^ 1)) * V + v
                wcnt[sl] += 1
                if tail:
                    if WFTC == 1:
                        ovs[oi * N_OVS + O_TAIL] = 1
                    else:
                        ovs[oi * N_OVS + O_OWN] = -1
                        ofree[r * P + o] |= np.int64(1) << ov
                    ivs[i * N_IVS + I_ST] = 0
                    ivs[i * N_IVS + I_FREE] = c + SAD
                    _unmark(r, inp, v, P, sam, rsa)
                    if ivs[i * N_IVS + I_CNT] > 0:
                        # the next packet's head is at the front of the idle VC: the router routes it next
                        # cycle (ready at I_FREE + routing_delay > c), so route it now and let it wait
                        t = _route(i, c + 1, bq[i * B + ivs[i * N_IVS + I_HEAD]], D, V, EJ, TORUS, RD, half, coord,
                                   wrap, pk, ivs)
                        _sleep(i, t, W2, whead, wnext)
                else:
                    ivs[i * N_IVS + I_RDY] = c + SAD
                    if SAD > 1:
                        _unmark(r, inp, v, P, sam, rsa)
                        _sleep(i, c + SAD, W2, whead, wnext)
                    elif ivs[i * N_IVS + I_CNT] == 0:   # ready next cycle: a candidate again when a flit arrives
                        _unmark(r, inp, v, P, sam, rsa)
                    # else ready next cycle with a flit: it stays a candidate (the router is done this cycle)
        c += 1
    return c, 0
