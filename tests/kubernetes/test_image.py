"""The Dockerfile against what names its image: every ``image:`` in deploy/, the CronJob
``gameday schedule`` emits, the package version; and its install command, run as written
in a clean virtual environment (no container image can be built on this machine: no
container runtime; the base image's Python is stood in for by this machine's 3.11)."""

import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

from gameday import IMAGE, __version__
from gameday.gamedays.playbook import load_playbook
from gameday.gamedays.schedule import cronjob

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text(encoding="utf-8")


def _instructions(name: str) -> list[str]:
    """The arguments of every ``name`` instruction, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    return [line.split(None, 1)[1] for line in joined.splitlines()
            if line.split(None, 1)[:1] == [name]]


def _images(node: object) -> list[str]:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "image" and isinstance(v, str)] + [
            found for v in node.values() for found in _images(v)]
    if isinstance(node, list):
        return [found for v in node for found in _images(v)]
    return []


def test_every_image_reference_is_the_dockerfiles_tag_and_the_package_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["version"] == __version__ and IMAGE.endswith(f":{__version__}")
    assert f"docker build -t {IMAGE} ." in DOCKERFILE
    referenced = [image for path in sorted((ROOT / "deploy").rglob("*.yaml"))
                  for document in yaml.safe_load_all(path.read_text(encoding="utf-8"))
                  for image in _images(document)]
    assert len(referenced) >= 2 and set(referenced) == {IMAGE}
    emitted = cronjob(load_playbook(ROOT / "playbooks" / "weekly-cluster.yaml"))
    assert set(_images(emitted)) == {IMAGE}


def test_the_image_runs_as_the_user_the_orchestrator_manifests_name_and_the_agent_as_root() \
        -> None:
    (user,) = _instructions("USER")
    uid = int(user.split(":")[0])
    assert uid != 0
    documents = [d for path in sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))
                 for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    emitted = cronjob(load_playbook(ROOT / "playbooks" / "weekly-cluster.yaml"))
    for document in [*documents, emitted]:
        spec = document.get("spec", {})
        pod = (spec.get("template") or spec.get("jobTemplate", {}).get("spec", {})
               .get("template", {})).get("spec")
        for container in (pod or {}).get("containers", []):
            run_as = container["securityContext"]["runAsUser"]
            if container["command"][:3] == ["gameday", "agent", "serve"]:
                assert run_as == 0  # the agent's faults need root (capabilities bounded)
            else:
                assert run_as == uid and container["securityContext"]["runAsNonRoot"]


def test_the_install_command_installs_a_working_gameday_in_a_clean_venv(tmp_path: Path) -> None:
    (install,) = [run for run in _instructions("RUN") if "pip install" in run
                  and "--upgrade pip" not in run.split("&&")[-1]]
    command = shlex.split(install.split("&&")[-1])
    assert command[0] == "/opt/gameday/bin/pip" and command[-1] == ".[host]"
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
        "project"]["optional-dependencies"]
    assert "host" in extras
    context = tmp_path / "src"
    for copy in _instructions("COPY"):
        if copy.startswith("--"):
            continue  # the runtime stage's copies
        *sources, _ = copy.split()
        for source in sources:
            origin = ROOT / source
            if origin.is_dir():
                shutil.copytree(origin, context / source,
                                ignore=shutil.ignore_patterns("__pycache__"))
            else:
                context.mkdir(exist_ok=True)
                shutil.copy2(origin, context / source)
    venv = tmp_path / "venv"
    base_python = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base_python, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path),
           "GAMEDAY_HOME": str(tmp_path / "home")}
    done = subprocess.run([str(venv / "bin" / "pip"), *command[1:]], cwd=context, env=env,
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-2000:]
    work = tmp_path / "work"
    work.mkdir()

    def installed(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(venv / "bin" / "gameday"), *args], cwd=work, env=env,
                              capture_output=True, text=True, timeout=120)

    assert installed("--version").stdout.strip() == f"gameday {__version__}"
    assert installed("init", "--template", "training", "first.yaml").returncode == 0
    result = installed("validate", "first.yaml")
    assert result.returncode == 0, result.stderr
    where = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import gameday.lab, faults, verifiers; print(gameday.__file__)"],
                           cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert where.stdout.startswith(str(venv)), where.stderr
