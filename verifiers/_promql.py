"""Which Prometheus a verifier queries."""

from gameday.activity import current
from gameday.promql import PromQLError

__all__ = ["prometheus_url_of"]


def prometheus_url_of(explicit: str | None) -> str:
    """``explicit``, else the run target's Prometheus; ``PromQLError`` when there is none."""
    target = current().target
    url = explicit or (target.prometheus_url if target is not None else None)
    if not url:
        raise PromQLError("needs prometheus_url: pass it, or run with a target that has "
                          "Prometheus (e.g. --target lab)")
    return url.rstrip("/")
