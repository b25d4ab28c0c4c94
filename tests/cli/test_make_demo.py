"""``make demo`` finds the journal the flagship run wrote by a glob in the Makefile: that
glob must match the name ``gameday run`` gives a journal (it broke once when the run id
joined the name)."""

import fnmatch
import re
import uuid
from pathlib import Path

from gameday.engine.runner import _default_journal_path
from tests.conftest import REPO


def test_the_demo_finds_the_journal_the_flagship_run_writes() -> None:
    recipe = (REPO / "Makefile").read_text()
    [pattern] = re.findall(r"ls -t (journals/\S+\.json)", recipe)
    flagship = re.search(r"gameday run (experiments/\S+\.yaml)", recipe)
    assert flagship is not None and (REPO / flagship.group(1)).is_file()
    written = _default_journal_path(Path(flagship.group(1)), uuid.uuid4().hex[:12])
    assert fnmatch.fnmatch(f"journals/{written.name}", pattern), (written.name, pattern)
