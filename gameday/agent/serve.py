"""``gameday agent serve``: run one node's agent until SIGTERM, SIGINT or SIGHUP.

::

    gameday agent serve [--backend virtual|MODULE:FACTORY] [--listen HOST:PORT]
                        [--token-file F] [--state-dir D] [--node NAME]
                        [--reconcile-kubernetes]

The token comes from ``--token-file`` or else ``$GAMEDAY_AGENT_TOKEN``. The backend is
a name from :data:`BACKENDS` or a ``module:callable`` spec; the callable is called as
``factory(node=NAME)`` and returns a :class:`gameday.agent.backend.Backend`. Active
faults are saved in ``D/agent-NAME.json``. Once serving, one line
``agent listening on URL`` goes to stdout (logs go to stderr, as JSON). A signal
reverts every fault (reason ``agent-shutdown``) and the command exits 0; errors are
one line on stderr and exit 2.
"""

import argparse
import importlib
import os
import pathlib
import re
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Final, cast

import structlog

from gameday.agent.backend import Backend
from gameday.agent.reconcile import reconciler_for
from gameday.agent.server import AgentServer
from gameday.errors import GamedayError, InvalidInput

__all__ = ["BACKENDS", "TOKEN_ENV", "load_backend", "main", "parse_listen"]

#: Backend names accepted by ``--backend``, each a ``module:callable`` spec (imported
#: only when chosen). Add yours here or pass the spec itself.
BACKENDS: dict[str, str] = {
    "virtual": "gameday.lab.devices:virtual_backend",
    "host": "gameday.node.host.backend:host_backend",
}

#: Environment variable read for the token when ``--token-file`` is not given.
TOKEN_ENV: Final = "GAMEDAY_AGENT_TOKEN"

_SHUTDOWN_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def load_backend(spec: str, node: str) -> Backend:
    """Build the backend named by ``spec`` (a :data:`BACKENDS` name or ``module:callable``).

    Raises :class:`InvalidInput` (one line) when the spec cannot be resolved.
    """
    target = BACKENDS.get(spec, spec)
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise InvalidInput(f"--backend {spec!r} is neither one of "
                           f"{', '.join(sorted(BACKENDS))} nor a module:callable spec")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidInput(f"--backend {spec!r}: cannot import {module_name} ({exc})") from None
    factory: object = module
    for part in attr.split("."):
        try:
            factory = getattr(factory, part)
        except AttributeError:
            raise InvalidInput(f"--backend {spec!r}: {module_name} has no {attr}") from None
    if not callable(factory):
        raise InvalidInput(f"--backend {spec!r}: {target} is not callable")
    backend = factory(node=node)
    missing = [m for m in ("name", "inventory", "kinds", "apply", "revert")
               if not hasattr(backend, m)]
    if missing:
        raise InvalidInput(f"--backend {spec!r}: {target} returned {type(backend).__name__}, "
                           f"not a backend (missing {', '.join(missing)})")
    return cast(Backend, backend)


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:7777`` for IPv6; an empty host means all interfaces)."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not port_text.isdigit() or int(port_text) > 65535:
        raise InvalidInput(f"--listen {value!r} must be HOST:PORT, e.g. 127.0.0.1:7777")
    host = host.strip("[]") if host.startswith("[") else host
    return host or "0.0.0.0", int(port_text)


def _read_token(token_file: str | None) -> str:
    if token_file is not None:
        try:
            token = pathlib.Path(token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise InvalidInput(f"--token-file {token_file}: cannot read it "
                               f"({exc.strerror or exc})") from None
        if not token:
            raise InvalidInput(f"--token-file {token_file} is empty; put the agent token in it")
        return token
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise InvalidInput(f"no agent token: pass --token-file F or set {TOKEN_ENV}")
    return token


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gameday agent serve",
        description="Run this node's fault agent (docs/agent-api.md) until a signal.")
    parser.add_argument("--backend", default="virtual",
                        help=f"{' | '.join(sorted(BACKENDS))} | module:callable "
                             "(default: virtual)")
    parser.add_argument("--listen", default="127.0.0.1:7777", metavar="HOST:PORT",
                        help="address to serve on; port 0 picks a free one "
                             "(default: 127.0.0.1:7777)")
    parser.add_argument("--token-file", metavar="F",
                        help=f"file holding the bearer token (default: ${TOKEN_ENV})")
    parser.add_argument("--state-dir", default=".gameday/agent", metavar="D",
                        help="where active faults are saved (default: .gameday/agent)")
    parser.add_argument("--node", default=socket.gethostname(), metavar="NAME",
                        help="node name reported by the agent (default: the host name)")
    parser.add_argument("--reconcile-kubernetes", action="store_true",
                        help="also undo expired gameday marks (cordon, taint) on this node "
                             "through the Kubernetes API (gameday/agent/reconcile.py)")
    return parser


def _configure_logging() -> None:
    if structlog.is_configured():
        return
    structlog.configure(
        processors=[structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso", utc=True),
                    structlog.processors.format_exc_info,
                    structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(20),  # INFO
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the agent; returns the exit status (0 after a signal, 2 on bad input)."""
    args = _parser().parse_args(argv)
    _configure_logging()
    try:
        token = _read_token(args.token_file)
        host, port = parse_listen(args.listen)
        backend = load_backend(args.backend, args.node)
        reconciler = reconciler_for(args.node) if args.reconcile_kubernetes else None
        safe_node = re.sub(r"[^A-Za-z0-9._-]", "_", args.node)
        state_path = pathlib.Path(args.state_dir) / f"agent-{safe_node}.json"
        server = AgentServer(backend, token=token, state_path=state_path, node=args.node,
                             host=host, port=port)
    except GamedayError as exc:
        print(f"gameday agent serve: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"gameday agent serve: cannot listen on {args.listen} "
              f"({exc.strerror or exc})", file=sys.stderr)
        return 2

    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in _SHUTDOWN_SIGNALS}
    try:
        server.start()
        if reconciler is not None:
            reconciler.start()
        print(f"agent listening on {server.url}", flush=True)
        while not stop.wait(1.0):
            pass
    finally:
        if reconciler is not None:
            reconciler.stop()
        server.stop(revert=True)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
