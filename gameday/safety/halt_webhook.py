"""``gameday halt --serve-webhook ADDR``: an Alertmanager webhook receiver that engages the
fleet's safety lever when a route sends a firing notification to it.

Point a receiver at it (``webhook_configs: [{url: https://HOST:PORT/halt,
http_config: {authorization: {credentials_file: TOKEN}}}]``); each ``POST`` of
Alertmanager's webhook payload (version 4) whose ``status`` is ``firing`` engages the
lever on every agent gameday knows (:func:`gameday.safety.halt.throw`), with the reason
``alert NAME firing (receiver R): SUMMARY``, before it answers: ``200`` when every agent
holds it, ``503`` when some did not answer (Alertmanager retries the notification). A
``resolved`` notification is acknowledged and changes nothing: a person releases the
lever (``gameday halt --release``).

Guarded as the agent is: a bearer token (``--token-file``, compared in constant time)
or, with ``--tls-client-ca``, a client certificate (mutual TLS 1.3 with ``--tls-cert``
and ``--tls-key``); a non-loopback address without TLS needs ``--insecure-plaintext``.
Bodies over :data:`MAX_BODY_BYTES` are refused.
"""

import argparse
import json
import pathlib
import signal
import ssl
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any, Final

import structlog

from gameday.errors import GamedayError, InvalidInput
from gameday.safety.halt import throw, uses_kubernetes
from gameday.wire.listen import is_loopback, parse_listen
from gameday.wire.tls import ServerTLS, peer_identity
from gameday.wire.tokens import TokenSet

__all__ = ["MAX_BODY_BYTES", "HaltWebhook", "reason_of", "serve_from_arguments"]

log = structlog.get_logger("gameday.safety.halt_webhook")

MAX_BODY_BYTES: Final = 1024 * 1024
REQUEST_TIMEOUT_S: Final = 10.0

#: Engages the lever with a reason; returns the ``gameday halt`` document.
Engage = Callable[[str], Mapping[str, Any]]


def reason_of(payload: Mapping[str, Any]) -> str | None:
    """The lever's reason for a firing webhook payload, None for any other (resolved);
    :class:`InvalidInput` when it is not Alertmanager's payload."""
    alerts = payload.get("alerts")
    if not isinstance(alerts, list) or not isinstance(payload.get("status"), str):
        raise InvalidInput("not an Alertmanager webhook payload (status, alerts)")
    if payload["status"] != "firing":
        return None
    firing = [a for a in alerts if isinstance(a, Mapping) and a.get("status") == "firing"]
    first: Mapping[str, Any] = firing[0] if firing else {}
    labels = first.get("labels")
    notes = first.get("annotations")
    labels = labels if isinstance(labels, Mapping) else {}
    notes = notes if isinstance(notes, Mapping) else {}
    name = str(labels.get("alertname") or "?")
    summary = str(notes.get("summary") or notes.get("description") or "").strip()
    more = f" and {len(firing) - 1} more" if len(firing) > 1 else ""
    return (f"alert {name}{more} firing (Alertmanager receiver "
            f"{payload.get('receiver', '?')})" + (f": {summary}" if summary else ""))


