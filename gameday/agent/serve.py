"""``gameday agent serve``: run one node's agent until SIGTERM or SIGINT (SIGHUP reopens
its audit file, as ``logrotate`` expects).

::

    gameday agent serve [--backend virtual|host|MODULE:FACTORY] [--listen HOST:PORT]
                        [--token-file F] [--state-dir D] [--node NAME]
                        [--tls-cert F --tls-key F [--tls-client-ca F]]
                        [--insecure-plaintext] [--policy FILE] [--audit-log F]
                        [--reconcile-kubernetes]
    gameday agent policy --check FILE

The tokens come from ``--token-file`` (one a line, re-read when the file changes; the
file must be mode 0600) or else ``$GAMEDAY_AGENT_TOKEN``; a weak token (under 256 bits,
:mod:`gameday.wire.tokens`) is refused. A non-loopback ``--listen`` needs TLS
(``--tls-cert``/``--tls-key``; ``--tls-client-ca`` for mutual TLS) unless
``--insecure-plaintext`` says otherwise. ``--policy`` is enforced by the agent
(:mod:`gameday.agent.policy`; the host backend refuses every target without one).
Every request is recorded in ``--audit-log`` (default ``D/audit-NAME.jsonl``). The backend is
a name from :data:`BACKENDS` or a ``module:callable`` spec; the callable is called as
``factory(node=NAME)`` and returns a :class:`gameday.contract.backend.Backend`. Active
faults are saved in ``D/agent-NAME.json``. Once serving, one line
``agent listening on URL`` goes to stdout (logs go to stderr, as JSON). A signal
reverts every fault (reason ``agent-shutdown``) and the command exits 0; errors are
one line on stderr and exit 2.
"""

import argparse
import contextlib
import importlib
import os
import pathlib
import re
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING, Final, cast

import structlog

from gameday.agent.audit import AuditTrail
from gameday.agent.policy import Policy, load_policy
from gameday.agent.server import AgentServer
from gameday.contract.backend import Backend
from gameday.errors import GamedayError, InvalidInput
from gameday.wire.listen import is_loopback, parse_listen
from gameday.wire.tls import ServerTLS
from gameday.wire.tokens import TokenSet, check_token

if TYPE_CHECKING:
    from gameday.agent.reconcile import NodeMarkReconciler

__all__ = ["BACKENDS", "TOKEN_ENV", "check_policy", "lifelines", "load_backend", "main",
           "parse_listen", "policy_parser", "serve_parser"]

#: Backend names accepted by ``--backend``, each a ``module:callable`` spec (imported
#: only when chosen). Add yours here or pass the spec itself.
BACKENDS: dict[str, str] = {
    "virtual": "gameday.lab.devices:virtual_backend",
    "host": "gameday.node.host.backend:host_backend",
}

#: Environment variable read for the token when ``--token-file`` is not given.
TOKEN_ENV: Final = "GAMEDAY_AGENT_TOKEN"

_SHUTDOWN_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)


def load_backend(spec: str, node: str) -> Backend:
    """Build the backend named by ``spec`` (a :data:`BACKENDS` name or ``module:callable``).

    Raises :class:`InvalidInput` (one line) when the spec cannot be resolved.
    """
    target = BACKENDS.get(spec, spec)
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise InvalidInput(f"--backend {spec!r} is neither one of "
                           f"{', '.join(sorted(BACKENDS))} nor a module:callable spec")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidInput(f"--backend {spec!r}: cannot import {module_name} ({exc})") from None
    factory: object = module
    for part in attr.split("."):
        try:
            factory = getattr(factory, part)
        except AttributeError:
            raise InvalidInput(f"--backend {spec!r}: {module_name} has no {attr}") from None
    if not callable(factory):
        raise InvalidInput(f"--backend {spec!r}: {target} is not callable")
    backend = factory(node=node)
    missing = [m for m in ("name", "inventory", "kinds", "apply", "revert")
               if not hasattr(backend, m)]
    if missing:
        raise InvalidInput(f"--backend {spec!r}: {target} returned {type(backend).__name__}, "
                           f"not a backend (missing {', '.join(missing)})")
    return cast(Backend, backend)


def _read_tokens(token_file: str | None) -> TokenSet:
    if token_file is not None:
        return TokenSet(path=pathlib.Path(token_file))
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise InvalidInput(f"no agent token: pass --token-file F or set {TOKEN_ENV}")
    return TokenSet([check_token(token, f"${TOKEN_ENV}")])


