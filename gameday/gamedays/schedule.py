"""``gameday schedule``: a playbook's ``schedule`` as a crontab line or a Kubernetes CronJob.

The CronJob is built with the Kubernetes client's models (``V1CronJob`` and friends),
serialized with ``ApiClient.sanitize_for_serialization`` and read back through
``ApiClient().deserialize`` into a ``V1CronJob``, so a manifest that does not fit the
API's schema fails here rather than at ``kubectl apply``. It runs ``gameday play`` in
the gameday image under the ``gameday-orchestrator`` service account
(``deploy/kubernetes/``), one game day at a time (``concurrencyPolicy: Forbid``), never
retried (a game day is not idempotent), with journals on a persistent volume claim. It
reaches the agents with mutual TLS: the client certificate, key and CA of the Secret
``tls_secret`` (``tls.crt``/``tls.key``/``ca.crt``) through ``$GAMEDAY_AGENT_CA`` and
friends, and its pods carry the label the agents' NetworkPolicy admits
(:data:`ORCHESTRATOR_LABEL`).
"""

import json
import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gameday import IMAGE, paths
from gameday.errors import InvalidInput
from gameday.gamedays.playbook import Playbook

DEFAULT_IMAGE = IMAGE
#: The label of orchestrator pods, which deploy/kubernetes/agent-networkpolicy.yaml admits.
ORCHESTRATOR_LABEL = ("gameday.dev/role", "orchestrator")
_TLS_DIR = "/var/run/gameday/tls"
_NONROOT = 65532


@dataclass(frozen=True)
class CronJobOptions:
    namespace: str = "gameday-system"
    image: str = DEFAULT_IMAGE
    service_account: str = "gameday-orchestrator"
    journals_claim: str = "gameday-journals"
    workdir: str = "/work"
    history: int = 5
    tls_secret: str = "gameday-orchestrator-tls"


def _require_schedule(playbook: Playbook) -> tuple[str, str]:
    if playbook.schedule is None:
        raise InvalidInput("has no schedule: add `schedule: {cron: \"0 10 * * 3\"}`",
                           file=str(playbook.path), path="schedule")
    return playbook.schedule.cron, playbook.schedule.timezone


def installed_executable() -> Path:
    """The absolute path of the ``gameday`` executable of this installation: the one next
    to the running interpreter (a virtual environment's ``bin/``), else the one on PATH,
    else the running program."""
    beside = Path(sys.executable).parent / "gameday"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside.absolute()
    found = shutil.which("gameday")
    return Path(found or sys.argv[0]).absolute()


def crontab_line(playbook: Playbook, *, repo: Path, journals: Path | None = None,
                 executable: Path | None = None, home: Path | None = None) -> str:
    """One crontab line that runs the game day from the checkout ``repo``, every path
    absolute: the installed executable (``executable``, default
    :func:`installed_executable`), the playbook, the journals (``journals``, default
    ``$GAMEDAY_JOURNALS`` or ``journals``) and ``GAMEDAY_HOME`` (``home``, default this
    shell's ``$GAMEDAY_HOME`` or ``.gameday``; the log goes to its ``logs/``), set on the
    line since cron's environment has none of it.

    cron has no per-line time zone, so a non-UTC playbook gets a ``CRON_TZ=`` line
    first (cronie and systemd-cron read it; Debian's cron needs the host in that zone).
    """
    cron, timezone = _require_schedule(playbook)
    repo = repo.absolute()
    journal_dir = (journals or paths.journals_dir()).absolute()
    home = (home or paths.home()).absolute()
    program = executable or installed_executable()
    stamp = "$(date -u +\\%Y\\%m\\%dT\\%H\\%M\\%SZ)"  # cron needs % escaped
    log = home / "logs" / f"{playbook.slug}.cron.log"
    command = (f"cd {shlex.quote(str(repo))} && mkdir -p {shlex.quote(str(log.parent))} && "
               f"GAMEDAY_HOME={shlex.quote(str(home))} {shlex.quote(str(program))} play "
               f"{shlex.quote(str(playbook.path.absolute()))} --journal-dir "
               f"{shlex.quote(str(journal_dir / playbook.slug))}/{stamp}"
               f" >> {shlex.quote(str(log))} 2>&1")
    prefix = f"CRON_TZ={timezone}\n" if timezone != "UTC" else ""
    return f"{prefix}{cron} {command}"


def refuse_lab(playbook: Playbook) -> None:
    """InvalidInput when the game day would run on the embedded lab (the playbook's
    target, else one of its experiments'): a CronJob's pod cannot and must not start one."""
    if playbook.target is not None:
        on_lab = playbook.target == "lab"
    else:
        from gameday.experiment.loader import load_experiment

        on_lab = any(load_experiment(planned.path).extension.target == "lab"
                     for planned in playbook.plan())
    if on_lab:
        raise InvalidInput("runs on the embedded lab, which a CronJob's pod cannot start; "
                           "set `target: kubernetes` (or schedule it on a host with --emit "
                           "crontab)", file=str(playbook.path), path="target")


