"""A real ``gameday agent serve --backend host`` for a test: its token (0600) and policy
written under the test's directory, started on a free loopback port, stopped after."""

import contextlib
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import BIN, REPO, cli_env

__all__ = ["host_agent"]


@contextlib.contextmanager
def host_agent(tmp_path: Path, token: str, policy: Mapping[str, Any], *extra: str,
               node: str = "gdtest-host") -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``(url, process)`` of an agent that allows what ``policy`` names; ``extra``
    arguments go to ``agent serve`` (TLS, an audit log). The agent is terminated, if
    still running, when the block ends; its exit status is then ``process.returncode``."""
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(dict(policy)))
    proc = subprocess.Popen(
        [str(BIN / "gameday"), "agent", "serve", "--backend", "host", "--listen",
         "127.0.0.1:0", "--token-file", str(token_file), "--state-dir",
         str(tmp_path / "state"), "--node", node, "--policy", str(policy_file), *extra],
        cwd=REPO, env=cli_env(tmp_path), text=True, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "agent listening on " in line, line
        yield line.split()[-1], proc
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
