"""Keeping secrets out of journals and reports.

Two rules, applied to a whole journal before it is written: a value under a key that
looks like a secret (``token``, ``secret``, ``password``, ``authorization``,
``api_key``, and every value of the experiment's ``secrets`` section) becomes
``[redacted]``; and any known secret string (agent tokens, secret values) is cut out of
every other string it appears in (a URL, an argv entry, an error message).
"""

from collections.abc import Iterable, Mapping
from typing import Any

from gameday.logs import REDACTED, names_secret

__all__ = ["MIN_SECRET_LENGTH", "REDACTED", "experiment_secrets", "scrub", "secret_values"]
MIN_SECRET_LENGTH = 4  # shorter values would redact ordinary words


def _secret_key(key: object) -> bool:
    return isinstance(key, str) and names_secret(key)


def secret_values(document: Any, *, under_secret: bool = False) -> set[str]:
    """Every string held under a secret-looking key (or anywhere under one)."""
    found: set[str] = set()
    if isinstance(document, Mapping):
        for key, value in document.items():
            found |= secret_values(value, under_secret=under_secret or _secret_key(key))
    elif isinstance(document, list):
        for item in document:
            found |= secret_values(item, under_secret=under_secret)
    elif under_secret and isinstance(document, str):
        found.add(document)
    return found


def experiment_secrets(experiment: Mapping[str, Any]) -> set[str]:
    """Inline values of the experiment's ``secrets`` section and secret-keyed config."""
    found = secret_values(experiment.get("secrets") or {}, under_secret=True)
    return found | secret_values(experiment.get("configuration") or {})


def scrub(document: Any, secrets: Iterable[str], *, under_secret: bool = False) -> Any:
    """A copy of ``document`` with secret values redacted (see the module doc)."""
    known = sorted((s for s in set(secrets) if len(s) >= MIN_SECRET_LENGTH), key=len,
                   reverse=True)
    return _scrub(document, known, under_secret)


def _scrub(document: Any, known: list[str], under_secret: bool) -> Any:
    if isinstance(document, Mapping):
        return {key: (_scrub(value, known, True) if key == "secrets" or _secret_key(key)
                      else _scrub(value, known, under_secret))
                for key, value in document.items()}
    if isinstance(document, list):
        return [_scrub(item, known, under_secret) for item in document]
    if isinstance(document, str):
        if under_secret:
            return REDACTED
        for secret in known:
            if secret in document:
                document = document.replace(secret, REDACTED)
        return document
    if under_secret and document is not None and not isinstance(document, bool | int | float):
        return REDACTED
    return document
