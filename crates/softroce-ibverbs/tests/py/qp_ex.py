#!/usr/bin/python3
"""Extended QPs (ibv_create_qp_ex with send_ops_flags) through pyverbs'
QPEx: RC, UC and UD, the ibv_wr_* builder on each, the send_ops_flags each
type refuses, and ATOMIC WRITE (QPEx.wr_atomic_write).

Usage: qp_ex.py [DEVICE]

pyverbs of rdma-core 44 has no QPEx.wr_flush (rdma-core 45 adds it):
tests/c/placement.c covers ibv_wr_flush.
Prints one "ok ..." line per check; "FAIL: ..." on stderr and exit 1 else.
"""

import errno
import struct
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AH, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPEx, QPInitAttrEx
from pyverbs.wr import SGE, RecvWR

from send_write import PORT, Failure, check, connect, device_name, ipv4_gid_index, ok, pattern, run

BUF = 8192
ALL = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC
QKEY = 0x11111111
RC_OPS = (e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_SEND_WITH_IMM | e.IBV_QP_EX_WITH_RDMA_WRITE
          | e.IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | e.IBV_QP_EX_WITH_RDMA_READ
          | e.IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | e.IBV_QP_EX_WITH_ATOMIC_WRITE)
UC_OPS = (e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_SEND_WITH_IMM | e.IBV_QP_EX_WITH_RDMA_WRITE
          | e.IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM)
UD_OPS = e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_SEND_WITH_IMM


class Dev:
    def __init__(self, name):
        self.ctx = Context(name=name)
        self.gid_index, _ = ipv4_gid_index(self.ctx)
        self.gid = self.ctx.query_gid(PORT, self.gid_index)
        self.pd = PD(self.ctx)
        self.scq = CQ(self.ctx, 64)
        self.rcq = CQ(self.ctx, 64)
        self.amr = MR(self.pd, BUF, ALL)
        self.bmr = MR(self.pd, BUF, ALL)

    def qp_ex(self, qp_type, ops):
        init = QPInitAttrEx(
            qp_type=qp_type, scq=self.scq, rcq=self.rcq, cap=QPCap(max_send_wr=16, max_recv_wr=16),
            pd=self.pd, comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, send_ops_flags=ops)
        return QPEx(self.ctx, init)

    def poll(self, cq, what):
        deadline = time.monotonic() + 10
        while True:
            n, wcs = cq.poll()
            if n:
                return wcs[0]
            check(time.monotonic() < deadline, f"{what}: no completion after 10 s")
            time.sleep(0.0005)

    def expect(self, cq, what, wr_id, opcode, byte_len=None):
        wc = self.poll(cq, what)
        check(wc.status == e.IBV_WC_SUCCESS, f"{what}: status {wc.status}")
        check((wc.wr_id, wc.opcode) == (wr_id, opcode), f"{what}: wr_id {wc.wr_id} opcode {wc.opcode}, expected {wr_id} {opcode}")
        if byte_len is not None:
            check(wc.byte_len == byte_len, f"{what}: byte_len {wc.byte_len}, expected {byte_len}")
        return wc


def post(x, wr_id, build, flags=e.IBV_SEND_SIGNALED):
    """One WR through the builder: wr_start, build(x), wr_complete."""
    x.wr_start()
    x.wr_id = wr_id
    x.wr_flags = flags
    build(x)
    x.wr_complete()


