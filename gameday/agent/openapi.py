"""The agent API as an OpenAPI 3.1 document, served at ``GET /openapi.json``.

The same document drives the agent's API fuzz test (``tests/safety``), which generates
requests from it, valid and invalid, and checks that the agent never answers 5xx and
never leaves a fault applied that it did not acknowledge. Keep it in step with
``docs/agent-api.md`` and :mod:`gameday.wire.protocol`.
"""

from typing import Any

from gameday.wire.protocol import (
    LEASE_MAX_S,
    LEASE_MIN_S,
    MAX_BATCH_BODY_BYTES,
    MAX_BATCH_ITEMS,
    MAX_BODY_BYTES,
    MAX_REQUEST_ID,
    MINIMAL_FIELDS,
    PREFER_MINIMAL,
    REVERT_REASONS,
)

__all__ = ["spec"]

_LEASE = {"type": "number", "minimum": LEASE_MIN_S, "maximum": LEASE_MAX_S,
          "description": "seconds the fault lives unless renewed"}
_ERROR = {"description": "one-line error", "content": {"application/json": {
    "schema": {"$ref": "#/components/schemas/Error"}}}}
_FAULT = {"description": "the fault", "content": {"application/json": {
    "schema": {"$ref": "#/components/schemas/Fault"}}}}
_BATCH_ANSWER = {"description": "a result per id: the faults done, the ids that failed",
                 "content": {"application/json": {"schema": {
                     "$ref": "#/components/schemas/BatchAnswer"}}}}
_PREFER = {"name": "Prefer", "in": "header", "required": False,
           "description": f"{PREFER_MINIMAL} (RFC 7240): each fault done holds only the "
                          "fields the agent set (MinimalFault), and the answer carries "
                          f"Preference-Applied: {PREFER_MINIMAL}",
           "schema": {"type": "string"}}
_MINIMAL = "a fault in a minimal answer, by what the batch did: " + "; ".join(
    f"{outcome}: {', '.join(names)}" for outcome, names in MINIMAL_FIELDS.items())
_IDS = {"type": "array", "minItems": 1, "maxItems": MAX_BATCH_ITEMS, "uniqueItems": True,
        "items": {"type": "string", "minLength": 1}}
_REQUEST_ID = {"type": "string", "minLength": 1, "maxLength": MAX_REQUEST_ID,
               "pattern": "^[!-~]+$",
               "description": "the caller's idempotency key: a request (or batch) sent again "
                              "with the same ids is not applied again, its faults are "
                              "answered as they are now"}
_MATCHES = ("what the target would hit: processes [{pid, command}], interfaces [name], "
            "service and port, paths [resolved], cgroups, gpus [{index, uuid, name}]; {} "
            "when the item is not admissible or its kind reports nothing")
_HALT = {"description": "the lever", "content": {"application/json": {
    "schema": {"$ref": "#/components/schemas/Lever"}}}}
_HALTED = ("423: the agent's lever is engaged (code halted; halt: the lever): nothing is "
           "applied, checked or renewed until it is released")
_FAULT_ID = {"name": "fault_id", "in": "path", "required": True,
             "schema": {"type": "string", "minLength": 1}}


def _errors(*codes: int) -> dict[str, Any]:
    return {str(code): _ERROR for code in codes}


