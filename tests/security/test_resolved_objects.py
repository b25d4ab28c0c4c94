"""The freezer, the network kinds and the paths are checked on what they act on (issue 25,
items 1 and 3): every process of a cgroup, the cgroup by path components, every interface
of a namespace, and the agent's lifelines. Real v1 freezer cgroups, real network
namespaces, real FUSE, against a live agent over mutual TLS."""

import contextlib
import subprocess
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from gameday.errors import AgentError
from tests.conftest import BIN, REPO, cli_env
from tests.security.conftest import LiveAgent, sleeper, state, unique

FREEZER = Path("/sys/fs/cgroup/freezer")


@contextlib.contextmanager
def freezer_group(name: str) -> Iterator[Path]:
    """A v1 freezer cgroup of the test's, removed after (its tasks moved back out)."""
    if not (FREEZER / "tasks").exists():
        pytest.skip("no v1 freezer hierarchy here")
    group = FREEZER / name
    group.mkdir(parents=True)
    try:
        yield group
    finally:
        with contextlib.suppress(OSError):
            (group / "freezer.state").write_text("THAWED")
        for tasks in sorted(group.rglob("tasks"), key=lambda p: -len(p.parts)):
            for pid in tasks.read_text().split():
                with contextlib.suppress(OSError):
                    (FREEZER / "tasks").write_text(pid)
            tasks.parent.rmdir()


def refused(agent: LiveAgent, kind: str, target: Mapping[str, Any],
            params: Mapping[str, Any]) -> AgentError:
    with agent.client() as client, pytest.raises(AgentError) as caught:
        client.inject(kind, target, params, 10)
    return caught.value


def test_the_freezer_asks_the_policy_about_its_cgroup_and_every_process_in_it(
        tmp_path: Path, agent_with: Callable[..., LiveAgent]) -> None:
    base, marker = unique("gdsecP"), unique("gdsec-frozen")
    agent = agent_with({"kinds": ["storage.stall"], "processes": {
        "cmdline": [marker], "cgroups": [f"/{base}"]}})
    allowed, other = sleeper(marker), sleeper(unique("gdsec-other"))
    agent.started += [allowed, other]
    freeze = {"mechanism": "freezer"}
    with freezer_group(base) as group, freezer_group(base + "X") as sibling:
        (group / "tasks").write_text(str(allowed.pid))
        (sibling / "tasks").write_text(str(other.pid))
        # /P allows /P, never /PX (path components, not a string prefix)
        error = refused(agent, "storage.stall", {"cgroup": str(sibling)}, freeze)
        assert error.status == 403 and "not a cgroup" in str(error)
        # the hierarchy itself, and a pid the policy does not allow
        assert refused(agent, "storage.stall", {"cgroup": str(FREEZER)}, freeze).status in (
            400, 403)
        assert refused(agent, "storage.stall", {"pid": other.pid}, freeze).status == 403
        # an allowed cgroup holding, below it, a process gameday never signals
        sshd = tmp_path / "sshd"
        sshd.symlink_to("/bin/sleep")
        denied = subprocess.Popen([str(sshd), "300"])
        agent.started.append(denied)
        inner = group / "inner"
        inner.mkdir()
        (inner / "tasks").write_text(str(denied.pid))
        error = refused(agent, "storage.stall", {"cgroup": str(group)}, freeze)
        assert error.status == 403 and "sshd, which gameday never signals" in str(error)
        assert state(denied.pid) != "T" and state(allowed.pid) != "T"
        (FREEZER / "tasks").write_text(str(denied.pid))
        with agent.client() as client:
            fault = client.inject("storage.stall", {"cgroup": str(group)}, freeze, 10)
            assert (group / "freezer.state").read_text().strip() in ("FREEZING", "FROZEN")
            client.revert(fault["id"])
        assert (group / "freezer.state").read_text().strip() == "THAWED"


def test_a_loss_over_a_whole_namespace_checks_every_interface_in_it(
        agent_with: Callable[..., LiveAgent]) -> None:
    ns = unique("gdsec-ns")
    agent = agent_with({"kinds": ["net.loss"], "interfaces": ["gdsec-only-this"]})
    subprocess.run(["ip", "netns", "add", ns], check=True, timeout=20)
    try:
        subprocess.run(["ip", "-n", ns, "link", "add", "gdsecv0", "type", "veth", "peer",
                        "name", "gdsecv1"], check=True, timeout=20)
        for target in ({"netns": ns}, {"netns": ns, "link": "gdsecv0"}):
            error = refused(agent, "net.loss", target, {"percent": 50})
            assert error.status == 403 and "not allowed" in str(error), error
        tables = subprocess.run(["ip", "netns", "exec", ns, "nft", "list", "tables"],
                                capture_output=True, text=True, timeout=20)
        assert "gameday" not in tables.stdout  # nothing was created in it
    finally:
        subprocess.run(["ip", "netns", "del", ns], timeout=20)


def test_no_storage_fault_reaches_a_lifeline_of_the_agent(
        tmp_path: Path, agent_with: Callable[..., LiveAgent]) -> None:
    """The client CA's directory (the stall over it held a new TLS handshake), the
    token's, the interpreter's: refused over, at and under them; a policy that allows one
    is refused by ``policy --check`` and at start, naming which."""
    data = tmp_path / "data"
    data.mkdir()
    agent = agent_with({"kinds": ["storage.stall"], "paths": [str(data)]})
    ca_dir = agent.pki.ca_pem.parent
    for path in (ca_dir, ca_dir.parent, agent.audit.parent, Path("/usr"), Path("/")):
        error = refused(agent, "storage.stall", {"path": str(path)}, {})
        assert error.status in (400, 403), (path, error)
    wide = tmp_path / "wide.yaml"
    wide.write_text(f"kinds: [storage.stall]\npaths: [{tmp_path}]\n")
    check = subprocess.run(
        [str(BIN / "gameday"), "agent", "policy", "--check", str(wide), "--tls-client-ca",
         str(agent.pki.ca_pem)], cwd=REPO, env=cli_env(tmp_path), capture_output=True,
        text=True, timeout=60)
    assert check.returncode == 2 and str(ca_dir) in check.stderr, check.stderr
    assert len(check.stderr.strip().splitlines()) == 1 and "Traceback" not in check.stderr
    with pytest.raises(AssertionError, match="what the agent itself needs"):
        agent_with({"kinds": ["storage.stall"], "paths": [str(tmp_path)]})


def test_the_host_namespace_under_another_name_is_the_host(
        agent_with: Callable[..., LiveAgent]) -> None:
    """``ip netns attach NAME PID`` names this host's own namespace: a fault "in" it is a
    fault on the host, so the default-route interface must still be named."""
    from gameday.agent.policy import default_route_interfaces

    defaults = sorted(default_route_interfaces())
    if not defaults:
        pytest.skip("no default route on this host")
    ns = unique("gdsec-hostns")
    agent = agent_with({"kinds": ["net.loss"], "interfaces": ["*"]})
    subprocess.run(["ip", "netns", "attach", ns, str(agent.proc.pid)], check=True, timeout=20)
    try:
        for target in ({"netns": ns}, {"netns": ns, "link": defaults[0]}):
            error = refused(agent, "net.loss", target, {"percent": 50})
            assert error.status == 403 and "default-route" in str(error), (target, error)
    finally:
        subprocess.run(["ip", "netns", "del", ns], timeout=20)
