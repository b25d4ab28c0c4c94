"""Where gameday keeps its state: ``$GAMEDAY_HOME`` (default ``./.gameday``)."""

import os
from pathlib import Path


def home() -> Path:
    return Path(os.environ.get("GAMEDAY_HOME", ".gameday")).absolute()


def lab_dir() -> Path:
    value = os.environ.get("GAMEDAY_LAB_DIR")
    return Path(value).absolute() if value else home() / "lab"


def ledger_path() -> Path:
    return home() / "ledger.jsonl"


def journals_dir() -> Path:
    return Path(os.environ.get("GAMEDAY_JOURNALS", "journals")).absolute()
