"""JSON texts made cheaply: many objects with one encoder call, and a flat object's text
with some of its values changed, without encoding it all again.

Each call of :meth:`json.JSONEncoder.encode` pays a fixed cost (it builds a C encoder
for the call) on top of the work per value; for a small object (a fault's fields, a
GPU's state) that cost is as large as the work. :func:`encode_objects` pays it once for
a batch of objects, and :func:`with_scalars` spares the encoding of the values that
did not change. Both give, byte for byte, what the encoder writes.
"""

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

__all__ = ["encode_objects", "scalar_json", "with_scalars"]

#: Where two objects meet in a list, by item separator (compact, and the default).
_CUTS: Final = {",": "},{", ", ": "}, {"}


def encode_objects(encoder: json.JSONEncoder, objects: Sequence[dict[str, Any]]) -> list[str]:
    """``[encoder.encode(obj) for obj in objects]``, mostly with one call of ``encoder``.

    The list of objects is encoded once and cut between each two objects, where the
    text is ``},{`` (``}, {`` with the default separators; other separators and an
    indent get one call per object). The same characters inside a string or a nested
    value would make one cut too many, which the count of pieces shows (the cuts
    between objects are always there, and two cuts never overlap); the objects are
    then encoded one by one. Raises what the encoder raises.
    """
    if len(objects) < 2 or encoder.indent is not None or encoder.item_separator not in _CUTS:
        return [encoder.encode(obj) for obj in objects]
    text = encoder.encode(objects if isinstance(objects, list) else list(objects))
    pieces = text[2:-2].split(_CUTS[encoder.item_separator])
    if len(pieces) != len(objects):
        return [encoder.encode(obj) for obj in objects]
    return [f"{{{piece}}}" for piece in pieces]


def scalar_json(value: object) -> str | None:
    """``value`` as the JSON encoder writes it, if it is ``None``, a boolean, an integer
    or a finite float (by type: no subclass); ``None`` for anything else."""
    if type(value) is float:  # by how often each comes: times first
        return float.__repr__(value) if math.isfinite(value) else None
    if type(value) is int:
        return int.__repr__(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    return None


def with_scalars(text: str, changes: Mapping[str, Any]) -> str | None:
    """The compact JSON text (separators ``,`` and ``:``) of an object that holds no
    nested object, ``text``, with the values of some of its keys set to ``changes``; or
    ``None`` where that cannot be done safely, and the object is to be encoded again.

    Only a value written as a number, ``true``, ``false`` or ``null``, before and after
    (:func:`scalar_json`), under a key that is an ASCII identifier, is replaced. With
    one ``{`` in ``text`` (a ``{`` in a string makes this answer ``None``), the first
    ``"key":`` in it is the key itself: a ``"`` inside a string is written ``\\"``, and
    only a key is followed by ``:``; and the old value ends at the next ``,`` or ``}``.
    """
    if text.count("{") != 1:
        return None
    for key, value in changes.items():
        new = scalar_json(value)
        if new is None or not (type(key) is str and key.isidentifier() and key.isascii()):
            return None
        tag = f'"{key}":'
        start = text.find(tag)
        if start < 0:
            return None
        start += len(tag)
        if text[start] in '"[':  # a string or a list: it may hold a "," or a "}"
            return None
        comma = text.find(",", start)
        end = text.index("}", start) if comma < 0 else comma
        text = f"{text[:start]}{new}{text[end:]}"
    return text
