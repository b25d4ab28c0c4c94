"""Bounded input: every file gameday reads is parsed within fixed limits.

YAML (experiments, playbooks, fault mixes, requirement files, target configurations)
is composed by :class:`BoundedLoader`, which counts nodes as aliases expand them (an
anchor used a million times counts a million times), and refuses a document deeper
than :data:`MAX_DEPTH`, larger than :data:`MAX_NODES` or with a scalar longer than
:data:`MAX_SCALAR` as soon as it gets there, before anything is built. JSON (journals,
golden files, input sets, signatures, discovery documents) is read by
:func:`read_json` within a byte limit, and nesting too deep for the decoder is refused.
Each refusal is one :class:`gameday.errors.InvalidInput` line.

Bounded work, too: :func:`no_cyclic_gc` holds the cyclic collector back while a bulk
step (reading 10,000 journals, a fleet's fan-out) allocates objects by the million that
form no cycles, which the collector would otherwise walk over and over.
"""

import contextlib
import gc
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import yaml

from gameday.errors import InvalidInput

__all__ = ["MAX_DEPTH", "MAX_JSON_BYTES", "MAX_NODES", "MAX_SCALAR", "MAX_YAML_BYTES",
           "BoundedLoader", "no_cyclic_gc", "read_json", "read_limited"]

#: Largest YAML file, deepest nesting, most nodes (aliases expanded), longest scalar.
MAX_YAML_BYTES: Final = 1_000_000
MAX_DEPTH: Final = 32
MAX_NODES: Final = 50_000
MAX_SCALAR: Final = 65_536
#: Largest JSON document (a journal, a golden file).
MAX_JSON_BYTES: Final = 64 * 1024 * 1024


class TooLarge(yaml.YAMLError):
    """A limit of :class:`BoundedLoader` was passed (``mark``: where)."""

    def __init__(self, problem: str, mark: Any) -> None:
        self.problem = problem
        self.problem_mark = mark
        super().__init__(problem)


class BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, composing within :data:`MAX_DEPTH`, :data:`MAX_NODES`
    (counted with aliases expanded) and :data:`MAX_SCALAR`; raises :class:`TooLarge`."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0
        self._sizes: dict[int, int] = {}  # expanded size of each composed node, by id

    def compose_node(self, parent: Any, index: Any) -> Any:
        alias = self.check_event(yaml.AliasEvent)
        mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise TooLarge(f"nested deeper than {MAX_DEPTH} levels", mark)
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if alias:
            size = self._sizes.get(id(node), 1)
        else:
            if isinstance(node, yaml.ScalarNode) and len(node.value) > MAX_SCALAR:
                raise TooLarge(f"a value longer than {MAX_SCALAR} characters", mark)
            size = 1 + sum(self._sizes.get(id(child), 1) for child in _children(node))
            self._sizes[id(node)] = size
        self._nodes += size if alias else 1
        if self._nodes > MAX_NODES:
            raise TooLarge(f"more than {MAX_NODES} values (aliases expanded)", mark)
        return node


def _children(node: Any) -> list[Any]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def read_limited(path: Path, limit: int, what: str) -> bytes:
    """The bytes of ``path`` if it holds at most ``limit``; :class:`InvalidInput` (naming
    the file; ``what`` it should be) if not, or if it cannot be read."""
    try:
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            data = b"" if size > limit else handle.read(limit + 1)
    except OSError as exc:
        raise InvalidInput(f"cannot read: {exc.strerror}", file=str(path)) from None
    if size > limit or len(data) > limit:
        raise InvalidInput(f"is {max(size, len(data))} bytes, more than the {limit} allowed "
                           f"for {what}", file=str(path))
    return data


def read_json(path: Path, what: str, limit: int = MAX_JSON_BYTES) -> tuple[bytes, Any]:
    """The bytes of the JSON file ``path`` and the value they hold, within ``limit``
    bytes and the decoder's nesting; :class:`InvalidInput` naming the file otherwise."""
    data = read_limited(path, limit, what)
    return data, decode_json(data, str(path), what)


def decode_json(data: bytes | str, where: str, what: str) -> Any:
    """``json.loads`` with its failures (nesting too deep, a number too long) as one
    :class:`InvalidInput` line naming ``where``."""
    try:
        return json.loads(data)
    except RecursionError:
        raise InvalidInput(f"not a {what}: nested too deep", file=where) from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, int digits
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise InvalidInput(f"not a {what}: {first}", file=where) from None


@contextlib.contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """The cyclic collector waits until the block is done (reference counting still frees
    what the block lets go of); nested, only the outermost turns it back on."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
