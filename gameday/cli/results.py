"""``--metrics-file`` and ``--pushgateway`` of ``run``, ``play`` and ``gate``: the metrics
of results (``gameday.report.metrics``), published after each experiment.

A metrics file or push that fails is reported on stderr in one line and does not change
the run's exit code: the verdict is in the journal either way (docs/observability.md).
"""

import argparse
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from gameday.errors import InvalidInput, ObservabilityError

if TYPE_CHECKING:  # prometheus_client and the summaries load only when results are asked for
    from gameday.evidence.summary import JournalSummary
    from gameday.report.metrics import Pushgateway

#: The job label of pushed groups (``gameday.report.metrics.DEFAULT_JOB``'s value; not
#: imported from there, so that building the parser loads no metrics code).
DEFAULT_JOB = "gameday"

#: The environment variable that holds the Pushgateway password (not on the command line).
PASSWORD_ENV = "GAMEDAY_PUSHGATEWAY_PASSWORD"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the publishing options to a ``run``, ``play`` or ``gate`` parser."""
    group = parser.add_argument_group("metrics of results (docs/observability.md)")
    group.add_argument("--metrics-file", type=Path, metavar="PATH",
                       help="write RTO, RPO and verdicts in the Prometheus text format "
                            "(node_exporter textfile collector)")
    group.add_argument("--pushgateway", metavar="URL",
                       help="push them to this Prometheus Pushgateway after each experiment")
    group.add_argument("--pushgateway-job", default=DEFAULT_JOB, metavar="JOB",
                       help=f"the job label of the pushed group (default {DEFAULT_JOB})")
    group.add_argument("--pushgateway-user", metavar="USER",
                       help=f"basic auth user (password from ${PASSWORD_ENV})")
    group.add_argument("--pushgateway-cert", metavar="FILE", help="TLS client certificate")
    group.add_argument("--pushgateway-key", metavar="FILE", help="TLS client key")
    group.add_argument("--pushgateway-ca", metavar="FILE", help="CA bundle to verify it with")
    group.add_argument("--pushgateway-insecure", action="store_true",
                       help="do not verify the gateway's TLS certificate")


@dataclass
class ResultPublisher:
    """Publishes each finished experiment: rewrites the metrics file with every
    experiment so far and pushes the one that finished."""

    metrics_file: Path | None = None
    pushgateway: "Pushgateway | None" = None
    err: TextIO = sys.stderr
    summaries: "list[JournalSummary]" = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def publish(self, summary: "JournalSummary") -> None:
        from gameday.report.metrics import write_textfile

        self.summaries.append(summary)
        try:
            if self.metrics_file is not None:
                write_textfile(self.metrics_file, self.summaries)
            if self.pushgateway is not None:
                self.pushgateway.push(summary)
        except ObservabilityError as exc:
            self.failures.append(str(exc))
            print(f"gameday: metrics not published: {exc}", file=self.err)

    def publish_journal(self, journal_path: Path | None) -> None:
        """Publish the run whose journal is at ``journal_path`` (nothing if none)."""
        from gameday.evidence.summary import read_summary

        if journal_path is not None and journal_path.exists():
            self.publish(read_summary(journal_path))


def publisher(args: argparse.Namespace) -> ResultPublisher | None:
    """The publisher the options ask for, or None when neither option is given."""
    if args.metrics_file is None and args.pushgateway is None:
        return None
    from gameday.report.metrics import Pushgateway

    gateway = None
    if args.pushgateway is not None:
        if (args.pushgateway_cert is None) != (args.pushgateway_key is None):
            raise InvalidInput("--pushgateway-cert and --pushgateway-key go together",
                               path="--pushgateway-cert")
        if args.pushgateway_cert is None and (args.pushgateway_ca or args.pushgateway_insecure):
            raise InvalidInput("--pushgateway-ca and --pushgateway-insecure need a client "
                               "certificate (--pushgateway-cert and --pushgateway-key), as "
                               "prometheus_client's TLS handler does", path="--pushgateway-ca")
        gateway = Pushgateway(args.pushgateway, job=args.pushgateway_job,
                              username=args.pushgateway_user,
                              password=os.environ.get(PASSWORD_ENV),
                              certfile=args.pushgateway_cert, keyfile=args.pushgateway_key,
                              cafile=args.pushgateway_ca,
                              insecure_skip_verify=args.pushgateway_insecure)
    return ResultPublisher(metrics_file=args.metrics_file, pushgateway=gateway)

