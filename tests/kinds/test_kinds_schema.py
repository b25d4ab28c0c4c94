"""The catalogue's JSON Schema is the declaration's, and closed everywhere.

``gameday faults --output json`` prints each kind's :meth:`KindSpec.to_json`; its
``params`` schema must name exactly the declared parameters, the selector argument and
``lease_s``, and every object in it (the selector's mapping form included) must refuse
keys it does not list (``additionalProperties: false``; a map of labels, whose keys are
free, holds only strings).
"""

import json
from collections.abc import Iterator
from typing import Any

import pytest

from gameday.cli.main import main
from gameday.kinds import CATALOGUE
from gameday.kinds.selectors import LABEL_VALUE

KINDS = sorted(CATALOGUE)


def _objects(schema: Any) -> Iterator[dict[str, Any]]:
    """Every object schema inside ``schema`` (walked: a schema is small and finite)."""
    if isinstance(schema, dict):
        if schema.get("type") == "object":
            yield schema
        for value in schema.values():
            yield from _objects(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _objects(item)


@pytest.mark.parametrize("name", KINDS)
def test_the_schema_names_what_the_declaration_declares_and_nothing_else(name: str) -> None:
    kind = CATALOGUE[name]
    schema = kind.to_json()["params"]
    declared = {p.name for p in kind.params} | {"lease_s"}
    if kind.selects is not None:
        declared.add(kind.selects.argument)
    assert set(schema["properties"]) == declared
    assert schema["required"] == [p.name for p in kind.params if p.required]
    objects = list(_objects(schema))
    # closed: a selector or parameters lists its keys; a map of labels holds strings only
    assert objects and all(o.get("additionalProperties") is False
                           or o.get("additionalProperties") == LABEL_VALUE
                           for o in objects)
    if kind.selects is not None and kind.selects.mapping_form:
        selector = schema["properties"][kind.selects.argument]
        mapping = next(_objects(selector))
        assert set(mapping["properties"]) == set(kind.selects.key_names)
    for param in kind.params:
        prop = schema["properties"][param.name]
        if param.choices:
            assert set(prop["enum"]) - {None} == set(param.choices)
        if param.minimum is not None:
            bound = "exclusiveMinimum" if param.exclusive_minimum else "minimum"
            assert prop[bound] == param.minimum


def test_the_faults_command_prints_the_declarations(capsys: pytest.CaptureFixture[str]
                                                    ) -> None:
    assert main(["faults", "--output", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)["kinds"]
    assert listed == [CATALOGUE[name].to_json() for name in CATALOGUE]
