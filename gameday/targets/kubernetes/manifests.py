"""Validate Kubernetes manifests against the official client's models, offline.

Each YAML document is deserialised into its model (``V1DaemonSet``, ``V1ClusterRole``,
...) with ``kubernetes.client.ApiClient().deserialize``, which enforces required fields
and types; the client silently drops fields it does not know, so every key is also
checked against the model's wire names first (a misspelt ``nodeSelectr`` is an error,
not a no-op). Errors are one line: ``FILE: document N (KIND NAME): path: problem``.

This is what ``tests/kubernetes`` runs over ``deploy/kubernetes/``; no cluster is needed (and
none was used): admission, defaulting and server-side validation are not covered.
"""

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from gameday.errors import InvalidInput

__all__ = ["ValidatedDocument", "validate_file", "validate_manifest"]

_LIST = re.compile(r"^List\[(.+)\]$")
_DICT = re.compile(r"^Dict\[str, (.+)\]$")
_PREFIX = {"v1": "V1", "apps/v1": "V1", "batch/v1": "V1", "policy/v1": "V1",
           "rbac.authorization.k8s.io/v1": "V1", "scheduling.k8s.io/v1": "V1",
           "networking.k8s.io/v1": "V1"}


class ValidatedDocument:
    """One manifest document and the client model it deserialised into."""

    def __init__(self, document: dict[str, Any], model: Any) -> None:
        self.document = document
        self.model = model
        self.kind = str(document.get("kind"))
        self.name = str((document.get("metadata") or {}).get("name", ""))


def _model_class(type_name: str) -> Any:
    import kubernetes.client as models

    return getattr(models, type_name, None)


def _unknown_fields(value: Any, type_name: str, path: str) -> Iterator[str]:
    """Paths of keys the model ``type_name`` does not define, anywhere below ``value``."""
    if (match := _LIST.match(type_name)) and isinstance(value, list):
        for position, item in enumerate(value):
            yield from _unknown_fields(item, match.group(1), f"{path}[{position}]")
        return
    if (match := _DICT.match(type_name)) and isinstance(value, dict):
        for key, item in value.items():
            yield from _unknown_fields(item, match.group(1), f"{path}.{key}")
        return
    cls = _model_class(type_name)
    if cls is None or not isinstance(value, dict):
        return
    wire = {w: attr for attr, w in cls.attribute_map.items()}
    for key, item in value.items():
        if key not in wire:
            yield f"{path}.{key}".lstrip(".")
        else:
            yield from _unknown_fields(item, cls.openapi_types[wire[key]], f"{path}.{key}")


def validate_manifest(document: dict[str, Any], *, where: str = "") -> ValidatedDocument:
    """Deserialise one document into its model; :class:`InvalidInput` on any problem."""
    from kubernetes.client import ApiClient

    kind, api_version = document.get("kind"), document.get("apiVersion")
    name = (document.get("metadata") or {}).get("name", "?")
    label = f"{where}{kind} {name}"
    prefix = _PREFIX.get(str(api_version))
    if not isinstance(kind, str) or prefix is None or _model_class(prefix + kind) is None:
        raise InvalidInput(f"{label}: unsupported apiVersion/kind {api_version}/{kind}")
    type_name = prefix + kind
    unknown = list(_unknown_fields(document, type_name, ""))
    if unknown:
        raise InvalidInput(f"{label}: unknown field {unknown[0]} (not in {type_name})")
    try:
        model = ApiClient().deserialize(json.dumps(document), type_name, "application/json")
    except Exception as exc:  # pydantic's ValidationError: missing or mistyped fields
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        detail = " ".join(lines[1:3]) if len(lines) > 1 else (lines[0] if lines else "")
        raise InvalidInput(f"{label}: does not fit {type_name}: {detail}") from None
    return ValidatedDocument(document, model)


def validate_file(path: Path) -> list[ValidatedDocument]:
    """Every document of a multi-document YAML file, validated."""
    try:
        documents = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    except (OSError, yaml.YAMLError) as exc:
        raise InvalidInput(f"cannot read manifest: {exc}", file=str(path)) from None
    validated = []
    for position, document in enumerate(documents):
        if not isinstance(document, dict):
            raise InvalidInput(f"document {position} is not a mapping", file=str(path))
        validated.append(validate_manifest(document,
                                           where=f"{path}: document {position}: "))
    return validated
