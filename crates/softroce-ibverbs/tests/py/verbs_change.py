#!/usr/bin/python3
"""Verbs that change objects, through pyverbs: CQ creation bounds,
CQ.resize with completions in the CQ, SRQ.modify (max_wr), MR.rereg with
each IBV_REREG_MR_CHANGE_* flag, and PD.advise_mr on on-demand regions.

Usage: verbs_change.py [DEVICE]

Every result is checked: values read back, errno from
PyverbsRDMAError.error_code, completions' wr_id, status, opcode and
byte_len, and the bytes a peer's WRITE left. pyverbs of rdma-core 44 has
no CQ.modify (ibv_modify_cq): tests/c/resize.c covers it.
Prints one "ok ..." line per check; "FAIL: ..." on stderr and exit 1 else.
"""

import errno
import sys
import time

import pyverbs.enums as e
import pyverbs.mem_alloc as mem
from pyverbs.cq import CQ, CQEX, CqInitAttrEx
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsError, PyverbsRDMAError
from pyverbs.qp import QP, QPCap, QPInitAttr
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

from send_write import PORT, Failure, check, connect, device_name, ipv4_gid_index, ok, pattern, run

BUF = 4096
ALL = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


def errno_of(what, fn, *args):
    """Runs fn(*args), which must fail; returns PyverbsRDMAError.error_code."""
    try:
        fn(*args)
    except PyverbsRDMAError as err:
        return err.error_code
    raise Failure(f"{what} succeeded")


def expect_errno(want, what, fn, *args):
    got = errno_of(what, fn, *args)
    check(got == want, f"{what}: errno {got} ({errno.errorcode.get(got)}), expected {errno.errorcode[want]}")


def poll(cq, n, what):
    """Exactly n completions from cq (in order)."""
    got = []
    deadline = time.monotonic() + 10
    while len(got) < n:
        k, wcs = cq.poll(num_entries=n - len(got))
        got.extend(wcs[:k])
        if k == 0:
            check(time.monotonic() < deadline, f"{what}: {len(got)} of {n} completions after 10 s")
            time.sleep(0.0005)
    return got


class Rc:
    """Two RC QPs of one context connected to each other; A's sends
    complete on scq, B's receives on rcq (or through an SRQ)."""

    def __init__(self, ctx, pd, rcq_depth=64, srq=None, qp_pd=None):
        self.ctx, self.pd = ctx, pd
        self.gid_index, _ = ipv4_gid_index(ctx)
        self.gid = ctx.query_gid(PORT, self.gid_index)
        self.scq = CQ(ctx, 64)
        self.rcq = CQ(ctx, rcq_depth)
        cap = QPCap(max_send_wr=32, max_recv_wr=0 if srq else 32)
        qpd = qp_pd or pd
        self.a = QP(qpd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.scq, rcq=self.scq, cap=cap, sq_sig_all=1))
        init_b = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.scq, rcq=self.rcq, srq=srq, cap=cap)
        self.b = QP(qpd, init_b)
        connect(self.a, self.b.qp_num, self.gid, self.gid_index)
        connect(self.b, self.a.qp_num, self.gid, self.gid_index)
        self.src = MR(pd, BUF, ALL)

    def send(self, wr_id, n):
        wr = SendWR(wr_id=wr_id, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(self.src.buf, n, self.src.lkey)])
        self.a.post_send(wr)

    def write(self, wr_id, rkey, addr, data, status=e.IBV_WC_SUCCESS, what="WRITE"):
        self.src.write(data, len(data))
        wr = SendWR(wr_id=wr_id, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(self.src.buf, len(data), self.src.lkey)])
        wr.set_wr_rdma(rkey, addr)
        self.a.post_send(wr)
        wc = poll(self.scq, 1, what)[0]
        check((wc.wr_id, wc.status) == (wr_id, status), f"{what}: wr_id {wc.wr_id} status {wc.status}, expected {status}")

    def close(self):
        for o in (self.a, self.b, self.src, self.scq, self.rcq):
            o.close()


