"""``gameday cleanup [--all-agents] [--force] [--forget-unreachable]``: revert whatever
faults are still held.

1. The ledger (``$GAMEDAY_HOME/ledger.jsonl``) is replayed; every fault it holds as
   applied and never reverted (nor forgotten) is reverted, and a ``reverted`` event is
   appended, so a second cleanup finds nothing to do:

   - a fault applied through an agent (``via: agent``), through that agent (the
     ``inverse`` the ledger recorded);
   - a fault applied through the Kubernetes API (``via: kubernetes``: cordon, taint,
     the cordon of a drain), through the API, with the same code a run uses
     (:class:`gameday.targets.kubernetes.target.KubernetesRoute`: uncordon, untaint, drop the
     ``gameday.dev/revert`` mark). The API is reached as ``--target kubernetes`` reaches
     it, from the environment (``GAMEDAY_K8S_API_URL`` + ``GAMEDAY_K8S_API_TOKEN``,
     ``KUBECONFIG`` / ``GAMEDAY_K8S_CONTEXT``, ``~/.kube/config``, else the in-cluster
     service account). Idempotent: a mark already undone (by the node agent's
     reconciler, by hand) is reported as already reverted.

     With no Kubernetes configuration, the fault is left to the node agents'
     reconcilers (``gameday agent serve --reconcile-kubernetes``), which undo the mark
     at its recorded deadline: cleanup says so with the deadline. That is not a failure
     when the deadline is in the past or at most one lease away (nothing renews it any
     more, so the reconciler acts within a lease); a deadline further away, or none
     recorded, is a failure.
1a. Every request the ledger holds an ``intent`` of but no outcome (the orchestrator
   died between sending it and reading the answer) is resolved by asking its agent
   (``POST /v1/requests:resolve``): reverted if the agent applied it, else refused by
   the agent from then on and recorded as ``never_applied``. A Kubernetes-level intent
   is resolved through the API: its mark (by id) is undone if it is on the node
   (``reverted``), else recorded as ``not_held``. Each outcome is a ``resolved`` event.
2. With ``--all-agents`` every known agent is also asked for its active faults, and
   each is reverted: the lab's agents (``lab.json``), those of the target
   configuration (``--target-config`` / ``$GAMEDAY_TARGET_CONFIG``) and the host agent
   of ``$GAMEDAY_AGENT_URL``.
3. A ledger fault whose agent cannot be reached (connection refused or timed out, no
   token known for its URL, or its token refused: a lab restarted on new ports, a
   decommissioned node), or whose node the Kubernetes API says does not exist, fails,
   and the line suggests ``--forget-unreachable``. With that flag, after trying, cleanup
   appends a ``forgotten`` event (fsync'd, with the reason) and later cleanups skip the
   fault. Forgetting is safe for agent faults: they are leased, so an agent that still
   exists reverts them itself when the lease expires; a node that does not exist holds
   no cordon or taint.

4. Alertmanager silences the ledger records as created and never expired
   (``silence-created`` without ``silence-expired``) are expired, and a
   ``silence-expired`` event is appended. One that cannot be reached but whose end time
   has passed has ended by itself and is recorded so; one that has not fails.

Faults (and silences) of a run that is still alive (it holds its target locks) are left alone unless
``--force`` is given. One line per fault; the exit code is 0 when nothing is left that
cleanup is responsible for and could not revert, else 1.
"""

import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from gameday.clock import SYSTEM_CLOCK, Clock
from gameday.errors import AgentError, GamedayError, ObservabilityError, first_line
from gameday.evidence.ledger import (
    FaultEntry,
    append_event,
    open_intents,
    read_ledger,
    read_silences,
)
from gameday.safety.alertmanager import AlertmanagerClient
from gameday.safety.locks import runs_holding_locks
from gameday.safety.targetconfig import TargetConfig
from gameday.targets.agent_tls import agent_tls_from
from gameday.targets.base import read_lab_document
from gameday.wire.agent_client import AgentClient
from gameday.wire.protocol import MAX_BATCH_ITEMS

#: Agent answers that mean "not the agent that holds this fault" (besides no answer).
_UNREACHABLE_STATUSES = (None, 401, 403)

FORGET_HINT = ("if it no longer exists, `gameday cleanup --forget-unreachable` forgets "
               "this fault")


@dataclass
class CleanupReport:
    reverted: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)  # left to the node agents' reconcilers
    forgotten: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    never_applied: list[str] = field(default_factory=list)  # intents the agent never applied

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0


