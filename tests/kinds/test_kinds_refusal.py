"""Every kind's declaration refuses what it does not declare, on both sides, as a property.

For every kind of the catalogue, random parameters are drawn from its own declaration:
valid ones, and the same with an unknown key (short, huge, or holding a deeply nested or
huge value), a wrong type, or a value out of bounds. The validator ``gameday validate``
runs on an activity's arguments (:meth:`KindSpec.check_arguments`, in-process) refuses
each bad one with the key path and accepts each valid one; so does a real agent over
HTTP (``gameday.testing.agent``, a real server on loopback): a bad request is a ``400``
naming ``params.<key>``, the agent holds nothing and its backend was never called; a
valid one is applied and then reverted.

The agent's backend here records what it is asked and applies nothing: it offers every
agent-side kind (``k8s.*`` kinds are applied by the orchestrator through the Kubernetes
API, not by an agent, so the agent half leaves them out). The lab's virtual GPUs, a real
backend, are checked the same way for the ``gpu.*`` kinds.
"""

import math
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gameday import testing
from gameday.contract.backend import FaultRequest
from gameday.errors import AgentError, InvalidInput
from gameday.kinds import CATALOGUE, KindParams, KindSpec, Param
from gameday.lab.devices import VirtualGpuBackend

KINDS = sorted(CATALOGUE)
AGENT_KINDS = [name for name in KINDS if not name.startswith("k8s.")]
GPU_KINDS = [name for name in KINDS if name.startswith("gpu.")]
SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.filter_too_much, HealthCheck.too_slow])


class RecordingBackend:
    """Offers every agent-side kind; records each apply and revert, applies nothing."""

    name = "recording"

    def __init__(self) -> None:
        self.applied: list[FaultRequest] = []
        self.reverted: list[str] = []
        self._lock = threading.Lock()

    def inventory(self) -> dict[str, Any]:
        return {"node": "node-0", "gpus": [], "links": [], "mounts": []}

    def kinds(self) -> Mapping[str, str]:
        return {name: "process" for name in AGENT_KINDS}

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        CATALOGUE[request.kind].parse(request.params)  # what a backend reads
        with self._lock:
            self.applied.append(request)
        return {}

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        with self._lock:
            self.reverted.append(fault_id)


# -- strategies from the declaration -------------------------------------------------

def _valid_value(param: Param) -> st.SearchStrategy[Any]:
    if param.choices:
        base: st.SearchStrategy[Any] = st.sampled_from(param.choices)
    elif param.type is bool:
        base = st.booleans()
    elif param.type is int:
        low = math.ceil(param.minimum + (1 if param.exclusive_minimum else 0)) \
            if param.minimum is not None else -10**6
        base = st.integers(low, int(param.maximum) if param.maximum is not None else 10**6)
    elif param.type is float:
        base = st.floats(param.minimum if param.minimum is not None else -1e6,
                         param.maximum if param.maximum is not None else 1e6,
                         exclude_min=param.exclusive_minimum, allow_nan=False)
    elif param.type is tuple:
        base = st.lists(st.sampled_from(("read", "write", "fsync", "all", "data")),
                        min_size=1, max_size=3)
    else:
        base = st.text(max_size=20)
    return st.none() | base if param.nullable else base


