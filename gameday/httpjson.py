"""Small JSON-over-HTTP helpers for the engine's reads (placement, Prometheus, probes)."""

import json
import urllib.error
import urllib.request
from typing import Any

from gameday.errors import TargetUnavailable


def get_json(url: str, *, timeout_s: float = 5.0, headers: dict[str, str] | None = None) -> Any:
    """GET ``url`` and decode its JSON body; one-line TargetUnavailable on any failure."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise TargetUnavailable(f"cannot read {url}: {exc}") from None
