#!/usr/bin/python3
"""A SEND and an RDMA WRITE between two RC QPs of one process, with pyverbs.

Usage: send_write.py [DEVICE]   (default: the first device)

Opens the device, finds its IPv4 (RoCE v2) GID by walking the GID table,
registers memory, creates one CQ and two RC QPs on it, connects the QPs to
each other through that GID, then completes a SEND and an RDMA WRITE.
Prints one "ok ..." line per check; on any failure prints "FAIL: ..." to
stderr and exits 1. fork.py imports the helpers below.
"""

import sys
import time

import pyverbs  # noqa: F401  (the package itself must import)
import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

PORT = 1
# Bigger than the path MTU below: every message is several packets.
MSG = 5000
BUF = 8192
POLL_SECONDS = 10
ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


class Failure(Exception):
    """A check that did not hold."""


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def ok(msg):
    print("ok " + msg, flush=True)


def pattern(n, seed):
    return bytes((i * 7 + seed) & 0xFF for i in range(n))


def device_name(argv):
    if len(argv) > 1:
        return argv[1]
    devs = get_device_list()
    check(devs, "no RDMA device")
    return devs[0].name.decode()


def gid_str_to_ipv4(s):
    """'0000:...:ffff:7f00:0005' -> '127.0.0.5', or None if not IPv4-mapped."""
    h = s.replace(":", "")
    if len(h) != 32 or h[:20] != "0" * 20 or h[20:24] != "ffff":
        return None
    return ".".join(str(int(h[24 + 2 * i : 26 + 2 * i], 16)) for i in range(4))


def ipv4_gid_index(ctx):
    """The first RoCE v2 GID holding an IPv4-mapped address: (index, ipv4)."""
    n = ctx.query_port(PORT).gid_tbl_len
    for i in range(n):
        try:
            ent = ctx.query_gid_ex(PORT, i)
        except PyverbsError:
            continue  # an empty slot (ENODATA)
        if ent.gid_type != e.IBV_GID_TYPE_ROCE_V2:
            continue
        v4 = gid_str_to_ipv4(ent.gid_str())
        if v4 is None:
            continue
        check(ent.gid_index == i and ent.port_num == PORT, f"gid entry {i} names index {ent.gid_index}")
        # ibv_query_gid must agree with the extended query.
        plain = str(ctx.query_gid(PORT, i))
        check(plain == ent.gid_str(), f"query_gid({i}) = {plain}, query_gid_ex = {ent.gid_str()}")
        return i, v4
    raise Failure(f"no IPv4 RoCE v2 GID in {n} entries")


def connect(qp, dest_qpn, gid, gid_index, access=ACCESS):
    """Moves RC (or UC) QP `qp` to RTS towards QP `dest_qpn` through GID `gid`."""
    a = QPAttr(qp_state=e.IBV_QPS_INIT)
    a.pkey_index = 0
    a.port_num = PORT
    a.qp_access_flags = access
    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
    a = QPAttr(qp_state=e.IBV_QPS_RTR)
    a.path_mtu = e.IBV_MTU_1024
    a.dest_qp_num = dest_qpn
    a.rq_psn = 0x1000 + dest_qpn
    a.max_dest_rd_atomic = 1
    a.min_rnr_timer = 1
    gr = GlobalRoute(dgid=gid, sgid_index=gid_index, hop_limit=64)
    a.ah_attr = AHAttr(gr=gr, is_global=1, port_num=PORT)
    rc = qp.qp_type == e.IBV_QPT_RC
    mask = e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN
    if rc:
        mask |= e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER
    qp.modify(a, mask)
    a = QPAttr(qp_state=e.IBV_QPS_RTS)
    a.sq_psn = 0x1000 + qp.qp_num
    a.timeout = 14
    a.retry_cnt = 7
    a.rnr_retry = 7
    a.max_rd_atomic = 1
    mask = e.IBV_QP_STATE | e.IBV_QP_SQ_PSN
    if rc:
        mask |= e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY | e.IBV_QP_MAX_QP_RD_ATOMIC
    qp.modify(a, mask)