def cq_bounds(ctx):
    attr = ctx.query_device()
    max_cqe, nvec = attr.max_cqe, ctx.num_comp_vectors
    check(nvec >= 1, f"num_comp_vectors {nvec}")
    expect_errno(errno.EINVAL, "CQ(max_cqe + 1)", CQ, ctx, max_cqe + 1)
    expect_errno(errno.EINVAL, "CQ(0)", CQ, ctx, 0)
    expect_errno(errno.EINVAL, "CQ(comp_vector = num_comp_vectors)", CQ, ctx, 8, None, None, nvec)
    expect_errno(
        errno.EINVAL, "CQEX(max_cqe + 1)", CQEX, ctx, CqInitAttrEx(cqe=max_cqe + 1, wc_flags=e.IBV_WC_EX_WITH_BYTE_LEN)
    )
    expect_errno(errno.EINVAL, "CQEX(comp_vector = num_comp_vectors)", CQEX, ctx, CqInitAttrEx(cqe=8, comp_vector=nvec))
    cq = CQ(ctx, 8, None, None, nvec - 1)
    check(cq.cqe >= 8 and (cq.cqe + 1) & cq.cqe == 0, f"CQ(8).cqe {cq.cqe}, expected 2^k - 1 >= 8")
    cq.close()
    ok(f"CQ and CQEX: EINVAL for cqe 0 or max_cqe + 1 ({max_cqe + 1}) and comp_vector {nvec}; CQ(8).cqe is 2^k - 1")


def cq_resize(ctx, pd):
    r = Rc(ctx, pd, rcq_depth=8)
    check(r.rcq.cqe == 15, f"CQ(8).cqe {r.rcq.cqe}, expected 15")
    dst = MR(pd, BUF, ALL)

    def fill(first, n):
        """n SENDs of 100 + i bytes into n receives; every receive
        completion is in rcq once every send completed (each SEND's ACK
        follows its receive's completion)."""
        for i in range(n):
            r.b.post_recv(RecvWR(wr_id=first + i, num_sge=1, sg=[SGE(dst.buf, BUF, dst.lkey)]))
        for i in range(n):
            r.send(first + 100 + i, 100 + i)
        for wc in poll(r.scq, n, "SENDs"):
            check(wc.status == e.IBV_WC_SUCCESS, f"send status {wc.status}")

    def drain(first, n, what):
        wcs = poll(r.rcq, n, what)
        got = [(w.wr_id, w.status, w.opcode, w.byte_len) for w in wcs]
        want = [(first + i, e.IBV_WC_SUCCESS, e.IBV_WC_RECV, 100 + i) for i in range(n)]
        check(got == want, f"{what}: completions {got}, expected {want}")
        k, _ = r.rcq.poll(num_entries=1)
        check(k == 0, f"{what}: a completion too many")

    fill(1, 6)
    r.rcq.resize(40)
    check(r.rcq.cqe == 63, f"resize(40): cqe {r.rcq.cqe}, expected 63")
    drain(1, 6, "after growing")
    ok("CQ.resize 8 -> 40 with 6 completions in it: cqe 15 -> 63, the 6 completions kept in order")
    fill(11, 12)
    expect_errno(errno.EINVAL, "resize(11) below 12 completions held", r.rcq.resize, 11)
    check(r.rcq.cqe == 63, f"a refused resize changed cqe to {r.rcq.cqe}")
    r.rcq.resize(12)
    check(r.rcq.cqe == 15, f"resize(12): cqe {r.rcq.cqe}, expected 15")
    drain(11, 12, "after shrinking")
    max_cqe = ctx.query_device().max_cqe
    expect_errno(errno.EINVAL, "resize(max_cqe + 1)", r.rcq.resize, max_cqe + 1)
    expect_errno(errno.EINVAL, "resize(0)", r.rcq.resize, 0)
    ok("CQ.resize 40 -> 12 with 12 completions: cqe 15, kept; EINVAL for 11 (below those held), 0 and max_cqe + 1")
    dst.close()
    r.close()