def rc(d):
    a, b = d.qp_ex(e.IBV_QPT_RC, RC_OPS), d.qp_ex(e.IBV_QPT_RC, RC_OPS)
    check(a.comp_mask == RC_OPS, f"qp_ex comp_mask {a.comp_mask:#x}")
    connect(a, b.qp_num, d.gid, d.gid_index, ALL)
    connect(b, a.qp_num, d.gid, d.gid_index, ALL)
    src, dst = d.amr, d.bmr
    data = pattern(3000, 1)
    src.write(data, len(data))
    b.post_recv(RecvWR(wr_id=11, num_sge=1, sg=[SGE(dst.buf, BUF, dst.lkey)]))
    post(a, 1, lambda x: (x.wr_send_imm(0x1234), x.wr_set_sge(SGE(src.buf, 3000, src.lkey))))
    d.expect(d.scq, "RC send_imm", 1, e.IBV_WC_SEND)
    wc = d.expect(d.rcq, "RC receive", 11, e.IBV_WC_RECV, 3000)
    check(wc.wc_flags & e.IBV_WC_WITH_IMM and wc.imm_data == struct.unpack("=I", struct.pack(">I", 0x1234))[0],
          f"RC receive wc_flags {wc.wc_flags:#x} imm_data {wc.imm_data:#x}")
    check(dst.read(3000, 0) == data, "RC SEND bytes differ")
    post(a, 2, lambda x: (x.wr_rdma_write(dst.rkey, dst.buf + 4096), x.wr_set_sge(SGE(src.buf, 100, src.lkey))))
    d.expect(d.scq, "RC write", 2, e.IBV_WC_RDMA_WRITE)
    check(dst.read(100, 4096) == data[:100], "RC WRITE bytes differ")
    dst.write(pattern(64, 2), 64)
    post(a, 3, lambda x: (x.wr_rdma_read(dst.rkey, dst.buf), x.wr_set_sge(SGE(src.buf + 6000, 64, src.lkey))))
    d.expect(d.scq, "RC read", 3, e.IBV_WC_RDMA_READ, 64)
    check(src.read(64, 6000) == pattern(64, 2), "RC READ bytes differ")
    dst.write(struct.pack("<Q", 40), 8)
    post(a, 4, lambda x: (x.wr_atomic_fetch_add(dst.rkey, dst.buf, 2), x.wr_set_sge(SGE(src.buf + 7000, 8, src.lkey))))
    d.expect(d.scq, "RC fetch_add", 4, e.IBV_WC_FETCH_ADD, 8)
    check(struct.unpack("<Q", src.read(8, 7000))[0] == 40, "fetch_add returned the wrong old value")
    check(struct.unpack("<Q", dst.read(8, 0))[0] == 42, "fetch_add left the wrong value")
    ok("RC QPEx: send_imm (3000 bytes), rdma_write, rdma_read, atomic_fetch_add complete with their values")
    value = struct.pack("<Q", 0x0123456789ABCDEF)
    post(a, 5, lambda x: x.wr_atomic_write(dst.rkey, dst.buf + 64, value))
    wc = d.expect(d.scq, "ATOMIC WRITE", 5, e.IBV_WC_ATOMIC_WRITE, 8)
    check(dst.read(8, 64) == value, f"ATOMIC WRITE left {dst.read(8, 64).hex()}")
    ok("RC QPEx.wr_atomic_write: IBV_WC_ATOMIC_WRITE, byte_len 8, the 8 bytes in place")
    try:
        post(a, 6, lambda x: x.wr_local_inv(dst.rkey))
        raise Failure("wr_local_inv on a QP made without LOCAL_INV was posted")
    except PyverbsRDMAError as err:
        check(err.error_code == errno.EOPNOTSUPP, f"wr_local_inv without its flag: errno {err.error_code}")
    n, _ = d.scq.poll()
    check(n == 0, "the refused batch completed")
    ok("RC QPEx: an operation not in send_ops_flags fails wr_complete with EOPNOTSUPP, nothing posted")
    if hasattr(QPEx, "wr_flush"):
        ok("this pyverbs has QPEx.wr_flush (rdma-core 45+); tests/c/placement.c covers ibv_wr_flush")
    else:
        ok("this pyverbs (rdma-core 44) has no QPEx.wr_flush; tests/c/placement.c covers ibv_wr_flush")
    for q in (a, b):
        q.close()


def uc(d):
    a, b = d.qp_ex(e.IBV_QPT_UC, UC_OPS), d.qp_ex(e.IBV_QPT_UC, UC_OPS)
    connect(a, b.qp_num, d.gid, d.gid_index, e.IBV_ACCESS_REMOTE_WRITE)
    connect(b, a.qp_num, d.gid, d.gid_index, e.IBV_ACCESS_REMOTE_WRITE)
    src, dst = d.amr, d.bmr
    data = pattern(2500, 3)
    src.write(data, len(data))
    b.post_recv(RecvWR(wr_id=21, num_sge=1, sg=[SGE(dst.buf, BUF, dst.lkey)]))
    post(a, 1, lambda x: (x.wr_send(), x.wr_set_sge(SGE(src.buf, 2500, src.lkey))))
    d.expect(d.scq, "UC send", 1, e.IBV_WC_SEND)
    wc = d.expect(d.rcq, "UC receive", 21, e.IBV_WC_RECV, 2500)
    check(wc.src_qp == a.qp_num, f"UC receive src_qp {wc.src_qp}")
    check(dst.read(2500, 0) == data, "UC SEND bytes differ")
    b.post_recv(RecvWR(wr_id=22, num_sge=1, sg=[SGE(dst.buf, 16, dst.lkey)]))
    post(a, 2, lambda x: (x.wr_rdma_write_imm(dst.rkey, dst.buf + 4096, 0xbeef), x.wr_set_sge(SGE(src.buf, 2000, src.lkey))))
    d.expect(d.scq, "UC write_imm", 2, e.IBV_WC_RDMA_WRITE)
    wc = d.expect(d.rcq, "UC write_imm receive", 22, e.IBV_WC_RECV_RDMA_WITH_IMM, 2000)
    check(wc.imm_data == struct.unpack("=I", struct.pack(">I", 0xbeef))[0], f"imm_data {wc.imm_data:#x}")
    check(dst.read(2000, 4096) == data[:2000], "UC WRITE_WITH_IMM bytes differ")
    try:
        post(a, 3, lambda x: (x.wr_rdma_read(dst.rkey, dst.buf), x.wr_set_sge(SGE(src.buf, 8, src.lkey))))
        raise Failure("an RDMA READ was posted on UC")
    except PyverbsRDMAError as err:
        check(err.error_code == errno.EOPNOTSUPP, f"READ on UC: errno {err.error_code}")
    ok("UC QPEx: send (2500 bytes) and rdma_write_imm complete with their bytes; wr_rdma_read EOPNOTSUPP")
    for q in (a, b):
        q.close()