def _name(playbook: Playbook) -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", f"gameday-{playbook.slug}".lower()).strip("-")
    return name[:52].rstrip("-")  # CronJob names are at most 52 characters


def _in_image(path: Path) -> str:
    """The playbook's path inside the image: relative to the checkout (the working dir)."""
    absolute = path.absolute()
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def cronjob(playbook: Playbook, options: CronJobOptions | None = None) -> dict[str, Any]:
    """The CronJob manifest (``batch/v1``), as the API server reads it; InvalidInput for
    a game day on the lab (:func:`refuse_lab`). Built as plain data: the client's models
    cost seconds to import, so the tests hold it to them (:func:`validate_cronjob`)."""
    options = options or CronJobOptions()
    cron, timezone = _require_schedule(playbook)
    refuse_lab(playbook)
    labels = {"app.kubernetes.io/name": "gameday", "app.kubernetes.io/component": "gameday",
              "gameday/playbook": playbook.slug}
    tls_env = [{"name": name, "value": f"{_TLS_DIR}/{file}"} for name, file in (
        ("GAMEDAY_AGENT_CA", "ca.crt"), ("GAMEDAY_AGENT_CLIENT_CERT", "tls.crt"),
        ("GAMEDAY_AGENT_CLIENT_KEY", "tls.key"))]
    container = {
        "command": ["gameday", "play", _in_image(playbook.path), "--journal-dir",
                    f"/journals/{playbook.slug}"],
        "env": [{"name": "GAMEDAY_HOME", "value": "/journals/.gameday"}, *tls_env],
        "image": options.image, "imagePullPolicy": "IfNotPresent", "name": "gameday",
        "resources": {"limits": {"memory": "1Gi"},
                      "requests": {"cpu": "100m", "memory": "256Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]},
                            "runAsNonRoot": True, "runAsUser": _NONROOT},
        "volumeMounts": [{"mountPath": "/journals", "name": "journals"},
                         {"mountPath": _TLS_DIR, "name": "tls", "readOnly": True}],
        "workingDir": options.workdir}
    pod = {
        "metadata": {"labels": {**labels, ORCHESTRATOR_LABEL[0]: ORCHESTRATOR_LABEL[1]}},
        "spec": {"containers": [container], "restartPolicy": "Never",
                 "securityContext": {"fsGroup": _NONROOT},
                 "serviceAccountName": options.service_account,
                 "volumes": [{"name": "journals", "persistentVolumeClaim": {
                                 "claimName": options.journals_claim}},
                             {"name": "tls", "secret": {"defaultMode": 0o440,
                                                        "secretName": options.tls_secret}}]}}
    return {
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"annotations": {"gameday/playbook-title": playbook.title},
                     "labels": labels, "name": _name(playbook),
                     "namespace": options.namespace},
        "spec": {"concurrencyPolicy": "Forbid", "failedJobsHistoryLimit": options.history,
                 "jobTemplate": {"metadata": {"labels": dict(labels)},
                                 "spec": {"backoffLimit": 0, "template": pod}},
                 "schedule": cron, "startingDeadlineSeconds": 3600,
                 "successfulJobsHistoryLimit": options.history, "timeZone": timezone}}


class _Response:
    """What older clients' ``ApiClient.deserialize`` reads: the JSON body in ``.data``."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.data = json.dumps(body)


def validate_cronjob(manifest: dict[str, Any]) -> Any:
    """Deserialize into ``V1CronJob`` (the client's models check required fields)."""
    import inspect

    from kubernetes import client

    api: Any = client.ApiClient()
    try:
        if "content_type" in inspect.signature(api.deserialize).parameters:  # client >= 31
            job = api.deserialize(json.dumps(manifest), "V1CronJob", "application/json")
        else:
            job = api.deserialize(_Response(manifest), "V1CronJob")
    except ValueError as exc:
        detail = "; ".join(line.strip() for line in str(exc).splitlines()
                           if line.strip() and "errors.pydantic.dev" not in line)
        raise InvalidInput(f"the CronJob does not fit the Kubernetes API: {detail}") from None
    if job.spec is None or job.spec.job_template is None or not job.spec.schedule:
        raise InvalidInput("the CronJob has no spec.schedule or spec.jobTemplate")
    return job


def cronjob_yaml(playbook: Playbook, options: CronJobOptions | None = None) -> str:
    return yaml.safe_dump(cronjob(playbook, options), sort_keys=False)