def srq_modify(ctx, pd):
    max_srq_wr = ctx.query_device().max_srq_wr
    srq = SRQ(pd, SrqInitAttr(SrqAttr(max_wr=8, max_sge=1)))
    check(srq.query().max_wr >= 8, f"SRQ(8) max_wr {srq.query().max_wr}")
    r = Rc(ctx, pd, srq=srq)
    dst = MR(pd, 64 * 32, ALL)

    def post(i):
        srq.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(dst.buf + 64 * (i % 32), 64, dst.lkey)]))

    for i in range(5):
        post(i)
    a = SrqAttr(max_wr=4)
    expect_errno(errno.EINVAL, "max_wr 4 below 5 WRs posted", srq.modify, a, e.IBV_SRQ_MAX_WR)
    expect_errno(errno.EINVAL, "max_wr 0", srq.modify, SrqAttr(max_wr=0), e.IBV_SRQ_MAX_WR)
    expect_errno(
        errno.EINVAL, f"max_wr {max_srq_wr + 1} past max_srq_wr", srq.modify, SrqAttr(max_wr=max_srq_wr + 1), e.IBV_SRQ_MAX_WR
    )
    expect_errno(errno.EINVAL, "srq_limit past max_wr", srq.modify, SrqAttr(srq_limit=100), e.IBV_SRQ_LIMIT)
    srq.modify(SrqAttr(max_wr=20), e.IBV_SRQ_MAX_WR)
    q = srq.query()
    check(q.max_wr == 20, f"after modify(max_wr 20): query max_wr {q.max_wr}")
    for i in range(5, 20):
        post(i)
    expect_errno(errno.ENOMEM, "a 21st receive on max_wr 20", post, 20)
    ok("SRQ.modify max_wr 8 -> 20 with 5 WRs posted: query 20, 20 WRs fit, the 21st ENOMEM")
    ok("SRQ.modify: EINVAL for max_wr 0, below the WRs posted, past max_srq_wr, and a limit past the size")
    for i in range(20):
        r.src.write(pattern(64, i), 64)
        r.send(1000 + i, 64)
        poll(r.scq, 1, "SEND to the SRQ")
    wcs = poll(r.rcq, 20, "receives through the SRQ")
    got = [(w.wr_id, w.status, w.byte_len, w.qp_num) for w in wcs]
    check(got == [(i, e.IBV_WC_SUCCESS, 64, r.b.qp_num) for i in range(20)], f"SRQ completions {got}")
    check(dst.read(64, 64 * 19) == pattern(64, 19), "the last receive's bytes differ")
    ok("20 SENDs consume the 20 receives in the order posted, before and after the resize")
    r.close()
    dst.close()
    srq.close()


def rereg_fails(what, flags, mr, pd, addr=0, length=0, access=0):
    """mr.rereg must fail; returns (rereg error name, errno)."""
    try:
        mr.rereg(flags, pd, addr, length, access)
    except PyverbsRDMAError as err:
        name = str(err).split("Failed to rereg MR: ")[-1].split(".")[0].split()[0]
        return name, err.error_code
    raise Failure(f"rereg {what} succeeded")


