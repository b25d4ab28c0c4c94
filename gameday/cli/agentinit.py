"""``gameday agent init DIR``: everything one host needs to run an agent, in one directory.

::

    gameday agent init DIR [--allow-process REGEX]... [--allow-process-name NAME]...
                           [--allow-path PATH]... [--allow-link NAME]... [--kinds K,K]
                           [--listen HOST:PORT] [--node NAME] [--tls [--server-name N]...]
                           [--systemd] [--force] [--output json]

It writes, in ``DIR``:

- ``token``: a 256-bit bearer token (mode 0600), the strength the agent requires;
- ``policy.yml``: a commented, default-deny policy that allows only what was named
  (the kinds follow from it: a process pattern allows ``process.kill`` and
  ``process.pause``, a path the storage kinds, a link the network kinds; ``--kinds``
  says exactly which instead), checked as ``gameday agent policy --check`` checks it;
- ``state/``: the agent's state directory (active faults, the audit trail);
- with ``--tls``: ``tls/`` with a self-signed CA, the agent's certificate and key and a
  client certificate and key for the orchestrator (mutual TLS);
- with ``--systemd``: ``gameday-agent.service``, a systemd unit that serves it.

Then it prints the exact ``gameday agent serve`` command and the settings the
orchestrator needs (``GAMEDAY_AGENT_URL``, the token, the TLS files). It never
overwrites an existing file unless ``--force``. docs/host.md walks through it.
"""

import argparse
import datetime
import ipaddress
import json
import os
import secrets
import shlex
import shutil
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from gameday.errors import GamedayError, InvalidInput
from gameday.wire.listen import is_loopback, parse_listen

__all__ = ["KIND_GROUPS", "AgentSetup", "init_parser", "main", "write_setup"]

#: The kinds each kind of allowed target makes possible.
KIND_GROUPS: Final[dict[str, tuple[str, ...]]] = {
    "process": ("process.kill", "process.pause"),
    "path": ("storage.stall", "storage.errors", "storage.slow"),
    "link": ("net.link_flap", "net.loss", "net.partition", "net.latency"),
}

_TLS_FILES: Final = ("ca.crt", "agent.crt", "agent.key", "client.crt", "client.key")
_UNIT: Final = "gameday-agent.service"
_CERT_DAYS: Final = 365


@dataclass(frozen=True)
class AgentSetup:
    """What ``gameday agent init`` was asked to set up."""

    directory: Path
    listen: str = "127.0.0.1:9410"
    node: str = field(default_factory=socket.gethostname)
    process_patterns: tuple[str, ...] = ()
    process_names: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    links: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    tls: bool = False
    server_names: tuple[str, ...] = ()
    systemd: bool = False
    force: bool = False

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0].strip("[]") or "0.0.0.0"

    def allowed_kinds(self) -> tuple[str, ...]:
        """``--kinds`` when given, else those the named targets make possible."""
        if self.kinds:
            return tuple(dict.fromkeys(self.kinds))
        chosen: list[str] = []
        if self.process_patterns or self.process_names:
            chosen += KIND_GROUPS["process"]
        if self.paths:
            chosen += KIND_GROUPS["path"]
        if self.links:
            chosen += KIND_GROUPS["link"]
        return tuple(chosen)


def _known_kinds() -> frozenset[str]:
    from gameday.kinds import CATALOGUE

    return frozenset(CATALOGUE)


