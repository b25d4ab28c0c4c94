"""A userspace packet delayer on a netfilter queue (``libnetfilter_queue``, through ctypes).

Packet rules send the packets a ``net.latency`` fault slows to queue ``N``
(nftables ``queue num N bypass`` or iptables ``-j NFQUEUE --queue-num N
--queue-bypass``). The kernel keeps each queued packet and hands the delayer only its
metadata (``NFQNL_COPY_META``: no payload is copied); the delayer notes when it arrived,
draws its hold (:class:`gameday.node.delays.DelaySampler`) and accepts it when the hold
is over. Packets leave in the order they arrived (a release is never earlier than the
one before it), so a delay with jitter slows a flow without reordering it, and one
``nfq_set_verdict_batch`` releases every packet that is due.

A sleeping thread wakes late (tens of microseconds here, more for longer sleeps), and
that lateness would be added to every hold: the delayer's thread asks for a 1 µs timer
slack, wakes early by the lateness it has seen (a moving average, at most 0.3 ms) and
waits out the rest of the hold on the clock. A packet is never released before its hold
is over.

It fails open, never closed: with ``bypass`` a queue nobody listens on passes packets
unheld (the agent died: the traffic flows at its normal speed until the lease reverts
the rules), and a full queue (``NFQA_CFG_F_FAIL_OPEN``) accepts what it cannot hold.
:meth:`Delayer.stop` releases every packet still held, at once, before it unbinds.

The queue is bound from a thread inside the target network namespace
(:func:`gameday.node.host.netns.in_netns`), since a netlink socket belongs to the
namespace it was made in.
"""

import collections
import ctypes
import ctypes.util
import errno
import os
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from gameday.errors import FaultRejected
from gameday.node.delays import DelaySampler
from gameday.node.host.netns import LIBC, in_netns

__all__ = ["Delayer", "DelayerStats", "bound_queues", "nfqueue_unavailable"]

log = structlog.get_logger("gameday.node.host.nfqueue")

NFQNL_COPY_META = 1
NFQA_CFG_F_FAIL_OPEN = 1
NF_ACCEPT = 1
QUEUE_MAXLEN = 65536
RCVBUF = 8 << 20
SO_RCVBUFFORCE = 33  # as SO_RCVBUF, past the system limit (root); not in socket
PR_SET_TIMERSLACK = 29
#: The delayer thread's timer slack: the kernel may fire its wake-ups this late to
#: coalesce them (50 us by default), which would add to every packet's hold.
TIMER_SLACK_NS = 1000
#: A release is never spun for longer than this (the rest of a wait is a sleep).
SPIN_MAX_S = 0.0003
LIBRARY = "libnetfilter_queue.so.1"
#: the calling thread's namespace's queues (``/proc/net`` is the main thread's)
PROC_QUEUES = "/proc/thread-self/net/netfilter/nfnetlink_queue"

_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.c_void_p)


class _PacketHeader(ctypes.BigEndianStructure):
    _pack_ = 1
    _fields_ = [("packet_id", ctypes.c_uint32), ("hw_protocol", ctypes.c_uint16),
                ("hook", ctypes.c_uint8)]


_lib: Any = None


def _library() -> Any:
    """libnetfilter_queue, its functions typed; OSError when it is not installed."""
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(ctypes.util.find_library("netfilter_queue") or LIBRARY,
                          use_errno=True)
        lib.nfq_open.restype = ctypes.c_void_p
        lib.nfq_close.argtypes = [ctypes.c_void_p]
        lib.nfq_create_queue.restype = ctypes.c_void_p
        lib.nfq_create_queue.argtypes = [ctypes.c_void_p, ctypes.c_uint16, _CALLBACK,
                                         ctypes.c_void_p]
        lib.nfq_destroy_queue.argtypes = [ctypes.c_void_p]
        lib.nfq_set_mode.argtypes = [ctypes.c_void_p, ctypes.c_uint8, ctypes.c_uint32]
        lib.nfq_set_queue_maxlen.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
        lib.nfq_set_queue_flags.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32]
        lib.nfq_fd.argtypes = [ctypes.c_void_p]
        lib.nfq_handle_packet.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        lib.nfq_get_msg_packet_hdr.restype = ctypes.POINTER(_PacketHeader)
        lib.nfq_get_msg_packet_hdr.argtypes = [ctypes.c_void_p]
        lib.nfq_set_verdict_batch.argtypes = [ctypes.c_void_p, ctypes.c_uint32,
                                              ctypes.c_uint32]
        _lib = lib
    return _lib