def known_agents(lab_dir: Path | None, config: TargetConfig) -> tuple[dict[str, AgentClient],
                                                                     list[str]]:
    """Every agent this machine knows how to reach, by URL; plus why some could not be."""
    clients: dict[str, AgentClient] = {}
    problems: list[str] = []
    if lab_dir is not None and (lab_dir / "lab.json").exists():
        try:
            document = read_lab_document(lab_dir)
            token = Path(document["token_file"]).read_text(encoding="utf-8").strip()
            for node in document.get("nodes", []):
                clients[str(node["agent_url"]).rstrip("/")] = AgentClient(node["agent_url"],
                                                                         token)
        except (GamedayError, OSError, KeyError, TypeError) as exc:
            problems.append(f"lab in {lab_dir}: {exc}")
    for endpoint in config.agents:
        try:
            clients[endpoint.url.rstrip("/")] = endpoint.client()
        except GamedayError as exc:
            problems.append(str(exc))
    host_url = os.environ.get("GAMEDAY_AGENT_URL")
    host_token = os.environ.get("GAMEDAY_AGENT_TOKEN")
    if host_url and host_token:
        clients.setdefault(host_url.rstrip("/"), agent_tls_from().client(host_url, host_token))
    return clients, problems


def _describe(fault: dict[str, Any]) -> str:
    target = ",".join(f"{k}={v}" for k, v in sorted((fault.get("target") or {}).items()))
    name = fault.get("id") or f"request {fault.get('request_id', '?')}"
    return f"{fault.get('kind', '?')} {name} on {fault.get('node', '?')}" + (
        f" [{target}]" if target else "")


class _Ledger:
    """Where cleanup appends what it did (``None``: faults found on agents only)."""

    def __init__(self, path: Path | None, clock: Clock) -> None:
        self.path = path
        self.clock = clock

    def reverted(self, fault: dict[str, Any], reverted_at: Any, reason: str) -> None:
        if self.path is not None:
            append_event(self.path, "reverted", str(fault.get("run", "cleanup")),
                         {"id": fault["id"], "reverted_at": reverted_at,
                          "reason": f"cleanup: {reason}"})

    def forgotten(self, fault: dict[str, Any], reason: str) -> None:
        if self.path is not None:
            key = ({"request_id": fault["request_id"]} if "id" not in fault
                   else {"id": fault["id"]})
            append_event(self.path, "forgotten", str(fault.get("run", "cleanup")),
                         {**key, "forgotten_at": self.clock.now(),
                          "forgotten_reason": reason})

    def resolved(self, intent: dict[str, Any], outcome: str, fault_id: Any,
                 reverted_at: Any) -> None:
        if self.path is not None:
            append_event(self.path, "resolved", str(intent.get("run", "cleanup")),
                         {"request_id": intent["request_id"], "outcome": outcome,
                          "fault_id": fault_id, "reverted_at": reverted_at,
                          "by": "cleanup"})


def _unreachable(fault: dict[str, Any], source: str, why: str, report: CleanupReport,
                 ledger: _Ledger, forget: bool) -> None:
    if forget and ledger.path is not None:
        ledger.forgotten(fault, why)
        report.forgotten.append(f"forgotten: {_describe(fault)} ({source}): {why}")
    else:
        report.failed.append(f"FAILED {_describe(fault)} ({source}): {why}; {FORGET_HINT}")


def _revert(client: AgentClient, fault: dict[str, Any], source: str,
            report: CleanupReport, ledger: _Ledger, forget: bool = False) -> None:
    try:
        answer = client.revert(str(fault["id"]))
        reason = str(answer.get("revert_reason") or "requested")
        note = "reverted" if reason == "requested" else f"already reverted ({reason})"
        reverted_at = answer.get("reverted_at")
    except AgentError as exc:
        if exc.status in _UNREACHABLE_STATUSES:
            _unreachable(fault, source, str(exc), report, ledger, forget)
            return
        if exc.status != 404:
            report.failed.append(f"FAILED {_describe(fault)} ({source}): {exc}")
            return
        note, reason, reverted_at = "gone (the agent no longer knows it)", "unknown-to-agent", None
    ledger.reverted(fault, reverted_at, reason)
    report.reverted.append(f"{note}: {_describe(fault)} ({source})")


