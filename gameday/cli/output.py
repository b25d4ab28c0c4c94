"""``--output text|json``: the machine-readable form of a command's result.

A command that takes ``--output json`` writes one JSON document on standard output
(its errors too, as ``{"error": ..., "exit_code": ...}``) and nothing else there, so a
script can ``json.load`` it whatever the exit code.
"""

import argparse
import json
from typing import Any, TextIO

FORMATS = ("text", "json")


def add_output_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--output text|json`` (default ``text``) to a command's parser."""
    parser.add_argument("--output", choices=FORMATS, default="text",
                        help="text for people (default), or one JSON document on stdout")


def emit(document: Any, stream: TextIO) -> None:
    """Write ``document`` to ``stream`` as indented JSON with sorted keys and a final
    newline."""
    json.dump(document, stream, indent=2, sort_keys=True, default=str)
    stream.write("\n")
    stream.flush()