def rereg(ctx, pd):
    r = Rc(ctx, pd)
    mr = MR(pd, BUF, e.IBV_ACCESS_LOCAL_WRITE)
    lkey, rkey = mr.lkey, mr.rkey
    data = pattern(BUF, 7)
    # ACCESS: remote write granted afterwards.
    mr.rereg(e.IBV_REREG_MR_CHANGE_ACCESS, pd, 0, 0, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
    check((mr.lkey, mr.rkey) == (lkey, rkey), f"keys {mr.lkey:#x}/{mr.rkey:#x} changed from {lkey:#x}/{rkey:#x}")
    r.write(1, mr.rkey, mr.buf, data, what="WRITE after CHANGE_ACCESS")
    check(mr.read(BUF, 0) == data, "the WRITE after CHANGE_ACCESS did not land")
    ok("MR.rereg CHANGE_ACCESS adds REMOTE_WRITE: keys unchanged, the peer's WRITE lands")
    # TRANSLATION: the same keys name new memory.
    new = mem.malloc(2 * BUF)
    try:
        mr.rereg(e.IBV_REREG_MR_CHANGE_TRANSLATION, pd, new, 2 * BUF, 0)
        check((mr.lkey, mr.rkey) == (lkey, rkey), "keys changed with CHANGE_TRANSLATION")
        check(mr.length == 2 * BUF, f"length {mr.length} after CHANGE_TRANSLATION, expected {2 * BUF}")
        data2 = pattern(2 * BUF, 8)
        mem.write(new, bytes(2 * BUF), 2 * BUF)
        r.write(2, mr.rkey, new + BUF // 2, data2[:BUF], what="WRITE after CHANGE_TRANSLATION")
        check(mem.read(new, BUF, BUF // 2) == data2[:BUF], "the WRITE did not land in the new memory")
        ok("MR.rereg CHANGE_TRANSLATION to a new 8 KiB buffer: keys unchanged, length 8192, WRITEs land there")
        # Input errors (rdma-core's own checks): IBV_REREG_MR_ERR_INPUT, EINVAL.
        got = [
            rereg_fails("unknown flag", 8, mr, pd),
            rereg_fails("TRANSLATION without length", e.IBV_REREG_MR_CHANGE_TRANSLATION, mr, pd, new, 0),
            rereg_fails("access without CHANGE_ACCESS", e.IBV_REREG_MR_CHANGE_PD, mr, pd, 0, 0, e.IBV_ACCESS_LOCAL_WRITE),
        ]
        want = [("IBV_REREG_MR_ERR_INPUT", errno.EINVAL)] * 3
        check(got == want, f"input errors: {got}, expected {want}")
        # What the kernel refuses: IBV_REREG_MR_ERR_CMD (no flag at all
        # passes rdma-core's checks; ib_uverbs_rereg_mr says EINVAL).
        got = [
            rereg_fails("flags 0", 0, mr, pd),
            rereg_fails("REMOTE_WRITE alone", e.IBV_REREG_MR_CHANGE_ACCESS, mr, pd, 0, 0, e.IBV_ACCESS_REMOTE_WRITE),
        ]
        want = [("IBV_REREG_MR_ERR_CMD", errno.EINVAL)] * 2
        check(got == want, f"device errors: {got}, expected {want}")
        r.write(3, mr.rkey, new, data2[:64], what="WRITE after refused rereg calls")
        check(mem.read(new, 64, 0) == data2[:64], "the region changed after refused rereg calls")
        ok("MR.rereg: IBV_REREG_MR_ERR_INPUT (EINVAL) for an unknown flag, a translation without length, access "
           "without CHANGE_ACCESS; IBV_REREG_MR_ERR_CMD (EINVAL) for no flag and REMOTE_WRITE alone; region unchanged")
        # PD: the region moves to pd2; A's QP (pd) no longer may use it.
        pd2 = PD(ctx)
        mr.rereg(e.IBV_REREG_MR_CHANGE_PD, pd2, 0, 0, 0)
        check((mr.lkey, mr.rkey) == (lkey, rkey), "keys changed with CHANGE_PD")
        r2 = Rc(ctx, pd2)
        r2.write(4, mr.rkey, new, data2[:64], what="WRITE from pd2's QP after CHANGE_PD")
        r.write(5, mr.rkey, new, data2[:64], e.IBV_WC_REM_ACCESS_ERR, what="WRITE from the old PD's QP after CHANGE_PD")
        ok("MR.rereg CHANGE_PD: keys unchanged, QPs of the new PD WRITE, the old PD's get REM_ACCESS_ERR")
        r2.close()
        mr.close()
        pd2.close()
    finally:
        mr.close()
        mem.free(new)
    r.close()


def advise(ctx, pd):
    caps = ctx.query_device_ex().odp_caps
    check(caps.general_caps & e.IBV_ODP_SUPPORT, f"odp general_caps {caps.general_caps:#x}")
    check(not caps.general_caps & e.IBV_ODP_SUPPORT_IMPLICIT, "implicit ODP advertised")
    rc_want = (e.IBV_ODP_SUPPORT_SEND | e.IBV_ODP_SUPPORT_RECV | e.IBV_ODP_SUPPORT_WRITE | e.IBV_ODP_SUPPORT_READ
               | e.IBV_ODP_SUPPORT_ATOMIC | e.IBV_ODP_SUPPORT_SRQ_RECV)
    check(caps.rc_odp_caps == rc_want, f"rc_odp_caps {caps.rc_odp_caps:#x}, expected {rc_want:#x}")
    odp = MR(pd, BUF, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_ON_DEMAND)
    ro = MR(pd, BUF, e.IBV_ACCESS_ON_DEMAND)
    plain = MR(pd, BUF, e.IBV_ACCESS_LOCAL_WRITE)
    pw, pf = e._IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, e._IBV_ADVISE_MR_ADVICE_PREFETCH
    flush = e._IBV_ADVISE_MR_FLAG_FLUSH
    pd.advise_mr(pw, flush, [SGE(odp.buf, BUF, odp.lkey)])
    pd.advise_mr(pf, 0, [SGE(odp.buf + 100, 200, odp.lkey), SGE(ro.buf, BUF, ro.lkey)])
    pd.advise_mr(e._IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0, [SGE(odp.buf, 8, odp.lkey)])
    ok("PD.advise_mr PREFETCH, PREFETCH_WRITE (FLAG_FLUSH) and PREFETCH_NO_FAULT on ON_DEMAND regions: 0")
    expect_errno(errno.EINVAL, "advise of a region without ON_DEMAND", pd.advise_mr, pf, 0, [SGE(plain.buf, 8, plain.lkey)])
    expect_errno(errno.EINVAL, "advise past the region", pd.advise_mr, pf, flush, [SGE(odp.buf + 8, BUF, odp.lkey)])
    expect_errno(errno.EINVAL, "advise of an unknown lkey", pd.advise_mr, pf, 0, [SGE(odp.buf, 8, 0xdead00)])
    expect_errno(errno.EPERM, "PREFETCH_WRITE of a read-only region", pd.advise_mr, pw, 0, [SGE(ro.buf, 8, ro.lkey)])
    expect_errno(errno.EOPNOTSUPP, "unknown advice", pd.advise_mr, 9, 0, [SGE(odp.buf, 8, odp.lkey)])
    expect_errno(errno.EINVAL, "unknown flag", pd.advise_mr, pf, 2, [SGE(odp.buf, 8, odp.lkey)])
    expect_errno(errno.EINVAL, "no SGE", pd.advise_mr, pf, 0, [])
    pd2 = PD(ctx)
    expect_errno(errno.EINVAL, "another PD's region", pd2.advise_mr, pf, 0, [SGE(odp.buf, 8, odp.lkey)])
    pd2.close()
    ok("PD.advise_mr: EINVAL for a region without ON_DEMAND, past it, an unknown key, no SGE, a flag, another PD; "
       "EPERM for PREFETCH_WRITE read-only; EOPNOTSUPP for advice 9")
    r = Rc(ctx, pd)
    data = pattern(BUF, 9)
    r.write(1, odp.rkey, odp.buf, data, what="WRITE into an ON_DEMAND region")
    check(odp.read(BUF, 0) == data, "the WRITE into the ON_DEMAND region did not land")
    ok("odp_caps: SUPPORT without IMPLICIT, RC SEND/RECV/WRITE/READ/ATOMIC/SRQ_RECV; a WRITE lands in an ON_DEMAND region")
    r.close()
    for m in (odp, ro, plain):
        m.close()


def main(argv):
    name = device_name(argv)
    ctx = Context(name=name)
    pd = PD(ctx)
    cq_bounds(ctx)
    cq_resize(ctx, pd)
    srq_modify(ctx, pd)
    rereg(ctx, pd)
    advise(ctx, pd)
    ctx.close()
    return 0


if __name__ == "__main__":
    run(main)