class _KubernetesApi:
    """The Kubernetes API, opened on first use from the environment (as
    ``--target kubernetes`` opens it); ``route`` is ``None`` when it cannot be, with
    ``why``."""

    def __init__(self, environ: Mapping[str, str] | None, clock: Clock, forget: bool) -> None:
        self.environ = environ
        self.clock = clock
        self.forget = forget
        self.why = ""
        self._opened = False
        self._route: Any = None

    def route(self) -> Any:
        if not self._opened:
            self._opened = True
            from kubernetes import client

            from gameday.kube.config import api_client, settings_from
            from gameday.kube.nodes import NodeEditor
            from gameday.targets.kubernetes.target import KubernetesRoute

            try:
                core = client.CoreV1Api(api_client(settings_from({}, self.environ)))
            except GamedayError as exc:
                self.why = str(exc)
            else:
                self._route = KubernetesRoute(NodeEditor(core, clock=self.clock),
                                              clock=self.clock)
        return self._route


def _entry(fault: dict[str, Any]) -> FaultEntry:
    """The ledger line as the run's :class:`FaultEntry` (what the route reverts)."""
    return FaultEntry(
        id=str(fault["id"]), kind=str(fault.get("kind", "")), node=str(fault.get("node", "")),
        agent_url=str(fault.get("agent_url", "")), target=dict(fault.get("target") or {}),
        params=dict(fault.get("params") or {}), injected_at=str(fault.get("injected_at", "")),
        applied_at=float(fault.get("applied_at") or 0.0),
        expires_at=float(fault.get("expires_at") or 0.0),
        lease_s=float(fault.get("lease_s") or 0.0), action=str(fault.get("action", "")),
        details={"inverse": dict(fault.get("inverse") or {}), **(fault.get("details") or {})},
        via=str(fault.get("via", "")))


def _deadline(fault: dict[str, Any], now: float) -> tuple[float | None, str]:
    """The mark's recorded deadline and how it reads ("2026-… UTC, in 12 s")."""
    raw = fault.get("expires_at")
    if not isinstance(raw, int | float):
        return None, "no deadline recorded"
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(raw))
    delta = round(raw - now)
    return float(raw), f"{stamp} (in {delta} s)" if delta >= 0 else f"{stamp} ({-delta} s ago)"


