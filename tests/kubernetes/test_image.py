"""The Dockerfile against what names its images: every ``image:`` in deploy/, the CronJob
``gameday schedule`` emits, the package version; and each image's install command, run as
written in a clean virtual environment (no container image can be built on this machine:
no container runtime; the base image's Python is stood in for by this machine's 3.11):
the agent's installs nothing of the orchestrator's."""

import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

from gameday import AGENT_IMAGE, IMAGE, __version__
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
    assert AGENT_IMAGE.endswith(f":{__version__}")
    assert f"docker build -t {IMAGE} ." in DOCKERFILE
    assert f"docker build --target agent -t {AGENT_IMAGE} ." in DOCKERFILE
    referenced = {path.name: {image for document in
                              yaml.safe_load_all(path.read_text(encoding="utf-8"))
                              for image in _images(document)}
                  for path in sorted((ROOT / "deploy").rglob("*.yaml"))}
    assert referenced.pop("agent-daemonset.yaml") == {AGENT_IMAGE}
    assert set().union(*referenced.values()) == {IMAGE}
    emitted = cronjob(load_playbook(ROOT / "playbooks" / "weekly-cluster.yaml"))
    assert set(_images(emitted)) == {IMAGE}


def test_the_image_runs_as_the_user_the_orchestrator_manifests_name_and_the_agent_as_root() \
        -> None:
    users = set(_instructions("USER"))
    assert len(_instructions("USER")) == 2 and len(users) == 1  # the agent's and the orchestrator's
    uid = int(users.pop().split(":")[0])
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


def _stage(name: str) -> str:
    """The instructions of the Dockerfile's stage ``name``, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    stage = joined.split(f" AS {name}\n", 1)[1]
    return stage.split("\nFROM ", 1)[0]


def _install(stage: str, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """Run the install commands of the source stage and of ``stage`` as written, in a
    clean venv and a copy of what the source stage copies; the venv and its environment."""
    source = _stage("source")
    defaults = dict(arg.split("=", 1) for arg in _instructions("ARG") if "=" in arg)
    commands = [shlex.split(re.sub(r"\$\{(\w+)\}", lambda m: defaults[m.group(1)], part))
                for line in (source, _stage(stage)) for instruction in line.splitlines()
                if instruction.startswith("RUN ")
                for part in instruction[4:].split("&&") if "pip install" in part]
    assert [c[0] for c in commands] == ["/opt/gameday/bin/pip"] * 2
    assert commands[1][-3:-1] == ["-c", "constraints.txt"]
    if stage == "build-agent":
        assert commands[1][-1] == ".[agent,kubernetes]"
    context = tmp_path / "src"
    for copy in (line.split(None, 1)[1] for line in source.splitlines()
                 if line.startswith("COPY ")):
        *sources, _ = copy.split()
        for name in sources:
            origin = ROOT / name
            if origin.is_dir():
                shutil.copytree(origin, context / name,
                                ignore=shutil.ignore_patterns("__pycache__"))
            else:
                context.mkdir(exist_ok=True)
                shutil.copy2(origin, context / name)
    venv = tmp_path / "venv"
    base_python = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base_python, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path),
           "GAMEDAY_HOME": str(tmp_path / "home")}
    done = subprocess.run([str(venv / "bin" / "pip"), *commands[1][1:]], cwd=context,
                          env=env, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-2000:]
    return venv, env


def _importable(venv: Path, env: dict[str, str], *modules: str) -> set[str]:
    """Which of ``modules`` the venv's Python can import."""
    found = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import importlib.util, sys; print(' '.join(m for m in sys.argv[1:]"
                            " if importlib.util.find_spec(m)))", *modules],
                           env=env, capture_output=True, text=True, timeout=60, check=True)
    return set(found.stdout.split())


def test_the_orchestrators_install_runs_experiments_in_a_clean_venv(tmp_path: Path) -> None:
    venv, env = _install("build-orchestrator", tmp_path)
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
                            "import faults, verifiers, gameday; print(gameday.__file__)"],
                           cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert where.stdout.startswith(str(venv)), where.stderr
    assert _importable(venv, env, "pytest", "torch", "hypothesis") == set()


def test_the_agents_install_serves_and_holds_nothing_of_the_orchestrators(
        tmp_path: Path) -> None:
    venv, env = _install("build-agent", tmp_path)
    helped = subprocess.run([str(venv / "bin" / "gameday"), "agent", "serve", "--help"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "--backend" in helped.stdout, helped.stderr
    assert _importable(venv, env, "chaoslib", "numpy", "pytest", "rich", "redis",
                       "cryptography", "croniter", "prometheus_api_client") == set()
    assert _importable(venv, env, "kubernetes", "pyroute2", "mfusepy", "pynvml",
                       "prometheus_client") == {"kubernetes", "pyroute2", "mfusepy", "pynvml",
                                                "prometheus_client"}
