"""TLS 1.3 for the agent API: the server's context (mutual TLS when a client CA is
given) reloaded when its files change, and the client's context.

A :class:`ServerTLS` hands out the context of the certificate files as they are now: it
looks at their modification times at most once a second and builds a new context when
one changed (a renewed certificate from cert-manager takes effect on the next
connection, without a restart). A file that cannot be loaded any more leaves the last
good context in use (logged once per change).
"""

import os
import ssl
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import structlog

from gameday.errors import InvalidInput

__all__ = ["ServerTLS", "client_context", "peer_identity"]

_log = structlog.get_logger("gameday.agent")

#: Seconds between two looks at the certificate files' modification times.
RELOAD_CHECK_S: Final = 1.0


def _stamp(paths: list[Path]) -> tuple[float, ...]:
    try:
        return tuple(os.stat(path).st_mtime for path in paths)
    except OSError:
        return ()


class ServerTLS:
    """The agent's TLS 1.3 server context from ``cert``/``key`` (PEM); with
    ``client_ca``, every client must present a certificate that CA signed."""

    def __init__(self, cert: Path, key: Path, client_ca: Path | None = None) -> None:
        self.cert, self.key, self.client_ca = Path(cert), Path(key), client_ca
        self._paths = [self.cert, self.key, *([Path(client_ca)] if client_ca else [])]
        self._lock = threading.Lock()
        self._stamp = _stamp(self._paths)
        self._context = self._build()  # InvalidInput at start: the files must load
        self._checked_at = time.monotonic()

    @property
    def mutual(self) -> bool:
        """Whether client certificates are required."""
        return self.client_ca is not None

    def _build(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        try:
            context.load_cert_chain(self.cert, self.key)
            if self.client_ca is not None:
                context.load_verify_locations(cafile=str(self.client_ca))
                context.verify_mode = ssl.CERT_REQUIRED
        except (OSError, ssl.SSLError) as exc:
            raise InvalidInput(f"TLS files {', '.join(map(str, self._paths))}: cannot load "
                               f"them ({getattr(exc, 'strerror', None) or exc})") from None
        return context

    def context(self) -> ssl.SSLContext:
        """The context of the files as they are now (reloaded when one changed)."""
        now = time.monotonic()
        with self._lock:
            if now - self._checked_at < RELOAD_CHECK_S:
                return self._context
            self._checked_at = now
            stamp = _stamp(self._paths)
            if stamp and stamp != self._stamp:
                self._stamp = stamp
                try:
                    self._context = self._build()
                    _log.info("agent.tls_reloaded", cert=str(self.cert))
                except InvalidInput as exc:
                    _log.error("agent.tls_reload_failed", error=str(exc))
            return self._context


def client_context(ca: Path | None = None, cert: Path | None = None,
                   key: Path | None = None) -> ssl.SSLContext:
    """A TLS 1.3 client context that trusts ``ca`` (the system's CAs when None) and
    presents ``cert``/``key`` when given (mutual TLS); :class:`InvalidInput` (one line)
    when a file cannot be loaded."""
    if (cert is None) != (key is None):
        raise InvalidInput("agent client certificate: give both the certificate and its key")
    try:
        context = ssl.create_default_context(cafile=str(ca) if ca is not None else None)
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        if cert is not None and key is not None:
            context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        files = ", ".join(str(p) for p in (ca, cert, key) if p is not None)
        raise InvalidInput(f"agent TLS files {files or '(system CAs)'}: cannot load them "
                           f"({getattr(exc, 'strerror', None) or exc})") from None
    return context


def peer_identity(certificate: Mapping[str, Any] | None) -> str | None:
    """A client certificate's identity: its first DNS or URI subject alternative name,
    else its subject's common name; None without a certificate."""
    if not certificate:
        return None
    for kind, value in certificate.get("subjectAltName", ()):
        if kind in ("URI", "DNS"):
            return f"{kind.lower()}:{value}"
    for rdn in certificate.get("subject", ()):
        for name, value in rdn:
            if name == "commonName":
                return f"cn:{value}"
    return None
