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
    """The CronJob manifest, built with and checked against the client's models;
    InvalidInput for a game day on the lab (:func:`refuse_lab`)."""
    from kubernetes import client

    options = options or CronJobOptions()
    cron, timezone = _require_schedule(playbook)
    refuse_lab(playbook)
    name = _name(playbook)
    labels = {"app.kubernetes.io/name": "gameday", "app.kubernetes.io/component": "gameday",
              "gameday/playbook": playbook.slug}
    playbook_path = _in_image(playbook.path)
    tls_env = [client.V1EnvVar(name=name, value=f"{_TLS_DIR}/{file}") for name, file in (
        ("GAMEDAY_AGENT_CA", "ca.crt"), ("GAMEDAY_AGENT_CLIENT_CERT", "tls.crt"),
        ("GAMEDAY_AGENT_CLIENT_KEY", "tls.key"))]
    container = client.V1Container(
        name="gameday", image=options.image, image_pull_policy="IfNotPresent",
        working_dir=options.workdir,
        command=["gameday", "play", playbook_path, "--journal-dir",
                 f"/journals/{playbook.slug}"],
        env=[client.V1EnvVar(name="GAMEDAY_HOME", value="/journals/.gameday"), *tls_env],
        volume_mounts=[client.V1VolumeMount(name="journals", mount_path="/journals"),
                       client.V1VolumeMount(name="tls", mount_path=_TLS_DIR, read_only=True)],
        resources=client.V1ResourceRequirements(requests={"cpu": "100m", "memory": "256Mi"},
                                                limits={"memory": "1Gi"}),
        security_context=client.V1SecurityContext(
            run_as_non_root=True, run_as_user=_NONROOT, allow_privilege_escalation=False,
            capabilities=client.V1Capabilities(drop=["ALL"])))
    pod = client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels={**labels, ORCHESTRATOR_LABEL[0]:
                                             ORCHESTRATOR_LABEL[1]}),
        spec=client.V1PodSpec(
            service_account_name=options.service_account, restart_policy="Never",
            containers=[container],
            security_context=client.V1PodSecurityContext(fs_group=_NONROOT),
            volumes=[client.V1Volume(name="journals", persistent_volume_claim=(
                client.V1PersistentVolumeClaimVolumeSource(claim_name=options.journals_claim))),
                     client.V1Volume(name="tls", secret=client.V1SecretVolumeSource(
                         secret_name=options.tls_secret, default_mode=0o440))]))
    job = client.V1CronJob(
        api_version="batch/v1", kind="CronJob",
        metadata=client.V1ObjectMeta(
            name=name, namespace=options.namespace, labels=labels,
            annotations={"gameday/playbook-title": playbook.title}),
        spec=client.V1CronJobSpec(
            schedule=cron, time_zone=timezone, concurrency_policy="Forbid",
            starting_deadline_seconds=3600,
            successful_jobs_history_limit=options.history,
            failed_jobs_history_limit=options.history,
            job_template=client.V1JobTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1JobSpec(backoff_limit=0, template=pod))))
    api: Any = client.ApiClient()
    manifest: dict[str, Any] = api.sanitize_for_serialization(job)
    validate_cronjob(manifest)
    return manifest


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
