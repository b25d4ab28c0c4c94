"""A raw TCP server on loopback for tests that need a misbehaving peer (one that frames
answers oddly, or never answers): the test gives the accept loop, this runs it
(:func:`serving`), or only what to do with each connection (:func:`serving_each`)."""

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def serving(loop: Callable[[socket.socket, threading.Event], None]) -> Iterator[str]:
    """Run ``loop(listener, stop)`` in a thread until the block ends (``stop`` is set
    then; the loop must return soon after); yields ``http://127.0.0.1:PORT``."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    thread = threading.Thread(target=loop, args=(listener, stop), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        listener.close()


@contextlib.contextmanager
def serving_each(handle: Callable[[socket.socket, threading.Event], None]) -> Iterator[str]:
    """:func:`serving` with an accept loop that calls ``handle(connection, stop)`` for each
    connection in turn (closed after; an ``OSError`` of the peer's ends that one)."""
    def loop(listener: socket.socket, stop: threading.Event) -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn, contextlib.suppress(OSError):
                handle(conn, stop)

    with serving(loop) as url:
        yield url