def spec() -> dict[str, Any]:
    """The OpenAPI document of the agent API."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "gameday node agent", "version": "1",
                 "description": "Leased faults on one node (docs/agent-api.md). Request "
                                f"bodies are JSON objects of at most {MAX_BODY_BYTES} bytes."},
        "security": [{"bearer": []}],
        "paths": {
            "/healthz": {"get": {"security": [], "responses": {"200": {
                "description": "alive"}}}},
            "/metrics": {"get": {"security": [], "responses": {"200": {
                "description": "Prometheus text format"}}}},
            "/openapi.json": {"get": {"security": [], "responses": {"200": {
                "description": "this document"}}}},
            "/v1/inventory": {"get": {"responses": {
                "200": {"description": "GPUs, links, mounts and fault kinds"},
                **_errors(401)}}},
            "/v1/faults": {
                "get": {"parameters": [{"name": "all", "in": "query", "required": False,
                                        "schema": {"type": "string",
                                                   "enum": ["0", "1", "true", "false"]}}],
                        "responses": {"200": {"description": "faults"}, **_errors(401)}},
                "post": {"requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/InjectRequest"}}}},
                    "responses": {"201": _FAULT,
                                  **_errors(400, 401, 403, 409, 411, 413, 423, 503)}},
            },
            "/v1/faults/{fault_id}": {
                "parameters": [_FAULT_ID],
                "get": {"responses": {"200": _FAULT, **_errors(401, 404)}},
                "delete": {"responses": {"200": _FAULT, **_errors(401, 404)}},
            },
            "/v1/faults/{fault_id}/renew": {
                "parameters": [_FAULT_ID],
                "post": {"requestBody": {"required": False, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/RenewRequest"}}}},
                    "responses": {"200": _FAULT, **_errors(400, 401, 404, 410, 423)}},
            },
            "/v1/faults:batch": {"post": {
                "description": f"apply up to {MAX_BATCH_ITEMS} faults, all or nothing (body "
                               f"up to {MAX_BATCH_BODY_BYTES} bytes); an error names the "
                               "item (index) and the ids rolled back",
                "parameters": [_PREFER],
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/BatchInjectRequest"}}}},
                "responses": {"201": {"description": "the faults, in order"},
                              **_errors(400, 401, 403, 409, 411, 413, 423, 503)}}},
            "/v1/faults:batch-revert": {"post": {
                "parameters": [_PREFER],
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/BatchRevertRequest"}}}},
                "responses": {"200": _BATCH_ANSWER, **_errors(400, 401, 411, 413)}}},
            "/v1/faults:batch-renew": {"post": {
                "parameters": [_PREFER],
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/BatchRenewRequest"}}}},
                "responses": {"200": _BATCH_ANSWER, **_errors(400, 401, 411, 413, 423)}}},
            "/v1/requests:resolve": {"post": {
                "description": "settle request ids whose answer was never read: a request "
                               "applied is reverted (outcome reverted, with its fault); one "
                               "never applied is refused from now on (outcome "
                               "never_applied)",
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/ResolveRequest"}}}},
                "responses": {"200": {"description": "an outcome per request id, in order",
                                      "content": {"application/json": {"schema": {
                                          "$ref": "#/components/schemas/ResolveAnswer"}}}},
                              **_errors(400, 401, 411, 413, 500)}}},
            "/v1/faults:check": {"post": {
                "description": f"what injecting each of up to {MAX_BATCH_ITEMS} faults would "
                               "answer (validation, the agent's policy, conflicts with held "
                               "faults, caps) and what its target would hit, read-only: "
                               "nothing is signalled, mounted, written or locked",
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/BatchInjectRequest"}}}},
                "responses": {"200": {"description": "a result per item, in order",
                                      "content": {"application/json": {"schema": {
                                          "$ref": "#/components/schemas/CheckAnswer"}}}},
                              **_errors(400, 401, 411, 413, 423, 503)}}},
            "/v1/halt": {
                "get": {"description": _HALTED, "responses": {"200": _HALT, **_errors(401)}},
                "post": {"description": "engage the lever: every fault held is reverted "
                                        "(reason halted) before the answer, and new ones are "
                                        "refused until it is released; engaging an engaged "
                                        "lever keeps its first who, when and why",
                         "requestBody": {"required": False, "content": {"application/json": {
                             "schema": {"$ref": "#/components/schemas/HaltRequest"}}}},
                         "responses": {"200": _HALT, **_errors(400, 401, 411, 413)}},
                "delete": {"description": "release the lever (423 while the fleet's "
                                          "Kubernetes object holds it)",
                           "responses": {"200": _HALT, **_errors(401, 423)}},
            },
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "InjectRequest": {
                    "type": "object", "additionalProperties": False,
                    "required": ["kind", "target", "lease_s"],
                    "properties": {"kind": {"type": "string", "minLength": 1},
                                   "target": {"type": "object"},
                                   "params": {"type": "object"},
                                   "lease_s": _LEASE, "run": {"type": "string"},
                                                  "request_id": _REQUEST_ID}},
                "ResolveRequest": {"type": "object", "additionalProperties": False,
                                   "required": ["request_ids"],
                                   "properties": {"request_ids": {
                                       "type": "array", "minItems": 1,
                                       "maxItems": MAX_BATCH_ITEMS, "uniqueItems": True,
                                       "items": _REQUEST_ID}}},
                "ResolveAnswer": {"type": "object", "required": ["requests"], "properties": {
                    "requests": {"type": "array", "items": {
                        "type": "object", "required": ["request_id", "outcome"],
                        "properties": {"request_id": {"type": "string"},
                                       "outcome": {"enum": ["reverted", "never_applied"]},
                                       "fault": {"anyOf": [
                                           {"$ref": "#/components/schemas/Fault"},
                                           {"type": "null"}]}}}}}},
                "RenewRequest": {"type": "object", "additionalProperties": False,
                                 "properties": {"lease_s": _LEASE}},
                "BatchInjectRequest": {
                    "type": "object", "additionalProperties": False, "required": ["faults"],
                    "properties": {"faults": {
                        "type": "array", "minItems": 1, "maxItems": MAX_BATCH_ITEMS,
                        "items": {"$ref": "#/components/schemas/InjectRequest"}}}},
                "BatchRevertRequest": {"type": "object", "additionalProperties": False,
                                       "required": ["ids"], "properties": {"ids": _IDS}},
                "BatchRenewRequest": {"type": "object", "additionalProperties": False,
                                      "required": ["ids"],
                                      "properties": {"ids": _IDS, "lease_s": _LEASE}},
                "BatchAnswer": {"type": "object", "required": ["faults", "failed"],
                                "properties": {
                                    "faults": {"type": "array", "items": {"anyOf": [
                                        {"$ref": "#/components/schemas/Fault"},
                                        {"$ref": "#/components/schemas/MinimalFault"}]}},
                                    "failed": {"type": "array", "items": {
                                        "type": "object", "required": ["id", "status", "error"],
                                        "properties": {"id": {"type": "string"},
                                                       "status": {"type": "integer"},
                                                       "error": {"type": "string"}}}}}},
                "CheckAnswer": {"type": "object", "required": ["results"], "properties": {
                    "results": {"type": "array", "items": {
                        "type": "object",
                        "required": ["index", "admissible", "status", "error", "matches"],
                        "properties": {
                            "index": {"type": "integer"}, "admissible": {"type": "boolean"},
                            "status": {"enum": [200, 400, 403, 409, 429]},
                            "error": {"type": ["string", "null"]},
                            "matches": {"type": "object", "description": _MATCHES}}}}}},
                "Fault": {"type": "object", "required": ["id", "kind", "applied_at",
                                                         "expires_at"],
                          "properties": {"id": {"type": "string"}, "kind": {"type": "string"},
                                         "applied_at": {"type": "number"},
                                         "expires_at": {"type": "number"},
                                         "reverted_at": {"type": ["number", "null"]},
                                         "revert_reason": {"enum": [*REVERT_REASONS, None]}}},
                "HaltRequest": {"type": "object", "additionalProperties": False,
                                "properties": {"reason": {"type": "string"}}},
                "Lever": {"type": "object", "required": ["node", "engaged"], "properties": {
                    "node": {"type": "string"}, "engaged": {"type": "boolean"},
                    "reason": {"type": "string"},
                    "engaged_by": {"type": "string",
                                   "description": "client identity: certificate identity, "
                                                  "token fingerprint, else address"},
                    "engaged_at": {"type": ["number", "null"]},
                    "source": {"enum": ["api", "kubernetes"]},
                    "released_by": {"type": "string"},
                    "released_at": {"type": ["number", "null"]},
                    "active": {"type": "integer",
                               "description": "faults still held (POST only)"}}},
                "MinimalFault": {"description": _MINIMAL, "type": "object", "required": ["id"],
                                 "properties": {"id": {"type": "string"}}},
                "Error": {"type": "object", "required": ["error"],
                          "properties": {"error": {"type": "string"}}},
            },
        },
    }