class HaltWebhook:
    """The receiver on ``host``:``port`` (0: a free port, see :attr:`url`); ``engage``
    throws the lever. ``tokens``: accepted bearer tokens (None: the client certificate
    of ``tls``, which must then be mutual, is what is checked)."""

    def __init__(self, host: str, port: int, engage: Engage, *, tokens: TokenSet | None,
                 tls: ServerTLS | None = None) -> None:
        if tokens is None and (tls is None or not tls.mutual):
            raise InvalidInput("the webhook needs --token-file or mutual TLS "
                               "(--tls-cert, --tls-key, --tls-client-ca)")
        self.engage = engage
        self.tokens = tokens
        self.tls = tls
        self.engaged: list[str] = []  # the reasons it engaged the lever with
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer((host, port), _handler(self))
        self._httpd.daemon_threads = True
        if tls is not None:
            self._httpd.socket = tls.context().wrap_socket(self._httpd.socket,
                                                           server_side=True,
                                                           do_handshake_on_connect=False)
        shown = f"[{host}]" if ":" in host else host
        self.url = (f"{'https' if tls else 'http'}://{shown}:"
                    f"{self._httpd.server_address[1]}")
        self._thread: threading.Thread | None = None

    def start(self) -> "HaltWebhook":
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True,
                                        name="halt-webhook")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def answer(self, payload: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        """What a notification gets: the status and the JSON answer."""
        reason = reason_of(payload)
        if reason is None:
            return 200, {"engaged": False, "note": "not firing: nothing changed"}
        with self._lock:  # one engagement at a time; a repeat keeps the first reason
            document = self.engage(reason)
            self.engaged.append(reason)
        ok = document.get("exit_code") == 0
        log.warning("safety lever engaged by webhook", reason=reason, complete=ok)
        return (200 if ok else 503), {"engaged": True, "reason": reason,
                                      "lines": list(document.get("lines", []))}


def _handler(hook: HaltWebhook) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = REQUEST_TIMEOUT_S

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("webhook.http", message=format % args)

        def setup(self) -> None:
            if isinstance(self.request, ssl.SSLSocket):
                self.request.settimeout(REQUEST_TIMEOUT_S)
                self.request.do_handshake()
            super().setup()

        def _send(self, status: int, payload: Mapping[str, Any]) -> None:
            body = (json.dumps(payload) + "\n").encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _authorised(self) -> bool:
            if hook.tokens is None:  # mutual TLS: the handshake checked the certificate
                return isinstance(self.connection, ssl.SSLSocket) and peer_identity(
                    self.connection.getpeercert()) is not None
            scheme, _, credential = (self.headers.get("Authorization") or "").partition(" ")
            return scheme.lower() == "bearer" and hook.tokens.match(
                credential.strip().encode("latin-1", "replace")) is not None

        def do_GET(self) -> None:
            self._send(200 if self.path == "/healthz" else 404,
                       {"ok": True} if self.path == "/healthz" else {"error": "POST here"})

        def do_POST(self) -> None:
            if not self._authorised():
                self._send(401, {"error": "missing or wrong bearer token"})
                return
            try:
                length = int(self.headers.get("Content-Length") or "0")
            except ValueError:
                length = -1
            if not 0 < length <= MAX_BODY_BYTES:
                self.close_connection = True
                self._send(413 if length > MAX_BODY_BYTES else 400,
                           {"error": f"a JSON body of 1 to {MAX_BODY_BYTES} bytes"})
                return
            try:
                payload = json.loads(self.rfile.read(length))
                if not isinstance(payload, dict):
                    raise InvalidInput("the body is not a JSON object")
                status, answer = hook.answer(payload)
            except (ValueError, InvalidInput) as exc:
                self._send(400, {"error": str(exc)})
                return
            except GamedayError as exc:
                self._send(503, {"error": str(exc)})
                return
            self._send(status, answer)

    return Handler


def serve_from_arguments(args: argparse.Namespace) -> int:
    """``gameday halt --serve-webhook ADDR``: serve until SIGINT/SIGTERM; exit code."""
    host, port = parse_listen(args.serve_webhook)
    tls = None
    if args.tls_cert or args.tls_key:
        if not (args.tls_cert and args.tls_key):
            raise InvalidInput("--tls-cert and --tls-key go together")
        tls = ServerTLS(pathlib.Path(args.tls_cert), pathlib.Path(args.tls_key),
                        pathlib.Path(args.tls_client_ca) if args.tls_client_ca else None)
    elif args.tls_client_ca:
        raise InvalidInput("--tls-client-ca needs --tls-cert and --tls-key")
    elif not is_loopback(host) and not args.insecure_plaintext:
        raise InvalidInput(f"--serve-webhook {args.serve_webhook} is not loopback: give "
                           "--tls-cert and --tls-key, or --insecure-plaintext")
    tokens = TokenSet(path=pathlib.Path(args.token_file)) if args.token_file else None
    kubernetes = uses_kubernetes(args.kubernetes)
    hook = HaltWebhook(host, port, lambda reason: throw(
        "engage", reason, args.target_config, kubernetes=kubernetes), tokens=tokens, tls=tls)
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT,
                                                                 signal.SIGTERM)}
    hook.start()
    print(f"halt webhook listening on {hook.url}", flush=True)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        hook.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