def ud(d):
    a, b = d.qp_ex(e.IBV_QPT_UD, UD_OPS), d.qp_ex(e.IBV_QPT_UD, UD_OPS)
    for q in (a, b):
        attr = QPAttr(qp_state=e.IBV_QPS_INIT)
        attr.qkey, attr.pkey_index, attr.port_num = QKEY, 0, PORT
        q.to_rts(attr)
    gr = GlobalRoute(dgid=d.gid, sgid_index=d.gid_index, hop_limit=64)
    ah = AH(d.pd, attr=AHAttr(gr=gr, is_global=1, port_num=PORT))
    src, dst = d.amr, d.bmr
    data = pattern(512, 4)
    src.write(data, len(data))
    b.post_recv(RecvWR(wr_id=31, num_sge=1, sg=[SGE(dst.buf, 40 + 1024, dst.lkey)]))
    post(a, 1, lambda x: (x.wr_send_imm(7), x.wr_set_ud_addr(ah, b.qp_num, QKEY), x.wr_set_sge(SGE(src.buf, 512, src.lkey))))
    d.expect(d.scq, "UD send_imm", 1, e.IBV_WC_SEND)
    wc = d.expect(d.rcq, "UD receive", 31, e.IBV_WC_RECV, 40 + 512)
    check(wc.src_qp == a.qp_num and wc.wc_flags & e.IBV_WC_GRH and wc.wc_flags & e.IBV_WC_WITH_IMM,
          f"UD receive src_qp {wc.src_qp} wc_flags {wc.wc_flags:#x}")
    check(dst.read(512, 40) == data, "UD payload differs")
    try:
        post(a, 2, lambda x: (x.wr_send(), x.wr_set_sge(SGE(src.buf, 8, src.lkey))))
        raise Failure("a UD send without wr_set_ud_addr was posted")
    except PyverbsRDMAError as err:
        check(err.error_code == errno.EINVAL, f"UD send without an address: errno {err.error_code}")
    ok("UD QPEx: send_imm with wr_set_ud_addr arrives (GRH + 512 bytes, imm, src_qp); no address: EINVAL")
    ah.close()
    for q in (a, b):
        q.close()


def refused(d):
    cases = [
        (e.IBV_QPT_UD, e.IBV_QP_EX_WITH_RDMA_WRITE),
        (e.IBV_QPT_UD, e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_ATOMIC_WRITE),
        (e.IBV_QPT_UC, e.IBV_QP_EX_WITH_RDMA_READ),
        (e.IBV_QPT_UC, e.IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD),
        (e.IBV_QPT_UC, e.IBV_QP_EX_WITH_SEND_WITH_INV),
        (e.IBV_QPT_RC, e.IBV_QP_EX_WITH_TSO),
    ]
    for t, ops in cases:
        try:
            d.qp_ex(t, ops).close()
            raise Failure(f"QPEx type {t} ops {ops:#x} was created")
        except PyverbsRDMAError as err:
            check(err.error_code == errno.EOPNOTSUPP, f"QPEx type {t} ops {ops:#x}: errno {err.error_code}")
    ok("QPEx: EOPNOTSUPP for UD + RDMA_WRITE or ATOMIC_WRITE, UC + READ, FETCH_ADD or SEND_WITH_INV, RC + TSO")


def main(argv):
    d = Dev(device_name(argv))
    rc(d)
    uc(d)
    ud(d)
    refused(d)
    d.ctx.close()
    return 0


if __name__ == "__main__":
    run(main)
