"""``gameday validate`` and ``gameday plan`` give the same verdict on a process selector,
whatever its variables: a property test over random documents.

Each example writes a ``process.kill`` experiment whose selector mixes literal values
and ``${variables}`` (at the top level and nested: ``parent.pid``, ``env``, ``pick``),
with ``--var`` values drawn from good and bad ones (numbers, non-numbers, pids 0 and 1,
empty strings). Validate's verdict: ``check_experiment`` with the variables. Plan's:
the experiment loaded as ``gameday plan`` loads it, then its fault resolved the way the
plan resolves it (the action run in a :class:`PreviewSession`, which stops where it
would send). The plan's target is a stand-in host target whose agent is never
contacted (the preview stops before any request): the resolution of a host process
selector needs no agent answer.
"""

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gameday.engine.plan import Plan, PreviewSession, _plan_fault
from gameday.engine.session import deactivate
from gameday.errors import InvalidInput
from gameday.experiment.loader import check_experiment, load_experiment
from gameday.kinds import by_activity
from gameday.safety.targetconfig import TargetConfig
from gameday.targets.base import Target, loaded_configuration
from gameday.wire.agent_client import AgentClient
from tests.conftest import write_experiment

VALUES = st.sampled_from(["26928", "4242", "1", "0", "-3", "abc", "", "python",
                          "time.sleep", "2.5", "true"])


@st.composite
def selectors(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, str]]:
    """A process selector and the ``--var`` values it uses."""
    variables: dict[str, str] = {}

    def value(literal: st.SearchStrategy[Any]) -> Any:
        if draw(st.booleans()):
            name = f"v{len(variables)}"
            variables[name] = draw(VALUES)
            return f"${{{name}}}"
        return draw(literal)

    selector: dict[str, Any] = {}
    which = draw(st.sampled_from(["pid", "name", "cmdline", "none", "two"]))
    if which in ("pid", "two"):
        selector["pid"] = value(st.sampled_from([0, 1, 26928, "x"]))
    if which in ("name", "two"):
        selector["name"] = value(st.sampled_from(["python", ""]))
    if which == "cmdline":
        selector["cmdline"] = value(st.sampled_from(["time.sleep", ""]))
    if draw(st.booleans()):
        selector["parent"] = {"pid": value(st.sampled_from([1, 26928, "y"]))}
    if draw(st.booleans()):
        selector["env"] = {"RANK": value(st.sampled_from(["0", "1"]))}
    if draw(st.booleans()):
        pick: dict[str, Any] = {"seed": value(st.sampled_from([0, 7, -1]))}
        pick["count" if draw(st.booleans()) else "percent"] = value(
            st.sampled_from([1, 0, 50, 150]))
        selector["pick"] = pick
    return selector, variables


def _kill_experiment(directory: str, selector: dict[str, Any]) -> Path:
    return write_experiment(Path(directory) / "exp.yaml", {
        "version": "1.0.0", "title": "kill", "description": "validate and plan",
        "extensions": [{"name": "gameday", "target": "host"}],
        "method": [{"type": "action", "name": "kill-it", "provider": {
            "type": "python", "module": "faults.process", "func": "kill",
            "arguments": {"process": selector}}}]})


def _validate(path: Path, variables: dict[str, str]) -> bool:
    _, errors = check_experiment(path, variables=variables)
    return not errors


def _plan(path: Path, variables: dict[str, str]) -> bool:
    try:
        loaded = load_experiment(path, variables)
    except InvalidInput:
        return False
    target = Target(kind="host", agents={"host-0": AgentClient("http://127.0.0.1:9", "t")})
    result = Plan(experiment=path, target="host", target_state="open")
    session = PreviewSession(target=target, extension=loaded.extension,
                             target_config=TargetConfig())
    activity = loaded.experiment["method"][0]
    kind = by_activity("faults.process", "kill")
    assert kind is not None
    try:
        fault = _plan_fault(loaded, 0, activity, kind, target, session,
                            loaded_configuration(loaded.experiment, target, variables), result)
    finally:
        deactivate()
    return fault.error is None


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(drawn=selectors())
def test_validate_and_plan_give_the_same_verdict(drawn: tuple[dict[str, Any],
                                                              dict[str, str]]) -> None:
    selector, variables = drawn
    with tempfile.TemporaryDirectory() as tmp:
        path = _kill_experiment(tmp, selector)
        assert _validate(path, variables) == _plan(path, variables), (selector, variables)


def test_a_nested_typed_variable_passes_both() -> None:
    """The issue's case: ``process: {pid: "${replica_pid}"}`` with ``--var
    replica_pid=26928``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = _kill_experiment(tmp, {"pid": "${replica_pid}"})
        variables = {"replica_pid": "26928"}
        assert _validate(path, variables) and _plan(path, variables)
        loaded = load_experiment(path, variables)
        selector = loaded.experiment["method"][0]["provider"]["arguments"]["process"]
        assert selector == {"pid": 26928}
        assert not _validate(path, {"replica_pid": "1"})
        assert not _plan(path, {"replica_pid": "1"})
        _, errors = check_experiment(path, variables={"replica_pid": "abc"})
        assert "--var replica_pid is 'abc', not an integer as argument 'process.pid'" in \
            str(errors[0])