def _check_setup(setup: AgentSetup) -> None:
    """One-line :class:`InvalidInput` for anything the agent would refuse to serve."""
    host, _ = parse_listen(setup.listen)
    if not setup.tls and not is_loopback(host):
        raise InvalidInput(f"--listen {setup.listen} is not loopback: add --tls (the agent "
                           f"serves a network address only over TLS)")
    unknown = sorted(set(setup.kinds) - _known_kinds())
    if unknown:
        raise InvalidInput(f"--kinds: no fault kind {unknown[0]!r} (`gameday faults` "
                           f"lists them)")
    if not setup.allowed_kinds():
        raise InvalidInput("nothing to allow: name what the agent may fault with "
                           "--allow-process, --allow-process-name, --allow-path, "
                           "--allow-link or --kinds")
    for path in setup.paths:
        if not path.startswith("/"):
            raise InvalidInput(f"--allow-path {path!r} must be an absolute path")
    for pattern in setup.process_patterns:
        from gameday.node.processes import compile_cmdline

        try:
            compile_cmdline(pattern)
        except Exception as exc:
            raise InvalidInput(f"--allow-process {pattern!r}: {exc}") from None


def _yaml_list(items: Sequence[str]) -> str:
    """``items`` as one YAML flow sequence, quoted by the YAML library itself."""
    import yaml

    text: str = yaml.safe_dump(list(items), default_flow_style=True, allow_unicode=True,
                               width=2**31)
    return text.strip()


def policy_text(setup: AgentSetup) -> str:
    """The policy file: default-deny, commented, allowing only what ``setup`` names."""
    lines = [
        "# gameday agent policy, written by `gameday agent init` (docs/host.md, 'The policy').",
        "# Default-deny: the agent refuses every kind, path, process and interface not listed",
        "# here, whatever an orchestrator asks. Check an edit with:",
        "#   " + shlex.join(["gameday", *check_command(setup)[1:]]),
        "# The agent re-reads nothing at run time: restart it after an edit.",
        "",
        "# fault kinds this agent may apply (`gameday faults` lists them all)",
        f"kinds: {_yaml_list(setup.allowed_kinds())}",
    ]
    lines += ["", "# storage kinds: only at or under these directories (their real path);",
              "# never /proc, /sys, /dev, / itself, nor the agent's own files",
              f"paths: {_yaml_list(setup.paths)}"]
    lines += ["", "# process kinds: a process must match one of these",
              "processes:",
              "  names: " + _yaml_list(setup.process_names) + "     # its name (comm)",
              "  cmdline: " + _yaml_list(setup.process_patterns)
              + "   # RE2, searched in its command line",
              "  cgroups: []     # a cgroup path of the process, at or under one of these"]
    lines += ["", "# network kinds: these interfaces only (\"*\": any but the default-route one)",
              f"interfaces: {_yaml_list(setup.links)}"]
    lines += ["", "# real GPU clock and power locks (gpu.thermal with allow_device_settings)",
              "gpu_device_settings: false",
              "", "# caps on what a caller may ask",
              "lease_max_s: 600        # one lease",
              "lifetime_max_s: 3600    # a fault's whole life, across renewals",
              "max_active: 32          # faults held at once",
              "max_processes: 4        # processes one process fault may signal", ""]
    return "\n".join(lines)


def _agent_program() -> str:
    beside = Path(os.path.abspath(sys.executable)).parent / "gameday"
    return str(beside) if beside.exists() else (shutil.which("gameday") or "gameday")


def serve_command(setup: AgentSetup) -> list[str]:
    """The ``gameday agent serve`` command line that serves this setup."""
    directory = setup.directory.absolute()
    command = [_agent_program(), "agent", "serve", "--backend", "host",
               "--listen", setup.listen, "--node", setup.node,
               "--token-file", str(directory / "token"),
               "--state-dir", str(directory / "state"),
               "--policy", str(directory / "policy.yml")]
    if setup.tls:
        tls = directory / "tls"
        command += ["--tls-cert", str(tls / "agent.crt"), "--tls-key", str(tls / "agent.key"),
                    "--tls-client-ca", str(tls / "ca.crt")]
    return command


