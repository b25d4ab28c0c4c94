"""Stream offsets read from a Redis Streams consumer group, for ``rpo.stream_loss``.

Entry ids of auto-numbered streams start with the Redis server's clock in milliseconds,
so the entries added by an instant are read from the stream itself, exactly (to the
millisecond), after the fact. An entry added by the fault is lost while the group has
not acknowledged it: still pending (delivered to a consumer that never acknowledged it)
or never delivered.
"""

from dataclasses import dataclass
from typing import Any

import redis

from gameday.errors import GamedayError

__all__ = ["GroupBacklog", "RedisStreamError", "group_backlog"]

_BATCH = 10_000


class RedisStreamError(GamedayError):
    """Redis could not be reached, or the stream or group does not exist."""


@dataclass(frozen=True)
class GroupBacklog:
    """Of the entries added to ``stream`` by an instant: how many, and how many the
    group has not acknowledged (pending + never delivered)."""

    stream: str
    group: str
    added: int
    pending: int
    undelivered: int

    @property
    def unacknowledged(self) -> int:
        return self.pending + self.undelivered


def _count(client: Any, stream: str, low: str, high: str) -> int:
    total = 0
    while True:
        entries = client.xrange(stream, min=low, max=high, count=_BATCH)
        total += len(entries)
        if len(entries) < _BATCH:
            return total
        low = "(" + entries[-1][0]


def group_backlog(url: str, stream: str, group: str, at: float,
                  timeout_s: float = 5.0) -> GroupBacklog:
    """The backlog of ``group`` on ``stream`` among the entries added by Unix time ``at``."""
    upto = f"{int(at * 1000)}-18446744073709551615"
    try:
        client = redis.Redis.from_url(url, decode_responses=True, socket_timeout=timeout_s)
        groups = {info["name"]: info for info in client.xinfo_groups(stream)}
        if group not in groups:
            raise RedisStreamError(f"stream {stream!r} at {url} has no consumer group "
                                   f"{group!r} (groups: {', '.join(sorted(groups)) or 'none'})")
        delivered = str(groups[group]["last-delivered-id"])
        added = _count(client, stream, "-", upto)
        pending = len(client.xpending_range(stream, group, min="-", max=upto, count=10**9))
        undelivered = _count(client, stream, "(" + delivered, upto)  # none when past
    except redis.RedisError as exc:
        raise RedisStreamError(f"redis stream {stream!r} at {url}: "
                               f"{str(exc).splitlines()[0]}") from None
    return GroupBacklog(stream=stream, group=group, added=added, pending=pending,
                        undelivered=undelivered)
