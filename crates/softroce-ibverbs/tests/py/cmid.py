#!/usr/bin/python3
"""pyverbs' CMID over softroce's librdmacm: synchronous endpoints.

Usage: cmid.py [DEVICE]   (the device's address is found from its GID)

A server process (forked, as pyverbs' own rdmacm tests do) makes a passive
endpoint from an AddrInfo, listens, takes the request with get_request and
accepts it; the client makes an active endpoint and connects. The client
SENDs a message, and the server answers with a SEND of its own, then
disconnects. Prints one "ok ..." line per
check; on a failure prints "FAIL: ..." to stderr and exits 1.
"""

import os
import sys
from multiprocessing import Event, Process, Queue

import pyverbs.cm_enums as ce
import pyverbs.enums as e
from pyverbs.cmid import CMID, AddrInfo
from pyverbs.device import Context, get_device_list
from pyverbs.qp import QPCap, QPInitAttr

PORT = str(20000 + os.getpid() % 20000)


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def device_addr(name):
    """The IPv4 address of the device's RoCE v2 GID."""
    for dev in get_device_list():
        if name and dev.name.decode() != name:
            continue
        with Context(name=dev.name.decode()) as ctx:
            for i in range(ctx.query_port(1).gid_tbl_len):
                gid = str(ctx.query_gid(1, i))
                if gid.startswith("0000:0000:0000:0000:0000:ffff:"):
                    h = gid.split(":")[-2:]
                    b = bytes.fromhex(h[0] + h[1])
                    return ".".join(str(x) for x in b)
    fail(f"no IPv4 GID on {name}")


def attr():
    cap = QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
    return QPInitAttr(qp_type=e.IBV_QPT_RC, cap=cap, sq_sig_all=1)


def server(addr, ready, out):
    ai = AddrInfo(src=addr, src_service=PORT, port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE)
    listen = CMID(creator=ai, qp_init_attr=attr())
    listen.listen()
    ready.set()
    conn = listen.get_request()
    mr = conn.reg_msgs(64)
    conn.post_recv(mr, 64)
    conn.accept()
    conn.get_recv_comp()
    got = bytes(mr.read(13, 0))
    mr.write(b"pong from cmid", 14)
    conn.post_send(mr, 0, 14)
    conn.get_send_comp()
    out.put(got)
    conn.disconnect()


def main():
    addr = device_addr(sys.argv[1] if len(sys.argv) > 1 else None)
    ready, out = Event(), Queue()
    p = Process(target=server, args=(addr, ready, out))
    p.start()
    if not ready.wait(20):
        fail("the server did not listen")
    print("ok server listens on a synchronous endpoint")
    ai = AddrInfo(src=None, dst=addr, dst_service=PORT, port_space=ce.RDMA_PS_TCP)
    c = CMID(creator=ai, qp_init_attr=attr())
    mr = c.reg_msgs(64)
    c.post_recv(mr, 64)
    c.connect()
    print("ok client connected")
    mr.write(b"ping via cmid", 13)
    c.post_send(mr, 0, 13)
    c.get_send_comp()
    c.get_recv_comp()
    if bytes(mr.read(14, 0)) != b"pong from cmid":
        fail(f"the client got {bytes(mr.read(14, 0))!r}")
    print("ok client got the server's answer")
    got = out.get(timeout=20)
    if got != b"ping via cmid":
        fail(f"the server got {got!r}")
    print("ok server got the client's message")
    p.join(20)
    if p.exitcode != 0:
        fail(f"the server exited with {p.exitcode}")
    print("ok server exited 0")


main()