def check_command(setup: AgentSetup) -> list[str]:
    """``gameday agent policy --check`` of this setup's policy, given the files the agent
    serves with, so it refuses what ``agent serve`` would refuse at start."""
    serve = serve_command(setup)
    flags = dict(zip(serve[3::2], serve[4::2], strict=False))
    command = [serve[0], "agent", "policy", "--check", flags["--policy"]]
    for flag in ("--state-dir", "--token-file", "--tls-cert", "--tls-key", "--tls-client-ca"):
        if flag in flags:
            command += [flag, flags[flag]]
    return command


def agent_url(setup: AgentSetup) -> str:
    host = setup.host
    if host in ("0.0.0.0", "::"):
        host = setup.server_names[0] if setup.server_names else socket.gethostname()
    shown = f"[{host}]" if ":" in host else host
    return f"{'https' if setup.tls else 'http'}://{shown}:{setup.listen.rpartition(':')[2]}"


def orchestrator_settings(setup: AgentSetup) -> dict[str, str]:
    """The environment of the orchestrator (``gameday run --target host``) for this agent;
    the token as the command that reads it, not the token itself."""
    directory = setup.directory.absolute()
    settings = {"GAMEDAY_AGENT_URL": agent_url(setup),
                "GAMEDAY_AGENT_TOKEN": f"$(cat {shlex.quote(str(directory / 'token'))})"}
    if setup.tls:
        tls = directory / "tls"
        settings |= {"GAMEDAY_AGENT_CA": str(tls / "ca.crt"),
                     "GAMEDAY_AGENT_CLIENT_CERT": str(tls / "client.crt"),
                     "GAMEDAY_AGENT_CLIENT_KEY": str(tls / "client.key")}
    return settings


def unit_text(setup: AgentSetup) -> str:
    """A systemd unit that serves the agent and lets SIGTERM revert every fault."""
    return "\n".join([
        "[Unit]",
        f"Description=gameday fault agent (node {setup.node})",
        "Documentation=docs/host.md",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "ExecStart=" + shlex.join(serve_command(setup)),
        "# SIGTERM reverts every fault the agent holds, then it exits 0",
        "KillSignal=SIGTERM",
        "TimeoutStopSec=60",
        "Restart=on-failure",
        "RestartSec=2",
        "UMask=0077",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        ""])