def nfqueue_unavailable() -> str | None:
    """Why a userspace delayer cannot run here, or None."""
    try:
        _library()
    except OSError:
        return f"{LIBRARY} is not installed (apt-get install libnetfilter-queue1)"
    if not os.path.exists(PROC_QUEUES):
        return "the kernel has no nfnetlink_queue (modprobe nfnetlink_queue)"
    if os.geteuid() != 0:
        return "binding a netfilter queue needs root (CAP_NET_ADMIN)"
    return None


def bound_queues() -> set[int]:
    """The queue numbers some process has bound in the calling thread's namespace."""
    try:
        with open(PROC_QUEUES) as lines:
            return {int(line.split()[0]) for line in lines if line.strip()}
    except OSError:
        return set()


@dataclass
class _Lateness:
    """How late this host wakes a sleeping thread (a moving average of what was seen,
    at most ``SPIN_MAX_S``): the delayer wakes that much early, then waits out the rest
    of a hold on the clock, so the wake-up's lateness is not added to every packet."""

    estimate: float = 0.0

    def woke(self, asked: float) -> float:
        """Note a wake-up asked for ``asked`` (monotonic time); the time now."""
        now = time.monotonic()
        late = now - asked  # how late the sleep itself ended
        self.estimate = min(SPIN_MAX_S, max(0.0, 0.9 * self.estimate + 0.1 * late))
        return now


@dataclass
class DelayerStats:
    """What a delayer has done: packets held and released, its CPU time."""

    packets: int = 0
    released: int = 0
    max_held: int = 0
    overruns: int = 0  # receive-buffer overruns (the kernel accepted those packets)
    cpu_s: float = 0.0

    def to_json(self) -> dict[str, float | int]:
        out = dict(self.__dict__)
        out["cpu_s"] = round(self.cpu_s, 6)
        if self.packets:
            out["cpu_us_per_packet"] = round(self.cpu_s / self.packets * 1e6, 2)
        return out


