"""``gameday cleanup [--all-agents] [--force]``: revert whatever faults are still held.

1. The ledger (``$GAMEDAY_HOME/ledger.jsonl``) is replayed; every fault it holds as
   applied and never reverted is reverted through its agent (the ``inverse`` the
   ledger recorded) and a ``reverted`` event is appended, so a second cleanup finds
   nothing to do.
2. With ``--all-agents`` every known agent is also asked for its active faults, and
   each is reverted: the lab's agents (``lab.json``), those of the target
   configuration (``--target-config`` / ``$GAMEDAY_TARGET_CONFIG``) and the host agent
   of ``$GAMEDAY_AGENT_URL``.

Faults of a run that is still alive (it holds its target locks) are left alone unless
``--force`` is given. Faults applied other than through an agent (``via: kubernetes``)
are not reverted here: cleanup names them and their inverse, and fails. One line per
fault; the exit code is 0 when nothing is left that cleanup could not revert, else 1.
"""

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from gameday.agent.client import AgentClient
from gameday.errors import AgentError, GamedayError
from gameday.ledger import append_event, read_ledger
from gameday.locks import runs_holding_locks
from gameday.targetconfig import TargetConfig
from gameday.targets import read_lab_document


@dataclass
class CleanupReport:
    reverted: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

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
            clients[endpoint.url.rstrip("/")] = AgentClient(endpoint.url, endpoint.token())
        except GamedayError as exc:
            problems.append(str(exc))
    host_url = os.environ.get("GAMEDAY_AGENT_URL")
    host_token = os.environ.get("GAMEDAY_AGENT_TOKEN")
    if host_url and host_token:
        clients.setdefault(host_url.rstrip("/"), AgentClient(host_url, host_token))
    return clients, problems


def _describe(fault: dict[str, Any]) -> str:
    target = ",".join(f"{k}={v}" for k, v in sorted((fault.get("target") or {}).items()))
    return f"{fault.get('kind', '?')} {fault.get('id', '?')} on {fault.get('node', '?')}" + (
        f" [{target}]" if target else "")


def _revert(client: AgentClient, fault: dict[str, Any], source: str,
            report: CleanupReport, ledger: Path | None) -> None:
    try:
        answer = client.revert(str(fault["id"]))
        reason = str(answer.get("revert_reason") or "requested")
        note = "reverted" if reason == "requested" else f"already reverted ({reason})"
        reverted_at = answer.get("reverted_at")
    except AgentError as exc:
        if exc.status != 404:
            report.failed.append(f"FAILED {_describe(fault)} ({source}): {exc}")
            return
        note, reason, reverted_at = "gone (the agent no longer knows it)", "unknown-to-agent", None
    if ledger is not None:
        append_event(ledger, "reverted", str(fault.get("run", "cleanup")),
                     {"id": fault["id"], "reverted_at": reverted_at,
                      "reason": f"cleanup: {reason}"})
    report.reverted.append(f"{note}: {_describe(fault)} ({source})")


def cleanup(ledger_path: Path, *, lab_dir: Path | None, config: TargetConfig,
            all_agents: bool = False, force: bool = False) -> CleanupReport:
    """Revert every fault the ledger (and, with ``all_agents``, any agent) still holds."""
    report = CleanupReport()
    clients, problems = known_agents(lab_dir, config)
    live = {} if force else runs_holding_locks(ledger_path.parent / "locks")
    held = [f for f in read_ledger(ledger_path) if f.get("reverted_at") is None]
    live_ids: set[str] = set()
    for fault in held:
        run_id = str(fault.get("run", ""))
        if run_id in live:
            live_ids.add(str(fault["id"]))
            report.skipped.append(f"skipped (run still alive: {live[run_id].describe()}): "
                                  f"{_describe(fault)}")
            continue
        if fault.get("via", "agent") != "agent":
            report.failed.append(
                f"FAILED {_describe(fault)} (ledger): applied via {fault.get('via')}, which "
                "cleanup does not revert; its mark's revert deadline lets the node agent undo "
                f"it, or apply the inverse {fault.get('inverse') or {}}")
            continue
        url = str(fault.get("agent_url", "")).rstrip("/")
        client = clients.get(url)
        if client is None:
            report.failed.append(f"FAILED {_describe(fault)} (ledger): no token known for "
                                 f"agent {url} (add it to the target configuration)")
            continue
        _revert(client, fault, f"ledger, run {fault.get('run', '?')}", report, ledger_path)
    if all_agents:
        report.failed.extend(f"FAILED to reach {problem}" for problem in problems)
        _sweep_agents(clients.items(), live_ids, report)
    return report


def _sweep_agents(clients: Iterable[tuple[str, AgentClient]], live_ids: set[str],
                  report: CleanupReport) -> None:
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
            _revert(client, fault, f"agent {url}", report, None)


def print_report(report: CleanupReport, out: TextIO) -> None:
    for line in (*report.reverted, *report.skipped, *report.failed):
        print(line, file=out)
    if not (report.reverted or report.skipped or report.failed):
        print("cleanup: nothing to revert", file=out)
    else:
        print(f"cleanup: {len(report.reverted)} reverted, {len(report.skipped)} skipped, "
              f"{len(report.failed)} failed", file=out)