def _pki(setup: AgentSetup) -> dict[str, bytes]:
    """A CA, the agent's certificate (for ``setup``'s host and server names) and a client
    certificate for the orchestrator, as PEM bytes by file name."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def build(subject: x509.Name, key: ec.EllipticCurvePrivateKey,
              issuer: x509.Name, issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool,
              extensions: Sequence[tuple[x509.ExtensionType, bool]] = ()) -> x509.Certificate:
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=_CERT_DAYS))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None),
                                  critical=True))
        for extension, critical in extensions:
            builder = builder.add_extension(extension, critical=critical)
        return builder.sign(issuer_key, hashes.SHA256())

    def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    def pem(cert: x509.Certificate) -> bytes:
        return cert.public_bytes(serialization.Encoding.PEM)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = name(f"gameday agent CA ({setup.node})")
    ca = build(ca_name, ca_key, ca_name, ca_key, ca=True)
    sans: list[x509.GeneralName] = []
    for entry in dict.fromkeys([*setup.server_names, setup.host, setup.node]):
        if entry in ("0.0.0.0", "::", ""):
            continue
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(entry)))
        except ValueError:
            sans.append(x509.DNSName(entry))
    agent_key = ec.generate_private_key(ec.SECP256R1())
    agent = build(name(f"gameday-agent {setup.node}"), agent_key, ca_name, ca_key, ca=False,
                  extensions=[(x509.SubjectAlternativeName(sans), False),
                              (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)])
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = build(name("gameday-orchestrator"), client_key, ca_name, ca_key, ca=False,
                   extensions=[(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
                                False)])
    return {"ca.crt": pem(ca), "agent.crt": pem(agent), "agent.key": pem_key(agent_key),
            "client.crt": pem(client), "client.key": pem_key(client_key)}


def _planned_files(setup: AgentSetup) -> list[Path]:
    directory = setup.directory
    planned = [directory / "token", directory / "policy.yml"]
    if setup.tls:
        planned += [directory / "tls" / f for f in _TLS_FILES]
    if setup.systemd:
        planned.append(directory / _UNIT)
    return planned


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` created with ``mode`` (never readable by others in
    between), replacing what is there."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(path, mode)


def write_setup(setup: AgentSetup) -> dict[str, Any]:
    """Write the setup's files; what was written and how to use it (the ``--output json``
    document). :class:`InvalidInput` (nothing written) for a bad request, existing files
    without ``force``, or a policy the agent would refuse."""
    _check_setup(setup)
    existing = [str(p) for p in _planned_files(setup) if p.exists()]
    if existing and not setup.force:
        raise InvalidInput(f"{existing[0]} exists; pass --force to replace the setup "
                           f"(a new token and keys)")
    policy = policy_text(setup)
    _check_policy_text(setup, policy)
    directory = setup.directory
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(directory, 0o700)
    (directory / "state").mkdir(exist_ok=True, mode=0o700)
    _write(directory / "token", (secrets.token_hex(32) + "\n").encode(), 0o600)
    _write(directory / "policy.yml", policy.encode(), 0o600)
    written = {"token": str(directory / "token"), "policy": str(directory / "policy.yml"),
               "state_dir": str(directory / "state")}
    if setup.tls:
        (directory / "tls").mkdir(exist_ok=True, mode=0o700)
        for filename, data in _pki(setup).items():
            _write(directory / "tls" / filename, data,
                   0o600 if filename.endswith(".key") else 0o644)
        written["tls_dir"] = str(directory / "tls")
    if setup.systemd:
        _write(directory / _UNIT, unit_text(setup).encode(), 0o644)
        written["systemd_unit"] = str(directory / _UNIT)
    return {"directory": str(directory.absolute()), "files": written,
            "kinds": list(setup.allowed_kinds()), "serve": serve_command(setup),
            "check": check_command(setup),
            "orchestrator": orchestrator_settings(setup), "exit_code": 0}


def _check_policy_text(setup: AgentSetup, text: str) -> None:
    """The policy as the agent will load it, checked as ``agent serve`` checks it at start
    (no allowed path may reach a lifeline of the agent: its state, token, keys, policy,
    interpreter and code), and each allowed path as a fault's would be."""
    import tempfile

    from gameday.agent.policy import load_policy
    from gameday.agent.serve import lifelines, serve_parser
    from gameday.errors import PolicyRefused

    with tempfile.TemporaryDirectory() as scratch:
        draft = Path(scratch) / "policy.yml"
        draft.write_text(text, encoding="utf-8")
        policy = load_policy(draft)
    served = serve_parser().parse_args(serve_command(setup)[3:])
    guarded = policy.protecting([setup.directory.absolute(), *lifelines(served)])
    reached = guarded.lifelines_allowed()
    if reached:
        raise InvalidInput(f"--allow-path would let a fault reach what the agent itself needs "
                           f"at run time, which it never faults: {'; '.join(reached)}")
    for path in setup.paths:
        try:
            guarded.check_path(path, "--allow-path")
        except PolicyRefused as exc:
            raise InvalidInput(str(exc)) from None


