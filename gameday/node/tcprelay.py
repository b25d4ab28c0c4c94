"""A TCP relay whose traffic can be impaired: cut, held, lossy or slowed.

The lab's node links (an HTTP ``CONNECT`` tunnel per connection, ``tunnel=True``) and
the host's service proxy (a fixed upstream) are both a :class:`Relay`. Faults add
:class:`Impairment` values under a key (the fault id) and lift them by key; the relay
applies their combination to every chunk it forwards:

- ``down``: the link is cut. Every open connection is reset (RST) and new ones are
  reset as soon as they are accepted;
- ``hold``: nothing passes (a blackhole, a stalled service). Connections stay open and
  data waits; lifting the hold lets it through, as TCP would retransmit it. With
  ``hold_s``, a connection held that long is reset (a proxy giving up);
- ``loss``: each chunk is lost with this probability and retransmitted after a TCP
  retransmission timeout (200 ms, doubling per consecutive loss up to 120 s), so loss
  shows as latency, as it does on a real network;
- ``delay_s``: added once per request: before the first chunk sent towards the upstream
  after data came back from it (request/response protocols: once per request);
  ``samplers`` add each one's draw (:class:`gameday.node.delays.DelaySampler`: a delay
  varied by its jitter) to it, drawn anew for each request.

Waits end early when the impairment that caused them is lifted. Connections are served
by two threads each (one per direction).

:meth:`Relay.drain` ends a relay without cutting what is in flight: it lifts every
impairment and closes each connection (FIN, not RST) once it is quiet with its last
bytes gone towards the client (the answer to the last request came back); what is
still busy at the drain's deadline is reset. :meth:`Relay.stop` resets at once.
"""

import contextlib
import random
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import structlog

from gameday.node.delays import DelaySampler

__all__ = ["RTO_MAX_S", "RTO_MIN_S", "Impairment", "Relay", "RelayStats"]

log = structlog.get_logger("gameday.node.tcprelay")

RTO_MIN_S = 0.2
RTO_MAX_S = 120.0
CHUNK = 65536
MAX_CONNECT_HEAD = 8192


@dataclass(frozen=True)
class Impairment:
    down: bool = False
    hold: bool = False
    loss: float = 0.0
    delay_s: float = 0.0
    hold_s: float | None = None  # a hold longer than this cuts the connection
    samplers: tuple[DelaySampler, ...] = ()

    def draw_delay(self) -> float:
        """This request's added delay: ``delay_s`` plus a draw of each sampler."""
        return self.delay_s + sum(sampler.draw() for sampler in self.samplers)

    @property
    def delays(self) -> bool:
        return self.delay_s > 0 or bool(self.samplers)

    @staticmethod
    def combine(items: Iterable["Impairment"]) -> "Impairment":
        """The effect of several impairments at once."""
        down = hold = False
        kept = 1.0
        delay = 0.0
        limits = []
        samplers: list[DelaySampler] = []
        for item in items:
            samplers += item.samplers
            down |= item.down
            hold |= item.hold
            kept *= 1.0 - item.loss
            delay += item.delay_s
            if item.hold and item.hold_s is not None:
                limits.append(item.hold_s)
        return Impairment(down, hold, 1.0 - kept, delay, min(limits) if limits else None,
                          tuple(samplers))

    @property
    def clear(self) -> bool:
        return self == Impairment()