class Delayer:
    """Holds each packet of queue ``queue`` for ``sampler.draw()`` seconds, in order."""

    def __init__(self, queue: int, sampler: DelaySampler, netns: str | None = None) -> None:
        self.queue = queue
        self.sampler = sampler
        self.netns = netns
        self.stats = DelayerStats()
        self._held: collections.deque[tuple[float, int]] = collections.deque()
        self._late = _Lateness()
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        self._callback = _CALLBACK(self._on_packet)  # kept: the library holds a pointer
        self._handle: int | None = None
        self._qh: int | None = None
        self._thread: threading.Thread | None = None

    # -- binding -----------------------------------------------------------------------
    def _bind(self) -> tuple[int, int]:
        lib = _library()
        handle = lib.nfq_open()
        if not handle:
            raise FaultRejected(f"nfq_open: {os.strerror(ctypes.get_errno())}")
        qh = lib.nfq_create_queue(handle, self.queue, self._callback, None)
        if not qh:
            lib.nfq_close(handle)
            raise FaultRejected(f"netfilter queue {self.queue} is taken (bound by another "
                                f"process)")
        if (lib.nfq_set_mode(qh, NFQNL_COPY_META, 0) < 0
                or lib.nfq_set_queue_maxlen(qh, QUEUE_MAXLEN) < 0):
            lib.nfq_destroy_queue(qh)
            lib.nfq_close(handle)
            raise FaultRejected(f"netfilter queue {self.queue}: cannot configure it")
        lib.nfq_set_queue_flags(qh, NFQA_CFG_F_FAIL_OPEN, NFQA_CFG_F_FAIL_OPEN)
        sock = socket.socket(fileno=os.dup(lib.nfq_fd(handle)))
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        finally:
            sock.close()
        return int(handle), int(qh)

    def start(self) -> "Delayer":
        """Bind the queue (in the namespace) and start holding; FaultRejected if the
        queue cannot be bound."""
        bind: Callable[[], tuple[int, int]] = self._bind
        self._handle, self._qh = in_netns(self.netns, bind) if self.netns else bind()
        self._thread = threading.Thread(target=self._run, name=f"delayer-{self.queue}",
                                        daemon=True)
        self._thread.start()
        log.info("delayer_started", queue=self.queue, netns=self.netns,
                 delay_s=self.sampler.delay_s, jitter_s=self.sampler.jitter_s)
        return self

    # -- the loop ------------------------------------------------------------------------
    def _on_packet(self, qh: int, nfmsg: int, nfad: int, data: int) -> int:
        header = _library().nfq_get_msg_packet_hdr(nfad)
        if not header:
            return 0
        release = self.sampler.release_at(time.monotonic())
        self._held.append((release, header.contents.packet_id))
        self.stats.packets += 1
        self.stats.max_held = max(self.stats.max_held, len(self._held))
        return 0

    def _release_due(self, now: float) -> None:
        last = None
        while self._held and self._held[0][0] <= now:
            last = self._held.popleft()[1]
            self.stats.released += 1
        if last is not None:
            _library().nfq_set_verdict_batch(self._qh, last, NF_ACCEPT)

    def _run(self) -> None:
        LIBC.prctl(PR_SET_TIMERSLACK, TIMER_SLACK_NS, 0, 0, 0)  # this thread's own
        lib = _library()
        sock = socket.socket(fileno=os.dup(lib.nfq_fd(self._handle)))
        buf = ctypes.create_string_buffer(65536)
        started = time.thread_time()
        try:
            while not self._stop.is_set():
                due = self._held[0][0] if self._held else None
                wake = None if due is None else due - self._late.estimate
                timeout = None if wake is None else max(0.0, wake - time.monotonic())
                ready, _, _ = select.select([sock.fileno(), self._wake_r], [], [], timeout)
                if sock.fileno() in ready:
                    self._drain_socket(lib, sock, buf)
                elif wake is not None and due is not None:
                    now = self._late.woke(wake)
                    while now < due and due - now < SPIN_MAX_S:  # the last few microseconds
                        now = time.monotonic()
                self._release_due(time.monotonic())
                self.stats.cpu_s = time.thread_time() - started
        finally:
            self._release_due(float("inf"))  # whatever is still held leaves now
            self.stats.cpu_s = time.thread_time() - started
            sock.close()

    def _drain_socket(self, lib: Any, sock: socket.socket, buf: Any) -> None:
        """Every message waiting on the socket, without blocking."""
        while True:
            try:
                size = sock.recv_into(buf, len(buf), socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:  # the kernel accepted what did not fit
                    self.stats.overruns += 1
                    continue
                raise
            lib.nfq_handle_packet(self._handle, buf, size)

    # -- ending --------------------------------------------------------------------------
    def stop(self) -> DelayerStats:
        """Release every held packet, unbind the queue, end the thread (idempotent)."""
        if self._stop.is_set():
            return self.stats
        self._stop.set()
        os.write(self._wake_w, b"x")
        if self._thread is not None:
            self._thread.join(timeout=5)
        lib = _library()
        if self._qh is not None:
            lib.nfq_destroy_queue(self._qh)
        if self._handle is not None:
            lib.nfq_close(self._handle)
        self._qh = self._handle = None
        os.close(self._wake_r)
        os.close(self._wake_w)
        log.info("delayer_stopped", queue=self.queue, **self.stats.to_json())
        return self.stats