def init_parser() -> argparse.ArgumentParser:
    """The argument parser of ``gameday agent init``."""
    parser = argparse.ArgumentParser(
        prog="gameday agent init",
        description="Set up a host agent in DIR: a strong token, a default-deny policy "
                    "allowing what you name, optional mutual-TLS certificates and a "
                    "systemd unit; print how to serve it and how to reach it "
                    "(docs/host.md).",
        epilog="example:\n  gameday agent init /etc/gameday-agent --allow-process "
               "'mlserver start' --allow-path /srv/models",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", type=Path, metavar="DIR",
                        help="where to write the setup (created mode 0700)")
    parser.add_argument("--allow-process", action="append", default=[], metavar="REGEX",
                        help="a process whose command line matches (RE2) may be killed "
                             "or paused (repeatable)")
    parser.add_argument("--allow-process-name", action="append", default=[], metavar="NAME",
                        help="a process of this name (comm) may be killed or paused")
    parser.add_argument("--allow-path", action="append", default=[], metavar="PATH",
                        help="storage faults may be layered at or under PATH (repeatable)")
    parser.add_argument("--allow-link", action="append", default=[], metavar="NAME",
                        help="network faults may touch this interface (repeatable)")
    parser.add_argument("--kinds", default="", metavar="K,K",
                        help="exactly these fault kinds (default: those the allowed "
                             "targets make possible)")
    parser.add_argument("--listen", default="127.0.0.1:9410", metavar="HOST:PORT",
                        help="where the agent will serve (default 127.0.0.1:9410; a "
                             "non-loopback address needs --tls)")
    parser.add_argument("--node", default=socket.gethostname(), metavar="NAME",
                        help="the node name the agent reports (default: the host name)")
    parser.add_argument("--tls", action="store_true",
                        help="also write a CA and certificates for mutual TLS")
    parser.add_argument("--server-name", action="append", default=[], metavar="NAME",
                        help="a DNS name or IP the agent's certificate is valid for "
                             "(repeatable; default: the listen address and node name)")
    parser.add_argument("--systemd", action="store_true",
                        help="also write a systemd unit (gameday-agent.service)")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing setup (a new token and keys)")
    parser.add_argument("--output", choices=("text", "json"), default="text",
                        help="text for people (default), or one JSON document on stdout")
    return parser


def _setup_from(args: argparse.Namespace) -> AgentSetup:
    return AgentSetup(directory=args.directory, listen=args.listen, node=args.node,
                      process_patterns=tuple(args.allow_process),
                      process_names=tuple(args.allow_process_name),
                      paths=tuple(args.allow_path), links=tuple(args.allow_link),
                      kinds=tuple(k.strip() for k in args.kinds.split(",") if k.strip()),
                      tls=args.tls, server_names=tuple(args.server_name),
                      systemd=args.systemd, force=args.force)


def render(document: dict[str, Any]) -> str:
    """What ``gameday agent init`` prints for people."""
    files = document["files"]
    lines = [f"agent set up in {document['directory']}",
             f"  token     {files['token']} (256 bits, mode 0600)",
             f"  policy    {files['policy']} (default-deny; allows "
             f"{', '.join(document['kinds'])})",
             f"  state     {files['state_dir']}"]
    if "tls_dir" in files:
        lines.append(f"  tls       {files['tls_dir']}/ (CA, agent and orchestrator "
                     f"certificates; keys mode 0600)")
    if "systemd_unit" in files:
        lines.append(f"  systemd   {files['systemd_unit']} (install: cp it to "
                     f"/etc/systemd/system/ && systemctl enable --now gameday-agent)")
    lines += ["", "serve it (as root, on this host):", "  " + shlex.join(document["serve"]),
              "", "then, where you run experiments (gameday run EXP --target host):"]
    lines += [f"  export {key}={value if value.startswith('$(') else shlex.quote(value)}"
              for key, value in document["orchestrator"].items()]
    lines += ["", "check the policy after an edit (with the files the agent serves with):",
              "  " + shlex.join(document["check"])]
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    """``gameday agent init``: 0 and what to run next, or 2 and one line."""
    args = init_parser().parse_args(argv)
    try:
        document = write_setup(_setup_from(args))
    except GamedayError as exc:
        if args.output == "json":
            print(json.dumps({"error": str(exc), "exit_code": 2}))
        else:
            print(f"gameday agent init: {exc}", file=sys.stderr)
        return 2
    if args.output == "json":
        print(json.dumps(document, indent=2, sort_keys=True))
    else:
        print(render(document))
    return 0
