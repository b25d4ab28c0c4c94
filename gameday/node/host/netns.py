"""Work inside a named network namespace from a threaded process, without a fork.

pyroute2's ``IPRoute(netns=...)`` forks a child to open its socket in the namespace.
Forking a threaded process (an agent serving requests while a flap schedule runs on its
own thread) can kill that child (``Fatal Python error: init_threadstate``), which shows
up as a stuck or failed link operation. A network namespace belongs to a thread, not to
a process: :func:`in_netns` runs a call on a short-lived thread that entered
``/run/netns/NAME`` with ``setns(2)``. Sockets made there stay in that namespace after
the thread ends, and the caller's namespace is never touched.
"""

import ctypes
import ctypes.util
import os
import socket
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["LIBC", "in_netns", "route"]

CLONE_NEWNET = 0x40000000
NETLINK_ROUTE = 0
T = TypeVar("T")

#: the C library (``setns``, and ``prctl`` for the packet delayer)
LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _enter(netns: str) -> None:
    fd = os.open(f"/run/netns/{netns}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if LIBC.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"cannot enter netns {netns}: {os.strerror(err)}")
    finally:
        os.close(fd)


def in_netns(netns: str, make: Callable[[], T]) -> T:
    """``make()`` called on a thread inside ``/run/netns/NETNS``; what it raises (or an
    ``OSError`` when the namespace cannot be entered) is raised here."""
    result: list[T] = []
    errors: list[BaseException] = []

    def inside() -> None:
        try:
            _enter(netns)
            result.append(make())
        except BaseException as exc:  # handed to the caller below
            errors.append(exc)

    # the thread ends right after, and its namespace with it
    worker = threading.Thread(target=inside, name=f"netns-{netns}", daemon=True)
    worker.start()
    worker.join()
    if errors:
        raise errors[0]
    return result[0]


def route(netns: str | None = None) -> Any:
    """A pyroute2 ``IPRoute`` on the host's namespace, or on ``/run/netns/NETNS`` through
    a socket opened by :func:`in_netns` (no fork)."""
    from pyroute2 import IPRoute

    if netns is None:
        return IPRoute()
    sock = in_netns(netns, lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM,
                                                 NETLINK_ROUTE))
    return IPRoute(fileno=sock.detach())
