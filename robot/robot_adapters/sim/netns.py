"""Private test network for simulators that need their own address (Tello SDK simulator).

Why: djitellopy binds its control socket to ``("", 8889)`` (wildcard, no SO_REUSEADDR) and sends
commands to ``(host, 8889)``; a simulator on the same network stack cannot bind ``8889`` on any
local address (127.0.0.2 included: Linux refuses a specific bind on a port already bound on the
wildcard, EADDRINUSE, unless *both* sockets set SO_REUSEADDR). So the client and the simulator
live in two network namespaces that this module creates, joined by a veth pair with addresses
from 10.200.0.0/16 that exist *only inside those namespaces*: the traffic never reaches the
host's interfaces or any other machine.

Sockets keep the namespace they were created in, so one process can host both ends: a thread
enters a namespace with ``setns(2)`` (``run_in_netns``), creates its sockets and leaves; the
sockets then work from any thread. Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and ``ip``
(iproute2). ``available()`` says whether this machine can do it; tests skip otherwise.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import subprocess
import threading
from typing import Any, Callable, TypeVar

T = TypeVar("T")
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True, timeout=10)


def available() -> bool:
    """True when namespaces can be created here (root + iproute2)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    name = f"tfprobe{os.getpid()}"
    try:
        _ip("netns", "add", name)
    except (subprocess.SubprocessError, OSError):
        return False
    _ip("netns", "del", name, check=False)
    return True


def run_in_netns(name: str, fn: Callable[[], T], timeout: float = 30.0) -> T:
    """Run ``fn`` in a fresh thread that first enters network namespace ``name``.

    Threads started by ``fn`` inherit the namespace; sockets it creates stay in it."""
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            fd = os.open(f"/var/run/netns/{name}", os.O_RDONLY)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns({name}): {os.strerror(err)}")
            finally:
                os.close(fd)
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            box["error"] = e

    t = threading.Thread(target=body, name=f"netns-{name}", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise TimeoutError(f"run_in_netns({name}) did not finish in {timeout} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")  # type: ignore[return-value]


class TestNetwork:
    """Two namespaces (client, sim) joined by a veth pair.

    ``client_ip`` is the client's address; ``sim_ips`` are the simulator addresses (one per
    simulated drone). All in 10.200.<subnet>.0/24, assigned only inside the namespaces.
    Use as a context manager; ``close()`` deletes both namespaces (and with them the veth).
    """

    __test__ = False  # not a pytest test class

    def __init__(self, tag: str | None = None, subnet: int | None = None, n_sims: int = 1) -> None:
        tag = tag or str(os.getpid() % 100000)
        self.client_ns = f"tfc{tag}"
        self.sim_ns = f"tfs{tag}"
        self._veth_c = f"tfvc{tag}"[:15]
        self._veth_s = f"tfvs{tag}"[:15]
        sub = subnet if subnet is not None else (os.getpid() % 250) + 1
        self.client_ip = f"10.200.{sub}.1"
        self.sim_ips = [f"10.200.{sub}.{10 + i}" for i in range(n_sims)]
        self._up = False

    def __enter__(self) -> "TestNetwork":
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        self.close()  # leftovers of a crashed run with the same tag
        try:
            _ip("netns", "add", self.client_ns)
            _ip("netns", "add", self.sim_ns)
            _ip("link", "add", self._veth_c, "type", "veth", "peer", "name", self._veth_s)
            _ip("link", "set", self._veth_c, "netns", self.client_ns)
            _ip("link", "set", self._veth_s, "netns", self.sim_ns)
            _ip("-n", self.client_ns, "addr", "add", f"{self.client_ip}/24", "dev", self._veth_c)
            for ip in self.sim_ips:
                _ip("-n", self.sim_ns, "addr", "add", f"{ip}/24", "dev", self._veth_s)
            for ns, dev in ((self.client_ns, self._veth_c), (self.sim_ns, self._veth_s)):
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "link", "set", dev, "up")
            self._up = True
        except subprocess.CalledProcessError as e:
            self.close()
            raise RuntimeError(f"cannot create test network: {e.stderr.strip()}") from e

    def close(self) -> None:
        for ns in (self.client_ns, self.sim_ns):
            _ip("netns", "del", ns, check=False)
        _ip("link", "del", self._veth_c, check=False)
        self._up = False

    def in_client(self, fn: Callable[[], T], timeout: float = 30.0) -> T:
        return run_in_netns(self.client_ns, fn, timeout)

    def in_sim(self, fn: Callable[[], T], timeout: float = 30.0) -> T:
        return run_in_netns(self.sim_ns, fn, timeout)