def _tls(args: argparse.Namespace, host: str) -> ServerTLS | None:
    if args.tls_cert or args.tls_key:
        if not (args.tls_cert and args.tls_key):
            raise InvalidInput("--tls-cert and --tls-key go together")
        ca = pathlib.Path(args.tls_client_ca) if args.tls_client_ca else None
        return ServerTLS(pathlib.Path(args.tls_cert), pathlib.Path(args.tls_key), ca)
    if args.tls_client_ca:
        raise InvalidInput("--tls-client-ca needs --tls-cert and --tls-key")
    if not is_loopback(host) and not args.insecure_plaintext:
        raise InvalidInput(f"--listen {args.listen} is not loopback: give --tls-cert and "
                           f"--tls-key (and --tls-client-ca), or --insecure-plaintext")
    return None


def lifelines(args: argparse.Namespace) -> list[pathlib.Path]:
    """The directories of everything the agent reads or writes at run time: its state
    directory, the audit file's, the token file's, the TLS certificate's, key's and
    client CA's, the policy file's (with its interpreter and code, which
    :meth:`Policy.never` adds, none may ever be faulted)."""
    state_dir = pathlib.Path(args.state_dir)
    files = [args.audit_log, args.token_file, args.tls_cert, args.tls_key,
             args.tls_client_ca, getattr(args, "policy", None)]
    return [state_dir, *(pathlib.Path(f).absolute().parent for f in files if f)]


def _deadline(seconds: float) -> float:
    if not 0.1 <= seconds <= 600:
        raise InvalidInput(f"--request-deadline {seconds:g}: must be between 0.1 and 600 s")
    return seconds


def _refuse_lifelines(policy: Policy, where: str) -> None:
    """:class:`InvalidInput` naming each ``paths`` entry of ``policy`` that would let a
    fault reach one of the agent's lifelines."""
    allowed = policy.lifelines_allowed()
    if allowed:
        raise InvalidInput(f"--policy {where}: paths would let a fault reach what the agent "
                           f"itself needs at run time: {'; '.join(allowed)}")


def _policy(args: argparse.Namespace, backend: Backend,
            protected: list[pathlib.Path]) -> Policy | None:
    policy = load_policy(pathlib.Path(args.policy)) if args.policy else None
    if policy is None:
        return None
    policy = policy.protecting(protected)
    _refuse_lifelines(policy, args.policy)
    use = getattr(backend, "use_policy", None)
    if callable(use):
        use(policy)
    return policy


def serve_parser() -> argparse.ArgumentParser:
    """The argument parser of ``gameday agent serve`` (also what the manifests are checked
    against)."""
    parser = argparse.ArgumentParser(
        prog="gameday agent serve",
        description="Run this node's fault agent (docs/agent-api.md) until a signal.",
        epilog="example:\n  GAMEDAY_AGENT_TOKEN=$(openssl rand -hex 32) gameday agent serve "
               "--backend host --listen 127.0.0.1:9410 --node $(hostname)",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="virtual",
                        help=f"{' | '.join(sorted(BACKENDS))} | module:callable "
                             "(default: virtual)")
    parser.add_argument("--listen", default="127.0.0.1:7777", metavar="HOST:PORT",
                        help="address to serve on; port 0 picks a free one "
                             "(default: 127.0.0.1:7777)")
    parser.add_argument("--token-file", metavar="F",
                        help=f"file holding the bearer token (default: ${TOKEN_ENV})")
    parser.add_argument("--state-dir", default=".gameday/agent", metavar="D",
                        help="where active faults are saved (default: .gameday/agent)")
    parser.add_argument("--node", default=socket.gethostname(), metavar="NAME",
                        help="node name reported by the agent (default: the host name)")
    parser.add_argument("--tls-cert", metavar="F", help="PEM certificate (chain) to serve")
    parser.add_argument("--tls-key", metavar="F", help="PEM private key of --tls-cert")
    parser.add_argument("--tls-client-ca", metavar="F",
                        help="PEM CA bundle: clients must present a certificate it signed")
    parser.add_argument("--insecure-plaintext", action="store_true",
                        help="serve plain HTTP on a non-loopback address (tokens then "
                             "cross the network in cleartext)")
    parser.add_argument("--policy", metavar="FILE",
                        help="what this agent may do (docs/agent-api.md, 'Policy')")
    parser.add_argument("--audit-log", metavar="F",
                        help="append-only JSON-lines audit trail (default: "
                             "D/audit-NAME.jsonl)")
    parser.add_argument("--request-deadline", type=float, default=10.0, metavar="S",
                        help="seconds a connection's TLS handshake and first request (and "
                             "a later request's head and body) may take; a silent "
                             "connection is closed then (default: 10)")
    parser.add_argument("--reconcile-kubernetes", action="store_true",
                        help="also undo expired gameday marks (cordon, taint) on this node "
                             "through the Kubernetes API (gameday/agent/reconcile.py)")
    return parser


