"""``gameday halt``: the fleet's safety lever, thrown, released or read on every agent
gameday knows: the lab's, the target configuration's (``--target-config``), the host
agent of ``$GAMEDAY_AGENT_URL``, and, with ``--kubernetes`` (or ``$GAMEDAY_K8S_API_URL``
set), the lever's ConfigMap the agents of the cluster watch and the agents the API lists.

Exit codes: 0 when every agent (and the ConfigMap) answered and holds what was asked;
1 when some did not answer or refused (each listed); 2 when no agent is known.
``--serve-webhook ADDR`` serves an Alertmanager webhook receiver that engages the lever
(:mod:`gameday.safety.halt_webhook`).
"""

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gameday.cli.output import add_output_argument, emit, wants_json
from gameday.cli.parsers import command
from gameday.targets import agent_tls

if TYPE_CHECKING:
    from gameday.safety.halt import Action

__all__ = ["add_command", "run_halt"]


def add_command(commands: Any) -> None:
    """Add ``gameday halt`` to ``commands``."""
    halt = command(commands, "halt", "the safety lever: revert every fault on every known "
                   "agent and refuse new ones until released",
                   "gameday halt --reason 'checkout errors, INC-4411'\n"
                   "gameday halt --status --output json\ngameday halt --release")
    what = halt.add_mutually_exclusive_group()
    what.add_argument("--release", action="store_true", help="release the lever")
    what.add_argument("--status", action="store_true",
                      help="show the lever per agent (agents that do not answer included)")
    what.add_argument("--serve-webhook", metavar="ADDR",
                      help="serve an Alertmanager webhook receiver on HOST:PORT that "
                           "engages the lever when a route sends to it")
    halt.add_argument("--reason", default="", metavar="TEXT",
                      help="why (kept by every agent and shown with every refusal)")
    halt.add_argument("--target-config", type=Path, metavar="FILE",
                      help="agents of the target (default $GAMEDAY_TARGET_CONFIG)")
    halt.add_argument("--kubernetes", action="store_true",
                      help="also the cluster's lever ConfigMap (default: when "
                           "$GAMEDAY_K8S_API_URL is set)")
    for option, what_for in (("--tls-cert", "the webhook's certificate (PEM), for https"),
                             ("--tls-key", "its private key"),
                             ("--tls-client-ca", "require client certificates from this CA "
                                                 "(mutual TLS)")):
        halt.add_argument(option, metavar="FILE", help=what_for)
    halt.add_argument("--token-file", metavar="FILE",
                      help="the webhook's bearer token (Alertmanager's http_config "
                           "authorization credentials_file); required unless "
                           "--tls-client-ca")
    halt.add_argument("--insecure-plaintext", action="store_true",
                      help="serve the webhook over plain HTTP on a non-loopback address")
    add_output_argument(halt)
    agent_tls.add_arguments(halt)


def run_halt(args: argparse.Namespace) -> int:
    """Run ``gameday halt``; its exit code."""
    if args.serve_webhook:
        from gameday.safety.halt_webhook import serve_from_arguments

        return serve_from_arguments(args)
    from gameday.safety.halt import throw, uses_kubernetes, who  # the orchestrator's alone

    action: Action = "release" if args.release else "status" if args.status else "engage"
    document = throw(action, args.reason or f"gameday halt by {who()}", args.target_config,
                     kubernetes=uses_kubernetes(args.kubernetes))
    if wants_json(args):
        emit(document, sys.stdout)
    else:
        for line in document["lines"]:
            print(line)
    return int(document["exit_code"])
