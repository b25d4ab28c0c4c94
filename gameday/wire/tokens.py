"""The agent's bearer tokens: several valid at once (rotation without downtime), read
again from their file when it changes, weak ones and readable files refused.

A token file holds one token a line (blank lines and ``#`` comments ignored). To rotate:
add the new token as a second line, move the clients over, remove the old line. A
:class:`TokenSet` looks at the file's modification time and size at most once a second;
a changed file whose tokens are all strong replaces the set, one that is not is ignored
(logged) and the tokens before stay valid.

A token is strong when it carries at least :data:`MIN_TOKEN_BITS` bits by the size of
the alphabet it is drawn from (hex: 4 bits a character, base64url: 6) and does not
repeat itself (at least 3 bits of observed entropy a character): ``openssl rand -hex
32`` and ``python -c 'import secrets; print(secrets.token_urlsafe(32))'`` are.
"""

import collections
import hashlib
import hmac
import math
import os
import re
import stat
import threading
import time
from pathlib import Path
from typing import Final

import structlog

from gameday.errors import InvalidInput

__all__ = ["MIN_TOKEN_BITS", "TokenSet", "check_token", "token_bits"]

_log = structlog.get_logger("gameday.agent")

#: Least entropy of a token the agent accepts at start: 32 bytes.
MIN_TOKEN_BITS: Final = 256

_TOKEN_CHARS: Final = re.compile(r"[\x21-\x7e]+")
_CHECK_S: Final = 1.0


def token_bits(token: str) -> float:
    """An estimate of ``token``'s entropy in bits: its length times the bits of the
    smallest usual alphabet it fits (digits, hex, alphanumerics, base64url, printable
    ASCII); a token whose own characters' counts carry under 3 bits a character is
    counted at that (so ``aaaa...`` or ``abab...`` stays weak at any length)."""
    if not token:
        return 0.0
    alphabets = ((r"[0-9]+", 10), (r"[0-9a-f]+|[0-9A-F]+", 16), (r"[0-9A-Za-z]+", 62),
                 (r"[0-9A-Za-z_-]+", 64), (r"[\x21-\x7e]+", 94))
    size = next((n for pattern, n in alphabets if re.fullmatch(pattern, token)), 256)
    counts = collections.Counter(token)
    observed = -sum(c / len(token) * math.log2(c / len(token)) for c in counts.values())
    per_char = math.log2(size)
    if observed < 3.0:
        per_char = min(per_char, observed)
    return len(token) * per_char


def check_token(token: str, where: str) -> str:
    """``token`` if it is printable ASCII and strong (:func:`token_bits` at least
    :data:`MIN_TOKEN_BITS`), else :class:`InvalidInput` naming ``where``."""
    if not _TOKEN_CHARS.fullmatch(token):
        raise InvalidInput(f"{where}: a token must be printable ASCII without spaces")
    bits = token_bits(token)
    if bits < MIN_TOKEN_BITS:
        raise InvalidInput(f"{where}: a token of about {max(0.0, bits):.0f} bits is too weak "
                           f"(at least {MIN_TOKEN_BITS}: e.g. openssl rand -hex 32)")
    return token


def _parse(text: str, where: str, *, strict: bool) -> list[str]:
    tokens = [line.strip() for line in text.splitlines()]
    tokens = [t for t in tokens if t and not t.startswith("#")]
    if not tokens:
        raise InvalidInput(f"{where} holds no token; put one a line in it")
    for index, token in enumerate(tokens, 1):
        if strict:
            check_token(token, f"{where} line {index}")
        elif not _TOKEN_CHARS.fullmatch(token):
            raise InvalidInput(f"{where} token {index}: printable ASCII without spaces")
    return tokens


def read_token_file(path: Path, *, strict: bool = True) -> list[str]:
    """The tokens of ``path``; :class:`InvalidInput` when it cannot be read, is readable
    or writable by group or others (``chmod 600``), or (``strict``) holds a weak token."""
    try:
        info = os.stat(path)
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"--token-file {path}: cannot read it "
                           f"({exc.strerror or exc})") from None
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InvalidInput(f"--token-file {path} is open to group or others "
                           f"(mode {stat.S_IMODE(info.st_mode):o}); chmod 600 it")
    return _parse(text, f"--token-file {path}", strict=strict)


class TokenSet:
    """The tokens an agent accepts: fixed (``tokens``) or from ``path``, re-read when
    the file changes. ``strict``: weak tokens are refused (at start and on re-read)."""

    def __init__(self, tokens: list[str] | None = None, *, path: Path | None = None,
                 strict: bool = True) -> None:
        self.path, self.strict = path, strict
        if path is not None:
            tokens = read_token_file(path, strict=strict)
            self._stamp = self._file_stamp()
        elif not tokens:
            raise InvalidInput("no agent token given")
        else:
            for token in tokens:
                if strict:
                    check_token(token, "agent token")
                elif not _TOKEN_CHARS.fullmatch(token):
                    raise InvalidInput("agent token must be non-empty printable ASCII "
                                       "without spaces")
        self._tokens = [t.encode("ascii") for t in tokens]
        self._lock = threading.Lock()
        self._checked_at = time.monotonic()

    def _file_stamp(self) -> tuple[int, int, int]:
        assert self.path is not None
        info = os.stat(self.path)
        return info.st_mtime_ns, info.st_size, info.st_ino

    def _current(self) -> list[bytes]:
        if self.path is None:
            return self._tokens
        now = time.monotonic()
        with self._lock:
            if now - self._checked_at < _CHECK_S:
                return self._tokens
            self._checked_at = now
            try:
                stamp = self._file_stamp()
                if stamp != self._stamp:
                    self._stamp = stamp
                    self._tokens = [t.encode("ascii")
                                    for t in read_token_file(self.path, strict=self.strict)]
                    _log.info("agent.tokens_reloaded", path=str(self.path),
                              count=len(self._tokens))
            except (OSError, InvalidInput) as exc:
                _log.error("agent.tokens_reload_failed", path=str(self.path), error=str(exc))
            return self._tokens

    def match(self, credential: bytes) -> str | None:
        """The identity of the token ``credential`` is (``token:`` and the first 8 hex
        digits of its SHA-256), or None; every token is compared in constant time."""
        found = None
        for token in self._current():
            if hmac.compare_digest(credential, token):
                found = token
        if found is None:
            return None
        return "token:" + hashlib.sha256(found).hexdigest()[:8]