def _node_missing(route: Any, node: str) -> bool:
    """Whether the API answers 404 for the node (asked only after a revert failed)."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        route.editor.core.read_node(node)
    except ApiException as exc:
        return bool(exc.status == 404)
    except (HTTPError, OSError):
        return False
    return False


def _revert_kubernetes(fault: dict[str, Any], api: _KubernetesApi, source: str,
                       report: CleanupReport, ledger: _Ledger) -> None:
    from urllib3.exceptions import HTTPError

    route = api.route()
    if route is None:
        deadline, when = _deadline(fault, api.clock.now())
        lease = float(fault.get("lease_s") or 0.0)
        line = (f"{_describe(fault)} ({source}, via kubernetes): no Kubernetes configuration "
                f"({api.why})")
        fix = ("set KUBECONFIG or GAMEDAY_K8S_API_URL, or apply the inverse "
               f"{fault.get('inverse') or {}}")
        if deadline is None:
            report.failed.append(f"FAILED {line}, and no deadline recorded for the node "
                                 f"agent's reconciler; {fix}")
        elif deadline <= api.clock.now() + lease:
            report.deferred.append(f"left to the reconciler: {line}; the node agent's "
                                   f"reconciler undoes it at its deadline {when}")
        else:
            report.failed.append(f"FAILED {line}; its deadline {when} is beyond one lease "
                                 f"from now; {fix}")
        return
    try:
        reverted_at, reason = route.revert(_entry(fault))
    except (GamedayError, HTTPError, OSError) as exc:
        first = first_line(exc)
        node = str(fault.get("node", ""))
        if _node_missing(route, node):
            _unreachable(fault, f"{source}, via kubernetes", f"node {node} does not exist in "
                         "the cluster (decommissioned, or another cluster is configured)",
                         report, ledger, api.forget)
            return
        report.failed.append(f"FAILED {_describe(fault)} ({source}, via kubernetes): {first}; "
                             f"apply the inverse {fault.get('inverse') or {}}")
        return
    note = {"requested": f"reverted ({(fault.get('inverse') or {}).get('op', 'inverse')})",
            "already-reverted": "already reverted (no mark of it left on the node)",
            "no-inverse": "nothing to revert (no inverse)"}.get(reason, reason)
    ledger.reverted(fault, reverted_at, reason)
    report.reverted.append(f"{note}: {_describe(fault)} ({source}, via kubernetes)")


def cleanup(ledger_path: Path, *, lab_dir: Path | None, config: TargetConfig,
            all_agents: bool = False, force: bool = False, forget_unreachable: bool = False,
            environ: Mapping[str, str] | None = None,
            clock: Clock = SYSTEM_CLOCK) -> CleanupReport:
    """Revert every fault the ledger (and, with ``all_agents``, any agent) still holds.

    ``environ`` (default ``os.environ``) is where the Kubernetes settings are read.
    """
    report = CleanupReport()
    ledger = _Ledger(ledger_path, clock)
    clients, problems = known_agents(lab_dir, config)
    kubernetes = _KubernetesApi(environ, clock, forget_unreachable)
    live = {} if force else runs_holding_locks(ledger_path.parent / "locks")
    held = [f for f in read_ledger(ledger_path)
            if f.get("reverted_at") is None and f.get("forgotten_at") is None]
    live_ids: set[str] = set()
    for fault in held:
        run_id = str(fault.get("run", ""))
        source = f"ledger, run {fault.get('run', '?')}"
        if run_id in live:
            live_ids.add(str(fault["id"]))
            report.skipped.append(f"skipped (run still alive: {live[run_id].describe()}): "
                                  f"{_describe(fault)}")
            continue
        if fault.get("via", "agent") == "kubernetes":
            _revert_kubernetes(fault, kubernetes, source, report, ledger)
            continue
        if fault.get("via", "agent") != "agent":
            report.failed.append(
                f"FAILED {_describe(fault)} (ledger): applied via {fault.get('via')}, which "
                f"cleanup does not know; apply the inverse {fault.get('inverse') or {}}")
            continue
        url = str(fault.get("agent_url", "")).rstrip("/")
        client = clients.get(url)
        if client is None:
            _unreachable(fault, source, f"no token known for agent {url} (add it to the "
                         "target configuration)", report, ledger, forget_unreachable)
            continue
        _revert(client, fault, source, report, ledger, forget_unreachable)
    _resolve_intents(open_intents(ledger_path), live, clients, kubernetes, report, ledger,
                     forget_unreachable)
    if all_agents:
        report.failed.extend(f"FAILED to reach {problem}" for problem in problems)
        _sweep_agents(clients.items(), live_ids, report, clock)
    _expire_silences(ledger_path, live, report, clock)
    return report


def _expire_silences(ledger_path: Path, live: Mapping[str, Any], report: CleanupReport,
                     clock: Clock) -> None:
    for silence in read_silences(ledger_path):
        run_id, silence_id = str(silence.get("run", "")), str(silence["silence_id"])
        url = str(silence.get("alertmanager", ""))
        what = f"silence {silence_id} in {url} (run {run_id})"
        if run_id in live:
            report.skipped.append(f"skipped (run still alive: {live[run_id].describe()}): "
                                  f"{what}")
            continue
        client = AlertmanagerClient(url)
        try:
            how = "expired" if client.expire(silence_id) else "already expired"
        except ObservabilityError as exc:
            if float(silence.get("ends_at") or 0) > clock.now():
                report.failed.append(f"FAILED to expire {what}: {exc}")
                continue
            how = "ended by itself (its end time passed)"
        finally:
            client.close()
        append_event(ledger_path, "silence-expired", run_id,
                     {"silence_id": silence_id, "expired_at": clock.now(), "reason": "cleanup"})
        report.reverted.append(f"{how}: {what}")


def _resolve_intents(intents: list[dict[str, Any]], live: Mapping[str, Any],
                     clients: Mapping[str, AgentClient], kubernetes: _KubernetesApi,
                     report: CleanupReport, ledger: _Ledger, forget: bool) -> None:
    """Resolve the requests sent without an outcome recorded (step 1a), one call per
    agent (at most 1,024 request ids each)."""
    by_url: dict[str, list[dict[str, Any]]] = {}
    for intent in intents:
        source = f"ledger intent, run {intent.get('run', '?')}"
        if str(intent.get("run", "")) in live:
            report.skipped.append(f"skipped (run still alive: "
                                  f"{live[str(intent['run'])].describe()}): {_describe(intent)}")
        elif intent.get("via", "agent") == "kubernetes":
            _resolve_kubernetes(intent, kubernetes, source, report, ledger)
        else:
            by_url.setdefault(str(intent.get("agent_url", "")).rstrip("/"), []).append(intent)
    for url, waiting in by_url.items():
        client = clients.get(url)
        for start in range(0, len(waiting), MAX_BATCH_ITEMS):
            chunk = waiting[start:start + MAX_BATCH_ITEMS]
            try:
                if client is None:
                    raise AgentError(f"no token known for agent {url} (add it to the target "
                                     "configuration)")
                answers = client.resolve_requests([str(i["request_id"]) for i in chunk])
            except AgentError as exc:
                for intent in chunk:
                    source = f"ledger intent, run {intent.get('run', '?')}"
                    if exc.status in _UNREACHABLE_STATUSES:
                        _unreachable(intent, source, str(exc), report, ledger, forget)
                    else:
                        report.failed.append(f"FAILED {_describe(intent)} ({source}): {exc}")
                continue
            for intent, answer in zip(chunk, answers, strict=True):
                _record_resolution(intent, answer, report, ledger)


def _record_resolution(intent: dict[str, Any], answer: Mapping[str, Any],
                       report: CleanupReport, ledger: _Ledger) -> None:
    source = f"ledger intent, run {intent.get('run', '?')}"
    outcome = str(answer.get("outcome"))
    fault = answer.get("fault") or {}
    ledger.resolved(intent, outcome, fault.get("id"), fault.get("reverted_at"))
    if outcome == "reverted":
        reason = str(fault.get("revert_reason") or "requested")
        note = "reverted" if reason == "requested" else f"already reverted ({reason})"
        report.reverted.append(f"{note}: {_describe({**intent, 'id': fault.get('id')})} "
                               f"(request {intent['request_id']}, {source})")
    else:
        report.never_applied.append(f"never applied: {_describe(intent)} ({source}); the "
                                    "agent refuses it from now on")


def _resolve_kubernetes(intent: dict[str, Any], api: _KubernetesApi, source: str,
                        report: CleanupReport, ledger: _Ledger) -> None:
    from urllib3.exceptions import HTTPError

    route = api.route()
    if route is None:
        report.failed.append(f"FAILED {_describe(intent)} ({source}, via kubernetes): no "
                             f"Kubernetes configuration ({api.why}); set KUBECONFIG or "
                             "GAMEDAY_K8S_API_URL")
        return
    entry = FaultEntry(
        id=str(intent["request_id"]), kind=str(intent.get("kind", "")),
        node=str(intent.get("node", "")), agent_url="", target=dict(intent.get("target") or {}),
        params=dict(intent.get("params") or {}), injected_at="kubernetes", applied_at=0.0,
        expires_at=0.0, lease_s=float(intent.get("lease_s") or 0.0),
        details={"inverse": dict(intent.get("inverse") or {})}, via="kubernetes")
    try:
        reverted_at, reason = route.revert(entry)
    except (GamedayError, HTTPError, OSError) as exc:
        report.failed.append(f"FAILED {_describe(intent)} ({source}, via kubernetes): {exc}")
        return
    held = reason == "requested"
    ledger.resolved(intent, "reverted" if held else "not_held", entry.id if held else None,
                    reverted_at)
    if held:
        report.reverted.append(f"reverted (mark {entry.id}): {_describe(intent)} ({source}, "
                               "via kubernetes)")
    else:
        report.never_applied.append(f"not held (no mark {entry.id} on the node): "
                                    f"{_describe(intent)} ({source}, via kubernetes)")


def _sweep_agents(clients: Iterable[tuple[str, AgentClient]], live_ids: set[str],
                  report: CleanupReport, clock: Clock) -> None:
    for url, client in clients:
        try:
            faults = client.faults()
        except AgentError as exc:
            report.failed.append(f"FAILED to list faults of agent {url}: {exc}")
            continue
        for fault in faults:
            if str(fault.get("id")) in live_ids:
                continue
            fault = {**fault, "node": fault.get("node") or url}
            _revert(client, fault, f"agent {url}", report, _Ledger(None, clock))


def print_report(report: CleanupReport, out: TextIO) -> None:
    lines = (*report.reverted, *report.never_applied, *report.skipped, *report.deferred,
             *report.forgotten, *report.failed)
    for line in lines:
        print(line, file=out)
    if not lines:
        print("cleanup: nothing to revert", file=out)
        return
    extra = "".join(f", {len(items)} {name}" for name, items in (
        ("left to reconcilers", report.deferred), ("forgotten", report.forgotten)) if items)
    never = f", {len(report.never_applied)} never applied" if report.never_applied else ""
    print(f"cleanup: {len(report.reverted)} reverted{never}, {len(report.skipped)} skipped, "
          f"{len(report.failed)} failed{extra}", file=out)