@dataclass
class RelayStats:
    accepted: int = 0
    reset: int = 0  # connections cut
    lost: int = 0  # chunks lost (each retransmitted later)
    held: int = 0  # chunks that waited out a hold
    delayed: int = 0
    forwarded: int = 0

    def to_json(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass(eq=False)
class _Conn:
    client: socket.socket
    upstream: socket.socket | None = None
    aborted: bool = False
    finished: int = 0
    upstream_turn: bool = False  # the last chunk went towards the upstream
    awaiting: bool = True  # a request went upstream (or may be on its way) unanswered
    carrying: int = 0  # chunks read from one side, not yet written to the other
    last_moved: float = field(default_factory=time.monotonic)  # when a chunk last passed
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answered(self, now: float, quiet_s: float) -> bool:
        """No request in flight: the last chunk went towards the client, none is in the
        relay's hands, and nothing moved for ``quiet_s``."""
        with self.lock:
            return not self.awaiting and not self.carrying and \
                now - self.last_moved >= quiet_s

    def sockets(self) -> list[socket.socket]:
        return [s for s in (self.client, self.upstream) if s is not None]


class _Refused(Exception):
    """A tunnel request that is not served."""


def _reset(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class Relay:
    """A TCP relay on ``host:port`` (0 picks a port) to ``upstream``, or a CONNECT tunnel.

    ``tunnel``: each client first sends ``CONNECT host:port HTTP/1.x`` (what
    ``http.client``'s ``set_tunnel`` sends); only hosts in ``allowed_hosts`` are served.
    ``mark``: an ``SO_MARK`` for the relay's upstream sockets (so a redirect rule can
    skip them; needs CAP_NET_ADMIN). ``rng``: the random source for losses.
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0,
                 upstream: tuple[str, int] | None = None, tunnel: bool = False,
                 name: str = "relay", mark: int | None = None,
                 rng: random.Random | None = None, rto_min_s: float = RTO_MIN_S,
                 connect_timeout_s: float = 5.0,
                 allowed_hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
                 socket_factory: Callable[[], socket.socket] | None = None) -> None:
        if (upstream is None) == (not tunnel):
            raise ValueError("a relay needs exactly one of upstream or tunnel=True")
        self.name = name
        self.upstream = upstream
        self.tunnel = tunnel
        self.mark = mark
        self.rto_min_s = rto_min_s
        self.connect_timeout_s = connect_timeout_s
        self.allowed_hosts = allowed_hosts
        self.stats = RelayStats()
        self._socket_factory = socket_factory
        self._rng = rng or random.Random()
        self._cond = threading.Condition()
        self._impairments: dict[str, Impairment] = {}
        self._effective = Impairment()
        self._conns: set[_Conn] = set()
        self._stopping = False
        self._listener = socket.create_server((host, port), backlog=128)
        self._listener.settimeout(0.2)
        self._thread = threading.Thread(target=self._accept_loop, daemon=True,
                                        name=f"relay-{name}")

    # -- control ----------------------------------------------------------------------

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    @property
    def port(self) -> int:
        return self.address[1]

    def start(self) -> "Relay":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, reset every connection; idempotent."""
        with self._cond:
            self._stopping = True
            conns = list(self._conns)
            self._cond.notify_all()
        for conn in conns:
            self._abort(conn)
        if self._thread.is_alive():
            self._thread.join(2.0)
        with contextlib.suppress(OSError):
            self._listener.close()

    def drain(self, timeout_s: float = 5.0, quiet_s: float = 0.1,
              before_stop: Callable[[], None] | None = None) -> int:
        """Lift every impairment and let requests in flight get their answer, then stop:
        each connection is closed (FIN) once answered and quiet for ``quiet_s``, until
        none is busy or ``timeout_s`` has passed; then ``before_stop`` runs (e.g. removing
        the redirect that brings new connections) and the relay stops, resetting what is
        still open. Returns how many connections were busy at the deadline."""
        with self._cond:
            self._impairments.clear()
            self._changed()
        deadline = time.monotonic() + timeout_s
        while True:
            now = time.monotonic()
            with self._cond:
                idle = [c for c in self._conns if c.answered(now, quiet_s)]
                self._conns.difference_update(idle)
                busy = len(self._conns)
            for conn in idle:
                self._close_drained(conn)
            if not busy or now >= deadline:
                break
            time.sleep(min(quiet_s / 2, max(0.0, deadline - now)))
        if busy:
            log.info("relay_drain_deadline", relay=self.name, busy=busy)
        if before_stop is not None:
            before_stop()
        self.stop()
        return busy

    def impair(self, key: str, impairment: Impairment) -> None:
        """Add (or replace) the impairment under ``key``."""
        with self._cond:
            self._impairments[key] = impairment
            self._changed()

    def lift(self, key: str) -> None:
        """Remove the impairment under ``key`` (idempotent)."""
        with self._cond:
            if self._impairments.pop(key, None) is not None:
                self._changed()

    def effective(self) -> Impairment:
        with self._cond:
            return self._effective

    def connections(self) -> int:
        with self._cond:
            return len(self._conns)

    def _changed(self) -> None:
        self._effective = Impairment.combine(self._impairments.values())
        self._cond.notify_all()
        if self._effective.down:
            for conn in list(self._conns):
                threading.Thread(target=self._abort, args=(conn,), daemon=True).start()

    # -- connections ------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._stopping:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stopping:
                    return
                time.sleep(0.05)
                continue
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._cond:
                self.stats.accepted += 1
                cut = self._effective.down or self._stopping
                if cut:
                    self.stats.reset += 1
            if cut:
                _reset(client)
                continue
            threading.Thread(target=self._serve, args=(_Conn(client),), daemon=True,
                             name=f"relay-{self.name}-conn").start()

    def _serve(self, conn: _Conn) -> None:
        with self._cond:
            self._conns.add(conn)
        try:
            leftover, target = self._handshake(conn)
            if not self._pass(conn, towards_upstream=True):
                self._abort(conn)
                return
            upstream = self._connect(target)
            with conn.lock:
                conn.upstream = upstream
                aborted = conn.aborted
            if aborted:
                self._abort(conn)
                return
            if self.tunnel:
                conn.client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            if leftover:
                upstream.sendall(leftover)
        except (OSError, _Refused) as exc:
            log.debug("relay_connect_failed", relay=self.name, error=str(exc))
            self._abort(conn)
            return
        threading.Thread(target=self._pump, args=(conn, upstream, conn.client, False),
                         daemon=True, name=f"relay-{self.name}-down").start()
        self._pump(conn, conn.client, upstream, True)

    def _handshake(self, conn: _Conn) -> tuple[bytes, tuple[str, int]]:
        if not self.tunnel:
            assert self.upstream is not None
            return b"", self.upstream
        conn.client.settimeout(self.connect_timeout_s * 2)
        head = b""
        while b"\r\n\r\n" not in head:
            data = conn.client.recv(4096)
            if not data:
                raise _Refused("closed before the CONNECT request ended")
            head += data
            if len(head) > MAX_CONNECT_HEAD:
                raise _Refused("CONNECT request too long")
        conn.client.settimeout(None)
        request, _, leftover = head.partition(b"\r\n\r\n")
        parts = request.split(b"\r\n", 1)[0].decode("latin-1").split()
        if len(parts) != 3 or parts[0] != "CONNECT":
            conn.client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
            raise _Refused(f"not a CONNECT request: {parts[:1]}")
        host, _, port = parts[1].rpartition(":")
        if host not in self.allowed_hosts or not port.isdigit():
            conn.client.sendall(b"HTTP/1.1 403 Forbidden\r\n\r\n")
            raise _Refused(f"tunnel to {parts[1]} not allowed")
        return leftover, (host, int(port))

    def _connect(self, target: tuple[str, int]) -> socket.socket:
        sock = (self._socket_factory or socket.socket)()
        try:
            if self.mark is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, self.mark)
            sock.settimeout(self.connect_timeout_s)
            sock.connect(target)
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            sock.close()
            raise
        return sock

    def _pump(self, conn: _Conn, src: socket.socket, dst: socket.socket,
              towards_upstream: bool) -> None:
        clean = False
        try:
            while True:
                data = src.recv(CHUNK)
                if not data:
                    with contextlib.suppress(OSError):
                        dst.shutdown(socket.SHUT_WR)
                    clean = True
                    break
                with conn.lock:
                    conn.carrying += 1
                try:
                    if not self._pass(conn, towards_upstream):
                        break
                    dst.sendall(data)
                finally:
                    with conn.lock:
                        conn.carrying -= 1
                        conn.awaiting = towards_upstream
                        conn.last_moved = time.monotonic()
                with self._cond:
                    self.stats.forwarded += 1
        except OSError:
            pass
        if not clean or conn.aborted:
            self._abort(conn)
            return
        with conn.lock:
            conn.finished += 1
            both = conn.finished == 2
        if both:
            self._close(conn)

    def _pass(self, conn: _Conn, towards_upstream: bool) -> bool:
        """Wait until a chunk may pass; False when the connection must be cut."""
        attempt = 0
        with self._cond:
            while True:
                if not self._wait_clear(conn):
                    return False
                effect = self._effective
                if effect.loss > 0 and self._rng.random() < effect.loss:
                    self.stats.lost += 1
                    rto = min(self.rto_min_s * 2 ** attempt, RTO_MAX_S)
                    attempt += 1
                    self._sleep(rto, conn, lambda e: e.loss > 0)
                    continue
                break
            new_turn = towards_upstream and not conn.upstream_turn
            conn.upstream_turn = towards_upstream
            if new_turn and effect.delays:
                self.stats.delayed += 1
                self._sleep(effect.draw_delay(), conn, lambda e: e.delays)
                return self._wait_clear(conn)
            return True

    def _wait_clear(self, conn: _Conn) -> bool:
        """(Under the lock) wait out holds; False when down, aborted or stopping."""
        since: float | None = None
        while True:
            if self._stopping or conn.aborted or self._effective.down:
                return False
            effect = self._effective
            if not effect.hold:
                return True
            now = time.monotonic()
            if since is None:
                self.stats.held += 1
                since = now
            if effect.hold_s is None:
                self._cond.wait()
            elif now - since >= effect.hold_s:
                return False
            else:
                self._cond.wait(effect.hold_s - (now - since))

    def _sleep(self, seconds: float, conn: _Conn, still: Callable[[Impairment], bool]) -> None:
        """(Under the lock) wait ``seconds``, less if ``still`` stops holding or we stop."""
        deadline = time.monotonic() + seconds
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._stopping or conn.aborted:
                return
            if not still(self._effective):
                return
            self._cond.wait(remaining)

    def _abort(self, conn: _Conn) -> None:
        """Cut a connection: wake its threads, reset both sides; idempotent."""
        with conn.lock:
            first = not conn.aborted
            conn.aborted = True
            sockets = conn.sockets()
        with self._cond:
            if first and conn in self._conns:
                self.stats.reset += 1
            self._conns.discard(conn)
            self._cond.notify_all()
        with contextlib.suppress(OSError):
            conn.client.shutdown(socket.SHUT_RD)
        _reset(conn.client)  # the client sees the cut: RST
        for sock in sockets[1:]:  # the upstream just sees the connection end
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def _close_drained(self, conn: _Conn) -> None:
        """Close an answered connection in order: its threads end, both peers see FIN."""
        with conn.lock:
            conn.aborted = True  # (its pumps stop; _abort counts no reset for it now)
            sockets = conn.sockets()
        with self._cond:
            self._cond.notify_all()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def _close(self, conn: _Conn) -> None:
        with self._cond:
            self._conns.discard(conn)
        for sock in conn.sockets():
            with contextlib.suppress(OSError):
                sock.close()
