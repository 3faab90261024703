#!/usr/bin/python3
"""Memory windows bound the way pyverbs' own tests bind them (rdma-core
tests/test_mr.py, MWTest), then used by the peer.

Usage: mw.py [DEVICE]

Two players, each with its own context, PD, CQ and one RC QP made with
pyverbs' default capabilities (max_send_wr 1, every WR signaled), connected
to each other. Each registers a buffer with LOCAL_WRITE | MW_BIND only and
binds a window granting LOCAL_WRITE | REMOTE_WRITE over it: type 1 through
`QP.bind_mw` (ibv_bind_mw), type 2 through a `SendWR` of opcode
IBV_WR_BIND_MW (`set_bind_wr`). The peer then RDMA WRITEs through the
window's R_Key. Invalidation (a type 1 rebind of length 0, a type 2
LOCAL_INV or SEND_WITH_INV) makes the next WRITE fail with
REM_ACCESS_ERR. The bind rules (IBTA C10-72..75, o10-36.2.x, o10-37.2.x,
rxe `rxe_check_bind_mw`) are checked one by one on fresh players.
Prints one "ok ..." line per check; "FAIL: ..." on stderr and exit 1 else.
"""

import errno
import sys
import time

import pyverbs.enums as e
from pyverbs.base import inc_rkey
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR, MW, MWBind, MWBindInfo
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

from send_write import PORT, check, connect, device_name, ipv4_gid_index, ok, pattern, run

SIZE = 1024
MR_ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_MW_BIND
QP_ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
MW_ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE


class Player:
    """What pyverbs' RCResources + MWRC make: ctx, PD, CQ, MR, RC QP, window."""

    def __init__(self, name, mw_type, mr_access=MR_ACCESS):
        self.ctx = Context(name=name)
        self.gid_index, _ = ipv4_gid_index(self.ctx)
        self.gid = self.ctx.query_gid(PORT, self.gid_index)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 100, None, None, 0)
        self.mr = MR(self.pd, SIZE, mr_access)
        init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=QPCap(max_recv_wr=100))
        self.qp = QP(self.pd, init)
        self.mw = MW(self.pd, mw_type)

    def close(self):
        """Closes the window first, as MWTest.tearDown does: a region with
        windows bound to it cannot be deregistered (rxe: EINVAL, softroce
        EBUSY)."""
        self.mw.close()
        self.ctx.close()

    def poll(self, what):
        deadline = time.monotonic() + 10
        while True:
            n, wcs = self.cq.poll()
            if n:
                return wcs[0]
            check(time.monotonic() < deadline, f"{what}: no completion after 10 s")
            time.sleep(0.0005)


LIVE = []


def players(name, mw_type, mr_access=MR_ACCESS):
    """Two connected players; the previous ones are closed first."""
    while LIVE:
        LIVE.pop().close()
    a, b = Player(name, mw_type, mr_access), Player(name, mw_type, mr_access)
    LIVE.extend((a, b))
    connect(a.qp, b.qp.qp_num, a.gid, a.gid_index, QP_ACCESS)
    connect(b.qp, a.qp.qp_num, b.gid, b.gid_index, QP_ACCESS)
    return a, b


def expect_wc(p, what, status, opcode=None):
    wc = p.poll(what)
    check(wc.status == status, f"{what}: completion status {wc.status}, expected {status}")
    if opcode is not None:
        check(wc.opcode == opcode, f"{what}: completion opcode {wc.opcode}, expected {opcode}")
    return wc


def bind_type1(p, length=SIZE, access=MW_ACCESS, addr=None):
    info = MWBindInfo(p.mr, p.mr.buf if addr is None else addr, length, access)
    p.qp.bind_mw(p.mw, MWBind(info, e.IBV_SEND_SIGNALED))


def bind_type2(p, length=SIZE, access=MW_ACCESS, mw=None, qp=None):
    wr = SendWR(opcode=e.IBV_WR_BIND_MW)
    wr.set_bind_wr(mw or p.mw, MWBindInfo(p.mr, p.mr.buf, length, access))
    (qp or p.qp).post_send(wr)
    return wr.rkey