def policy_parser() -> argparse.ArgumentParser:
    """The argument parser of ``gameday agent policy``."""
    parser = argparse.ArgumentParser(
        prog="gameday agent policy", description="Check an agent policy file.",
        epilog="example:\n  gameday agent policy --check gameday/lab/agent-policy.yml",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", metavar="FILE", required=True,
                        help="the policy file (YAML, or JSON if it ends in .json)")
    for flag, default in (("--state-dir", ".gameday/agent"), ("--token-file", None),
                          ("--tls-cert", None), ("--tls-key", None), ("--tls-client-ca", None),
                          ("--audit-log", None)):
        parser.add_argument(flag, default=default, metavar="F",
                            help="as gameday agent serve takes it: the policy must not let "
                                 "a fault reach it")
    return parser


def check_policy(argv: Sequence[str]) -> int:
    """``gameday agent policy --check FILE``: 0 and a summary when the policy is valid,
    2 and one line naming what is wrong otherwise."""
    parser = policy_parser()
    args = parser.parse_args(argv)
    args.policy = args.check
    try:
        policy = load_policy(pathlib.Path(args.check)).protecting(lifelines(args))
        _refuse_lifelines(policy, args.check)
    except GamedayError as exc:
        print(f"gameday agent policy: {exc}", file=sys.stderr)
        return 2
    print(f"{args.check}: valid; kinds {', '.join(sorted(policy.kinds)) or 'none'}; "
          f"paths {', '.join(policy.paths) or 'none'}; interfaces "
          f"{', '.join(sorted(policy.interfaces)) or 'none'}; lease <= {policy.lease_max_s:g} s, "
          f"lifetime <= {policy.lifetime_max_s:g} s, <= {policy.max_active} active, "
          f"<= {policy.max_processes} processes")
    return 0


def _configure_logging() -> None:
    if structlog.is_configured():
        return
    structlog.configure(
        processors=[structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso", utc=True),
                    structlog.processors.format_exc_info,
                    structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(20),  # INFO
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True)


def _reconciler(node: str) -> "NodeMarkReconciler":
    """The Kubernetes reconciler of ``node``; it needs the kubernetes extra, which an
    agent installed without it is told to install."""
    try:
        from gameday.agent.reconcile import reconciler_for

        return reconciler_for(node)
    except ModuleNotFoundError as exc:
        raise InvalidInput(f"--reconcile-kubernetes needs the Kubernetes client (no module "
                           f"named {exc.name!r}): pip install 'gameday[agent,kubernetes]'"
                           ) from None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the agent (or, as ``policy --check FILE``, check a policy); returns the exit
    status (0 after a signal, 2 on bad input)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["policy"]:
        return check_policy(argv[1:])
    args = serve_parser().parse_args(argv)
    _configure_logging()
    try:
        tokens = _read_tokens(args.token_file)
        host, port = parse_listen(args.listen)
        tls = _tls(args, host)
        backend = load_backend(args.backend, args.node)
        reconciler = _reconciler(args.node) if args.reconcile_kubernetes else None
        safe_node = re.sub(r"[^A-Za-z0-9._-]", "_", args.node)
        state_path = pathlib.Path(args.state_dir) / f"agent-{safe_node}.json"
        audit_path = pathlib.Path(args.audit_log or
                                  pathlib.Path(args.state_dir) / f"audit-{safe_node}.jsonl")
        policy = _policy(args, backend, [*lifelines(args), audit_path.absolute().parent])
        use_state_dir = getattr(backend, "use_state_dir", None)
        if callable(use_state_dir):  # before the registry reverts leftovers
            use_state_dir(pathlib.Path(args.state_dir))
        server = AgentServer(backend, token=tokens, state_path=state_path, node=args.node,
                             host=host, port=port, tls=tls, audit=AuditTrail(audit_path),
                             request_deadline_s=_deadline(args.request_deadline),
                             limits=policy.limits() if policy is not None else None)
        if reconciler is not None:
            reconciler.watch_lever(server.lever, server.audit)
    except GamedayError as exc:
        print(f"gameday agent serve: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"gameday agent serve: cannot listen on {args.listen} "
              f"({exc.strerror or exc})", file=sys.stderr)
        return 2

    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    def reopen_audit(signum: int, frame: FrameType | None) -> None:
        if server.audit is not None:  # logrotate's postrotate: kill -HUP
            with contextlib.suppress(OSError):
                server.audit.reopen()

    previous = {sig: signal.signal(sig, request_stop) for sig in _SHUTDOWN_SIGNALS}
    previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, reopen_audit)
    try:
        server.start()
        if reconciler is not None:
            reconciler.start()
        print(f"agent listening on {server.url}", flush=True)
        while not stop.wait(1.0):
            pass
    finally:
        if reconciler is not None:
            reconciler.stop()
        server.stop(revert=True)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
