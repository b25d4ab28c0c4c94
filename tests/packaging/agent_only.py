"""An interpreter as an install of only the agent extra sees it: run as
``python -m tests.packaging.agent_only BLOCKED_JSON (cli ARGS... | import MODULE...)``.

Before anything of gameday is imported, a finder at the head of ``sys.meta_path`` refuses
every top-level module named in ``BLOCKED_JSON`` (a JSON list: what the agent extra does
not install), with the ``ModuleNotFoundError`` a missing package raises. ``cli`` then runs
``gameday ARGS`` in this interpreter and exits with its status; ``import`` imports each
module and exits 0.
"""

import importlib
import importlib.abc
import importlib.machinery
import json
import sys
from collections.abc import Sequence
from types import ModuleType


class Blocker(importlib.abc.MetaPathFinder):
    """Finds nothing for the modules it blocks, as if they were not installed."""

    def __init__(self, blocked: frozenset[str]) -> None:
        self.blocked = blocked

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.partition(".")[0] in self.blocked:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def main(argv: list[str]) -> int:
    blocked = frozenset(json.loads(argv[0]))
    loaded = blocked & {name.partition(".")[0] for name in sys.modules}
    if loaded:
        print(f"already imported at start-up: {sorted(loaded)}", file=sys.stderr)
        return 3
    sys.meta_path.insert(0, Blocker(blocked))
    mode, rest = argv[1], argv[2:]
    if mode == "cli":
        from gameday.cli.main import main as gameday_main

        return gameday_main(rest)
    for module in rest:
        importlib.import_module(module)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
