"""Kubernetes lists read a page at a time (the API's chunked list).

A cluster of 16,384 nodes answers ``GET nodes`` with every node at once, and the client
turns the whole answer into models before the caller sees one (a real node object is
tens of KB: its images, conditions, addresses). :func:`paged` asks for ``page_size``
objects at a time and follows ``metadata.continue``, as ``kubectl`` does (500 a
chunk): the caller keeps what it needs of each object and at most one page of models is
held at a time, whatever the cluster's size.
"""

from collections.abc import Callable, Iterator
from typing import Any, Final

__all__ = ["PAGE_SIZE", "paged"]

#: Objects asked for per page (``kubectl``'s default chunk size).
PAGE_SIZE: Final = 500


def paged(list_call: Callable[..., Any], *args: Any, page_size: int | None = None,
          **kwargs: Any) -> Iterator[Any]:
    """Every object ``list_call(*args, **kwargs)`` lists (a ``kubernetes`` client list
    method such as ``CoreV1Api.list_node``), a page of ``page_size`` (default
    :data:`PAGE_SIZE`) at a time. Raises what the call raises (an ``ApiException``;
    ``410 Gone`` when a continue token expired between pages)."""
    token: str | None = None
    while True:
        answer = list_call(*args, limit=page_size or PAGE_SIZE, _continue=token, **kwargs)
        yield from answer.items or []
        token = getattr(answer.metadata, "_continue", None) if answer.metadata else None
        if not token:
            return
