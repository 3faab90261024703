#!/usr/bin/python3
"""fork() with open verbs objects, with pyverbs.

Usage: fork.py [DEVICE]   (default: the first device)
       fork.py DEVICE --busy N

Calls ibv_fork_init (pyverbs.fork), opens a context, PD, CQ and two
connected RC QPs (send_write.Pair) and completes a SEND; then forks three
times while they are open:
  - the first child lists the devices and leaves with os._exit(0), as a
    child that goes on to exec would;
  - the second child lists the devices and exits the ordinary way, so
    Python's teardown destroys the inherited QPs, CQ, MRs, PD and context
    in the child;
  - the third child opens the device again: it joins the host's shared
    device as a process of its own (not the parent's context, whose driver
    thread it lacks), gets QP numbers unlike the parent's and completes a
    SEND on QPs of its own.
Each child must exit 0 within CHILD_SECONDS (it is killed otherwise). The
parent then completes another SEND and an RDMA WRITE on the same QPs.
Prints one "ok ..." line per check; exits 1 with "FAIL: ..." otherwise.
With --busy N, see main_busy.
"""

import os
import signal
import sys
import time

import pyverbs.enums as e
import pyverbs.fork
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.wr import SGE, SendWR

from send_write import ACCESS, Failure, Pair, check, device_name, ok, run

CHILD_SECONDS = 20
# ibv_is_fork_initialized: DISABLED 0, ENABLED 1, UNNEEDED 2.
FORK_STATUS = {0: "IBV_FORK_DISABLED", 1: "IBV_FORK_ENABLED", 2: "IBV_FORK_UNNEEDED"}


def list_in_child(name):
    """The child's work: the device list must still hold `name`. Returns an exit code."""
    try:
        names = [d.name.decode() for d in get_device_list()]
    except Exception as err:  # noqa: BLE001  (any failure is the child's answer)
        print(f"FAIL: child: get_device_list: {err}", file=sys.stderr, flush=True)
        return 1
    if name not in names:
        print(f"FAIL: child: {name} not in {names}", file=sys.stderr, flush=True)
        return 1
    return 0


def open_in_child(parent_qpns):
    """The child's work when it opens the device itself: a Pair of its own
    whose QPNs are not the parent's, and a SEND between them."""

    def work(name):
        pair = Pair(name)
        mine = {qp.qp_num for qp in pair.qps}
        check(not mine & parent_qpns, f"child QPNs {sorted(mine)} overlap the parent's {sorted(parent_qpns)}")
        ok(f"child opens {name} itself and gets QP numbers of its own")
        pair.send(seed=7, tag="child: send")
        return 0

    return work


def fork_child(name, how, work=list_in_child, seconds=CHILD_SECONDS):
    """Forks; the child runs `work(name)` and exits `how` ("_exit" or "exit")
    with its result, within `seconds`."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            code = work(name)
        except BaseException as ex:  # noqa: BLE001  (never run the parent's code in the child)
            print(f"FAIL: child: {ex!r}", flush=True)
            code = 1
        if how == "_exit":
            os._exit(code)
        # The ordinary way out: SystemExit unwinds main()'s frame, so the
        # inherited pyverbs objects are destroyed here, in the child.
        sys.exit(code)
    deadline = time.monotonic() + seconds
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise Failure(f"child ({how}) still running after {seconds} s: killed (a hang after fork)")
        time.sleep(0.01)
    if os.WIFSIGNALED(status):
        raise Failure(f"child ({how}) died of signal {os.WTERMSIG(status)}")
    check(os.WEXITSTATUS(status) == 0, f"child ({how}) exited {os.WEXITSTATUS(status)}")


def main(argv):
    name = device_name(argv)
    pyverbs.fork.fork_init()
    status = pyverbs.fork.is_fork_initialized()
    check(status == 2, f"is_fork_initialized() = {FORK_STATUS.get(status, status)}, not IBV_FORK_UNNEEDED")
    ok("fork_init, is_fork_initialized IBV_FORK_UNNEEDED")
    pair = Pair(name)
    pair.send(seed=5, tag="before fork: send")
    fork_child(name, "_exit")
    ok(f"child with open qps lists {name} and leaves with os._exit(0)")
    fork_child(name, "exit")
    ok(f"child with open qps lists {name}, tears them down and exits 0")
    fork_child(name, "exit", open_in_child({qp.qp_num for qp in pair.qps}))
    ok(f"child with its own context on {name} exits 0")
    pair.send(seed=9, tag="after fork: send")
    pair.write(seed=13)
    return 0


def main_busy(argv):
    """fork.py DEVICE --busy N: N children forked while a 1 MiB RDMA WRITE is
    in flight (the device's driver thread busy with its packets), each
    tearing down the inherited objects; none may hang."""
    name, n = argv[1], int(argv[3])
    pair = Pair(name)
    big = 1 << 20
    src, dst = MR(pair.pd, big, ACCESS), MR(pair.pd, big, ACCESS)
    for i in range(n):
        wid = pair.next_id()
        wr = SendWR(
            wr_id=wid,
            opcode=e.IBV_WR_RDMA_WRITE,
            num_sge=1,
            sg=[SGE(src.buf, big, src.lkey)],
            send_flags=e.IBV_SEND_SIGNALED,
        )
        wr.set_wr_rdma(dst.rkey, dst.buf)
        pair.qps[0].post_send(wr)
        try:
            fork_child(name, "exit", lambda _name: 0, seconds=5)
        except Failure as err:
            raise Failure(f"fork {i + 1} of {n}: {err}") from None
        wc = pair.poll({wid})[wid]
        check(wc.status == e.IBV_WC_SUCCESS, f"fork {i + 1} of {n}: the WRITE completed with status {wc.status}")
    ok(f"{n} children forked mid-transfer tore down without hanging; every WRITE completed")
    return 0


if __name__ == "__main__":
    run(main_busy if "--busy" in sys.argv else main)