class Pair:
    """One context, PD, CQ and MR per side, and two RC QPs connected to each other."""

    def __init__(self, name):
        self.ctx = Context(name=name)
        self.gid_index, self.ipv4 = ipv4_gid_index(self.ctx)
        self.gid = self.ctx.query_gid(PORT, self.gid_index)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 64)
        self.mrs = [MR(self.pd, BUF, ACCESS) for _ in range(2)]
        cap = QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=1, max_recv_sge=1)
        init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap, sq_sig_all=0)
        self.qps = [QP(self.pd, init) for _ in range(2)]
        for qp, peer in ((self.qps[0], self.qps[1]), (self.qps[1], self.qps[0])):
            self.connect(qp, peer.qp_num)
        for qp in self.qps:
            check(qp.qp_state == e.IBV_QPS_RTS, f"QP {qp.qp_num} in state {qp.qp_state}, not RTS")
        self.wr_id = 0

    def connect(self, qp, dest_qpn):
        connect(qp, dest_qpn, self.gid, self.gid_index)

    def next_id(self):
        self.wr_id += 1
        return self.wr_id

    def poll(self, want):
        """Polls the CQ until the completions with the wr_ids in `want` arrive."""
        got = {}
        deadline = time.monotonic() + POLL_SECONDS
        while len(got) < len(want):
            n, wcs = self.cq.poll(num_entries=4)
            for wc in wcs[:n]:
                check(wc.wr_id in want, f"unexpected completion wr_id {wc.wr_id} (status {wc.status})")
                check(wc.wr_id not in got, f"two completions for wr_id {wc.wr_id}")
                got[wc.wr_id] = wc
            if n == 0:
                check(time.monotonic() < deadline, f"no completion for {sorted(set(want) - set(got))} after 10 s")
                time.sleep(0.0005)
        return got

    def send(self, seed, tag="send"):
        """qps[0] SENDs MSG bytes into qps[1]'s receive buffer; checks both ends."""
        src, dst = self.mrs
        data = pattern(MSG, seed)
        src.write(data, MSG)
        dst.write(bytes(BUF), BUF)
        rid = self.next_id()
        self.qps[1].post_recv(RecvWR(wr_id=rid, num_sge=1, sg=[SGE(dst.buf, BUF, dst.lkey)]))
        sid = self.next_id()
        wr = SendWR(
            wr_id=sid,
            opcode=e.IBV_WR_SEND,
            num_sge=1,
            sg=[SGE(src.buf, MSG, src.lkey)],
            send_flags=e.IBV_SEND_SIGNALED,
        )
        self.qps[0].post_send(wr)
        wcs = self.poll({rid, sid})
        r, s = wcs[rid], wcs[sid]
        check(s.status == e.IBV_WC_SUCCESS, f"{tag}: send completion status {s.status}")
        check(s.opcode == e.IBV_WC_SEND, f"{tag}: send completion opcode {s.opcode}")
        check(s.qp_num == self.qps[0].qp_num, f"{tag}: send completion on QP {s.qp_num}")
        ok(f"{tag} completion status success opcode IBV_WC_SEND")
        check(r.status == e.IBV_WC_SUCCESS, f"{tag}: receive completion status {r.status}")
        check(r.opcode == e.IBV_WC_RECV, f"{tag}: receive completion opcode {r.opcode}")
        check(r.byte_len == MSG, f"{tag}: receive completion byte_len {r.byte_len}, sent {MSG}")
        check(r.qp_num == self.qps[1].qp_num, f"{tag}: receive completion on QP {r.qp_num}")
        check(r.src_qp == self.qps[0].qp_num, f"{tag}: receive completion src_qp {r.src_qp}")
        ok(f"{tag} receive completion byte_len {MSG} opcode IBV_WC_RECV")
        got = dst.read(BUF, 0)
        check(got[:MSG] == data, f"{tag}: received bytes differ from the sent ones (first bytes {got[:16].hex()})")
        check(got[MSG:] == bytes(BUF - MSG), f"{tag}: bytes past the message were written")
        ok(f"{tag} received {MSG} bytes intact")

    def write(self, seed, offset=512):
        """qps[0] RDMA WRITEs MSG bytes at `offset` of qps[1]'s MR; checks the target."""
        src, dst = self.mrs
        data = pattern(MSG, seed)
        src.write(data, MSG)
        dst.write(bytes(BUF), BUF)
        wid = self.next_id()
        wr = SendWR(
            wr_id=wid,
            opcode=e.IBV_WR_RDMA_WRITE,
            num_sge=1,
            sg=[SGE(src.buf, MSG, src.lkey)],
            send_flags=e.IBV_SEND_SIGNALED,
        )
        wr.set_wr_rdma(dst.rkey, dst.buf + offset)
        self.qps[0].post_send(wr)
        wc = self.poll({wid})[wid]
        check(wc.status == e.IBV_WC_SUCCESS, f"write completion status {wc.status}")
        check(wc.opcode == e.IBV_WC_RDMA_WRITE, f"write completion opcode {wc.opcode}")
        check(wc.qp_num == self.qps[0].qp_num, f"write completion on QP {wc.qp_num}")
        ok("write completion status success opcode IBV_WC_RDMA_WRITE")
        got = dst.read(BUF, 0)
        check(got[offset : offset + MSG] == data, "write: target bytes differ from the written ones")
        outside = got[:offset] + got[offset + MSG :]
        check(outside == bytes(BUF - MSG), "write: bytes outside the target range changed")
        # A WRITE consumes no receive and makes no completion on the target.
        n, _ = self.cq.poll(num_entries=1)
        check(n == 0, "write: a completion appeared on the target side")
        ok(f"write target holds {MSG} bytes at offset {offset}")


def main(argv):
    name = device_name(argv)
    pair = Pair(name)
    ok(f"device {name} gid index {pair.gid_index} is ::ffff:{pair.ipv4} (RoCE v2)")
    ok("rc qps connected to each other, both in RTS")
    pair.send(seed=3)
    pair.write(seed=11)
    return 0


def run(main_fn):
    try:
        sys.exit(main_fn(sys.argv))
    except (Failure, PyverbsError) as err:
        print(f"FAIL: {err}", file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    run(main)
