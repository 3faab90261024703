#!/usr/bin/python3
"""pyverbs' modules import over the libibverbs in use, and list its devices.

Usage: devices.py

Imports every pyverbs module (the verbs ones, the rdma_cm ones through
librdmacm, and the mlx5 and efa provider ones through libmlx5 and libefa,
all of which import from libibverbs), then prints:
  lib PATH                      the libibverbs.so.1 mapped in, resolved
  ok imported N pyverbs modules
  device NAME guid HEX16 ...    one line per device of get_device_list()
  ok NAME: ...                  the opened device agrees with the list
Run it with LD_BIND_NOW=1 so that a missing function fails at import.
Exits 1 with "FAIL: ..." on a mismatch.
"""

import importlib
import os
import pkgutil
import sys

import pyverbs
import pyverbs.cmid  # noqa: F401
import pyverbs.cq  # noqa: F401
import pyverbs.device
import pyverbs.providers.mlx5.mlx5dv  # noqa: F401

try:
    import pyverbs.enums as e  # pyverbs 44 and 56: module-level names
except ImportError:
    import enum as _enum
    import types as _types

    import pyverbs.libibverbs_enums as _le  # pyverbs 65: names inside enum classes

    e = _types.SimpleNamespace(
        **{
            m.name: m.value
            for cls in vars(_le).values()
            if isinstance(cls, type) and issubclass(cls, _enum.Enum)
            for m in cls
        }
    )
    # verbs.h's #define, which 65's enum module leaves out.
    e.IBV_LINK_LAYER_ETHERNET = getattr(e, "IBV_LINK_LAYER_ETHERNET", 2)
import pyverbs.qp  # noqa: F401


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def all_modules():
    """Every pyverbs extension and Python module, providers included."""
    names = [m.name for m in pkgutil.walk_packages(pyverbs.__path__, "pyverbs.")]
    root = os.path.dirname(pyverbs.__file__)
    for prov in sorted(os.listdir(os.path.join(root, "providers"))):
        d = os.path.join(root, "providers", prov)
        if not os.path.isdir(d):
            continue
        for f in sorted(os.listdir(d)):
            if f.endswith(".so") or (f.endswith(".py") and f != "__init__.py"):
                names.append(f"pyverbs.providers.{prov}.{f.split('.')[0]}")
    return names


def main():
    mods = all_modules()
    for m in mods:
        try:
            importlib.import_module(m)
        except Exception as ex:  # noqa: BLE001
            fail(f"import {m}: {ex!r}")
    libs = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            base = os.path.basename(path)
            # pyverbs 56 and later name Cython modules libibverbs*.cpython-*.so.
            if base.startswith(("libibverbs.so", "libsoftroce_ibverbs")):
                libs.add(os.path.realpath(path))
    if len(libs) != 1:
        fail(f"expected one libibverbs mapped, found {sorted(libs)}")
    print(f"lib {libs.pop()}")
    print(f"ok imported {len(mods)} pyverbs modules")

    devs = pyverbs.device.get_device_list()
    if not devs:
        fail("get_device_list() is empty")
    for d in devs:
        name = d.name.decode()
        print(f"device {name} guid {d.guid:016x} node_type {d.node_type} transport {d.transport_type} index {d.index}")
    for d in devs:
        name = d.name.decode()
        if d.node_type != e.IBV_NODE_CA or d.transport_type != e.IBV_TRANSPORT_IB:
            fail(f"{name}: node type {d.node_type}, transport {d.transport_type} (rxe says CA, IB)")
        with pyverbs.device.Context(name=name) as ctx:
            attr = ctx.query_device()
            # ibv_device_attr.node_guid is big-endian; pyverbs hands out the raw value.
            guid = int.from_bytes(attr.node_guid.to_bytes(8, "little"), "big")
            if guid != d.guid:
                fail(f"{name}: query_device node_guid {guid:016x}, list says {d.guid:016x}")
            port = ctx.query_port(1)
            if port.state != e.IBV_PORT_ACTIVE or port.link_layer != e.IBV_LINK_LAYER_ETHERNET:
                fail(f"{name}: port state {port.state}, link layer {port.link_layer}")
        print(f"ok {name}: opens; query_device node_guid matches; port 1 active on Ethernet")
    return 0


if __name__ == "__main__":
    sys.exit(main())
