"""``--output json``: one machine-readable document per command, on standard output.

A command that takes ``--output`` (:func:`add_output_argument`) prints its document with
:func:`emit` instead of its text; errors are documents too (``{"error": ...}``), so a
script reads one JSON object whatever happened, and the exit code says the rest.
"""

import argparse
import json
from typing import Any, TextIO

__all__ = ["add_output_argument", "emit", "wants_json"]


def add_output_argument(parser: argparse.ArgumentParser) -> None:
    """``--output text|json`` (default text)."""
    parser.add_argument("--output", choices=("text", "json"), default="text",
                        help="text for people (default), or one JSON document on stdout")


def wants_json(args: argparse.Namespace) -> bool:
    """Whether the command was asked for ``--output json``."""
    return getattr(args, "output", None) == "json"


def emit(document: dict[str, Any], stream: TextIO) -> None:
    """Write ``document`` as one indented JSON object and a newline."""
    stream.write(json.dumps(document, indent=2, sort_keys=True, default=str) + "\n")
    stream.flush()