@st.composite
def valid_params(draw: st.DrawFn, kind: KindSpec[KindParams]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for param in kind.params:
        if param.required or draw(st.booleans()):
            values[param.name] = draw(_valid_value(param))
    try:
        kind.parse(values)
    except InvalidInput:  # a rule across parameters (exactly one of ...): draw again
        assume(False)
    return values


def _deep(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


unknown_values = st.one_of(
    st.none(), st.integers(), st.text(max_size=30), st.booleans(),
    st.integers(10, 600).map(_deep),                    # deeply nested
    st.integers(10_000, 200_000).map(lambda n: "x" * n),  # huge
    st.lists(st.integers(), max_size=50),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=10))


@st.composite
def unknown_key(draw: st.DrawFn, kind: KindSpec[KindParams]) -> str:
    known = {p.name for p in kind.params}
    key = draw(st.one_of(st.sampled_from(("zz", "Count", "xid ", "lease", "__class__")),
                         st.text(min_size=1, max_size=40),
                         st.integers(200, 5000).map(lambda n: "k" * n)))
    assume(key not in known)
    return key


def _wrong_type(param: Param) -> st.SearchStrategy[Any]:
    if param.type is bool:
        return st.sampled_from([1, 0, "true", [True]])
    if param.type in (int, float):
        wrong = st.sampled_from(["x", "1", True, [1], {"v": 1}])
        return wrong | st.floats(0.5, 0.9) if param.type is int else wrong
    if param.type is tuple:
        return st.sampled_from(["read", 3, {"read": 1}, [1], []])
    return st.sampled_from([5, 2.5, True, ["a"], {"s": "t"}])


def _out_of_range(param: Param) -> st.SearchStrategy[Any] | None:
    bad: list[Any] = []
    if param.minimum is not None:
        bad.append(param.minimum if param.exclusive_minimum else param.minimum - 1)
    if param.maximum is not None:
        bad.append(param.maximum + 1)
    if param.choices and param.type is not bool:
        bad.append("no-such-choice" if param.type is str else 10**9 + 7)
    if not bad:
        return None
    return st.sampled_from([int(v) if param.type is int else v for v in bad])


@st.composite
def bad_params(draw: st.DrawFn, kind: KindSpec[KindParams]) -> tuple[dict[str, Any], str]:
    """Valid parameters spoiled in one place, and the key path the refusal must name."""
    values = draw(valid_params(kind))
    spoilable = [p for p in kind.params]
    how = draw(st.sampled_from(["unknown", "type", "range"] if spoilable else ["unknown"]))
    if how == "unknown":
        key = draw(unknown_key(kind))
        values[key] = draw(unknown_values)
        shown = key if len(key) <= 60 else key[:60] + "..."  # errors cut a long key
        return values, "params." + "".join(c if c.isprintable() else repr(c)[1:-1]
                                           for c in shown)  # and escape what does not print
    param = draw(st.sampled_from(spoilable))
    strategy = _wrong_type(param) if how == "type" else _out_of_range(param)
    assume(strategy is not None)
    assert strategy is not None
    values[param.name] = draw(strategy)
    return values, f"params.{param.name}"


def _names(error: str, path: str) -> bool:
    """Whether ``error`` is about ``path`` (or an item of it: ``params.ops[0]``), or is
    the agent's refusal of a body nested deeper than it parses (a value under ``path``
    more than 32 levels deep is refused whole, before its keys are read)."""
    return f"{path}:" in error or f"{path}[" in error or "nested deeper than 32" in error


# -- the validator ---------------------------------------------------------------------

@pytest.mark.parametrize("name", KINDS)
@SETTINGS
@given(data=st.data())
def test_validate_refuses_what_the_kind_does_not_declare(name: str, data: st.DataObject
                                                         ) -> None:
    kind = CATALOGUE[name]
    values, path = data.draw(bad_params(kind))
    with pytest.raises(InvalidInput) as refused:
        kind.check_arguments(values, path="params", skip_unresolved=True)
    assert _names(str(refused.value), path), str(refused.value)
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 1000


@pytest.mark.parametrize("name", KINDS)
@SETTINGS
@given(data=st.data())
def test_validate_accepts_what_the_kind_declares(name: str, data: st.DataObject) -> None:
    kind = CATALOGUE[name]
    values = data.draw(valid_params(kind))
    kind.check_arguments(values, skip_unresolved=True)
    assert kind.parse(kind.parse(values).to_json()) == kind.parse(values)  # a fixed point


# -- a real agent over HTTP -------------------------------------------------------------

def _refused_naming(error: AgentError, path: str) -> None:
    """A 400 naming the key path; or a 413 when the value alone is over the agent's body
    cap (refused before any parse, so nothing is applied either)."""
    assert error.status in (400, 413), str(error)
    if error.status == 400:
        assert _names(str(error), path), str(error)


@pytest.fixture(scope="module")
def recording() -> Iterator[tuple[testing.RunningAgent, RecordingBackend]]:
    backend = RecordingBackend()
    with testing.agent(backend) as running:
        yield running, backend


@pytest.fixture(scope="module")
def virtual() -> Iterator[testing.RunningAgent]:
    with testing.agent(gpus=2) as running:
        yield running


@pytest.mark.parametrize("name", AGENT_KINDS)
@SETTINGS
@given(data=st.data())
def test_the_agent_refuses_what_the_kind_does_not_declare_and_applies_nothing(
        name: str, data: st.DataObject,
        recording: tuple[testing.RunningAgent, RecordingBackend]) -> None:
    running, backend = recording
    values, path = data.draw(bad_params(CATALOGUE[name]))
    before = len(backend.applied)
    with running.client() as client:
        with pytest.raises(AgentError) as refused:
            client.inject(name, {"node": "node-0"}, values, 30)
        _refused_naming(refused.value, path)
        if refused.value.status == 400 and "nested deeper" not in str(refused.value):
            [checked] = client.check_many([{"kind": name, "target": {"node": "node-0"},
                                            "params": values, "lease_s": 30}])
            assert checked["status"] == 400 and _names(checked["error"], path)
        elif refused.value.status == 400:  # the whole body is refused, the check's too
            with pytest.raises(AgentError, match="nested deeper than 32"):
                client.check_many([{"kind": name, "target": {"node": "node-0"},
                                    "params": values, "lease_s": 30}])
        assert client.faults() == []
    assert len(backend.applied) == before  # the backend was never asked


@pytest.mark.parametrize("name", AGENT_KINDS)
@SETTINGS
@given(data=st.data())
def test_the_agent_applies_what_the_kind_declares(
        name: str, data: st.DataObject,
        recording: tuple[testing.RunningAgent, RecordingBackend]) -> None:
    running, backend = recording
    values = data.draw(valid_params(CATALOGUE[name]))
    with running.client() as client:
        fault = client.inject(name, {"node": "node-0"}, values, 30)
        assert backend.applied[-1].params == values
        client.revert(fault["id"])
        assert client.faults() == []


@pytest.mark.parametrize("name", GPU_KINDS)
@SETTINGS
@given(data=st.data())
def test_the_labs_virtual_gpus_are_untouched_by_a_refused_request(
        name: str, data: st.DataObject, virtual: testing.RunningAgent) -> None:
    values, path = data.draw(bad_params(CATALOGUE[name]))
    backend = virtual.server.registry.backend
    assert isinstance(backend, VirtualGpuBackend)
    before = backend.snapshot()
    with virtual.client() as client:
        with pytest.raises(AgentError) as refused:
            client.inject(name, {"gpu": 0}, values, 30)
        _refused_naming(refused.value, path)
        assert client.faults() == []
    assert backend.snapshot() == before


SELECTING = [name for name in KINDS
             if CATALOGUE[name].selects is not None and CATALOGUE[name].selects.mapping_form]


@pytest.mark.parametrize("name", SELECTING)
@SETTINGS
@given(data=st.data())
def test_validate_refuses_a_selector_key_the_kind_does_not_declare(
        name: str, data: st.DataObject) -> None:
    kind = CATALOGUE[name]
    selects = kind.selects
    assert selects is not None
    key = data.draw(st.text(min_size=1, max_size=30).filter(
        lambda k: k not in selects.key_names))
    nested = [k for k in selects.keys if k.nested is not None]
    arguments: dict[str, Any] = data.draw(valid_params(kind))
    if nested and data.draw(st.booleans()):  # one level down: parent, pod, gpu
        where = data.draw(st.sampled_from(nested))
        assert where.nested is not None
        assume(key not in where.nested.key_names)
        arguments[selects.argument] = {where.name: {key: data.draw(unknown_values)}}
        path = f"arguments.{selects.argument}.{where.name}."
    else:
        arguments[selects.argument] = {key: data.draw(unknown_values)}
        path = f"arguments.{selects.argument}."
    with pytest.raises(InvalidInput) as refused:
        kind.check_arguments(arguments)
    assert str(refused.value).startswith(path), str(refused.value)
    assert "unknown key (known: " in str(refused.value)
