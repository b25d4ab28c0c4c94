"""Request templates and output selectors: talk to any HTTP JSON model endpoint.

A **request template** is any JSON value; strings that are exactly a placeholder are
replaced by the golden input set:

- ``"$inputs"``: the rows, ``[[...], ...]``;
- ``"$inputs_flat"``: the rows flattened, ``[...]`` (KServe v2 ``data``);
- ``"$shape"``: ``[rows, cols]``; ``"$rows"``, ``"$cols"``: the numbers.

For example TensorFlow Serving / KServe v1 ``{"instances": "$inputs"}``, KServe v2 /
Triton ``{"inputs": [{"name": "x", "shape": "$shape", "datatype": "FP64", "data":
"$inputs_flat"}]}``. The default is ``{"inputs": "$inputs"}`` (the lab's router).

An **output selector** is a dotted path into the answer: object keys and list indexes,
e.g. ``outputs`` (default), ``predictions``, ``outputs.0.data``; ``$`` is the whole
answer. A shape selector (``outputs.0.shape``) reshapes flat data.
"""

from collections.abc import Mapping
from typing import Any

from gameday.errors import GamedayError

__all__ = ["DEFAULT_TEMPLATE", "TemplateError", "render", "select"]

DEFAULT_TEMPLATE: dict[str, Any] = {"inputs": "$inputs"}


class TemplateError(GamedayError):
    """A template or selector that does not fit the inputs or the answer."""


def render(template: Any, inputs: list[list[float]]) -> Any:
    """``template`` with every placeholder string replaced (see the module docs)."""
    values: dict[str, Any] = {
        "$inputs": inputs, "$inputs_flat": [value for row in inputs for value in row],
        "$shape": [len(inputs), len(inputs[0]) if inputs else 0], "$rows": len(inputs),
        "$cols": len(inputs[0]) if inputs else 0}
    found = False

    def walk(node: Any) -> Any:
        nonlocal found
        if isinstance(node, str) and node.startswith("$"):
            if node not in values:
                raise TemplateError(f"request template: unknown placeholder {node!r} "
                                    f"(known: {', '.join(values)})")
            found = found or node in ("$inputs", "$inputs_flat")
            return values[node]
        if isinstance(node, Mapping):
            return {str(key): walk(value) for key, value in node.items()}
        if isinstance(node, list):
            return [walk(value) for value in node]
        return node

    rendered = walk(template)
    if not found:
        raise TemplateError('request template has no "$inputs" or "$inputs_flat" placeholder')
    return rendered


def select(document: Any, path: str) -> Any:
    """The value at dotted ``path`` in ``document`` (``$`` = all of it); a one-line
    ``TemplateError`` naming the first step that is missing."""
    if path in ("$", ""):
        return document
    node = document
    walked: list[str] = []
    for step in path.split("."):
        if isinstance(node, Mapping) and step in node:
            node = node[step]
        elif isinstance(node, list) and step.lstrip("-").isdigit() and \
                -len(node) <= int(step) < len(node):
            node = node[int(step)]
        else:
            where = ".".join(walked) or "the answer"
            have = (f"keys: {', '.join(sorted(map(str, node))[:8])}" if isinstance(node, Mapping)
                    else f"a list of {len(node)}" if isinstance(node, list)
                    else type(node).__name__)
            raise TemplateError(f"output selector {path!r}: no {step!r} in {where} ({have})")
        walked.append(step)
    return node