def write(src, dst, rkey, seed, what, status=e.IBV_WC_SUCCESS):
    """src WRITEs SIZE bytes into dst's buffer through `rkey`."""
    data = pattern(SIZE, seed)
    src.mr.write(data, SIZE)
    dst.mr.write(bytes(SIZE), SIZE)
    wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(src.mr.buf, SIZE, src.mr.lkey)])
    wr.set_wr_rdma(rkey, dst.mr.buf)
    src.qp.post_send(wr)
    expect_wc(src, what, status, e.IBV_WC_RDMA_WRITE if status == e.IBV_WC_SUCCESS else None)
    got = dst.mr.read(SIZE, 0)
    if status == e.IBV_WC_SUCCESS:
        check(got == data, f"{what}: the target does not hold the written bytes")
    else:
        check(got == bytes(SIZE), f"{what}: a refused WRITE changed the target")


def type1(name):
    a, b = players(name, e.IBV_MW_TYPE_1)
    old = a.mw.rkey
    bind_type1(a)
    bind_type1(b)
    for p in (a, b):
        expect_wc(p, "type 1 bind", e.IBV_WC_SUCCESS, e.IBV_WC_BIND_MW)
    check(a.mw.rkey == inc_rkey(old), f"type 1 bind: rkey {a.mw.rkey:#x}, expected ibv_inc_rkey({old:#x})")
    ok("type 1 windows bound with QP.bind_mw over LOCAL_WRITE|MW_BIND regions, the rkey's low byte moved on")
    write(a, b, b.mw.rkey, 1, "WRITE through b's type 1 window")
    write(b, a, a.mw.rkey, 2, "WRITE through a's type 1 window")
    ok("each peer WRITEs 1024 bytes through the other's type 1 window")
    # Rebinding with length 0 (and no access) invalidates a type 1 window.
    bind_type1(b, length=0, access=0)
    expect_wc(b, "type 1 unbind", e.IBV_WC_SUCCESS, e.IBV_WC_BIND_MW)
    write(a, b, b.mw.rkey, 3, "WRITE through an unbound window", e.IBV_WC_REM_ACCESS_ERR)
    ok("after a zero-length rebind the peer's WRITE completes with REM_ACCESS_ERR")


def type2(name, how):
    a, b = players(name, e.IBV_MW_TYPE_2)
    old = a.mw.rkey
    keys = {}
    for p in (a, b):
        keys[p] = bind_type2(p)
    for p in (a, b):
        expect_wc(p, "type 2 bind", e.IBV_WC_SUCCESS, e.IBV_WC_BIND_MW)
    check(keys[a] == inc_rkey(old), f"type 2 bind: key {keys[a]:#x}")
    check(a.mw.rkey == old, f"type 2 bind changed ibv_mw.rkey to {a.mw.rkey:#x} (the provider leaves it)")
    write(a, b, keys[b], 4, "WRITE through b's type 2 window")
    write(b, a, keys[a], 5, "WRITE through a's type 2 window")
    if how == "local":
        wr = SendWR(opcode=e.IBV_WR_LOCAL_INV)
        wr.imm_data = keys[b]
        b.qp.post_send(wr)
        expect_wc(b, "LOCAL_INV", e.IBV_WC_SUCCESS, e.IBV_WC_LOCAL_INV)
        write(a, b, keys[b], 6, "WRITE through a locally invalidated window", e.IBV_WC_REM_ACCESS_ERR)
        ok("type 2 windows bound with IBV_WR_BIND_MW, used by the peer, LOCAL_INV makes them refuse")
    else:
        b.qp.post_recv(RecvWR(num_sge=1, sg=[SGE(b.mr.buf, SIZE, b.mr.lkey)]))
        wr = SendWR(opcode=e.IBV_WR_SEND_WITH_INV)
        wr.imm_data = keys[b]
        a.qp.post_send(wr)
        expect_wc(a, "SEND_WITH_INV", e.IBV_WC_SUCCESS, e.IBV_WC_SEND)
        wc = expect_wc(b, "receive of SEND_WITH_INV", e.IBV_WC_SUCCESS, e.IBV_WC_RECV)
        check(wc.wc_flags & e.IBV_WC_WITH_INV, f"SEND_WITH_INV receive wc_flags {wc.wc_flags:#x}")
        # invalidated_rkey shares imm_data's place in struct ibv_wc.
        check(wc.imm_data == keys[b], f"invalidated_rkey {wc.imm_data:#x}, expected {keys[b]:#x}")
        write(a, b, keys[b], 7, "WRITE through a remotely invalidated window", e.IBV_WC_REM_ACCESS_ERR)
        ok("a SEND_WITH_INV from the peer invalidates a type 2 window (IBV_WC_WITH_INV, its key)")


def bind_errors(name):
    # C10-73: the region must allow binding.
    a, _ = players(name, e.IBV_MW_TYPE_1, mr_access=e.IBV_ACCESS_LOCAL_WRITE)
    bind_type1(a)
    expect_wc(a, "bind over a region without MW_BIND", e.IBV_WC_MW_BIND_ERR)
    # C10-74: remote write through the window needs LOCAL_WRITE on the region.
    a, _ = players(name, e.IBV_MW_TYPE_2, mr_access=e.IBV_ACCESS_MW_BIND)
    bind_type2(a)
    expect_wc(a, "REMOTE_WRITE window over a region without LOCAL_WRITE", e.IBV_WC_MW_BIND_ERR)
    # C10-75: the window lies inside the region.
    a, _ = players(name, e.IBV_MW_TYPE_1)
    bind_type1(a, length=SIZE + 1)
    expect_wc(a, "window past the region's end", e.IBV_WC_MW_BIND_ERR)
    a, _ = players(name, e.IBV_MW_TYPE_1)
    bind_type1(a, addr=a.mr.buf - 8)
    expect_wc(a, "window before the region's start", e.IBV_WC_MW_BIND_ERR)
    # o10-37.2.40: a type 2 bind needs a length.
    a, _ = players(name, e.IBV_MW_TYPE_2)
    bind_type2(a, length=0)
    expect_wc(a, "type 2 bind of length 0", e.IBV_WC_MW_BIND_ERR)
    # C10-72: a type 2 window binds only through a QP of its PD.
    a, b = players(name, e.IBV_MW_TYPE_2)
    bind_type2(a, mw=b.mw)
    expect_wc(a, "type 2 window of another PD", e.IBV_WC_MW_BIND_ERR)
    # o10-37.2.30: a bound type 2 window must be invalidated before a rebind.
    a, _ = players(name, e.IBV_MW_TYPE_2)
    bind_type2(a)
    expect_wc(a, "first type 2 bind", e.IBV_WC_SUCCESS)
    bind_type2(a)
    expect_wc(a, "second bind of a bound type 2 window", e.IBV_WC_MW_BIND_ERR)
    ok("MW_BIND_ERR for: no MW_BIND, remote write without LOCAL_WRITE, outside the region, type 2 length 0, another PD, a bound type 2 window")
    # o10-36.2.2: a type 1 window cannot be zero based (rxe's provider: EINVAL at the call).
    a, _ = players(name, e.IBV_MW_TYPE_1)
    try:
        bind_type1(a, access=MW_ACCESS | e.IBV_ACCESS_ZERO_BASED)
        check(False, "a zero-based type 1 bind was accepted")
    except PyverbsRDMAError as err:
        check(err.error_code == errno.EINVAL, f"zero-based type 1 bind: errno {err.error_code}")
    # ibv_bind_mw takes type 1 windows only.
    a, _ = players(name, e.IBV_MW_TYPE_2)
    try:
        bind_type1(a)
        check(False, "ibv_bind_mw of a type 2 window was accepted")
    except PyverbsRDMAError as err:
        check(err.error_code == errno.EINVAL, f"ibv_bind_mw of a type 2 window: errno {err.error_code}")
    ok("ibv_bind_mw: EINVAL for a zero-based type 1 window and for a type 2 window")


def main(argv):
    name = device_name(argv)
    type1(name)
    type2(name, "local")
    type2(name, "remote")
    bind_errors(name)
    while LIVE:
        LIVE.pop().close()
    return 0


if __name__ == "__main__":
    run(main)
